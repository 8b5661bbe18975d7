/*
 * test_latch.c - the countdown latch (dlock_latch_*) on a real
 * redis-server: 5 processes count down while 3 wait, and all 3 wake (by the
 * zero message, well before a re-check would); an abandoned latch expires
 * and never opens its waiters; set while counting is refused; bad input;
 * cancel; a foreign key is left alone.
 */
#include <pthread.h>
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

static dlock_latch *test_latch(dlock_client *c, const char *name) {
  dlock_latch *l = NULL;
  if (dlock_latch_new(&l, c, name) != 0) TEST_FAIL("latch '%s': %s", name, dlock_last_error());
  return l;
}

typedef struct shared {
  long long woke_at[3];
  int rc[3];
  long long last_down_at;
  char err[3][256];
} shared;

typedef struct job {
  shared *sh;
  int idx;
} job;

static dlock_client *child_client(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static int waiter(void *arg) {
  job *j = arg;
  dlock_client *c = child_client();
  if (!c) return 2;
  dlock_latch *l = NULL;
  if (dlock_latch_new(&l, c, "lt:five") != 0) return 2;
  int rc = dlock_latch_wait(l, 30000 * th_time_factor());
  j->sh->woke_at[j->idx] = th_now_ms();
  j->sh->rc[j->idx] = rc;
  snprintf(j->sh->err[j->idx], sizeof j->sh->err[j->idx], "%s", dlock_latch_errmsg(l));
  int64_t n = -1;
  if (rc == 0 && (dlock_latch_count(l, &n) != 0 || n != 0)) rc = 9; /* woke before zero */
  dlock_latch_free(l);
  dlock_client_free(c);
  return rc == 0 ? 0 : 3;
}

static int counter(void *arg) {
  job *j = arg;
  dlock_client *c = child_client();
  if (!c) return 2;
  dlock_latch *l = NULL;
  if (dlock_latch_new(&l, c, "lt:five") != 0) return 2;
  int64_t left = -1;
  int rc = dlock_latch_count_down(l, &left);
  long long now = th_now_ms();
  if (rc == 0 && left == 0) j->sh->last_down_at = now;
  dlock_latch_free(l);
  dlock_client_free(c);
  return rc == 0 ? 0 : 3;
}

TEST(five_processes_count_down_and_three_waiters_all_wake) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DEL {lt:five}:latch");
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  dlock_client *c = test_client(srv.url);
  dlock_latch *l = test_latch(c, "lt:five");
  ASSERT_OK(dlock_latch_set(l, 5, 60000));
  job wj[3], cj[5];
  pid_t w[3], k[5];
  for (int i = 0; i < 3; i++) {
    wj[i] = (job){sh, i};
    w[i] = th_spawn(waiter, &wj[i]);
  }
  long long spawned = th_now_ms();
  th_sleep_ms(500);
  /* Nobody counted yet: every waiter still waits. */
  for (int i = 0; i < 3; i++) ASSERT_EQ(waitpid(w[i], NULL, WNOHANG), 0);
  for (int i = 0; i < 5; i++) {
    /* The last count-down comes 2.2 s after the waiters began: just after
     * their first re-check (every 2 s), so that a waiter that missed the
     * zero message would wake about 1.8 s late. */
    if (i == 4) th_sleep_ms(spawned + 2200 - th_now_ms());
    cj[i] = (job){sh, i < 4 ? 0 : 1};
    k[i] = th_spawn(counter, &cj[i]);
    if (i == 3)
      for (int j = 0; j < 4; j++) {
        int st = th_wait(k[j], 20000 * th_time_factor());
        ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
      }
  }
  int st4 = th_wait(k[4], 20000 * th_time_factor());
  ASSERT(st4 != -1 && WIFEXITED(st4) && WEXITSTATUS(st4) == 0);
  for (int i = 0; i < 3; i++) {
    int st = th_wait(w[i], 20000 * th_time_factor());
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      TEST_FAIL("waiter %d: status %d, rc %s: %s", i, st, dlock_err_name(sh->rc[i]), sh->err[i]);
  }
  ASSERT(sh->last_down_at > 0);
  /* Woken by the zero message: a waiter that relied on its re-check (every
   * 2 s) would wake up to 2 s late. */
  for (int i = 0; i < 3; i++) {
    long long late = sh->woke_at[i] - sh->last_down_at;
    if (late > 1000 * th_time_factor()) TEST_FAIL("waiter %d woke %lld ms after the count reached zero", i, late);
  }
  int64_t n = -1;
  ASSERT_OK(dlock_latch_count(l, &n));
  ASSERT_EQ(n, 0);
  /* Later waiters find it open at once; counting on at zero stays at zero. */
  ASSERT_OK(dlock_latch_wait(l, 0));
  ASSERT_OK(dlock_latch_count_down(l, &n));
  ASSERT_EQ(n, 0);
  /* At zero it may be set again. */
  ASSERT_OK(dlock_latch_set(l, 2, 60000));
  ASSERT_OK(dlock_latch_count(l, &n));
  ASSERT_EQ(n, 2);
  dlock_latch_free(l);
  dlock_client_free(c);
  munmap(sh, sizeof *sh);
}

