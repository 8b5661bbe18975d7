/*
 * review_pg_listen.c - the adversarial review of 9180b56 and 1d58657 (the
 * LISTEN connection's start let go of ln_mu, bounded by the wait) and
 * 509bb17 (init alters a table only when its column is missing), branch
 * rev3: one test per finding, each FAILED on the code as reviewed, plus
 * checks of what held up. Registered as ctest "review/review_pg_listen"
 * with the labels "review" and "pg". Real PostgreSQL through
 * harness_pg.h, public API only (dlock.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "harness_pg.h"
#include "pgproxy.h"
#include "test.h"

static th_pg srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) { srv_up = th_pg_suite_start(&srv, skip_why, sizeof skip_why); }

void test_teardown(void) {
  if (srv_up) th_pg_stop(&srv);
}

#define NEED_PG()                           \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

static long tf(void) { return th_time_factor(); }

static dlock_client *client(const char *schema) {
  dlock_client *c = th_pg_client(&srv, schema, NULL);
  if (!c) TEST_FAIL("client on schema %s: %s", schema, dlock_last_error());
  return c;
}

/* A holder 'a' on the server, and (with_waiter) a waiter 'b' through the
 * proxy 'px' (no delay yet), both on 'name' in 'schema': a holds it, and b
 * found it busy once, so that b's command pool is warm. */
typedef struct proxied_pair {
  pgp_proxy *px;
  char url[900]; /* through the proxy */
  dlock_client *a, *b;
  dlock_mutex *ma, *mb;
} proxied_pair;

static dlock_client *proxied_client(const proxied_pair *p) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = p->url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client through the proxy: %s", dlock_last_error());
  return c;
}

static void pair_start(proxied_pair *p, const char *schema, const char *name, int with_waiter) {
  memset(p, 0, sizeof *p);
  if (pgp_start(&p->px, srv.port) != 0) TEST_FAIL("proxy did not start");
  snprintf(p->url, sizeof p->url, "postgresql://postgres@127.0.0.1:%d/postgres?sslmode=disable&dlock_schema=%s",
           pgp_port(p->px), schema);
  p->a = client(schema);
  ASSERT_OK(dlock_mutex_new(&p->ma, p->a, name, NULL));
  ASSERT_OK(dlock_mutex_acquire(p->ma, 0));
  if (!with_waiter) return;
  p->b = proxied_client(p);
  ASSERT_OK(dlock_mutex_new(&p->mb, p->b, name, NULL));
  ASSERT_EQ(dlock_mutex_acquire(p->mb, 0), DLOCK_EBUSY);
}

static void pair_stop(proxied_pair *p) {
  dlock_mutex_release(p->ma);
  dlock_mutex_free(p->ma);
  dlock_mutex_free(p->mb);
  dlock_client_free(p->a);
  dlock_client_free(p->b);
  pgp_stop(p->px);
}

/* ---- Finding 1: short waits open a LISTEN connection each ----
 *
 * listen_start() (pg_lock.c) is bounded by the waiter's whole-wait deadline;
 * cut short, it closes the connection it opened (LISTEN done, the probe sent
 * and on its way) and sets ln_state back to 0, so the next wait starts again
 * from a new connection. Starting takes several round trips (connect and
 * authenticate, LISTEN, the probe's pg_notify, its delivery): with 10 ms
 * between client and server, a worker trying a busy name with 40 ms waits
 * makes the server fork and authenticate a backend per wait (a connection
 * storm), and never gets a LISTEN connection. Before 9180b56 the first start
 * ran to its end (past the deadline) and stayed. */
TEST(review_short_waits_do_not_open_a_listen_connection_each) {
  NEED_PG();
  proxied_pair p;
  pair_start(&p, "rvl1", "rvl-storm", 1);
  pgp_set_delay(p.px, 10);
  int before = pgp_accepted(p.px), busy = 0;
  const int n = 30;
  for (int i = 0; i < n; i++)
    if (dlock_mutex_acquire(p.mb, 40) == DLOCK_EBUSY) busy++;
  int opened = pgp_accepted(p.px) - before;
  printf("  %d of %d 40 ms waits busy; %d connections opened meanwhile\n", busy, n, opened);
  pair_stop(&p);
  ASSERT_EQ(busy, n);
  if (opened > 3) TEST_FAIL("%d short waits opened %d connections (one LISTEN connection is enough)", n, opened);
}

typedef struct waiter_arg {
  dlock_mutex *m;
  int64_t wait_ms;
  int rc;
} waiter_arg;

