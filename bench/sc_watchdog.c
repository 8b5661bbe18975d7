/*
 * sc_watchdog.c - N locks held by one process in watchdog mode for a while:
 * the renewal commands per second (INFO commandstats), the CPU time this
 * process spends on them (getrusage over the hold) and how many were lost.
 * Losing one is a failure: renewal exists so that it never happens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <dlock.h>

#include "bench.h"

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec / 1e6;
}

static int count_lost(dlock_mutex **locks, int n) {
  int lost = 0;
  for (int i = 0; i < n; i++)
    if (dlock_mutex_lost(locks[i]) != DLOCK_LOST_NONE) lost++;
  return lost;
}

bench_status bench_scenario_watchdog(void) {
  int n = bench_options.watchdog_locks;
  int64_t lease = bench_options.watchdog_lease_ms;
  int64_t hold_ms = bench_options.watchdog_hold_ms;
  bench_status status = BENCH_OK;

  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 0; /* watchdog mode */
  mopts.watchdog_lease_ms = lease;
  dlock_client *c = NULL;
  dlock_mutex **locks = calloc((size_t)n, sizeof *locks);
  redisContext *ctx = bench_connect();
  if (!locks || !ctx || dlock_client_new(&c, &copts) != 0) {
    fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
    free(locks);
    redisFree(ctx);
    return BENCH_FAILED;
  }
  bench_progress("acquiring %d locks (watchdog lease %lld ms)", n, (long long)lease);
  int held = 0;
  int64_t t_acq = bench_now_ns();
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "bench:watchdog:%d", i);
    int rc = dlock_mutex_new(&locks[i], c, name, &mopts);
    if (rc == 0) rc = dlock_mutex_acquire(locks[i], 0);
    if (rc != 0) {
      fprintf(stderr, "dlock-bench: acquire %s: %s: %s\n", name, dlock_err_name(rc),
              locks[i] ? dlock_mutex_errmsg(locks[i]) : dlock_last_error());
      status = BENCH_FAILED;
      break;
    }
    held++;
  }
  double acq_secs = (double)(bench_now_ns() - t_acq) / 1e9;

  if (status == BENCH_OK) {
    bench_cmdstats before, after;
    bench_cmdstats_read(ctx, &before);
    double cpu0 = cpu_seconds();
    int64_t t0 = bench_now_ns();
    int64_t end = t0 + hold_ms * 1000000;
    int64_t next_report = t0 + 10000000000LL;
    /* Sleep in short steps: the hold is bounded by time, and Ctrl-C stays quick. */
    for (long step = 0; step < 10000000 && bench_now_ns() < end; step++) {
      int64_t left_ms = (end - bench_now_ns()) / 1000000;
      bench_sleep_ms(left_ms < 200 ? left_ms + 1 : 200);
      if (bench_now_ns() >= next_report) {
        bench_progress("holding %d locks: %.0f s of %.0f s, %d lost so far", held, (double)(bench_now_ns() - t0) / 1e9,
                       (double)hold_ms / 1e3, count_lost(locks, held));
        next_report += 10000000000LL;
      }
    }
    double wall = (double)(bench_now_ns() - t0) / 1e9;
    double cpu = cpu_seconds() - cpu0;
    bench_cmdstats_read(ctx, &after);
    int lost = count_lost(locks, held);
    long long renewals =
        bench_cmdstats_delta(&before, &after, "evalsha") + bench_cmdstats_delta(&before, &after, "eval");
    char note[160];
    snprintf(note, sizeof note, "%d locks, lease %lld ms, held %.0f s (acquired in %.1f s)", held, (long long)lease,
             wall, acq_secs);
    bench_row("watchdog", "dlock", "locks held", held, "", note);
    snprintf(note, sizeof note, "%lld renewals; expected about %.0f/s (N / (lease/3))", renewals,
             (double)held / ((double)lease / 3000.0));
    bench_row("watchdog", "dlock", "renewal commands per second", (double)renewals / wall, "/s", note);
    bench_row("watchdog", "dlock", "client CPU (user+sys)", 100 * cpu / wall, "% of a core",
              "getrusage(RUSAGE_SELF) over the hold");
    bench_row("watchdog", "dlock", "redis-server CPU", 100 * (after.server_cpu_s - before.server_cpu_s) / wall,
              "% of a core", "INFO cpu over the hold");
    bench_row("watchdog", "dlock", "locks lost", lost, "", lost ? "MUST be 0" : "");
    if (lost != 0) status = BENCH_FAILED;
    if (held >= 10000) {
      char detail[160];
      snprintf(detail, sizeof detail, "%d locks: %.2f%% of one core, %d lost", held, 100 * cpu / wall, lost);
      bench_target("watchdog", "10,000 locks renewed with < 5% of a core, none lost", 100 * cpu / wall < 5 && lost == 0,
                   detail);
    }
  }
  bench_progress("releasing %d locks", held);
  for (int i = 0; i < n; i++) {
    if (locks[i] && i < held && dlock_mutex_lost(locks[i]) == DLOCK_LOST_NONE) {
      int rc = dlock_mutex_release(locks[i]);
      if (rc != 0) {
        fprintf(stderr, "dlock-bench: release bench:watchdog:%d: %s: %s\n", i, dlock_err_name(rc),
                dlock_mutex_errmsg(locks[i]));
        status = BENCH_FAILED;
      }
    }
    dlock_mutex_free(locks[i]);
  }
  free(locks);
  redisFree(ctx);
  dlock_client_free(c);
  return status;
}
