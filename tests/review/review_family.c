/*
 * review_family.c - the adversarial review of the Redis lock family
 * (semaphore, read-write lock, latch, multi-lock) and of the pipelined
 * release (branch revfam): one test per finding, each FAILED on the code as
 * reviewed (base 2911b24). Registered as ctest "review/review_family" with
 * the label "review". Every finding is fixed and its test runs by default. Real redis-server through harness.h (and the
 * fault proxy, faultproxy.h), public API only (dlock.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "faultproxy.h"
#include "harness.h"
#include "test.h"

static th_redis srv;
static fp_proxy *fp;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
  if (fp_start(&fp, srv.port) != 0) exit(1);
}

void test_teardown(void) {
  fp_stop(fp);
  th_redis_stop(&srv);
}

static dlock_client *client(void) { return test_client(srv.url); }

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

/* Run one mutex cycle so that the server's script cache has release.lua
 * (a pipelined EVALSHA of an unknown script falls back to the synchronous
 * release, which would hide the first finding). */
static void load_release_script(dlock_client *c) {
  dlock_mutex *m = test_mutex(c, "rv:load", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
}

/* Finding 1: dlock__redis_release_async (src/redis/pipeline.c) always sends
 * the mutex's release.lua, whatever the handle's kind. dlock.h and
 * docs/semaphore.md say every dlock_mutex_* call works on
 * dlock_semaphore_mutex(s) as the semaphore call of the same verb; a
 * pipelined release of a permit runs release.lua on the permits' ZSET, which
 * fails (WRONGTYPE), and the permit stays taken until its lease ends. */
TEST(review_a_pipelined_release_of_a_semaphore_permit_gives_the_permit_back) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_semaphore *a = test_semaphore(c, "rv:sem:async", 1, 20000), *b = test_semaphore(c, "rv:sem:async", 1, 20000);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(dlock_semaphore_mutex(a)));
  int rc = dlock_mutex_release_result(dlock_semaphore_mutex(a));
  if (rc) TEST_FAIL("pipelined release of a permit: %s", dlock_last_error());
  ASSERT_OK(dlock_semaphore_acquire(b, 0)); /* the only permit is free again */
  ASSERT_OK(dlock_semaphore_release(b));
  dlock_semaphore_free(a);
  dlock_semaphore_free(b);
  dlock_client_free(c);
}

/* Finding 1, the read-write lock: dlock_rwlock_mutex()'s "every
 * dlock_mutex_* call on it acts on this side"; a pipelined release of the
 * write side leaves the writer in place until its lease ends. */
TEST(review_a_pipelined_release_of_a_write_hold_frees_the_name) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_rwlock *w = test_rwlock(c, "rv:rw:async", DLOCK_RW_WRITE, 20000);
  dlock_rwlock *r = test_rwlock(c, "rv:rw:async", DLOCK_RW_READ, 20000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_mutex_release_async(dlock_rwlock_mutex(w)));
  int rc = dlock_mutex_release_result(dlock_rwlock_mutex(w));
  if (rc) TEST_FAIL("pipelined release of a write hold: %s", dlock_last_error());
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_OK(dlock_rwlock_release(r));
  char out[64];
  cli(out, sizeof out, "EXISTS rv:rw:async {rv:rw:async}:meta");
  ASSERT_STR_EQ(out, "0");
  dlock_rwlock_free(w);
  dlock_rwlock_free(r);
  dlock_client_free(c);
}

