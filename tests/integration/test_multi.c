/*
 * test_multi.c - the multi-lock (dlock_multi_*) on a real redis-server: two
 * processes taking {a,b,c} and {c,b,a} 200 times each never deadlock and
 * never overlap; a busy name rolls back every name taken before it; bad
 * input; fences per name; loss of one name is the set's loss; cancel.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

static void flush(void) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "FLUSHALL");
}

static int key_exists(const char *key) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EXISTS %s", key);
  return atoi(out);
}

/* Shared between the processes (MAP_SHARED before fork). */
typedef struct shared {
  int inside;   /* holders in the critical section now */
  int overlaps; /* times one entered while the other was inside */
  long counter; /* unguarded read-modify-write */
  int rounds[2];
  char err[2][512];
} shared;

typedef struct worker {
  shared *sh;
  int idx;
  const char *const *names;
  int rounds;
} worker;

static int run_worker(void *arg) {
  worker *w = arg;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    snprintf(w->sh->err[w->idx], sizeof w->sh->err[w->idx], "client: %s", dlock_last_error());
    return 2;
  }
  dlock_multi *mm = NULL;
  if (dlock_multi_new(&mm, c, w->names, 3, NULL) != 0) {
    snprintf(w->sh->err[w->idx], sizeof w->sh->err[w->idx], "new: %s", dlock_last_error());
    return 2;
  }
  int rc = 0;
  for (int i = 0; i < w->rounds; i++) {
    /* A deadlock would show as this wait running out (EBUSY). */
    int a = dlock_multi_acquire(mm, 20000 * th_time_factor());
    if (a != 0) {
      snprintf(w->sh->err[w->idx], sizeof w->sh->err[w->idx], "round %d: acquire %s: %s", i, dlock_err_name(a),
               dlock_multi_errmsg(mm));
      rc = 3;
      break;
    }
    if (__atomic_fetch_add(&w->sh->inside, 1, __ATOMIC_SEQ_CST) != 0)
      __atomic_fetch_add(&w->sh->overlaps, 1, __ATOMIC_SEQ_CST);
    long v = __atomic_load_n(&w->sh->counter, __ATOMIC_SEQ_CST);
    if (i % 8 == 0) usleep(200);
    __atomic_store_n(&w->sh->counter, v + 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&w->sh->inside, 1, __ATOMIC_SEQ_CST);
    int r = dlock_multi_release(mm);
    if (r != 0) {
      snprintf(w->sh->err[w->idx], sizeof w->sh->err[w->idx], "round %d: release %s: %s", i, dlock_err_name(r),
               dlock_multi_errmsg(mm));
      rc = 4;
      break;
    }
    w->sh->rounds[w->idx]++;
  }
  dlock_multi_free(mm);
  dlock_client_free(c);
  return rc;
}

TEST(two_processes_in_opposite_orders_never_deadlock_nor_overlap) {
  flush();
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  static const char *const fwd[] = {"mx:a", "mx:b", "mx:c"};
  static const char *const rev[] = {"mx:c", "mx:b", "mx:a"};
  worker w0 = {sh, 0, fwd, 200}, w1 = {sh, 1, rev, 200};
  pid_t p0 = th_spawn(run_worker, &w0);
  pid_t p1 = th_spawn(run_worker, &w1);
  int s0 = th_wait(p0, 300000L * th_time_factor());
  int s1 = th_wait(p1, 300000L * th_time_factor());
  if (s0 == -1 || s1 == -1) TEST_FAIL("a worker did not finish in time (deadlock?)");
  if (!WIFEXITED(s0) || WEXITSTATUS(s0) != 0 || !WIFEXITED(s1) || WEXITSTATUS(s1) != 0)
    TEST_FAIL("workers failed: [%s] [%s]", sh->err[0], sh->err[1]);
  ASSERT_EQ(sh->rounds[0], 200);
  ASSERT_EQ(sh->rounds[1], 200);
  ASSERT_EQ(sh->overlaps, 0);
  ASSERT_EQ(sh->counter, 400);
  ASSERT_EQ(key_exists("mx:a") + key_exists("mx:b") + key_exists("mx:c"), 0);
  munmap(sh, sizeof *sh);
}

