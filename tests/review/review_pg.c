/*
 * review_pg.c - the adversarial review of the PostgreSQL backend (src/pg/):
 * one test per finding, each FAILED on the code as reviewed (branch
 * review-pg). Registered as ctest "review/review_pg" with the label "review".
 * Every finding is fixed since, and its test runs by default (NEED_PG).
 * Real PostgreSQL through harness_pg.h, public API only (dlock.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

#define NEED_PG() \
  do { if (!srv_up) TEST_SKIP("%s", skip_why); } while (0)

static long tf(void) { return th_time_factor(); }

static dlock_client *client_url(const char *url, int command_timeout_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = command_timeout_ms;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("connect %s: %s", url, dlock_last_error());
  return c;
}

/* Finding 1: dlock__pg_init() (pg_lock.c:57) answers a statement that timed
 * out with PQexec("ROLLBACK") on the still-busy connection; PQexec first
 * waits, without any timeout, for the pending result. While another session
 * holds dlock's init lock (a concurrent or stuck `dlock init`, the advisory
 * xact lock 7161483726112374001), setup with a 500 ms command timeout must
 * give up in about a second; it hangs until the other session ends. */
TEST(review_init_gives_up_at_its_timeout_while_another_init_holds_the_lock) {
  NEED_PG();
  long hold_s = 8 * tf();
  pid_t kid = fork();
  if (kid == 0) {
    char out[64];
    int rc = th_pg_sql(&srv, NULL, out, sizeof out,
                       "BEGIN; SELECT pg_advisory_xact_lock(7161483726112374001); SELECT pg_sleep(%ld); COMMIT;",
                       hold_s);
    _exit(rc == 0 ? 0 : 1);
  }
  ASSERT(kid > 0);
  if (th_pg_wait_active(&srv, "pg_sleep", 30000 * tf()) != 0) TEST_FAIL("the other session never took the lock");
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_init", srv.url);
  dlock_client *c = client_url(url, 500);
  dlock_mono_ms t0 = dlock_mono_now();
  int rc = dlock_client_setup(c);
  dlock_mono_ms took = dlock_mono_now() - t0;
  printf("  setup: rc %d after %lld ms: %s\n", rc, (long long)took, dlock_last_error());
  dlock_client_free(c);
  int st = 0;
  waitpid(kid, &st, 0);
  ASSERT(rc != 0);
  /* 2 x 500 ms is the init's own deadline; 3 s leaves a wide margin. */
  if (took > 3000 * tf())
    TEST_FAIL("setup took %lld ms with a 500 ms command timeout: it waited for the other session (%ld s)",
              (long long)took, hold_s);
}

/* Finding 2: dlock__pg_doctor() (pg_lock.c:789) copies the schema name into
 * char qs[32], so a schema of 32..63 bytes (valid: dlock_schema allows 63)
 * is looked up truncated and the doctor says it "does not exist yet" right
 * after dlock_client_setup() created it. */
TEST(review_doctor_finds_a_schema_of_40_bytes) {
  NEED_PG();
  const char *schema = "rv_doctor_schema_name_of_forty_bytes_xx"; /* 39 */
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=%s", srv.url, schema);
  dlock_client *c = client_url(url, 0);
  ASSERT_OK(dlock_client_setup(c));
  dlock_check chk[16];
  int n = dlock_client_check(c, chk, 16);
  dlock_client_free(c);
  ASSERT(n > 0);
  int seen = 0;
  for (int i = 0; i < n; i++) {
    if (strcmp(chk[i].name, "rights") != 0) continue;
    seen = 1;
    printf("  rights: %s\n", chk[i].found);
    if (strstr(chk[i].found, "does not exist"))
      TEST_FAIL("the doctor says schema %s does not exist right after setup created it: %s", schema,
                chk[i].found);
  }
  ASSERT(seen);
}

/* Finding 3: dlock__pg_mask_url() (pg_conn.c:41) looks for the '@' only
 * before the first '/' or '?', but libpq's URI parser takes everything up to
 * '@' or '/' as user:password, so a password with '?' is printed in clear
 * by dlock_url_redact() (and so by the CLI), and strip_url() (pg_conn.c:124)
 * splits the query at that '?', so ?dlock_schema= reaches libpq, whose
 * rejection prints the unmasked URL. */
TEST(review_redact_hides_a_password_that_contains_a_question_mark) {
  
  char buf[512];
  dlock_url_redact("postgresql://app:se?cret@db.example:5432/shop", buf, sizeof buf);
  printf("  redacted: %s\n", buf);
  if (strstr(buf, "cret")) TEST_FAIL("the password shows in the redacted URL: %s", buf);
}

