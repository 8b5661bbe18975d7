/*
 * stats.c - clocks, latency samples and percentiles for dlock-bench.
 *
 * Samples are kept whole (no histogram buckets) and sorted once at report
 * time: runs are bounded in count, so memory is bounded too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

const char bench_cad_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void bench_sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  /* A signal cuts the sleep short; retry a bounded number of times. */
  for (int tries = 0; tries < 100 && nanosleep(&ts, &ts) != 0 && errno == EINTR; tries++) {
  }
}

int bench_samples_init(bench_samples *s, size_t cap) {
  s->ns = calloc(cap ? cap : 1, sizeof *s->ns);
  s->count = 0;
  s->cap = s->ns ? cap : 0;
  return s->ns ? 0 : -1;
}

void bench_samples_free(bench_samples *s) {
  free(s->ns);
  s->ns = NULL;
  s->count = s->cap = 0;
}

void bench_samples_add(bench_samples *s, int64_t ns) {
  if (s->count < s->cap) s->ns[s->count++] = ns;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

double bench_samples_pct_us(bench_samples *s, double p) {
  if (s->count == 0) return 0.0;
  qsort(s->ns, s->count, sizeof *s->ns, cmp_i64);
  /* Nearest rank: the smallest sample with at least p% of samples <= it. */
  size_t rank = (size_t)((p / 100.0) * (double)s->count + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > s->count) rank = s->count;
  return (double)s->ns[rank - 1] / 1000.0;
}

double bench_samples_max_us(bench_samples *s) {
  int64_t max = 0;
  for (size_t i = 0; i < s->count; i++)
    if (s->ns[i] > max) max = s->ns[i];
  return (double)max / 1000.0;
}

void bench_token(char out[33]) {
  /* Not security-relevant: tokens only have to differ between bench clients. */
  static const char hex[] = "0123456789abcdef";
  unsigned seed = (unsigned)bench_now_ns() ^ (unsigned)(uintptr_t)out ^ ((unsigned)getpid() * 2654435761u);
  static unsigned calls;
  seed ^= ++calls * 0x9e3779b9u;
  for (int i = 0; i < 32; i++) {
    seed = seed * 1103515245u + 12345u;
    out[i] = hex[(seed >> 16) & 15];
  }
  out[32] = '\0';
}
