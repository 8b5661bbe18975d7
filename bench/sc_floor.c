/*
 * sc_floor.c - the floor: PING round trips on one hiredis connection. No
 * lock client can beat one round trip per command, so the lock figures are
 * read against this one (an acquire+release cycle is two round trips).
 */
#include <stdio.h>

#include "bench.h"

int bench_ping_samples(redisContext *ctx, bench_samples *s, size_t count, int64_t max_ns) {
  int64_t start = bench_now_ns();
  for (size_t i = 0; i < count && bench_now_ns() - start < max_ns; i++) {
    int64_t t0 = bench_now_ns();
    redisReply *r = bench_cmd(ctx, "PING");
    int64_t t1 = bench_now_ns();
    if (!r) return -1;
    freeReplyObject(r);
    bench_samples_add(s, t1 - t0);
  }
  return 0;
}

bench_status bench_scenario_floor(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 3000 : 100000;
  int64_t max_ns = (quick ? 1 : 5) * 1000000000LL;
  redisContext *ctx = bench_connect();
  if (!ctx) return BENCH_FAILED;
  bench_samples s;
  if (bench_samples_init(&s, count) != 0) {
    redisFree(ctx);
    return BENCH_FAILED;
  }
  /* Warm up: connection buffers, CPU frequency, caches. */
  bench_samples warm;
  bench_samples_init(&warm, 200);
  bench_ping_samples(ctx, &warm, 200, max_ns);
  bench_samples_free(&warm);
  bench_progress("%zu PINGs", count);
  int64_t t0 = bench_now_ns();
  int rc = bench_ping_samples(ctx, &s, count, max_ns);
  double secs = (double)(bench_now_ns() - t0) / 1e9;
  if (rc == 0 && s.count > 0) {
    char note[64];
    snprintf(note, sizeof note, "%zu round trips", s.count);
    bench_row("floor", "hiredis", "PING p50", bench_samples_pct_us(&s, 50), "us", note);
    bench_row("floor", "hiredis", "PING p99", bench_samples_pct_us(&s, 99), "us", "");
    bench_row("floor", "hiredis", "PING p99.9", bench_samples_pct_us(&s, 99.9), "us", "");
    bench_row("floor", "hiredis", "PINGs per second", (double)s.count / secs, "/s", "");
  }
  bench_samples_free(&s);
  redisFree(ctx);
  return rc == 0 ? BENCH_OK : BENCH_FAILED;
}
