/*
 * test_sched.c - the scheduler across real processes: each tick runs exactly
 * once on 3 nodes (also with one node's clock 400 ms ahead, via libfaketime),
 * a runner killed mid-run blocks later ticks no longer than
 * lock-at-most-for, a node an hour ahead claims no tick and reports its skew
 * (and an old claim an hour ahead blocks nothing), fixed delay keeps its
 * spacing without overlap; plus
 * in-process checks of history, overlap, pool size and lock-at-least-for.
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "internal.h"
#include "redis_lock.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
}

void test_teardown(void) { th_redis_stop(&srv); }

typedef struct run_line {
  long long tick, start, end, fence;
  char node[64];
} run_line;

static int read_runs(const char *path, run_line *runs, int max) {
  FILE *f = fopen(path, "r");
  int n = 0;
  if (!f) return 0;
  while (n < max && fscanf(f, "%lld %lld %lld %63s %lld", &runs[n].tick, &runs[n].start, &runs[n].end, runs[n].node,
                           &runs[n].fence) == 5)
    n++;
  fclose(f);
  return n;
}

static int by_tick(const void *a, const void *b) {
  long long x = ((const run_line *)a)->tick, y = ((const run_line *)b)->tick;
  return (x > y) - (x < y);
}

static int by_start(const void *a, const void *b) {
  long long x = ((const run_line *)a)->start, y = ((const run_line *)b)->start;
  return (x > y) - (x < y);
}

/* When set, started nodes append their scheduler events to this file. */
static const char *node_events;

/* Start one sched_node; 'faketime' (may be NULL) is an offset like "+0.4s". */
static pid_t start_node(const char *node, const char *kind, const char *period, long run_ms, long life_ms,
                        const char *out, const char *at_most, const char *faketime) {
  char run[24], life[24];
  snprintf(run, sizeof run, "%ld", run_ms);
  snprintf(life, sizeof life, "%ld", life_ms);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (node_events) setenv("SCHED_NODE_EVENTS", node_events, 1);
    if (faketime) {
      setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
      /* libfaketime is preloaded ahead of the ASan runtime; that is fine here. */
      setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
      execlp("faketime", "faketime", "-m", "-f", faketime, SCHED_NODE, srv.url, node, kind, period, run, life, out,
             at_most, (char *)NULL);
    } else {
      execl(SCHED_NODE, SCHED_NODE, srv.url, node, kind, period, run, life, out, at_most, (char *)NULL);
    }
    _exit(127);
  }
  return pid;
}

static void clear_job(void) {
  char out[64];
  th_redis_cli(&srv, out, sizeof out,
               "DEL t:sched-job {t:sched-job}:tick {t:sched-job}:meta "
               "{t:sched-job}:history {t:sched-job}:lastend");
}

/* 3 nodes on a 1 s fixed rate for 'life' ms: every tick in the covered span
 * runs once, none twice, none skipped. */
static void check_once_per_tick(const char *offset_node_clock) {
  clear_job();
  char out[512];
  snprintf(out, sizeof out, "%s/runs-%s.txt", srv.dir, offset_node_clock ? "skewed" : "plain");
  long life = 12500; /* the nodes are separate programs: never under valgrind */
  pid_t p[3];
  p[0] = start_node("node-a", "rate", "1000", 100, life, out, "5000", NULL);
  p[1] = start_node("node-b", "rate", "1000", 100, life, out, "5000", NULL);
  p[2] = start_node("node-c", "rate", "1000", 100, life, out, "5000", offset_node_clock);
  for (int i = 0; i < 3; i++) {
    int st = th_wait(p[i], life + 30000);
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  run_line runs[64];
  int n = read_runs(out, runs, 64);
  ASSERT(n >= 10);
  qsort(runs, (size_t)n, sizeof runs[0], by_tick);
  int nodes_seen[3] = {0, 0, 0};
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(runs[i].tick % 1000, 0);
    if (i > 0) ASSERT_EQ(runs[i].tick - runs[i - 1].tick, 1000); /* no duplicate, no gap */
    if (i > 0) ASSERT(runs[i].fence > runs[i - 1].fence);
    for (int k = 0; k < 3; k++) nodes_seen[k] |= runs[i].node[5] == "abc"[k];
  }
  if (offset_node_clock) {
    /* The node whose clock runs ahead fires first and wins every tick; the
     * point is that the others never run the same tick again. */
    ASSERT(nodes_seen[2]);
  }
}