/* Run fn in a child process; 1 if it exited normally with status 0. */
static int survives(void (*fn)(void)) {
  pid_t kid = fork();
  if (kid == 0) {
    fn();
    _exit(0);
  }
  int st = 0;
  if (waitpid(kid, &st, 0) != kid) return 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void sem_new_null_out(void) {
  dlock_client *c = client();
  int rc = dlock_semaphore_new(NULL, c, "rv:sem:nullout", 2, NULL);
  dlock_client_free(c);
  _exit(rc == DLOCK_EINVAL ? 0 : 3);
}

static void rw_new_null_out(void) {
  dlock_client *c = client();
  int rc = dlock_rwlock_new(NULL, c, "rv:rw:nullout", DLOCK_RW_READ, NULL);
  dlock_client_free(c);
  _exit(rc == DLOCK_EINVAL ? 0 : 3);
}

/* Finding 2: dlock_semaphore_new(NULL, ...) and dlock_rwlock_new(NULL, ...)
 * (src/core/semaphore.c, src/core/rwlock.c) build the handle through a local
 * pointer and then store it through 'out' unchecked: a NULL 'out' crashes
 * (SIGSEGV) where dlock_mutex_new() and dlock_latch_new() answer EINVAL. */
TEST(review_new_semaphore_or_rwlock_with_a_null_out_is_einval_not_a_crash) {
  ASSERT(survives(sem_new_null_out));
  ASSERT(survives(rw_new_null_out));
}

static dlock_lock_info info_of(dlock_client *c, const char *name) {
  dlock_lock_info i;
  dlock_lock_info_init(&i);
  if (dlock_lock_info_get(c, name, &i) != 0) TEST_FAIL("status of '%s': %s", name, dlock_last_error());
  return i;
}

/* A child that waits for a permit of 'name' (limit 1, lease 1000 ms) until
 * it is killed. */
static void wait_for_permit_forever(const char *name) {
  dlock_client *c = client();
  dlock_semaphore *s = test_semaphore(c, name, 1, 1000);
  dlock_semaphore_acquire(s, DLOCK_WAIT_FOREVER);
  _exit(0);
}

/* Finding 3: sem_acquire.lua hands free permits to queued waiters first
 * (dlock_sem_grant); when the caller itself gets none and no expired permit
 * was pruned, it returns without dlock_sem_tidy, so the permits' ZSET and
 * {K}:meta just created by the grant have no expiry. If the granted waiter
 * has crashed (it never confirms), both stay forever, and with them the
 * stored limit: docs/semaphore.md says "the stored limit goes with the last
 * permit", yet every caller with another limit gets DLOCK_ELIMIT from then
 * on although no permit is held. Here: the holder's lease ends (its keys
 * expire whole), the first waiter was SIGKILLed, a try-only caller runs the
 * grant. */
TEST(review_a_grant_to_a_crashed_waiter_leaves_no_key_without_expiry) {
  const char *name = "rv:sem:leak";
  dlock_client *c = client();
  dlock_semaphore *a = test_semaphore(c, name, 1, 800);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  pid_t kid = fork();
  if (kid == 0) wait_for_permit_forever(name);
  int queued = 0;
  for (int i = 0; i < 300 && !queued; i++) {
    queued = info_of(c, name).waiters == 1;
    if (!queued) th_sleep_ms(10);
  }
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  ASSERT(queued);
  /* The holder's lease ends: its keys expire (no release). */
  th_sleep_ms(1000);
  char out[64];
  cli(out, sizeof out, "EXISTS rv:sem:leak");
  ASSERT_STR_EQ(out, "0");
  dlock_semaphore *b = test_semaphore(c, name, 1, 800);
  ASSERT_STATUS(dlock_semaphore_acquire(b, 0), DLOCK_EBUSY); /* FIFO: the dead waiter is granted */
  cli(out, sizeof out, "PTTL rv:sem:leak");
  if (strcmp(out, "-1") == 0) TEST_FAIL("the permits' key %s has no expiry after the grant", name);
  cli(out, sizeof out, "PTTL {rv:sem:leak}:meta");
  if (strcmp(out, "-1") == 0) TEST_FAIL("{%s}:meta has no expiry after the grant", name);
  /* Once the dead waiter's claim has run out, nothing is held, so any
   * limit may be stored anew. */
  th_sleep_ms(1500);
  dlock_semaphore *three = test_semaphore(c, name, 3, 800);
  int rc = dlock_semaphore_acquire(three, 0);
  if (rc) TEST_FAIL("no permit is held, yet a limit of 3 is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_semaphore_release(three));
  dlock_semaphore_release(a); /* lost long ago: ENOTHELD */
  dlock_semaphore_free(three);
  dlock_semaphore_free(b);
  dlock_semaphore_free(a);
  dlock_client_free(c);
}

/* The second thread of the next test: acquire the shared handle (it waits
 * locally while the first thread holds it). */
static void *take_shared(void *arg) {
  dlock_mutex *m = arg;
  intptr_t rc = dlock_mutex_acquire(m, 5000);
  return (void *)rc;
}

/* Finding 4: a pipelined release whose reply is NOSCRIPT is run again by
 * read_one() (src/redis/pipeline.c) through dlock__redis_release(e->m),
 * which sends the handle's token as it is when the reply is read, not the
 * token that was released. A handle is shared by threads (acquire waits
 * locally for another thread's hold): thread 2 waits on the handle, thread 1
 * releases with dlock_mutex_release_async after the script cache was
 * flushed (so its release did not run), thread 2 acquires with a new token
 * once thread 1's lease ends, and reading thread 1's outcome deletes thread
 * 2's key: thread 2 believes it holds the lock while anyone may take it.
 * (Since finding 6's fix, thread 2's acquire reads thread 1's outcome
 * first; the resend carries the released token either way.) */
TEST(review_a_resent_pipelined_release_never_deletes_the_next_holders_key) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_mutex *m = test_mutex(c, "rv:pipe:noscript", 1500);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, take_shared, m), 0);
  th_sleep_ms(200); /* the other thread waits locally for our hold */
  char out[64];
  cli(out, sizeof out, "SCRIPT FLUSH");
  ASSERT_OK(dlock_mutex_release_async(m)); /* its EVALSHA answers NOSCRIPT: it did not run */
  void *trc = NULL;
  pthread_join(t, &trc);
  ASSERT_EQ((intptr_t)trc, 0); /* the other thread holds it now, with its own token */
  dlock_mutex_release_result(m); /* our outcome, if the other thread's acquire did not read it */
  cli(out, sizeof out, "EXISTS rv:pipe:noscript");
  if (strcmp(out, "1") != 0) TEST_FAIL("the key of the thread that holds the lock now was deleted");
  dlock_mutex *other = test_mutex(c, "rv:pipe:noscript", 1500);
  ASSERT_STATUS(dlock_mutex_acquire(other, 0), DLOCK_EBUSY);
  dlock_mutex_free(other);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct latch_wait_arg {
  dlock_latch *l;
  int rc;
  long long took_ms;
} latch_wait_arg;

