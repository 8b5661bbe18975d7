/*
 * sc_contended.c - K processes (fork) on one lock name, each looping
 * acquire(wait forever) -> read-modify-write of a counter in shared memory ->
 * release. Measures the hand-off (release call start -> next acquire return,
 * CLOCK_MONOTONIC stamps in the shared page), fairness, the longest wait and
 * the Redis commands each hand-off costs (INFO commandstats deltas). The same
 * loop runs with a bare hiredis client polling every 1 ms for comparison.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#include "bench.h"

#define MAX_PROCS 100
#define MAX_SAMPLES 100000

typedef enum contender_kind {
  CONTENDER_DLOCK = 0,
  CONTENDER_POLL_1MS = 1 /* SET NX PX, sleep 1 ms on failure, compare-and-delete */
} contender_kind;

/* Lives in a MAP_SHARED page that every forked contender sees. */
typedef struct contended_shm {
  atomic_int ready, go, stop, finished, snapshot_taken;
  atomic_int inside; /* > 1 means two holders at once */
  atomic_long overlaps;
  atomic_long acquisitions;
  atomic_long errors;
  atomic_long poll_attempts;
  atomic_long owner_changes;
  atomic_int last_owner; /* -1: nobody yet */
  atomic_llong release_start_ns;
  atomic_llong max_wait_ns;
  atomic_long sample_count;
  volatile long counter; /* the read-modify-write guarded by the lock */
  char poll_sha[41];
  int64_t handoff_ns[MAX_SAMPLES];
} contended_shm;

typedef struct contended_run {
  contender_kind kind;
  int procs;
  long target;    /* acquisitions in total: the count bound */
  int64_t run_ns; /* the time bound */
  char name[64];
} contended_run;

static void note_max(atomic_llong *slot, long long value) {
  long long cur = atomic_load(slot);
  for (int i = 0; i < 1000 && value > cur; i++)
    if (atomic_compare_exchange_weak(slot, &cur, value)) return;
}

/* Everything a holder does between acquire returning and release starting. */
static void critical_section(contended_shm *sh, const contended_run *run, int me, int64_t wait_started,
                             int64_t acquired) {
  note_max(&sh->max_wait_ns, acquired - wait_started);
  long long released = atomic_load(&sh->release_start_ns);
  if (released > 0) {
    long i = atomic_fetch_add(&sh->sample_count, 1);
    if (i < MAX_SAMPLES) sh->handoff_ns[i] = acquired - released;
  }
  int prev = atomic_exchange(&sh->last_owner, me);
  if (prev >= 0 && prev != me) atomic_fetch_add(&sh->owner_changes, 1);
  if (atomic_fetch_add(&sh->inside, 1) != 0) atomic_fetch_add(&sh->overlaps, 1);
  /* Not an atomic increment on purpose: two holders at once lose updates. */
  long v = sh->counter;
  sh->counter = v + 1;
  if (atomic_fetch_add(&sh->acquisitions, 1) + 1 >= run->target) atomic_store(&sh->stop, 1);
  atomic_fetch_sub(&sh->inside, 1);
  atomic_store(&sh->release_start_ns, bench_now_ns());
}

static int wait_flag(atomic_int *flag, int64_t max_ms) {
  for (int64_t i = 0; i < max_ms && !atomic_load(flag); i++) bench_sleep_ms(1);
  return atomic_load(flag);
}

