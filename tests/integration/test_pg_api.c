/*
 * test_pg_api.c - PostgreSQL through the PUBLIC API (dlock.h only, no
 * dlock__pg_* calls): dlock_client_new with postgres URLs, the dlock_mutex_*
 * calls, the watchdog, crashes and killed connections, waits, cancel, the
 * scheduler, the guard, the admin calls, dlock_client_setup and
 * dlock_client_check, and bad input; against a real server that the
 * harness starts (harness_pg.h). Labels: integration, pg.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
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

#define NEED_PG() \
  do { if (!srv_up) TEST_SKIP("%s", skip_why); } while (0)

static long tf(void) { return th_time_factor(); }

static void url_of(char *url, size_t len, const char *schema, const char *more) {
  snprintf(url, len, "%s?dlock_schema=%s%s", srv.url, schema, more ? more : "");
}

static dlock_client *client(const char *schema, const char *more) {
  dlock_client *c = th_pg_client(&srv, schema, more);
  if (!c) TEST_FAIL("client on schema %s: %s", schema, dlock_last_error());
  return c;
}

static dlock_mutex *mutex(dlock_client *c, const char *name, int64_t lease_ms, int64_t watchdog_lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  mo.watchdog_lease_ms = watchdog_lease_ms;
  mo.owner_info = "test_pg_api";
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) TEST_FAIL("mutex %s: %s", name, dlock_last_error());
  return m;
}

TEST(backend_is_postgres_for_every_url_form) {
  NEED_PG();
  dlock_client *c = client("forms", NULL);
  ASSERT_STR_EQ(dlock_client_backend(c), "postgres");
  ASSERT_CONTAINS(dlock_client_server(c), "127.0.0.1");
  ASSERT_OK(dlock_client_ping(c));
  dlock_client_free(c);
  /* postgres:// and the keyword/value form reach the same server. */
  char url[900];
  snprintf(url, sizeof url, "postgres://postgres@127.0.0.1:%d/postgres", srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  ASSERT_OK(dlock_client_new(&c, &o));
  ASSERT_STR_EQ(dlock_client_backend(c), "postgres");
  dlock_client_free(c);
  snprintf(url, sizeof url, "host=127.0.0.1 port=%d user=postgres dbname=postgres dlock_schema=kv", srv.port);
  ASSERT_OK(dlock_client_new(&c, &o));
  ASSERT_STR_EQ(dlock_client_backend(c), "postgres");
  ASSERT_CONTAINS(dlock_client_server(c), "schema kv");
  dlock_client_free(c);
}

