/*
 * test_fence.c - fencing tokens that cannot repeat: whatever the fence counter
 * holds (1e20, inf, -5, "abc", 2^53, 2^63-1, 2^63, 2^64-1, just below 2^63-1),
 * an acquisition either gets a token strictly above every earlier one or
 * fails with DLOCK_EFENCE naming the key; the same for hand-offs, the
 * scheduler and lock status; and the guard admits no repeated or wrapped
 * token and no corrupt recorded value.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static void reset(const char *name) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DEL %s {%s}:fence", name, name);
  th_redis_cli(&srv, out, sizeof out, "DEL {%s}:meta {%s}:queue {%s}:waiters", name, name, name);
}

static void set_counter(const char *name, const char *value) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "SET {%s}:fence %s", name, value);
  ASSERT_STR_EQ(out, "OK");
}

/* A fresh lock's first fence (the clock floor), after a full acquire/release. */
static uint64_t baseline(dlock_mutex *m) {
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t f = dlock_mutex_fence(m);
  ASSERT(f > 0);
  ASSERT_OK(dlock_mutex_release(m));
  return f;
}

/* Counters that are not an integer in 0..2^63-2: every acquisition fails
 * with DLOCK_EFENCE naming the counter key, and nothing is written. */
static void check_refused(dlock_client *c, const char *value) {
  const char *name = "fx:bad";
  reset(name);
  dlock_mutex *m = test_mutex(c, name, 10000);
  baseline(m);
  set_counter(name, value);
  for (int i = 0; i < 2; i++) {
    int rc = dlock_mutex_acquire(m, 0);
    if (rc != DLOCK_EFENCE)
      TEST_FAIL("counter '%s': acquire #%d returned %s (fence %" PRIu64 "), want DLOCK_EFENCE: %s", value, i + 1,
                dlock_err_name(rc), dlock_mutex_fence(m), dlock_last_error());
    ASSERT_CONTAINS(dlock_last_error(), "{fx:bad}:fence");
    ASSERT_CONTAINS(dlock_mutex_errmsg(m), "{fx:bad}:fence");
    ASSERT_EQ(dlock_mutex_fence(m), 0);
  }
  char out[128];
  th_redis_cli(&srv, out, sizeof out, "EXISTS %s {%s}:meta", name, name);
  ASSERT_STR_EQ(out, "0"); /* refused before any write */
  th_redis_cli(&srv, out, sizeof out, "GET {%s}:fence", name);
  ASSERT_STR_EQ(out, value); /* left alone */
  /* Status reports it too, instead of a wrong number; 2^63-1 is a fence
   * dlock may have issued (the last one), so status shows it. */
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (!strcmp(value, "9223372036854775807")) {
    ASSERT_OK(dlock_lock_info_get(c, name, &info));
    ASSERT_EQ(info.fence == 9223372036854775807ULL, 1);
  } else {
    ASSERT_STATUS(dlock_lock_info_get(c, name, &info), DLOCK_EFENCE);
    ASSERT_CONTAINS(dlock_last_error(), "{fx:bad}:fence");
  }
  dlock_mutex_free(m);
}

TEST(a_counter_that_is_no_integer_below_2_63_minus_1_is_refused_with_efence) {
  dlock_client *c = test_client(srv.url);
  static const char *const bad[] = {"1e20",
                                    "inf",
                                    "-5",
                                    "abc",
                                    "9223372036854775807" /* 2^63-1: exhausted */,
                                    "9223372036854775808" /* 2^63 */,
                                    "18446744073709551615",
                                    "99999999999999999999",
                                    "007",
                                    "5.0",
                                    "0x10",
                                    "0000000000000000007" /* 19 digits, leading zeros */};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    printf("  counter %s\n", bad[i]);
    check_refused(c, bad[i]);
  }
  dlock_client_free(c);
}

