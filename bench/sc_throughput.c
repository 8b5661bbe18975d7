/*
 * sc_throughput.c - acquire+release cycles per second with 1, 8 and 64
 * threads on distinct names through ONE dlock_client, next to redis-benchmark
 * running dlock's own acquire and release scripts at the same concurrency.
 * redis-benchmark sends one command per request, so a cycle is timed as one
 * acquire run plus one release run (see docs/PERFORMANCE.md for what differs).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlock.h>

#include "bench.h"

typedef struct tp_shared {
  dlock_client *client;
  atomic_int go; /* set once every thread has its handle */
  int64_t run_ns;
  int threads;
  atomic_long cycles;
  atomic_int errors;
} tp_shared;

typedef struct tp_worker {
  tp_shared *shared;
  int index;
} tp_worker;

static void *tp_thread(void *arg) {
  tp_worker *w = arg;
  tp_shared *sh = w->shared;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 30000;
  char name[64];
  snprintf(name, sizeof name, "bench:tp:%d:%d", sh->threads, w->index);
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(&m, sh->client, name, &mopts);
  for (int i = 0; i < 100000 && !atomic_load(&sh->go); i++) bench_sleep_ms(0);
  if (rc != 0) {
    atomic_fetch_add(&sh->errors, 1);
    return NULL;
  }
  long done = 0;
  int64_t start = bench_now_ns();
  /* Check the clock every 16 cycles; the count bound backs up the time one. */
  for (long i = 0; i < 100000000L; i++) {
    if ((i & 15) == 0 && bench_now_ns() - start >= sh->run_ns) break;
    rc = dlock_mutex_acquire(m, 0);
    if (rc == 0) rc = dlock_mutex_release(m);
    if (rc != 0) {
      if (atomic_fetch_add(&sh->errors, 1) == 0)
        fprintf(stderr, "dlock-bench: throughput cycle: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(m));
      break;
    }
    done++;
  }
  atomic_fetch_add(&sh->cycles, done);
  dlock_mutex_free(m);
  return NULL;
}

/* Cycles per second with 'threads' threads, or -1 on error. */
static double run_dlock(dlock_client *c, int threads, int64_t run_ns) {
  tp_shared sh;
  memset(&sh, 0, sizeof sh);
  sh.client = c;
  sh.run_ns = run_ns;
  sh.threads = threads;
  atomic_init(&sh.cycles, 0);
  atomic_init(&sh.errors, 0);
  atomic_init(&sh.go, 0);
  pthread_t tids[64];
  tp_worker workers[64];
  int started = 0;
  for (int i = 0; i < threads && i < 64; i++) {
    workers[i].shared = &sh;
    workers[i].index = i;
    if (pthread_create(&tids[i], NULL, tp_thread, &workers[i]) != 0) break;
    started++;
  }
  if (started < threads) {
    fprintf(stderr, "dlock-bench: could not start %d threads\n", threads);
    atomic_fetch_add(&sh.errors, 1);
  }
  atomic_store(&sh.go, 1);
  int64_t t0 = bench_now_ns();
  for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
  double secs = (double)(bench_now_ns() - t0) / 1e9;
  if (atomic_load(&sh.errors) != 0) return -1;
  return (double)atomic_load(&sh.cycles) / secs;
}

/* Requests per second from `redis-benchmark -q` output, or -1. */
static double run_redis_benchmark(int clients, long requests, const char *sha, const char *token) {
  char cmd[1024];
  /* The five keys of one lock share a hash tag in dlock; redis-benchmark draws
   * each __rand_int__ separately, which changes nothing on a single node. A
   * key space of 10^7 makes nearly every acquire find a free key (the full
   * "take" path) and nearly every release find no key of ours (the short
   * path), so the release figure flatters redis-benchmark. */
  snprintf(cmd, sizeof cmd,
           "timeout 300 redis-benchmark -h %s -p %d -c %d -n %ld -r 10000000 -q "
           "EVALSHA %s 5 bench:rb:__rand_int__ '{bench:rb:__rand_int__}:fence' "
           "'{bench:rb:__rand_int__}:meta' '{bench:rb:__rand_int__}:queue' "
           "'{bench:rb:__rand_int__}:waiters' %s 30000 '' 5000 3000 '' 2>&1",
           bench_redis.host, bench_redis.port, clients, requests, sha, token);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  /* Progress lines (rewritten with \r) come first and can be long; keep the
   * tail, where the final figure is. */
  char out[8192], chunk[4096];
  size_t len = 0, got;
  for (int reads = 0; reads < 1000000 && (got = fread(chunk, 1, sizeof chunk, p)) > 0; reads++) {
    if (len + got > sizeof out - 1) {
      size_t drop = len + got - (sizeof out - 1);
      if (drop > len) drop = len;
      memmove(out, out + drop, len - drop);
      len -= drop;
    }
    memcpy(out + len, chunk, got);
    len += got;
  }
  out[len] = '\0';
  int rc = pclose(p);
  const char *hit = NULL;
  /* -q prints progress with \r; the figure is on the last line. */
  for (const char *s = out; (s = strstr(s, "requests per second")) != NULL; s++) hit = s;
  if (rc != 0 || !hit) {
    fprintf(stderr, "dlock-bench: redis-benchmark failed (exit %d): ...%s\n", rc, len > 300 ? out + len - 300 : out);
    return -1;
  }
  const char *num = hit;
  for (int i = 0; i < 40 && num > out && num[-1] != ':' && num[-1] != '\r' && num[-1] != '\n'; i++) num--;
  return atof(num);
}

static char *script_load(redisContext *ctx, const char *body, char sha[41]) {
  redisReply *r = bench_cmd(ctx, "SCRIPT LOAD %s", body);
  int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
  if (ok) memcpy(sha, r->str, 41);
  freeReplyObject(r);
  return ok ? sha : NULL;
}

/* Remove what the redis-benchmark runs left behind (fence keys live 30 days). */
static void delete_rb_keys(redisContext *ctx) {
  char cursor[32] = "0";
  for (int round = 0; round < 100000; round++) {
    redisReply *r = bench_cmd(ctx, "SCAN %s MATCH *bench:rb:* COUNT 1000", cursor);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      freeReplyObject(r);
      return;
    }
    snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
    redisReply *keys = r->element[1];
    if (keys->elements > 0) {
      const char **argv = malloc((keys->elements + 1) * sizeof *argv);
      if (argv) {
        argv[0] = "UNLINK";
        for (size_t i = 0; i < keys->elements; i++) argv[i + 1] = keys->element[i]->str;
        freeReplyObject(redisCommandArgv(ctx, (int)keys->elements + 1, argv, NULL));
        free(argv);
      }
    }
    freeReplyObject(r);
    if (strcmp(cursor, "0") == 0) return;
  }
}

