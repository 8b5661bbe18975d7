/*
 * sc_watchdog.c - N locks held by one process in watchdog mode for a while:
 * the renewal commands per second (INFO commandstats), the CPU time this
 * process spends on them (getrusage over the hold; redis-server's apart,
 * from INFO cpu), the memory a hold takes in this process (resident set)
 * and in Redis (used_memory), and how many were lost. Losing one is a
 * failure: renewal exists so that it never happens. From 4,000 locks up
 * they are acquired (and released) by several threads on the one client,
 * so that 100k and 1M holds take minutes, not hours; the hold itself is the
 * watchdog's alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <dlock.h>

#include "bench.h"

#define ACQ_THREADS 4

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec / 1e6;
}

/* Resident set of this process in bytes (0 if unknown). */
static double rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return 0;
  int ok = fscanf(f, "%ld %ld", &size, &resident) == 2;
  fclose(f);
  return ok ? (double)resident * (double)sysconf(_SC_PAGESIZE) : 0;
}

/* INFO memory used_memory of the server (0 if unknown). */
static double redis_used_memory(redisContext *ctx) {
  redisReply *r = bench_cmd(ctx, "INFO memory");
  double v = 0;
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *p = strstr(r->str, "used_memory:");
    if (p) v = atof(p + strlen("used_memory:"));
  }
  if (r) freeReplyObject(r);
  return v;
}

static int count_lost(dlock_mutex **locks, int n) {
  int lost = 0;
  for (int i = 0; i < n; i++)
    if (dlock_mutex_lost(locks[i]) != DLOCK_LOST_NONE) lost++;
  return lost;
}

/* One thread's share of the handles: every ACQ_THREADS-th from 'first'. */
typedef struct share {
  pthread_t thread;
  int started;
  dlock_client *client;
  const dlock_mutex_options *opts;
  dlock_mutex **locks;
  int n, first;
  int failed; /* a call failed (the handle is freed, its slot NULL) */
} share;

static void *acquire_share(void *arg) {
  share *sh = arg;
  for (int i = sh->first; i < sh->n && !sh->failed; i += ACQ_THREADS) {
    char name[64];
    snprintf(name, sizeof name, "bench:watchdog:%d", i);
    int rc = dlock_mutex_new(&sh->locks[i], sh->client, name, sh->opts);
    if (rc == 0) rc = dlock_mutex_acquire(sh->locks[i], 0);
    if (rc != 0) {
      fprintf(stderr, "dlock-bench: acquire %s: %s: %s\n", name, dlock_err_name(rc),
              sh->locks[i] ? dlock_mutex_errmsg(sh->locks[i]) : dlock_last_error());
      dlock_mutex_free(sh->locks[i]);
      sh->locks[i] = NULL;
      sh->failed = 1;
    }
  }
  return NULL;
}

static void *release_share(void *arg) {
  share *sh = arg;
  for (int i = sh->first; i < sh->n; i += ACQ_THREADS) {
    if (!sh->locks[i]) continue;
    if (dlock_mutex_lost(sh->locks[i]) == DLOCK_LOST_NONE) {
      int rc = dlock_mutex_release(sh->locks[i]);
      if (rc != 0) {
        fprintf(stderr, "dlock-bench: release bench:watchdog:%d: %s: %s\n", i, dlock_err_name(rc),
                dlock_mutex_errmsg(sh->locks[i]));
        sh->failed = 1;
      }
    }
    dlock_mutex_free(sh->locks[i]);
    sh->locks[i] = NULL;
  }
  return NULL;
}

/* A release must come from the thread that acquired: each share's thread
 * acquires, waits while the hold is measured, then releases. A share whose
 * thread could not start runs on the measuring thread. */
