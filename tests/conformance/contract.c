/*
 * contract.c - the mutex contract every backend keeps, on the public API:
 * exclusion under contention (a shared-file history), fences, reentrancy,
 * FIFO hand-off, waits with a deadline and cancel, watchdog renewal, kill -9
 * of a holder, lost replies, status/list/force release, the guard, the
 * scheduler's once-per-tick, the multi-lock, and (last: it may disturb a
 * deployment) the loss at the local deadline of a frozen server.
 *
 * Handles and clients come from the conf_* helpers (cleanup.c), which the
 * runner frees after each scenario, also after a failure.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conformance.h"
#include "harness.h"
#include "test.h"
#include "metrics_text.h"

static long slack_ms(long ms) { return ms * th_time_factor(); }

/* ---- Exclusion under contention ---- */

#define EX_PROCS 4
#define EX_ROUNDS 5

/* One line per entry and exit of the critical section, appended (O_APPEND:
 * one write is one line) to a file every process shares. */
static void history_line(int fd, char what, uint64_t fence) {
  char line[64];
  int n = snprintf(line, sizeof line, "%c %d %llu\n", what, (int)getpid(), (unsigned long long)fence);
  if (write(fd, line, (size_t)n) != n) _exit(20);
}

static int contender(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = conf_fx->client("ex");
  if (!c) return 10;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "contended", NULL) != 0) return 11;
  for (int r = 0; r < EX_ROUNDS; r++) {
    if (dlock_mutex_acquire(m, slack_ms(60000)) != 0) {
      fprintf(stderr, "contender %d: %s\n", (int)getpid(), dlock_last_error());
      return 12;
    }
    history_line(fd, 'E', dlock_mutex_fence(m));
    th_sleep_ms(20);
    history_line(fd, 'X', dlock_mutex_fence(m));
    if (dlock_mutex_release(m) != 0) {
      fprintf(stderr, "contender %d release: %s\n", (int)getpid(), dlock_last_error());
      return 13;
    }
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

static void exclusion_under_contention_never_two_holders(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/dlock-conf-history-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl | O_APPEND);
  pid_t pid[EX_PROCS];
  for (int i = 0; i < EX_PROCS; i++) pid[i] = conf_spawn(contender, fd);
  int bad_child = 0;
  for (int i = 0; i < EX_PROCS; i++) {
    int st = th_wait(pid[i], slack_ms(120000));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad_child = 1;
  }
  close(fd);
  FILE *f = fopen(path, "r");
  unlink(path);
  ASSERT(f != NULL);
  char what;
  int who, holder = 0, entries = 0, line = 0;
  unsigned long long fence, last_fence = 0;
  char why[200] = "";
  while (fscanf(f, " %c %d %llu", &what, &who, &fence) == 3) {
    line++;
    if (what == 'E') {
      if (holder && !why[0])
        snprintf(why, sizeof why, "line %d: process %d entered while %d was inside", line, who, holder);
      if ((conf_fx->caps & CONF_FENCE) && fence <= last_fence && !why[0])
        snprintf(why, sizeof why, "line %d: fence %llu after %llu", line, fence, last_fence);
      holder = who;
      last_fence = fence;
      entries++;
    } else {
      if (holder != who && !why[0]) snprintf(why, sizeof why, "line %d: %d left, but %d was inside", line, who, holder);
      holder = 0;
    }
  }
  fclose(f);
  if (why[0]) TEST_FAIL("two holders at once on %s: %s", conf_fx->name, why);
  ASSERT_EQ(bad_child, 0);
  ASSERT_EQ(entries, EX_PROCS * EX_ROUNDS);
}

/* ---- Fences ---- */

static void fences_rise_strictly_across_holders(void) {
  dlock_client *a = conf_client("fence"), *b = conf_client("fence");
  dlock_mutex *ma = conf_mutex(a, "f", NULL), *mb = conf_mutex(b, "f", NULL);
  if (!(conf_fx->caps & CONF_FENCE)) {
    ASSERT_OK(dlock_mutex_acquire(ma, 0));
    ASSERT_EQ(dlock_mutex_fence(ma), 0); /* documented: no fence */
    ASSERT_OK(dlock_mutex_release(ma));
    conf_not_offered("%s issues no fence (fence 0), as its docs say", conf_fx->name);
  }
  uint64_t last = 0;
  for (int i = 0; i < 6; i++) {
    dlock_mutex *m = i % 2 ? mb : ma;
    ASSERT_OK(dlock_mutex_acquire(m, slack_ms(10000)));
    uint64_t f = dlock_mutex_fence(m);
    if (f <= last)
      TEST_FAIL("acquisition %d got fence %llu after %llu", i, (unsigned long long)f, (unsigned long long)last);
    last = f;
    ASSERT_OK(dlock_mutex_release(m));
  }
}

/* ---- Reentrancy ---- */

static void a_holding_thread_reenters_with_the_same_fence(void) {
  dlock_client *a = conf_client("reent"), *b = conf_client("reent");
  dlock_mutex *m = conf_mutex(a, "r", NULL), *other = conf_mutex(b, "r", NULL);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t f = dlock_mutex_fence(m);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(dlock_mutex_fence(m), f);
  ASSERT_OK(dlock_mutex_release(m)); /* the inner hold */
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_STATUS(dlock_mutex_acquire(other, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(m)); /* the outer one */
  ASSERT_OK(dlock_mutex_acquire(other, slack_ms(10000)));
  ASSERT_OK(dlock_mutex_release(other));
}

/* ---- FIFO hand-off ---- */

#define FIFO_WAITERS 3

typedef struct fifo_waiter {
  dlock_mutex *m;
  atomic_int *next;
  int rc, place;
} fifo_waiter;

static void *fifo_wait(void *arg) {
  fifo_waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, slack_ms(60000));
  w->place = atomic_fetch_add(w->next, 1);
  if (w->rc == 0) {
    th_sleep_ms(30);
    dlock_mutex_release(w->m);
  }
  return NULL;
}