TEST(three_nodes_run_each_tick_of_a_one_second_job_exactly_once) { check_once_per_tick(NULL); }

TEST(one_node_with_its_clock_400ms_ahead_still_runs_each_tick_once) {
#ifdef __SANITIZE_THREAD__
  /* libfaketime wraps pthread_cond_wait, which hides lock events from TSan
   * and makes it report false races; the other builds run this test. */
  printf("  (skipped under ThreadSanitizer)\n");
  return;
#endif
  check_once_per_tick("+0.4s");
}

/* Two correct nodes on a 1 s fixed rate for 'life' ms, started at 'since'
 * (wall ms): they run every tick of their span once, from the first one. */
static void check_correct_nodes_run_every_tick(const char *out, long life, long long since) {
  pid_t p[2];
  p[0] = start_node("node-a", "rate", "1000", 50, life, out, "5000", NULL);
  p[1] = start_node("node-b", "rate", "1000", 50, life, out, "5000", NULL);
  for (int i = 0; i < 2; i++) {
    int st = th_wait(p[i], life + 30000);
    ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  run_line runs[64];
  int n = read_runs(out, runs, 64);
  if (n < 3) TEST_FAIL("the correct nodes ran %d ticks in %ld ms (want >= 3): the job is stopped", n, life);
  qsort(runs, (size_t)n, sizeof runs[0], by_tick);
  /* The first tick after the nodes came up ran (1 s grid + start-up margin). */
  if (runs[0].tick > since + 2500 * th_time_factor())
    TEST_FAIL("first run was tick %lld, %lld ms after the nodes started", runs[0].tick, runs[0].tick - since);
  for (int i = 0; i < n; i++) {
    ASSERT(runs[i].node[5] == 'a' || runs[i].node[5] == 'b');
    if (i > 0) ASSERT_EQ(runs[i].tick - runs[i - 1].tick, 1000); /* no duplicate, no gap */
    if (i > 0) ASSERT(runs[i].fence > runs[i - 1].fence);
  }
}

static long long wall_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(a_node_an_hour_ahead_claims_nothing_reports_its_skew_and_correct_nodes_run_every_tick) {
#ifdef __SANITIZE_THREAD__
  printf("  (skipped under ThreadSanitizer: libfaketime, see above)\n");
  return;
#endif
  clear_job();
  char out_x[512], out[512], events[512];
  snprintf(out_x, sizeof out_x, "%s/ahead-x.txt", srv.dir);
  snprintf(out, sizeof out, "%s/ahead-ab.txt", srv.dir);
  snprintf(events, sizeof events, "%s/ahead-events.txt", srv.dir);
  /* An hour ahead, for a few seconds. */
  node_events = events;
  pid_t x = start_node("node-x", "rate", "1000", 50, 3500, out_x, "5000", "+3600s");
  node_events = NULL;
  int st = th_wait(x, 30000);
  ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  run_line runs[64];
  ASSERT_EQ(read_runs(out_x, runs, 64), 0); /* it ran nothing */
  /* It said why, for each of its ticks, with the skew it measured. */
  FILE *f = fopen(events, "r");
  ASSERT(f != NULL);
  int kind, status, skews = 0;
  long long tick, skew;
  char node[64];
  while (fscanf(f, "%d %lld %63s %d %lld", &kind, &tick, node, &status, &skew) == 5) {
    if (kind != DLOCK_SCHED_CLOCK_SKEW) TEST_FAIL("node-x reported event %d for tick %lld", kind, tick);
    if (skew < 3600000 - 60000 || skew > 3600000 + 60000) TEST_FAIL("measured skew %lld ms, want about 1 h", skew);
    ASSERT_STR_EQ(node, "node-x");
    skews++;
  }
  fclose(f);
  ASSERT(skews >= 2);
  char rec[128];
  th_redis_cli(&srv, rec, sizeof rec, "EXISTS {t:sched-job}:tick");
  ASSERT_STR_EQ(rec, "0"); /* no claim was recorded */
  check_correct_nodes_run_every_tick(out, 5500, wall_now_ms());
}

TEST(a_claim_recorded_an_hour_ahead_by_an_older_node_does_not_stop_the_job) {
  clear_job();
  char out[512], cmd[128];
  snprintf(out, sizeof out, "%s/old-ahead.txt", srv.dir);
  /* What a node an hour ahead left behind a minute ago, before claims were
   * bounded (claims live 30 days; the expiry dates the write). */
  long long now = wall_now_ms();
  snprintf(cmd, sizeof cmd, "SET {t:sched-job}:tick '%lld|old-node' PX %lld", now + 3600 * 1000, 2592000000LL - 60000);
  char rec[128];
  th_redis_cli(&srv, rec, sizeof rec, "%s", cmd);
  ASSERT_STR_EQ(rec, "OK");
  check_correct_nodes_run_every_tick(out, 5500, now);
}

TEST(a_runner_killed_mid_run_blocks_later_ticks_no_longer_than_lock_at_most_for) {
  clear_job();
  char out_a[512], out_b[512];
  snprintf(out_a, sizeof out_a, "%s/killed-a.txt", srv.dir);
  snprintf(out_b, sizeof out_b, "%s/killed-b.txt", srv.dir);
  /* Node A's runs take 20 s; its job lock lasts at most 2 s. */
  pid_t a = start_node("node-a", "rate", "1000", 20000, 60000, out_a, "2000", NULL);
  long long claimed_tick = 0;
  for (int i = 0; i < 200 && !claimed_tick; i++) {
    th_sleep_ms(50);
    char out[128];
    th_redis_cli(&srv, out, sizeof out, "GET {t:sched-job}:tick");
    claimed_tick = atoll(out);
  }
  ASSERT(claimed_tick > 0);
  th_sleep_ms(300);
  kill(a, SIGKILL);
  waitpid(a, NULL, 0);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  long long b_started = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  pid_t b = start_node("node-b", "rate", "1000", 50, 6000, out_b, "2000", NULL);
  int st = th_wait(b, 60000);
  ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  run_line runs[64];
  int n = read_runs(out_b, runs, 64);
  ASSERT(n >= 1);
  qsort(runs, (size_t)n, sizeof runs[0], by_tick);
  /* The killed run's lock expires 2 s after its claim; the next tick after
   * that must run (1 s grid, plus a margin for a noisy machine). */
  ASSERT(runs[0].tick > claimed_tick);
  ASSERT(runs[0].tick <= claimed_tick + 2000 + 1000 + 1000);
  /* The skipped ticks are in the history, as skipped. */
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_run_record recs[100];
  for (int i = 0; i < 100; i++) dlock_run_record_init(&recs[i]);
  int nrec = dlock_sched_history(c, "t:sched-job", recs, 100);
  ASSERT(nrec >= n);
  int skipped = 0;
  for (int i = 0; i < nrec; i++) skipped += strstr(recs[i].outcome, "skipped") != NULL;
  /* Node B skips the ticks it meets while the killed run's lock holds: at
   * least one when it was up a whole tick before its first run (on a busy
   * machine it may start only once the lock is gone: then it skips none). */
  if (runs[0].tick - b_started >= 2000) ASSERT(skipped >= 1);
  dlock_client_free(c);
}

TEST(fixed_delay_across_three_nodes_never_overlaps_and_keeps_its_spacing) {
  clear_job();
  char out[512];
  snprintf(out, sizeof out, "%s/delay.txt", srv.dir);
  long life = 7000;
  pid_t p[3];
  for (int i = 0; i < 3; i++) {
    char node[16];
    snprintf(node, sizeof node, "node-%c", "abc"[i]);
    p[i] = start_node(node, "delay", "500", 200, life, out, "5000", NULL);
  }
  for (int i = 0; i < 3; i++) {
    int st = th_wait(p[i], life + 30000);
    ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  run_line runs[64];
  int n = read_runs(out, runs, 64);
  ASSERT(n >= 5);
  qsort(runs, (size_t)n, sizeof runs[0], by_start);
  int nodes_ran = 0;
  for (int i = 1; i < n; i++) {
    long long gap = runs[i].start - runs[i - 1].end;
    if (gap < 480) TEST_FAIL("run %d started %lld ms after the previous ended (want >= 500)", i, gap);
    if (gap > 500 + 500) TEST_FAIL("run %d started %lld ms after the previous ended (drift)", i, gap);
    nodes_ran |= 1 << (runs[i].node[5] - 'a');
  }
  (void)nodes_ran;
}

/* ---- In-process checks ---- */

static dlock_client *client(void) { return test_client(srv.url); }

typedef struct counts {
  atomic_int ran, skipped_busy, skipped_pool, runs_started;
  atomic_llong last_fence;
} counts;

static void on_event(const dlock_sched_event *ev, void *arg) {
  counts *k = arg;
  if (ev->kind == DLOCK_SCHED_RAN) atomic_fetch_add(&k->ran, 1);
  if (ev->kind == DLOCK_SCHED_SKIPPED_BUSY) atomic_fetch_add(&k->skipped_busy, 1);
  if (ev->kind == DLOCK_SCHED_SKIPPED_POOL) atomic_fetch_add(&k->skipped_pool, 1);
}

static int slow_job(const dlock_tick *t, void *arg) {
  counts *k = arg;
  atomic_fetch_add(&k->runs_started, 1);
  atomic_store(&k->last_fence, (long long)t->fence);
  th_sleep_ms(1300); /* longer than the 500 ms period */
  return 3;
}

TEST(a_run_longer_than_the_period_is_not_overlapped_and_its_result_is_recorded) {
  clear_job();
  dlock_client *c = client();
  counts k = {0};
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.pool_size = 4;
  so.on_event = on_event;
  so.on_event_arg = &k;
  so.node_name = "solo";
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, &so));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "t:sched-job", 500, NULL, slow_job, &k));
  ASSERT_OK(dlock_sched_start(s));
  th_sleep_ms(3200);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
  ASSERT(atomic_load(&k.ran) >= 2);
  ASSERT(atomic_load(&k.skipped_busy) >= 2);
  ASSERT_EQ(atomic_load(&k.ran), atomic_load(&k.runs_started));
  dlock_run_record recs[10];
  for (int i = 0; i < 10; i++) dlock_run_record_init(&recs[i]);
  int n = dlock_sched_history(c, "t:sched-job", recs, 10);
  ASSERT(n >= 3);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    ASSERT_STR_EQ(recs[i].node, "solo");
    if (!strcmp(recs[i].outcome, "failed: 3")) {
      failed++;
      ASSERT(recs[i].duration_ms >= 1200);
      ASSERT(recs[i].fence > 0);
      ASSERT(recs[i].start_unix_ms >= recs[i].scheduled_unix_ms - 1000);
    }
  }
  ASSERT(failed >= 1);
  dlock_client_free(c);
}