static void *latch_wait_thread(void *arg) {
  latch_wait_arg *w = arg;
  long long t0 = th_now_ms();
  w->rc = dlock_latch_wait(w->l, 6000);
  w->took_ms = th_now_ms() - t0;
  return NULL;
}

/* Finding 5: dlock__redis_latch_wait (src/redis/latch.c) subscribes first
 * (waiting for the server to confirm) and only then takes the cancel
 * generation (m->wait_gen = m->cancel_gen): a dlock_latch_cancel() made
 * while the wait is subscribing is forgotten, and the wait runs its whole
 * wait_ms. The server is paused (CLIENT PAUSE) so that the subscription of
 * the wait's first look takes a second; the cancel comes in that second. */
TEST(review_a_latch_cancel_during_the_waits_subscription_ends_the_wait) {
  dlock_client *c = client();
  dlock_latch *l = NULL;
  ASSERT_OK(dlock_latch_new(&l, c, "rv:latch:cancel"));
  ASSERT_OK(dlock_latch_set(l, 1, 60000));
  char out[64];
  cli(out, sizeof out, "CLIENT PAUSE 1200 ALL");
  latch_wait_arg w = {l, 0, 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, latch_wait_thread, &w), 0);
  th_sleep_ms(300);
  dlock_latch_cancel(l); /* the wait is in progress: it must end */
  pthread_join(t, NULL);
  if (w.rc != DLOCK_ECANCELED)
    TEST_FAIL("canceled during its subscription, the wait answered %d after %lld ms", w.rc, w.took_ms);
  ASSERT(w.took_ms < 3000);
  dlock_latch_free(l);
  dlock_client_free(c);
}