static void waiters_get_the_lock_in_arrival_order(void) {
  if (!(conf_fx->caps & CONF_QUEUE))
    conf_not_offered("%s keeps no wait queue (no arrival order, waiters not counted), as its docs say", conf_fx->name);
  dlock_client *h = conf_client("fifo");
  dlock_mutex *holder = conf_mutex(h, "q", NULL);
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  atomic_int next = 0;
  fifo_waiter w[FIFO_WAITERS];
  pthread_t t[FIFO_WAITERS];
  int started = 0, queued = 1;
  long wait_ms = slack_ms(conf_fx->caps & CONF_QUEUE ? 15000 : 1000);
  for (int i = 0; i < FIFO_WAITERS && queued; i++, started++) {
    w[i] = (fifo_waiter){.m = conf_mutex(conf_client("fifo"), "q", NULL), .next = &next, .rc = -1, .place = -1};
    pthread_create(&t[i], NULL, fifo_wait, &w[i]);
    queued = conf_wait_waiters(h, "q", i + 1, wait_ms);
  }
  /* The threads end before any verdict (their handles go with the scenario). */
  ASSERT_OK(dlock_mutex_release(holder));
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  if (!queued)
    TEST_FAIL("a waiter did not show in the lock's status within %ld ms (%lld waiters seen): %s keeps no wait "
              "queue, so nothing serves waiters in arrival order",
              wait_ms, (long long)conf_waiters(h, "q"), conf_fx->name);
  for (int i = 0; i < FIFO_WAITERS; i++) {
    ASSERT_OK(w[i].rc);
    if (w[i].place != i) TEST_FAIL("waiter %d (in arrival order) got the lock as number %d", i, w[i].place);
  }
}

/* ---- Wait with a deadline, and cancel ---- */

typedef struct forever {
  dlock_mutex *m;
  int rc;
  atomic_int done;
} forever;

static void *wait_forever(void *arg) {
  forever *w = arg;
  w->rc = dlock_mutex_acquire(w->m, DLOCK_WAIT_FOREVER);
  atomic_store(&w->done, 1);
  if (w->rc == 0) dlock_mutex_release(w->m);
  return NULL;
}

static void a_wait_ends_at_its_deadline_and_a_cancel_ends_it_sooner(void) {
  dlock_client *a = conf_client("wait"), *b = conf_client("wait"), *d = conf_client("wait");
  dlock_mutex *holder = conf_mutex(a, "w", NULL), *late = conf_mutex(b, "w", NULL),
              *canceled = conf_mutex(d, "w", NULL);
  ASSERT_OK(dlock_mutex_acquire(holder, 0));
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_mutex_acquire(late, 800), DLOCK_EBUSY);
  long long took = th_now_ms() - t0;
  if (took < 700 || took > 800 + slack_ms(10000)) TEST_FAIL("a wait of 800 ms returned after %lld ms", took);
  forever w = {.m = canceled};
  pthread_t t;
  pthread_create(&t, NULL, wait_forever, &w);
  /* The cancel must come once the wait began (it does not reach later
   * waits): seen in the status where waiters queue, else after a pause. */
  int queued = 1;
  if (conf_fx->caps & CONF_QUEUE)
    queued = conf_wait_waiters(a, "w", 1, slack_ms(15000));
  else
    th_sleep_ms(slack_ms(500));
  dlock_mutex_cancel(canceled);
  long long c0 = th_now_ms();
  for (int i = 0; i < 2000 && !atomic_load(&w.done); i++) th_sleep_ms(10);
  int done = atomic_load(&w.done);
  if (!done) dlock_mutex_release(holder); /* let the thread end, then fail */
  pthread_join(t, NULL);
  if (!done) TEST_FAIL("a canceled wait did not return within %ld ms", slack_ms(20000));
  ASSERT(queued);
  ASSERT_STATUS(w.rc, DLOCK_ECANCELED);
  if (th_now_ms() - c0 > slack_ms(10000)) TEST_FAIL("the cancel took %lld ms", th_now_ms() - c0);
  /* The canceled waiter left the queue: the next one gets the lock at once. */
  ASSERT(conf_wait_waiters(a, "w", -1, slack_ms(10000)));

  ASSERT_OK(dlock_mutex_release(holder));
  ASSERT_OK(dlock_mutex_acquire(late, slack_ms(10000)));
  ASSERT_OK(dlock_mutex_release(late));
}

/* ---- Watchdog ---- */

