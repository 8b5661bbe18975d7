/*
 * test_fence_parse.c - fencing tokens read from Redis replies are parsed
 * exactly as integers in 0..2^63-1: no rounding, no silent overflow, no
 * sign, spaces, exponents or leading zeros.
 */
#include "dlock.h"
#include "internal.h"
#include "test.h"

static int parse(const char *s, uint64_t *v) { return dlock__parse_fence(s, strlen(s), v); }

TEST(fences_up_to_2_63_minus_1_parse_exactly) {
  static const struct {
    const char *s;
    uint64_t v;
  } ok[] = {
      {"0", 0},
      {"1", 1},
      {"1763900000000000", 1763900000000000ULL},
      {"9007199254740993", 9007199254740993ULL}, /* 2^53 + 1: not a double */
      {"9223372036854775806", 9223372036854775806ULL},
      {"9223372036854775807", 9223372036854775807ULL},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t v = 1234;
    if (parse(ok[i].s, &v) != 0) TEST_FAIL("'%s' refused", ok[i].s);
    if (v != ok[i].v) TEST_FAIL("'%s' parsed as %" PRIu64, ok[i].s, v);
  }
}

TEST(anything_else_is_refused_and_leaves_the_output_alone) {
  static const char *const bad[] = {"",
                                    "-5",
                                    "+5",
                                    " 5",
                                    "5 ",
                                    "007",
                                    "00",
                                    "1e20",
                                    "inf",
                                    "nan",
                                    "0x10",
                                    "5.0",
                                    "abc",
                                    "9223372036854775808",
                                    "18446744073709551615",
                                    "18446744073709551616",
                                    "99999999999999999999",
                                    "100000000000000000000"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t v = 1234;
    if (parse(bad[i], &v) == 0) TEST_FAIL("'%s' accepted as %" PRIu64, bad[i], v);
    ASSERT_EQ(v, 1234);
  }
  uint64_t v = 0;
  ASSERT(dlock__parse_fence("12|34", 2, &v) == 0 && v == 12); /* length-bounded */
  ASSERT(dlock__parse_fence(NULL, 0, &v) != 0);
}

TEST_MAIN()