static void *waiter(void *arg) {
  waiter_arg *w = arg;
  w->rc = dlock_mutex_acquire(w->m, w->wait_ms);
  return NULL;
}

/* ---- Finding 2: a cancel is not seen while the LISTEN connection connects ----
 *
 * listen_start() bounds dlock__pg_open_until() by the deadline only; the
 * cancel flag is looked at once the connection is up (the LISTEN, the
 * probe). With a postmaster slow to fork (stopped here; the backends that
 * exist go on), a first wait's cancel takes the whole connect_timeout. */
TEST(review_cancel_is_prompt_while_the_listen_connection_connects) {
  NEED_PG();
  dlock_client *a = client("rvl2"), *b = client("rvl2");
  dlock_mutex *ma = NULL, *mb = NULL;
  ASSERT_OK(dlock_mutex_new(&ma, a, "rvl-cancel", NULL));
  ASSERT_OK(dlock_mutex_new(&mb, b, "rvl-cancel", NULL));
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_EQ(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
  kill(srv.pid, SIGSTOP);
  waiter_arg w = {mb, 20000, -1};
  pthread_t t;
  pthread_create(&t, NULL, waiter, &w);
  usleep(300 * 1000);
  dlock_mono_ms t0 = dlock_mono_now();
  dlock_mutex_cancel(mb);
  pthread_join(t, NULL);
  dlock_mono_ms took = dlock_mono_now() - t0;
  kill(srv.pid, SIGCONT);
  printf("  waiter: %s %lld ms after the cancel\n", dlock_err_name(w.rc), (long long)took);
  dlock_mutex_release(ma);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
  ASSERT_EQ(w.rc, DLOCK_ECANCELED);
  if (took > 500 * tf()) TEST_FAIL("the cancel took %lld ms (docs: within 50 ms)", (long long)took);
}

/* ---- Finding 3: a LISTEN connection lost during the probe is taken for a pooler ----
 *
 * listen_start()'s probe loop ends at a failed PQconsumeInput() (the server
 * ended the session: a restart, pg_terminate_backend, an idle timeout) and,
 * not having heard the probe, draws the verdict "a transaction-mode pooler"
 * and never tries LISTEN again (ln_retry_at = INT64_MAX): every waiter of
 * the client polls for good, and the client warns about a pooler that is
 * not there. Here the LISTEN backend is terminated right after its LISTEN
 * (a proxy with 400 ms of latency keeps the probe in flight meanwhile). */
static void *terminate_listener(void *arg) {
  atomic_int *done = arg;
  char out[64];
  for (int i = 0; i < 200 && !atomic_load(done); i++) {
    out[0] = '\0';
    th_pg_sql(&srv, NULL, out, sizeof out,
              "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%rvl3%%'");
    if (atol(out) > 0) {
      atomic_store(done, 2);
      break;
    }
    usleep(10 * 1000);
  }
  return NULL;
}

TEST(review_a_listen_connection_lost_during_the_probe_is_not_taken_for_a_pooler) {
  NEED_PG();
  proxied_pair p;
  pair_start(&p, "rvl3", "rvl-lost", 1);
  pgp_set_delay(p.px, 400);
  atomic_int done = 0;
  pthread_t t;
  pthread_create(&t, NULL, terminate_listener, &done);
  int rc = dlock_mutex_acquire(p.mb, 6000 * tf());
  atomic_store(&done, done ? done : 1);
  pthread_join(t, NULL);
  int killed = atomic_load(&done) == 2;
  char warn[600] = "";
  dlock_client_topology_warning(p.b, warn, sizeof warn);
  printf("  wait: %s; LISTEN backend terminated: %s; warning: \"%s\"\n", dlock_err_name(rc), killed ? "yes" : "no",
         warn);
  pair_stop(&p);
  if (!killed) TEST_SKIP("the LISTEN backend was not seen in time");
  if (strstr(warn, "pooler")) TEST_FAIL("a terminated LISTEN session drew the verdict: %s", warn);
}


/* ---- 509bb17: init under concurrent first use, and the upgrade ----
 *
 * Several clients (as several processes would: each its own client, so
 * each runs its own init) take and release a mutex, a semaphore and a
 * read-write lock on one name set at once: on a fresh schema (every client
 * inits), and on a schema whose later columns were dropped (an upgrade:
 * the first statement that names one fails with 42703, and init adds it
 * back while the others' releases run). Every call must succeed: a
 * deadlock between an init and a release fails the release (the lock
 * stays held until its lease ends) or the acquire. */
typedef struct user_arg {
  const char *schema;
  int id;
  int fails;
  char err[400];
} user_arg;

static void *first_user(void *arg) {
  user_arg *u = arg;
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=%s", srv.url, u->schema);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    u->fails++;
    snprintf(u->err, sizeof u->err, "client: %s", dlock_last_error());
    return NULL;
  }
  dlock_mutex *m = NULL;
  dlock_semaphore *s = NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 5000;
  dlock_mutex_new(&m, c, "rvl-init-m", &mo);
  dlock_semaphore_new(&s, c, "rvl-init-s", 2, &mo);
  for (int i = 0; i < 6; i++) {
    int rc = dlock_mutex_acquire(m, 8000 * tf());
    if (rc == 0) rc = dlock_mutex_release(m);
    if (rc != 0 && !u->fails++) snprintf(u->err, sizeof u->err, "mutex: %s", dlock_last_error());
    rc = dlock_semaphore_acquire(s, 8000 * tf());
    if (rc == 0) rc = dlock_semaphore_release(s);
    if (rc != 0 && !u->fails++) snprintf(u->err, sizeof u->err, "semaphore: %s", dlock_last_error());
  }
  dlock_semaphore_free(s);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return NULL;
}