static void the_watchdog_keeps_a_hold_past_several_leases(void) {
  dlock_client *a = conf_client("dog"), *b = conf_client("dog");
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.watchdog_lease_ms = 1200;
  dlock_mutex *m = conf_mutex(a, "d", &o), *other = conf_mutex(b, "d", NULL);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  long long until = th_now_ms() + 4 * 1200;
  while (th_now_ms() < until) {
    if (dlock_mutex_lost(m) != DLOCK_LOST_NONE)
      TEST_FAIL("the hold was lost (%s) after %lld ms of a 1200 ms watchdog lease: %s",
                dlock_lost_reason_str(dlock_mutex_lost(m)), th_now_ms() - (until - 4 * 1200), dlock_mutex_errmsg(m));
    th_sleep_ms(100);
  }
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_STATUS(dlock_mutex_acquire(other, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_mutex_acquire(other, slack_ms(10000)));
  ASSERT_OK(dlock_mutex_release(other));
}

/* ---- kill -9 of a holder ---- */

static int hold_until_killed(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = conf_fx->client("kill");
  if (!c) return 1;
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.watchdog_lease_ms = 2000;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "k", &o) != 0 || dlock_mutex_acquire(m, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  for (;;) pause();
}

static void a_holder_killed_with_sigkill_frees_the_lock_after_its_lease(void) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = conf_spawn(hold_until_killed, p[1]);
  close(p[1]);
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  int up = poll(&pfd, 1, (int)slack_ms(30000)) == 1;
  char ch = 0;
  up = up && read(p[0], &ch, 1) == 1;
  close(p[0]);
  if (!up) {
    kill(pid, SIGKILL);
    th_wait(pid, 10000);
    TEST_FAIL("the holder process did not acquire (see its stderr)");
  }
  dlock_client *c = conf_client("kill");
  dlock_mutex *m = conf_mutex(c, "k", NULL);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  kill(pid, SIGKILL);
  th_wait(pid, 10000);
  ASSERT_OK(dlock_mutex_acquire(m, conf_fx->kill_free_ms + slack_ms(20000)));
  long long took = th_now_ms() - t0;
  printf("  the next holder got it %lld ms after the kill (lease or session: %lld ms)\n", took,
         (long long)conf_fx->kill_free_ms);
  if (took > conf_fx->kill_free_ms + slack_ms(10000))
    TEST_FAIL("the next holder waited %lld ms, the lease is %lld ms", took, (long long)conf_fx->kill_free_ms);
  ASSERT_OK(dlock_mutex_release(m));
}

/* ---- Lost replies ---- */

static void lost_replies_leave_one_holder_and_a_lock_that_frees(void) {
  CONF_NEED(proxy_client, "lose a reply (no fault proxy in front of it)");
  dlock_client *c = conf_fx->proxy_client("lost");
  if (!c) TEST_FAIL("a client through the fault proxy: %s", dlock_last_error());
  conf_adopt_client(c);
  dlock_client *other_c = conf_client("lost");
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.lease_ms = 3000;
  dlock_mutex *m = conf_mutex(c, "lostreply", &o), *other = conf_mutex(other_c, "lostreply", &o);
  int before = conf_fx->dropped();
  conf_fx->drop_next_reply(CONF_ACQUIRE, "lostreply");
  int rc = dlock_mutex_acquire(m, 0);
  if (conf_fx->dropped() <= before) TEST_FAIL("the proxy dropped no reply to the acquire (rc %s)", dlock_err_name(rc));
  if (rc != 0 && rc != DLOCK_EUNKNOWN) {
    /* A certain failure (advisory mode: the lock ended with its
     * connection) must mean that nobody holds the lock. */
    printf("  the acquire failed: %s\n", dlock_last_error());
    if (dlock_mutex_acquire(other, 0) != 0)
      TEST_FAIL("an acquire whose reply was lost returned %s, yet the lock is held: %s", dlock_err_name(rc),
                dlock_last_error());
    ASSERT_OK(dlock_mutex_release(other));
  }
  uint64_t first = dlock_mutex_fence(m);
  if (rc == 0) {
    ASSERT_STATUS(dlock_mutex_acquire(other, 0), DLOCK_EBUSY); /* one holder, us */
    ASSERT_EQ(dlock_mutex_is_held(m), 1);
    before = conf_fx->dropped();
    conf_fx->drop_next_reply(CONF_RELEASE, "lostreply");
    rc = dlock_mutex_release(m);
    if (conf_fx->dropped() <= before) TEST_FAIL("the proxy dropped no reply to the release");
    if (rc != 0 && rc != DLOCK_EUNKNOWN)
      TEST_FAIL("a release whose reply was lost returned %s: %s", dlock_err_name(rc), dlock_last_error());
  }
  printf("  acquire and release through lost replies: %s\n", dlock_err_name(rc));
  /* Whatever happened, the lock is free again within the lease. */
  ASSERT_OK(dlock_mutex_acquire(other, 3000 + slack_ms(15000)));
  if ((conf_fx->caps & CONF_FENCE) && dlock_mutex_fence(other) <= first)
    TEST_FAIL("fence %llu after %llu", (unsigned long long)dlock_mutex_fence(other), (unsigned long long)first);
  ASSERT_OK(dlock_mutex_release(other));
}

/* ---- Status, list, force release ---- */

static void count_name(const char *name, void *arg) {
  if (strcmp(name, "adm") == 0) ++*(int *)arg;
}

