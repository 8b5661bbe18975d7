/*
 * test_lost_reply.c - every script's reply lost after the server ran it (the
 * fault proxy forwards the command, waits for the reply, drops it and closes
 * the connection): the outcome reported is exact, or DLOCK_EUNKNOWN, and
 * Redis is left as it should be. Also: a pooled connection closed while idle
 * is replaced before use, and the scheduler neither skips a tick nor leaves
 * an orphan job lock when a claim, delay or finish reply is lost.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* A client through the proxy with these timeouts (0: the default). */
static dlock_client *client_via_proxy(int command_timeout_ms, int connect_timeout_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = fp_url(fp);
  if (command_timeout_ms) o.command_timeout_ms = command_timeout_ms;
  if (connect_timeout_ms) o.connect_timeout_ms = connect_timeout_ms;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  return c;
}

/* The fence of the hold's record, "fence|since|token|owner info" in the
 * counter (docs/keys.md). */
static long long meta_fence(const char *name) {
  char cmd[256], out[256];
  snprintf(cmd, sizeof cmd, "GET {%s}:fence", name);
  cli(out, sizeof out, cmd);
  return atoll(out);
}

static int key_exists(const char *key) {
  char cmd[300], out[16];
  snprintf(cmd, sizeof cmd, "EXISTS %s", key);
  cli(out, sizeof out, cmd);
  return atoi(out);
}