static int quick_job(const dlock_tick *t, void *arg) {
  (void)t;
  atomic_fetch_add(&((counts *)arg)->runs_started, 1);
  th_sleep_ms(900);
  return 0;
}

TEST(a_pool_of_one_leaves_a_tick_to_other_nodes_when_busy) {
  dlock_client *c = client();
  counts k = {0};
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.pool_size = 1;
  so.on_event = on_event;
  so.on_event_arg = &k;
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, &so));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "t:pool-a", 1000, NULL, quick_job, &k));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "t:pool-b", 1000, NULL, quick_job, &k));
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "t:pool-b", 1000, NULL, quick_job, &k), DLOCK_EINVAL);
  ASSERT_OK(dlock_sched_start(s));
  th_sleep_ms(3500);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
  /* Both jobs tick together; one worker runs one of them per tick. */
  ASSERT(atomic_load(&k.skipped_pool) >= 2);
  ASSERT(atomic_load(&k.ran) >= 2);
  dlock_client_free(c);
}

TEST(lock_at_least_for_keeps_the_job_lock_after_a_short_run) {
  clear_job();
  dlock_client *c = client();
  counts k = {0};
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_least_for_ms = 4000;
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, NULL));
  ASSERT_OK(dlock_sched_add_cron(s, "t:sched-job", "* * * * * ?", &jo, quick_job, &k));
  ASSERT_OK(dlock_sched_start(s));
  for (int i = 0; i < 100 && atomic_load(&k.runs_started) == 0; i++) th_sleep_ms(50);
  th_sleep_ms(1500); /* the run (0.9 s) is over */
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "PTTL t:sched-job");
  ASSERT(atoll(out) > 0); /* still held */
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
  ASSERT_EQ(atomic_load(&k.runs_started), 1); /* ticks in the next 4 s were skipped */
  dlock_client_free(c);
}