static int dlock_contender(contended_shm *sh, const contended_run *run, int me) {
  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 10000; /* fixed: the counts hold lock traffic only */
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  if (dlock_client_new(&c, &copts) != 0 || dlock_mutex_new(&m, c, run->name, &mopts) != 0) {
    fprintf(stderr, "dlock-bench: contender %d: %s\n", me, dlock_last_error());
    atomic_fetch_add(&sh->errors, 1);
  }
  atomic_fetch_add(&sh->ready, 1);
  int ok = m && wait_flag(&sh->go, 30000);
  int64_t end = bench_now_ns() + run->run_ns;
  for (long i = 0; ok && i < run->target && !atomic_load(&sh->stop) && bench_now_ns() < end; i++) {
    int64_t t0 = bench_now_ns();
    int rc = dlock_mutex_acquire(m, DLOCK_WAIT_FOREVER);
    int64_t t1 = bench_now_ns();
    if (rc != 0) {
      fprintf(stderr, "dlock-bench: contender %d acquire: %s: %s\n", me, dlock_err_name(rc), dlock_mutex_errmsg(m));
      atomic_fetch_add(&sh->errors, 1);
      break;
    }
    critical_section(sh, run, me, t0, t1);
    rc = dlock_mutex_release(m);
    if (rc != 0) {
      fprintf(stderr, "dlock-bench: contender %d release: %s: %s\n", me, dlock_err_name(rc), dlock_mutex_errmsg(m));
      atomic_fetch_add(&sh->errors, 1);
      break;
    }
  }
  atomic_fetch_add(&sh->finished, 1);
  /* Stay connected until the parent has read the counters: disconnecting
   * is not part of a hand-off. */
  wait_flag(&sh->snapshot_taken, 30000);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

static int poll_contender(contended_shm *sh, const contended_run *run, int me) {
  redisContext *ctx = bench_connect();
  char token[33];
  bench_token(token);
  if (!ctx) atomic_fetch_add(&sh->errors, 1);
  atomic_fetch_add(&sh->ready, 1);
  int ok = ctx && wait_flag(&sh->go, 30000);
  int64_t end = bench_now_ns() + run->run_ns;
  for (long i = 0; ok && i < run->target && !atomic_load(&sh->stop) && bench_now_ns() < end; i++) {
    int64_t t0 = bench_now_ns();
    int got = 0;
    while (!got && bench_now_ns() < end) {
      redisReply *r = bench_cmd(ctx, "SET %s %s NX PX 10000", run->name, token);
      if (!r) {
        ok = 0;
        break;
      }
      got = r->type == REDIS_REPLY_STATUS;
      freeReplyObject(r);
      atomic_fetch_add(&sh->poll_attempts, 1);
      if (!got) bench_sleep_ms(1);
    }
    if (!got) break;
    critical_section(sh, run, me, t0, bench_now_ns());
    redisReply *r = bench_cmd(ctx, "EVALSHA %s 1 %s %s", sh->poll_sha, run->name, token);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
      atomic_fetch_add(&sh->errors, 1);
      ok = 0;
    }
    freeReplyObject(r);
  }
  if (!ok && ctx && ctx->err) atomic_fetch_add(&sh->errors, 1);
  atomic_fetch_add(&sh->finished, 1);
  wait_flag(&sh->snapshot_taken, 30000);
  redisFree(ctx);
  return 0;
}

/* Fork the contenders, start them together, wait within the time bound.
 * Returns 0, or -1 when a contender hung or could not start. */