TEST(an_acquire_whose_reply_is_lost_holds_the_lock_with_the_fence_in_redis) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:acq", 30000);
  int before = arm(DLOCK__SCRIPT_ACQUIRE);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  ASSERT(dlock_mutex_fence(m) > 0);
  ASSERT_EQ((long long)dlock_mutex_fence(m), meta_fence("lr:acq"));
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_EQ(key_exists("lr:acq"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_release_whose_reply_is_lost_reports_released_and_the_key_is_gone) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:rel", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_RELEASE);
  int rc = dlock_mutex_release(m);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  if (rc != 0) TEST_FAIL("release after a lost reply: %s: %s", dlock_err_name(rc), dlock_mutex_errmsg(m));
  ASSERT_EQ(key_exists("lr:rel"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_release_that_handed_the_lock_on_and_lost_its_reply_reports_released) {
  dlock_client *c = proxied_client();
  dlock_client *c2 = test_client(srv.url); /* the waiter talks to Redis directly */
  dlock_mutex *m = test_mutex(c, "lr:hand", 30000);
  dlock_mutex *w = test_mutex(c2, "lr:hand", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  th_waiter tw = {.m = w, .wait_ms = (int64_t)(10000 * th_time_factor())};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, th_wait_for_lock, &tw), 0);
  char out[64];
  for (int i = 0; i < 200; i++) { /* wait until the waiter is queued */
    cli(out, sizeof out, "ZCARD {lr:hand}:queue");
    if (atoi(out) == 1) break;
    th_sleep_ms(10);
  }
  ASSERT_STR_EQ(out, "1");
  int before = arm(DLOCK__SCRIPT_RELEASE);
  int rc = dlock_mutex_release(m);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  pthread_join(t, NULL);
  if (rc != 0) TEST_FAIL("release that handed on, reply lost: %s: %s", dlock_err_name(rc), dlock_mutex_errmsg(m));
  ASSERT_OK(tw.rc);
  ASSERT(tw.fence > 0);
  dlock_mutex_free(m);
  dlock_mutex_free(w);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(a_release_after_the_lease_ran_out_is_not_held_even_when_its_reply_is_lost) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:late", 200);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  th_sleep_ms(400);
  ASSERT_EQ(key_exists("lr:late"), 0);
  int before = arm(DLOCK__SCRIPT_RELEASE);
  int rc = dlock_mutex_release(m);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  /* The first run found nothing; the second too: both readings (our release,
   * or the lease) are possible from Redis alone, and our deadline had passed. */
  if (rc != DLOCK_ENOTHELD && rc != DLOCK_EUNKNOWN)
    TEST_FAIL("late release, reply lost: %s, want ENOTHELD or EUNKNOWN", dlock_err_name(rc));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(an_extend_whose_reply_is_lost_extends) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:ext", 5000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_EXTEND);
  ASSERT_OK(dlock_mutex_extend(m, 60000));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  char out[64];
  cli(out, sizeof out, "PTTL lr:ext");
  ASSERT(atoll(out) > 30000);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  ASSERT(dlock_mutex_valid_until(m) > dlock_mono_now() + 30000);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_withdraw_whose_reply_is_lost_leaves_the_queue_and_reports_busy) {
  dlock_client *c = proxied_client();
  dlock_client *c2 = test_client(srv.url);
  dlock_mutex *h = test_mutex(c2, "lr:wd", 30000);
  dlock_mutex *m = test_mutex(c, "lr:wd", 30000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  int before = arm(DLOCK__SCRIPT_WITHDRAW);
  int rc = dlock_mutex_acquire(m, 300);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  if (rc != DLOCK_EBUSY)
    TEST_FAIL("wait that ran out, withdraw reply lost: %s: %s", dlock_err_name(rc), dlock_mutex_errmsg(m));
  char out[64];
  cli(out, sizeof out, "ZCARD {lr:wd}:queue");
  ASSERT_STR_EQ(out, "0");
  ASSERT_EQ(dlock_mutex_is_held(h), 1);
  ASSERT_OK(dlock_mutex_release(h));
  dlock_mutex_free(m);
  dlock_mutex_free(h);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(a_guard_check_whose_reply_is_lost_admits_the_token) {
  dlock_client *c = proxied_client();
  int before = arm(DLOCK__SCRIPT_GUARD);
  ASSERT_OK(dlock_guard_check(c, "lr:res", 1000));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  char out[64];
  cli(out, sizeof out, "GET {lr:res}:guard");
  ASSERT_STR_EQ(out, "1000");
  ASSERT_STATUS(dlock_guard_check(c, "lr:res", 999), DLOCK_ESTALE);
  dlock_client_free(c);
}

TEST(a_status_whose_reply_is_lost_is_asked_again) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:info", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_INFO);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "lr:info", &info));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.fence, dlock_mutex_fence(m));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_force_release_whose_reply_is_lost_is_unknown_not_sent_again) {
  dlock_client *c = proxied_client();
  dlock_client *c2 = test_client(srv.url);
  dlock_mutex *m = test_mutex(c2, "lr:force", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_FORCE_RELEASE);
  int was_held = -1;
  int rc = dlock_lock_force_release(c, "lr:force", &was_held);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  /* Sent again it would answer "was not held" (wrong) and could delete a
   * new holder's key: the outcome is reported as unknown instead. */
  if (rc != DLOCK_EUNKNOWN)
    TEST_FAIL("force release, reply lost: %s (was_held %d), want EUNKNOWN", dlock_err_name(rc), was_held);
  ASSERT_CONTAINS(dlock_last_error(), "lr:force");
  ASSERT_EQ(key_exists("lr:force"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(a_pooled_connection_closed_while_idle_is_replaced_before_use) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:idle", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  fp_close_all(fp); /* like CLIENT KILL or an idle timeout: nothing in flight */
  th_sleep_ms(50);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_EQ(key_exists("lr:idle"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(an_is_held_whose_reply_is_lost_is_asked_again) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:isheld", 30000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_INFO);
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The proxy's other faults, as other tests will use them. */
TEST(through_a_delaying_proxy_commands_are_slower_but_exact) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:slow", 30000);
  fp_pass(fp);
  fp_delay(fp, 100);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  long long took = th_now_ms() - t0;
  fp_pass(fp);
  ASSERT(took >= 150); /* held both ways: at least 2 x 100 ms, less a scheduling margin */
  ASSERT_EQ((long long)dlock_mutex_fence(m), meta_fence("lr:slow"));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(through_a_blackhole_an_acquire_is_unknown_never_success_or_busy) {
  dlock_client *c = client_via_proxy(200, 200);
  dlock_mutex *m = test_mutex(c, "lr:hole", 30000);
  fp_pass(fp);
  fp_blackhole(fp, 1);
  long long t0 = th_now_ms();
  int rc = dlock_mutex_acquire(m, 0);
  long long took = th_now_ms() - t0;
  fp_pass(fp);
  /* Sent, resent, then withdraw sent and resent: four command timeouts at most (plus margin). */
  if (rc != DLOCK_EUNKNOWN) TEST_FAIL("acquire into a blackhole: %s, want EUNKNOWN", dlock_err_name(rc));
  ASSERT(took < 4 * 200 + 2000 * th_time_factor());
  ASSERT_EQ(dlock_mutex_fence(m), 0);
  ASSERT_EQ(key_exists("lr:hole"), 0); /* nothing reached Redis */
  /* The client works again once the proxy passes traffic. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- Scheduler ---- */

typedef struct sched_log {
  atomic_int ran, skipped, busy, errors, runs;
  atomic_llong first_ran_tick;
  char last_error[512];
  pthread_mutex_t mu;
} sched_log;

static void on_event(const dlock_sched_event *ev, void *arg) {
  sched_log *l = arg;
  switch (ev->kind) {
  case DLOCK_SCHED_RAN:
    if (atomic_fetch_add(&l->ran, 1) == 0) atomic_store(&l->first_ran_tick, ev->scheduled_unix_ms);
    break;
  case DLOCK_SCHED_SKIPPED:
    atomic_fetch_add(&l->skipped, 1);
    break;
  case DLOCK_SCHED_SKIPPED_BUSY:
    atomic_fetch_add(&l->busy, 1);
    break;
  case DLOCK_SCHED_ERROR:
  case DLOCK_SCHED_CLOCK_SKEW:
    atomic_fetch_add(&l->errors, 1);
    pthread_mutex_lock(&l->mu);
    snprintf(l->last_error, sizeof l->last_error, "%s", ev->message ? ev->message : "");
    pthread_mutex_unlock(&l->mu);
    break;
  case DLOCK_SCHED_SKIPPED_POOL:
  case DLOCK_SCHED_MISFIRED:
  case DLOCK_SCHED_SKIPPED_PAUSED:
    break;
  }
}

static int job(const dlock_tick *t, void *arg) {
  (void)t;
  atomic_fetch_add(&((sched_log *)arg)->runs, 1);
  return 0;
}

/* Run one job through the proxy until 'want' runs happened (or a bound),
 * with the first reply of 'script' dropped. kind: 'r' rate, 'd' delay, 'o' rate with overlap. */
static void sched_through_proxy(const char *name, char kind, dlock__script_id script, sched_log *l, int want) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
  dlock_client *c = proxied_client();
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = on_event;
  so.on_event_arg = l;
  so.node_name = "lr-node";
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, &so));
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_most_for_ms = 60000; /* an orphan job lock would block every later tick for a minute */
  jo.allow_overlap = kind == 'o';
  int before = arm(script);
  if (kind == 'd')
    ASSERT_OK(dlock_sched_add_fixed_delay(s, name, 200, &jo, job, l));
  else
    ASSERT_OK(dlock_sched_add_fixed_rate(s, name, 300, &jo, job, l));
  ASSERT_OK(dlock_sched_start(s));
  long long end = th_now_ms() + 8000 * th_time_factor();
  while (atomic_load(&l->runs) < want && th_now_ms() < end) th_sleep_ms(20);
  ASSERT_OK(dlock_sched_stop(s, 5000));
  dlock_sched_free(s);
  dlock_client_free(c);
  fp_pass(fp);
  if (fp_dropped(fp) != before + 1) TEST_FAIL("the proxy dropped %d replies, want 1", fp_dropped(fp) - before);
  pthread_mutex_lock(&l->mu);
  if (atomic_load(&l->errors)) TEST_FAIL("%d error events, the last: %s", atomic_load(&l->errors), l->last_error);
  pthread_mutex_unlock(&l->mu);
  if (atomic_load(&l->runs) < want)
    TEST_FAIL("%d runs in 8 s, want %d (skipped %d, busy %d)", atomic_load(&l->runs), want, atomic_load(&l->skipped),
              atomic_load(&l->busy));
  /* Nothing is left holding the job lock. */
  ASSERT_EQ(key_exists(name), 0);
}

TEST(a_tick_claim_whose_reply_is_lost_still_runs_that_tick_and_leaves_no_orphan_lock) {
  sched_log l;
  sched_through_proxy("lr:claim", 'r', DLOCK__SCRIPT_SCHED_CLAIM, &l, 3);
  /* The tick whose claim reply was lost is the first one, and it ran. */
  ASSERT_EQ(atomic_load(&l.skipped), 0);
  ASSERT_EQ(atomic_load(&l.busy), 0);
  dlock_client *c = test_client(srv.url);
  dlock_run_record rec[16];
  for (int k = 0; k < 16; k++) dlock_run_record_init(&rec[k]);
  int n = dlock_sched_history(c, "lr:claim", rec, 16);
  ASSERT(n >= 3);
  int found = 0;
  for (int i = 0; i < n; i++) {
    if (rec[i].scheduled_unix_ms == atomic_load(&l.first_ran_tick)) found++;
    ASSERT_STR_EQ(rec[i].outcome, "ok");
  }
  ASSERT_EQ(found, 1);
  dlock_client_free(c);
}

TEST(an_overlapping_tick_claim_whose_reply_is_lost_still_runs) {
  sched_log l;
  sched_through_proxy("lr:claim-ov", 'o', DLOCK__SCRIPT_SCHED_CLAIM, &l, 3);
  ASSERT_EQ(atomic_load(&l.skipped), 0);
}

TEST(a_finish_whose_reply_is_lost_is_recorded_once_and_the_lock_was_ours) {
  sched_log l;
  sched_through_proxy("lr:finish", 'r', DLOCK__SCRIPT_SCHED_FINISH, &l, 3);
  dlock_client *c = test_client(srv.url);
  dlock_run_record rec[16];
  for (int k = 0; k < 16; k++) dlock_run_record_init(&rec[k]);
  int n = dlock_sched_history(c, "lr:finish", rec, 16);
  ASSERT(n >= 3);
  for (int i = 0; i < n; i++) /* no tick recorded twice */
    for (int k = i + 1; k < n; k++)
      if (rec[i].scheduled_unix_ms == rec[k].scheduled_unix_ms)
        TEST_FAIL("tick %lld recorded twice in the history", (long long)rec[i].scheduled_unix_ms);
  dlock_client_free(c);
}

TEST(a_fixed_delay_claim_whose_reply_is_lost_runs_and_leaves_no_orphan_lock) {
  sched_log l;
  sched_through_proxy("lr:delay", 'd', DLOCK__SCRIPT_SCHED_DELAY, &l, 3);
}

/* The claim's reply is lost, and before its resend arrives another node
 * claims a later tick (it finds the job lock held by our first run, and
 * records that tick as skipped). The resend must still see that the job lock
 * is ours, run the tick and release it: reading "claimed" there would skip
 * the tick and leave the job lock held by an orphan token for
 * lock_at_most_for, so that every node skips every tick for a minute. */
TEST(a_claim_resent_after_another_node_claimed_a_later_tick_runs_and_leaves_no_orphan_lock) {
  const char *name = "lr:claim-sup";
  sched_log la, lb;
  memset(&la, 0, sizeof la);
  memset(&lb, 0, sizeof lb);
  pthread_mutex_init(&la.mu, NULL);
  pthread_mutex_init(&lb.mu, NULL);
  dlock_client *ca = client_via_proxy((int)(5000 * th_time_factor()), 0), *cb = test_client(srv.url);
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_most_for_ms = 60000;
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = on_event;
  so.on_event_arg = &la;
  so.node_name = "lr-a";
  dlock_sched *a = NULL, *b = NULL;
  ASSERT_OK(dlock_sched_new(&a, ca, &so));
  so.on_event_arg = &lb;
  so.node_name = "lr-b";
  ASSERT_OK(dlock_sched_new(&b, cb, &so));
  ASSERT_OK(dlock_sched_add_fixed_rate(a, name, 300, &jo, job, &la));
  ASSERT_OK(dlock_sched_add_fixed_rate(b, name, 300, &jo, job, &lb));
  /* A runs first without faults: its connections (also the one that
   * listens for job triggers) are made before the proxy slows everything. */
  ASSERT_OK(dlock_sched_start(a));
  long long up = th_now_ms() + 5000 * th_time_factor();
  while (atomic_load(&la.runs) < 1 && th_now_ms() < up) th_sleep_ms(20);
  ASSERT(atomic_load(&la.runs) >= 1);
  atomic_store(&la.runs, 0);
  int before = arm(DLOCK__SCRIPT_SCHED_CLAIM);
  fp_delay(fp, 800); /* the resend reaches the server 0.8 s after the drop */
  if (fp_wait_dropped(fp, before + 1, (long)(5000 * th_time_factor())) != before + 1)
    TEST_FAIL("the proxy dropped no claim reply");
  ASSERT_OK(dlock_sched_start(b)); /* claims the next tick directly, before A's resend arrives */
  long long end = th_now_ms() + 8000 * th_time_factor();
  while (atomic_load(&la.runs) + atomic_load(&lb.runs) < 3 && th_now_ms() < end) th_sleep_ms(20);
  ASSERT_OK(dlock_sched_stop(b, 5000));
  fp_pass(fp);
  ASSERT_OK(dlock_sched_stop(a, 5000));
  dlock_sched_free(a);
  dlock_sched_free(b);
  dlock_client_free(ca);
  dlock_client_free(cb);
  int runs = atomic_load(&la.runs) + atomic_load(&lb.runs);
  if (runs < 3)
    TEST_FAIL("%d runs in 8 s, want 3 (A: %d runs, %d skipped, %d busy; B: %d runs, %d busy)", runs,
              atomic_load(&la.runs), atomic_load(&la.skipped), atomic_load(&la.busy), atomic_load(&lb.runs),
              atomic_load(&lb.busy));
  ASSERT(atomic_load(&la.runs) >= 1); /* A's tick, whose claim reply was lost, ran */
  ASSERT_EQ(key_exists(name), 0);
}

/* An extend to a shorter lease whose reply is lost, and whose resend gets no
 * answer either: it may have run, so Redis may expire the key at the shorter
 * lease. The local deadline must not stay at the longer one, or the handle
 * says "not lost" while another owner already holds the lock. */
TEST(a_shortening_extend_of_unknown_outcome_moves_the_local_deadline_in) {
  dlock_client *c = client_via_proxy(300, 300), *other = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "lr:shorten", 30000), *b = test_mutex(other, "lr:shorten", 30000);
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int before = arm(DLOCK__SCRIPT_EXTEND);
  fp_blackhole_after_drop(fp, 1);
  int rc = dlock_mutex_extend(m, 500);
  fp_blackhole_after_drop(fp, 0);
  fp_pass(fp);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  ASSERT(rc != 0); /* the outcome is not known */
  char out[64];
  cli(out, sizeof out, "PTTL lr:shorten");
  ASSERT(atoll(out) <= 500); /* it did run */
  th_sleep_ms(700);
  ASSERT_OK(dlock_mutex_acquire(b, 0)); /* the key expired: another owner holds the lock */
  if (dlock_mutex_lost(m) == DLOCK_LOST_NONE)
    TEST_FAIL("another owner holds the lock, and ours still says not lost (valid for %lld ms more)",
              (long long)(dlock_mutex_valid_until(m) - dlock_mono_now()));
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(other);
}

/* A watchdog-mode hold of 'name' through 'c' (the watchdog's lease: 1.5 s),
 * which the caller then extends to 60 s. */
static dlock_mutex *held_with_a_longer_extend(dlock_client *c, const char *name) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 0; /* the watchdog */
  mo.watchdog_lease_ms = 1500;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, name, &mo));
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_extend(m, 60000));
  return m;
}

