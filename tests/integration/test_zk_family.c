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

void test_setup(void) {
  if (!th_zk_available(skip_why, sizeof skip_why)) return;
  if (th_zk_start(&srv, 200) == 0)
    srv_up = 1;
  else
    snprintf(skip_why, sizeof skip_why, "the ZooKeeper server did not start (see above)");
}

void test_teardown(void) {
  if (srv_up) th_zk_stop(&srv);
}

#define NEED_SERVER()                       \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

/* A client on the namespace 'ns' with a 2 s session (a killed holder's
 * nodes go soon). NULL on failure (usable in a child). */
static dlock_client *try_client(const char *ns) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s%s?session_timeout=2s", srv.hostport, ns);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

static dlock_client *client(const char *ns) {
  dlock_client *c = try_client(ns);
  if (!c) TEST_FAIL("client on %s%s: %s", srv.hostport, ns, dlock_last_error());
  return c;
}

static dlock_semaphore *sem(dlock_client *c, const char *name, int permits) {
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, name, permits, NULL) != 0) TEST_FAIL("semaphore %s: %s", name, dlock_last_error());
  return s;
}

static dlock_rwlock *rw(dlock_client *c, const char *name, int side) {
  dlock_rwlock *l = NULL;
  if (dlock_rwlock_new(&l, c, name, side, NULL) != 0) TEST_FAIL("rwlock %s: %s", name, dlock_last_error());
  return l;
}

/* ---- Semaphores ---- */

TEST(permits_are_counted_fences_rise_and_status_shows_them) {
  NEED_SERVER();
  dlock_client *c = client("/fam1");
  dlock_semaphore *s[3] = {sem(c, "pool", 2), sem(c, "pool", 2), sem(c, "pool", 2)};
  ASSERT_OK(dlock_semaphore_acquire(s[0], 0));
  ASSERT_OK(dlock_semaphore_acquire(s[1], 0));
  ASSERT(dlock_semaphore_fence(s[1]) > dlock_semaphore_fence(s[0]));
  ASSERT_STATUS(dlock_semaphore_acquire(s[2], 0), DLOCK_EBUSY);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "pool", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.permits, 2);
  ASSERT_EQ(info.permits_used, 2);
  ASSERT_OK(dlock_semaphore_release(s[0]));
  ASSERT_OK(dlock_semaphore_acquire(s[2], 0));
  ASSERT(dlock_semaphore_fence(s[2]) > dlock_semaphore_fence(s[1]));
  ASSERT_OK(dlock_semaphore_release(s[1]));
  ASSERT_OK(dlock_semaphore_release(s[2]));
  ASSERT_STATUS(dlock_semaphore_release(s[2]), DLOCK_ENOTHELD);
  for (int i = 0; i < 3; i++) dlock_semaphore_free(s[i]);
  dlock_client_free(c);
}

TEST(a_limit_other_than_the_stored_one_is_an_error_naming_both) {
  NEED_SERVER();
  dlock_client *a = client("/fam2"), *b = client("/fam2");
  dlock_semaphore *s3 = sem(a, "lim", 3), *s5 = sem(b, "lim", 5);
  ASSERT_OK(dlock_semaphore_acquire(s3, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s5, 0), DLOCK_ELIMIT);
  ASSERT_CONTAINS(dlock_last_error(), "3 permits");
  ASSERT_CONTAINS(dlock_last_error(), "asks for 5");
  ASSERT_OK(dlock_semaphore_release(s3));
  /* The limit goes with the last permit. */
  ASSERT_OK(dlock_semaphore_acquire(s5, 0));
  ASSERT_OK(dlock_semaphore_release(s5));
  dlock_semaphore_free(s3);
  dlock_semaphore_free(s5);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(a_name_is_one_kind_of_lock_at_a_time) {
  NEED_SERVER();
  dlock_client *c = client("/fam3");
  dlock_semaphore *s = sem(c, "k", 2);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "k", NULL));
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "semaphore");
  dlock_rwlock *r = rw(c, "k", DLOCK_RW_READ);
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_semaphore_release(s));
  /* A mutex's name refuses the semaphore and the read-write lock. */
  dlock_mutex *m2 = NULL;
  ASSERT_OK(dlock_mutex_new(&m2, c, "k2", NULL));
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  dlock_semaphore *s2 = sem(c, "k2", 2);
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "mutex");
  dlock_rwlock *w = rw(c, "k2", DLOCK_RW_WRITE);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_mutex_free(m2);
  dlock_rwlock_free(w);
  dlock_semaphore_free(s2);
  dlock_rwlock_free(r);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

#define ROUNDS 3
struct eight {
  atomic_int inside, max_inside, failed;
};
static struct eight *shared;

