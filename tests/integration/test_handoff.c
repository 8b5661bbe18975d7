/*
 * test_handoff.c - a hand-off completes the waiter's acquire without a
 * confirming call: the grant message that names the waiter's acquire call
 * (its nonce) is enough. The release is then the only command of a
 * hand-off; the fence is the one Redis recorded; the hold runs on the claim
 * lease until the watchdog sets the full lease (fixed or renewed); a waiter
 * killed right after its hand-off frees the lock when the claim ends; a
 * message naming an older call only wakes the waiter.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
}

void test_teardown(void) { th_redis_stop(&srv); }

/* Calls of 'cmd' in an INFO commandstats text (0 if absent). */
static long long calls_of(const char *stats, const char *cmd) {
  char pat[64];
  snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
  const char *p = strstr(stats, pat);
  return p ? atoll(p + strlen(pat)) : 0;
}

/* A waiter thread: acquire, note what it got, hold until told to release. */
/* Static, not on a test's stack: a failed test leaves its thread behind. */
typedef struct waiter {
  dlock_mutex *m;
  int64_t wait_ms;
  int rc;
  uint64_t fence;
  long long returned_at;       /* th_now_ms() */
  dlock_mono_ms valid_until;   /* right after the acquire */
  dlock_mono_ms mono_returned; /* dlock_mono_now() right after the acquire */
  char meta_fence[256];        /* {K}:fence (the hold's record) right after the acquire */
  char key[64];
  atomic_int done, release;
  int release_rc;
} waiter;

static void *wait_hold(void *arg) {
  waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, w->wait_ms);
  w->mono_returned = dlock_mono_now();
  w->returned_at = th_now_ms();
  if (w->rc == 0) {
    w->fence = dlock_mutex_fence(w->m);
    w->valid_until = dlock_mutex_valid_until(w->m);
    th_redis_cli(&srv, w->meta_fence, sizeof w->meta_fence, "GET '{%s}:fence'", w->key);
  }
  atomic_store(&w->done, 1);
  if (w->rc == 0) {
    while (!atomic_load(&w->release)) th_sleep_ms(5);
    w->release_rc = dlock_mutex_release(w->m);
  }
  return NULL;
}

static void start_waiter(waiter *w, pthread_t *th, dlock_mutex *m, const char *key, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->m = m;
  w->wait_ms = wait_ms;
  w->rc = -99;
  snprintf(w->key, sizeof w->key, "%s", key);
  ASSERT_EQ(pthread_create(th, NULL, wait_hold, w), 0);
}

/* Until one waiter of 'key' is queued and its client subscribed to its
 * wake-up channel (so that it hears the message and does not only re-check). */
static void until_queued(const char *key) {
  char queued[32] = "", chans[256] = "";
  for (int i = 0; i < 1000; i++) {
    th_redis_cli(&srv, queued, sizeof queued, "ZCARD '{%s}:queue'", key);
    th_redis_cli(&srv, chans, sizeof chans, "PUBSUB CHANNELS '{%s}:w:*'", key);
    if (!strcmp(queued, "1") && chans[0]) break;
    th_sleep_ms(5);
  }
  ASSERT_STR_EQ(queued, "1");
  ASSERT(chans[0]);
  /* Its look right after subscribing, and a look after the wake-up a new
   * subscriber connection gives every waiter, are done: its queue record
   * (each acquire call writes its own expiry and nonce) stays the same. */
  char wid[128], rec[512], before[512] = "";
  th_redis_cli(&srv, wid, sizeof wid, "ZRANGE '{%s}:queue' 0 0", key);
  for (int i = 0; i < 20; i++) {
    th_sleep_ms(100);
    th_redis_cli(&srv, rec, sizeof rec, "HGET '{%s}:waiters' '%s'", key, wid);
    if (!strcmp(rec, before)) break;
    snprintf(before, sizeof before, "%s", rec);
  }
}

static void until_done(waiter *w) {
  for (int i = 0; i < 2000 && !atomic_load(&w->done); i++) th_sleep_ms(5);
  ASSERT(atomic_load(&w->done));
}