typedef struct tick_log {
  atomic_int n, skipped_by_old;
  atomic_llong ticks[32];
} tick_log;

static int log_tick(const dlock_tick *t, void *arg) {
  tick_log *l = arg;
  int i = atomic_fetch_add(&l->n, 1);
  if (i < 32) atomic_store(&l->ticks[i], (long long)t->scheduled_unix_ms);
  return 0;
}

static void on_old_skip(const dlock_sched_event *ev, void *arg) {
  tick_log *l = arg;
  if (ev->kind == DLOCK_SCHED_SKIPPED && !strcmp(ev->node, "old-node")) atomic_fetch_add(&l->skipped_by_old, 1);
}

/* The record ahead was written just now: ticks up to then (+ the 5 s
 * tolerance) may have run before it, so they count as claimed; later ones
 * run. */
TEST(a_record_ahead_counts_only_for_ticks_up_to_its_write_time_plus_the_tolerance) {
  clear_job();
  dlock_client *c = client();
  long long now = wall_now_ms();
  char rec[128];
  th_redis_cli(&srv, rec, sizeof rec, "SET {t:sched-job}:tick '%lld|old-node' PX 2592000000", now + 3600 * 1000);
  ASSERT_STR_EQ(rec, "OK");
  tick_log l = {0};
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = on_old_skip;
  so.on_event_arg = &l;
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, &so));
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "t:sched-job", 1000, NULL, log_tick, &l));
  ASSERT_OK(dlock_sched_start(s));
  th_sleep_ms(8000);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  dlock_sched_free(s);
  int n = atomic_load(&l.n);
  ASSERT(n >= 1);
  ASSERT(atomic_load(&l.skipped_by_old) >= 3);
  for (int i = 0; i < n && i < 32; i++) {
    long long t = atomic_load(&l.ticks[i]);
    if (t <= now + DLOCK_SCHED_CLOCK_TOLERANCE_MS - 100)
      TEST_FAIL("tick %lld (%lld ms after the record was written) ran again", t, t - now);
    if (i > 0) ASSERT_EQ(t - atomic_load(&l.ticks[i - 1]), 1000);
  }
  dlock_client_free(c);
}

