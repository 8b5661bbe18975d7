/*
 * review_perf.c - the adversarial review of the performance commits
 * 5849c5f..a73ad20 (corked pipelined release, acquire.lua's closure-free
 * path, the 3-key try acquire, the token pool, the RESP encoder); branch
 * perfrev. A test named review_finding_* failed on the code as reviewed; the
 * others pin down what was checked and held. Real redis-server processes
 * through harness.h, public API only (dlock.h). Registered as ctest
 * "review/review_perf" with the label "review".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void cli(const th_redis *r, char *out, size_t n, const char *args) { th_redis_cli(r, out, n, "%s", args); }

/* Finding 1: with wait_replicas set (WAIT after every acquire), the next
 * acquire does not carry the corked releases: exec_with_wait()
 * (src/redis/scripts.c) sends the acquire + WAIT through the pool, never
 * through dlock__pipeline_exec(). The release stays corked for up to 1 ms,
 * the acquire arrives first, and the same thread's try acquire of the name
 * it has just released finds the lock still held: DLOCK_EBUSY. dlock.h
 * promises "the thread's order is kept". */
TEST(review_finding_1_wait_replicas_keeps_the_threads_order) {
  alarm(60);
  th_redis replica;
  char conf[128];
  snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", srv.port);
  ASSERT_OK(th_redis_start(&replica, conf));
  char out[256] = "";
  /* Up to 30 s: a master syncs a new replica after repl-diskless-sync-delay (5 s by default). */
  for (int i = 0; i < 600 && !strstr(out, "master_link_status:up"); i++) {
    cli(&replica, out, sizeof out, "INFO replication");
    th_sleep_ms(50);
  }
  ASSERT_CONTAINS(out, "master_link_status:up");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.wait_replicas = 1;
  o.wait_timeout_ms = 1000;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex *a = test_mutex(c, "rp:wait", 10000), *b = test_mutex(c, "rp:wait", 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0)); /* the scripts cached */
  ASSERT_OK(dlock_mutex_release(a));
  int busy = 0;
  for (int i = 0; i < 20; i++) {
    ASSERT_OK(dlock_mutex_acquire(a, 0));
    ASSERT_OK(dlock_mutex_release_async(a));
    int rc = dlock_mutex_acquire(b, 0); /* after the release, on this thread */
    if (rc == DLOCK_EBUSY) busy++;
    else ASSERT_OK(rc);
    if (rc == 0) ASSERT_OK(dlock_mutex_release(b));
    ASSERT_OK(dlock_mutex_release_result(a));
  }
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_redis_stop(&replica);
  alarm(0);
  if (busy) TEST_FAIL("%d of 20 try acquires after this thread's pipelined release found the lock still held", busy);
}

/* Finding 2: the thread's order is kept only while the release is still
 * corked. Once it was written and its reply not yet read (the next acquire
 * on another handle first collects that handle's previous outcome, which
 * uncorks every release; or the flusher wrote it), dlock__pipeline_exec()
 * sees 'corked' 0 and lets the acquire go through the pool, on another
 * connection: Redis may run it before the release, and the same thread's
 * try acquire of the name it has just released answers DLOCK_EBUSY. Two
 * handles on one name released with release_async in turn hit it within a
 * few hundred cycles (it also failed at b9dd308, before the cork, but
 * 5849c5f's dlock.h promises the order). */
TEST(review_finding_2_a_written_unanswered_release_keeps_the_threads_order) {
  alarm(60);
  dlock_client *c = test_client(srv.url);
  dlock_mutex *a = test_mutex(c, "rp:order", 10000), *b = test_mutex(c, "rp:order", 10000);
  for (int i = 0; i < 2000; i++) {
    ASSERT_OK(dlock_mutex_acquire(a, 0));
    ASSERT_OK(dlock_mutex_release_async(a));
    ASSERT_OK(dlock_mutex_acquire(b, 0));
    ASSERT_OK(dlock_mutex_release_async(b));
    ASSERT_OK(dlock_mutex_release_result(a));
  }
  ASSERT_OK(dlock_mutex_release_result(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  alarm(0);
}

/* ---- acquire.lua's fences: the try path against the previous script ---- */

static void set_counter(const char *name, const char *value) {
  char out[256], cmd[256];
  snprintf(cmd, sizeof cmd, "DEL %s {%s}:meta {%s}:fence", name, name, name);
  cli(&srv, out, sizeof out, cmd);
  if (value) {
    snprintf(cmd, sizeof cmd, "SET {%s}:fence '%s'", name, value);
    cli(&srv, out, sizeof out, cmd);
  }
}

static void get_key(const char *key, char *out, size_t n) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "GET %s", key);
  cli(&srv, out, n, cmd);
}