static void status_list_and_force_release_show_and_end_a_hold(void) {
  dlock_client *a = conf_client("admin"), *b = conf_client("admin");
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.owner_info = "conformance holder";
  dlock_mutex *m = conf_mutex(a, "adm", &o), *other = conf_mutex(b, "adm", NULL);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int seen = 0;
  int rc = dlock_lock_list(b, "ad*", count_name, &seen);
  conf_offered(CONF_ADMIN, "listing locks", rc < 0 ? rc : 0);
  ASSERT_EQ(seen, 1);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "adm", &info));
  ASSERT_EQ(info.held, 1);
  if (conf_fx->caps & CONF_FENCE) ASSERT_EQ(info.fence, dlock_mutex_fence(m));
  ASSERT_STR_EQ(info.owner_info, "conformance holder");
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(b, "adm", &was));
  ASSERT_EQ(was, 1);
  ASSERT_OK(dlock_mutex_acquire(other, slack_ms(10000)));
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD); /* never another owner's */
  ASSERT_EQ(dlock_mutex_is_held(other), 1);
  ASSERT_OK(dlock_mutex_release(other));
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "adm", &info));
  ASSERT_EQ(info.held, 0);
}

/* A forced release tells the holder at once where the server can notify it
 * (CONF_FORCE_NOTIFY): its lost fd fires within 2 s of a 30 s watchdog
 * lease, whose next renewal is ~8 s off; elsewhere the docs bound it by the
 * watchdog's next renewal (a third of the lease). Reason: deleted. */
static void a_forced_release_tells_the_holder_at_once(void) {
  int notify = (conf_fx->caps & CONF_FORCE_NOTIFY) != 0;
  dlock_client *a = conf_client("forced"), *b = conf_client("forced");
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.watchdog_lease_ms = notify ? 30000 : 3000; /* the bound below, kept short */
  dlock_mutex *m = conf_mutex(a, "fr", &o);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int fd = dlock_mutex_lost_fd(m);
  if (fd < 0) TEST_FAIL("no lost fd: %s", dlock_last_error());
  int seen = 0;
  int rc = dlock_lock_list(b, "fr", count_name, &seen); /* the refusal of a mode without admin */
  conf_offered(CONF_ADMIN, "listing and forcing locks", rc < 0 ? rc : 0);
  int was = 0;
  long long forced_at = th_now_ms();
  ASSERT_OK(dlock_lock_force_release(b, "fr", &was));
  ASSERT_EQ(was, 1);
  long bound = notify ? slack_ms(2000) : o.watchdog_lease_ms / 3 + slack_ms(2000);
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int signalled = poll(&pfd, 1, (int)bound) == 1;
  long long took = th_now_ms() - forced_at;
  printf("  %s: lost fd %s %lld ms after the forced release (bound %ld ms, %s)\n", conf_fx->name,
         signalled ? "readable" : "still quiet", took, bound, notify ? "notified" : "next renewal");
  if (!signalled)
    TEST_FAIL("the holder was not told of the forced release within %ld ms (%s)", bound,
              notify ? "the docs say the release notifies it" : "the docs bound it by the next renewal");
  if (dlock_mutex_lost(m) != DLOCK_LOST_DELETED)
    TEST_FAIL("the loss reads %s, not deleted", dlock_lost_reason_str(dlock_mutex_lost(m)));
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
}

/* A watch (dlock_watch_*, `dlock status --watch`) wakes when the lock is
 * taken and when it is given back: within the server's notification, or
 * within its bound where the backend has none (docs/cli.md, "Watching").
 * Where the docs say the server notifies (CONF_WATCH_NOTIFY), the watch has
 * no bound: it is not a timer's re-read. */
static void a_watch_wakes_when_a_lock_is_taken_and_given_back(void) {
  dlock_client *a = conf_client("watch"), *b = conf_client("watch");
  dlock_watch *w = NULL;
  ASSERT_OK(dlock_watch_new(&w, b));
  int rc = dlock_watch_add(w, "wl");
  if (rc) dlock_watch_free(w);
  ASSERT_OK(rc);
  int64_t limit = slack_ms(5000) + dlock_watch_bound_ms(w);
  if ((conf_fx->caps & CONF_WATCH_NOTIFY) && dlock_watch_bound_ms(w) != 0) {
    dlock_watch_free(w);
    TEST_FAIL("the watch re-reads every %lld ms, but the docs say this server notifies every change of a "
              "watched lock (docs/cli.md, \"Watching\")",
              (long long)limit - slack_ms(5000));
  }
  dlock_mutex *m = conf_mutex(a, "wl", NULL);
  int woke[2] = {0, 0}, held[2] = {-1, -1};
  for (int step = 0; step < 2; step++) {
    while (dlock_watch_wait(w, 0) > 0) {
    } /* what came before this step */
    rc = step == 0 ? dlock_mutex_acquire(m, 0) : dlock_mutex_release(m);
    if (rc) break;
    dlock_mono_ms t0 = dlock_mono_now();
    woke[step] = dlock_watch_wait(w, limit) > 0 && dlock_mono_now() - t0 <= limit;
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    if (dlock_lock_info_get(b, "wl", &info) == 0) held[step] = info.held;
  }
  dlock_watch_free(w);
  ASSERT_OK(rc);
  if (!woke[0] || !woke[1])
    TEST_FAIL("the watch did not wake within %lld ms of the %s", (long long)limit, woke[0] ? "release" : "acquire");
  ASSERT_EQ(held[0], 1);
  ASSERT_EQ(held[1], 0);
}

/* ---- The guard ---- */