TEST(a_hand_off_costs_one_command_the_release_and_gives_the_fence_redis_recorded) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  /* The waiter's lease of 3 s: the claim is the whole lease, so no renewal
   * follows either. The holder's is long: a busy machine may take seconds to
   * queue the waiter, and the release must find the lock still held. */
  dlock_mutex *holder = test_mutex(c1, "h:one", 30000), *wm = test_mutex(c2, "h:one", 3000);
  /* Load the release script first: a first EVALSHA answered NOSCRIPT is
   * sent again as EVAL, which would count twice. */
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  ASSERT_OK(dlock_mutex_release(holder));
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  uint64_t holder_fence = dlock_mutex_fence(holder);
  static waiter w;
  pthread_t th;
  start_waiter(&w, &th, wm, "h:one", 10000 * th_time_factor());
  until_queued("h:one");
  char stats[8192];
  th_redis_cli(&srv, stats, sizeof stats, "CONFIG RESETSTAT");
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_mutex_release(holder));
  until_done(&w);
  ASSERT_OK(w.rc);
  ASSERT(w.returned_at - t0 < 1500 * th_time_factor()); /* the message, not a re-check */
  th_sleep_ms(300);
  th_redis_cli(&srv, stats, sizeof stats, "INFO commandstats");
  /* The release, and no confirming call by the waiter (before: 2). */
  if (calls_of(stats, "evalsha") + calls_of(stats, "eval") != 1) fprintf(stderr, "%s\n", stats);
  ASSERT_EQ(calls_of(stats, "evalsha") + calls_of(stats, "eval"), 1);
  ASSERT(w.fence > holder_fence);
  ASSERT_EQ(strtoull(w.meta_fence, NULL, 10), w.fence);
  /* The local deadline counts from before the grant: at most the claim. */
  ASSERT(w.valid_until > w.mono_returned);
  ASSERT(w.valid_until - w.mono_returned <= 3000);
  atomic_store(&w.release, 1);
  pthread_join(th, NULL);
  ASSERT_OK(w.release_rc);
  dlock_mutex_free(holder);
  dlock_mutex_free(wm);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

/* Hold 'name' through a handle with 'lease_ms' (0: watchdog) taken by
 * hand-off, past the 3 s claim: the watchdog must have set the full lease. */
static void hold_past_the_claim(const char *name, int64_t lease_ms) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  dlock_mutex *holder = test_mutex(c1, name, 20000), *wm = test_mutex(c2, name, lease_ms);
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  static waiter w;
  pthread_t th;
  start_waiter(&w, &th, wm, name, 10000 * th_time_factor());
  until_queued(name);
  ASSERT_OK(dlock_mutex_release(holder));
  until_done(&w);
  ASSERT_OK(w.rc);
  /* A third of the claim (1 s) and some: the full lease is set by now. */
  th_sleep_ms(1800);
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "PTTL %s", name);
  ASSERT(atoll(out) > 3000);
  th_sleep_ms(2000); /* past the claim's end */
  ASSERT_EQ(dlock_mutex_lost(wm), DLOCK_LOST_NONE);
  ASSERT(dlock_mutex_valid_until(wm) > dlock_mono_now() + 1000);
  char token_key[64];
  th_redis_cli(&srv, token_key, sizeof token_key, "EXISTS %s", name);
  ASSERT_STR_EQ(token_key, "1");
  atomic_store(&w.release, 1);
  pthread_join(th, NULL);
  ASSERT_OK(w.release_rc);
  dlock_mutex_free(holder);
  dlock_mutex_free(wm);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

TEST(a_fixed_lease_taken_by_hand_off_gets_its_full_lease_from_the_watchdog) { hold_past_the_claim("h:fixed", 10000); }

TEST(a_watchdog_hold_taken_by_hand_off_is_renewed_past_the_claim) { hold_past_the_claim("h:wd", 0); }

static int take_and_die(void *arg) {
  (void)arg;
  /* Forked before the parent started any thread (TSan refuses threads after
   * a multi-threaded fork): wait until the parent holds the lock. */
  char out[64] = "";
  for (int i = 0; i < 2000 && strcmp(out, "1") != 0; i++) {
    th_redis_cli(&srv, out, sizeof out, "EXISTS h:kill");
    if (strcmp(out, "1") != 0) th_sleep_ms(5);
  }
  if (strcmp(out, "1") != 0) return 1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return 1;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "h:kill", NULL) != 0) return 1; /* watchdog mode: a 30 s lease */
  if (dlock_mutex_acquire(m, 20000) != 0) return 1;
  raise(SIGKILL); /* before any renewal */
  return 2;
}