static int exists(const char *key) {
  char out[64], cmd[256];
  snprintf(cmd, sizeof cmd, "EXISTS %s", key);
  cli(&srv, out, sizeof out, cmd);
  return atoi(out);
}

/* A counter that must be refused: EFENCE, the lock not left taken, the
 * counter put back as it was. */
static void refused(dlock_client *c, const char *value) {
  set_counter("rp:f", value);
  dlock_mutex *m = test_mutex(c, "rp:f", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFENCE);
  if (exists("rp:f")) TEST_FAIL("counter '%s': the failed acquire left the lock key", value);
  if (exists("{rp:f}:meta")) TEST_FAIL("counter '%s': the failed acquire left the meta key", value);
  char out[256];
  get_key("{rp:f}:fence", out, sizeof out);
  ASSERT_STR_EQ(out, value);
  dlock_mutex_free(m);
}

static uint64_t taken(dlock_client *c, const char *value) {
  set_counter("rp:f", value);
  dlock_mutex *m = test_mutex(c, "rp:f", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t f = dlock_mutex_fence(m);
  char out[256], want[32];
  get_key("{rp:f}:fence", out, sizeof out);
  /* The hold's record: "fence|since|token|owner info". */
  char *bar = strchr(out, '|');
  if (!bar) TEST_FAIL("counter '%s' after the acquire: '%s', want the hold's record", value ? value : "", out);
  *bar = '\0';
  snprintf(want, sizeof want, "%llu", (unsigned long long)f);
  ASSERT_STR_EQ(out, want);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  return f;
}

TEST(held_acquire_fences_match_the_previous_script) {
  alarm(60);
  dlock_client *c = test_client(srv.url);
  uint64_t clock_floor = (uint64_t)1700000000 * 1000000;
  ASSERT(taken(c, NULL) > clock_floor);
  ASSERT(taken(c, "0") > clock_floor);
  ASSERT(taken(c, "5") > clock_floor);
  ASSERT(taken(c, "99999999999999999") == 100000000000000000ULL); /* above the clock: +1 */
  ASSERT(taken(c, "9223372036854775806") == 9223372036854775807ULL);
  ASSERT(taken(c, "9999999999999999") > 9999999999999999ULL); /* 16 digits, carries */
  /* A counter holding a hold's record counts by the fence before its '|'. */
  ASSERT(taken(c, "5|1|ab|x") > clock_floor);
  ASSERT(taken(c, "99999999999999999|1|ab|x|y") == 100000000000000000ULL);
  refused(c, "9223372036854775807|1|ab|x");
  refused(c, "007|1|ab|x");
  refused(c, "|1|ab|x");
  refused(c, "abc|5");
  refused(c, "9223372036854775807");
  refused(c, "9223372036854775808");
  refused(c, "0000000000000000007");
  refused(c, "007");
  refused(c, "abc");
  refused(c, "-5");
  refused(c, "12345678901234567890");
  /* A counter of another type: EWRONGTYPE, nothing left, the list intact. */
  char out[256];
  set_counter("rp:f", NULL);
  cli(&srv, out, sizeof out, "RPUSH {rp:f}:fence x");
  dlock_mutex *m = test_mutex(c, "rp:f", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT(!exists("rp:f") && !exists("{rp:f}:meta"));
  cli(&srv, out, sizeof out, "LLEN {rp:f}:fence");
  ASSERT_STR_EQ(out, "1");
  /* A meta key of another type: a mutex neither reads nor writes it. */
  set_counter("rp:f", NULL);
  cli(&srv, out, sizeof out, "RPUSH {rp:f}:meta x");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  cli(&srv, out, sizeof out, "LRANGE {rp:f}:meta 0 -1");
  ASSERT_STR_EQ(out, "x");
  cli(&srv, out, sizeof out, "DEL {rp:f}:meta");
  uint64_t after = taken(c, NULL);
  ASSERT(after > clock_floor);
  dlock_mutex_free(m);
  dlock_client_free(c);
  alarm(0);
}

/* The 3-key try on names that are not a free mutex. */
TEST(held_a_try_acquire_on_names_of_other_kinds) {
  alarm(60);
  dlock_client *c = test_client(srv.url);
  dlock_semaphore *s = test_semaphore(c, "rp:kind:sem", 2, 10000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  dlock_mutex *m = test_mutex(c, "rp:kind:sem", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  dlock_mutex_free(m);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_rwlock *r = test_rwlock(c, "rp:kind:rw", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  m = test_mutex(c, "rp:kind:rw", 10000);
  int rc = dlock_mutex_acquire(m, 0);
  ASSERT(rc != 0);
  dlock_mutex_free(m);
  ASSERT_OK(dlock_rwlock_release(r));
  dlock_rwlock_free(r);
  /* Held by another handle; a queued waiter present; then free. */
  dlock_mutex *h = test_mutex(c, "rp:kind:mx", 10000), *t = test_mutex(c, "rp:kind:mx", 10000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  ASSERT_STATUS(dlock_mutex_acquire(t, 0), DLOCK_EBUSY);
  ASSERT(!exists("{rp:kind:mx}:queue"));
  ASSERT_OK(dlock_mutex_release(h));
  ASSERT_OK(dlock_mutex_acquire(t, 0));
  ASSERT_OK(dlock_mutex_release(t));
  dlock_mutex_free(h);
  dlock_mutex_free(t);
  /* A foreign key without expiry or meta. */
  char out[64];
  cli(&srv, out, sizeof out, "SET rp:kind:foreign x");
  m = test_mutex(c, "rp:kind:foreign", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFOREIGN);
  dlock_mutex_free(m);
  dlock_client_free(c);
  alarm(0);
}

/* ---- The corked release under threads, the watchdog and overflow ---- */

typedef struct worker {
  dlock_client *c;
  int id, failures;
  char why[256];
} worker;

static void *cycle(void *arg) {
  worker *w = arg;
  char name[64];
  snprintf(name, sizeof name, "rp:thr:%d", w->id);
  dlock_mutex *m = test_mutex(w->c, name, 10000), *n = test_mutex(w->c, name, 10000);
  uint64_t last = 0;
  for (int i = 0; i < 300; i++) {
    dlock_mutex *x = i % 2 ? m : n;
    int rc = dlock_mutex_acquire(x, 0);
    if (rc == 0 && dlock_mutex_fence(x) <= last) rc = -1000;
    if (rc == 0) last = dlock_mutex_fence(x);
    if (rc == 0) rc = dlock_mutex_release_async(x);
    if (rc && !w->failures++) snprintf(w->why, sizeof w->why, "cycle %d: %d %s", i, rc, dlock_last_error());
  }
  int rc = dlock_mutex_release_result(m);
  if (rc && !w->failures++) snprintf(w->why, sizeof w->why, "result m: %d %s", rc, dlock_last_error());
  rc = dlock_mutex_release_result(n);
  if (rc && !w->failures++) snprintf(w->why, sizeof w->why, "result n: %d %s", rc, dlock_last_error());
  dlock_mutex_free(m);
  dlock_mutex_free(n);
  return NULL;
}

/* Finding 2 too (each thread alternates two handles on its name). */
TEST(review_finding_2_threads_and_the_watchdog_share_the_corked_pipeline) {
  alarm(120);
  dlock_client *c = test_client(srv.url);
  /* Watchdog-mode holds renewed while the cycles run (short lease). */
  dlock_mutex *wd[6];
  for (int i = 0; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "rp:wd:%d", i);
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 0;
    ASSERT_OK(dlock_mutex_new(&wd[i], c, name, &mo));
    ASSERT_OK(dlock_mutex_acquire(wd[i], 0));
  }
  worker w[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (worker){c, i, 0, ""};
    pthread_create(&t[i], NULL, cycle, &w[i]);
  }
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; i++)
    if (w[i].failures) TEST_FAIL("thread %d: %d failures, first %s", i, w[i].failures, w[i].why);
  for (int i = 0; i < 6; i++) {
    ASSERT(dlock_mutex_lost(wd[i]) == DLOCK_LOST_NONE);
    ASSERT_OK(dlock_mutex_release_async(wd[i]));
  }
  for (int i = 0; i < 6; i++) {
    ASSERT_OK(dlock_mutex_release_result(wd[i]));
    dlock_mutex_free(wd[i]);
  }
  dlock_client_free(c);
  alarm(0);
}

/* More corked releases than PIPE_MAX (64), none carried; then the client
 * closes with some still corked: every one ran, once. */
TEST(held_more_releases_than_the_pipeline_holds_and_close_while_corked) {
  alarm(60);
  dlock_client *c = test_client(srv.url);
  enum { N = 150 };
  dlock_mutex *m[N];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "rp:many:%d", i);
    m[i] = test_mutex(c, name, 30000);
    ASSERT_OK(dlock_mutex_acquire(m[i], 0));
  }
  for (int i = 0; i < N; i++) ASSERT_OK(dlock_mutex_release_async(m[i]));
  for (int i = 0; i < N; i++) ASSERT_OK(dlock_mutex_release_result(m[i]));
  for (int i = 0; i < N; i++) ASSERT_OK(dlock_mutex_acquire(m[i], 0));
  for (int i = 0; i < N; i++) ASSERT_OK(dlock_mutex_release_async(m[i]));
  for (int i = 0; i < N; i++) dlock_mutex_free(m[i]);
  dlock_client_free(c);
  char out[64];
  cli(&srv, out, sizeof out, "EVAL \"return #redis.call('KEYS', 'rp:many:*')\" 0");
  ASSERT_STR_EQ(out, "0");
  alarm(0);
}

/* Releases written by the flusher, their replies not read yet: the next
 * call rides the pipeline connection behind them (finding 2's fix) and must
 * be written itself, promptly. */
TEST(held_a_call_behind_written_unanswered_releases_is_sent_at_once) {
  alarm(60);
  dlock_client *c = test_client(srv.url);
  dlock_mutex *a = test_mutex(c, "rp:behind:a", 10000), *b = test_mutex(c, "rp:behind:b", 10000),
              *x = test_mutex(c, "rp:behind:x", 10000);
  for (int i = 0; i < 20; i++) {
    ASSERT_OK(dlock_mutex_acquire(a, 0));
    ASSERT_OK(dlock_mutex_acquire(b, 0));
    ASSERT_OK(dlock_mutex_release_async(a));
    ASSERT_OK(dlock_mutex_release_async(b));
    th_sleep_ms(20); /* the flusher writes them; nobody reads the replies */
    long long t0 = th_now_ms();
    ASSERT_OK(dlock_mutex_acquire(x, 0));
    long long took = th_now_ms() - t0;
    if (took > 500) TEST_FAIL("round %d: the acquire behind written releases took %lld ms", i, took);
    ASSERT_OK(dlock_mutex_release(x));
    ASSERT_OK(dlock_mutex_release_result(a));
    ASSERT_OK(dlock_mutex_release_result(b));
  }
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_mutex_free(x);
  dlock_client_free(c);
  alarm(0);
}

/* Finding 3: the pipeline connection is reused without the check the pool
 * makes of an idle connection (dlock__conn_idle_closed: readable means the
 * server closed it). With the server's idle 'timeout' set, the first
 * pipelined release after an idle spell is corked onto a connection the
 * server has closed: the release never runs (the lock stays held to the end
 * of its lease; its outcome is DLOCK_EUNKNOWN), and the acquire that rides
 * behind it fails as a lost reply. */
TEST(review_finding_3_a_pipelined_release_after_the_servers_idle_timeout) {
  alarm(60);
  th_redis idle;
  ASSERT_OK(th_redis_start(&idle, "timeout 1\n"));
  dlock_client *c = test_client(idle.url);
  dlock_mutex *a = test_mutex(c, "rp:idle", 30000), *b = test_mutex(c, "rp:idle", 30000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(a)); /* the pipeline connection opens */
  ASSERT_OK(dlock_mutex_release_result(a));
  th_sleep_ms(3500); /* the server closes its idle connections */
  ASSERT_OK(dlock_mutex_acquire(a, 0)); /* the pool notices its closed one */
  ASSERT_OK(dlock_mutex_release_async(a));
  int brc = dlock_mutex_acquire(b, 0);
  char why[512];
  snprintf(why, sizeof why, "%s", dlock_last_error());
  if (brc == 0) dlock_mutex_release(b);
  int arc = dlock_mutex_release_result(a);
  char awhy[512];
  snprintf(awhy, sizeof awhy, "%s", dlock_last_error());
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_redis_stop(&idle);
  alarm(0);
  if (arc) TEST_FAIL("the release after an idle spell: %d %s", arc, awhy);
  if (brc) TEST_FAIL("the acquire after it: %d %s", brc, why);
}

/* Finding 4: on a server whose script cache lacks release.lua (a fresh or
 * restarted server, SCRIPT FLUSH), the corked EVALSHA of the release
 * answers NOSCRIPT; read_one() then runs it again through the pool, but the
 * acquire that rode behind it in the same write has already run: the same
 * thread's try acquire of the name it has just released answers
 * DLOCK_EBUSY. The first cycle on every new server does this. */
TEST(review_finding_4_the_first_pipelined_release_on_a_fresh_server_keeps_the_order) {
  alarm(60);
  th_redis fresh;
  ASSERT_OK(th_redis_start(&fresh, NULL));
  dlock_client *c = test_client(fresh.url);
  dlock_mutex *a = test_mutex(c, "rp:fresh", 30000), *b = test_mutex(c, "rp:fresh", 30000);
  int brc = 0, rrc = 0;
  char why[512] = "";
  for (int round = 0; round < 2 && !brc; round++) {
    if (round == 1) { /* restarted: an empty cache */
      ASSERT_OK(th_redis_restart(&fresh));
      th_sleep_ms(300);
    }
    ASSERT_OK(dlock_mutex_acquire(a, 0));
    ASSERT_OK(dlock_mutex_release_async(a));
    brc = dlock_mutex_acquire(b, 0);
    if (brc) snprintf(why, sizeof why, "round %d: %s", round, dlock_last_error());
    else ASSERT_OK(dlock_mutex_release(b));
    rrc = dlock_mutex_release_result(a);
  }
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_redis_stop(&fresh);
  alarm(0);
  if (brc) TEST_FAIL("the try acquire after this thread's pipelined release: %d %s", brc, why);
  ASSERT_OK(rrc);
}

/* TLS: threads cycling with pipelined releases, then the finding 3 case
 * over TLS (its idle check peeks through OpenSSL). */
TEST(held_pipelined_releases_over_tls_and_after_an_idle_spell) {
  alarm(120);
  char certs[512];
  snprintf(certs, sizeof certs, "%s/rp-certs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ASSERT(mkdtemp(certs) != NULL);
  ASSERT_OK(th_make_certs(certs));
  th_redis t;
  char extra[1500];
  int port = 0, started = -1;
  for (int attempt = 0; attempt < 5 && started != 0; attempt++) {
    port = th_free_port();
    snprintf(extra, sizeof extra,
             "tls-port %d\ntls-cert-file %s/server.crt\ntls-key-file %s/server.key\n"
             "tls-ca-cert-file %s/ca.crt\ntls-auth-clients optional\ntimeout 1\n", port, certs, certs, certs);
    started = th_redis_start(&t, extra);
  }
  ASSERT_OK(started);
  char url[128], ca[600];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d", port);
  snprintf(ca, sizeof ca, "%s/ca.crt", certs);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.tls_ca_file = ca;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  worker w[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){c, 100 + i, 0, ""};
    pthread_create(&th[i], NULL, cycle, &w[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++)
    if (w[i].failures) TEST_FAIL("TLS thread %d: %d failures, first %s", i, w[i].failures, w[i].why);
  dlock_mutex *a = test_mutex(c, "rp:tls:idle", 30000), *b = test_mutex(c, "rp:tls:idle", 30000);
  th_sleep_ms(3500);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(a));
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  ASSERT_OK(dlock_mutex_release_async(b));
  ASSERT_OK(dlock_mutex_release_result(a));
  ASSERT_OK(dlock_mutex_release_result(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_redis_stop(&t);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", certs);
  alarm(0);
}

TEST_MAIN()
