/*
 * test_semaphore.c - the semaphore (dlock_semaphore_*) against a real
 * redis-server: at most N holders across processes, a crashed holder's
 * permit returns after its lease, a paused holder is reported lost and its
 * late release touches nothing, FIFO hand-off on release, the stored limit,
 * one kind per name, status, and Redlock's refusal.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client(void) { return test_client(srv.url); }

/* A semaphore handle; 'lease_ms' 0: watchdog mode ('wd_lease_ms' 0: default). */
static dlock_semaphore *sem(dlock_client *c, const char *name, int permits, int64_t lease_ms, int64_t wd_lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  mo.watchdog_lease_ms = wd_lease_ms;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, name, permits, &mo) != 0) TEST_FAIL("semaphore '%s': %s", name, dlock_last_error());
  return s;
}

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

TEST(permits_are_counted_and_fences_rise_per_acquisition) {
  dlock_client *c = client();
  dlock_semaphore *s[4];
  for (int i = 0; i < 4; i++) s[i] = sem(c, "t:sem:basic", 3, 10000, 0);
  uint64_t last = 0;
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(dlock_semaphore_acquire(s[i], 0));
    ASSERT(dlock_semaphore_fence(s[i]) > last);
    last = dlock_semaphore_fence(s[i]);
  }
  ASSERT_STATUS(dlock_semaphore_acquire(s[3], 0), DLOCK_EBUSY);
  char out[64];
  cli(out, sizeof out, "ZCARD t:sem:basic");
  ASSERT_STR_EQ(out, "3");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "t:sem:basic", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.permits, 3);
  ASSERT_EQ(info.permits_used, 3);
  ASSERT_EQ(info.fence, last);
  ASSERT_OK(dlock_semaphore_release(s[1]));
  ASSERT_OK(dlock_semaphore_acquire(s[3], 0));
  ASSERT(dlock_semaphore_fence(s[3]) > last);
  ASSERT_OK(dlock_semaphore_extend(s[3], 20000));
  cli(out, sizeof out, "ZCARD t:sem:basic");
  ASSERT_STR_EQ(out, "3");
  for (int i = 0; i < 4; i++)
    if (i != 1) ASSERT_OK(dlock_semaphore_release(s[i]));
  cli(out, sizeof out, "EXISTS t:sem:basic {t:sem:basic}:meta");
  ASSERT_STR_EQ(out, "0");
  for (int i = 0; i < 4; i++) dlock_semaphore_free(s[i]);
  dlock_client_free(c);
}

/* Shared between the processes of the next test (MAP_SHARED). */
#define ROUNDS 4
struct eight {
  atomic_int inside, max_inside;
  atomic_ullong fences[8 * ROUNDS];
};

static struct eight *shared;

static int eight_child(void *arg) {
  int id = (int)(intptr_t)arg;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return 10;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "t:sem:eight", 3, &mo) != 0) return 11;
  for (int r = 0; r < ROUNDS; r++) {
    if (dlock_semaphore_acquire(s, 60000) != 0) {
      fprintf(stderr, "child %d: %s\n", id, dlock_last_error());
      return 12;
    }
    int now = atomic_fetch_add(&shared->inside, 1) + 1;
    int m = atomic_load(&shared->max_inside);
    while (now > m && !atomic_compare_exchange_weak(&shared->max_inside, &m, now)) {
    }
    atomic_store(&shared->fences[id * ROUNDS + r], dlock_semaphore_fence(s));
    th_sleep_ms(150);
    atomic_fetch_sub(&shared->inside, 1);
    if (dlock_semaphore_release(s) != 0) return 13;
  }
  dlock_semaphore_free(s);
  dlock_client_free(c);
  return 0;
}