TEST(a_busy_name_rolls_back_every_name_taken_before_it) {
  flush();
  dlock_client *c = test_client(srv.url);
  dlock_client *other = test_client(srv.url);
  dlock_mutex *b = test_mutex(other, "rb:b", 30000);
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  static const char *const names[] = {"rb:c", "rb:a", "rb:b"};
  dlock_multi *mm = NULL;
  ASSERT_OK(dlock_multi_new(&mm, c, names, 3, NULL));
  /* Try once: 'rb:a' is taken first (sorted), then 'rb:b' is busy. */
  ASSERT_STATUS(dlock_multi_acquire(mm, 0), DLOCK_EBUSY);
  ASSERT_CONTAINS(dlock_multi_errmsg(mm), "'rb:b' (2 of 3");
  ASSERT_CONTAINS(dlock_multi_errmsg(mm), "released again: 'rb:a'");
  ASSERT_CONTAINS(dlock_last_error(), "rb:b");
  ASSERT_EQ(key_exists("rb:a"), 0);
  ASSERT_EQ(key_exists("rb:c"), 0); /* never reached */
  ASSERT_EQ(dlock_multi_fence(mm, 0), 0);
  ASSERT_EQ(dlock_multi_valid_until(mm), 0);
  /* With a wait: the same, after the wait. */
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_multi_acquire(mm, 300), DLOCK_EBUSY);
  ASSERT(th_now_ms() - t0 >= 250);
  ASSERT_EQ(key_exists("rb:a"), 0);
  ASSERT_EQ(key_exists("rb:c"), 0);
  /* Once 'rb:b' is free, all three are taken, each with its own fence. */
  ASSERT_OK(dlock_mutex_release(b));
  ASSERT_OK(dlock_multi_acquire(mm, 0));
  ASSERT_EQ(key_exists("rb:a") + key_exists("rb:b") + key_exists("rb:c"), 3);
  for (size_t i = 0; i < 3; i++) {
    ASSERT(dlock_multi_fence(mm, i) > 0);
    ASSERT_STR_EQ(dlock_multi_name(mm, i), names[i]);
  }
  ASSERT(dlock_multi_fence(mm, 2) > dlock_mutex_fence(b) || dlock_mutex_fence(b) == 0);
  ASSERT_EQ(dlock_multi_fence(mm, 3), 0);
  ASSERT(dlock_multi_valid_until(mm) > dlock_mono_now());
  ASSERT_EQ(dlock_multi_lost(mm), DLOCK_LOST_NONE);
  ASSERT_OK(dlock_multi_extend(mm, 60000));
  ASSERT_OK(dlock_multi_release(mm));
  ASSERT_EQ(key_exists("rb:a") + key_exists("rb:b") + key_exists("rb:c"), 0);
  ASSERT_STATUS(dlock_multi_release(mm), DLOCK_ENOTHELD);
  dlock_multi_free(mm);
  dlock_mutex_free(b);
  dlock_client_free(other);
  dlock_client_free(c);
}

TEST(bad_input_is_refused_clearly) {
  dlock_client *c = test_client(srv.url);
  dlock_multi *mm = NULL;
  static const char *const dup[] = {"d:a", "d:b", "d:a"};
  ASSERT_STATUS(dlock_multi_new(&mm, c, dup, 3, NULL), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "'d:a' is given twice");
  ASSERT(mm == NULL);
  ASSERT_STATUS(dlock_multi_new(&mm, c, dup, 0, NULL), DLOCK_EINVAL);
  ASSERT_STATUS(dlock_multi_new(&mm, c, NULL, 2, NULL), DLOCK_EINVAL);
  static const char *const bad[] = {"ok", "no{brace}"};
  ASSERT(dlock_multi_new(&mm, c, bad, 2, NULL) != 0);
  ASSERT_CONTAINS(dlock_last_error(), "name 2 of 2");
  ASSERT_STATUS(dlock_multi_acquire(NULL, 0), DLOCK_EINVAL);
  dlock_multi_free(NULL);
  dlock_client_free(c);
}