static int run_contenders(contended_shm *sh, const contended_run *run, redisContext *ctx, bench_cmdstats *before,
                          bench_cmdstats *after, double *secs) {
  pid_t pids[MAX_PROCS];
  int started = 0, rc = 0;
  fflush(NULL);
  for (int i = 0; i < run->procs; i++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      int status = run->kind == CONTENDER_DLOCK ? dlock_contender(sh, run, i) : poll_contender(sh, run, i);
      _exit(status);
    }
    pids[started++] = pid;
    bench_track_child(pid);
  }
  if (started < run->procs) {
    fprintf(stderr, "dlock-bench: could only fork %d of %d contenders\n", started, run->procs);
    rc = -1;
  }
  for (int i = 0; i < 30000 && atomic_load(&sh->ready) < started; i++) bench_sleep_ms(1);
  bench_cmdstats_read(ctx, before);
  int64_t t0 = bench_now_ns();
  atomic_store(&sh->go, 1);
  /* Every contender returns within run_ns unless a hand-off hangs; allow a
   * margin for the waiters' own re-check (5 s) before calling it a hang. */
  int64_t limit = t0 + run->run_ns + 15000000000LL;
  for (int i = 0; i < 1000000 && atomic_load(&sh->finished) < started && bench_now_ns() < limit; i++) bench_sleep_ms(1);
  *secs = (double)(bench_now_ns() - t0) / 1e9;
  int finished = atomic_load(&sh->finished);
  bench_cmdstats_read(ctx, after);
  atomic_store(&sh->snapshot_taken, 1);
  if (finished < started) {
    fprintf(stderr, "dlock-bench: %d of %d contenders still waiting after the time bound\n", started - finished,
            started);
    rc = -1;
  }
  for (int i = 0; i < started; i++) {
    int reaped = 0;
    for (int t = 0; t < 10000 && !reaped; t++) {
      if (waitpid(pids[i], NULL, WNOHANG) == pids[i])
        reaped = 1;
      else
        bench_sleep_ms(1);
    }
    if (!reaped) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
    bench_untrack_child(pids[i]);
  }
  return rc;
}

typedef struct contended_result {
  double rate;
  double p99_us;
  double longest_wait_ms;
  double owner_change_share;
  double acquire_calls_per_acq;
  double confirm_per_acq;
  double wire_per_handoff;
  double all_per_handoff;
} contended_result;

static bench_status report(contended_shm *sh, const contended_run *run, const bench_cmdstats *before,
                           const bench_cmdstats *after, double secs, contended_result *res) {
  const char *impl = run->kind == CONTENDER_DLOCK ? "dlock" : "hiredis-poll-1ms";
  long acq = atomic_load(&sh->acquisitions);
  long counter = sh->counter;
  bench_status st = BENCH_OK;
  char metric[64], note[160];
#define ROW(label, value, unit, text)                              \
  do {                                                             \
    snprintf(metric, sizeof metric, "K=%d %s", run->procs, label); \
    bench_row("contended", impl, metric, value, unit, text);       \
  } while (0)

  snprintf(note, sizeof note, "%ld acquisitions in %.2f s (bounds: %ld, %.0f s)", acq, secs, run->target,
           (double)run->run_ns / 1e9);
  res->rate = secs > 0 ? (double)acq / secs : 0;
  ROW("acquisitions/s", res->rate, "/s", note);
  snprintf(note, sizeof note, "%s (must equal acquisitions %ld; overlaps %ld)",
           counter == acq && atomic_load(&sh->overlaps) == 0 ? "exact" : "WRONG", acq,
           (long)atomic_load(&sh->overlaps));
  ROW("counter", (double)counter, "", note);
  if (counter != acq || atomic_load(&sh->overlaps) != 0 || atomic_load(&sh->errors) != 0 || acq == 0) st = BENCH_FAILED;

  bench_samples s = {0};
  long n = atomic_load(&sh->sample_count);
  s.ns = sh->handoff_ns;
  s.count = s.cap = (size_t)(n < MAX_SAMPLES ? n : MAX_SAMPLES);
  res->p99_us = bench_samples_pct_us(&s, 99);
  ROW("hand-off p50", bench_samples_pct_us(&s, 50), "us", "release call start -> next acquire return");
  ROW("hand-off p99", res->p99_us, "us", "");
  ROW("hand-off max", bench_samples_max_us(&s), "us", "");
  res->longest_wait_ms = (double)atomic_load(&sh->max_wait_ns) / 1e6;
  ROW("longest wait", res->longest_wait_ms, "ms", "any single acquire call");
  res->owner_change_share = acq > 1 ? 100.0 * (double)atomic_load(&sh->owner_changes) / (double)(acq - 1) : 0;
  ROW("owner changes / releases", res->owner_change_share, "%", "");

  long long all = bench_cmdstats_delta_all(before, after);
  res->all_per_handoff = acq > 0 ? (double)all / (double)acq : 0;
  if (run->kind == CONTENDER_DLOCK) {
    long long scripts = bench_cmdstats_delta(before, after, "evalsha") + bench_cmdstats_delta(before, after, "eval");
    /* Per acquisition: one release call; and a waiter handed the lock
     * returns on the grant message, or (message too late, or naming an
     * older call) confirms with one more acquire call, which finds its own
     * token and reads the fence with HGET. The only other HGETs: one of
     * the waiter's record per grant (one PUBLISH each), and a release or
     * renewal of a hold already lost (none here). */
    long long confirmations =
        bench_cmdstats_delta(before, after, "hget") - bench_cmdstats_delta(before, after, "publish");
    long long acquire_calls = scripts - acq - confirmations;
    res->acquire_calls_per_acq = acq > 0 ? (double)acquire_calls / (double)acq : 0;
    snprintf(note, sizeof note, "EVALSHA %lld - %ld releases - %lld hand-off confirmations", scripts, acq,
             confirmations);
    ROW("acquire attempts / acquisition", res->acquire_calls_per_acq, "", note);
    res->confirm_per_acq = acq > 0 ? (double)confirmations / (double)acq : 0;
    ROW("hand-off confirmations / acquisition", res->confirm_per_acq, "",
        "confirming acquire calls by waiters the lock was handed to (0 when the grant message completes it)");
    long long wire = bench_cmdstats_delta_wire(before, after);
    res->wire_per_handoff = acq > 0 ? (double)wire / (double)acq : 0;
    ROW("client commands / hand-off", res->wire_per_handoff, "", "sent on the wire (EVALSHA, ...)");
    ROW("Redis commands / hand-off", res->all_per_handoff, "", "incl. those run inside scripts");
  } else {
    long polls = atomic_load(&sh->poll_attempts);
    res->acquire_calls_per_acq = acq > 0 ? (double)polls / (double)acq : 0;
    ROW("SET NX attempts / acquisition", res->acquire_calls_per_acq, "", "");
    ROW("Redis commands / hand-off", res->all_per_handoff, "", "incl. those run inside scripts");
  }
  snprintf(note, sizeof note, "redis-server CPU %.0f%% of one core",
           secs > 0 ? 100 * (after->server_cpu_s - before->server_cpu_s) / secs : 0);
  ROW("server CPU", secs > 0 ? 100 * (after->server_cpu_s - before->server_cpu_s) / secs : 0, "%", note);
#undef ROW
  return st;
}