typedef struct cycle_arg {
  dlock_mutex *m;
  int acquire_rc, result_rc;
} cycle_arg;

/* Acquire the shared handle (waiting locally for the other thread), then
 * release it pipelined and read that outcome. */
static void *cycle_shared(void *arg) {
  cycle_arg *a = arg;
  a->acquire_rc = dlock_mutex_acquire(a->m, 5000);
  a->result_rc = -999;
  if (a->acquire_rc == 0 && dlock_mutex_release_async(a->m) == 0) a->result_rc = dlock_mutex_release_result(a->m);
  return NULL;
}

/* Finding 6: dlock.h: "The outcome is never dropped: ... until then the
 * next acquire on 'm' first reads it and, if it is a failure, returns that
 * failure". dlock_mutex_acquire (src/core/mutex.c) reads a pending outcome
 * before it waits locally for another thread's hold on the same handle; when
 * that thread then releases with dlock_mutex_release_async, the waiting
 * acquire goes on without reading it, and its own pipelined release
 * mixes it with its own: its _result answers the first thread's failure
 * (rel_state is DONE with that one, so its own reply is not awaited), and
 * the first thread's _result finds nothing (DLOCK_EINVAL). Here the first
 * thread's release fails (its lease had run out: ENOTHELD); the second
 * thread, whose release did delete its key, is told ENOTHELD. */
TEST(review_a_failed_pipelined_release_is_reported_even_when_another_thread_takes_the_handle) {
  dlock_client *c = client();
  dlock_mutex *m = test_mutex(c, "rv:pipe:drop", 600);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  cycle_arg a = {m, -999, -999};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, cycle_shared, &a), 0);
  th_sleep_ms(900); /* our lease ends: the release below finds nothing */
  ASSERT_OK(dlock_mutex_release_async(m));
  pthread_join(t, NULL);
  int ours = dlock_mutex_release_result(m);
  /* The second thread held the key: its own release cannot have failed. */
  if (a.acquire_rc == 0 && a.result_rc != 0)
    TEST_FAIL("the second thread's release, which held the key, answered %d (the first thread's outcome?); "
              "the first thread's _result answered %d", a.result_rc, ours);
  if (a.acquire_rc != DLOCK_ENOTHELD && ours != DLOCK_ENOTHELD)
    TEST_FAIL("the failed release (ENOTHELD) was dropped: the other thread's acquire answered %d, its own "
              "release %d, and our _result %d", a.acquire_rc, a.result_rc, ours);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct mutex_wait_arg {
  dlock_mutex *m;
  int rc;
} mutex_wait_arg;

static void *mutex_wait_thread(void *arg) {
  mutex_wait_arg *w = arg;
  w->rc = dlock_mutex_acquire(w->m, 6000);
  if (w->rc == 0) dlock_mutex_release(w->m);
  return NULL;
}

/* Finding 7 (fixed since: each kind's record has its own shape and a
 * hand-off grants only its own kind's, docs/keys.md): the kinds share the wait queue {K}:queue/{K}:waiters,
 * and dlock_sem_grant (prelude.lua) reads a mutex waiter's record
 * ("exp|claim|token|n<nonce>|info") as a semaphore waiter's
 * ("exp|claim|token|info"): a semaphore's acquire on a name whose mutex has
 * just ended (here: its keys deleted, as by expiry) hands a permit to the
 * waiting mutex's token. That token never confirms it (the mutex waiter then
 * fails with WRONGTYPE), so the permit is held by nobody until its claim
 * ends, and the semaphore's caller is told "all permits held" while none
 * is. (dlock_grant_next reads a semaphore waiter's record as a mutex
 * waiter's the same way.) */