TEST(acquire_release_and_the_fence_rises) {
  NEED_PG();
  dlock_client *a = client("api", NULL), *b = client("api", NULL);
  dlock_mutex *ma = mutex(a, "orders:1", 10000, 0), *mb = mutex(b, "orders:1", 10000, 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  uint64_t f1 = dlock_mutex_fence(ma);
  ASSERT(f1 >= 1);
  ASSERT_EQ(dlock_mutex_is_held(ma), 1);
  int64_t ttl = 0;
  ASSERT_OK(dlock_mutex_remaining(ma, &ttl));
  ASSERT(ttl > 8000 && ttl <= 10000);
  ASSERT_STATUS(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
  ASSERT_CONTAINS(dlock_last_error(), "orders:1");
  /* Reentrant on the same thread. */
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_EQ(dlock_mutex_is_held(ma), 1);
  ASSERT_OK(dlock_mutex_extend(ma, 20000));
  ASSERT_OK(dlock_mutex_remaining(ma, &ttl));
  ASSERT(ttl > 18000);
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_OK(dlock_mutex_acquire(mb, 0));
  uint64_t f2 = dlock_mutex_fence(mb);
  ASSERT(f2 > f1);
  ASSERT_OK(dlock_mutex_release(mb));
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT(dlock_mutex_fence(ma) > f2);
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_STATUS(dlock_mutex_release(ma), DLOCK_ENOTHELD);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(a_fixed_lease_runs_out_and_extend_says_lost) {
  NEED_PG();
  dlock_client *a = client("api", NULL), *b = client("api", NULL);
  dlock_mutex *ma = mutex(a, "short", 400, 0), *mb = mutex(b, "short", 10000, 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  th_sleep_ms(700);
  ASSERT(dlock_mutex_lost(ma) != DLOCK_LOST_NONE);
  ASSERT_OK(dlock_mutex_acquire(mb, 0));
  ASSERT(dlock_mutex_extend(ma, 5000) != 0);
  ASSERT_OK(dlock_mutex_release(mb));
  dlock_mutex_release(ma);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(the_watchdog_keeps_a_short_lease_alive_well_past_it) {
  NEED_PG();
  dlock_client *a = client("api", NULL), *b = client("api", NULL);
  dlock_mutex *ma = mutex(a, "wd", 0, 600), *mb = mutex(b, "wd", 10000, 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  uint64_t f = dlock_mutex_fence(ma);
  th_sleep_ms(3000); /* five leases */
  ASSERT_EQ(dlock_mutex_lost(ma), DLOCK_LOST_NONE);
  ASSERT_EQ(dlock_mutex_is_held(ma), 1);
  ASSERT_STATUS(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
  ASSERT_EQ(dlock_mutex_fence(ma), f); /* renewal keeps the fence */
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_OK(dlock_mutex_acquire(mb, 0));
  ASSERT_OK(dlock_mutex_release(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

static int holder_child(void *arg) {
  int fd = *(int *)arg;
  dlock_client *c = client("crash", NULL);
  dlock_mutex *m = mutex(c, "crash", 0, 2000);
  if (dlock_mutex_acquire(m, 0) != 0) return 1;
  if (write(fd, "h", 1) != 1) return 1;
  for (;;) pause();
}

TEST(a_holder_killed_with_sigkill_frees_the_lock_after_its_lease) {
  NEED_PG();
  int p[2];
  ASSERT(pipe(p) == 0);
  pid_t kid = th_spawn(holder_child, &p[1]);
  char ch;
  ASSERT(read(p[0], &ch, 1) == 1);
  th_sleep_ms(2500); /* renewed by the child's watchdog past its lease */
  dlock_client *a = client("crash", NULL);
  dlock_mutex *m = mutex(a, "crash", 5000, 0);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EBUSY);
  long long killed_at = th_now_ms();
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  close(p[0]);
  close(p[1]);
  ASSERT_OK(dlock_mutex_acquire(m, 10000 * tf()));
  long long got = th_now_ms();
  ASSERT(got - killed_at < 2000 + 3000 * tf()); /* freed once the last renewed lease ran out */
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(a);
}

static atomic_int lost_calls;
static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason why, void *arg) {
  (void)m, (void)name, (void)why, (void)arg;
  atomic_fetch_add(&lost_calls, 1);
}

TEST(pg_terminate_backend_of_the_holder_the_watchdog_reconnects) {
  NEED_PG();
  dlock_client *a = client("term", NULL);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 1500;
  mo.on_lost = on_lost;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, a, "t", &mo));
  atomic_store(&lost_calls, 0);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[256];
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = 'dlock' AND pid <> pg_backend_pid()"),
              0);
    th_sleep_ms(700);
  }
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  ASSERT_EQ(atomic_load(&lost_calls), 0);
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(a);
}

TEST(advisory_mode_a_killed_session_is_reported_lost_at_once) {
  NEED_PG();
  dlock_client *a = client("adv", "&mode=advisory");
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.on_lost = on_lost;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, a, "adv", &mo));
  atomic_store(&lost_calls, 0);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(dlock_mutex_fence(m), 0); /* no fence in advisory mode */
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  /* No fence: the guard and the scheduler say so. */
  ASSERT_STATUS(dlock_guard_check(a, "adv-res", 5), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "advisory");
  dlock_sched *s = NULL;
  ASSERT_STATUS(dlock_sched_new(&s, a, NULL), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "advisory");
  char out[256];
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'"),
            0);
  ASSERT_STR_EQ(out, "1");
  long long t0 = th_now_ms();
  while (dlock_mutex_lost(m) == DLOCK_LOST_NONE && th_now_ms() - t0 < 3000 * tf()) th_sleep_ms(20);
  ASSERT(dlock_mutex_lost(m) != DLOCK_LOST_NONE);
  ASSERT(th_now_ms() - t0 < 1500 * tf()); /* within the watchdog's look, not a lease */
  ASSERT_EQ(atomic_load(&lost_calls), 1);
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(a);
}

typedef struct waiter {
  dlock_mutex *m;
  int64_t wait_ms;
  int rc;
  long long at;
  atomic_int done;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, w->wait_ms);
  w->at = th_now_ms();
  if (w->rc == 0) dlock_mutex_release(w->m);
  atomic_store(&w->done, 1);
  return NULL;
}

