/*
 * review_fixes.c - the adversarial review (branch rev2) of three commits:
 * b28f110 (Redlock: a waiter wakes at a majority's hand-offs), d9e4c88
 * (PostgreSQL: a mutex and the family meet on the name's locks row) and
 * d3f4d89 (Redis: each kind's wait-queue record has its own shape). One test
 * per finding, each FAILED on the code as reviewed. Registered as ctest
 * "review/review_fixes" (label "review"). Every finding is fixed and its
 * test runs by default. The PostgreSQL tests
 * skip when PostgreSQL is not built in or not installed.
 * Real redis-server (harness.h) and PostgreSQL (harness_pg.h), public API
 * only (dlock.h).
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
#ifdef DLOCK_REVIEW_PG
#include "harness_pg.h"
#endif
#include "test.h"

/* Servers are started by the first test that needs them. */
static th_redis srv;
static int redis_up;
#ifdef DLOCK_REVIEW_PG
static th_pg pg;
static int pg_tried, pg_up;
static char pg_why[256];
#endif

static void need_redis(void) {
  if (redis_up) return;
  if (th_redis_start(&srv, NULL) != 0) TEST_FAIL("cannot start redis-server");
  redis_up = 1;
}

void test_teardown(void) {
  if (redis_up) th_redis_stop(&srv);
#ifdef DLOCK_REVIEW_PG
  if (pg_up) th_pg_stop(&pg);
#endif
}

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