TEST(eight_processes_on_three_permits_hold_at_most_three_and_reach_three) {
  shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(shared != MAP_FAILED);
  memset(shared, 0, sizeof *shared);
  pid_t pid[8];
  for (int i = 0; i < 8; i++) pid[i] = th_spawn(eight_child, (void *)(intptr_t)i);
  for (int i = 0; i < 8; i++) {
    int st = th_wait(pid[i], 120000 * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT(atomic_load(&shared->max_inside) <= 3);
  ASSERT_EQ(atomic_load(&shared->max_inside), 3);
  /* Every acquisition has its own fence. */
  for (int i = 0; i < 8 * ROUNDS; i++) {
    ASSERT(shared->fences[i] > 0);
    for (int j = 0; j < i; j++) ASSERT(shared->fences[i] != shared->fences[j]);
  }
  munmap(shared, sizeof *shared);
}

static int crash_holding(void *arg) {
  (void)arg;
  dlock_client *c = client();
  dlock_semaphore *s = sem(c, "t:sem:crash", 2, 1500, 0);
  if (dlock_semaphore_acquire(s, 0) != 0) return 1;
  raise(SIGKILL);
  return 2;
}

TEST(a_holder_killed_with_sigkill_gives_its_permit_back_after_its_lease) {
  /* Forked before this process starts threads of its own (a client's). */
  pid_t pid = th_spawn(crash_holding, NULL);
  int st = th_wait(pid, 20000);
  ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  dlock_client *c = client();
  dlock_semaphore *a = sem(c, "t:sem:crash", 2, 30000, 0), *b = sem(c, "t:sem:crash", 2, 30000, 0);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(b, 0), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_semaphore_acquire(b, 10000 * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 5000 * th_time_factor());
  char out[64];
  cli(out, sizeof out, "ZCARD t:sem:crash");
  ASSERT_STR_EQ(out, "2");
  ASSERT_OK(dlock_semaphore_release(a));
  ASSERT_OK(dlock_semaphore_release(b));
  dlock_semaphore_free(a);
  dlock_semaphore_free(b);
  dlock_client_free(c);
}

static int stop_pipe[2], go_pipe[2];

/* Holds a permit in watchdog mode, is stopped past its lease, then reports
 * what it sees: exit 0 when the loss was reported and the late release
 * answered ENOTHELD. */
static int paused_holder(void *arg) {
  (void)arg;
  dlock_client *c = client();
  dlock_semaphore *s = sem(c, "t:sem:pause", 2, 0, 900);
  if (dlock_semaphore_acquire(s, 0) != 0) return 1;
  char b = 'a';
  if (write(stop_pipe[1], &b, 1) != 1) return 2;
  if (read(go_pipe[0], &b, 1) != 1) return 3;
  if (dlock_semaphore_lost(s) == DLOCK_LOST_NONE) return 4;
  int rc = dlock_semaphore_release(s);
  if (rc != DLOCK_ENOTHELD) {
    fprintf(stderr, "late release: %d %s\n", rc, dlock_last_error());
    return 5;
  }
  dlock_semaphore_free(s);
  dlock_client_free(c);
  return 0;
}

TEST(a_paused_holder_is_reported_lost_and_its_late_release_touches_nothing) {
  ASSERT(pipe(stop_pipe) == 0 && pipe(go_pipe) == 0);
  pid_t pid = th_spawn(paused_holder, NULL);
  /* Only the child writes to stop_pipe and reads go_pipe: if it dies, the
   * read below ends (EOF) instead of waiting forever. */
  close(stop_pipe[1]);
  close(go_pipe[0]);
  char b;
  if (read(stop_pipe[0], &b, 1) != 1) {
    kill(pid, SIGKILL);
    th_wait(pid, 5000);
    close(stop_pipe[0]);
    close(go_pipe[1]);
    TEST_FAIL("the holder ended before it held a permit");
  }
  kill(pid, SIGSTOP);
  dlock_client *c = client();
  dlock_semaphore *x = sem(c, "t:sem:pause", 2, 30000, 0), *y = sem(c, "t:sem:pause", 2, 30000, 0);
  int rx = dlock_semaphore_acquire(x, 0);
  int busy = dlock_semaphore_acquire(y, 0);
  /* The stopped holder's permit returns when its lease ends. */
  int ry = dlock_semaphore_acquire(y, 10000 * th_time_factor());
  kill(pid, SIGCONT); /* before any assertion: never leave it stopped */
  if (rx != 0 || busy != DLOCK_EBUSY || ry != 0) {
    kill(pid, SIGKILL);
    th_wait(pid, 5000);
  }
  ASSERT_OK(rx);
  ASSERT_EQ(busy, DLOCK_EBUSY);
  ASSERT_OK(ry);
  th_sleep_ms(200);
  ASSERT_EQ(write(go_pipe[1], "g", 1), 1);
  int st = th_wait(pid, 20000);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  char out[64];
  cli(out, sizeof out, "ZCARD t:sem:pause");
  ASSERT_STR_EQ(out, "2");
  ASSERT_EQ(dlock_mutex_is_held((dlock_mutex *)x), 1);
  ASSERT_EQ(dlock_mutex_is_held((dlock_mutex *)y), 1);
  ASSERT_OK(dlock_semaphore_release(x));
  ASSERT_OK(dlock_semaphore_release(y));
  dlock_semaphore_free(x);
  dlock_semaphore_free(y);
  dlock_client_free(c);
  close(stop_pipe[0]);
  close(go_pipe[1]);
}

TEST(a_limit_other_than_the_stored_one_is_an_error_naming_both) {
  dlock_client *c = client();
  dlock_semaphore *a = sem(c, "t:sem:limit", 3, 10000, 0), *b = sem(c, "t:sem:limit", 5, 10000, 0);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(b, 0), DLOCK_ELIMIT);
  ASSERT_CONTAINS(dlock_last_error(), "limit 3");
  ASSERT_CONTAINS(dlock_last_error(), "asked for 5");
  ASSERT_CONTAINS(dlock_semaphore_errmsg(b), "t:sem:limit");
  ASSERT_STATUS(dlock_semaphore_acquire(b, 2000), DLOCK_ELIMIT); /* not a wait: an error at once */
  ASSERT_OK(dlock_semaphore_release(a));
  /* Once nothing is held the limit goes with the last permit. */
  ASSERT_OK(dlock_semaphore_acquire(b, 0));
  ASSERT_OK(dlock_semaphore_release(b));
  dlock_semaphore_free(a);
  dlock_semaphore_free(b);
  dlock_client_free(c);
}

TEST(a_name_is_one_kind_of_lock_at_a_time) {
  dlock_client *c = client();
  dlock_semaphore *s = sem(c, "t:sem:kind", 2, 10000, 0);
  dlock_mutex *m = test_mutex(c, "t:sem:kind", 10000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "is a semaphore, not a mutex");
  ASSERT_STATUS(dlock_mutex_acquire(m, 500), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_semaphore_release(s));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "is a mutex");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* A semaphore and a read-write lock both keep a ZSET at the name: each
 * must still refuse the other's name (the meta's 'kind' tells them apart). */
