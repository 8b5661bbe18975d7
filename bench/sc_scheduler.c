/*
 * sc_scheduler.c - cron next-fire computations per second for a mix of
 * expressions (src/sched/cron.h, the engine the scheduler uses; internal to the
 * library, reached here through dlock_static). Each run chains next() calls
 * so that every call starts from a fire time and has to find the next one.
 */
#include <stdio.h>

#include <dlock.h>

#include "bench.h"
#include "cron.h"

typedef struct cron_case {
  const char *expr;
  unsigned flags;
  const char *zone; /* NULL: UTC */
  const char *what;
} cron_case;

static const cron_case cases[] = {
    {"0 * * * * ?", 0, NULL, "every minute"},
    {"*/5 * * * *", DLOCK__CRON_UNIX5, NULL, "Unix 5-field, every 5 minutes"},
    {"0 0/15 9-17 ? * MON-FRI", 0, NULL, "office hours, quarter-hourly"},
    {"0 0 12 L * ?", 0, NULL, "last day of the month"},
    {"0 15 10 ? * 6#3", 0, NULL, "third Friday"},
    {"0 0 8 LW * ?", 0, NULL, "last weekday of the month"},
    {"0 0 0 29 2 ? *", 0, NULL, "leap days only"},
    {"0 30 2 * * ?", 0, "Europe/Berlin", "daily at 02:30 in a DST zone"},
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))

bench_status bench_scenario_scheduler(void) {
  int quick = bench_options.quick;
  long per_case = quick ? 20000 : 500000;
  int64_t max_ns = (quick ? 100 : 2000) * 1000000LL; /* per expression */
  const int64_t start_at = 1767225600;               /* 2026-01-01T00:00:00Z */
  bench_status status = BENCH_OK;
  long total = 0;
  double total_secs = 0;

  for (int i = 0; i < CASE_COUNT; i++) {
    const cron_case *cc = &cases[i];
    char err[DLOCK__CRON_ERR_MAX];
    dlock__cron *cron = NULL;
    dlock__tz *tz = NULL;
    if (cc->zone && dlock__tz_load(cc->zone, &tz, err, sizeof err) != 0) {
      /* No zoneinfo on this machine: measure the expression in UTC instead. */
      bench_progress("zone %s unavailable (%s); using UTC", cc->zone, err);
      tz = NULL;
    }
    if (dlock__cron_parse(cc->expr, cc->flags, &cron, err, sizeof err) != 0) {
      fprintf(stderr, "dlock-bench: cron '%s': %s\n", cc->expr, err);
      dlock__tz_free(tz);
      status = BENCH_FAILED;
      continue;
    }
    int64_t after = start_at, next = 0;
    long done = 0;
    int64_t t0 = bench_now_ns();
    for (long k = 0; k < per_case; k++) {
      if ((k & 255) == 0 && bench_now_ns() - t0 > max_ns) break;
      int rc = dlock__cron_next(cron, tz, after, &next);
      if (rc == DLOCK__CRON_NO_NEXT) {
        after = start_at; /* ran past 2099: start over */
      } else if (rc != 0 || next <= after) {
        fprintf(stderr, "dlock-bench: cron '%s' next after %lld failed (%d)\n", cc->expr, (long long)after, rc);
        status = BENCH_FAILED;
        break;
      } else {
        after = next;
      }
      done++;
    }
    double secs = (double)(bench_now_ns() - t0) / 1e9;
    char metric[64], note[128];
    snprintf(metric, sizeof metric, "%s", cc->expr);
    snprintf(note, sizeof note, "%s%s%s, %ld calls", cc->what, cc->zone ? ", " : "",
             cc->zone ? (tz ? cc->zone : "UTC (zone missing)") : "", done);
    bench_row("scheduler", "dlock", metric, secs > 0 ? (double)done / secs : 0, "next/s", note);
    total += done;
    total_secs += secs;
    dlock__cron_free(cron);
    dlock__tz_free(tz);
  }
  if (total_secs > 0)
    bench_row("scheduler", "dlock", "all expressions", (double)total / total_secs, "next/s", "mean over the mix above");
  return status;
}
