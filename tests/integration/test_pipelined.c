/*
 * test_pipelined.c - dlock_mutex_release_async: the release is sent without
 * waiting for its reply, and its outcome (released, not held, unknown) is
 * still delivered: by dlock_mutex_release_result() or by the next acquire on
 * the handle. A lost reply is unknown and the release is never resent.
 * Back-to-back cycles on distinct names send each release once; two threads
 * pipelining on one client each get their own outcomes. A release waits
 * (corked) for the client's next script call, which carries it in the same
 * write and after it, or for the flusher when none comes.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "faultproxy.h"
#include "harness.h"
#include "test.h"

static th_redis srv;
static fp_proxy *fp;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
  if (fp_start(&fp, srv.port) != 0) exit(1);
}

void test_teardown(void) {
  fp_stop(fp);
  th_redis_stop(&srv);
}

static long long calls_of(const char *stats, const char *cmd) {
  char pat[64];
  snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
  const char *p = strstr(stats, pat);
  return p ? atoll(p + strlen(pat)) : 0;
}

TEST(a_pipelined_release_frees_the_key_and_its_result_says_released) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "p:one", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release_async(m));
  ASSERT_EQ(dlock_mutex_fence(m), 0); /* released locally at once */
  ASSERT_OK(dlock_mutex_release_result(m));
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EXISTS p:one");
  ASSERT_STR_EQ(out, "0");
  /* Once per release. */
  ASSERT_STATUS(dlock_mutex_release_result(m), DLOCK_EINVAL);
  /* Not held: refused like a release. */
  ASSERT_STATUS(dlock_mutex_release_async(m), DLOCK_ENOTHELD);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

enum { CYCLES = 300 };

TEST(back_to_back_cycles_on_distinct_names_send_each_release_once_and_free_every_key) {
  dlock_client *c = test_client(srv.url);
  static dlock_mutex *ms[CYCLES];
  for (int i = 0; i < CYCLES; i++) {
    char name[32];
    snprintf(name, sizeof name, "p:cyc:%d", i);
    ms[i] = test_mutex(c, name, 10000);
  }
  /* Load both scripts first: a NOSCRIPT answer would count twice. */
  ASSERT_OK(dlock_mutex_acquire(ms[0], 0));
  ASSERT_OK(dlock_mutex_release_async(ms[0]));
  ASSERT_OK(dlock_mutex_release_result(ms[0]));
  char stats[8192];
  th_redis_cli(&srv, stats, sizeof stats, "CONFIG RESETSTAT");
  for (int i = 0; i < CYCLES; i++) {
    ASSERT_OK(dlock_mutex_acquire(ms[i], 0));
    ASSERT_OK(dlock_mutex_release_async(ms[i]));
  }
  for (int i = 0; i < CYCLES; i++) ASSERT_OK(dlock_mutex_release_result(ms[i]));
  th_redis_cli(&srv, stats, sizeof stats, "INFO commandstats");
  ASSERT_EQ(calls_of(stats, "evalsha") + calls_of(stats, "eval"), 2 * CYCLES);
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EVAL \"return #redis.call('KEYS', 'p:cyc:*')\" 0");
  ASSERT_STR_EQ(out, "0");
  for (int i = 0; i < CYCLES; i++) dlock_mutex_free(ms[i]);
  dlock_client_free(c);
}