TEST(review_dead_waiters_of_another_kind_do_not_stop_the_hand_offs) {
  need_redis();
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

/* ---- b28f110, finding: a node that answers "free" but does not count
 * (restarted recently) lowers the messages a Redlock waiter waits for ----
 *
 * rl_acquire() (src/redis/topo_redlock.c) sets rl_need = quorum minus the
 * nodes that took the try (okmask), counting a node that does not count
 * toward a quorum (restarted within the longest lease in use, counts()).
 * Three nodes, quorum 2: the holder held A and B, C restarted empty. The
 * waiter's try is refused on A and B, "ok" on C, which does not count; it
 * is told to wake at 1 message. The release reaches A at once and B late
 * (here 300 ms, a slow link): the waiter wakes at A's hand-off, tries while
 * B still holds, fails and gives A back (its key is deleted, or handed to
 * the next waiter there): the early try the commit meant to end. Seen from
 * A: its key is absent between the hand-off and the waiter's success. */
/* A waiter that keeps the lock until told to let go. */
struct rl_waiter {
  dlock_mutex *m;
  int rc;
  int got;  /* atomic: acquire answered */
  int stop; /* atomic: release now */
};

static void *rl_waiter_thread(void *arg) {
  struct rl_waiter *x = arg;
  x->rc = dlock_mutex_acquire(x->m, 10000);
  __atomic_store_n(&x->got, 1, __ATOMIC_SEQ_CST);
  while (!__atomic_load_n(&x->stop, __ATOMIC_SEQ_CST)) th_sleep_ms(5);
  if (x->rc == 0) dlock_mutex_release(x->m);
  return NULL;
}

struct rl_poll {
  const th_redis *node;
  const char *name;
  const struct rl_waiter *w;
  int absent, polls;
};

/* Until the waiter is done (or 1.5 s): is the key on the node ever absent? */
static void *rl_poll_thread(void *arg) {
  struct rl_poll *x = arg;
  long long until = th_now_ms() + 1500;
  char out[64];
  while (!__atomic_load_n(&x->w->got, __ATOMIC_SEQ_CST) && th_now_ms() < until) {
    th_redis_cli(x->node, out, sizeof out, "EXISTS %s", x->name);
    if (strcmp(out, "0") == 0) x->absent = 1;
    x->polls++;
  }
  return NULL;
}

TEST(review_redlock_a_restarted_node_does_not_count_toward_the_hand_offs_a_waiter_needs) {
  th_redis n[3];
  if (th_redis_start_n(n, 3, NULL) != 0) TEST_FAIL("cannot start 3 redis-servers");
  fp_proxy *pb = NULL;
  if (fp_start(&pb, n[1].port) != 0) TEST_FAIL("fault proxy");
  char wurl[512], hurl[512];
  th_redlock_url(n, 3, wurl, sizeof wurl);
  snprintf(hurl, sizeof hurl, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", n[0].port, fp_port(pb), n[2].port);
  dlock_client *hc = test_client(hurl), *wc = test_client(wurl);
  /* The waiter's client uses a 30 s lease: a node restarted less than 30 s
   * ago does not count for it. */
  dlock_mutex *big = test_mutex(wc, "rv2:rl:big", 30000);
  ASSERT_OK(dlock_mutex_acquire(big, 0));
  ASSERT_OK(dlock_mutex_release(big));
  const char *name = "rv2:rl";
  dlock_mutex *h = test_mutex(hc, name, 20000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  if (th_redis_restart(&n[2]) != 0) TEST_FAIL("restart of the third node");
  /* The waiter's client sees the restart: C is free but not counted. */
  dlock_mutex *w = test_mutex(wc, name, 20000);
  ASSERT_STATUS(dlock_mutex_acquire(w, 0), DLOCK_EBUSY);
  ASSERT_CONTAINS(dlock_mutex_errmsg(w), "restarted recently");
  struct rl_waiter tw = {w, -1, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, rl_waiter_thread, &tw);
  char out[256];
  long long until = th_now_ms() + 5000L * th_time_factor();
  for (;;) { /* queued on A and B */
    char o2[64];
    th_redis_cli(&n[0], out, sizeof out, "ZCARD {%s}:queue", name);
    th_redis_cli(&n[1], o2, sizeof o2, "ZCARD {%s}:queue", name);
    if ((atoi(out) >= 1 && atoi(o2) >= 1) || th_now_ms() > until) break;
    th_sleep_ms(10);
  }
  th_sleep_ms(150); /* its second call (after subscribing) is answered: it waits */
  /* The release reaches B 300 ms late (each way). */
  fp_delay(pb, 300);
  struct rl_poll poll = {&n[0], name, &tw, 0, 0};
  pthread_t tp;
  pthread_create(&tp, NULL, rl_poll_thread, &poll);
  int rc = dlock_mutex_release(h);
  pthread_join(tp, NULL);
  __atomic_store_n(&tw.stop, 1, __ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  fp_pass(pb);
  if (rc) TEST_FAIL("release: %s", dlock_mutex_errmsg(h));
  ASSERT_OK(tw.rc);
  if (poll.absent)
    TEST_FAIL("the waiter woke at A's hand-off alone (C, restarted, does not count), tried while B still "
              "held and gave A back: A's key was absent before the waiter's success (%d polls)",
              poll.polls);
  dlock_mutex_free(w);
  dlock_mutex_free(h);
  dlock_mutex_free(big);
  dlock_client_free(hc);
  dlock_client_free(wc);
  fp_stop(pb);
  th_redis_stop_n(n, 3);
}

#ifdef DLOCK_REVIEW_PG
static void need_pg(void) {
  if (!pg_tried) {
    pg_tried = 1;
    pg_up = th_pg_suite_start(&pg, pg_why, sizeof pg_why);
  }
  if (!pg_up) TEST_SKIP("%s", pg_why);
}

static dlock_client *pg_client(const char *schema) {
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=%s", pg.url, schema);
  return test_client(url);
}

/* ---- d9e4c88, finding: a family's release never clears its mark, so a
 * mutex stays busy until the family's lease would have ended ----
 *
 * fam_acquire() (src/pg/pg_sql.c) writes the hold (holds.since =
 * clock_timestamp()) and then marks the locks row (family_since =
 * clock_timestamp(), a later reading of the clock: clock_timestamp() moves
 * within a transaction). sql_fam_release clears the mark only where
 * family_since <= the hold's since, which is never the case for the grant's
 * own hold: after the last permit is released, a mutex on the name is
 * refused ("busy") until the permit's lease would have ended. */
TEST(review_pg_a_mutex_takes_the_name_once_the_permit_is_released) {
  need_pg();
  dlock_client *c = pg_client("rv2a");
  dlock_semaphore *s = test_semaphore(c, "rv2:pgmark", 1, 30000);
  dlock_mutex *m = test_mutex(c, "rv2:pgmark", 30000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_semaphore_release(s));
  int rc = dlock_mutex_acquire(m, 0);
  if (rc) TEST_FAIL("the only permit was released, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m));
  /* The same for a read-write lock's writer. */
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  dlock_rwlock *w = NULL;
  ASSERT_OK(dlock_rwlock_new(&w, c, "rv2:pgmark2", DLOCK_RW_WRITE, &mo));
  dlock_mutex *m2 = test_mutex(c, "rv2:pgmark2", 30000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_release(w));
  rc = dlock_mutex_acquire(m2, 0);
  if (rc) TEST_FAIL("the writer released, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_rwlock_free(w);
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* ---- d9e4c88, finding: the mark outlives the family when the latest grant
 * ended by its lease, not by a release ----
 *
 * sql_fam_release clears the mark only when the releasing hold is the
 * latest grant (family_since <= its since). A later grant whose hold then
 * ran out (its owner crashed, or a short fixed lease) leaves family_since
 * ahead of every hold still to be released: the last release of the family
 * clears nothing, and a mutex is refused until the longest lease granted
 * would have ended (here 20 s after the family is gone). */
TEST(review_pg_a_mutex_takes_the_name_after_a_later_permit_ran_out) {
  need_pg();
  dlock_client *c = pg_client("rv2b");
  dlock_semaphore *p1 = test_semaphore(c, "rv2:pgmark3", 2, 20000), *p2 = test_semaphore(c, "rv2:pgmark3", 2, 500);
  dlock_mutex *m = test_mutex(c, "rv2:pgmark3", 30000);
  ASSERT_OK(dlock_semaphore_acquire(p1, 0));
  ASSERT_OK(dlock_semaphore_acquire(p2, 0));
  th_sleep_ms(900); /* p2's lease runs out (never released) */
  ASSERT_OK(dlock_semaphore_release(p1));
  int rc = dlock_mutex_acquire(m, 0);
  if (rc) TEST_FAIL("no permit is held any more, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_semaphore_free(p1);
  dlock_semaphore_free(p2);
  dlock_client_free(c);
}
#endif

TEST_MAIN()