static void the_guard_admits_the_newest_fence_and_refuses_an_older_one(void) {
  dlock_client *a = conf_client("guard"), *b = conf_client("guard");
  dlock_mutex *ma = conf_mutex(a, "g", NULL), *mb = conf_mutex(b, "g", NULL);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  uint64_t old = dlock_mutex_fence(ma);
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_OK(dlock_mutex_acquire(mb, 0));
  /* Without fences (fence 0, never a token) ask with 1: the backend's own
   * refusal is what says whether the guard is offered. */
  uint64_t now = dlock_mutex_fence(mb) ? dlock_mutex_fence(mb) : 1;
  uint64_t admitted = 0, refused = 0;
  conf_offered(CONF_GUARD, "the guard", dlock_guard_check_highest(b, "resource", now, &admitted));
  ASSERT(now > old);
  ASSERT_OK(dlock_guard_check(a, "resource", now)); /* not lower: admitted again */
  ASSERT_STATUS(dlock_guard_check_highest(a, "resource", old, &refused), DLOCK_ESTALE);
  ASSERT_OK(dlock_mutex_release(mb));
  /* The highest token seen: the token when admitted, the newer one when not. */
  if (admitted != now || refused != now)
    TEST_FAIL("dlock_guard_check_highest gave %llu when it admitted %llu and %llu when it refused %llu (both "
              "should be %llu, dlock.h)",
              (unsigned long long)admitted, (unsigned long long)now, (unsigned long long)refused,
              (unsigned long long)old, (unsigned long long)now);
}

/* ---- The scheduler ---- */

#define TICKS_MAX 256
typedef struct tick_log {
  pthread_mutex_t mu;
  int64_t tick[TICKS_MAX];
  int n;
} tick_log;

static int record_tick(const dlock_tick *t, void *arg) {
  tick_log *log = arg;
  pthread_mutex_lock(&log->mu);
  if (log->n < TICKS_MAX) log->tick[log->n++] = t->scheduled_unix_ms;
  pthread_mutex_unlock(&log->mu);
  th_sleep_ms(20);
  return 0;
}

static void two_schedulers_run_each_tick_once(void) {
  tick_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
  dlock_sched *s[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    dlock_sched_options o;
    dlock_sched_options_init(&o);
    o.node_name = i ? "node-b" : "node-a";
    int rc = dlock_sched_new(&s[i], conf_client("sched"), &o);
    if (rc) conf_offered(CONF_SCHED, "the scheduler", rc);
    conf_adopt_sched(s[i]);
    ASSERT_OK(dlock_sched_add_fixed_rate(s[i], "every300ms", 300, NULL, record_tick, &log));
  }
  conf_offered(CONF_SCHED, "the scheduler", 0);
  ASSERT_OK(dlock_sched_start(s[0]));
  ASSERT_OK(dlock_sched_start(s[1]));
  for (int i = 0; i < 1500; i++) {
    pthread_mutex_lock(&log.mu);
    int n = log.n;
    pthread_mutex_unlock(&log.mu);
    if (n >= 8) break;
    th_sleep_ms(10);
  }
  ASSERT_OK(dlock_sched_stop(s[0], slack_ms(10000)));
  ASSERT_OK(dlock_sched_stop(s[1], slack_ms(10000)));
  printf("  %d runs\n", log.n);
  for (int i = 0; i < log.n; i++)
    for (int j = i + 1; j < log.n; j++)
      if (log.tick[i] == log.tick[j]) TEST_FAIL("the tick at %lld ran twice", (long long)log.tick[i]);
  ASSERT(log.n >= 3);
}

/* ---- Operating a job: pause, trigger, resume (docs/scheduler.md, "Operations") ---- */

typedef struct run_log {
  pthread_mutex_t mu;
  int64_t tick[TICKS_MAX];
  int manual[TICKS_MAX];
  int n;
} run_log;

static int record_run(const dlock_tick *t, void *arg) {
  run_log *log = arg;
  pthread_mutex_lock(&log->mu);
  if (log->n < TICKS_MAX) {
    log->tick[log->n] = t->scheduled_unix_ms;
    log->manual[log->n++] = t->trigger && !strcmp(t->trigger, "manual");
  }
  pthread_mutex_unlock(&log->mu);
  th_sleep_ms(20);
  return 0;
}

static int64_t wall_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void count_job(const char *name, void *arg) {
  if (strcmp(name, "jobops") == 0) ++*(int *)arg;
}

/* Runs of the kind 'manual' (1) or tick (0) scheduled after 'after' (wall ms). */
static int runs_since(run_log *log, int manual, int64_t after) {
  pthread_mutex_lock(&log->mu);
  int n = 0;
  for (int i = 0; i < log->n; i++) n += log->manual[i] == manual && log->tick[i] > after;
  pthread_mutex_unlock(&log->mu);
  return n;
}

/* Wait (bounded) until 'want' runs of the kind happened after 'after'. */
static int wait_runs(run_log *log, int manual, int64_t after, int want, int64_t ms) {
  long long end = th_now_ms() + slack_ms(ms);
  int n;
  while ((n = runs_since(log, manual, after)) < want && th_now_ms() < end) th_sleep_ms(20);
  return n;
}

