/*
 * review_record.c - the adversarial review of 29bda51 (a mutex hold's
 * record "fence|since|token|owner info" in {K}:fence instead of {K}:meta);
 * branch rev4. A test named review_finding_* failed on the code as
 * reviewed; the others pin down what was checked and held. Real
 * redis-server processes through harness.h, public API only (dlock.h).
 * Registered as ctest "review/review_record" with the label "review".
 */
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

static void cli(char *out, size_t n, const char *fmt, const char *arg) { th_redis_cli(&srv, out, n, fmt, arg); }

static void count_name(const char *name, void *arg) {
  (void)name;
  (*(int *)arg)++;
}

/* Finding 1: dlock list keeps a name when its pipelined EXISTS answers 1
 * (keep_held, src/redis/admin.c) and drops it on any other reply, errors
 * included: a user whose ACL denies EXISTS (or a node answering -ASK,
 * -TRYAGAIN, -LOADING) gets an empty list and success, not the error. */
TEST(review_finding_1_list_reports_an_error_reply_of_its_exists) {
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
TEST(corrupt_and_record_shaped_counters) {
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
TEST(review_finding_2_an_overlap_claim_keeps_a_live_holds_record) {
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