TEST(an_abandoned_latch_expires_and_never_opens) {
  dlock_client *c = test_client(srv.url);
  dlock_latch *l = test_latch(c, "lt:gone");
  ASSERT_OK(dlock_latch_set(l, 2, 600 * th_time_factor()));
  int64_t n = 0;
  ASSERT_OK(dlock_latch_count_down(l, &n));
  ASSERT_EQ(n, 1);
  /* The other party never counts down: the wait ends with ENOLATCH when the
   * latch expires (seen at the next re-check), not with success. */
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_latch_wait(l, 20000 * th_time_factor()), DLOCK_ENOLATCH);
  long long took = th_now_ms() - t0;
  ASSERT(took >= 500);
  ASSERT(took < 6000 * th_time_factor());
  ASSERT_CONTAINS(dlock_latch_errmsg(l), "{lt:gone}:latch");
  ASSERT_CONTAINS(dlock_latch_errmsg(l), "expir");
  ASSERT_STATUS(dlock_latch_count(l, &n), DLOCK_ENOLATCH);
  ASSERT_STATUS(dlock_latch_count_down(l, &n), DLOCK_ENOLATCH);
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EXISTS {lt:gone}:latch");
  ASSERT_STR_EQ(out, "0");
  dlock_latch_free(l);
  dlock_client_free(c);
}

static void count_name(const char *name, void *arg) {
  if (!strncmp(name, "lt:seen", 7)) (*(int *)arg)++;
}

TEST(status_and_list_show_a_latch_and_list_a_latched_lock_once) {
  dlock_client *c = test_client(srv.url);
  dlock_latch *l = test_latch(c, "lt:seen");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "lt:seen", &info));
  ASSERT_EQ(info.latch, 0);
  ASSERT_OK(dlock_latch_set(l, 3, 60000));
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "lt:seen", &info));
  ASSERT_EQ(info.held, 0);
  ASSERT_EQ(info.latch, 1);
  ASSERT_EQ(info.latch_count, 3);
  ASSERT(info.latch_ttl_ms > 50000 && info.latch_ttl_ms <= 60000);
  int seen = 0;
  ASSERT_EQ(dlock_lock_list(c, "lt:seen*", count_name, &seen), 1);
  ASSERT_EQ(seen, 1);
  /* A mutex of the same name, held: one name, listed once. */
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "lt:seen", NULL));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  seen = 0;
  ASSERT_EQ(dlock_lock_list(c, "lt:seen*", count_name, &seen), 1);
  ASSERT_EQ(seen, 1);
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "lt:seen", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.latch_count, 3);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_latch_free(l);
  dlock_client_free(c);
}