static void run_users(const char *schema, int n) {
  pthread_t t[8];
  user_arg u[8];
  for (int i = 0; i < n; i++) {
    u[i] = (user_arg){.schema = schema, .id = i};
    pthread_create(&t[i], NULL, first_user, &u[i]);
  }
  int fails = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    if (u[i].fails) {
      fails += u[i].fails;
      printf("  %s user %d: %d failed, first: %s\n", schema, i, u[i].fails, u[i].err);
    }
  }
  if (fails) TEST_FAIL("%d calls failed on schema %s", fails, schema);
}

TEST(review_concurrent_first_users_on_a_fresh_schema_all_succeed) {
  NEED_PG();
  for (int round = 0; round < 6; round++) {
    char schema[32];
    snprintf(schema, sizeof schema, "rvl_fresh%d", round);
    run_users(schema, 4);
  }
}

TEST(review_concurrent_users_upgrading_a_schema_all_succeed) {
  NEED_PG();
  char out[256];
  for (int round = 0; round < 6; round++) {
    char schema[32];
    snprintf(schema, sizeof schema, "rvl_up%d", round);
    run_users(schema, 1);
    ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                        "ALTER TABLE %s.locks DROP COLUMN family_until, DROP COLUMN family_since; "
                        "ALTER TABLE %s.waiters DROP COLUMN side",
                        schema, schema),
              0);
    run_users(schema, 4);
    ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                        "SELECT count(*) FROM pg_attribute WHERE attrelid IN ('%s.locks'::regclass, "
                        "'%s.waiters'::regclass) AND attname IN ('family_until', 'family_since', 'side') "
                        "AND NOT attisdropped",
                        schema, schema),
              0);
    ASSERT_EQ(atoi(out), 3);
  }
}


/* A run-time user without DDL rights on a schema its owner initialized:
 * no init runs (nothing is missing), so the DO blocks never matter; with
 * a column missing, ENOPERM naming `dlock init` (docs/postgres.md). */
TEST(review_a_user_without_ddl_rights_works_and_is_told_to_run_init_after_a_drop) {
  NEED_PG();
  char out[256];
  run_users("rvl_app", 1); /* the owner (postgres) initializes */
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "DROP ROLE IF EXISTS rvl_app; CREATE ROLE rvl_app LOGIN; GRANT USAGE ON SCHEMA rvl_app TO rvl_app; "
                      "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA rvl_app TO rvl_app; "
                      "GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA rvl_app TO rvl_app; "
                      "REVOKE CREATE ON DATABASE postgres FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC"),
            0);
  char url[900];
  const char *at = strstr(srv.url, "postgres@");
  ASSERT(at != NULL);
  snprintf(url, sizeof url, "postgresql://rvl_app@%s?dlock_schema=rvl_app", at + strlen("postgres@"));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client as rvl_app: %s", dlock_last_error());
  dlock_mutex *m = NULL;
  dlock_semaphore *s = NULL;
  dlock_mutex_new(&m, c, "rvl-app-m", NULL);
  dlock_semaphore_new(&s, c, "rvl-app-s", 2, NULL);
  ASSERT_OK(dlock_mutex_acquire(m, 1000));
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_semaphore_acquire(s, 1000));
  ASSERT_OK(dlock_semaphore_release(s));
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "ALTER TABLE rvl_app.locks DROP COLUMN family_until, DROP COLUMN family_since"), 0);
  int rc = dlock_mutex_acquire(m, 1000);
  char err[600];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  printf("  after the drop: %s: %s\n", dlock_err_name(rc), err);
  if (rc == 0) dlock_mutex_release(m);
  dlock_semaphore_free(s);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_pg_sql(&srv, NULL, out, sizeof out, "GRANT CREATE ON DATABASE postgres TO PUBLIC");
  ASSERT_EQ(rc, DLOCK_ENOPERM);
  ASSERT_CONTAINS(err, "dlock init");
}