static void a_paused_job_runs_no_tick_until_resumed_and_a_trigger_runs_once(void) {
  const char *job = "jobops";
  run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
  dlock_client *op = conf_client("jobs");
  int rc = dlock_job_resume(op, job, "conformance");
  if (rc < 0) conf_offered(CONF_JOBS, "pausing and triggering jobs", rc);
  conf_offered(CONF_JOBS, "pausing and triggering jobs", 0);
  dlock_sched *s[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++) { /* three nodes, each with its own client */
    dlock_sched_options o;
    dlock_sched_options_init(&o);
    o.node_name = i == 0 ? "node-a" : i == 1 ? "node-b" : "node-c";
    ASSERT_OK(dlock_sched_new(&s[i], conf_client("jobs"), &o));
    conf_adopt_sched(s[i]);
    ASSERT_OK(dlock_sched_add_fixed_rate(s[i], job, 300, NULL, record_run, &log));
  }
  for (int i = 0; i < 3; i++) ASSERT_OK(dlock_sched_start(s[i]));
  if (wait_runs(&log, 0, 0, 2, 15000) < 2) TEST_FAIL("the job did not run twice in 15 s before the pause");

  /* Paused: a tick scheduled after the pause returned is claimed after it
   * (the nodes' clocks are this host's), so it must not run. */
  ASSERT_EQ(dlock_job_pause(op, job, "conformance", "incident 42"), 1);
  int64_t paused_at = wall_now_ms();
  ASSERT_EQ(dlock_job_pause(op, job, "someone else", NULL), 0); /* the first pause is kept */
  dlock_job_state st;
  dlock_job_state_init(&st);
  ASSERT_OK(dlock_job_state_get(op, job, &st));
  ASSERT_EQ(st.paused, 1);
  ASSERT_STR_EQ(st.paused_by, "conformance");
  ASSERT_STR_EQ(st.paused_reason, "incident 42");
  th_sleep_ms(1500); /* five ticks */
  ASSERT_EQ(runs_since(&log, 0, paused_at), 0);

  /* A trigger: one run, on one node, also while paused. */
  ASSERT_EQ(dlock_job_trigger(op, job, "conformance"), 1);
  if (wait_runs(&log, 1, 0, 1, 10000) < 1) TEST_FAIL("the trigger ran nowhere within 10 s");
  th_sleep_ms(900); /* three more ticks: no second manual run, no tick run */
  ASSERT_EQ(runs_since(&log, 1, 0), 1);
  ASSERT_EQ(runs_since(&log, 0, paused_at), 0);
  ASSERT_EQ(dlock_job_trigger(op, job, "conformance"), 1); /* claimed: a new one may be asked */
  if (wait_runs(&log, 1, 0, 2, 10000) < 2) TEST_FAIL("the second trigger ran nowhere within 10 s");

  /* The history shows every decision: the skips, with who and why, once per
   * tick. A run is recorded when it ends: wait for the second manual one. */
  dlock_run_record rec[64];
  int n = 0, skipped = 0, manual = 0;
  for (long long end = th_now_ms() + slack_ms(10000); manual < 2 && th_now_ms() < end; th_sleep_ms(50)) {
    for (int i = 0; i < 64; i++) dlock_run_record_init(&rec[i]);
    n = dlock_sched_history(op, job, rec, 64);
    ASSERT(n > 0);
    manual = 0;
    for (int i = 0; i < n; i++) manual += !strcmp(rec[i].trigger, "manual");
  }
  manual = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(rec[i].trigger, "manual")) {
      manual++;
      ASSERT_STR_EQ(rec[i].outcome, "ok");
      ASSERT(rec[i].fence > 0);
    } else if (!strncmp(rec[i].outcome, "skipped: paused", 15)) {
      skipped++;
      ASSERT_STR_EQ(rec[i].outcome, "skipped: paused by conformance: incident 42");
      for (int k = i + 1; k < n; k++)
        if (rec[k].scheduled_unix_ms == rec[i].scheduled_unix_ms && !strcmp(rec[k].trigger, "tick"))
          TEST_FAIL("the tick at %lld was recorded twice", (long long)rec[i].scheduled_unix_ms);
    }
  }
  ASSERT_EQ(manual, 2);
  if (skipped < 3) TEST_FAIL("%d paused ticks recorded as skipped in the history; want at least 3", skipped);

  /* Resumed: ticks run again. */
  ASSERT_EQ(dlock_job_resume(op, job, NULL), 1);
  int64_t resumed_at = wall_now_ms();
  ASSERT_EQ(dlock_job_resume(op, job, NULL), 0);
  if (wait_runs(&log, 0, resumed_at, 2, 15000) < 2) TEST_FAIL("the job did not run again within 15 s of the resume");
  for (int i = 0; i < 3; i++) ASSERT_OK(dlock_sched_stop(s[i], slack_ms(10000)));
  dlock_job_state_init(&st);
  ASSERT_OK(dlock_job_state_get(op, job, &st));
  ASSERT_EQ(st.paused, 0);
  ASSERT_EQ(st.trigger_pending, 0);
  ASSERT(st.last_success_unix_ms > 0);
  ASSERT_STR_EQ(st.last_outcome, "ok");
  int listed = 0;
  ASSERT(dlock_job_list(op, "jobop*", count_job, &listed) >= 1);
  ASSERT_EQ(listed, 1);
  printf("  %d paused ticks skipped, 2 manual runs\n", skipped);
}

/* ---- Overlap: a job longer than its period (docs/scheduler.md, "Policies") ---- */

typedef struct span_log {
  pthread_mutex_t mu;
  long long start[TICKS_MAX], end[TICKS_MAX];
  int64_t tick[TICKS_MAX];
  int n, ended;
} span_log;

static int record_span(const dlock_tick *t, void *arg) {
  span_log *log = arg;
  pthread_mutex_lock(&log->mu);
  int i = log->n < TICKS_MAX ? log->n++ : -1;
  if (i >= 0) {
    log->start[i] = th_now_ms();
    log->tick[i] = t->scheduled_unix_ms;
  }
  pthread_mutex_unlock(&log->mu);
  th_sleep_ms(700); /* longer than the 300 ms period */
  pthread_mutex_lock(&log->mu);
  if (i >= 0) log->end[i] = th_now_ms();
  log->ended++;
  pthread_mutex_unlock(&log->mu);
  return 0;
}