/* The same for the watchdog. After the caller's extend to a lease longer
 * than the watchdog's, a renewal (at the watchdog's lease) whose reply is
 * lost, and whose retries get no answer, may have run: Redis may then expire
 * the key one watchdog lease after it. The local deadline must come down to
 * that, or the handle says "not lost" while another owner holds the lock. */
TEST(a_watchdog_renewal_of_unknown_outcome_after_a_longer_extend_moves_the_deadline_in) {
  dlock_client *c = client_via_proxy(300, 300), *other = test_client(srv.url);
  dlock_mutex *b = test_mutex(other, "lr:wdext", 30000), *m = held_with_a_longer_extend(c, "lr:wdext");
  ASSERT(dlock_mutex_valid_until(m) - dlock_mono_now() > 30000); /* the extend's lease counts */
  int before = arm(DLOCK__SCRIPT_EXTEND);
  fp_blackhole_after_drop(fp, 1);
  /* The watchdog renews within a third of its lease: that renewal runs, its
   * reply is dropped, and nothing after it gets through. */
  ASSERT_EQ(fp_wait_dropped(fp, before + 1, (long)(5000 * th_time_factor())), before + 1);
  char out[64];
  cli(out, sizeof out, "PTTL lr:wdext");
  ASSERT(atoll(out) <= 1500); /* it did run, with the watchdog's lease */
  for (int i = 0; i < 500 && key_exists("lr:wdext"); i++) th_sleep_ms(10);
  ASSERT_OK(dlock_mutex_acquire(b, 0)); /* the key expired: another owner holds the lock */
  if (dlock_mutex_lost(m) == DLOCK_LOST_NONE)
    TEST_FAIL("another owner holds the lock, and ours still says not lost (valid for %lld ms more)",
              (long long)(dlock_mutex_valid_until(m) - dlock_mono_now()));
  fp_blackhole_after_drop(fp, 0);
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(other);
}