TEST(review_a_semaphore_never_grants_a_permit_to_a_waiting_mutex) {
  const char *name = "rv:kind:grant";
  dlock_client *c = client(), *c2 = client();
  dlock_mutex *h = test_mutex(c, name, 10000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  mutex_wait_arg w = {test_mutex(c2, name, 10000), 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, mutex_wait_thread, &w), 0);
  int queued = 0;
  for (int i = 0; i < 300 && !queued; i++) {
    queued = info_of(c, name).waiters == 1;
    if (!queued) th_sleep_ms(10);
  }
  ASSERT(queued);
  char out[64];
  cli(out, sizeof out, "DEL rv:kind:grant {rv:kind:grant}:meta"); /* the mutex's hold ends */
  dlock_semaphore *s = test_semaphore(c, name, 1, 5000);
  int rc = dlock_semaphore_acquire(s, 0);
  cli(out, sizeof out, "ZCARD rv:kind:grant");
  pthread_join(t, NULL);
  if (rc != 0)
    TEST_FAIL("no permit was held, yet the semaphore answered %d (permits held: %s, granted to the mutex waiter)",
              rc, out);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_mutex_release(h);
  dlock_mutex_free(h);
  dlock_mutex_free(w.m);
  dlock_client_free(c2);
  dlock_client_free(c);
}

typedef struct latch_set_arg {
  dlock_latch *l;
  int rc;
} latch_set_arg;

static void *latch_set_thread(void *arg) {
  latch_set_arg *a = arg;
  a->rc = dlock_latch_set(a->l, 1, 60000);
  return NULL;
}

/* Finding 8: dlock__redis_latch_set resends latch_set.lua after a lost
 * reply, "twice-safe: a second run with the same token finds the latch set
 * by it and answers 'set' again (even when counted down meanwhile)"; but
 * latch_set.lua recognises its own token only while the count is above
 * zero. A latch counted down to zero between the two runs is set again to
 * the full count by the resend: it opened, woke its waiters, and closes
 * again, so every later waiter waits for count-downs that never come (until
 * the expiry, then DLOCK_ENOLATCH: "never opens"). The fault proxy drops
 * the first reply and delays the resend; the count-down goes straight to
 * the server in between. */
TEST(review_a_resent_latch_set_does_not_close_a_latch_that_opened_meanwhile) {
  dlock_client *direct = client();
  dlock_latch *down = NULL;
  ASSERT_OK(dlock_latch_new(&down, direct, "rv:latch:resend"));
  dlock_client *c = test_client(fp_url(fp));
  dlock_latch *l = NULL;
  ASSERT_OK(dlock_latch_new(&l, c, "rv:latch:resend"));
  fp_pass(fp);
  int before = fp_dropped(fp);
  fp_delay(fp, 400);
  fp_drop_reply(fp, "{rv:latch:resend}:latch", 1);
  latch_set_arg a = {l, -999};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, latch_set_thread, &a), 0);
  int dropped = fp_wait_dropped(fp, before + 1, 5000) > before;
  int64_t left = -1;
  int down_rc = dropped ? dlock_latch_count_down(down, &left) : -999; /* before the resend arrives */
  pthread_join(t, NULL);
  fp_delay(fp, 0);
  fp_pass(fp);
  ASSERT(dropped);
  ASSERT_OK(down_rc);
  ASSERT_EQ(left, 0); /* the first run had set it: it is open now */
  ASSERT_OK(a.rc);    /* the resend answered "set" */
  int64_t n = -1;
  ASSERT_OK(dlock_latch_count(down, &n));
  if (n != 0) TEST_FAIL("the latch opened (counted down to 0), and the resent set closed it again: count %lld",
                        (long long)n);
  ASSERT_OK(dlock_latch_wait(down, 0));
  dlock_latch_free(l);
  dlock_latch_free(down);
  dlock_client_free(c);
  dlock_client_free(direct);
}

