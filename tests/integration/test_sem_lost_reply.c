/*
 * test_sem_lost_reply.c - the semaphore's scripts with their reply lost
 * after the server ran them (the fault proxy forwards the command, waits for
 * the reply, drops it and closes the connection): each is sent once more
 * and the outcome is exact (docs/design.md, "Lost replies"): one permit, not
 * two; released; extended; out of the queue.
 */
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness_proxy.h"
#include "test.h"

static th_redis srv;
static fp_proxy *fp;

void test_setup(void) {
  if (th_proxy_start(&srv, &fp) != 0) exit(1);
}

void test_teardown(void) { th_proxy_stop(&srv, fp); }

static void cli(char *out, size_t len, const char *cmd) { th_redis_cli(&srv, out, len, "%s", cmd); }

static int arm(dlock__script_id script) { return th_proxy_arm(fp, script); }

static dlock_client *proxied_client(void) {
  dlock_client *c = th_proxy_client(fp);
  if (!c) TEST_FAIL("client through the proxy: %s", dlock_last_error());
  return c;
}

TEST(an_acquire_whose_reply_is_lost_holds_one_permit_with_its_fence) {
  dlock_client *c = proxied_client();
  /* One permit: a resend that did not know the permit as ours would find
   * none free and answer "busy" for a permit we hold. */
  dlock_semaphore *s = test_semaphore(c, "slr:acq", 1, 30000);
  int before = arm(DLOCK__SCRIPT_SEM_ACQUIRE);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  char out[256];
  cli(out, sizeof out, "ZCARD slr:acq");
  ASSERT_STR_EQ(out, "1"); /* one permit, not two */
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "slr:acq", &info));
  ASSERT_EQ(info.permits_used, 1);
  ASSERT_EQ(info.fence, dlock_semaphore_fence(s));
  ASSERT_EQ(dlock_mutex_is_held(dlock_semaphore_mutex(s)), 1);
  ASSERT_OK(dlock_semaphore_release(s));
  cli(out, sizeof out, "EXISTS slr:acq {slr:acq}:meta");
  ASSERT_STR_EQ(out, "0");
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST(a_release_whose_reply_is_lost_reports_released) {
  dlock_client *c = proxied_client();
  dlock_semaphore *s = test_semaphore(c, "slr:rel", 2, 30000), *t = test_semaphore(c, "slr:rel", 2, 30000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_semaphore_acquire(t, 0));
  int before = arm(DLOCK__SCRIPT_SEM_RELEASE);
  int rc = dlock_semaphore_release(s);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  if (rc != 0) TEST_FAIL("release after a lost reply: %s: %s", dlock_err_name(rc), dlock_semaphore_errmsg(s));
  char out[64];
  cli(out, sizeof out, "ZCARD slr:rel");
  ASSERT_STR_EQ(out, "1"); /* the other holder's permit stays */
  ASSERT_EQ(dlock_mutex_is_held(dlock_semaphore_mutex(t)), 1);
  ASSERT_OK(dlock_semaphore_release(t));
  dlock_semaphore_free(s);
  dlock_semaphore_free(t);
  dlock_client_free(c);
}

TEST(an_extend_whose_reply_is_lost_extends) {
  dlock_client *c = proxied_client();
  dlock_semaphore *s = test_semaphore(c, "slr:ext", 2, 5000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  int before = arm(DLOCK__SCRIPT_SEM_EXTEND);
  ASSERT_OK(dlock_semaphore_extend(s, 60000));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  int64_t ttl = 0;
  ASSERT_OK(dlock_mutex_remaining(dlock_semaphore_mutex(s), &ttl));
  ASSERT(ttl > 30000);
  ASSERT(dlock_semaphore_valid_until(s) > dlock_mono_now() + 30000);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST(a_withdraw_whose_reply_is_lost_leaves_the_queue_and_reports_busy) {
  dlock_client *c = proxied_client();
  dlock_client *c2 = test_client(srv.url);
  dlock_semaphore *h = test_semaphore(c2, "slr:wd", 1, 30000), *s = test_semaphore(c, "slr:wd", 1, 30000);
  ASSERT_OK(dlock_semaphore_acquire(h, 0));
  int before = arm(DLOCK__SCRIPT_SEM_WITHDRAW);
  int rc = dlock_semaphore_acquire(s, 300);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  if (rc != DLOCK_EBUSY)
    TEST_FAIL("wait that ran out, withdraw reply lost: %s: %s", dlock_err_name(rc), dlock_semaphore_errmsg(s));
  char out[64];
  cli(out, sizeof out, "ZCARD {slr:wd}:queue");
  ASSERT_STR_EQ(out, "0");
  cli(out, sizeof out, "ZCARD slr:wd");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_semaphore_release(h));
  dlock_semaphore_free(s);
  dlock_semaphore_free(h);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST_MAIN()