/* As above, but the renewal is still in flight: the proxy holds every chunk
 * 3 s each way, so the renewal runs (setting the watchdog's 1.5 s lease) 3 s
 * after it left and its reply comes 3 s later still; the client waits up to
 * 10 s. A call in flight may have run already, so it must bound the local
 * deadline from the moment it leaves, not only once its failure is known. */
TEST(a_watchdog_renewal_still_in_flight_after_a_longer_extend_bounds_the_deadline) {
  dlock_client *c = client_via_proxy(10000, 0), *other = test_client(srv.url);
  dlock_mutex *b = test_mutex(other, "lr:wdinflight", 30000), *m = held_with_a_longer_extend(c, "lr:wdinflight");
  fp_delay(fp, 3000); /* before the first renewal, due 500 ms after the acquire */
  char out[64];
  for (int i = 0; i < 1000; i++) { /* the renewal ran: the key has the watchdog's lease */
    cli(out, sizeof out, "PTTL lr:wdinflight");
    if (atoll(out) <= 1500) break;
    th_sleep_ms(10);
  }
  ASSERT(atoll(out) <= 1500);
  for (int i = 0; i < 500 && key_exists("lr:wdinflight"); i++) th_sleep_ms(10);
  ASSERT_OK(dlock_mutex_acquire(b, 0)); /* the key expired: another owner holds the lock */
  dlock_lost_reason lost = dlock_mutex_lost(m);
  long long left = (long long)(dlock_mutex_valid_until(m) - dlock_mono_now());
  fp_delay(fp, 0);
  if (lost == DLOCK_LOST_NONE)
    TEST_FAIL("another owner holds the lock, and ours still says not lost (valid for %lld ms more)", left);
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(other);
}