TEST(a_failed_pipelined_release_is_reported_by_the_next_acquire_on_the_handle) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "p:gone", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DEL p:gone");
  ASSERT_OK(dlock_mutex_release_async(m));
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "previous pipelined release");
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "the key was gone");
  ASSERT_EQ(dlock_mutex_fence(m), 0);                         /* not acquired */
  ASSERT_STATUS(dlock_mutex_release_result(m), DLOCK_EINVAL); /* delivered once */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_pipelined_release_whose_reply_is_lost_is_unknown_and_never_sent_again) {
  dlock_client *c = test_client(fp_url(fp));
  dlock_mutex *m = test_mutex(c, "p:lost", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char stats[8192];
  th_redis_cli(&srv, stats, sizeof stats, "CONFIG RESETSTAT");
  int before = fp_dropped(fp);
  fp_drop_reply(fp, "p:lost", 1);
  ASSERT_OK(dlock_mutex_release_async(m));
  ASSERT_EQ(fp_wait_dropped(fp, before + 1, (long)(5000 * th_time_factor())), before + 1);
  ASSERT_STATUS(dlock_mutex_release_result(m), DLOCK_EUNKNOWN);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "not sent again");
  fp_pass(fp);
  th_redis_cli(&srv, stats, sizeof stats, "INFO commandstats");
  ASSERT_EQ(calls_of(stats, "evalsha") + calls_of(stats, "eval"), 1); /* sent once, and it ran */
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EXISTS p:lost");
  ASSERT_STR_EQ(out, "0");
  /* The client goes on: a new pipeline connection. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release_async(m));
  ASSERT_OK(dlock_mutex_release_result(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct pipeliner {
  dlock_client *c;
  const char *prefix;
  int failures;
} pipeliner;

static void *pipeline_loop(void *arg) {
  pipeliner *p = arg;
  enum { N = 200 };
  dlock_mutex *ms[N];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "%s:%d", p->prefix, i);
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 10000;
    ms[i] = NULL;
    if (dlock_mutex_new(&ms[i], p->c, name, &mo) != 0) p->failures++;
  }
  for (int i = 0; i < N; i++) {
    if (!ms[i]) continue;
    if (dlock_mutex_acquire(ms[i], 0) != 0 || dlock_mutex_release_async(ms[i]) != 0) p->failures++;
  }
  for (int i = 0; i < N; i++) {
    if (ms[i] && dlock_mutex_release_result(ms[i]) != 0) p->failures++;
    dlock_mutex_free(ms[i]);
  }
  return NULL;
}

TEST(two_threads_pipelining_on_one_client_each_get_their_own_outcomes) {
  dlock_client *c = test_client(srv.url);
  pipeliner a = {c, "p:ta", 0}, b = {c, "p:tb", 0};
  pthread_t ta, tb;
  ASSERT_EQ(pthread_create(&ta, NULL, pipeline_loop, &a), 0);
  ASSERT_EQ(pthread_create(&tb, NULL, pipeline_loop, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ASSERT_EQ(a.failures, 0);
  ASSERT_EQ(b.failures, 0);
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EVAL \"return #redis.call('KEYS', 'p:t?:*')\" 0");
  ASSERT_STR_EQ(out, "0");
  dlock_client_free(c);
}

TEST(a_corked_release_runs_before_the_clients_next_command) {
  /* The release rides in front of the next acquire on the same connection,
   * so a second handle on the same name finds it free at once (not busy
   * for the moment the release waits for company). */
  dlock_client *c = test_client(srv.url);
  dlock_mutex *a = test_mutex(c, "p:order", 10000);
  dlock_mutex *b = test_mutex(c, "p:order", 10000);
  for (int i = 0; i < 50; i++) {
    ASSERT_OK(dlock_mutex_acquire(a, 0));
    ASSERT_OK(dlock_mutex_release_async(a));
    ASSERT_OK(dlock_mutex_acquire(b, 0));
    ASSERT_OK(dlock_mutex_release_async(b));
  }
  ASSERT_OK(dlock_mutex_release_result(a));
  ASSERT_OK(dlock_mutex_release_result(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
}

TEST(a_corked_release_with_no_command_after_it_is_sent_by_the_flusher) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex *m = test_mutex(c, "p:alone", 60000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release_async(m));
  /* Nothing more from this client: the key goes all the same, long before
   * its 60 s lease. */
  char out[64] = "1";
  long until = 5000 * th_time_factor();
  for (long waited = 0; strcmp(out, "0") != 0 && waited < until; waited += 10) {
    th_sleep_ms(10);
    th_redis_cli(&srv, out, sizeof out, "EXISTS p:alone");
  }
  ASSERT_STR_EQ(out, "0");
  ASSERT_OK(dlock_mutex_release_result(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A corked release whose connection is closed under it (the proxy drops
 * every connection right after the release was queued, before or after the
 * flusher wrote it): the outcome must match what Redis did. Released (0):
 * the key is gone. "Never sent" (DLOCK_EIO): the key is still there, held
 * with its lease. A lost reply (DLOCK_EUNKNOWN) may be either. Nothing else,
 * and the client goes on. Each round lands where the close falls. */
TEST(a_corked_release_whose_connection_closes_reports_what_redis_did) {
  dlock_client *c = test_client(fp_url(fp));
  int seen[3] = {0, 0, 0}; /* released, never sent, unknown */
  for (int i = 0; i < 30; i++) {
    char name[32], out[64];
    snprintf(name, sizeof name, "p:closed:%d", i);
    dlock_mutex *m = test_mutex(c, name, 60000);
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    ASSERT_OK(dlock_mutex_release_async(m));
    if (i % 3) th_sleep_ms(i % 3 == 1 ? 0 : 2);
    fp_close_all(fp);
    int rc = dlock_mutex_release_result(m);
    th_redis_cli(&srv, out, sizeof out, "EXISTS %s", name);
    if (rc == 0) {
      seen[0]++;
      if (strcmp(out, "0") != 0) TEST_FAIL("round %d: released, but the key is still there", i);
    } else if (rc == DLOCK_EIO) {
      seen[1]++;
      if (strcmp(out, "1") != 0) TEST_FAIL("round %d: 'never sent', but the key is gone", i);
      ASSERT_CONTAINS(dlock_mutex_errmsg(m), name);
    } else if (rc == DLOCK_EUNKNOWN) {
      seen[2]++;
    } else {
      TEST_FAIL("round %d: %s: %s", i, dlock_err_name(rc), dlock_mutex_errmsg(m));
    }
    th_redis_cli(&srv, out, sizeof out, "DEL %s", name);
    /* The client goes on, on new connections. */
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    ASSERT_OK(dlock_mutex_release(m));
    dlock_mutex_free(m);
  }
  printf("  30 rounds: %d released, %d never sent, %d unknown\n", seen[0], seen[1], seen[2]);
  dlock_client_free(c);
}

TEST(a_script_cache_flushed_under_corked_releases_runs_each_release_and_acquire_once) {
  dlock_client *c = test_client(srv.url);
  dlock_mutex *a = test_mutex(c, "p:flush:a", 10000);
  dlock_mutex *b = test_mutex(c, "p:flush:b", 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(a));
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "SCRIPT FLUSH");
  /* a's release (NOSCRIPT) and b's acquire (NOSCRIPT) leave in one write. */
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  ASSERT_OK(dlock_mutex_release_result(a));
  th_redis_cli(&srv, out, sizeof out, "EXISTS p:flush:a");
  ASSERT_STR_EQ(out, "0");
  th_redis_cli(&srv, out, sizeof out, "EXISTS p:flush:b");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
}

TEST(a_noscript_reply_read_while_a_release_is_corked_runs_that_release_again) {
  /* a's release leaves (the flusher) after the script cache was flushed:
   * NOSCRIPT. b's release_async reads that reply while b's own release is
   * corked, and runs a's release again through the pool: no deadlock on the
   * pipeline, and both releases happen. alarm(): a hang fails the test. */
  dlock_client *c = test_client(srv.url);
  dlock_mutex *a = test_mutex(c, "p:ns:a", 60000);
  dlock_mutex *b = test_mutex(c, "p:ns:b", 60000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "SCRIPT FLUSH");
  ASSERT_OK(dlock_mutex_release_async(a));
  th_sleep_ms(200 * th_time_factor()); /* the flusher writes it; NOSCRIPT comes back */
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  alarm((unsigned)(60 * th_time_factor()));
  ASSERT_OK(dlock_mutex_release_async(b));
  ASSERT_OK(dlock_mutex_release_result(a));
  ASSERT_OK(dlock_mutex_release_result(b));
  alarm(0);
  th_redis_cli(&srv, out, sizeof out, "EXISTS p:ns:a p:ns:b");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
}

/* ---- The review of the performance commits 5849c5f..a73ad20 (corked
 * pipelined release, acquire.lua's closure-free path, the 3-key try acquire,
 * the token pool, the RESP encoder; branch perfrev). A test named
 * review_finding_* failed on the code as reviewed; the others pin down what
 * was checked and held (labels review: ctest review/test_pipelined). ---- */

static void cli_of(const th_redis *r, char *out, size_t n, const char *args) { th_redis_cli(r, out, n, "%s", args); }

/* Finding 1: with wait_replicas set (WAIT after every acquire), the next
 * acquire does not carry the corked releases: exec_with_wait()
 * (src/redis/scripts.c) sends the acquire + WAIT through the pool, never
 * through dlock__pipeline_exec(). The release stays corked for up to 1 ms,
 * the acquire arrives first, and the same thread's try acquire of the name
 * it has just released finds the lock still held: DLOCK_EBUSY. dlock.h
 * promises "the thread's order is kept". */
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev), finding 1. */
REVIEW_TEST(review_finding_1_wait_replicas_keeps_the_threads_order) {
  alarm(60);
  th_redis replica;
  char conf[128];
  snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", srv.port);
  ASSERT_OK(th_redis_start(&replica, conf));
  char out[256] = "";
  /* Up to 30 s: a master syncs a new replica after repl-diskless-sync-delay (5 s by default). */
  for (int i = 0; i < 600 && !strstr(out, "master_link_status:up"); i++) {
    cli_of(&replica, out, sizeof out, "INFO replication");
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
    if (rc == DLOCK_EBUSY)
      busy++;
    else
      ASSERT_OK(rc);
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev), finding 2. */
REVIEW_TEST(review_finding_2_a_written_unanswered_release_keeps_the_threads_order) {
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
  cli_of(&srv, out, sizeof out, cmd);
  if (value) {
    snprintf(cmd, sizeof cmd, "SET {%s}:fence '%s'", name, value);
    cli_of(&srv, out, sizeof out, cmd);
  }
}

static void get_key(const char *key, char *out, size_t n) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "GET %s", key);
  cli_of(&srv, out, n, cmd);
}

static int exists(const char *key) {
  char out[64], cmd[256];
  snprintf(cmd, sizeof cmd, "EXISTS %s", key);
  cli_of(&srv, out, sizeof out, cmd);
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

/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev): what held. */
REVIEW_TEST(held_acquire_fences_match_the_previous_script) {
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
  cli_of(&srv, out, sizeof out, "RPUSH {rp:f}:fence x");
  dlock_mutex *m = test_mutex(c, "rp:f", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT(!exists("rp:f") && !exists("{rp:f}:meta"));
  cli_of(&srv, out, sizeof out, "LLEN {rp:f}:fence");
  ASSERT_STR_EQ(out, "1");
  /* A meta key of another type: a mutex neither reads nor writes it. */
  set_counter("rp:f", NULL);
  cli_of(&srv, out, sizeof out, "RPUSH {rp:f}:meta x");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  cli_of(&srv, out, sizeof out, "LRANGE {rp:f}:meta 0 -1");
  ASSERT_STR_EQ(out, "x");
  cli_of(&srv, out, sizeof out, "DEL {rp:f}:meta");
  uint64_t after = taken(c, NULL);
  ASSERT(after > clock_floor);
  dlock_mutex_free(m);
  dlock_client_free(c);
  alarm(0);
}

/* The 3-key try on names that are not a free mutex. */
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev): what held. */
REVIEW_TEST(held_a_try_acquire_on_names_of_other_kinds) {
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
  cli_of(&srv, out, sizeof out, "SET rp:kind:foreign x");
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev), finding 2. */
REVIEW_TEST(review_finding_2_threads_and_the_watchdog_share_the_corked_pipeline) {
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev): what held. */
REVIEW_TEST(held_more_releases_than_the_pipeline_holds_and_close_while_corked) {
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
  cli_of(&srv, out, sizeof out, "EVAL \"return #redis.call('KEYS', 'rp:many:*')\" 0");
  ASSERT_STR_EQ(out, "0");
  alarm(0);
}

/* Releases written by the flusher, their replies not read yet: the next
 * call rides the pipeline connection behind them (finding 2's fix) and must
 * be written itself, promptly. */
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev): what held. */
REVIEW_TEST(held_a_call_behind_written_unanswered_releases_is_sent_at_once) {
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev), finding 3. */
REVIEW_TEST(review_finding_3_a_pipelined_release_after_the_servers_idle_timeout) {
  alarm(60);
  th_redis idle;
  ASSERT_OK(th_redis_start(&idle, "timeout 1\n"));
  dlock_client *c = test_client(idle.url);
  dlock_mutex *a = test_mutex(c, "rp:idle", 30000), *b = test_mutex(c, "rp:idle", 30000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(a)); /* the pipeline connection opens */
  ASSERT_OK(dlock_mutex_release_result(a));
  th_sleep_ms(3500);                    /* the server closes its idle connections */
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev), finding 4. */
REVIEW_TEST(review_finding_4_the_first_pipelined_release_on_a_fresh_server_keeps_the_order) {
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
    if (brc)
      snprintf(why, sizeof why, "round %d: %s", round, dlock_last_error());
    else
      ASSERT_OK(dlock_mutex_release(b));
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
/* Review of the performance commits 5849c5f..a73ad20 (branch perfrev): what held. */
REVIEW_TEST(held_pipelined_releases_over_tls_and_after_an_idle_spell) {
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
             "tls-ca-cert-file %s/ca.crt\ntls-auth-clients optional\ntimeout 1\n",
             port, certs, certs, certs);
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

/* ---- The review of the Redis lock family (semaphore, read-write lock,
 * latch, multi-lock) and of the pipelined release (branch revfam): one test
 * per finding, each FAILED on the code as reviewed (base 2911b24; labels
 * review: ctest review/test_pipelined). ---- */

static dlock_client *client(void) { return test_client(srv.url); }

/* Run one mutex cycle so that the server's script cache has release.lua
 * (a pipelined EVALSHA of an unknown script falls back to the synchronous
 * release, which would hide the first finding). */
static void load_release_script(dlock_client *c) {
  dlock_mutex *m = test_mutex(c, "rv:load", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
}

/* Finding 1: dlock__redis_release_async (src/redis/pipeline.c) always sends
 * the mutex's release.lua, whatever the handle's kind. dlock.h and
 * docs/semaphore.md say every dlock_mutex_* call works on
 * dlock_semaphore_mutex(s) as the semaphore call of the same verb; a
 * pipelined release of a permit runs release.lua on the permits' ZSET, which
 * fails (WRONGTYPE), and the permit stays taken until its lease ends. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 1. */
REVIEW_TEST(review_a_pipelined_release_of_a_semaphore_permit_gives_the_permit_back) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_semaphore *a = test_semaphore(c, "rv:sem:async", 1, 20000), *b = test_semaphore(c, "rv:sem:async", 1, 20000);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  ASSERT_OK(dlock_mutex_release_async(dlock_semaphore_mutex(a)));
  int rc = dlock_mutex_release_result(dlock_semaphore_mutex(a));
  if (rc) TEST_FAIL("pipelined release of a permit: %s", dlock_last_error());
  ASSERT_OK(dlock_semaphore_acquire(b, 0)); /* the only permit is free again */
  ASSERT_OK(dlock_semaphore_release(b));
  dlock_semaphore_free(a);
  dlock_semaphore_free(b);
  dlock_client_free(c);
}

/* Finding 1, the read-write lock: dlock_rwlock_mutex()'s "every
 * dlock_mutex_* call on it acts on this side"; a pipelined release of the
 * write side leaves the writer in place until its lease ends. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 1. */
REVIEW_TEST(review_a_pipelined_release_of_a_write_hold_frees_the_name) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_rwlock *w = test_rwlock(c, "rv:rw:async", DLOCK_RW_WRITE, 20000);
  dlock_rwlock *r = test_rwlock(c, "rv:rw:async", DLOCK_RW_READ, 20000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_mutex_release_async(dlock_rwlock_mutex(w)));
  int rc = dlock_mutex_release_result(dlock_rwlock_mutex(w));
  if (rc) TEST_FAIL("pipelined release of a write hold: %s", dlock_last_error());
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_OK(dlock_rwlock_release(r));
  char out[64];
  cli_of(&srv, out, sizeof out, "EXISTS rv:rw:async {rv:rw:async}:meta");
  ASSERT_STR_EQ(out, "0");
  dlock_rwlock_free(w);
  dlock_rwlock_free(r);
  dlock_client_free(c);
}

