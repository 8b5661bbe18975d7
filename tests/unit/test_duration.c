/*
 * test_duration.c - the grammar of dlock_duration_parse(), the one parser
 * of durations (the dlock command and library option strings): valid rows
 * with the milliseconds they give, invalid rows with the status and the
 * part of the message that says what is wrong.
 */
#include "dlock.h"
#include "test.h"

#define SEC 1000LL
#define MIN (60 * SEC)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)

static const struct {
  const char *text;
  int64_t ms;
} valid[] = {
    {"0", 0},
    {"0s", 0},
    {"10", 10 * SEC}, /* a lone number counts seconds */
    {"0.25", 250},
    {"1.5", 1500},
    {"250ms", 250},
    {"10s", 10 * SEC},
    {"1.5s", 1500},
    {"0.001s", 1},
    {"5m", 5 * MIN},
    {"1h", HOUR},
    {"2d", 2 * DAY},
    {"0.5d", 12 * HOUR},
    {"1m30s", 90 * SEC}, /* Go's compounds */
    {"1h2m", 62 * MIN},
    {"1h2m3s4ms", HOUR + 2 * MIN + 3 * SEC + 4},
    {"1d12h", 36 * HOUR},
    {"1d0h0m0s0ms", DAY},
    {"1m0.5s", MIN + 500},
    {"1.5h30m", 2 * HOUR},
    {"500ms", 500},
    {"90m", 90 * MIN}, /* a unit need not be normalised */
    {"007s", 7 * SEC},
    {"30d", 30 * DAY}, /* the documented maximum */
    {"720h", 30 * DAY},
    {"29d23h59m59s999ms", 30 * DAY - 1},
    {"2592000", 30 * DAY},
    {"2592000000ms", 30 * DAY},
    {"0.00000125d", 108}, /* 8 digits of a day: 108 ms exactly */
};

static const struct {
  const char *text;
  int status;
  const char *why;
} invalid[] = {
    {"", DLOCK_EINVAL, "empty"},
    {"x", DLOCK_EINVAL, "expected a digit at 'x'"},
    {"s", DLOCK_EINVAL, "expected a digit"},
    {"-5s", DLOCK_EINVAL, "cannot be negative"},
    {"+5s", DLOCK_EINVAL, "expected a digit"},
    {" 5s", DLOCK_EINVAL, "no spaces"},
    {"5s ", DLOCK_EINVAL, "no spaces"},
    {"1h 2m", DLOCK_EINVAL, "no spaces allowed"},
    {"5 s", DLOCK_EINVAL, "unknown unit at ' s'"},
    {"5y", DLOCK_EINVAL, "unknown unit at 'y'"},
    {"5sec", DLOCK_EINVAL, "unknown unit at 'sec'"},
    {"5mx", DLOCK_EINVAL, "unknown unit at 'mx'"},
    {"5us", DLOCK_EINVAL, "unknown unit"},
    {"5S", DLOCK_EINVAL, "unknown unit"},
    {"1.", DLOCK_EINVAL, "a digit must follow the '.'"},
    {".5s", DLOCK_EINVAL, "expected a digit"},
    {"1..5s", DLOCK_EINVAL, "a digit must follow"},
    {"1.5ms", DLOCK_EINVAL, "'1.5ms' is not a whole number of milliseconds"},
    {"1m0.0001s", DLOCK_EINVAL, "'0.0001s' is not a whole number"},
    {"0.0001", DLOCK_EINVAL, "not a whole number"},
    {"1.0000000000s", DLOCK_EINVAL, "more than 9 digits"},
    {"0.123456789d", DLOCK_EINVAL, "not a whole number of milliseconds"},
    {"30s1m", DLOCK_EINVAL, "'m' after 's'"},
    {"1m1m", DLOCK_EINVAL, "'m' after 'm'"},
    {"1ms1s", DLOCK_EINVAL, "'s' after 'ms'"},
    {"1h30", DLOCK_EINVAL, "'30' has no unit"},
    {"10s5", DLOCK_EINVAL, "'5' has no unit"},
    {"31d", DLOCK_ERANGE, "longer than the maximum of 30 days"},
    {"30d1ms", DLOCK_ERANGE, "30 days"},
    {"721h", DLOCK_ERANGE, "30 days"},
    {"2592001", DLOCK_ERANGE, "30 days"},
    {"2592000001ms", DLOCK_ERANGE, "30 days"},
    {"99999999999999999999999s", DLOCK_ERANGE, "30 days"},
    {"9223372036854775807ms", DLOCK_ERANGE, "30 days"},
    {"29d24h1ms", DLOCK_ERANGE, "30 days"},
    {"1d99999999999999999999h", DLOCK_ERANGE, "30 days"},
};

TEST(valid_durations_give_their_milliseconds) {
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    int64_t ms = -42;
    int rc = dlock_duration_parse(valid[i].text, &ms);
    if (rc != 0) TEST_FAIL("'%s': %s (%s)", valid[i].text, dlock_err_name(rc), dlock_last_error());
    if (ms != valid[i].ms)
      TEST_FAIL("'%s' gave %lld ms, want %lld", valid[i].text, (long long)ms, (long long)valid[i].ms);
    ASSERT_STR_EQ(dlock_last_error(), "");
  }
}

TEST(invalid_durations_are_refused_saying_why) {
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    int64_t ms = -42;
    int rc = dlock_duration_parse(invalid[i].text, &ms);
    if (rc != invalid[i].status)
      TEST_FAIL("'%s' returned %s (%s), want %s", invalid[i].text, dlock_err_name(rc), dlock_last_error(),
                dlock_err_name(invalid[i].status));
    ASSERT_EQ(ms, -42); /* untouched on failure */
    char want[128];
    snprintf(want, sizeof want, "bad duration '%s'", invalid[i].text);
    ASSERT_CONTAINS(dlock_last_error(), want);
    ASSERT_CONTAINS(dlock_last_error(), invalid[i].why);
  }
}

TEST(null_arguments_are_einval) {
  int64_t ms;
  ASSERT_STATUS(dlock_duration_parse(NULL, &ms), DLOCK_EINVAL);
  ASSERT_STATUS(dlock_duration_parse("1s", NULL), DLOCK_EINVAL);
}

/* Every whole number of milliseconds up to the maximum reads back from
 * its compound spelling: a sweep over values that exercise each unit. */
TEST(compound_spellings_round_trip) {
  static const int64_t samples[] = {1,
                                    999,
                                    1000,
                                    59999,
                                    60000,
                                    3599999,
                                    3600000,
                                    86399999,
                                    86400000,
                                    DLOCK_MAX_DURATION_MS - 1,
                                    DLOCK_MAX_DURATION_MS};
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    int64_t v = samples[i];
    char text[64];
    snprintf(text, sizeof text, "%lldd%lldh%lldm%llds%lldms", (long long)(v / DAY), (long long)(v % DAY / HOUR),
             (long long)(v % HOUR / MIN), (long long)(v % MIN / SEC), (long long)(v % SEC));
    int64_t ms = -1;
    ASSERT_OK(dlock_duration_parse(text, &ms));
    if (ms != v) TEST_FAIL("'%s' gave %lld, want %lld", text, (long long)ms, (long long)v);
  }
}

TEST_MAIN()