bench_status bench_scenario_throughput(void) {
  int quick = bench_options.quick;
  int64_t run_ns = quick ? 250000000LL : 5000000000LL;
  static const int thread_counts[] = {1, 8, 64};
  bench_status status = BENCH_OK;

  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &copts) != 0) {
    fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
    return BENCH_FAILED;
  }
  redisContext *ctx = bench_connect();
  char acq_sha[41], rel_sha[41], token[33];
  bench_token(token);
  if (!ctx || !script_load(ctx, dlock__lua_acquire, acq_sha) || !script_load(ctx, dlock__lua_release, rel_sha)) {
    dlock_client_free(c);
    redisFree(ctx);
    return BENCH_FAILED;
  }
  double dlock64 = 0, rb64 = 0;
  for (size_t k = 0; k < sizeof thread_counts / sizeof thread_counts[0]; k++) {
    int n = thread_counts[k];
    bench_progress("%d thread(s), %.2f s", n, (double)run_ns / 1e9);
    double rate = run_dlock(c, n, run_ns);
    if (rate < 0) {
      status = BENCH_FAILED;
      break;
    }
    char metric[64], note[128];
    snprintf(metric, sizeof metric, "cycles/s, %d thread%s", n, n > 1 ? "s" : "");
    bench_row("throughput", "dlock", metric, rate, "/s", "one client, distinct names");

    /* Enough requests for a few seconds per run at the rates seen here. */
    long rb_requests = quick ? 3000 : n == 1 ? 50000 : 150000;
    bench_progress("redis-benchmark -c %d, %ld acquire + %ld release scripts", n, rb_requests, rb_requests);
    double acq = run_redis_benchmark(n, rb_requests, acq_sha, token);
    double rel = run_redis_benchmark(n, rb_requests, rel_sha, token);
    delete_rb_keys(ctx);
    if (acq <= 0 || rel <= 0) {
      bench_row("throughput", "redis-benchmark", metric, 0, "/s", "redis-benchmark did not run");
      continue;
    }
    /* One cycle = one acquire + one release: the times add up. */
    double cycles = 1.0 / (1.0 / acq + 1.0 / rel);
    snprintf(note, sizeof note, "-c %d: acquire.lua %.0f/s, release.lua %.0f/s", n, acq, rel);
    snprintf(metric, sizeof metric, "cycles/s, -c %d", n);
    bench_row("throughput", "redis-benchmark", metric, cycles, "/s", note);
    snprintf(metric, sizeof metric, "dlock / redis-benchmark, %d", n);
    bench_row("throughput", "dlock", metric, 100 * rate / cycles, "%", "");
    if (n == 64) {
      dlock64 = rate;
      rb64 = cycles;
    }
  }
  if (status == BENCH_OK && rb64 > 0) {
    char detail[160];
    snprintf(detail, sizeof detail, "dlock %.0f/s vs redis-benchmark %.0f/s = %.0f%% (need >= 70%%)", dlock64, rb64,
             100 * dlock64 / rb64);
    bench_target("throughput", "64 threads >= 70% of redis-benchmark", dlock64 >= 0.7 * rb64, detail);
  }
  redisFree(ctx);
  dlock_client_free(c);
  return status;
}