/* Run fn in a child process; 1 if it exited normally with status 0. */
static int survives(void (*fn)(void)) {
  pid_t kid = fork();
  if (kid == 0) {
    fn();
    _exit(0);
  }
  int st = 0;
  if (waitpid(kid, &st, 0) != kid) return 0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void sem_new_null_out(void) {
  dlock_client *c = client();
  int rc = dlock_semaphore_new(NULL, c, "rv:sem:nullout", 2, NULL);
  dlock_client_free(c);
  _exit(rc == DLOCK_EINVAL ? 0 : 3);
}

static void rw_new_null_out(void) {
  dlock_client *c = client();
  int rc = dlock_rwlock_new(NULL, c, "rv:rw:nullout", DLOCK_RW_READ, NULL);
  dlock_client_free(c);
  _exit(rc == DLOCK_EINVAL ? 0 : 3);
}

/* Finding 2: dlock_semaphore_new(NULL, ...) and dlock_rwlock_new(NULL, ...)
 * (src/core/semaphore.c, src/core/rwlock.c) build the handle through a local
 * pointer and then store it through 'out' unchecked: a NULL 'out' crashes
 * (SIGSEGV) where dlock_mutex_new() and dlock_latch_new() answer EINVAL. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 2. */
REVIEW_TEST(review_new_semaphore_or_rwlock_with_a_null_out_is_einval_not_a_crash) {
  ASSERT(survives(sem_new_null_out));
  ASSERT(survives(rw_new_null_out));
}

static dlock_lock_info info_of(dlock_client *c, const char *name) {
  dlock_lock_info i;
  dlock_lock_info_init(&i);
  if (dlock_lock_info_get(c, name, &i) != 0) TEST_FAIL("status of '%s': %s", name, dlock_last_error());
  return i;
}

/* A child that waits for a permit of 'name' (limit 1, lease 1000 ms) until
 * it is killed. */
static void wait_for_permit_forever(const char *name) {
  dlock_client *c = client();
  dlock_semaphore *s = test_semaphore(c, name, 1, 1000);
  dlock_semaphore_acquire(s, DLOCK_WAIT_FOREVER);
  _exit(0);
}

/* Finding 3: sem_acquire.lua hands free permits to queued waiters first
 * (dlock_sem_grant); when the caller itself gets none and no expired permit
 * was pruned, it returns without dlock_sem_tidy, so the permits' ZSET and
 * {K}:meta just created by the grant have no expiry. If the granted waiter
 * has crashed (it never confirms), both stay forever, and with them the
 * stored limit: docs/semaphore.md says "the stored limit goes with the last
 * permit", yet every caller with another limit gets DLOCK_ELIMIT from then
 * on although no permit is held. Here: the holder's lease ends (its keys
 * expire whole), the first waiter was SIGKILLed, a try-only caller runs the
 * grant. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 3. */
REVIEW_TEST(review_a_grant_to_a_crashed_waiter_leaves_no_key_without_expiry) {
  const char *name = "rv:sem:leak";
  dlock_client *c = client();
  dlock_semaphore *a = test_semaphore(c, name, 1, 800);
  ASSERT_OK(dlock_semaphore_acquire(a, 0));
  pid_t kid = fork();
  if (kid == 0) wait_for_permit_forever(name);
  int queued = 0;
  for (int i = 0; i < 300 && !queued; i++) {
    queued = info_of(c, name).waiters == 1;
    if (!queued) th_sleep_ms(10);
  }
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  ASSERT(queued);
  /* The holder's lease ends: its keys expire (no release). */
  th_sleep_ms(1000);
  char out[64];
  cli_of(&srv, out, sizeof out, "EXISTS rv:sem:leak");
  ASSERT_STR_EQ(out, "0");
  dlock_semaphore *b = test_semaphore(c, name, 1, 800);
  ASSERT_STATUS(dlock_semaphore_acquire(b, 0), DLOCK_EBUSY); /* FIFO: the dead waiter is granted */
  cli_of(&srv, out, sizeof out, "PTTL rv:sem:leak");
  if (strcmp(out, "-1") == 0) TEST_FAIL("the permits' key %s has no expiry after the grant", name);
  cli_of(&srv, out, sizeof out, "PTTL {rv:sem:leak}:meta");
  if (strcmp(out, "-1") == 0) TEST_FAIL("{%s}:meta has no expiry after the grant", name);
  /* Once the dead waiter's claim has run out, nothing is held, so any
   * limit may be stored anew. */
  th_sleep_ms(1500);
  dlock_semaphore *three = test_semaphore(c, name, 3, 800);
  int rc = dlock_semaphore_acquire(three, 0);
  if (rc) TEST_FAIL("no permit is held, yet a limit of 3 is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_semaphore_release(three));
  dlock_semaphore_release(a); /* lost long ago: ENOTHELD */
  dlock_semaphore_free(three);
  dlock_semaphore_free(b);
  dlock_semaphore_free(a);
  dlock_client_free(c);
}

/* The second thread of the next test: acquire the shared handle (it waits
 * locally while the first thread holds it). */
static void *take_shared(void *arg) {
  dlock_mutex *m = arg;
  intptr_t rc = dlock_mutex_acquire(m, 5000);
  return (void *)rc;
}

/* Finding 4: a pipelined release whose reply is NOSCRIPT is run again by
 * read_one() (src/redis/pipeline.c) through dlock__redis_release(e->m),
 * which sends the handle's token as it is when the reply is read, not the
 * token that was released. A handle is shared by threads (acquire waits
 * locally for another thread's hold): thread 2 waits on the handle, thread 1
 * releases with dlock_mutex_release_async after the script cache was
 * flushed (so its release did not run), thread 2 acquires with a new token
 * once thread 1's lease ends, and reading thread 1's outcome deletes thread
 * 2's key: thread 2 believes it holds the lock while anyone may take it.
 * (Since finding 6's fix, thread 2's acquire reads thread 1's outcome
 * first; the resend carries the released token either way.) */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 4. */
REVIEW_TEST(review_a_resent_pipelined_release_never_deletes_the_next_holders_key) {
  dlock_client *c = client();
  load_release_script(c);
  dlock_mutex *m = test_mutex(c, "rv:pipe:noscript", 1500);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, take_shared, m), 0);
  th_sleep_ms(200); /* the other thread waits locally for our hold */
  char out[64];
  cli_of(&srv, out, sizeof out, "SCRIPT FLUSH");
  ASSERT_OK(dlock_mutex_release_async(m)); /* its EVALSHA answers NOSCRIPT: it did not run */
  void *trc = NULL;
  pthread_join(t, &trc);
  ASSERT_EQ((intptr_t)trc, 0);   /* the other thread holds it now, with its own token */
  dlock_mutex_release_result(m); /* our outcome, if the other thread's acquire did not read it */
  cli_of(&srv, out, sizeof out, "EXISTS rv:pipe:noscript");
  if (strcmp(out, "1") != 0) TEST_FAIL("the key of the thread that holds the lock now was deleted");
  dlock_mutex *other = test_mutex(c, "rv:pipe:noscript", 1500);
  ASSERT_STATUS(dlock_mutex_acquire(other, 0), DLOCK_EBUSY);
  dlock_mutex_free(other);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct latch_wait_arg {
  dlock_latch *l;
  int rc;
  long long took_ms;
} latch_wait_arg;

static void *latch_wait_thread(void *arg) {
  latch_wait_arg *w = arg;
  long long t0 = th_now_ms();
  w->rc = dlock_latch_wait(w->l, 6000);
  w->took_ms = th_now_ms() - t0;
  return NULL;
}

/* Finding 5: dlock__redis_latch_wait (src/redis/latch.c) subscribes first
 * (waiting for the server to confirm) and only then takes the cancel
 * generation (m->wait_gen = m->cancel_gen): a dlock_latch_cancel() made
 * while the wait is subscribing is forgotten, and the wait runs its whole
 * wait_ms. The server is paused (CLIENT PAUSE) so that the subscription of
 * the wait's first look takes a second; the cancel comes in that second. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 5. */
REVIEW_TEST(review_a_latch_cancel_during_the_waits_subscription_ends_the_wait) {
  dlock_client *c = client();
  dlock_latch *l = NULL;
  ASSERT_OK(dlock_latch_new(&l, c, "rv:latch:cancel"));
  ASSERT_OK(dlock_latch_set(l, 1, 60000));
  char out[64];
  cli_of(&srv, out, sizeof out, "CLIENT PAUSE 1200 ALL");
  latch_wait_arg w = {l, 0, 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, latch_wait_thread, &w), 0);
  th_sleep_ms(300);
  dlock_latch_cancel(l); /* the wait is in progress: it must end */
  pthread_join(t, NULL);
  if (w.rc != DLOCK_ECANCELED)
    TEST_FAIL("canceled during its subscription, the wait answered %d after %lld ms", w.rc, w.took_ms);
  ASSERT(w.took_ms < 3000);
  dlock_latch_free(l);
  dlock_client_free(c);
}