TEST(bad_jobs_are_refused_with_a_reason) {
  dlock_client *c = client();
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, NULL));
  ASSERT_STATUS(dlock_sched_add_cron(s, "t:bad", "0 0 12 * * MON", NULL, quick_job, NULL), DLOCK_ECRON);
  ASSERT_CONTAINS(dlock_last_error(), "t:bad");
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.time_zone = "Mars/Olympus";
  ASSERT_STATUS(dlock_sched_add_cron(s, "t:bad", "0 0 12 * * ?", &jo, quick_job, NULL), DLOCK_ETZ);
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "t:bad", 0, NULL, quick_job, NULL), DLOCK_ERANGE);
  /* Issue 22 item 10: a period no claim round trip can keep is refused. */
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "t:bad", 1, NULL, quick_job, NULL), DLOCK_ERANGE);
  ASSERT_CONTAINS(dlock_last_error(), "at least 100 ms");
  ASSERT_STATUS(dlock_sched_add_fixed_delay(s, "t:bad", 99, NULL, quick_job, NULL), DLOCK_ERANGE);
  ASSERT_CONTAINS(dlock_last_error(), "t:bad");
  ASSERT_STATUS(dlock_sched_add_fixed_delay(s, "t:{bad}", 1000, NULL, quick_job, NULL), DLOCK_ENAME);
  jo.time_zone = NULL;
  jo.lock_at_least_for_ms = 5000;
  jo.lock_at_most_for_ms = 1000;
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "t:bad", 1000, &jo, quick_job, NULL), DLOCK_ERANGE);
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "t:bad", 1000, NULL, NULL, NULL), DLOCK_EINVAL);
  ASSERT_STATUS(dlock_sched_start(s), DLOCK_EINVAL); /* no job */
  dlock_sched_free(s);
  int64_t t[3];
  ASSERT_STATUS(dlock_cron_next("0 0 25 * * ?", NULL, 0, 0, t, 3), DLOCK_ECRON);
  ASSERT_CONTAINS(dlock_last_error(), "hours");
  ASSERT_EQ(dlock_cron_next("0 0 12 1 1 ? 2001", NULL, 0, 1700000000, t, 3), 0); /* no more fire times */
  ASSERT_EQ(dlock_cron_next("0 0 12 ? * MON", "Europe/Berlin", 0, 1700000000, t, 3), 3);
  char iso[64];
  ASSERT_OK(dlock_time_format(t[0], "Europe/Berlin", iso, sizeof iso));
  ASSERT_STR_EQ(iso, "2023-11-20T12:00:00+01:00");
  int64_t back;
  ASSERT_OK(dlock_time_parse(iso, NULL, &back));
  ASSERT_EQ(back, t[0]);
  ASSERT_STATUS(dlock_time_parse("yesterday", NULL, &back), DLOCK_ETIME);
  dlock_client_free(c);
}