/* The caller shortens the lease (watchdog mode) while the proxy holds every
 * chunk 100 ms each way: a renewal overlaps the extend and its reply comes
 * last. The hold then counts on the extend's short deadline (either may run
 * last in Redis), so the watchdog must renew again before that deadline, not
 * a third of its own lease after the renewal, or a healthy hold is lost. */
TEST(a_renewal_that_overlapped_a_shortening_extend_renews_again_before_its_deadline) {
  dlock_client *c = client_via_proxy(0, 0);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 0; /* the watchdog */
  mo.watchdog_lease_ms = 6000;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "lr:wdshort", &mo));
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  fp_delay(fp, 100);
  /* Which reply comes last is a race: try a few times. Each time, wait past
   * the extend's deadline (1.2 s): the watchdog must have renewed by then. */
  for (int i = 0; i < 8; i++) {
    ASSERT_OK(dlock_mutex_extend(m, 1200));
    th_sleep_ms(1400);
    dlock_lost_reason lost = dlock_mutex_lost(m);
    if (lost != DLOCK_LOST_NONE) {
      fp_delay(fp, 0);
      TEST_FAIL("extend %d: the hold was lost (%s)", i, dlock_lost_reason_str(lost));
    }
  }
  fp_delay(fp, 0);
  char out[64];
  cli(out, sizeof out, "EXISTS lr:wdshort");
  ASSERT_EQ(atoi(out), 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

static void *extend_500(void *arg) {
  dlock_mutex_extend(arg, 500);
  return NULL;
}

/* The caller's extend to a shorter lease, slow to answer (the proxy holds
 * every chunk 1.5 s each way): it runs 1.5 s after it left, the key expires
 * 0.5 s later, and its reply comes 1 s after that. From the moment it left,
 * the hold may end at the shorter lease. */
TEST(a_shortening_extend_still_in_flight_bounds_the_deadline) {
  dlock_client *c = client_via_proxy(10000, 0), *other = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "lr:shortflight", 30000), *b = test_mutex(other, "lr:shortflight", 30000);
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  fp_delay(fp, 1500);
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, extend_500, m), 0);
  char out[64];
  for (int i = 0; i < 1000; i++) { /* the extend ran */
    cli(out, sizeof out, "PTTL lr:shortflight");
    if (atoll(out) <= 500) break;
    th_sleep_ms(10);
  }
  for (int i = 0; i < 500 && key_exists("lr:shortflight"); i++) th_sleep_ms(10);
  ASSERT_OK(dlock_mutex_acquire(b, 0)); /* the key expired: another owner holds the lock */
  dlock_lost_reason lost = dlock_mutex_lost(m);
  long long left = (long long)(dlock_mutex_valid_until(m) - dlock_mono_now());
  pthread_join(t, NULL);
  fp_delay(fp, 0);
  if (lost == DLOCK_LOST_NONE)
    TEST_FAIL("another owner holds the lock, and ours still said not lost (valid for %lld ms more)", left);
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(other);
}

