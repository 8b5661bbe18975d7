/*
 * test_pg_family.c - semaphores and read-write locks on PostgreSQL (the
 * lease tables) through the public API, against a real server that the
 * harness starts (harness_pg.h): a kill -9'd and a SIGSTOPped holder. The
 * scenarios every backend runs are in tests/conformance/. Labels:
 * integration, pg.
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
#include "harness_pg.h"
#include "test.h"

static th_pg srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) { srv_up = th_pg_suite_start(&srv, skip_why, sizeof skip_why); }

void test_teardown(void) {
  if (srv_up) th_pg_stop(&srv);
}

#define NEED_SERVER()                       \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

/* A client on the schema 'schema'; NULL on failure (usable in a child). */
static dlock_client *client_or_null(const char *schema) { return th_pg_client(&srv, schema, NULL); }

static dlock_client *client(const char *schema) {
  dlock_client *c = client_or_null(schema);
  if (!c) TEST_FAIL("client on schema %s: %s", schema, dlock_last_error());
  return c;
}


/* The scenarios every backend passes: tests/conformance/. */

/* ---- Leases ---- */

static int crash_holding(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = client_or_null("fam5");
  if (!c) return 1;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 1500;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "crash", 1, &mo) != 0 || dlock_semaphore_acquire(s, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  for (;;) pause();
}

static void wait_ready(int fd) {
  struct pollfd pf = {fd, POLLIN, 0};
  char ch = 0;
  if (poll(&pf, 1, (int)(30000L * th_time_factor())) != 1 || read(fd, &ch, 1) != 1 || ch != 'A')
    TEST_FAIL("the child did not take its permit");
}

TEST(a_holder_killed_with_sigkill_gives_its_permit_back_after_its_lease) {
  NEED_SERVER();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = th_spawn(crash_holding, (void *)(intptr_t)p[1]);
  wait_ready(p[0]);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
  close(p[1]);
  dlock_client *c = client("fam5");
  dlock_semaphore *s = test_semaphore(c, "crash", 1, 0);
  ASSERT_STATUS(dlock_semaphore_acquire(s, 0), DLOCK_EBUSY); /* its lease still runs */
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 15000L * th_time_factor()); /* the 1.5 s lease, polled */
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* A holder with a 1.5 s watchdog lease, stopped with SIGSTOP past it: it
 * must learn it lost the permit, and its late release must touch nothing. */
static int paused_holder(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = client_or_null("fam9");
  if (!c) return 1;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 1500;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "zombie", 1, &mo) != 0 || dlock_semaphore_acquire(s, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  raise(SIGSTOP);
  /* Woken long after its lease: lost, and the release changes nothing. */
  for (int i = 0; i < 200 && dlock_semaphore_lost(s) == DLOCK_LOST_NONE; i++) th_sleep_ms(25);
  if (dlock_semaphore_lost(s) == DLOCK_LOST_NONE) return 4;
  if (dlock_semaphore_release(s) != DLOCK_ENOTHELD) return 5;
  return 0;
}

TEST(a_paused_holder_is_reported_lost_and_its_late_release_touches_nothing) {
  NEED_SERVER();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = th_spawn(paused_holder, (void *)(intptr_t)p[1]);
  wait_ready(p[0]);
  int st;
  for (int i = 0; i < 400; i++) {
    if (waitpid(pid, &st, WUNTRACED | WNOHANG) == pid && WIFSTOPPED(st)) break;
    th_sleep_ms(10);
  }
  dlock_client *c = client("fam9");
  dlock_semaphore *s = test_semaphore(c, "zombie", 1, 0);
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor())); /* after the zombie's lease */
  kill(pid, SIGCONT);
  st = th_wait(pid, 30000L * th_time_factor());
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  ASSERT_EQ(dlock_mutex_is_held(dlock_semaphore_mutex(s)), 1); /* untouched by the late release */
  ASSERT_OK(dlock_semaphore_release(s));
  close(p[0]);
  close(p[1]);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST_MAIN()