TEST(review_a_question_mark_in_the_password_neither_leaks_nor_breaks_dlock_schema) {
  NEED_PG();
  char url[900];
  /* Trust authentication: the password is not checked, only carried. */
  snprintf(url, sizeof url, "postgresql://postgres:se?cret@127.0.0.1:%d/postgres?dlock_schema=rv_q", srv.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  const char *err = dlock_last_error();
  printf("  client_new: rc %d: %s\n", rc, rc ? err : "(connected)");
  if (rc != 0 && strstr(err, "cret")) TEST_FAIL("the error prints the password: %s", err);
  if (rc == 0) dlock_client_free(c);
  ASSERT_OK(rc);
}

/* Finding 4: advisory mode's info (pg_lock.c:595) counts advisory locks of
 * EVERY database in pg_locks (advisory locks are per database): a lock of
 * the same name held through another database shows as held here. */
TEST(review_advisory_info_ignores_locks_of_another_database) {
  NEED_PG();
  char out[256];
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out, "CREATE DATABASE rv_other"), 0);
  char url_other[900], url_here[900];
  snprintf(url_other, sizeof url_other, "postgresql://postgres@127.0.0.1:%d/rv_other?mode=advisory", srv.port);
  snprintf(url_here, sizeof url_here, "%s?mode=advisory", srv.url);
  dlock_client *other = client_url(url_other, 0);
  dlock_client *here = client_url(url_here, 0);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, other, "rv-adv", NULL));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  int rc = dlock_lock_info_get(here, "rv-adv", &info);
  printf("  info in database postgres: rc %d held %d\n", rc, info.held);
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(other);
  dlock_client_free(here);
  ASSERT_OK(rc);
  if (info.held) TEST_FAIL("'rv-adv' is held in database rv_other only, yet info on database postgres says held");
}

/* Finding 5: advisory mode through a transaction-mode pooler lets two
 * holders in. The session lock stays on the server connection that ran
 * pg_try_advisory_lock; the pooler hands that connection to the next
 * client, whose pg_try_advisory_lock re-enters it (session advisory locks
 * are reentrant) and answers true. docs/postgres.md says "a session-pooled
 * or direct connection only", but nothing detects it (the LISTEN probe only
 * runs for waits, and only warns). Two clients, one lock, both must not hold. */
TEST(review_advisory_mode_through_transaction_pgbouncer_admits_one_holder) {
  NEED_PG();
  char why[256];
  if (!th_pgbouncer_available(why, sizeof why)) TEST_SKIP("%s", why);
  th_pgbouncer bt;
  if (th_pgbouncer_start(&bt, &srv, "transaction") != 0) TEST_FAIL("pgbouncer did not start");
  char url[900];
  snprintf(url, sizeof url, "%s&mode=advisory", bt.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *a = NULL, *b = NULL;
  int rc = dlock_client_new(&a, &o);
  if (rc == 0) rc = dlock_client_new(&b, &o);
  if (rc != 0) {
    char err[600];
    snprintf(err, sizeof err, "%s", dlock_last_error());
    if (a) dlock_client_free(a);
    th_pgbouncer_stop(&bt);
    TEST_FAIL("connect through pgbouncer: %s", err);
  }
  dlock_mutex *ma = NULL, *mb = NULL;
  dlock_mutex_new(&ma, a, "rv-bouncer", NULL);
  dlock_mutex_new(&mb, b, "rv-bouncer", NULL);
  int ra = dlock_mutex_acquire(ma, 0);
  char ea[700];
  snprintf(ea, sizeof ea, "%s", ra ? dlock_last_error() : "");
  int rb = dlock_mutex_acquire(mb, 0);
  printf("  first: %s (%s), second: %s (%s)\n", dlock_err_name(ra), ea, dlock_err_name(rb),
         rb ? dlock_last_error() : "");
  if (ra == 0) dlock_mutex_release(ma);
  if (rb == 0) dlock_mutex_release(mb);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_pgbouncer_stop(&bt);
  /* Fixed by refusing advisory mode there, with an error naming the pooler. */
  if (ra == 0 && rb == 0)
    TEST_FAIL("two clients hold advisory lock 'rv-bouncer' at once through a transaction-mode pooler");
  if (ra != 0 && (ra != DLOCK_EURL || !strstr(ea, "transaction-mode pooler")))
    TEST_FAIL("advisory mode through a transaction pooler answered %s, not EURL naming the pooler: %s",
              dlock_err_name(ra), ea);
}

/* Finding 6 (bad input): a lock name that is not valid UTF-8 (the core
 * allows any bytes but CR, LF and braces) is refused by the server with
 * SQLSTATE 22021 and reported as DLOCK_ESERVER "see the server's log",
 * not as a bad name (DLOCK_ENAME) saying what to do. */
TEST(review_a_name_that_is_not_utf8_is_a_clear_name_error) {
  NEED_PG();
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_utf8", srv.url);
  dlock_client *c = client_url(url, 0);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "caf\xe9", NULL));
  int rc = dlock_mutex_acquire(m, 0);
  char err[600];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  printf("  acquire: %s: %s\n", dlock_err_name(rc), err);
  if (rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  ASSERT(rc != 0);
  if (rc != DLOCK_ENAME) TEST_FAIL("a non-UTF-8 name answers %s, not DLOCK_ENAME: %s", dlock_err_name(rc), err);
}

