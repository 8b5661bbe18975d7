/*
 * sc_scheduler.c - cron next-fire computations per second for a mix of
 * expressions (src/sched/cron.h, the engine the scheduler uses; internal to the
 * library, reached here through dlock_static). Each run chains next() calls
 * so that every call starts from a fire time and has to find the next one.
 * Then a fleet: FLEET schedulers (a client each) run one fixed-rate job on
 * the server for a while, and INFO commandstats says what a tick costs Redis
 * (every node claims it, one runs it and records the end).
 */
#include <stdatomic.h>
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

#define FLEET 10

static atomic_int fleet_runs;

static int fleet_job(const dlock_tick *t, void *arg) {
  (void)t, (void)arg;
  atomic_fetch_add(&fleet_runs, 1);
  return 0;
}

/* Redis commands per tick for a fleet of FLEET nodes on one job. */
static bench_status fleet(void) {
  int64_t period = 100, run_ms = bench_options.quick ? 3000 : 20000;
  dlock_client *c[FLEET] = {0};
  dlock_sched *s[FLEET] = {0};
  redisContext *ctx = bench_connect();
  bench_status status = ctx ? BENCH_OK : BENCH_FAILED;
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = bench_redis.url;
  for (int i = 0; i < FLEET && status == BENCH_OK; i++) {
    dlock_sched_options so;
    dlock_sched_options_init(&so);
    char node[32];
    snprintf(node, sizeof node, "bench-node-%d", i);
    so.node_name = node;
    if (dlock_client_new(&c[i], &co) != 0 || dlock_sched_new(&s[i], c[i], &so) != 0 ||
        dlock_sched_add_fixed_rate(s[i], "bench:fleet", period, NULL, fleet_job, NULL) != 0) {
      fprintf(stderr, "dlock-bench: fleet node %d: %s\n", i, dlock_last_error());
      status = BENCH_FAILED;
    }
  }
  bench_cmdstats before, after;
  if (status == BENCH_OK) bench_cmdstats_read(ctx, &before);
  int runs0 = atomic_load(&fleet_runs);
  for (int i = 0; i < FLEET && status == BENCH_OK; i++)
    if (dlock_sched_start(s[i]) != 0) {
      fprintf(stderr, "dlock-bench: fleet node %d: start: %s\n", i, dlock_last_error());
      status = BENCH_FAILED;
    }
  if (status == BENCH_OK) {
    bench_progress("a fleet of %d schedulers, one job every %lld ms, for %lld ms", FLEET, (long long)period,
                   (long long)run_ms);
    bench_sleep_ms(run_ms);
  }
  for (int i = 0; i < FLEET; i++)
    if (s[i]) dlock_sched_stop(s[i], 5000);
  if (status == BENCH_OK) {
    bench_cmdstats_read(ctx, &after);
    int ticks = atomic_load(&fleet_runs) - runs0;
    char note[160];
    snprintf(note, sizeof note, "%d nodes, a %lld ms fixed-rate job, %d ticks run in %.0f s", FLEET, (long long)period,
             ticks, (double)run_ms / 1e3);
    if (ticks > 0) {
      long long all = bench_cmdstats_delta_all(&before, &after), type = bench_cmdstats_delta(&before, &after, "type");
      long long scripts =
          bench_cmdstats_delta(&before, &after, "evalsha") + bench_cmdstats_delta(&before, &after, "eval");
      bench_row("scheduler", "dlock-fleet", "Redis commands per tick", (double)all / ticks, "", note);
      bench_row("scheduler", "dlock-fleet", "TYPE checks per tick", (double)type / ticks, "",
                "inside the scripts; issue 30: at most one a key a claim");
      bench_row("scheduler", "dlock-fleet", "script calls per tick", (double)scripts / ticks, "",
                "every node's claim, the runner's finish");
      bench_row("scheduler", "dlock-fleet", "TYPE per claim", scripts ? (double)type / (double)scripts : 0, "",
                "over every script call (claims and finishes)");
      /* The winner's claim checks its 8 keys and the finish 6; each other
       * node's claim the 3 it reads: (8 + 6 + 3 * 9) / 11 script calls. */
      char detail[160];
      snprintf(detail, sizeof detail, "%.1f TYPE per tick, %.2f per script call (before issue 30: 83.4, 7.56)",
               (double)type / ticks, scripts ? (double)type / (double)scripts : 0);
      bench_target("scheduler", "fleet of 10: at most one TYPE a key a claim, only the keys it uses (issue 30)",
                   (double)type / ticks <= 8 + 6 + 3 * (FLEET - 1) + 2, detail);
    } else {
      fprintf(stderr, "dlock-bench: the fleet ran no tick in %lld ms\n", (long long)run_ms);
      status = BENCH_FAILED;
    }
  }
  for (int i = 0; i < FLEET; i++) {
    dlock_sched_free(s[i]);
    dlock_client_free(c[i]);
  }
  if (ctx) redisFree(ctx);
  return status;
}

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
  if (fleet() != BENCH_OK) status = BENCH_FAILED;
  return status;
}