typedef struct cycle_arg {
  dlock_mutex *m;
  int acquire_rc, result_rc;
} cycle_arg;

/* Acquire the shared handle (waiting locally for the other thread), then
 * release it pipelined and read that outcome. */
static void *cycle_shared(void *arg) {
  cycle_arg *a = arg;
  a->acquire_rc = dlock_mutex_acquire(a->m, 5000);
  a->result_rc = -999;
  if (a->acquire_rc == 0 && dlock_mutex_release_async(a->m) == 0) a->result_rc = dlock_mutex_release_result(a->m);
  return NULL;
}

/* Finding 6: dlock.h: "The outcome is never dropped: ... until then the
 * next acquire on 'm' first reads it and, if it is a failure, returns that
 * failure". dlock_mutex_acquire (src/core/mutex.c) reads a pending outcome
 * before it waits locally for another thread's hold on the same handle; when
 * that thread then releases with dlock_mutex_release_async, the waiting
 * acquire goes on without reading it, and its own pipelined release
 * mixes it with its own: its _result answers the first thread's failure
 * (rel_state is DONE with that one, so its own reply is not awaited), and
 * the first thread's _result finds nothing (DLOCK_EINVAL). Here the first
 * thread's release fails (its lease had run out: ENOTHELD); the second
 * thread, whose release did delete its key, is told ENOTHELD. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 6. */
