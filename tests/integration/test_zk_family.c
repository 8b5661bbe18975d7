/*
 * test_zk_family.c - semaphores and read-write locks on ZooKeeper through the
 * public API, in Apache Curator's InterProcessSemaphoreV2 and
 * InterProcessReadWriteLock layouts, against a real ZooKeeper server
 * (tests/harness_zk.*) and Curator itself (tests/interop/CuratorLock.java).
 * Label "zk": plain and ASan builds.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "harness_zk.h"
#include "test.h"

#ifndef CURATOR_SRC
#error "CURATOR_SRC (the path of tests/interop/CuratorLock.java) must be defined"
#endif

static th_zk srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) { srv_up = th_zk_suite_start(&srv, 200, skip_why, sizeof skip_why); }

void test_teardown(void) {
  if (srv_up) th_zk_stop(&srv);
}

#define NEED_SERVER()                       \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

/* A client on the namespace '/space' with a 'session' long session
 * ("2s": a killed holder's nodes go soon). NULL on failure (usable in a
 * child). */
static dlock_client *client_session_or_null(const char *space, const char *session) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s/%s?session_timeout=%s", srv.hostport, space, session);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

static dlock_client *client_or_null(const char *space) { return client_session_or_null(space, "2s"); }

static dlock_client *client_session(const char *space, const char *session) {
  dlock_client *c = client_session_or_null(space, session);
  if (!c) TEST_FAIL("client on %s/%s: %s", srv.hostport, space, dlock_last_error());
  return c;
}

static dlock_client *client(const char *space) { return client_session(space, "2s"); }

/* The scenarios every backend passes: tests/conformance/. */

/* ---- Sessions ---- */

static int crash_holding(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = client_or_null("fam5");
  if (!c) return 1;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "crash", 1, NULL) != 0 || dlock_semaphore_acquire(s, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  for (;;) pause();
}

TEST(a_holder_killed_with_sigkill_gives_its_permit_back_at_its_session_end) {
  NEED_SERVER();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = th_spawn(crash_holding, (void *)(intptr_t)p[1]);
  struct pollfd pf = {p[0], POLLIN, 0};
  char ch = 0;
  ASSERT(poll(&pf, 1, (int)(30000L * th_time_factor())) == 1 && read(p[0], &ch, 1) == 1 && ch == 'A');
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
  close(p[1]);
  dlock_client *c = client("fam5");
  dlock_semaphore *s = test_semaphore(c, "crash", 1, 0);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 15000L * th_time_factor()); /* the 2 s session, plus the expiry tick */
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* ---- Curator on the same paths ---- */

static int curator_ok = -1;
static char curator_why[256];

#define NEED_CURATOR()                                                                                    \
  do {                                                                                                    \
    NEED_SERVER();                                                                                        \
    if (curator_ok < 0) curator_ok = th_curator_build(CURATOR_SRC, curator_why, sizeof curator_why) == 0; \
    if (!curator_ok) TEST_SKIP("%s", curator_why);                                                        \
  } while (0)

TEST(a_curator_semaphore_and_a_dlock_semaphore_share_the_permits) {
  NEED_CURATOR();
  int fd = -1;
  pid_t pid = th_curator_spawn(&fd, srv.hostport, "/fam9/shared", "semhold:2", "4");
  ASSERT(pid > 0);
  char line[256];
  ASSERT_EQ(th_read_line(fd, line, sizeof line, 30000L * th_time_factor()), 0);
  ASSERT(!strncmp(line, "ACQUIRED", 8));
  dlock_client *c = client("fam9");
  dlock_semaphore *s1 = test_semaphore(c, "shared", 2, 0), *s2 = test_semaphore(c, "shared", 2, 0);
  ASSERT_OK(dlock_semaphore_acquire(s1, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EBUSY); /* Curator's lease counts */
  /* Curator sees dlock's lease too: with both taken it gets none. */
  char out[512];
  ASSERT_OK(dlock_semaphore_acquire(s2, 30000L * th_time_factor())); /* after Curator's release */
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam9/shared", "semtry:2", "300"),
            3);
  ASSERT_CONTAINS(out, "BUSY");
  ASSERT_OK(dlock_semaphore_release(s1));
  ASSERT_EQ(
      th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam9/shared", "semtry:2", "3000"), 0);
  ASSERT_OK(dlock_semaphore_release(s2));
  int st = th_wait(pid, 30000L * th_time_factor());
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(fd);
  dlock_semaphore_free(s1);
  dlock_semaphore_free(s2);
  dlock_client_free(c);
}

TEST(a_curator_writer_and_dlock_readers_and_writers_exclude_each_other) {
  NEED_CURATOR();
  int fd = -1;
  pid_t pid = th_curator_spawn(&fd, srv.hostport, "/fam10/rw", "writehold", "3");
  ASSERT(pid > 0);
  char line[256];
  ASSERT_EQ(th_read_line(fd, line, sizeof line, 30000L * th_time_factor()), 0);
  ASSERT(!strncmp(line, "ACQUIRED", 8));
  dlock_client *c = client("fam10");
  dlock_rwlock *r = test_rwlock(c, "rw", DLOCK_RW_READ, 0), *w = test_rwlock(c, "rw", DLOCK_RW_WRITE, 0);
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_rwlock_acquire(r, 30000L * th_time_factor())); /* once Curator's writer is done */
  int st = th_wait(pid, 30000L * th_time_factor());
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(fd);
  char out[512];
  /* A Curator reader shares with dlock's reader; a Curator writer does not. */
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam10/rw", "readtry", "3000"),
            0);
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam10/rw", "writetry", "300"),
            3);
  ASSERT_OK(dlock_rwlock_release(r));
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam10/rw", "readtry", "300"), 3);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(c);
}