/* Counters at or above the clock floor: the next fences are exactly +1, +2. */
static void check_exact(dlock_client *c, const char *value, uint64_t want1, int second_ok) {
  const char *name = "fx:big";
  reset(name);
  dlock_mutex *a = test_mutex(c, name, 10000), *b = test_mutex(c, name, 10000);
  uint64_t f0 = baseline(a);
  set_counter(name, value);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t f1 = dlock_mutex_fence(a);
  if (f1 != want1) TEST_FAIL("counter %s: fence %" PRIu64 ", want %" PRIu64, value, f1, want1);
  ASSERT(f1 > f0);
  char out[256], want[32];
  snprintf(want, sizeof want, "%" PRIu64, f1);
  /* The counter holds the hold's record, "fence|since|token|owner info". */
  th_redis_cli(&srv, out, sizeof out, "GET {%s}:fence", name);
  char *bar = strchr(out, '|');
  if (!bar) TEST_FAIL("counter %s after the acquire: '%s', want the hold's record", value, out);
  *bar = '\0';
  ASSERT_STR_EQ(out, want);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, name, &info));
  ASSERT_EQ(info.fence == f1, 1);
  /* The guard admits the holder. */
  ASSERT_OK(dlock_guard_check(c, "fx:store", f1));
  ASSERT_OK(dlock_mutex_release(a));
  int rc = dlock_mutex_acquire(b, 0);
  if (second_ok) {
    ASSERT_OK(rc);
    uint64_t f2 = dlock_mutex_fence(b);
    if (f2 != f1 + 1) TEST_FAIL("counter %s: second fence %" PRIu64 ", want %" PRIu64, value, f2, f1 + 1);
    ASSERT_OK(dlock_guard_check(c, "fx:store", f2));
    /* The first holder, now a zombie, is rejected. */
    ASSERT_STATUS(dlock_guard_check(c, "fx:store", f1), DLOCK_ESTALE);
    ASSERT_OK(dlock_mutex_release(b));
  } else {
    /* The counter reached 2^63-1: no higher fence exists. */
    ASSERT_STATUS(rc, DLOCK_EFENCE);
    ASSERT_CONTAINS(dlock_last_error(), "{fx:big}:fence");
    ASSERT_EQ(dlock_mutex_fence(b), 0);
  }
  /* Done with the guard resource of this case. */
  th_redis_cli(&srv, out, sizeof out, "DEL {fx:store}:guard");
  dlock_mutex_free(a);
  dlock_mutex_free(b);
}

TEST(counters_beyond_2_53_rise_exactly_by_one) {
  dlock_client *c = test_client(srv.url);
  check_exact(c, "9007199254740992", 9007199254740993ULL, 1);       /* 2^53 */
  check_exact(c, "9007199254740993", 9007199254740994ULL, 1);       /* 2^53 + 1 */
  check_exact(c, "99999999999999999", 100000000000000000ULL, 1);    /* carries */
  check_exact(c, "4611686018427387903", 4611686018427387904ULL, 1); /* 2^62 - 1 */
  check_exact(c, "9223372036854775805", 9223372036854775806ULL, 1); /* up to 2^63 - 1 */
  check_exact(c, "9223372036854775806", 9223372036854775807ULL, 0); /* just below 2^63-1: last one */
  dlock_client_free(c);
}