REVIEW_TEST(review_a_failed_pipelined_release_is_reported_even_when_another_thread_takes_the_handle) {
  dlock_client *c = client();
  dlock_mutex *m = test_mutex(c, "rv:pipe:drop", 600);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  cycle_arg a = {m, -999, -999};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, cycle_shared, &a), 0);
  th_sleep_ms(900); /* our lease ends: the release below finds nothing */
  ASSERT_OK(dlock_mutex_release_async(m));
  pthread_join(t, NULL);
  int ours = dlock_mutex_release_result(m);
  /* The second thread held the key: its own release cannot have failed. */
  if (a.acquire_rc == 0 && a.result_rc != 0)
    TEST_FAIL("the second thread's release, which held the key, answered %d (the first thread's outcome?); "
              "the first thread's _result answered %d",
              a.result_rc, ours);
  if (a.acquire_rc != DLOCK_ENOTHELD && ours != DLOCK_ENOTHELD)
    TEST_FAIL("the failed release (ENOTHELD) was dropped: the other thread's acquire answered %d, its own "
              "release %d, and our _result %d",
              a.acquire_rc, a.result_rc, ours);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

typedef struct mutex_wait_arg {
  dlock_mutex *m;
  int rc;
} mutex_wait_arg;

static void *mutex_wait_thread(void *arg) {
  mutex_wait_arg *w = arg;
  w->rc = dlock_mutex_acquire(w->m, 6000);
  if (w->rc == 0) dlock_mutex_release(w->m);
  return NULL;
}