/* Finding 7: pg_release (backend.c:243) ignores the loss the core saw.
 * docs/design.md: "a lost hold stays lost until the next acquire ...
 * release answers DLOCK_ENOTHELD (it still deletes the key if Redis has our
 * token)"; Redis does so (redis/lock.c:431). On PostgreSQL a hold marked
 * lost at its local deadline, while the row still had a few ms of lease
 * (the drift margin: lease/100 + 2 ms), releases with 0, as if it had been
 * held throughout. 10 s lease: a 102 ms window. */
TEST(review_release_of_a_hold_lost_at_its_deadline_answers_not_held) {
  NEED_PG();
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_lost", srv.url);
  dlock_client *c = client_url(url, 0);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 10000; /* a fixed lease: no renewal */
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "rv-lost", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_mono_ms vu = dlock_mutex_valid_until(m);
  while (dlock_mono_now() < vu + 5) usleep(1000);
  dlock_lost_reason why = dlock_mutex_lost(m);
  int rc = dlock_mutex_release(m);
  printf("  lost: %s; release: %s %s\n", dlock_lost_reason_str(why), dlock_err_name(rc), rc ? dlock_last_error() : "");
  dlock_mutex_free(m);
  dlock_client_free(c);
  ASSERT(why != DLOCK_LOST_NONE);
  if (rc == 0) TEST_FAIL("a hold reported lost (%s) released with 0, not DLOCK_ENOTHELD", dlock_lost_reason_str(why));
}

/* Finding 8: a release whose reply was lost is sent again (twice-safe), but
 * when the second attempt cannot even connect, dlock__pg_release
 * (pg_lock.c:413-420, maybe_ran not asked for) returns that error
 * (DLOCK_ECONNECT) instead of DLOCK_EUNKNOWN, although the first send ran and
 * released the lock. Set-up: a role with CONNECTION LIMIT 0 set after its one
 * pooled connection opened, and pgproxy losing the release's reply. */
TEST(review_release_whose_reply_was_lost_and_resend_cannot_connect_is_unknown) {
  NEED_PG();
  char out[256];
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "CREATE ROLE rv_rel LOGIN; GRANT CREATE ON DATABASE postgres TO rv_rel"), 0);
  pgp_proxy *px = NULL;
  ASSERT_EQ(pgp_start(&px, srv.port), 0);
  char url[900];
  snprintf(url, sizeof url, "postgresql://rv_rel@127.0.0.1:%d/postgres?sslmode=disable&dlock_schema=rv_rel",
           pgp_port(px));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.max_connections = 1;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    pgp_stop(px);
    TEST_FAIL("connect: %s", dlock_last_error());
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 60000; /* fixed: no renewal traffic */
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "rv-rel-lock", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out, "ALTER ROLE rv_rel CONNECTION LIMIT 0"), 0);
  pgp_drop_reply(px, "rv-rel-lock", 1);
  int rc = dlock_mutex_release(m);
  char err[700];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  printf("  release: %s: %s (replies dropped: %d)\n", dlock_err_name(rc), err, pgp_dropped(px));
  th_pg_sql(&srv, NULL, out, sizeof out, "SELECT released FROM rv_rel.locks WHERE name = 'rv-rel-lock'");
  printf("  row released on the server: %s\n", out);
  dlock_mutex_free(m);
  dlock_client_free(c);
  pgp_stop(px);
  ASSERT_STR_EQ(out, "t"); /* the first send ran */
  if (rc != DLOCK_EUNKNOWN && rc != 0)
    TEST_FAIL("the release ran, yet it answered %s (not DLOCK_EUNKNOWN): %s", dlock_err_name(rc), err);
}