TEST(a_waiter_is_woken_by_the_release) {
  NEED_PG();
  dlock_client *a = client("wait", NULL), *b = client("wait", NULL);
  dlock_mutex *ma = mutex(a, "w", 60000, 0), *mb = mutex(b, "w", 60000, 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  waiter w = {.m = mb, .wait_ms = 30000};
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, wait_thread, &w) == 0);
  th_sleep_ms(1500);
  ASSERT_EQ(atomic_load(&w.done), 0);
  long long released = th_now_ms();
  ASSERT_OK(dlock_mutex_release(ma));
  pthread_join(t, NULL);
  ASSERT_OK(w.rc);
  /* Woken by NOTIFY: well before the 60 s lease or a long poll. */
  ASSERT(w.at - released < 900 * tf());
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(cancel_ends_a_wait) {
  NEED_PG();
  dlock_client *a = client("wait", NULL), *b = client("wait", NULL);
  dlock_mutex *ma = mutex(a, "c", 60000, 0), *mb = mutex(b, "c", 60000, 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  waiter w = {.m = mb, .wait_ms = DLOCK_WAIT_FOREVER};
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, wait_thread, &w) == 0);
  th_sleep_ms(500);
  long long canceled = th_now_ms();
  dlock_mutex_cancel(mb);
  pthread_join(t, NULL);
  ASSERT_STATUS(w.rc, DLOCK_ECANCELED);
  ASSERT(w.at - canceled < 500 * tf());
  ASSERT_OK(dlock_mutex_release(ma));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

typedef struct runs {
  atomic_int n;
  uint64_t fence[64];
  int64_t tick[64];
} runs;

static int count_job(const dlock_tick *t, void *arg) {
  runs *r = arg;
  int i = atomic_fetch_add(&r->n, 1);
  if (i < 64) {
    r->fence[i] = t->fence;
    r->tick[i] = t->scheduled_unix_ms;
  }
  return 0;
}

TEST(a_tick_is_claimed_once_across_two_schedulers) {
  NEED_PG();
  dlock_client *a = client("sched", NULL), *b = client("sched", NULL);
  runs r;
  memset(&r, 0, sizeof r);
  dlock_sched *s[2] = {NULL, NULL};
  dlock_client *cs[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    dlock_sched_options so;
    dlock_sched_options_init(&so);
    so.node_name = i ? "node-b" : "node-a";
    ASSERT_OK(dlock_sched_new(&s[i], cs[i], &so));
    ASSERT_OK(dlock_sched_add_fixed_rate(s[i], "every-500", 500, NULL, count_job, &r));
  }
  for (int i = 0; i < 2; i++) ASSERT_OK(dlock_sched_start(s[i]));
  th_sleep_ms(3200);
  for (int i = 0; i < 2; i++) {
    ASSERT_OK(dlock_sched_stop(s[i], 5000));
    dlock_sched_free(s[i]);
  }
  int n = atomic_load(&r.n);
  ASSERT(n >= 4 && n <= 8);
  /* Every tick once, each with its own rising fence. */
  for (int i = 0; i < n && i < 64; i++)
    for (int j = i + 1; j < n && j < 64; j++) {
      ASSERT(r.tick[i] != r.tick[j]);
      ASSERT(r.fence[i] != r.fence[j]);
    }
  dlock_run_record hist[16];
  for (int i = 0; i < 16; i++) dlock_run_record_init(&hist[i]);
  int h = dlock_sched_history(a, "every-500", hist, 16);
  if (h < n - 1 || h > n) TEST_FAIL("history has %d runs, %d ran", h, n); /* the last may still be finishing */
  ASSERT(hist[0].fence > 0);
  ASSERT_STR_EQ(hist[0].outcome, "ok");
  ASSERT(!strcmp(hist[0].node, "node-a") || !strcmp(hist[0].node, "node-b"));
  dlock_client_free(a);
  dlock_client_free(b);
}

/* A fixed-delay run: records its start and end (wall clock) and whether
 * another run was going on at the same time. */
typedef struct delay_runs {
  atomic_int n, active, overlapped;
  long long start[64], end[64];
} delay_runs;

