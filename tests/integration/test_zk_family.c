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

/* A client on the namespace '/space' with a 2 s session (a killed holder's
 * nodes go soon). NULL on failure (usable in a child). */
static dlock_client *client_or_null(const char *space) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s/%s?session_timeout=2s", srv.hostport, space);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

static dlock_client *client(const char *space) {
  dlock_client *c = client_or_null(space);
  if (!c) TEST_FAIL("client on %s/%s: %s", srv.hostport, space, dlock_last_error());
  return c;
}

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
  dlock_client *c = client("fam9");
  dlock_semaphore *s1 = test_semaphore(c, "shared", 2, 0), *s2 = test_semaphore(c, "shared", 2, 0);
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
  ASSERT_EQ(th_curator_run(out, sizeof out, 30000L * th_time_factor(), srv.hostport, "/fam10/rw", "readtry", "300"),
            3);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(c);
}

TEST_MAIN()