/* The acquire's reply is lost, and before the resend arrives someone deletes
 * the lock's fence counter (where the fence of the hold is recorded). The resend
 * finds the key ours but no fence: that is an error, never a hold with
 * fence 0 (which a fresh guard would admit). The proxy holds every chunk of
 * every connection 800 ms in one thread, so any other traffic of the client
 * during the acquire (a pub/sub connection opened beside it) delays the
 * resend past its timeout: an acquire's sequence must have the link to itself. */
static void acquire_resent_after_its_fence_record_vanished(const char *name, int64_t lease_ms) {
  dlock_client *c = client_via_proxy((int)(5000 * th_time_factor()), 0);
  dlock_mutex *m = test_mutex(c, name, lease_ms);
  int before = arm(DLOCK__SCRIPT_ACQUIRE);
  fp_delay(fp, 800);
  th_waiter w = {.m = m, .wait_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, th_wait_for_lock, &w);
  if (fp_wait_dropped(fp, before + 1, (long)(5000 * th_time_factor())) != before + 1)
    TEST_FAIL("the proxy dropped no acquire reply");
  char out[64], cmd[128];
  snprintf(cmd, sizeof cmd, "DEL {%s}:fence", name);
  cli(out, sizeof out, cmd);
  pthread_join(t, NULL);
  fp_pass(fp);
  if (w.rc == 0) TEST_FAIL("acquired with fence %" PRIu64 " although no fence was recorded for the hold", w.fence);
  if (w.rc != DLOCK_EFENCE) TEST_FAIL("acquire: %s, want EFENCE: %s", dlock_err_name(w.rc), dlock_mutex_errmsg(m));
  ASSERT_EQ(key_exists(name), 0); /* given back */
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(an_acquire_resent_after_its_fence_record_vanished_is_efence_not_fence_0) {
  acquire_resent_after_its_fence_record_vanished("lr:nometa", 30000);
}

/* The same in watchdog mode, where the holder listens for a forced release
 * (lock.c): it subscribes only once the hold is granted. */
TEST(a_watchdog_acquire_resent_after_its_fence_record_vanished_is_efence_too) {
  acquire_resent_after_its_fence_record_vanished("lr:nometa-wd", 0);
}

/* ---- A holder that listens for a forced release ---- */

/* A watchdog-mode holder through the proxy (it listens on "{K}:f", the
 * pub/sub connection through the proxy too), and a client straight to Redis. */
static dlock_mutex *listening_holder(dlock_client *c, const char *name, int64_t watchdog_lease_ms) {
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.watchdog_lease_ms = watchdog_lease_ms;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, name, &o));
  return m;
}