static struct crew {
  share sh[ACQ_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int acquired, go; /* shares acquired on their thread; release now */
} crew = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *crew_member(void *arg) {
  share *sh = arg;
  acquire_share(sh);
  pthread_mutex_lock(&crew.mu);
  crew.acquired++;
  pthread_cond_broadcast(&crew.cv);
  while (!crew.go) pthread_cond_wait(&crew.cv, &crew.mu);
  pthread_mutex_unlock(&crew.mu);
  release_share(sh);
  return NULL;
}

/* Acquire every handle, on a thread a share from 4,000 locks up; 1 when a
 * call failed. crew_release() ends it. */
static int crew_acquire(dlock_client *c, const dlock_mutex_options *mo, dlock_mutex **locks, int n) {
  int started = 0, failed = 0;
  crew.acquired = crew.go = 0;
  for (int t = 0; t < ACQ_THREADS; t++) {
    crew.sh[t] = (share){.client = c, .opts = mo, .locks = locks, .n = n, .first = t};
    crew.sh[t].started = n >= 4000 && pthread_create(&crew.sh[t].thread, NULL, crew_member, &crew.sh[t]) == 0;
    started += crew.sh[t].started;
  }
  for (int t = 0; t < ACQ_THREADS; t++)
    if (!crew.sh[t].started) acquire_share(&crew.sh[t]);
  pthread_mutex_lock(&crew.mu);
  while (crew.acquired < started) pthread_cond_wait(&crew.cv, &crew.mu);
  pthread_mutex_unlock(&crew.mu);
  for (int t = 0; t < ACQ_THREADS; t++) failed |= crew.sh[t].failed;
  return failed;
}

static int crew_release(void) {
  int failed = 0;
  pthread_mutex_lock(&crew.mu);
  crew.go = 1;
  pthread_cond_broadcast(&crew.cv);
  pthread_mutex_unlock(&crew.mu);
  for (int t = 0; t < ACQ_THREADS; t++)
    if (crew.sh[t].started)
      pthread_join(crew.sh[t].thread, NULL);
    else
      release_share(&crew.sh[t]);
  for (int t = 0; t < ACQ_THREADS; t++) failed |= crew.sh[t].failed;
  return failed;
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
  double rss0 = rss_bytes(), redis0 = redis_used_memory(ctx);
  int64_t t_acq = bench_now_ns();
  if (crew_acquire(c, &mopts, locks, n)) status = BENCH_FAILED;
  double acq_secs = (double)(bench_now_ns() - t_acq) / 1e9;
  double rss_per = (rss_bytes() - rss0) / n, redis_per = (redis_used_memory(ctx) - redis0) / n;
  int held = 0;
  for (int i = 0; i < n; i++) held += locks[i] != NULL;

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
        bench_progress("holding %d locks: %.0f s of %.0f s", held, (double)(bench_now_ns() - t0) / 1e9,
                       (double)hold_ms / 1e3);
        next_report += 10000000000LL;
      }
    }
    double wall = (double)(bench_now_ns() - t0) / 1e9;
    double cpu = cpu_seconds() - cpu0;
    bench_cmdstats_read(ctx, &after);
    int lost = count_lost(locks, n);
    long long renewals =
        bench_cmdstats_delta(&before, &after, "evalsha") + bench_cmdstats_delta(&before, &after, "eval");
    char note[160];
    snprintf(note, sizeof note, "%d locks, lease %lld ms, held %.0f s (acquired in %.1f s, %d thread(s))", held,
             (long long)lease, wall, acq_secs, n >= 4000 ? ACQ_THREADS : 1);
    bench_row("watchdog", "dlock", "locks held", held, "", note);
    snprintf(note, sizeof note, "%lld renewals; expected about %.0f/s (N / (lease/3))", renewals,
             (double)held / ((double)lease / 3000.0));
    bench_row("watchdog", "dlock", "renewal commands per second", (double)renewals / wall, "/s", note);
    bench_row("watchdog", "dlock", "client CPU (user+sys)", 100 * cpu / wall, "% of a core",
              "getrusage(RUSAGE_SELF) over the hold");
    bench_row("watchdog", "dlock", "client CPU per renewal", renewals ? 1e6 * cpu / (double)renewals : 0, "us",
              "the same CPU over the renewals counted");
    bench_row("watchdog", "dlock", "redis-server CPU", 100 * (after.server_cpu_s - before.server_cpu_s) / wall,
              "% of a core", "INFO cpu over the hold");
    bench_row("watchdog", "dlock", "process memory per hold", rss_per, "bytes",
              "resident set growth over the acquires / N (handle, backend state, subscription)");
    bench_row("watchdog", "dlock", "Redis memory per hold", redis_per, "bytes",
              "INFO memory used_memory growth / N (keys, fence, record, channel)");
    bench_row("watchdog", "dlock", "locks lost", lost, "", lost ? "MUST be 0" : "");
    if (lost != 0) status = BENCH_FAILED;
    char detail[160];
    snprintf(detail, sizeof detail, "%d locks: %.2f%% of one core, %d lost", held, 100 * cpu / wall, lost);
    if (held >= 10000 && held < 100000)
      bench_target("watchdog", "10,000 locks renewed with < 5% of a core, none lost", 100 * cpu / wall < 5 && lost == 0,
                   detail);
    if (held >= 100000)
      bench_target("watchdog", "100,000 locks renewed with <= 1% of a core, none lost (issue 30)",
                   100 * cpu / wall <= 1 && lost == 0, detail);
  }
  bench_progress("releasing %d locks", held);
  if (crew_release()) status = BENCH_FAILED;
  free(locks);
  redisFree(ctx);
  dlock_client_free(c);
  return status;
}