/* Finding 7 (fixed since: each kind's record has its own shape and a
 * hand-off grants only its own kind's, docs/keys.md): the kinds share the wait queue {K}:queue/{K}:waiters,
 * and dlock_sem_grant (prelude.lua) reads a mutex waiter's record
 * ("exp|claim|token|n<nonce>|info") as a semaphore waiter's
 * ("exp|claim|token|info"): a semaphore's acquire on a name whose mutex has
 * just ended (here: its keys deleted, as by expiry) hands a permit to the
 * waiting mutex's token. That token never confirms it (the mutex waiter then
 * fails with WRONGTYPE), so the permit is held by nobody until its claim
 * ends, and the semaphore's caller is told "all permits held" while none
 * is. (dlock_grant_next reads a semaphore waiter's record as a mutex
 * waiter's the same way.) */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 7. */
REVIEW_TEST(review_a_semaphore_never_grants_a_permit_to_a_waiting_mutex) {
  const char *name = "rv:kind:grant";
  dlock_client *c = client(), *c2 = client();
  dlock_mutex *h = test_mutex(c, name, 10000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  mutex_wait_arg w = {test_mutex(c2, name, 10000), 0};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, mutex_wait_thread, &w), 0);
  int queued = 0;
  for (int i = 0; i < 300 && !queued; i++) {
    queued = info_of(c, name).waiters == 1;
    if (!queued) th_sleep_ms(10);
  }
  ASSERT(queued);
  char out[64];
  cli_of(&srv, out, sizeof out, "DEL rv:kind:grant {rv:kind:grant}:meta"); /* the mutex's hold ends */
  dlock_semaphore *s = test_semaphore(c, name, 1, 5000);
  int rc = dlock_semaphore_acquire(s, 0);
  cli_of(&srv, out, sizeof out, "ZCARD rv:kind:grant");
  pthread_join(t, NULL);
  if (rc != 0)
    TEST_FAIL("no permit was held, yet the semaphore answered %d (permits held: %s, granted to the mutex waiter)", rc,
              out);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_mutex_release(h);
  dlock_mutex_free(h);
  dlock_mutex_free(w.m);
  dlock_client_free(c2);
  dlock_client_free(c);
}