static bench_status run_one(contended_shm *sh, redisContext *ctx, contender_kind kind, int procs,
                            contended_result *res) {
  int quick = bench_options.quick;
  contended_run run = {.kind = kind, .procs = procs};
  run.target = quick ? 150 : (procs >= 32 ? 3000 : 5000);
  run.run_ns = (quick ? 3 : 20) * 1000000000LL;
  snprintf(run.name, sizeof run.name, "bench:contended:%s:%d", kind == CONTENDER_DLOCK ? "dlock" : "poll", procs);
  char sha[41];
  memcpy(sha, sh->poll_sha, sizeof sha);
  memset(sh, 0, sizeof *sh);
  memcpy(sh->poll_sha, sha, sizeof sha);
  atomic_store(&sh->last_owner, -1);
  bench_progress("%s: %d processes, up to %ld acquisitions or %.0f s",
                 kind == CONTENDER_DLOCK ? "dlock" : "hiredis polling every 1 ms", procs, run.target,
                 (double)run.run_ns / 1e9);
  bench_cmdstats before, after;
  double secs = 0;
  int rc = run_contenders(sh, &run, ctx, &before, &after, &secs);
  bench_status st = report(sh, &run, &before, &after, secs, res);
  return rc != 0 ? BENCH_FAILED : st;
}

