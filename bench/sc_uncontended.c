/*
 * sc_uncontended.c - one thread, one free lock: acquire(try once) + release
 * with a fixed lease (no watchdog traffic), next to the bare C client doing
 * the same two round trips (SET NX PX + EVALSHA compare-and-delete) and to
 * PING. The three are run in alternating blocks so that drift hits all alike.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include <dlock.h>

#include "bench.h"

#define BLOCK 500    /* cycles per block before switching to the other client */
#define PIPE_RING 64 /* distinct names for the pipelined-release cycle */

typedef struct bare_client {
  redisContext *ctx;
  char sha[41];
  char token[33];
} bare_client;

static int bare_init(bare_client *b) {
  b->ctx = bench_connect();
  if (!b->ctx) return -1;
  redisReply *r = bench_cmd(b->ctx, "SCRIPT LOAD %s", bench_cad_script);
  int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
  if (ok) memcpy(b->sha, r->str, 41);
  freeReplyObject(r);
  bench_token(b->token);
  return ok ? 0 : -1;
}

/* One cycle: returns 0 when the SET took the lock and the delete removed it. */
static int bare_cycle(bare_client *b, const char *key) {
  redisReply *r = bench_cmd(b->ctx, "SET %s %s NX PX 30000", key, b->token);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  freeReplyObject(r);
  if (!ok) return -1;
  r = bench_cmd(b->ctx, "EVALSHA %s 1 %s %s", b->sha, key, b->token);
  ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject(r);
  return ok ? 0 : -1;
}

/* What one client's blocks cost: Redis time and calls (INFO commandstats
 * deltas around each block; a script's usec includes the calls it makes) and
 * this thread's CPU (getrusage). */
typedef struct cost {
  double redis_us;     /* usec of the commands sent on the wire */
  long long wire, all; /* commands sent; all commands Redis ran */
  double client_cpu_us;
} cost;