/* Finding 3b: sslpassword (the client key's passphrase, libpq 13+) is a
 * secret too; mask_url only masks a keyword spelled exactly "password". */
TEST(review_redact_hides_sslpassword) {
  
  char buf[512];
  dlock_url_redact("host=db.example dbname=shop sslpassword=topsecret", buf, sizeof buf);
  printf("  redacted: %s\n", buf);
  if (strstr(buf, "topsecret")) TEST_FAIL("sslpassword shows in the redacted URL: %s", buf);
  dlock_url_redact("postgresql://app@db.example/shop?sslpassword=topsecret", buf, sizeof buf);
  printf("  redacted: %s\n", buf);
  if (strstr(buf, "topsecret")) TEST_FAIL("sslpassword shows in the redacted URL: %s", buf);
}

typedef struct waiter_arg {
  dlock_mutex *m;
  int rc;
} waiter_arg;

static void *wait_forever(void *arg) {
  waiter_arg *w = arg;
  w->rc = dlock_mutex_acquire(w->m, DLOCK_WAIT_FOREVER);
  return NULL;
}

/* Finding 9: docs/postgres.md says a cancel "is seen within 50 ms", but the
 * waiting thread runs listen_start() (pg_lock.c:95) with ln_mu held: a
 * connect, LISTEN and up to 2 s waiting for the probe (which never arrives
 * through a transaction-mode pooler), all without looking at the cancel
 * flag; other waiters of the client block on ln_mu meanwhile. A cancel
 * 300 ms into the first wait takes about 1.7 s. */