TEST(a_semaphore_and_a_read_write_lock_refuse_each_others_names) {
  dlock_client *c = client();
  dlock_rwlock *rw;
  ASSERT_OK(dlock_rwlock_new(&rw, c, "t:sem:rw", DLOCK_RW_READ, NULL));
  dlock_semaphore *s = sem(c, "t:sem:rw", 3, 10000, 0);
  ASSERT_OK(dlock_rwlock_acquire(rw, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "rwlock, not a semaphore");
  ASSERT_OK(dlock_rwlock_release(rw));
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT(dlock_rwlock_acquire(rw, 0) != 0);
  ASSERT_CONTAINS(dlock_last_error(), "semaphore");
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_rwlock_free(rw);
  dlock_client_free(c);
}

struct fifo_waiter {
  dlock_semaphore *s;
  int rc;
  long long at;
  atomic_int *order;
  int place;
};

static void *fifo_wait(void *arg) {
  struct fifo_waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->s, 30000 * th_time_factor());
  w->at = th_now_ms();
  w->place = atomic_fetch_add(w->order, 1);
  if (w->rc == 0) {
    th_sleep_ms(100);
    dlock_semaphore_release(w->s);
  }
  return NULL;
}

TEST(a_release_wakes_the_first_waiter_and_waiters_go_in_arrival_order) {
  dlock_client *c = client();
  dlock_semaphore *h = sem(c, "t:sem:fifo", 1, 0, 0); /* watchdog: a 30 s lease renewed */
  ASSERT_OK(dlock_semaphore_acquire(h, 0));
  struct fifo_waiter w[3];
  pthread_t t[3];
  atomic_int order = 0;
  for (int i = 0; i < 3; i++) {
    w[i] = (struct fifo_waiter){sem(c, "t:sem:fifo", 1, 0, 0), -1, 0, &order, -1};
    ASSERT(pthread_create(&t[i], NULL, fifo_wait, &w[i]) == 0);
    th_sleep_ms(300); /* each one queued before the next arrives */
  }
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "t:sem:fifo", &info));
  ASSERT_EQ(info.waiters, 3);
  /* Release just after the first waiter's re-check (2 s after it began to
   * wait): without the wake-up message it would sleep ~2 s more. */
  th_sleep_ms(1400);
  long long released = th_now_ms();
  ASSERT_OK(dlock_semaphore_release(h));
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(w[i].rc);
    ASSERT_EQ(w[i].place, i);
  }
  /* Woken by the release, not by a re-check (every 2 s at the most). */
  ASSERT(w[0].at - released < 1500 * th_time_factor());
  for (int i = 0; i < 3; i++) dlock_semaphore_free(w[i].s);
  dlock_semaphore_free(h);
  dlock_client_free(c);
}

TEST(bad_permit_counts_are_refused) {
  dlock_client *c = client();
  dlock_semaphore *s = NULL;
  ASSERT_STATUS(dlock_semaphore_new(&s, c, "t:sem:bad", 0, NULL), DLOCK_ERANGE);
  ASSERT(s == NULL);
  ASSERT_STATUS(dlock_semaphore_new(&s, c, "t:sem:bad", -3, NULL), DLOCK_ERANGE);
  ASSERT_STATUS(dlock_semaphore_new(&s, c, "t:sem:bad", DLOCK_SEMAPHORE_MAX_PERMITS + 1, NULL), DLOCK_ERANGE);
  ASSERT_STATUS(dlock_semaphore_new(&s, NULL, "t:sem:bad", 2, NULL), DLOCK_EINVAL);
  ASSERT_STATUS(dlock_semaphore_acquire(NULL, 0), DLOCK_EINVAL);
  dlock_semaphore_free(NULL);
  dlock_client_free(c);
}

TEST(redlock_does_not_offer_semaphores) {
  th_redis nodes[3];
  ASSERT(th_redis_start_n(nodes, 3, NULL) == 0);
  char url[1024];
  th_redlock_url(nodes, 3, url, sizeof url);
  dlock_client *c = test_client(url);
  dlock_semaphore *s = NULL;
  int rc = dlock_semaphore_new(&s, c, "t:sem:rl", 2, NULL);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  dlock_client_free(c);
  th_redis_stop_n(nodes, 3);
  ASSERT_STATUS(rc, DLOCK_EINVAL);
  ASSERT(s == NULL);
  ASSERT_CONTAINS(msg, "semaphore is not offered");
  ASSERT_CONTAINS(msg, "Redlock");
}

TEST_MAIN()