TEST(losing_one_name_loses_the_set_and_its_fd_says_so) {
  flush();
  dlock_client *c = test_client(srv.url);
  static const char *const names[] = {"lf:a", "lf:b"};
  dlock_multi *mm = NULL;
  ASSERT_OK(dlock_multi_new(&mm, c, names, 2, NULL));
  int fd = dlock_multi_lost_fd(mm);
  ASSERT(fd >= 0);
  ASSERT_OK(dlock_multi_acquire(mm, 0));
  struct pollfd p = {fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 0), 0);
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(c, "lf:b", &was));
  ASSERT_EQ(was, 1);
  /* The watchdog finds it at its next renewal (a third of 30 s at most):
   * wait for the fd. */
  ASSERT_EQ(poll(&p, 1, 15000 * th_time_factor()), 1);
  ASSERT_EQ(dlock_multi_lost(mm), DLOCK_LOST_DELETED);
  ASSERT_STATUS(dlock_multi_release(mm), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_multi_errmsg(mm), "lf:b");
  ASSERT_EQ(key_exists("lf:a"), 0); /* the other name was released all the same */
  /* Acquired again: the fd is quiet again. */
  ASSERT_OK(dlock_multi_acquire(mm, 0));
  ASSERT_EQ(poll(&p, 1, 0), 0);
  ASSERT_OK(dlock_multi_release(mm));
  dlock_multi_free(mm);
  dlock_client_free(c);
}

typedef struct canceler {
  dlock_multi *mm;
  int rc;
} canceler;

static void *acquire_forever(void *arg) {
  canceler *k = arg;
  k->rc = dlock_multi_acquire(k->mm, DLOCK_WAIT_FOREVER);
  return NULL;
}

TEST(cancel_ends_a_waiting_acquire_with_nothing_held) {
  flush();
  dlock_client *c = test_client(srv.url);
  dlock_client *other = test_client(srv.url);
  dlock_mutex *b = test_mutex(other, "cx:b", 30000);
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  static const char *const names[] = {"cx:b", "cx:a"};
  dlock_multi *mm = NULL;
  ASSERT_OK(dlock_multi_new(&mm, c, names, 2, NULL));
  canceler k = {mm, 1};
  pthread_t t;
  pthread_create(&t, NULL, acquire_forever, &k);
  th_sleep_ms(300);
  ASSERT_EQ(key_exists("cx:a"), 1); /* taken first, now waiting for cx:b */
  long long t0 = th_now_ms();
  dlock_multi_cancel(mm);
  pthread_join(t, NULL);
  ASSERT(th_now_ms() - t0 < 3000 * th_time_factor());
  ASSERT_EQ(k.rc, DLOCK_ECANCELED);
  ASSERT_EQ(key_exists("cx:a"), 0);
  dlock_multi_free(mm);
  dlock_mutex_free(b);
  dlock_client_free(other);
  dlock_client_free(c);
}

TEST(a_multi_lock_works_on_redlock_too) {
  th_redis rl[3];
  if (th_redis_start_n(rl, 3, NULL) != 0) TEST_FAIL("cannot start 3 redis-servers");
  char url[1024];
  th_redlock_url(rl, 3, url, sizeof url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL, *other = NULL;
  static const char *const names[] = {"rl:b", "rl:a"};
  dlock_multi *mm = NULL;
  dlock_mutex *busy = NULL;
  int ok = dlock_client_new(&c, &o) == 0 && dlock_client_new(&other, &o) == 0 &&
           dlock_multi_new(&mm, c, names, 2, NULL) == 0 && dlock_mutex_new(&busy, other, "rl:b", NULL) == 0;
  int r1 = ok ? dlock_multi_acquire(mm, 0) : -100;
  uint64_t f0 = dlock_multi_fence(mm, 0), f1 = dlock_multi_fence(mm, 1);
  int r2 = ok ? dlock_multi_release(mm) : -100;
  int r3 = ok ? dlock_mutex_acquire(busy, 0) : -100;
  int r4 = ok ? dlock_multi_acquire(mm, 0) : -100; /* rl:a taken, rl:b busy: rl:a given back */
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  int r5 = ok ? dlock_lock_info_get(other, "rl:a", &info) : -100;
  dlock_mutex_free(busy);
  dlock_multi_free(mm);
  dlock_client_free(other);
  dlock_client_free(c);
  th_redis_stop_n(rl, 3);
  if (!ok) TEST_FAIL("setup on redlock: %s", dlock_last_error());
  ASSERT_EQ(r1, 0);
  ASSERT(f0 > 0 && f1 > 0);
  ASSERT_EQ(r2, 0);
  ASSERT_EQ(r3, 0);
  ASSERT_EQ(r4, DLOCK_EBUSY);
  ASSERT_EQ(r5, 0);
  ASSERT_EQ(info.held, 0);
}

TEST_MAIN()