TEST(a_counter_below_the_clock_floor_gives_the_clock_and_a_valid_zero_is_accepted) {
  dlock_client *c = test_client(srv.url);
  const char *name = "fx:low";
  reset(name);
  dlock_mutex *m = test_mutex(c, name, 10000);
  uint64_t f0 = baseline(m);
  static const char *const low[] = {"0", "5", "1000000000000000" /* 10^15, below 2026's microseconds */};
  uint64_t last = f0;
  for (size_t i = 0; i < 3; i++) {
    set_counter(name, low[i]);
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    uint64_t f = dlock_mutex_fence(m);
    ASSERT(f > last);
    ASSERT(f > 1700000000000000ULL); /* the server clock in microseconds */
    last = f;
    ASSERT_OK(dlock_mutex_release(m));
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(many_successive_acquisitions_from_2_53_never_repeat_a_fence) {
  dlock_client *c = test_client(srv.url);
  const char *name = "fx:many";
  reset(name);
  dlock_mutex *m = test_mutex(c, name, 10000);
  set_counter(name, "9007199254740990");
  uint64_t prev = 0;
  for (int i = 0; i < 50; i++) {
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    uint64_t f = dlock_mutex_fence(m);
    if (prev && f != prev + 1) TEST_FAIL("acquisition %d: fence %" PRIu64 " after %" PRIu64, i, f, prev);
    prev = f;
    ASSERT_OK(dlock_mutex_release(m));
  }
  ASSERT_EQ(prev == 9007199254740990ULL + 50, 1);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A hand-off (release to a queued waiter) issues the fence inside the
 * release script and sends it in the wake-up message. */
TEST(a_hand_off_beyond_2_53_carries_the_exact_fence) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  const char *name = "fx:handoff";
  reset(name);
  dlock_mutex *a = test_mutex(c1, name, 10000), *b = test_mutex(c2, name, 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  set_counter(name, "9007199254740992");
  th_waiter w = {.m = b, .wait_ms = 10000};
  pthread_t t;
  pthread_create(&t, NULL, th_wait_for_lock, &w);
  char out[64];
  for (int i = 0; i < 200; i++) { /* wait until b is queued */
    th_redis_cli(&srv, out, sizeof out, "ZCARD {%s}:queue", name);
    if (strcmp(out, "0") != 0) break;
    th_sleep_ms(10);
  }
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(a));
  pthread_join(t, NULL);
  ASSERT_OK(w.rc);
  if (w.fence != 9007199254740993ULL) TEST_FAIL("hand-off fence %" PRIu64 ", want 9007199254740993", w.fence);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

TEST(a_release_with_a_corrupt_counter_succeeds_and_the_waiter_gets_efence) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  const char *name = "fx:handbad";
  reset(name);
  dlock_mutex *a = test_mutex(c1, name, 10000), *b = test_mutex(c2, name, 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  set_counter(name, "1e20");
  th_waiter w = {.m = b, .wait_ms = 8000};
  pthread_t t;
  pthread_create(&t, NULL, th_wait_for_lock, &w);
  char out[64];
  for (int i = 0; i < 200; i++) {
    th_redis_cli(&srv, out, sizeof out, "ZCARD {%s}:queue", name);
    if (strcmp(out, "0") != 0) break;
    th_sleep_ms(10);
  }
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(a)); /* the release itself worked */
  pthread_join(t, NULL);
  if (w.rc != DLOCK_EFENCE)
    TEST_FAIL("waiter: %s (fence %" PRIu64 "), want DLOCK_EFENCE: %s", dlock_err_name(w.rc), w.fence,
              dlock_mutex_errmsg(b));
  ASSERT_CONTAINS(dlock_mutex_errmsg(b), "{fx:handbad}:fence");
  th_redis_cli(&srv, out, sizeof out, "EXISTS %s", name);
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

/* ---- The guard ---- */

TEST(the_guard_refuses_tokens_above_2_63_minus_1_and_corrupt_recorded_values) {
  dlock_client *c = test_client(srv.url);
  char out[128];
  th_redis_cli(&srv, out, sizeof out, "DEL {fx:g}:guard");
  /* The wrapped token of the old double arithmetic, and beyond. */
  ASSERT_STATUS(dlock_guard_check(c, "fx:g", 9223372036854775808ULL), DLOCK_ERANGE);
  ASSERT_CONTAINS(dlock_last_error(), "9223372036854775808");
  ASSERT_STATUS(dlock_guard_check(c, "fx:g", UINT64_MAX), DLOCK_ERANGE);
  th_redis_cli(&srv, out, sizeof out, "EXISTS {fx:g}:guard");
  ASSERT_STR_EQ(out, "0");
  ASSERT_OK(dlock_guard_check(c, "fx:g", 9223372036854775806ULL));
  ASSERT_OK(dlock_guard_check(c, "fx:g", 9223372036854775807ULL));
  ASSERT_STATUS(dlock_guard_check(c, "fx:g", 9223372036854775806ULL), DLOCK_ESTALE);
  static const char *const bad[] = {
      "1e20", "inf", "-5", "abc", "9223372036854775808", "18446744073709551615", "007", "0000000000000000007", "99999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int valid = !strcmp(bad[i], "99999");
    th_redis_cli(&srv, out, sizeof out, "SET {fx:g}:guard %s", bad[i]);
    int rc = dlock_guard_check(c, "fx:g", 123456);
    if (valid) {
      ASSERT_OK(rc);
      continue;
    }
    if (rc != DLOCK_EFENCE)
      TEST_FAIL("recorded '%s': guard returned %s, want DLOCK_EFENCE: %s", bad[i], dlock_err_name(rc),
                dlock_last_error());
    ASSERT_CONTAINS(dlock_last_error(), "{fx:g}:guard");
    th_redis_cli(&srv, out, sizeof out, "GET {fx:g}:guard");
    ASSERT_STR_EQ(out, bad[i]); /* left alone */
  }
  dlock_client_free(c);
}

/* The old arithmetic gave every holder 2^63 once the counter passed 2^63;
 * the guard then admitted all of them. */
TEST(two_holders_never_pass_the_guard_with_a_repeated_token) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  static const char *const start[] = {"9007199254740992", "1e20", "9223372036854775806", "18446744073709551615"};
  for (size_t i = 0; i < 4; i++) {
    const char *name = "fx:two";
    char out[64];
    reset(name);
    th_redis_cli(&srv, out, sizeof out, "DEL {fx:two-store}:guard");
    dlock_mutex *a = test_mutex(c1, name, 10000), *b = test_mutex(c2, name, 10000);
    set_counter(name, start[i]);
    int admitted = 0;
    uint64_t fa = 0, fb = 0;
    if (dlock_mutex_acquire(a, 0) == 0) {
      fa = dlock_mutex_fence(a);
      admitted += dlock_guard_check(c1, "fx:two-store", fa) == 0;
      ASSERT_OK(dlock_mutex_release(a));
    }
    if (dlock_mutex_acquire(b, 0) == 0) {
      fb = dlock_mutex_fence(b);
      admitted += dlock_guard_check(c2, "fx:two-store", fb) == 0;
      ASSERT_OK(dlock_mutex_release(b));
    }
    /* a, a zombie now, writes again. */
    int zombie = fa ? dlock_guard_check(c1, "fx:two-store", fa) : DLOCK_ESTALE;
    if (fa && fb) {
      if (fb <= fa) TEST_FAIL("counter %s: fences %" PRIu64 " then %" PRIu64, start[i], fa, fb);
      if (zombie == 0)
        TEST_FAIL("counter %s: the guard admitted the zombie's %" PRIu64 " after %" PRIu64, start[i], fa, fb);
    }
    (void)admitted;
    dlock_mutex_free(a);
    dlock_mutex_free(b);
  }
  dlock_client_free(c1);
  dlock_client_free(c2);
}

/* ---- The scheduler ---- */

typedef struct sched_seen {
  atomic_int ran, efence, other_errors;
  atomic_ullong first_fence, last_fence;
  char message[512];
  pthread_mutex_t mu;
} sched_seen;

static void on_event(const dlock_sched_event *ev, void *arg) {
  sched_seen *k = arg;
  if (ev->kind == DLOCK_SCHED_RAN) {
    atomic_fetch_add(&k->ran, 1);
    unsigned long long zero = 0;
    atomic_compare_exchange_strong(&k->first_fence, &zero, ev->fence);
    atomic_store(&k->last_fence, ev->fence);
  } else if (ev->kind == DLOCK_SCHED_ERROR) {
    atomic_fetch_add(ev->status == DLOCK_EFENCE ? &k->efence : &k->other_errors, 1);
    pthread_mutex_lock(&k->mu);
    snprintf(k->message, sizeof k->message, "%s", ev->message);
    pthread_mutex_unlock(&k->mu);
  }
}

static int job(const dlock_tick *t, void *arg) {
  (void)t;
  (void)arg;
  return 0;
}

static void run_sched(dlock_client *c, int overlap, sched_seen *k) {
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = on_event;
  so.on_event_arg = k;
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.allow_overlap = overlap;
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, &so));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "fx:job", 300, &jo, job, NULL));
  ASSERT_OK(dlock_sched_start(s));
  th_sleep_ms(1500);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
}

