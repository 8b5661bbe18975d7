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
#include <stdlib.h>
#include <string.h>
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
  ASSERT_EQ(dlock_mutex_fence(m), 0); /* not acquired */
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

TEST_MAIN()