static int delay_job(const dlock_tick *t, void *arg) {
  (void)t;
  delay_runs *d = arg;
  if (atomic_fetch_add(&d->active, 1) != 0) atomic_store(&d->overlapped, 1);
  int i = atomic_fetch_add(&d->n, 1);
  long long s = th_now_ms();
  th_sleep_ms(150);
  if (i < 64) {
    d->start[i] = s;
    d->end[i] = th_now_ms();
  }
  atomic_fetch_sub(&d->active, 1);
  return 0;
}

TEST(fixed_delay_runs_one_at_a_time_delay_after_the_last_end) {
  NEED_PG();
  dlock_client *a = client("delay", NULL), *b = client("delay", NULL);
  delay_runs d;
  memset(&d, 0, sizeof d);
  dlock_sched *s[2] = {NULL, NULL};
  dlock_client *cs[2] = {a, b};
  for (int i = 0; i < 2; i++) {
    dlock_sched_options so;
    dlock_sched_options_init(&so);
    so.node_name = i ? "node-b" : "node-a";
    ASSERT_OK(dlock_sched_new(&s[i], cs[i], &so));
    ASSERT_OK(dlock_sched_add_fixed_delay(s[i], "delay-400", 400, NULL, delay_job, &d));
  }
  for (int i = 0; i < 2; i++) ASSERT_OK(dlock_sched_start(s[i]));
  th_sleep_ms(3000);
  for (int i = 0; i < 2; i++) {
    ASSERT_OK(dlock_sched_stop(s[i], 5000));
    dlock_sched_free(s[i]);
  }
  int n = atomic_load(&d.n);
  /* A run every 150 + 400 ms at most: about 5 in 3 s, never 2 at once. */
  if (n < 2 || n > 6) TEST_FAIL("%d fixed-delay runs in 3 s (150 ms runs, 400 ms delay)", n);
  ASSERT_EQ(atomic_load(&d.overlapped), 0);
  /* Runs start in order (the array is filled in claim order). */
  for (int i = 1; i < n && i < 64; i++)
    if (d.start[i] - d.end[i - 1] < 400 - 100)
      TEST_FAIL("run %d started %lld ms after run %d ended; the delay is 400 ms", i, d.start[i] - d.end[i - 1],
                i - 1);
  dlock_run_record hist[8];
  for (int i = 0; i < 8; i++) dlock_run_record_init(&hist[i]);
  int h = dlock_sched_history(a, "delay-400", hist, 8);
  ASSERT(h >= n - 1 && h <= n);
  ASSERT(h < 2 || hist[0].fence > hist[1].fence);
  dlock_client_free(a);
  dlock_client_free(b);
}

static atomic_int busy_skips;
static void on_event(const dlock_sched_event *ev, void *arg) {
  (void)arg;
  if (ev->kind == DLOCK_SCHED_SKIPPED_BUSY) atomic_fetch_add(&busy_skips, 1);
}

TEST(lock_at_least_for_keeps_later_ticks_out) {
  NEED_PG();
  dlock_client *a = client("sched", NULL);
  runs r;
  memset(&r, 0, sizeof r);
  atomic_store(&busy_skips, 0);
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = on_event;
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, a, &so));
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_least_for_ms = 1800;
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "at-least", 500, &jo, count_job, &r));
  ASSERT_OK(dlock_sched_start(s));
  th_sleep_ms(3000);
  ASSERT_OK(dlock_sched_stop(s, 5000));
  dlock_sched_free(s);
  int n = atomic_load(&r.n);
  /* One run per 1.8 s at most (not one per 500 ms tick); the ticks between are busy. */
  if (n < 1 || n > 3) TEST_FAIL("%d runs in 3 s with lock_at_least_for 1.8 s", n);
  ASSERT(atomic_load(&busy_skips) >= 2);
  dlock_run_record hist[8];
  for (int i = 0; i < 8; i++) dlock_run_record_init(&hist[i]);
  int h = dlock_sched_history(a, "at-least", hist, 8);
  ASSERT(h >= n - 1 && h <= n);
  dlock_client_free(a);
}