TEST(scheduled_runs_get_exact_fences_or_efence_naming_the_counter) {
  dlock_client *c = test_client(srv.url);
  for (int overlap = 0; overlap < 2; overlap++) {
    sched_seen k = {0};
    pthread_mutex_init(&k.mu, NULL);
    reset("fx:job");
    set_counter("fx:job", "9007199254740992");
    run_sched(c, overlap, &k);
    ASSERT(atomic_load(&k.ran) >= 2);
    ASSERT_EQ(atomic_load(&k.efence) + atomic_load(&k.other_errors), 0);
    ASSERT_EQ(atomic_load(&k.first_fence) == 9007199254740993ULL, 1);
    ASSERT_EQ(atomic_load(&k.last_fence) == 9007199254740992ULL + (unsigned)atomic_load(&k.ran), 1);

    sched_seen bad = {0};
    pthread_mutex_init(&bad.mu, NULL);
    set_counter("fx:job", "1e20");
    run_sched(c, overlap, &bad);
    ASSERT_EQ(atomic_load(&bad.ran), 0);
    ASSERT(atomic_load(&bad.efence) >= 2);
    ASSERT_EQ(atomic_load(&bad.other_errors), 0);
    ASSERT_CONTAINS(bad.message, "{fx:job}:fence");
    char out[64];
    th_redis_cli(&srv, out, sizeof out, "EXISTS fx:job");
    ASSERT_STR_EQ(out, "0"); /* no job lock left behind */
    pthread_mutex_destroy(&k.mu);
    pthread_mutex_destroy(&bad.mu);
  }
  dlock_client_free(c);
}

/* ---- The review of 29bda51 (a mutex hold's record "fence|since|token|owner
 * info" in {K}:fence instead of {K}:meta; branch rev4). A test named
 * review_finding_* failed on the code as reviewed; the others pin down what
 * was checked and held (labels review: ctest review/test_fence). ---- */

static void cli(char *out, size_t n, const char *fmt, const char *arg) { th_redis_cli(&srv, out, n, fmt, arg); }