static int eight_child(void *arg) {
  int id = (int)(intptr_t)arg;
  dlock_client *c = try_client("/fam4");
  if (!c) return 10;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "eight", 3, NULL) != 0) return 11;
  for (int r = 0; r < ROUNDS; r++) {
    if (dlock_semaphore_acquire(s, 90000L * th_time_factor()) != 0) {
      fprintf(stderr, "child %d: %s\n", id, dlock_last_error());
      return 12;
    }
    int now = atomic_fetch_add(&shared->inside, 1) + 1;
    int m = atomic_load(&shared->max_inside);
    while (now > m && !atomic_compare_exchange_weak(&shared->max_inside, &m, now)) {}
    th_sleep_ms(300);
    atomic_fetch_sub(&shared->inside, 1);
    if (dlock_semaphore_release(s) != 0) return 13;
  }
  dlock_semaphore_free(s);
  dlock_client_free(c);
  return 0;
}

TEST(eight_processes_on_three_permits_hold_at_most_three_and_reach_three) {
  NEED_SERVER();
  shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(shared != MAP_FAILED);
  memset(shared, 0, sizeof *shared);
  pid_t pid[8];
  for (int i = 0; i < 8; i++) pid[i] = th_spawn(eight_child, (void *)(intptr_t)i);
  for (int i = 0; i < 8; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT(atomic_load(&shared->max_inside) <= 3);
  ASSERT_EQ(atomic_load(&shared->max_inside), 3);
  munmap(shared, sizeof *shared);
}

static int crash_holding(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = try_client("/fam5");
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
  dlock_client *c = client("/fam5");
  dlock_semaphore *s = sem(c, "crash", 1);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 15000L * th_time_factor()); /* the 2 s session, plus the expiry tick */
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* ---- Read-write locks ---- */

/* Acquire on a thread of its own, then release there when told to (a hold
 * belongs to the thread that took it). */
typedef struct rw_waiter {
  dlock_rwlock *l;
  int rc, release_rc;
  atomic_int done, go;
} rw_waiter;

static void *rw_wait(void *arg) {
  rw_waiter *w = arg;
  w->rc = dlock_rwlock_acquire(w->l, 60000L * th_time_factor());
  atomic_store(&w->done, 1);
  for (int i = 0; i < 6000 && !atomic_load(&w->go); i++) th_sleep_ms(10);
  w->release_rc = w->rc ? 0 : dlock_rwlock_release(w->l);
  return NULL;
}

static int64_t waiters_of(dlock_client *c, const char *name) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (dlock_lock_info_get(c, name, &info) != 0) return -1;
  return info.waiters;
}

TEST(readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out) {
  NEED_SERVER();
  dlock_client *a = client("/fam6"), *b = client("/fam6"), *d = client("/fam6");
  dlock_rwlock *r1 = rw(a, "doc", DLOCK_RW_READ), *r2 = rw(b, "doc", DLOCK_RW_READ);
  dlock_rwlock *w = rw(d, "doc", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0)); /* readers overlap */
  uint64_t last_read = dlock_rwlock_fence(r2) > dlock_rwlock_fence(r1) ? dlock_rwlock_fence(r2)
                                                                        : dlock_rwlock_fence(r1);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EBUSY);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "doc", &info));
  ASSERT_EQ(info.rwlock, 1);
  ASSERT_EQ(info.readers, 2);
  ASSERT_EQ(info.writer, 0);
  ASSERT_OK(dlock_rwlock_release(r2));
  /* A writer waits; a reader arriving now waits behind it. */
  rw_waiter ww = {.l = w};
  pthread_t t;
  pthread_create(&t, NULL, rw_wait, &ww);
  for (int i = 0; i < 400 && waiters_of(a, "doc") < 1; i++) th_sleep_ms(25);
  ASSERT_EQ(waiters_of(a, "doc"), 1);
  ASSERT_STATUS(dlock_rwlock_acquire(r2, 300), DLOCK_EBUSY);
  ASSERT_EQ(atomic_load(&ww.done), 0);
  ASSERT_OK(dlock_rwlock_release(r1));
  for (int i = 0; i < 2000 && !atomic_load(&ww.done); i++) th_sleep_ms(10);
  ASSERT_EQ(atomic_load(&ww.done), 1);
  ASSERT_OK(ww.rc);
  ASSERT(dlock_rwlock_fence(w) > last_read); /* above every earlier reader's */
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "doc", &info));
  ASSERT_EQ(info.writer, 1);
  ASSERT_STATUS(dlock_rwlock_acquire(r1, 0), DLOCK_EBUSY); /* the writer holds alone */
  atomic_store(&ww.go, 1);
  pthread_join(t, NULL);
  ASSERT_OK(ww.release_rc);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT(dlock_rwlock_fence(r1) > dlock_rwlock_fence(w));
  ASSERT_OK(dlock_rwlock_release(r1));
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(w);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(d);
}