TEST(guard_admits_rising_fences_and_refuses_a_stale_one) {
  NEED_PG();
  dlock_client *a = client("guard", NULL);
  ASSERT_OK(dlock_guard_check(a, "stock", 5));
  ASSERT_OK(dlock_guard_check(a, "stock", 7));
  ASSERT_OK(dlock_guard_check(a, "stock", 7)); /* the same fence again (a resent write) */
  uint64_t highest = 0;
  ASSERT_STATUS(dlock_guard_check_highest(a, "stock", 6, &highest), DLOCK_ESTALE);
  ASSERT_EQ(highest, 7);
  ASSERT_CONTAINS(dlock_last_error(), "127.0.0.1");
  ASSERT_STATUS(dlock_guard_check(a, "stock", 0), DLOCK_ERANGE);
  dlock_client_free(a);
}

static void collect(const char *name, void *arg) {
  char *buf = arg;
  strcat(buf, name);
  strcat(buf, ",");
}

TEST(status_list_and_force_release) {
  NEED_PG();
  dlock_client *a = client("admin", NULL), *b = client("admin", NULL);
  dlock_mutex *m1 = mutex(a, "jobs:1", 30000, 0), *m2 = mutex(a, "jobs:2", 30000, 0), *m3 = mutex(a, "other", 30000, 0);
  ASSERT_OK(dlock_mutex_acquire(m1, 0));
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  ASSERT_OK(dlock_mutex_acquire(m3, 0));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "jobs:1", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.fence, dlock_mutex_fence(m1));
  ASSERT_STR_EQ(info.owner_info, "test_pg_api");
  ASSERT(info.ttl_ms > 25000);
  char names[256] = "";
  ASSERT_OK(dlock_lock_list(b, "jobs:*", collect, names));
  ASSERT_STR_EQ(names, "jobs:1,jobs:2,");
  int was = 0;
  ASSERT_OK(dlock_lock_force_release(b, "jobs:1", &was));
  ASSERT_EQ(was, 1);
  ASSERT_OK(dlock_lock_force_release_flags(b, "jobs:1", DLOCK_FORCE_FOREIGN, &was));
  ASSERT_EQ(was, 0);
  ASSERT_EQ(dlock_mutex_is_held(m1), 0);
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "jobs:1", &info));
  ASSERT_EQ(info.held, 0);
  ASSERT_STATUS(dlock_mutex_release(m1), DLOCK_ENOTHELD); /* freed behind its back */
  ASSERT_OK(dlock_mutex_release(m2));
  ASSERT_OK(dlock_mutex_release(m3));
  dlock_mutex_free(m1);
  dlock_mutex_free(m2);
  dlock_mutex_free(m3);
  /* A key prefix namespaces names, as on Redis. */
  char url[900];
  url_of(url, sizeof url, "admin", NULL);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.key_prefix = "tenant";
  dlock_client *p = NULL;
  ASSERT_OK(dlock_client_new(&p, &o));
  dlock_mutex *mp = mutex(p, "jobs:1", 30000, 0);
  ASSERT_OK(dlock_mutex_acquire(mp, 0));
  names[0] = '\0';
  ASSERT_OK(dlock_lock_list(p, "*", collect, names));
  ASSERT_STR_EQ(names, "jobs:1,");
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "jobs:1", &info));
  ASSERT_EQ(info.held, 0);
  ASSERT_OK(dlock_mutex_release(mp));
  dlock_mutex_free(mp);
  dlock_client_free(p);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(setup_creates_the_schema_for_a_user_without_ddl_rights) {
  NEED_PG();
  char out[512];
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "DROP ROLE IF EXISTS apiuser; CREATE ROLE apiuser LOGIN; REVOKE CREATE ON SCHEMA public FROM "
                      "PUBLIC; REVOKE CREATE ON DATABASE postgres FROM PUBLIC;"),
            0);
  char url[700];
  snprintf(url, sizeof url, "postgresql://apiuser@127.0.0.1:%d/postgres?dlock_schema=setup", srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *app = NULL;
  ASSERT_OK(dlock_client_new(&app, &o));
  dlock_mutex *m = mutex(app, "x", 5000, 0);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "dlock init");
  ASSERT_STATUS(dlock_client_setup(app), DLOCK_ENOPERM);
  dlock_check checks[DLOCK_CHECK_MAX];
  int n = dlock_client_check(app, checks, DLOCK_CHECK_MAX);
  ASSERT(n >= 3);
  int rights_failed = 0;
  for (int i = 0; i < n; i++)
    if (!strcmp(checks[i].name, "rights") && checks[i].level == DLOCK_CHECK_FAIL) rights_failed = 1;
  ASSERT(rights_failed);
  /* The owner runs the setup (dlock init) and grants. */
  dlock_client *owner = client("setup", NULL);
  ASSERT_OK(dlock_client_setup(owner));
  ASSERT_OK(dlock_client_setup(owner)); /* idempotent */
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "GRANT USAGE ON SCHEMA setup TO apiuser;"
                      "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA setup TO apiuser;"
                      "GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA setup TO apiuser;"),
            0);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) >= 1);
  ASSERT_OK(dlock_mutex_release(m));
  n = dlock_client_check(app, checks, DLOCK_CHECK_MAX);
  ASSERT(n >= 4);
  const char *want[] = {"server", "read-only", "rights", "clock"};
  for (size_t w = 0; w < 4; w++) {
    int seen = 0;
    for (int i = 0; i < n; i++)
      if (!strcmp(checks[i].name, want[w])) {
        seen = 1;
        if (checks[i].level != DLOCK_CHECK_OK) TEST_FAIL("check %s: %s", checks[i].name, checks[i].found);
      }
    if (!seen) TEST_FAIL("no check named %s", want[w]);
  }
  dlock_mutex_free(m);
  dlock_client_free(app);
  dlock_client_free(owner);
}