static void count_name(const char *name, void *arg) {
  (void)name;
  (*(int *)arg)++;
}

/* Finding 1: dlock list keeps a name when its pipelined EXISTS answers 1
 * (keep_held, src/redis/admin.c) and drops it on any other reply, errors
 * included: a user whose ACL denies EXISTS (or a node answering -ASK,
 * -TRYAGAIN, -LOADING) gets an empty list and success, not the error. */
/* Review of 29bda51 (branch rev4), finding 1. */
REVIEW_TEST(review_finding_1_list_reports_an_error_reply_of_its_exists) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "rr:list", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[256];
  cli(out, sizeof out, "%s", "ACL SETUSER lister on '>listerpw' '~*' '&*' +@all -exists");
  ASSERT_STR_EQ(out, "OK");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.username = "lister";
  o.password = "listerpw";
  dlock_client *l = NULL;
  ASSERT_OK(dlock_client_new(&l, &o));
  int n = 0;
  int rc = dlock_lock_list(l, "rr:*", count_name, &n);
  dlock_client_free(l);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  if (rc >= 0) TEST_FAIL("list answered %d name(s) (%d called back) and no error, though EXISTS was refused", rc, n);
  ASSERT_STATUS(rc, DLOCK_ENOPERM);
}

/* Checked: a counter "5|" (a fence and a bar) counts as fence 5, "|" and a
 * record at 2^63-1 are refused with nothing written; the lost-reply path
 * (a second acquire of the same hold) returns the recorded fence. */
/* Review of 29bda51 (branch rev4): what held. */
REVIEW_TEST(corrupt_and_record_shaped_counters) {
  dlock_client *c = test_client(srv.url);
  char out[512];
  dlock_mutex *m = test_mutex(c, "rr:c", 30000);
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '|'");
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFENCE);
  cli(out, sizeof out, "%s", "GET '{rr:c}:fence'");
  ASSERT_STR_EQ(out, "|");
  cli(out, sizeof out, "%s", "EXISTS rr:c");
  ASSERT_STR_EQ(out, "0");
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '9223372036854775807|1|ab|x'");
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFENCE);
  cli(out, sizeof out, "%s", "GET '{rr:c}:fence'");
  ASSERT_STR_EQ(out, "9223372036854775807|1|ab|x");
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '9223372036854775806|1|ab|x'");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) == UINT64_C(9223372036854775807));
  ASSERT_OK(dlock_mutex_release(m));
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '05|x'");
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFENCE);
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '5|junk'");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > 5);
  ASSERT_OK(dlock_mutex_release(m));
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '99999999999999999|'");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) == UINT64_C(100000000000000000));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static int overlap_job(const dlock_tick *tick, void *arg) {
  (void)tick;
  (*(volatile int *)arg)++;
  return 0;
}

/* Finding 2: a fence issued while a mutex hold is live overwrites the
 * hold's record with a bare fence. A scheduled job with allow_overlap
 * (sched_claim.lua, ARGV[5] '1') issues fences under its name without
 * taking the job lock, so a mutex of that name held meanwhile (dlock run
 * JOB, or a node still running the job without overlap during a rolling
 * change) loses its record: status shows the hold as foreign, with no fence
 * or owner, a forced release refuses it (DLOCK_EFOREIGN), and a resent
 * acquire or claim of that hold gets fence 0 (DLOCK_EFENCE, given back).
 * Before 29bda51 the hold's {K}:meta was not touched by such a claim. */
/* Review of 29bda51 (branch rev4), finding 2. */
REVIEW_TEST(review_finding_2_an_overlap_claim_keeps_a_live_holds_record) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  mo.owner_info = "the holder";
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "rr:job", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t fence = dlock_mutex_fence(m);
  volatile int ran = 0;
  dlock_sched *s = NULL;
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.allow_overlap = 1;
  ASSERT_OK(dlock_sched_new(&s, c, NULL));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "rr:job", 100, &jo, overlap_job, (void *)&ran));
  ASSERT_OK(dlock_sched_start(s));
  for (int i = 0; i < 100 && ran < 2; i++) th_sleep_ms(20);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
  ASSERT(ran >= 2);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "rr:job", &info));
  ASSERT_EQ(info.held, 1);
  if (info.foreign) TEST_FAIL("the live dlock hold of rr:job shows as foreign after overlap claims");
  ASSERT(info.fence == fence);
  ASSERT_STR_EQ(info.owner_info, "the holder");
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(c, "rr:job", &was));
  ASSERT_EQ(was, 1);
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD); /* deleted by the forced release */
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST_MAIN()