/* Issue 30 item 7: a claim checks a key's type once at most, and only the
 * keys its path uses; a key of the wrong type is still refused by name, with
 * nothing written, wherever it is among the job's eight keys. */
TEST(a_claim_refuses_each_job_key_of_the_wrong_type_by_name_and_writes_nothing) {
  dlock_client *c = client();
  static const char *const want[8] = {"string", "string", "hash", "zset", "hash", "string", "list", "hash"};
  static const char *const extra[3] = {"}:tick", "}:history", "}:job"}; /* KEYS 6, 7, 8 */
  for (int i = 0; i < 8; i++) {
    char job[32], keys[8][160];
    snprintf(job, sizeof job, "t:wrongtype%d", i);
    dlock__lock_keys k;
    ASSERT_OK(dlock__lock_keys_init(&k, c, job));
    for (int j = 0; j < 5; j++) snprintf(keys[j], sizeof keys[j], "%s", k.key[j]);
    for (int j = 0; j < 3; j++) snprintf(keys[5 + j], sizeof keys[5 + j], "{%s%s", k.key[0], extra[j]);
    dlock__lock_keys_clear(&k);
    char out[256];
    if (!strcmp(want[i], "list"))
      ASSERT_EQ(th_redis_cli(&srv, out, sizeof out, "SET '%s' x", keys[i]), 0);
    else
      ASSERT_EQ(th_redis_cli(&srv, out, sizeof out, "RPUSH '%s' x", keys[i]), 0);
    dlock__claim cl;
    memset(&cl, 0, sizeof cl);
    cl.job = job;
    cl.tick_ms = wall_now_ms() / 1000 * 1000;
    cl.token = "0123456789abcdef0123456789abcdef";
    cl.node = "n1";
    cl.at_most_ms = 10000;
    cl.history_len = 10;
    cl.ahead_ms = DLOCK_SCHED_CLOCK_TOLERANCE_MS;
    ASSERT_STATUS(dlock__redis_sched_claim(c, &cl), DLOCK_EWRONGTYPE);
    ASSERT_CONTAINS(dlock_last_error(), keys[i]);
    char expected[32];
    snprintf(expected, sizeof expected, "expected a %s", want[i]);
    ASSERT_CONTAINS(dlock_last_error(), expected);
    for (int j = 0; j < 8; j++) { /* nothing written: only the wrong key is there */
      ASSERT_EQ(th_redis_cli(&srv, out, sizeof out, "EXISTS '%s'", keys[j]), 0);
      if (strcmp(out, j == i ? "1" : "0") != 0) TEST_FAIL("key %s: EXISTS %s after the refused claim", keys[j], out);
    }
  }
  dlock_client_free(c);
}

TEST_MAIN()