TEST(a_waiter_killed_right_after_its_hand_off_frees_the_lock_when_the_claim_ends) {
  pid_t pid = th_spawn(take_and_die, NULL);
  dlock_client *c = test_client(srv.url);
  dlock_mutex *holder = test_mutex(c, "h:kill", 20000);
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  until_queued("h:kill");
  ASSERT_OK(dlock_mutex_release(holder));
  int st = th_wait(pid, 20000);
  ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  /* The key runs on the claim (3 s), not on the dead waiter's 30 s lease
   * (on a busy machine the claim may have ended already: -2, no key). */
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "PTTL h:kill");
  long long pttl = atoll(out);
  if (!(pttl == -2 || (pttl > 0 && pttl <= 3000))) TEST_FAIL("PTTL h:kill is %lld, not at most the claim's 3000", pttl);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_mutex_acquire(holder, 10000 * th_time_factor()));
  /* Well under the dead waiter's 30 s lease. */
  ASSERT(th_now_ms() - t0 < 8000);
  ASSERT_OK(dlock_mutex_release(holder));
  dlock_mutex_free(holder);
  dlock_client_free(c);
}

TEST(a_grant_message_naming_another_call_only_wakes_the_waiter) {
  dlock_client *c1 = test_client(srv.url), *c2 = test_client(srv.url);
  dlock_mutex *holder = test_mutex(c1, "h:forge", 20000), *wm = test_mutex(c2, "h:forge", 20000);
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  static waiter w;
  pthread_t th;
  start_waiter(&w, &th, wm, "h:forge", 15000 * th_time_factor());
  until_queued("h:forge");
  char wid[128], rec[512], chan[256];
  th_redis_cli(&srv, wid, sizeof wid, "ZRANGE '{h:forge}:queue' 0 0");
  th_redis_cli(&srv, rec, sizeof rec, "HGET '{h:forge}:waiters' '%s'", wid);
  th_redis_cli(&srv, chan, sizeof chan, "PUBSUB CHANNELS '{h:forge}:w:*'");
  /* expiry|claim|token|n<nonce>|info */
  const char *n = strstr(rec, "|n");
  ASSERT(n != NULL);
  unsigned long long nonce = strtoull(n + 2, NULL, 10);
  ASSERT(nonce >= 1);
  char out[64];
  /* An older call's nonce, and no nonce (a script before nonces): a wake-up only. */
  th_redis_cli(&srv, out, sizeof out, "PUBLISH '%s' '%s 424242 %llu'", chan, wid, nonce - 1);
  ASSERT_STR_EQ(out, "1");
  th_sleep_ms(300);
  ASSERT(!atomic_load(&w.done));
  th_redis_cli(&srv, out, sizeof out, "PUBLISH '%s' '%s 424242'", chan, wid);
  ASSERT_STR_EQ(out, "1");
  th_sleep_ms(300);
  ASSERT(!atomic_load(&w.done));
  ASSERT_OK(dlock_mutex_release(holder));
  until_done(&w);
  ASSERT_OK(w.rc);
  ASSERT(w.fence != 424242);
  ASSERT_EQ(strtoull(w.meta_fence, NULL, 10), w.fence);
  atomic_store(&w.release, 1);
  pthread_join(th, NULL);
  ASSERT_OK(w.release_rc);
  dlock_mutex_free(holder);
  dlock_mutex_free(wm);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

/* ---- The review of b28f110, d9e4c88 and d3f4d89 (branch rev2), the Redis
 * finding: FAILED on the code as reviewed (labels review: ctest
 * review/test_handoff). ---- */
/* ---- d3f4d89, finding: a crashed waiter's record of another kind is never
 * dropped, and 32 of them at the head stop every hand-off ----
 *
 * dlock_queue_pop() (src/redis/lua/prelude.lua) leaves a record of another
 * kind in place whatever its expiry: "its waiter learns the new kind at its
 * next look, which withdraws it". A waiter that crashed never looks again.
 * Before the commit such a record, once expired, was dropped by the next
 * hand-off; now it stays as long as the queue keys live, and every new
 * waiter lengthens them. dlock_grant_next() and dlock_sem_grant() read only
 * the queue's first 32 entries: once 32 dead records of another kind lead
 * the queue, no release hands anything over; each waiter gets its turn only
 * at its re-check (2 s), in no particular order (FIFO lost). */
struct crowd {
  const char *url;
  const char *name;
  int go[2]; /* a pipe: the child starts once the parent holds the name */
};

static int crowd_child(void *arg) {
  struct crowd *cr = arg;
  char b;
  close(cr->go[1]);
  if (read(cr->go[0], &b, 1) != 1) return 1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = cr->url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return 1;
  /* 32 mutex waiters, each in its own thread; the parent kills us all. */
  static th_waiter w[32];
  pthread_t t[32];
  for (int i = 0; i < 32; i++) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 10000;
    if (dlock_mutex_new(&w[i].m, c, cr->name, &mo) != 0) return 1;
    w[i].wait_ms = 60000;
    pthread_create(&t[i], NULL, th_wait_for_lock, &w[i]);
  }
  pause();
  return 0;
}

