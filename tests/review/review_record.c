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
  cli(out, sizeof out, "%s", "SET {rr:c}:fence '99999999999999999|'");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) == UINT64_C(100000000000000000));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST_MAIN()