/* Finding 9: a permit or read-write hold whose lease ran out, on a name that
 * is a mutex's since (a name is one kind at a time, and free for any kind
 * once its holds are gone), is answered with DLOCK_EWRONGTYPE instead of
 * DLOCK_ENOTHELD: sem_release.lua and rw_release.lua run their kind checks
 * (dlock_sem_check, rw_check) before looking for the token, and
 * sem_extend.lua's ZSCORE fails on the mutex's string. dlock.h: "DLOCK_
 * ENOTHELD when ... Redis no longer has our token"; an extend or a renewal
 * that finds the hold gone marks it lost (DLOCK_LOST_EXPIRED), but the
 * WRONGTYPE error leaves the handle "not lost" (the watchdog retries it as
 * unreachable until the deadline, then says DLOCK_LOST_UNREACHABLE). */
TEST(review_a_hold_whose_name_became_a_mutex_is_not_held_not_wrongtype) {
  dlock_client *c = client();
  char out[64];
  /* A late release of a permit. */
  dlock_semaphore *s = test_semaphore(c, "rv:kind:late", 2, 400);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  th_sleep_ms(600);
  dlock_mutex *m = test_mutex(c, "rv:kind:late", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int rc = dlock_semaphore_release(s);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a permit: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_mutex_is_held(m), 1); /* touched nothing */
  /* An extend of a permit the server no longer has (its keys went, as by
   * expiry, while our deadline had not passed yet). */
  ASSERT_OK(dlock_mutex_release(m));
  dlock_semaphore *s2 = test_semaphore(c, "rv:kind:late", 2, 10000);
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  cli(out, sizeof out, "DEL rv:kind:late {rv:kind:late}:meta");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  rc = dlock_semaphore_extend(s2, 10000);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("extend of a permit gone: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_semaphore_lost(s2), DLOCK_LOST_EXPIRED);
  dlock_semaphore_release(s2);
  ASSERT_OK(dlock_mutex_release(m));
  /* A late release of a read hold. */
  dlock_rwlock *r = test_rwlock(c, "rv:kind:late", DLOCK_RW_READ, 400);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  th_sleep_ms(600);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  rc = dlock_rwlock_release(r);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a read hold: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_rwlock_free(r);
  dlock_semaphore_free(s2);
  dlock_semaphore_free(s);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Finding 9, the mutex's side: release.lua and extend.lua GET the key, which
 * fails (WRONGTYPE) once the name is a semaphore's or read-write lock's
 * ZSET: a late release of an expired mutex hold answers EWRONGTYPE, not
 * ENOTHELD, and an extend (or renewal) does not mark the hold lost. */
TEST(review_a_mutex_hold_whose_name_became_a_semaphore_is_not_held_not_wrongtype) {
  dlock_client *c = client();
  char out[64];
  load_release_script(c);
  dlock_mutex *m = test_mutex(c, "rv:kind:late2", 400);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  th_sleep_ms(600);
  dlock_semaphore *s = test_semaphore(c, "rv:kind:late2", 2, 10000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  int rc = dlock_mutex_release(m);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a mutex hold: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_mutex *m2 = test_mutex(c, "rv:kind:late2", 10000);
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  cli(out, sizeof out, "DEL rv:kind:late2 {rv:kind:late2}:meta");
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  rc = dlock_mutex_extend(m2, 10000);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("extend of a mutex hold gone: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT(dlock_mutex_lost(m2) != DLOCK_LOST_NONE);
  dlock_mutex_release(m2);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST_MAIN()