TEST(review_cancel_of_a_first_wait_through_transaction_pgbouncer_is_prompt) {
  NEED_PG();
  char why[256];
  if (!th_pgbouncer_available(why, sizeof why)) TEST_SKIP("%s", why);
  th_pgbouncer bt;
  if (th_pgbouncer_start(&bt, &srv, "transaction") != 0) TEST_FAIL("pgbouncer did not start");
  char url[900];
  snprintf(url, sizeof url, "%s&dlock_schema=rv_cancel", bt.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *a = NULL, *b = NULL;
  int rc = dlock_client_new(&a, &o);
  if (rc == 0) rc = dlock_client_new(&b, &o);
  if (rc != 0) {
    char err[600];
    snprintf(err, sizeof err, "%s", dlock_last_error());
    if (a) dlock_client_free(a);
    th_pgbouncer_stop(&bt);
    TEST_FAIL("connect through pgbouncer: %s", err);
  }
  dlock_mutex *ma = NULL, *mb = NULL;
  dlock_mutex_new(&ma, a, "rv-cancel", NULL);
  dlock_mutex_new(&mb, b, "rv-cancel", NULL);
  int ra = dlock_mutex_acquire(ma, 0);
  waiter_arg w = {mb, -1};
  pthread_t t;
  pthread_create(&t, NULL, wait_forever, &w);
  usleep(300 * 1000);
  dlock_mono_ms t0 = dlock_mono_now();
  dlock_mutex_cancel(mb);
  pthread_join(t, NULL);
  dlock_mono_ms took = dlock_mono_now() - t0;
  printf("  holder: %s; waiter: %s after a cancel %lld ms ago\n", dlock_err_name(ra), dlock_err_name(w.rc),
         (long long)took);
  if (ra == 0) dlock_mutex_release(ma);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_pgbouncer_stop(&bt);
  ASSERT_OK(ra);
  ASSERT_EQ(w.rc, DLOCK_ECANCELED);
  if (took > 1000 * tf()) TEST_FAIL("the cancel took %lld ms (docs: within 50 ms)", (long long)took);
}

/* Finding 10: a SKIPPED event's 'node' must say which node claimed the tick
 * (dlock.h: "another node claimed the tick ('node' says which)"); Redis
 * fills dlock__claim.by (redis/sched.c:152), PostgreSQL never does (the
 * claim function does not return the row's node), so the event names "". */
typedef struct skip_seen {
  atomic_int skips, empty;
  char node[64];
} skip_seen;

static void on_skip(const dlock_sched_event *ev, void *arg) {
  skip_seen *k = arg;
  if (ev->kind != DLOCK_SCHED_SKIPPED) return;
  atomic_fetch_add(&k->skips, 1);
  if (!ev->node || !ev->node[0]) atomic_fetch_add(&k->empty, 1);
  else snprintf(k->node, sizeof k->node, "%s", ev->node);
}

static int noop_job(const dlock_tick *t, void *arg) {
  (void)t;
  (void)arg;
  return 0;
}

TEST(review_a_skipped_tick_names_the_node_that_claimed_it) {
  NEED_PG();
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_sched", srv.url);
  dlock_client *cs[2] = {client_url(url, 0), client_url(url, 0)};
  skip_seen k;
  memset(&k, 0, sizeof k);
  dlock_sched *s[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    dlock_sched_options so;
    dlock_sched_options_init(&so);
    so.node_name = i ? "node-b" : "node-a";
    so.on_event = on_skip;
    so.on_event_arg = &k;
    ASSERT_OK(dlock_sched_new(&s[i], cs[i], &so));
    ASSERT_OK(dlock_sched_add_fixed_rate(s[i], "rv-every-300", 300, NULL, noop_job, NULL));
  }
  for (int i = 0; i < 2; i++) ASSERT_OK(dlock_sched_start(s[i]));
  usleep(2000 * 1000);
  for (int i = 0; i < 2; i++) {
    dlock_sched_stop(s[i], 5000);
    dlock_sched_free(s[i]);
  }
  dlock_client_free(cs[0]);
  dlock_client_free(cs[1]);
  printf("  skipped events: %d, with an empty node: %d\n", atomic_load(&k.skips), atomic_load(&k.empty));
  ASSERT(atomic_load(&k.skips) > 0);
  if (atomic_load(&k.empty) > 0) TEST_FAIL("%d SKIPPED events name no node", atomic_load(&k.empty));
}

/* Finding 11: listen_start() (pg_lock.c:109) sends LISTEN with a blocking
 * PQexec(), no deadline, while holding ln_mu. Through a session-mode
 * PgBouncer (the mode docs/postgres.md recommends for LISTEN) whose server
 * connections are all in use, LISTEN queues in the pooler (up to its
 * query_wait_timeout, 120 s by default): a wait of 1.5 s, and every other
 * waiter of the client, and its cancel, hang until a server connection
 * frees. Here 3 sessions sleep 12 s on the pooler's other 3 connections
 * (default_pool_size = 4 in the harness). */
TEST(review_a_wait_through_a_busy_session_pgbouncer_ends_at_its_deadline) {
  NEED_PG();
  char why[256];
  if (!th_pgbouncer_available(why, sizeof why)) TEST_SKIP("%s", why);
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_listen", srv.url);
  dlock_client *a = client_url(url, 0);
  dlock_mutex *ma = NULL;
  ASSERT_OK(dlock_mutex_new(&ma, a, "rv-listen", NULL));
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  th_pgbouncer bt;
  if (th_pgbouncer_start(&bt, &srv, "session") != 0) TEST_FAIL("pgbouncer did not start");
  char burl[900];
  snprintf(burl, sizeof burl, "%s&dlock_schema=rv_listen", bt.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = burl;
  dlock_client *b = NULL;
  if (dlock_client_new(&b, &o) != 0) {
    th_pgbouncer_stop(&bt);
    TEST_FAIL("connect through pgbouncer: %s", dlock_last_error());
  }
  ASSERT_OK(dlock_client_ping(b)); /* its command connection has its server connection */
  th_pg via = srv;
  snprintf(via.dir, sizeof via.dir, "127.0.0.1");
  via.port = bt.port;
  pid_t kids[3];
  for (int i = 0; i < 3; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      char out[64];
      _exit(th_pg_sql(&via, NULL, out, sizeof out, "SELECT pg_sleep(12)") == 0 ? 0 : 1);
    }
  }
  usleep(1500 * 1000); /* the sleepers take the pooler's other server connections */
  dlock_mutex *mb = NULL;
  ASSERT_OK(dlock_mutex_new(&mb, b, "rv-listen", NULL));
  dlock_mono_ms t0 = dlock_mono_now();
  int rb = dlock_mutex_acquire(mb, 1500);
  dlock_mono_ms took = dlock_mono_now() - t0;
  printf("  wait 1500 ms: %s after %lld ms\n", dlock_err_name(rb), (long long)took);
  for (int i = 0; i < 3; i++) waitpid(kids[i], NULL, 0);
  dlock_mutex_free(mb);
  dlock_client_free(b);
  th_pgbouncer_stop(&bt);
  dlock_mutex_release(ma);
  dlock_mutex_free(ma);
  dlock_client_free(a);
  ASSERT_EQ(rb, DLOCK_EBUSY);
  if (took > 5000 * tf()) TEST_FAIL("a 1500 ms wait took %lld ms: LISTEN blocked in the pooler", (long long)took);
}

/* Finding 12: with synchronous_commit = off (a common tuning; per role or
 * database too), a crash loses the last commits, and with them the WAL
 * record of the fence sequence's advance: after recovery the sequence hands
 * out fences it already gave. docs/postgres.md says "after a crash a
 * sequence may skip ahead, never back", and nothing checks the setting (the
 * doctor does not, the statements do not SET LOCAL synchronous_commit = on).
 * The same fence twice means the guard (which admits an equal fence) lets
 * both holders write. wal_writer_delay = 10 s keeps the WAL unflushed. */
TEST(review_fences_rise_across_a_crash_with_synchronous_commit_off) {
  NEED_PG();
  th_pg s2;
  if (th_pg_start(&s2, "synchronous_commit=off wal_writer_delay=10000") != 0)
    TEST_FAIL("the second server did not start");
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=rv_crash", s2.url);
  dlock_client *c = client_url(url, 0);
  ASSERT_OK(dlock_client_setup(c));
  char out[128];
  th_pg_sql(&s2, NULL, out, sizeof out, "CHECKPOINT");
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 60000;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "rv-crash", &mo));
  uint64_t before = 0;
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    before = dlock_mutex_fence(m);
    ASSERT_OK(dlock_mutex_release(m));
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  if (th_pg_restart(&s2, 1, 200) != 0) {
    th_pg_stop(&s2);
    TEST_FAIL("restart after the crash failed");
  }
  c = client_url(url, 0);
  ASSERT_OK(dlock_mutex_new(&m, c, "rv-crash", &mo));
  int rc = dlock_mutex_acquire(m, 0);
  uint64_t after = rc == 0 ? dlock_mutex_fence(m) : 0;
  printf("  last fence before the crash: %llu; first after: %llu (%s)\n", (unsigned long long)before,
         (unsigned long long)after, dlock_err_name(rc));
  if (rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_pg_stop(&s2);
  ASSERT_OK(rc);
  if (after <= before)
    TEST_FAIL("fence went back from %llu to %llu across a crash (synchronous_commit = off)",
              (unsigned long long)before, (unsigned long long)after);
}