/* Force-release 'name' from 'admin' and wait for the holder's lost fd, up
 * to 'bound_ms' from 'from_ms': the loss must read deleted. */
static void forced_release_is_heard(dlock_client *admin, dlock_mutex *m, const char *name, long long from_ms, int force,
                                    long bound_ms, const char *when) {
  int fd = dlock_mutex_lost_fd(m);
  if (fd < 0) TEST_FAIL("no lost fd: %s", dlock_last_error());
  if (force) {
    int was = 0;
    ASSERT_OK(dlock_lock_force_release(admin, name, &was));
    ASSERT_EQ(was, 1);
  }
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  long left = bound_ms - (long)(th_now_ms() - from_ms);
  if (poll(&pfd, 1, left > 0 ? (int)left : 0) != 1)
    TEST_FAIL("the holder was not told of the forced release within %ld ms %s (its next renewal is a third "
              "of its lease later)",
              bound_ms, when);
  if (dlock_mutex_lost(m) != DLOCK_LOST_DELETED)
    TEST_FAIL("the loss reads %s, not deleted", dlock_lost_reason_str(dlock_mutex_lost(m)));
}

/* The holder's renewal runs, and before its reply arrives (the proxy holds
 * it) another client force-releases the lock: the holder hears the message
 * while the renewal is in flight. The renewal's answer (renewed: it ran
 * first) must not put the check the message asked for off to the next
 * renewal, a third of the lease later. */
TEST(a_forced_release_heard_while_a_renewal_is_in_flight_is_acted_on_once_it_answers) {
  dlock_client *c = proxied_client(), *admin = test_client(srv.url);
  dlock_mutex *m = listening_holder(c, "lr:inflight", 12000); /* renewals 4 s apart */
  fp_pass(fp);
  fp_hold_reply(fp, dlock__script_sha(DLOCK__SCRIPT_EXTEND), 1);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  if (fp_wait_held(fp, 1, (long)(10000 * th_time_factor())) != 1) TEST_FAIL("no renewal within 10 s");
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(admin, "lr:inflight", &was));
  ASSERT_EQ(was, 1);
  th_sleep_ms(300); /* the message reaches the holder meanwhile (if later, it only comes after the answer) */
  long long at = th_now_ms();
  fp_release_held(fp);
  forced_release_is_heard(admin, m, "lr:inflight", at, 0, (long)(2000 * th_time_factor()), "of the renewal's answer");
  fp_pass(fp);
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(admin);
}