typedef struct latch_set_arg {
  dlock_latch *l;
  int rc;
} latch_set_arg;

static void *latch_set_thread(void *arg) {
  latch_set_arg *a = arg;
  a->rc = dlock_latch_set(a->l, 1, 60000);
  return NULL;
}

/* Finding 8: dlock__redis_latch_set resends latch_set.lua after a lost
 * reply, "twice-safe: a second run with the same token finds the latch set
 * by it and answers 'set' again (even when counted down meanwhile)"; but
 * latch_set.lua recognises its own token only while the count is above
 * zero. A latch counted down to zero between the two runs is set again to
 * the full count by the resend: it opened, woke its waiters, and closes
 * again, so every later waiter waits for count-downs that never come (until
 * the expiry, then DLOCK_ENOLATCH: "never opens"). The fault proxy drops
 * the first reply and delays the resend; the count-down goes straight to
 * the server in between. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 8. */
REVIEW_TEST(review_a_resent_latch_set_does_not_close_a_latch_that_opened_meanwhile) {
  dlock_client *direct = client();
  dlock_latch *down = NULL;
  ASSERT_OK(dlock_latch_new(&down, direct, "rv:latch:resend"));
  dlock_client *c = test_client(fp_url(fp));
  dlock_latch *l = NULL;
  ASSERT_OK(dlock_latch_new(&l, c, "rv:latch:resend"));
  fp_pass(fp);
  int before = fp_dropped(fp);
  fp_delay(fp, 400);
  fp_drop_reply(fp, "{rv:latch:resend}:latch", 1);
  latch_set_arg a = {l, -999};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, latch_set_thread, &a), 0);
  int dropped = fp_wait_dropped(fp, before + 1, 5000) > before;
  int64_t left = -1;
  int down_rc = dropped ? dlock_latch_count_down(down, &left) : -999; /* before the resend arrives */
  pthread_join(t, NULL);
  fp_delay(fp, 0);
  fp_pass(fp);
  ASSERT(dropped);
  ASSERT_OK(down_rc);
  ASSERT_EQ(left, 0); /* the first run had set it: it is open now */
  ASSERT_OK(a.rc);    /* the resend answered "set" */
  int64_t n = -1;
  ASSERT_OK(dlock_latch_count(down, &n));
  if (n != 0)
    TEST_FAIL("the latch opened (counted down to 0), and the resent set closed it again: count %lld", (long long)n);
  ASSERT_OK(dlock_latch_wait(down, 0));
  dlock_latch_free(l);
  dlock_latch_free(down);
  dlock_client_free(c);
  dlock_client_free(direct);
}