TEST(upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends) {
  NEED_SERVER();
  dlock_client *a = client("/fam7"), *b = client("/fam7");
  dlock_rwlock *r = rw(a, "up", DLOCK_RW_READ), *w = rw(a, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EUPGRADE);
  ASSERT_OK(dlock_rwlock_release(r));
  /* A writer takes the read side at once, and a downgrade (release the
   * write side first) keeps other writers out while the read side lasts. */
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  dlock_rwlock *other = rw(b, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_release(w));
  ASSERT_STATUS(dlock_rwlock_acquire(other, 300), DLOCK_EBUSY);
  ASSERT_EQ(dlock_mutex_is_held(dlock_rwlock_mutex(r)), 1);
  ASSERT_OK(dlock_rwlock_release(r));
  ASSERT_OK(dlock_rwlock_acquire(other, 10000L * th_time_factor()));
  ASSERT_OK(dlock_rwlock_release(other));
  dlock_rwlock_free(other);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Mixed readers and writers in four processes: writers update an unguarded
 * counter with a slow read-modify-write; readers check no writer is in. */
#define MIX_ROUNDS 12
struct mix {
  atomic_int writers_in, readers_in, bad;
  long counter; /* plain: only writers touch it */
  atomic_int writes;
};
static struct mix *mix;

static int mix_child(void *arg) {
  int id = (int)(intptr_t)arg;
  dlock_client *c = try_client("/fam8");
  if (!c) return 10;
  dlock_rwlock *r = NULL, *w = NULL;
  if (dlock_rwlock_new(&r, c, "mix", DLOCK_RW_READ, NULL) || dlock_rwlock_new(&w, c, "mix", DLOCK_RW_WRITE, NULL))
    return 11;
  for (int i = 0; i < MIX_ROUNDS; i++) {
    int write = (i + id) % 3 == 0;
    dlock_rwlock *l = write ? w : r;
    if (dlock_rwlock_acquire(l, 90000L * th_time_factor()) != 0) {
      fprintf(stderr, "child %d: %s\n", id, dlock_last_error());
      return 12;
    }
    if (write) {
      if (atomic_fetch_add(&mix->writers_in, 1) != 0 || atomic_load(&mix->readers_in) != 0)
        atomic_fetch_add(&mix->bad, 1);
      long v = mix->counter;
      th_sleep_ms(20);
      mix->counter = v + 1;
      atomic_fetch_add(&mix->writes, 1);
      atomic_fetch_sub(&mix->writers_in, 1);
    } else {
      atomic_fetch_add(&mix->readers_in, 1);
      if (atomic_load(&mix->writers_in) != 0) atomic_fetch_add(&mix->bad, 1);
      th_sleep_ms(20);
      atomic_fetch_sub(&mix->readers_in, 1);
    }
    if (dlock_rwlock_release(l) != 0) return 13;
  }
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(c);
  return 0;
}

TEST(mixed_readers_and_writers_keep_a_writers_only_counter_exact) {
  NEED_SERVER();
  mix = mmap(NULL, sizeof *mix, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(mix != MAP_FAILED);
  memset(mix, 0, sizeof *mix);
  pid_t pid[4];
  for (int i = 0; i < 4; i++) pid[i] = th_spawn(mix_child, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(atomic_load(&mix->bad), 0);
  ASSERT(atomic_load(&mix->writes) > 0);
  ASSERT_EQ(mix->counter, (long)atomic_load(&mix->writes));
  munmap(mix, sizeof *mix);
}

/* ---- Curator on the same paths ---- */

static int curator_ok = -1;
static char curator_why[256];

#define NEED_CURATOR()                                                                              \
  do {                                                                                              \
    NEED_SERVER();                                                                                  \
    if (curator_ok < 0) curator_ok = th_curator_build(CURATOR_SRC, curator_why, sizeof curator_why) == 0; \
    if (!curator_ok) TEST_SKIP("%s", curator_why);                                                  \
  } while (0)

TEST(a_curator_semaphore_and_a_dlock_semaphore_share_the_permits) {
  NEED_CURATOR();
  int fd = -1;
  pid_t pid = th_curator_spawn(&fd, srv.hostport, "/fam9/shared", "semhold:2", "4");
  ASSERT(pid > 0);
  char line[256];
  ASSERT_EQ(th_read_line(fd, line, sizeof line, 30000L * th_time_factor()), 0);
  ASSERT(!strncmp(line, "ACQUIRED", 8));
  dlock_client *c = client("/fam9");
  dlock_semaphore *s1 = sem(c, "shared", 2), *s2 = sem(c, "shared", 2);
  ASSERT_OK(dlock_semaphore_acquire(s1, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EBUSY); /* Curator's lease counts */
  /* Curator sees dlock's lease too: with both taken it gets none. */
  char out[512];
  ASSERT_OK(dlock_semaphore_acquire(s2, 30000L * th_time_factor())); /* after Curator's release */
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam9/shared", "semtry:2",
                           "300"),
            3);
  ASSERT_CONTAINS(out, "BUSY");
  ASSERT_OK(dlock_semaphore_release(s1));
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam9/shared", "semtry:2",
                           "3000"),
            0);
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
  dlock_client *c = client("/fam10");
  dlock_rwlock *r = rw(c, "rw", DLOCK_RW_READ), *w = rw(c, "rw", DLOCK_RW_WRITE);
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
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam10/rw", "readtry", "300"),
            3);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(c);
}

TEST_MAIN()