bench_status bench_scenario_contended(void) {
  static const int full_counts[] = {2, 8, 32, 100};
  static const int quick_counts[] = {2, 8};
  int quick = bench_options.quick;
  const int *counts = quick ? quick_counts : full_counts;
  size_t ncounts = quick ? 2 : 4;

  contended_shm *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("dlock-bench: mmap");
    return BENCH_FAILED;
  }
  redisContext *ctx = bench_connect();
  redisReply *r = ctx ? bench_cmd(ctx, "SCRIPT LOAD %s", bench_cad_script) : NULL;
  if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
    freeReplyObject(r);
    redisFree(ctx);
    munmap(sh, sizeof *sh);
    return BENCH_FAILED;
  }
  memcpy(sh->poll_sha, r->str, 41);
  freeReplyObject(r);

  bench_status status = BENCH_OK;
  contended_result at2 = {0}, at8 = {0}, poll8 = {0}, at100 = {0};
  for (size_t i = 0; i < ncounts; i++) {
    int k = counts[i];
    contended_result res = {0};
    if (run_one(sh, ctx, CONTENDER_DLOCK, k, &res) != BENCH_OK) status = BENCH_FAILED;
    if (k == 2) at2 = res;
    if (k == 8) at8 = res;
    if (k == 100) at100 = res;
    if (k <= 8) {
      contended_result pres = {0};
      if (run_one(sh, ctx, CONTENDER_POLL_1MS, k, &pres) != BENCH_OK) status = BENCH_FAILED;
      if (k == 8) poll8 = pres;
    }
  }
  if (at8.rate > 0) {
    char d[160];
    snprintf(d, sizeof d, "p99 %.0f us (need <= 2000 us)", at8.p99_us);
    bench_target("contended", "K=8 hand-off p99 <= 2 ms", at8.p99_us <= 2000, d);
    snprintf(d, sizeof d, "%.1f ms (need <= 100 ms)", at8.longest_wait_ms);
    bench_target("contended", "K=8 longest wait <= 100 ms", at8.longest_wait_ms <= 100, d);
    snprintf(d, sizeof d, "%.1f%% (need >= 90%%)", at8.owner_change_share);
    bench_target("contended", "K=8 owner changes >= 90% of releases", at8.owner_change_share >= 90, d);
    snprintf(d, sizeof d, "%.2f acquire attempts per acquisition (need <= 1.5)", at8.acquire_calls_per_acq);
    bench_target("contended", "K=8 acquire attempts <= 1.5", at8.acquire_calls_per_acq <= 1.5, d);
    /* Issue 15: the grant message completes the waiter's acquire. A few
     * confirmations remain when a waiter wakes late (its claim nearly used). */
    snprintf(d, sizeof d, "%.4f confirming calls per acquisition (need <= 0.05)", at8.confirm_per_acq);
    bench_target("contended", "K=8 hand-off without a confirming call", at8.confirm_per_acq <= 0.05, d);
    snprintf(d, sizeof d, "dlock %.0f/s vs polling client %.0f/s", at8.rate, poll8.rate);
    bench_target("contended", "K=8 throughput >= 1 ms polling client", at8.rate >= poll8.rate, d);
  }
  if (at2.rate > 0 && at100.rate > 0) {
    char d[160];
    snprintf(d, sizeof d, "client commands %.2f vs %.2f (%.2fx); incl. in scripts %.1f vs %.1f (%.2fx)",
             at100.wire_per_handoff, at2.wire_per_handoff,
             at2.wire_per_handoff > 0 ? at100.wire_per_handoff / at2.wire_per_handoff : 0, at100.all_per_handoff,
             at2.all_per_handoff, at2.all_per_handoff > 0 ? at100.all_per_handoff / at2.all_per_handoff : 0);
    bench_target(
        "contended", "K=100 commands/hand-off <= 1.5x K=2",
        at100.wire_per_handoff <= 1.5 * at2.wire_per_handoff && at100.all_per_handoff <= 1.5 * at2.all_per_handoff, d);
  }
  redisFree(ctx);
  munmap(sh, sizeof *sh);
  return status;
}