/* A loopback port that accepts and answers garbage: not PostgreSQL. */
static void *garbage_server(void *arg) {
  int fd = *(int *)arg;
  for (int i = 0; i < 4; i++) {
    int cfd = accept(fd, NULL, NULL);
    if (cfd < 0) return NULL;
    char buf[256];
    ssize_t n = read(cfd, buf, sizeof buf);
    (void)n;
    static const char junk[] = "+OK not a postgres server\r\n";
    n = write(cfd, junk, sizeof junk - 1);
    close(cfd);
  }
  return NULL;
}

TEST(bad_input_is_a_clear_error_naming_the_server) {
  NEED_PG();
  dlock_client_options o;
  dlock_client_options_init(&o);
  dlock_client *c = NULL;
  /* A URL libpq rejects; its password never shown. */
  o.url = "postgresql://u:sekrit@127.0.0.1:1/db?no_such_option=1";
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EURL);
  ASSERT_CONTAINS(dlock_last_error(), "no_such_option");
  ASSERT(!strstr(dlock_last_error(), "sekrit"));
  o.url = "host=127.0.0.1 bogus_keyword=1";
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EURL);
  ASSERT_CONTAINS(dlock_last_error(), "libpq");
  /* Redis-style options with a PostgreSQL URL; the password alone is
   * taken (a password file: issue 27 item 2), over the URL's. */
  char url[700];
  url_of(url, sizeof url, "bad", NULL);
  o.url = url;
  o.username = "x";
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EINVAL);
  o.username = NULL;
  o.password = "x";
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_client_free(c);
  c = NULL;
  o.password = NULL;
  /* A server that is not PostgreSQL. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  socklen_t sl = sizeof sa;
  ASSERT(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
  ASSERT(listen(fd, 4) == 0);
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, garbage_server, &fd) == 0);
  char bad[200];
  snprintf(bad, sizeof bad, "postgresql://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=2", ntohs(sa.sin_port));
  o.url = bad;
  int rc = dlock_client_new(&c, &o);
  ASSERT(rc == DLOCK_EPROTO || rc == DLOCK_ECONNECT);
  char port[16];
  snprintf(port, sizeof port, "%d", ntohs(sa.sin_port));
  ASSERT_CONTAINS(dlock_last_error(), port);
  ASSERT_CONTAINS(dlock_last_error(), "PostgreSQL");
  shutdown(fd, SHUT_RDWR);
  close(fd);
  pthread_join(t, NULL);
  /* A name longer than the table's column. */
  dlock_client *ok = client("bad", NULL);
  char name[300];
  memset(name, 'n', 299);
  name[299] = '\0';
  dlock_mutex *m = NULL;
  ASSERT_STATUS(dlock_mutex_new(&m, ok, name, NULL), DLOCK_ENAME);
  ASSERT_CONTAINS(dlock_last_error(), "255");
  ASSERT_CONTAINS(dlock_last_error(), "127.0.0.1");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_STATUS(dlock_lock_info_get(ok, name, &info), DLOCK_ENAME);
  ASSERT_STATUS(dlock_guard_check(ok, name, 3), DLOCK_ENAME);
  dlock_client_free(ok);
}

TEST_MAIN()