TEST(set_while_counting_and_bad_input_are_refused) {
  dlock_client *c = test_client(srv.url);
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DEL {lt:b}:latch");
  dlock_latch *l = test_latch(c, "lt:b");
  ASSERT_STATUS(dlock_latch_wait(l, 0), DLOCK_ENOLATCH); /* never set */
  ASSERT_OK(dlock_latch_set(l, 3, 60000));
  ASSERT_STATUS(dlock_latch_set(l, 3, 60000), DLOCK_EBUSY);
  ASSERT_CONTAINS(dlock_latch_errmsg(l), "3 left");
  ASSERT_STATUS(dlock_latch_wait(l, 0), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_latch_wait(l, 300), DLOCK_EBUSY);
  ASSERT(th_now_ms() - t0 >= 250);
  ASSERT_STATUS(dlock_latch_set(l, 0, 60000), DLOCK_ERANGE);
  ASSERT_STATUS(dlock_latch_set(l, DLOCK_LATCH_MAX_COUNT + 1LL, 60000), DLOCK_ERANGE);
  ASSERT(dlock_latch_set(l, 1, 0) != 0);
  ASSERT(dlock_latch_wait(l, -5) != 0);
  dlock_latch *bad = NULL;
  ASSERT(dlock_latch_new(&bad, c, "x{y}") != 0);
  ASSERT(bad == NULL);
  ASSERT_STATUS(dlock_latch_new(&bad, NULL, "x"), DLOCK_EINVAL);
  /* A key of another type is left alone. */
  th_redis_cli(&srv, out, sizeof out, "SET {lt:str}:latch hello");
  dlock_latch *s = test_latch(c, "lt:str");
  ASSERT_STATUS(dlock_latch_set(s, 1, 1000), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_latch_errmsg(s), "{lt:str}:latch");
  th_redis_cli(&srv, out, sizeof out, "GET {lt:str}:latch");
  ASSERT_STR_EQ(out, "hello");
  dlock_latch_free(s);
  dlock_latch_free(l);
  dlock_latch_free(NULL);
  dlock_client_free(c);
}

typedef struct waitarg {
  dlock_latch *l;
  int rc;
} waitarg;

static void *wait_forever(void *arg) {
  waitarg *w = arg;
  w->rc = dlock_latch_wait(w->l, DLOCK_WAIT_FOREVER);
  return NULL;
}

TEST(cancel_ends_a_wait) {
  dlock_client *c = test_client(srv.url);
  dlock_latch *l = test_latch(c, "lt:cancel");
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DEL {lt:cancel}:latch");
  ASSERT_OK(dlock_latch_set(l, 1, 60000));
  waitarg w = {l, 1};
  pthread_t t;
  pthread_create(&t, NULL, wait_forever, &w);
  th_sleep_ms(300);
  long long t0 = th_now_ms();
  dlock_latch_cancel(l);
  pthread_join(t, NULL);
  ASSERT(th_now_ms() - t0 < 1000 * th_time_factor());
  ASSERT_EQ(w.rc, DLOCK_ECANCELED);
  dlock_latch_free(l);
  dlock_client_free(c);
}

TEST(redlock_has_no_latches_and_says_so) {
  th_redis rl[3];
  if (th_redis_start_n(rl, 3, NULL) != 0) TEST_FAIL("cannot start 3 redis-servers");
  char url[1024];
  th_redlock_url(rl, 3, url, sizeof url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  if (rc == 0) {
    dlock_latch *l = NULL;
    rc = dlock_latch_new(&l, c, "lt:rl");
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    dlock_latch_free(l);
    dlock_client_free(c);
    th_redis_stop_n(rl, 3);
    ASSERT_EQ(rc, DLOCK_EINVAL);
    ASSERT(l == NULL);
    ASSERT_CONTAINS(msg, "not supported on redlock");
    return;
  }
  th_redis_stop_n(rl, 3);
  TEST_FAIL("redlock client: %s", dlock_last_error());
}

TEST_MAIN()