static double thread_cpu_us(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* 'bare': the bare client sends SET itself; dlock's SETs run inside its
 * scripts, whose usec already include them. */
static void cost_add(cost *c, redisContext *ctx, const bench_cmdstats *before, double cpu_before, int bare) {
  double cpu = thread_cpu_us() - cpu_before;
  bench_cmdstats after;
  if (bench_cmdstats_read(ctx, &after) != 0) return;
  c->client_cpu_us += cpu;
  c->redis_us += bench_cmdstats_usec_delta(before, &after, "evalsha");
  c->wire += bench_cmdstats_delta(before, &after, "evalsha");
  if (bare) {
    c->redis_us += bench_cmdstats_usec_delta(before, &after, "set");
    c->wire += bench_cmdstats_delta(before, &after, "set");
  }
  c->all += bench_cmdstats_delta_all(before, &after);
}

static void report_cost(const char *impl, const cost *c, size_t cycles) {
  if (!cycles) return;
  double n = (double)cycles;
  bench_row("uncontended", impl, "Redis us / cycle (commandstats)", c->redis_us / n, "us",
            "time inside the commands sent, scripts' calls included");
  bench_row("uncontended", impl, "Redis commands / cycle, sent", (double)c->wire / n, "", "");
  bench_row("uncontended", impl, "Redis calls / cycle inside scripts", (double)(c->all - c->wire) / n, "", "");
  bench_row("uncontended", impl, "client CPU us / cycle", c->client_cpu_us / n, "us", "getrusage, this thread");
}

static void report(const char *impl, bench_samples *s, double busy_s, double ping_p50, double *cycles_per_s,
                   double *p50) {
  char note[96];
  snprintf(note, sizeof note, "%zu cycles", s->count);
  *p50 = bench_samples_pct_us(s, 50);
  *cycles_per_s = busy_s > 0 ? (double)s->count / busy_s : 0;
  bench_row("uncontended", impl, "cycle p50", *p50, "us", note);
  bench_row("uncontended", impl, "cycle p99", bench_samples_pct_us(s, 99), "us", "");
  bench_row("uncontended", impl, "cycle p99.9", bench_samples_pct_us(s, 99.9), "us", "");
  bench_row("uncontended", impl, "cycles per second", *cycles_per_s, "/s", "");
  bench_row("uncontended", impl, "cycle p50 / PING p50", ping_p50 > 0 ? *p50 / ping_p50 : 0, "x",
            "floor is 2 (two round trips)");
}

bench_status bench_scenario_uncontended(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 3000 : 60000;
  int64_t max_ns = (quick ? 1 : 20) * 1000000000LL;
  bench_status status = BENCH_OK;

  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 30000; /* fixed lease: no watchdog renewals in the figures */
  if (dlock_client_new(&c, &copts) != 0 || dlock_mutex_new(&m, c, "bench:uncontended", &mopts) != 0) {
    fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
    dlock_client_free(c);
    return BENCH_FAILED;
  }
  bare_client bare = {0};
  redisContext *ping_ctx = bench_connect();
  bench_samples lib = {0}, raw = {0}, ping = {0}, pipe = {0};
  /* Issue 15, item 3: acquire + dlock_mutex_release_async on distinct names
   * (a ring of handles), so that a release's reply is read while the next
   * acquire makes its round trip. */
  dlock_mutex *ring[PIPE_RING] = {0};
  for (int i = 0; i < PIPE_RING; i++) {
    char name[48];
    snprintf(name, sizeof name, "bench:pipelined:%d", i);
    if (dlock_mutex_new(&ring[i], c, name, &mopts) != 0) status = BENCH_FAILED;
  }
  size_t pipe_i = 0;
  if (status != BENCH_OK || bare_init(&bare) != 0 || !ping_ctx || bench_samples_init(&lib, count) ||
      bench_samples_init(&raw, count) || bench_samples_init(&ping, count) || bench_samples_init(&pipe, count)) {
    status = BENCH_FAILED;
    goto done;
  }
  /* Warm up both clients (script caches, connections). */
  for (int i = 0; i < 200 && status == BENCH_OK; i++) {
    if (dlock_mutex_acquire(m, 0) != 0 || dlock_mutex_release(m) != 0 ||
        bare_cycle(&bare, "bench:uncontended:bare") != 0)
      status = BENCH_FAILED;
  }
  bench_progress("%zu cycles each: dlock, bare hiredis, dlock with pipelined releases, PING, in blocks of %d", count,
                 BLOCK);
  double lib_busy = 0, raw_busy = 0, pipe_busy = 0;
  cost lib_cost = {0}, raw_cost = {0};
  bench_cmdstats st0;
  int64_t start = bench_now_ns();
  for (int round = 0; status == BENCH_OK && lib.count < count && bench_now_ns() - start < max_ns && round < 100000;
       round++) {
    if (bench_cmdstats_read(ping_ctx, &st0) != 0) {
      status = BENCH_FAILED;
      break;
    }
    double cpu0 = thread_cpu_us();
    int64_t b0 = bench_now_ns();
    for (int i = 0; i < BLOCK && status == BENCH_OK; i++) {
      int64_t t0 = bench_now_ns();
      int rc = dlock_mutex_acquire(m, 0);
      if (rc == 0) rc = dlock_mutex_release(m);
      int64_t t1 = bench_now_ns();
      if (rc != 0) {
        fprintf(stderr, "dlock-bench: uncontended cycle: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(m));
        status = BENCH_FAILED;
      }
      bench_samples_add(&lib, t1 - t0);
    }
    int64_t b1 = bench_now_ns();
    cost_add(&lib_cost, ping_ctx, &st0, cpu0, 0);
    if (bench_cmdstats_read(ping_ctx, &st0) != 0) {
      status = BENCH_FAILED;
      break;
    }
    cpu0 = thread_cpu_us();
    b1 = bench_now_ns();
    for (int i = 0; i < BLOCK && status == BENCH_OK; i++) {
      int64_t t0 = bench_now_ns();
      if (bare_cycle(&bare, "bench:uncontended:bare") != 0) {
        fprintf(stderr, "dlock-bench: bare client cycle failed\n");
        status = BENCH_FAILED;
      }
      bench_samples_add(&raw, bench_now_ns() - t0);
    }
    int64_t b2 = bench_now_ns();
    cost_add(&raw_cost, ping_ctx, &st0, cpu0, 1);
    lib_busy += (double)(b1 - b0) / 1e9;
    raw_busy += (double)(b2 - b1) / 1e9;
    for (int i = 0; i < BLOCK && status == BENCH_OK; i++, pipe_i++) {
      dlock_mutex *pm = ring[pipe_i % PIPE_RING];
      int64_t t0 = bench_now_ns();
      int rc = dlock_mutex_acquire(pm, 0);
      if (rc == 0) rc = dlock_mutex_release_async(pm);
      int64_t t1 = bench_now_ns();
      if (rc != 0) {
        fprintf(stderr, "dlock-bench: pipelined cycle: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(pm));
        status = BENCH_FAILED;
      }
      bench_samples_add(&pipe, t1 - t0);
      pipe_busy += (double)(t1 - t0) / 1e9;
    }
    if (bench_ping_samples(ping_ctx, &ping, BLOCK, max_ns) != 0) status = BENCH_FAILED;
  }
  /* The last release of each ring handle: its outcome must be "released". */
  for (int i = 0; i < PIPE_RING && status == BENCH_OK && pipe_i > 0; i++) {
    int rc = dlock_mutex_release_result(ring[i]);
    if (rc != 0 && rc != DLOCK_EINVAL) { /* EINVAL: read by its next acquire already */
      fprintf(stderr, "dlock-bench: pipelined release: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(ring[i]));
      status = BENCH_FAILED;
    }
  }
  if (status != BENCH_OK || lib.count == 0) goto done;

  double ping_p50 = bench_samples_pct_us(&ping, 50);
  bench_row("uncontended", "hiredis", "PING p50 (same run)", ping_p50, "us", "");
  double lib_rate, lib_p50, raw_rate, raw_p50;
  report("dlock", &lib, lib_busy, ping_p50, &lib_rate, &lib_p50);
  report("hiredis-bare", &raw, raw_busy, ping_p50, &raw_rate, &raw_p50);

  double pipe_rate = 0, pipe_p50 = 0;
  if (pipe.count > 0) report("dlock-pipelined", &pipe, pipe_busy, ping_p50, &pipe_rate, &pipe_p50);
  report_cost("dlock", &lib_cost, lib.count);
  report_cost("hiredis-bare", &raw_cost, raw.count);
  bench_row("uncontended", "ratio", "dlock / bare floor, cycles/s", raw_rate > 0 ? lib_rate / raw_rate : 0, "x",
            "the floor: SET NX PX + compare-and-delete, no library");

  /* Issue 15: at least 0.85x the two-round-trip floor of the bare client. */
  char detail[160];
  snprintf(detail, sizeof detail, "dlock %.0f/s vs bare %.0f/s = %.2fx (need >= 0.85x)", lib_rate, raw_rate,
           raw_rate > 0 ? lib_rate / raw_rate : 0);
  bench_target("uncontended", "cycles/s >= 0.85x bare floor", lib_rate >= 0.85 * raw_rate, detail);
  if (pipe.count > 0) {
    bench_row("uncontended", "ratio", "dlock pipelined release / bare floor, cycles/s",
              raw_rate > 0 ? pipe_rate / raw_rate : 0, "x",
              "acquire + dlock_mutex_release_async on distinct names, against the two-round-trip floor");
    snprintf(detail, sizeof detail, "pipelined %.0f/s vs bare %.0f/s = %.2fx (need >= 1.3x)", pipe_rate, raw_rate,
             raw_rate > 0 ? pipe_rate / raw_rate : 0);
    bench_target("uncontended", "pipelined release cycles/s >= 1.3x floor", pipe_rate >= 1.3 * raw_rate, detail);
  }
  snprintf(detail, sizeof detail, "%.1f us / %.1f us = %.2fx (need <= 2.3x)", lib_p50, ping_p50,
           ping_p50 > 0 ? lib_p50 / ping_p50 : 0);
  bench_target("uncontended", "cycle p50 <= 2.3 x PING p50", lib_p50 <= 2.3 * ping_p50, detail);

done:
  bench_samples_free(&lib);
  bench_samples_free(&raw);
  bench_samples_free(&ping);
  bench_samples_free(&pipe);
  for (int i = 0; i < PIPE_RING; i++) dlock_mutex_free(ring[i]);
  redisFree(bare.ctx);
  redisFree(ping_ctx);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return status;
}