/* Finding 13: docs/postgres.md ("Lost replies"): "A server-side
 * statement_timeout (SQLSTATE 57014) is exact: the statement was rolled back
 * (DLOCK_ETIMEDOUT)". dlock__pg_run (pg_conn.c:504) counts every
 * DLOCK_ETIMEDOUT as "may have run", the server's 57014 included, so a
 * release cut by statement_timeout answers DLOCK_EUNKNOWN (and the healthy
 * connection is dropped). Set-up: a role with statement_timeout = 300 ms and
 * another session holding the lock's row (SELECT ... FOR UPDATE) for 3 s. */
TEST(review_a_release_cut_by_statement_timeout_is_exact) {
  NEED_PG();
  char out[256];
  ASSERT_EQ(th_pg_sql(&srv, NULL, out, sizeof out,
                      "CREATE ROLE rv_st LOGIN; GRANT CREATE ON DATABASE postgres TO rv_st; "
                      "ALTER ROLE rv_st SET statement_timeout = 300"), 0);
  char url[900];
  snprintf(url, sizeof url, "postgresql://rv_st@127.0.0.1:%d/postgres?dlock_schema=rv_st", srv.port);
  dlock_client *c = client_url(url, 0);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 60000;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "rv-st", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  pid_t kid = fork();
  if (kid == 0) {
    char o2[64];
    _exit(th_pg_sql(&srv, NULL, o2, sizeof o2,
                    "BEGIN; SELECT 1 FROM rv_st.locks WHERE name = 'rv-st' FOR UPDATE; SELECT pg_sleep(3); COMMIT;") == 0
              ? 0 : 1);
  }
  if (th_pg_wait_active(&srv, "pg_sleep", 30000 * tf()) != 0) TEST_FAIL("the other session never took the row");
  int rc = dlock_mutex_release(m);
  char err[700];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  printf("  release: %s: %s\n", dlock_err_name(rc), err);
  waitpid(kid, NULL, 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
  if (rc != DLOCK_ETIMEDOUT)
    TEST_FAIL("a release the server cancelled (57014, rolled back) answered %s, not DLOCK_ETIMEDOUT", dlock_err_name(rc));
}

TEST_MAIN()