/* Finding 9: a permit or read-write hold whose lease ran out, on a name that
 * is a mutex's since (a name is one kind at a time, and free for any kind
 * once its holds are gone), is answered with DLOCK_EWRONGTYPE instead of
 * DLOCK_ENOTHELD: sem_release.lua and rw_release.lua run their kind checks
 * (dlock_sem_check, rw_check) before looking for the token, and
 * sem_extend.lua's ZSCORE fails on the mutex's string. dlock.h: "DLOCK_
 * ENOTHELD when ... Redis no longer has our token"; an extend or a renewal
 * that finds the hold gone marks it lost (DLOCK_LOST_EXPIRED), but the
 * WRONGTYPE error leaves the handle "not lost" (the watchdog retries it as
 * unreachable until the deadline, then says DLOCK_LOST_UNREACHABLE). */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 9. */
REVIEW_TEST(review_a_hold_whose_name_became_a_mutex_is_not_held_not_wrongtype) {
  dlock_client *c = client();
  char out[64];
  /* A late release of a permit. */
  dlock_semaphore *s = test_semaphore(c, "rv:kind:late", 2, 400);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  th_sleep_ms(600);
  dlock_mutex *m = test_mutex(c, "rv:kind:late", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int rc = dlock_semaphore_release(s);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a permit: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_mutex_is_held(m), 1); /* touched nothing */
  /* An extend of a permit the server no longer has (its keys went, as by
   * expiry, while our deadline had not passed yet). */
  ASSERT_OK(dlock_mutex_release(m));
  dlock_semaphore *s2 = test_semaphore(c, "rv:kind:late", 2, 10000);
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  cli_of(&srv, out, sizeof out, "DEL rv:kind:late {rv:kind:late}:meta");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  rc = dlock_semaphore_extend(s2, 10000);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("extend of a permit gone: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_semaphore_lost(s2), DLOCK_LOST_EXPIRED);
  dlock_semaphore_release(s2);
  ASSERT_OK(dlock_mutex_release(m));
  /* A late release of a read hold. */
  dlock_rwlock *r = test_rwlock(c, "rv:kind:late", DLOCK_RW_READ, 400);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  th_sleep_ms(600);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  rc = dlock_rwlock_release(r);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a read hold: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_rwlock_free(r);
  dlock_semaphore_free(s2);
  dlock_semaphore_free(s);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Finding 9, the mutex's side: release.lua and extend.lua GET the key, which
 * fails (WRONGTYPE) once the name is a semaphore's or read-write lock's
 * ZSET: a late release of an expired mutex hold answers EWRONGTYPE, not
 * ENOTHELD, and an extend (or renewal) does not mark the hold lost. */
/* Review of the Redis lock family and the pipelined release (branch revfam), finding 9. */
REVIEW_TEST(review_a_mutex_hold_whose_name_became_a_semaphore_is_not_held_not_wrongtype) {
  dlock_client *c = client();
  char out[64];
  load_release_script(c);
  dlock_mutex *m = test_mutex(c, "rv:kind:late2", 400);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  th_sleep_ms(600);
  dlock_semaphore *s = test_semaphore(c, "rv:kind:late2", 2, 10000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  int rc = dlock_mutex_release(m);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("late release of a mutex hold: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_mutex *m2 = test_mutex(c, "rv:kind:late2", 10000);
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  cli_of(&srv, out, sizeof out, "DEL rv:kind:late2 {rv:kind:late2}:meta");
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  rc = dlock_mutex_extend(m2, 10000);
  if (rc != DLOCK_ENOTHELD) TEST_FAIL("extend of a mutex hold gone: %d (%s), not ENOTHELD", rc, dlock_last_error());
  ASSERT(dlock_mutex_lost(m2) != DLOCK_LOST_NONE);
  dlock_mutex_release(m2);
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

TEST_MAIN()