/* Three nodes run a 700 ms job every 300 ms: with overlap 'skip' (the
 * default) no two runs overlap, whichever nodes run them; with 'allow'
 * (allow_overlap) they do. Either way each tick runs at most once. */
static void overlap_skip_never_runs_two_at_once_and_allow_does(void) {
  for (int allow = 0; allow < 2; allow++) {
    span_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *job = allow ? "overlap-allow" : "overlap-skip";
    dlock_sched *s[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
      dlock_sched_options o;
      dlock_sched_options_init(&o);
      o.node_name = i == 0 ? "node-a" : i == 1 ? "node-b" : "node-c";
      int rc = dlock_sched_new(&s[i], conf_client("overlap"), &o);
      if (rc) conf_offered(CONF_SCHED, "the scheduler", rc);
      conf_adopt_sched(s[i]);
      dlock_job_options jo;
      dlock_job_options_init(&jo);
      jo.allow_overlap = allow;
      ASSERT_OK(dlock_sched_add_fixed_rate(s[i], job, 300, &jo, record_span, &log));
    }
    conf_offered(CONF_SCHED, "the scheduler", 0);
    for (int i = 0; i < 3; i++) ASSERT_OK(dlock_sched_start(s[i]));
    for (long long end = th_now_ms() + slack_ms(15000); th_now_ms() < end; th_sleep_ms(20)) {
      pthread_mutex_lock(&log.mu);
      int ended = log.ended;
      pthread_mutex_unlock(&log.mu);
      if (ended >= 3) break;
    }
    for (int i = 0; i < 3; i++) ASSERT_OK(dlock_sched_stop(s[i], slack_ms(10000)));
    int n = log.n < TICKS_MAX ? log.n : TICKS_MAX, overlaps = 0;
    if (n < 3) TEST_FAIL("%s: %d runs in 15 s; want at least 3", job, n);
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) {
        if (log.tick[i] == log.tick[j]) TEST_FAIL("%s: the tick at %lld ran twice", job, (long long)log.tick[i]);
        overlaps += log.start[j] < log.end[i] && log.start[i] < log.end[j];
      }
    printf("  %s: %d runs, %d overlapping pairs\n", job, n, overlaps);
    if (!allow && overlaps) TEST_FAIL("overlap skip: %d pairs of runs overlapped", overlaps);
    if (allow && !overlaps) TEST_FAIL("overlap allow: no two runs overlapped (a 700 ms job every 300 ms)");
  }
}

/* ---- Multi-lock ---- */