/* An acquire whose reply is lost (resent) and a release whose reply is
 * lost (resent) while the handle listens: the hold, its release and the
 * next hold are exact, and a forced release of that next hold is heard at
 * once on the subscription the first hold made. */
TEST(lost_acquire_and_release_replies_leave_a_listening_holder_that_hears_a_forced_release) {
  dlock_client *c = proxied_client(), *admin = test_client(srv.url);
  dlock_mutex *m = listening_holder(c, "lr:listen", 30000);
  int before = arm(DLOCK__SCRIPT_ACQUIRE);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(fp_dropped(fp), before + 1);
  ASSERT_EQ((long long)dlock_mutex_fence(m), meta_fence("lr:listen"));
  before = arm(DLOCK__SCRIPT_RELEASE);
  int rc = dlock_mutex_release(m);
  ASSERT_EQ(fp_dropped(fp), before + 1);
  if (rc != 0) TEST_FAIL("release after a lost reply: %s: %s", dlock_err_name(rc), dlock_mutex_errmsg(m));
  ASSERT_EQ(key_exists("lr:listen"), 0);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  fp_pass(fp);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  forced_release_is_heard(admin, m, "lr:listen", th_now_ms(), 1, (long)(2000 * th_time_factor()),
                          "on the handle's second hold");
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(admin);
}

/* An acquire whose reply was lost is sent again; the first send may still
 * reach Redis later (a retransmitted packet of the closed connection, a
 * proxy that held it), after the resend's answer and after an extend to a
 * longer lease. Its run must not shorten the key below the deadline the
 * handle counts on (docs/model.md: the SPIN model found this). Here the late
 * first send is played by running acquire.lua with the hold's token. */
TEST(a_late_duplicate_of_an_acquire_never_shortens_an_extended_lease) {
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "lr:latedup", 2000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_extend(m, 60000));
  char token[sizeof m->token];
  pthread_mutex_lock(&m->mu);
  memcpy(token, m->token, sizeof token);
  pthread_mutex_unlock(&m->mu);
  char out[256];
  th_redis_cli(&srv, out, sizeof out,
               "EVALSHA %s 5 lr:latedup {lr:latedup}:fence {lr:latedup}:meta {lr:latedup}:queue "
               "{lr:latedup}:waiters %s 2000 '' 2000 3000 x ''",
               dlock__script_sha(DLOCK__SCRIPT_ACQUIRE), token);
  cli(out, sizeof out, "PTTL lr:latedup");
  long long pttl = atoll(out);
  long long left = (long long)(dlock_mutex_valid_until(m) - dlock_mono_now());
  if (pttl < left)
    TEST_FAIL("the late acquire set the key to expire in %lld ms while the handle counts on %lld ms more: "
              "another client could take the lock while this one believes it holds it",
              pttl, left);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The same for a semaphore's permit: a late copy of its acquire must not
 * lower the permit's expiry below the holder's deadline after an extend. */
TEST(a_late_duplicate_of_a_permit_acquire_never_shortens_an_extended_lease) {
  dlock_client *c = proxied_client();
  dlock_semaphore *s = NULL;
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.lease_ms = 2000;
  ASSERT_OK(dlock_semaphore_new(&s, c, "lr:latesem", 2, &o));
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_semaphore_extend(s, 60000));
  dlock_mutex *m = (dlock_mutex *)s; /* a semaphore handle is a mutex handle of another kind */
  char token[sizeof m->token];
  pthread_mutex_lock(&m->mu);
  memcpy(token, m->token, sizeof token);
  pthread_mutex_unlock(&m->mu);
  char out[256];
  th_redis_cli(&srv, out, sizeof out,
               "EVALSHA %s 5 lr:latesem {lr:latesem}:fence {lr:latesem}:meta {lr:latesem}:queue "
               "{lr:latesem}:waiters %s 2000 '' 2000 3000 x 2",
               dlock__script_sha(DLOCK__SCRIPT_SEM_ACQUIRE), token);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "ZSCORE lr:latesem %s", token);
  cli(out, sizeof out, cmd);
  long long expiry = atoll(out);
  cli(out, sizeof out, "EVAL \"local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)\" 0");
  long long server_now = atoll(out);
  long long left = (long long)(dlock_semaphore_valid_until(s) - dlock_mono_now());
  if (expiry - server_now < left)
    TEST_FAIL("the late acquire set the permit to expire in %lld ms while the handle counts on %lld ms more",
              expiry - server_now, left);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST_MAIN()