/* Review of b28f110, d9e4c88 and d3f4d89 (branch rev2): the d3f4d89 finding. */
REVIEW_TEST(review_dead_waiters_of_another_kind_do_not_stop_the_hand_offs) {
  const char *name = "rv2:kinds";
  /* The child is forked before this process has a client (and threads). */
  struct crowd cr = {srv.url, name, {-1, -1}};
  ASSERT(pipe(cr.go) == 0);
  pid_t kid = th_spawn(crowd_child, &cr);
  close(cr.go[0]);
  dlock_client *c = test_client(srv.url);
  /* The name is a mutex, held for 1.5 s; 32 waiters of a client that then
   * crashes (SIGKILL) are queued for it. */
  dlock_mutex *h = test_mutex(c, name, 1500L * th_time_factor());
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  ASSERT(write(cr.go[1], "g", 1) == 1);
  close(cr.go[1]);
  char out[256];
  long long until = th_now_ms() + 10000L * th_time_factor();
  for (;;) {
    th_redis_cli(&srv, out, sizeof out, "ZCARD {%s}:queue", name);
    if (atoi(out) >= 32) break;
    if (th_now_ms() > until) {
      kill(kid, SIGKILL);
      th_wait(kid, 5000);
      TEST_FAIL("the 32 waiters did not queue (ZCARD %s)", out);
    }
    th_sleep_ms(20);
  }
  kill(kid, SIGKILL);
  th_wait(kid, 5000);
  /* The hold runs out (never released: nothing is handed to the dead). */
  until = th_now_ms() + 5000L * th_time_factor();
  for (;;) {
    th_redis_cli(&srv, out, sizeof out, "EXISTS %s", name);
    if (strcmp(out, "0") == 0) break;
    if (th_now_ms() > until) TEST_FAIL("the mutex hold did not run out");
    th_sleep_ms(5);
  }
  /* The name is now a semaphore of one permit: A holds it, B waits (its
   * re-checks keep the queue keys alive). */
  dlock_semaphore *a = test_semaphore(c, name, 1, 20000), *b = test_semaphore(c, name, 1, 20000);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  th_waiter w = {.m = dlock_semaphore_mutex(b), .wait_ms = 20000};
  pthread_t t;
  pthread_create(&t, NULL, th_wait_for_lock, &w);
  until = th_now_ms() + 5000L * th_time_factor();
  for (;;) { /* B is queued (33 entries) */
    th_redis_cli(&srv, out, sizeof out, "ZCARD {%s}:queue", name);
    if (atoi(out) >= 33 || th_now_ms() > until) break;
    th_sleep_ms(10);
  }
  ASSERT_EQ(atoi(out), 33);
  /* The dead records' own expiry (the mutex holder's pttl + 2 s) passes. */
  th_sleep_ms(3500);
  th_sleep_ms(100);
  long long released = th_now_ms();
  ASSERT_OK(dlock_semaphore_release(a));
  pthread_join(t, NULL);
  ASSERT_OK(w.rc);
  long long took = w.acquired_at - released;
  th_redis_cli(&srv, out, sizeof out, "ZCARD {%s}:queue", name);
  /* The release hands the permit to B at once (well under its 2 s re-check),
   * and the dead records are gone. */
  if (took > 1000L * th_time_factor() || atoi(out) != 0)
    TEST_FAIL("B got the permit %lld ms after the release (a hand-off takes a few ms); %s dead records of "
              "another kind still queued",
              took, out);
  dlock_mutex_free(h);
  dlock_semaphore_free(a);
  dlock_semaphore_free(b);
  dlock_client_free(c);
}

TEST_MAIN()