/* ---- The review of the semaphore and read-write lock (branch revzkpg): one
 * test per finding, each FAILED on the code as reviewed (labels review, zk:
 * ctest review/test_zk_family). ---- */

static long tf(void) { return th_time_factor(); }

/* The review's clients: a 4 s session. */
static dlock_client *client_4s(const char *space) { return client_session(space, "4s"); }

static dlock_semaphore *sem(dlock_client *c, const char *name, int permits) {
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, name, permits, NULL) != 0) TEST_FAIL("semaphore %s: %s", name, dlock_last_error());
  return s;
}

/* ---- Finding 1: a forced release of a semaphore kills its waiter ----
 *
 * dlock__zk_force_release() (src/zk/lock.c, the semaphore branch) deletes
 * every child of <name>/leases, including the lease node of the caller that
 * holds <name>/locks and waits (over the limit) for a permit. That caller
 * holds no permit, yet its acquire ends with DLOCK_ELOST ("our lease node
 * disappeared while waiting") at the very moment all permits became free;
 * the mutex and read-write lock force-releases delete only the holders. */

typedef struct {
  dlock_semaphore *s;
  long wait_ms;
  atomic_int done;
  int rc, release_rc;
  char err[512];
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->s, w->wait_ms);
  snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
  if (w->rc == 0) w->release_rc = dlock_semaphore_release(w->s); /* by the holding thread */
  atomic_store(&w->done, 1);
  return NULL;
}

/* Review of the ZooKeeper semaphore and rwlock (branch revzkpg), finding 1. */
REVIEW_TEST(review_a_forced_release_of_a_semaphore_lets_its_waiter_in_rather_than_failing_it) {
  NEED_SERVER();
  dlock_client *a = client_4s("rzf1"), *b = client_4s("rzf1");
  dlock_semaphore *held = sem(a, "pool", 1), *next = sem(b, "pool", 1);
  ASSERT_OK(dlock_semaphore_acquire(held, 0));
  waiter w = {.s = next, .wait_ms = 20000L * tf()};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  /* The waiter holds "locks" (one waiter), then adds its lease (over the
   * limit: two lease nodes). */
  dlock_lock_info info;
  long long until = th_now_ms() + 10000L * tf();
  do {
    th_sleep_ms(20);
    dlock_lock_info_init(&info);
    ASSERT_OK(dlock_lock_info_get(a, "pool", &info));
  } while (info.waiters < 1 && th_now_ms() < until && !atomic_load(&w.done));
  ASSERT_EQ(info.waiters, 1);
  th_sleep_ms(500); /* its lease is there by now */
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(a, "pool", &was_held));
  ASSERT_EQ(was_held, 1);
  pthread_join(t, NULL);
  if (w.rc != 0) TEST_FAIL("the waiter's acquire returned %s: %s", dlock_err_name(w.rc), w.err);
  ASSERT_EQ(w.release_rc, 0);
  ASSERT_STATUS(dlock_semaphore_release(held), DLOCK_ENOTHELD);
  dlock_semaphore_free(held);
  dlock_semaphore_free(next);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- Finding 2: a try with another limit answers "busy", not ELIMIT ----
 *
 * dlock__zk_sem_acquire() (src/zk/lock.c), wait 0: when the leases number at
 * least the caller's own N it answers DLOCK_EBUSY ("all 1 permits are
 * taken") without reading the stored limit. docs/zookeeper.md: "A caller
 * giving another N while leases exist gets DLOCK_ELIMIT naming both". With
 * 3 permits stored and one in use, a try with N = 1 is told the semaphore is
 * busy: a misconfigured caller retries forever instead of being told. */
