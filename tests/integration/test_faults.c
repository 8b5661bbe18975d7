/*
 * test_faults.c - holders that misbehave, as real processes: contention from
 * several processes on an unguarded counter, and a holder frozen with
 * SIGSTOP past its lease (the seeds' "zombie") that must learn it lost the
 * lock, must not delete the new holder's key, and whose token the guard rejects.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;
static char workdir[256];

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
  snprintf(workdir, sizeof workdir, "%s", srv.dir);
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client_or_null(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

/* ---- Mutual exclusion across processes ---- */

#define PROCS 4
#define ROUNDS 40

static long read_counter(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1000000;
    fclose(f);
  }
  return v;
}

static int increment_unguarded(void *arg) {
  const char *path = arg;
  dlock_client *c = client_or_null();
  dlock_mutex *m = NULL;
  if (!c || dlock_mutex_new(&m, c, "t:counter", NULL) != 0) return 10;
  for (int i = 0; i < ROUNDS; i++) {
    if (dlock_mutex_acquire(m, 30000) != 0) return 11;
    /* read, pause, write: loses updates unless the lock excludes others */
    long v = read_counter(path);
    usleep(200);
    FILE *f = fopen(path, "w");
    if (!f) return 12;
    fprintf(f, "%ld\n", v + 1);
    fclose(f);
    if (dlock_mutex_release(m) != 0) return 13;
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TEST(processes_contending_on_one_lock_keep_an_unguarded_counter_exact) {
  char path[512];
  snprintf(path, sizeof path, "%s/counter", workdir);
  FILE *f = fopen(path, "w");
  ASSERT(f);
  fprintf(f, "0\n");
  fclose(f);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = th_spawn(increment_unguarded, path);
  for (int i = 0; i < PROCS; i++) {
    int st = th_wait(pids[i], 240000);
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(read_counter(path), PROCS * ROUNDS);
}

/* ---- The frozen holder ---- */

static atomic_int callback_calls;
static atomic_int callback_reason;

static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m;
  (void)arg;
  if (strcmp(name, "t:zombie") == 0) {
    atomic_store(&callback_reason, (int)reason);
    atomic_fetch_add(&callback_calls, 1);
  }
}

/* Exit codes tell the parent which check failed. */
static int zombie(void *arg) {
  int ready_fd = *(int *)arg;
  dlock_client *c = client_or_null();
  if (!c) return 20;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 1000 * th_time_factor();
  mo.on_lost = on_lost;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "t:zombie", &mo) != 0) return 21;
  if (dlock_mutex_acquire(m, 0) != 0) return 22;
  uint64_t my_fence = dlock_mutex_fence(m);
  int lost_fd = dlock_mutex_lost_fd(m);
  if (lost_fd < 0) return 23;
  /* Write once with our fence while we hold the lock. */
  if (dlock_guard_check(c, "stock:zombie", my_fence) != 0) return 24;
  if (write(ready_fd, "r", 1) != 1) return 25;
  /* The parent freezes us here (SIGSTOP), takes the lock, and thaws us. */
  struct pollfd p = {lost_fd, POLLIN, 0};
  int n = poll(&p, 1, 15000 * th_time_factor());
  if (n != 1) return 30; /* the fd never became readable */
  for (int i = 0; i < 100 && atomic_load(&callback_calls) == 0; i++) usleep(20000);
  if (atomic_load(&callback_calls) != 1) return 31;
  /* Its deadline passed while it was frozen: lost by the deadline, before
   * any renewal could tell it that the key was taken (docs/design.md). */
  if (atomic_load(&callback_reason) != DLOCK_LOST_DEADLINE && atomic_load(&callback_reason) != DLOCK_LOST_UNREACHABLE)
    return 32;
  if (dlock_mutex_lost(m) != (dlock_lost_reason)atomic_load(&callback_reason)) return 33;
  /* The zombie's late write is rejected... */
  if (dlock_guard_check(c, "stock:zombie", my_fence) != DLOCK_ESTALE) return 34;
  /* ...and its release leaves the new holder's key alone. */
  if (dlock_mutex_release(m) != DLOCK_ENOTHELD) return 35;
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TEST(a_holder_frozen_past_its_lease_learns_it_lost_and_cannot_harm_the_new_holder) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = th_spawn(zombie, &pipefd[1]);
  char b;
  struct pollfd p = {pipefd[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  ASSERT_EQ(read(pipefd[0], &b, 1), 1);
  kill(pid, SIGSTOP);

  dlock_client *c = client_or_null();
  ASSERT(c);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "t:zombie", NULL));
  /* The frozen holder cannot renew: its 1 s lease runs out. */
  ASSERT_OK(dlock_mutex_acquire(m, 15000 * th_time_factor()));
  uint64_t new_fence = dlock_mutex_fence(m);
  ASSERT_OK(dlock_guard_check(c, "stock:zombie", new_fence));
  char before[128], after[128];
  th_redis_cli(&srv, before, sizeof before, "GET t:zombie");

  kill(pid, SIGCONT);
  int st = th_wait(pid, 30000 * th_time_factor());
  ASSERT(st != -1 && WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  th_redis_cli(&srv, after, sizeof after, "GET t:zombie");
  ASSERT_STR_EQ(after, before);
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST(a_lock_deleted_by_an_admin_is_reported_lost_by_the_watchdog) {
  dlock_client *c = client_or_null();
  ASSERT(c);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 600 * th_time_factor();
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "t:admin", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int fd = dlock_mutex_lost_fd(m);
  ASSERT(fd >= 0);
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(c, "t:admin", &was));
  ASSERT_EQ(was, 1);
  struct pollfd p = {fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_DELETED);    /* the forced release left its tombstone */
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ELOST); /* re-entry into a lost hold */
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  /* A fresh acquire resets the loss state and the fd. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  ASSERT_EQ(poll(&p, 1, 0), 0);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(renewal_that_cannot_reach_redis_reports_unreachable_before_the_lease_ends) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.command_timeout_ms = 200;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 1500 * th_time_factor();
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "t:unreachable", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_mono_ms valid_until = dlock_mutex_valid_until(m);
  kill(srv.pid, SIGSTOP);
  int fd = dlock_mutex_lost_fd(m);
  struct pollfd p = {fd, POLLIN, 0};
  int n = poll(&p, 1, 10000 * th_time_factor());
  dlock_mono_ms noticed = dlock_mono_now();
  kill(srv.pid, SIGCONT);
  ASSERT_EQ(n, 1);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_UNREACHABLE);
  /* Declared lost at the local deadline, not long after. */
  ASSERT(noticed >= valid_until);
  ASSERT(noticed < valid_until + 1500 * th_time_factor());
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(hundreds_of_locks_lost_at_once_are_all_reported) {
  /* More locks than one watchdog pass handles (512), some renewed and some
   * fixed, all lost together while Redis is frozen. */
  enum { RENEWED = 520, FIXED = 100 };
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.command_timeout_ms = 300;
  o.connect_timeout_ms = 300;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  static dlock_mutex *locks[RENEWED + FIXED];
  for (int i = 0; i < RENEWED + FIXED; i++) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.watchdog_lease_ms = 1500 * th_time_factor();
    if (i >= RENEWED) mo.lease_ms = 1400 * th_time_factor();
    char name[32];
    snprintf(name, sizeof name, "t:many:%d", i);
    ASSERT_OK(dlock_mutex_new(&locks[i], c, name, &mo));
    ASSERT_OK(dlock_mutex_acquire(locks[i], 0));
  }
  kill(srv.pid, SIGSTOP);
  int lost = 0;
  for (int round = 0; round < 200 && lost < RENEWED + FIXED; round++) {
    th_sleep_ms(50 * th_time_factor());
    lost = 0;
    for (int i = 0; i < RENEWED + FIXED; i++) lost += dlock_mutex_lost(locks[i]) != DLOCK_LOST_NONE;
  }
  kill(srv.pid, SIGCONT);
  ASSERT_EQ(lost, RENEWED + FIXED);
  for (int i = 0; i < RENEWED + FIXED; i++) dlock_mutex_free(locks[i]);
  dlock_client_free(c);
}

TEST(an_acquire_that_never_reached_a_dead_server_is_not_an_unknown_outcome) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "t:dead", NULL));
  kill(srv.pid, SIGKILL);
  waitpid(srv.pid, NULL, 0);
  srv.pid = 0;
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ECONNECT);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), srv.url + strlen("redis://"));
  ASSERT_EQ(th_redis_restart(&srv), 0);
  ASSERT_OK(dlock_mutex_acquire(m, 0)); /* the client reconnects by itself */
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST_MAIN()