/* An upgrade while the schema is in use: the columns are dropped (as a
 * schema of an older version lacks them) while users take and release;
 * their next statements fail with 42703 and the first init adds them
 * back, ALTERing waiters and then locks while the others' statements hold
 * and take those tables' locks. Every call must succeed. */
typedef struct loop_arg {
  const char *schema;
  atomic_int *stop;
  int fails, calls;
  char err[400];
} loop_arg;

static void *loop_user(void *arg) {
  loop_arg *u = arg;
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=%s", srv.url, u->schema);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    u->fails++;
    snprintf(u->err, sizeof u->err, "client: %s", dlock_last_error());
    return NULL;
  }
  dlock_mutex *m = NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 5000;
  dlock_mutex_new(&m, c, "rvl-live", &mo);
  while (!atomic_load(u->stop)) {
    int rc = dlock_mutex_acquire(m, 8000 * tf());
    if (rc == 0) {
      usleep(2000);
      rc = dlock_mutex_release(m);
    }
    u->calls++;
    if (rc != 0 && !u->fails++) snprintf(u->err, sizeof u->err, "%s", dlock_last_error());
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return NULL;
}

TEST(review_an_upgrade_while_the_schema_is_in_use_fails_no_call) {
  NEED_PG();
  char out[256];
  int fails = 0;
  for (int round = 0; round < 5; round++) {
    char schema[32];
    snprintf(schema, sizeof schema, "rvl_live%d", round);
    run_users(schema, 1);
    atomic_int stop = 0;
    loop_arg u[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
      u[i] = (loop_arg){.schema = schema, .stop = &stop};
      pthread_create(&t[i], NULL, loop_user, &u[i]);
    }
    usleep(300 * 1000);
    /* Both at once (a schema from before 'side'), locks and then waiters as
     * a release takes them, so that this drop itself deadlocks with none. */
    th_pg_sql(&srv, NULL, out, sizeof out,
              "LOCK TABLE %s.locks, %s.waiters IN ACCESS EXCLUSIVE MODE; "
              "ALTER TABLE %s.locks DROP COLUMN family_until, DROP COLUMN family_since; "
              "ALTER TABLE %s.waiters DROP COLUMN side",
              schema, schema, schema, schema);
    usleep(1500 * 1000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
      pthread_join(t[i], NULL);
      if (u[i].fails) printf("  %s user %d: %d of %d calls failed, first: %s\n", schema, i, u[i].fails, u[i].calls, u[i].err);
      fails += u[i].fails;
    }
  }
  if (fails) TEST_FAIL("%d calls failed across the upgrades", fails);
}


/* The fix of finding 1 keeps a start cut short (ln_pend): a client freed
 * then closes it (ASan's leak check; valgrind). */
TEST(review_a_client_freed_with_a_start_cut_short_closes_its_connection) {
  NEED_PG();
  proxied_pair p;
  pair_start(&p, "rvl4", "rvl-free", 0);
  /* One wait per fresh client, of lengths that end it during the connect,
   * the LISTEN or the probe (with 20 ms of latency). */
  for (int w = 40; w <= 160; w += 10) {
    pgp_set_delay(p.px, 0);
    dlock_client *b = proxied_client(&p);
    dlock_mutex *mb = NULL;
    ASSERT_OK(dlock_mutex_new(&mb, b, "rvl-free", NULL));
    ASSERT_EQ(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
    pgp_set_delay(p.px, 20);
    ASSERT_EQ(dlock_mutex_acquire(mb, w), DLOCK_EBUSY);
    dlock_mutex_free(mb);
    dlock_client_free(b);
  }
  pair_stop(&p);
}

TEST_MAIN()