/* Review of the ZooKeeper semaphore and rwlock (branch revzkpg), finding 2. */
REVIEW_TEST(review_a_try_with_a_smaller_limit_than_the_stored_one_is_elimit_not_busy) {
  NEED_SERVER();
  dlock_client *c = client_4s("rzf2");
  dlock_semaphore *s3 = sem(c, "lim", 3), *s1 = sem(c, "lim", 1);
  ASSERT_OK(dlock_semaphore_acquire(s3, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s1, 0), DLOCK_ELIMIT);
  ASSERT_CONTAINS(dlock_last_error(), "3 permits");
  ASSERT_CONTAINS(dlock_last_error(), "asks for 1");
  ASSERT_OK(dlock_semaphore_release(s3));
  dlock_semaphore_free(s3);
  dlock_semaphore_free(s1);
  dlock_client_free(c);
}

/* ---- Finding 3: a mutex and a semaphore on one name, both held ----
 *
 * dlock__zk_sem_acquire() checks the name's children (sem_check_path) once,
 * before it creates <name>/locks; the mutex's acquire lists the children
 * after creating its node. A mutex acquire that runs between the
 * semaphore's check and its first create sees only its own node and holds,
 * and the semaphore, never looking again, holds too: "a name is one kind of
 * lock at a time" is broken, and each excludes nobody of the other kind.
 * Two clients start the two acquires together on a fresh name, up to 300
 * times (or 40 s); any round where both hold fails the test. */

/* Review of the ZooKeeper semaphore and rwlock (branch revzkpg), finding 3. */
REVIEW_TEST(review_a_mutex_and_a_semaphore_racing_on_a_fresh_name_never_both_hold) {
  NEED_SERVER();
  dlock_client *a = client_4s("rzf3"), *b = client_4s("rzf3");
  int rounds;
  int both = th_race_mutex_and_semaphore(a, b, 300, 40000L * tf(), 0, &rounds);
  if (both >= 0) TEST_FAIL("round %d: the mutex and the semaphore 'race-%d' were both held", both + 1, both);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- Finding 4: a semaphore's name stays "a semaphore" after its use ----
 *
 * After the last permit of a semaphore is released, its (empty) container
 * nodes <name>/locks and <name>/leases stay until the server's container
 * reaper runs (znode.container.checkIntervalMs, 60 s by default).
 * list_lock_nodes() (src/zk/lock.c) takes the mere child "locks" or
 * "leases" for "held as a semaphore": a mutex or read-write lock on the
 * name, free for a minute, is refused with DLOCK_EWRONGTYPE ("held as a
 * semaphore") though nobody holds anything; and path_kind() reports a mutex
 * held there as an empty semaphore. */
/* Review of the ZooKeeper semaphore and rwlock (branch revzkpg), finding 4. */
REVIEW_TEST(review_a_released_semaphores_name_is_free_for_a_mutex_at_once) {
  NEED_SERVER();
  dlock_client *c = client_4s("rzf4");
  dlock_semaphore *s = sem(c, "reuse", 2);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "reuse", NULL));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "reuse", &info));
  ASSERT_EQ(info.held, 1); /* the mutex, not an empty semaphore */
  ASSERT_EQ(info.permits, 0);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- Finding 5: status counts the waiting caller's lease as a permit ----
 *
 * sem_info() (src/zk/lock.c) counts every lease node as a permit used and
 * shows the newest as the holder. The caller holding "locks" and waiting
 * over the limit has a lease node too: with 1 permit held and one caller
 * waiting, status says 2 permits used of 1, and its fence and owner are
 * the waiter's, who holds nothing. */
/* Review of the ZooKeeper semaphore and rwlock (branch revzkpg), finding 5. */
REVIEW_TEST(review_status_of_a_full_semaphore_with_a_waiter_shows_the_limit_and_the_holder) {
  NEED_SERVER();
  dlock_client *a = client_4s("rzf5"), *b = client_4s("rzf5");
  dlock_semaphore *held = sem(a, "pool", 1), *next = sem(b, "pool", 1);
  ASSERT_OK(dlock_semaphore_acquire(held, 0));
  waiter w = {.s = next, .wait_ms = 3000L * tf()};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  /* The waiter holds "locks" (one waiter), then adds its lease. */
  dlock_lock_info info;
  long long until = th_now_ms() + 10000L * tf();
  do {
    th_sleep_ms(20);
    dlock_lock_info_init(&info);
    ASSERT_OK(dlock_lock_info_get(a, "pool", &info));
  } while (info.waiters < 1 && th_now_ms() < until && !atomic_load(&w.done));
  ASSERT_EQ(info.waiters, 1);
  th_sleep_ms(500); /* its lease is there by now */
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "pool", &info));
  pthread_join(t, NULL);
  ASSERT_STATUS(w.rc, DLOCK_EBUSY);
  ASSERT_EQ(info.permits, 1);
  ASSERT_EQ(info.permits_used, 1);
  ASSERT_EQ(info.fence, dlock_semaphore_fence(held));
  ASSERT_OK(dlock_semaphore_release(held));
  dlock_semaphore_free(held);
  dlock_semaphore_free(next);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST_MAIN()