static void a_multi_lock_takes_all_names_or_none(void) {
  dlock_client *a = conf_client("multi"), *b = conf_client("multi");
  const char *ab[] = {"m1", "m2", "m3"}, *ba[] = {"m3", "m1"};
  dlock_multi *x = conf_multi(a, ab, 3), *y = conf_multi(b, ba, 2);
  dlock_mutex *m2 = conf_mutex(b, "m2", NULL);
  ASSERT_OK(dlock_multi_acquire(x, 0));
  ASSERT_STATUS(dlock_multi_acquire(y, 0), DLOCK_EBUSY);
  ASSERT_STATUS(dlock_mutex_acquire(m2, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_multi_release(x));
  ASSERT_OK(dlock_multi_acquire(y, slack_ms(10000)));
  ASSERT_OK(dlock_mutex_acquire(m2, 0)); /* not one of y's names */
  for (size_t i = 0; i < 2 && (conf_fx->caps & CONF_FENCE); i++) ASSERT(dlock_multi_fence(y, i) > 0);
  ASSERT_STATUS(dlock_multi_acquire(x, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(m2));
  ASSERT_OK(dlock_multi_release(y));
  ASSERT_OK(dlock_multi_acquire(x, slack_ms(10000)));
  ASSERT_OK(dlock_multi_release(x));
}

/* ---- Loss at the local deadline (last: it freezes the deployment) ---- */

/* ---- Metrics (docs/metrics.md): the same counts on every backend ---- */

/* The sum of the series of 'c' whose name and labels begin with 'prefix'
 * ("dlock_losses_total{kind=\"mutex\","), from its Prometheus text. */
static double metric_sum(dlock_client *c, const char *prefix) { return mt_sum(mt_exposition(c), prefix, 0, NULL); }

static void metrics_count_acquisitions_busy_tries_releases_and_holds(void) {
  dlock_client *a = conf_client("metrics"), *b = conf_client("metrics");
  dlock_mutex *ma = conf_mutex(a, "m", NULL), *mb = conf_mutex(b, "m", NULL);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_EQ(metric_sum(a, "dlock_held{kind=\"mutex\"}"), 1);
  ASSERT_STATUS(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_OK(dlock_mutex_acquire(mb, slack_ms(10000)));
  ASSERT_OK(dlock_mutex_release(mb));
  ASSERT_EQ(metric_sum(a, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"acquired\"}"), 1);
  ASSERT_EQ(metric_sum(a, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"reentered\"}"), 1);
  ASSERT_EQ(metric_sum(a, "dlock_releases_total{kind=\"mutex\",outcome=\"ok\"}"), 1);
  ASSERT_EQ(metric_sum(a, "dlock_hold_seconds_count{kind=\"mutex\"}"), 1);
  ASSERT_EQ(metric_sum(a, "dlock_held{kind=\"mutex\"}"), 0);
  ASSERT_EQ(metric_sum(b, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"busy\"}"), 1);
  ASSERT_EQ(metric_sum(b, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"acquired\"}"), 1);
  ASSERT_EQ(metric_sum(b, "dlock_acquire_wait_seconds_count{kind=\"mutex\"}"), 1);
  ASSERT_EQ(metric_sum(b, "dlock_waiting{kind=\"mutex\"}"), 0);
  ASSERT_EQ(metric_sum(b, "dlock_losses_total{"), 0);
}

static void a_frozen_server_loses_the_hold_no_later_than_the_local_deadline(void) {
  CONF_NEED(freeze, "freeze its servers");
  dlock_client *c = conf_client("freeze");
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  o.watchdog_lease_ms = 1500;
  dlock_mutex *m = conf_mutex(c, "z", &o);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  if (!(conf_fx->caps & CONF_DEADLINE)) {
    dlock_mono_ms vu = dlock_mutex_valid_until(m); /* documented: no local deadline */
    if (vu != 0 && vu != INT64_MAX) TEST_FAIL("valid_until is %lld, a deadline", (long long)vu);
    conf_not_offered("a hold on %s has no local deadline (valid_until %lld), as its docs say", conf_fx->name,
                     (long long)vu);
  }
  int fd = dlock_mutex_lost_fd(m);
  conf_fx->freeze();
  dlock_mono_ms deadline = dlock_mutex_valid_until(m);
  long long frozen_at = th_now_ms();
  /* The local view needs no server: at valid_until the hold is lost. A
   * renewal answered just before the freeze may move it once; one that
   * keeps moving means the freeze did not stop the server. */
  long long give_up = frozen_at + slack_ms(10000);
  while (dlock_mono_now() <= deadline && th_now_ms() < give_up) {
    th_sleep_ms(20);
    dlock_mono_ms vu = dlock_mutex_valid_until(m);
    if (vu > deadline) deadline = vu;
  }
  if (dlock_mono_now() <= deadline) {
    conf_fx->thaw();
    TEST_FAIL("renewals still succeeded %ld ms into the freeze (the fixture's freeze stops nothing?)", slack_ms(10000));
  }
  dlock_lost_reason at_deadline = dlock_mutex_lost(m);
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int signalled = poll(&pfd, 1, (int)slack_ms(3000)) == 1;
  long long late = dlock_mono_now() - deadline;
  conf_fx->thaw();
  printf("  frozen %lld ms before the deadline; lost as %s, fd readable %lld ms after it\n", deadline - frozen_at,
         dlock_lost_reason_str(at_deadline), late);
  if (at_deadline == DLOCK_LOST_NONE) TEST_FAIL("at valid_until the hold was not reported lost");
  if (!signalled) TEST_FAIL("the lost fd was not readable %ld ms after valid_until", slack_ms(3000));
  /* The metrics count the loss, and the hold no longer (docs/metrics.md). */
  ASSERT_EQ(metric_sum(c, "dlock_losses_total{kind=\"mutex\","), 1);
  ASSERT_EQ(metric_sum(c, "dlock_held{kind=\"mutex\"}"), 0);
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  ASSERT_EQ(metric_sum(c, "dlock_releases_total{kind=\"mutex\",outcome=\"not_held\"}"), 1);
  /* The deployment serves again and the lock is free within the lease. */
  dlock_mutex *next = conf_mutex(conf_client("freeze"), "z", NULL);
  ASSERT_OK(dlock_mutex_acquire(next, slack_ms(30000)));
  ASSERT_OK(dlock_mutex_release(next));
}

#define SCENARIO(fn) \
  { #fn, fn }
const conf_scenario conf_contract[] = {
    SCENARIO(exclusion_under_contention_never_two_holders),
    SCENARIO(fences_rise_strictly_across_holders),
    SCENARIO(a_holding_thread_reenters_with_the_same_fence),
    SCENARIO(waiters_get_the_lock_in_arrival_order),
    SCENARIO(a_wait_ends_at_its_deadline_and_a_cancel_ends_it_sooner),
    SCENARIO(the_watchdog_keeps_a_hold_past_several_leases),
    SCENARIO(a_holder_killed_with_sigkill_frees_the_lock_after_its_lease),
    SCENARIO(lost_replies_leave_one_holder_and_a_lock_that_frees),
    SCENARIO(status_list_and_force_release_show_and_end_a_hold),
    SCENARIO(a_forced_release_tells_the_holder_at_once),
    SCENARIO(a_watch_wakes_when_a_lock_is_taken_and_given_back),
    SCENARIO(the_guard_admits_the_newest_fence_and_refuses_an_older_one),
    SCENARIO(two_schedulers_run_each_tick_once),
    SCENARIO(a_paused_job_runs_no_tick_until_resumed_and_a_trigger_runs_once),
    SCENARIO(overlap_skip_never_runs_two_at_once_and_allow_does),
    SCENARIO(a_multi_lock_takes_all_names_or_none),
    SCENARIO(metrics_count_acquisitions_busy_tries_releases_and_holds),
};
const size_t conf_contract_len = sizeof conf_contract / sizeof conf_contract[0];
const conf_scenario conf_last[] = {
    SCENARIO(a_frozen_server_loses_the_hold_no_later_than_the_local_deadline),
};
const size_t conf_last_len = sizeof conf_last / sizeof conf_last[0];
