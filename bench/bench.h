/*
 * bench.h - what the parts of dlock-bench share: options, the Redis server
 * under test, latency samples, result rows and small hiredis helpers.
 *
 * Each scenario lives in its own sc_*.c and reports through bench_row();
 * main.c prints the rows as a table and writes them as JSON.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

/* Where the client runs relative to redis-server (2 vCPUs: a round trip on
 * one core and one across cores differ by about 6x). */
typedef enum bench_layout {
  BENCH_LAYOUT_CROSS = 0, /* redis-server on CPU 0, client on CPU 1 */
  BENCH_LAYOUT_SAME = 1,  /* both on CPU 0 */
  BENCH_LAYOUT_NONE = 2   /* no pinning: the kernel decides */
} bench_layout;

typedef struct bench_opts {
  const char *url;       /* NULL: start a private redis-server */
  const char *json_path; /* NULL: no JSON */
  const char *scenario;  /* NULL: all */
  int quick;
  int sentinel; /* libdlock goes through a sentinel to the private server */
  bench_layout layout;
  int watchdog_locks;
  int64_t watchdog_lease_ms;
  int64_t watchdog_hold_ms;
  int no_peers;          /* --no-peers: do not run redis-py / node-redlock */
  const char *peers_dir; /* where redis_py_peer.py and redlock_peer.js are */
} bench_opts;

/* The server under test, as seen from the bench. */
typedef struct bench_server {
  char host[64];
  int port;
  char url[128];
  pid_t own_pid;        /* > 0 when we started it (and must stop it) */
  long server_pid;      /* process_id from INFO; 0 if unknown */
  char dir[256];        /* temp dir of our own server */
  char layout_used[64]; /* what the placement really is, for the table */
  char version[32];
} bench_server;

extern bench_opts bench_options;
extern bench_server bench_redis;

/* ---- Server (server.c) ---- */

/* Start a private redis-server or use opts->url; then apply the layout.
 * Returns 0 or -1 with a message on stderr. */
int bench_server_setup(const bench_opts *opts, bench_server *srv);
/* Stop our own server by PID and remove its temp dir. Idempotent. */
void bench_server_teardown(bench_server *srv);

/* A PostgreSQL --url: run the PostgreSQL scenarios (pg_floor.c) and return
 * the exit code; -1 when the URL is not PostgreSQL's. */
int bench_pg_main(int argc, char **argv);
/* Child processes (forked waiters) to kill by PID if we are interrupted. */
/* A loopback port free now (bound to 0 and let go), -1 if none. */
int bench_free_port(void);
void bench_track_child(pid_t pid);
void bench_untrack_child(pid_t pid);

/* A new hiredis connection to the server under test (2 s timeouts), or NULL. */
redisContext *bench_connect(void);
/* Run a command; NULL on a connection error (message on stderr). The caller
 * frees the reply. */
redisReply *bench_cmd(redisContext *ctx, const char *fmt, ...);

/* Counters from INFO commandstats and INFO cpu, for deltas around a run. */
#define BENCH_MAX_CMDS 96
typedef struct bench_cmdstats {
  int count;
  char name[BENCH_MAX_CMDS][32];
  long long calls[BENCH_MAX_CMDS];
  double usec[BENCH_MAX_CMDS]; /* time inside the command; a script's includes its calls */
  double server_cpu_s;         /* used_cpu_user + used_cpu_sys of redis-server */
} bench_cmdstats;

int bench_cmdstats_read(redisContext *ctx, bench_cmdstats *out);
/* Calls of 'cmd' ("evalsha") in after - before. */
long long bench_cmdstats_delta(const bench_cmdstats *before, const bench_cmdstats *after, const char *cmd);
/* Microseconds Redis spent in 'cmd' in after - before. */
double bench_cmdstats_usec_delta(const bench_cmdstats *before, const bench_cmdstats *after, const char *cmd);
/* Calls of every command except INFO (our own probes), including the
 * commands that scripts run inside Redis. */
long long bench_cmdstats_delta_all(const bench_cmdstats *before, const bench_cmdstats *after);
/* Calls of the commands a client sends on the wire (EVALSHA, EVAL, SET, PING,
 * SUBSCRIBE, ...): the total less what scripts ran inside Redis. */
long long bench_cmdstats_delta_wire(const bench_cmdstats *before, const bench_cmdstats *after);

/* ---- Time and samples (stats.c) ---- */

int64_t bench_now_ns(void);
void bench_sleep_ms(int64_t ms);

typedef struct bench_samples {
  int64_t *ns;
  size_t count;
  size_t cap;
} bench_samples;

int bench_samples_init(bench_samples *s, size_t cap);
void bench_samples_free(bench_samples *s);
/* Drops the sample when full (the cap is the run's count bound). */
void bench_samples_add(bench_samples *s, int64_t ns);
/* Sorts in place, then the nearest-rank percentile 'p' (0..100) in µs. */
double bench_samples_pct_us(bench_samples *s, double p);
double bench_samples_max_us(bench_samples *s);

/* ---- Results (main.c) ---- */

/* One figure. 'impl' says whose figure it is (dlock, hiredis-bare, ...). */
void bench_row(const char *scenario, const char *impl, const char *metric, double value, const char *unit,
               const char *note);
/* The value of a row reported earlier in this run; 0 with *found = 0 if none. */
double bench_row_value(const char *scenario, const char *impl, const char *metric, int *found);
/* A target from the issue: 'met' 1/0, 'detail' what was compared. */
void bench_target(const char *scenario, const char *target, int met, const char *detail);
/* Progress line on stderr. */
void bench_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Outcome of a scenario. */
typedef enum bench_status {
  BENCH_OK = 0,
  BENCH_FAILED = 1,     /* a correctness check failed: the run fails */
  BENCH_UNAVAILABLE = 2 /* cannot run here; not a failure */
} bench_status;

/* ---- Scenarios (sc_*.c) ---- */

/* Each returns BENCH_OK, BENCH_FAILED or BENCH_UNAVAILABLE and reports rows. */
bench_status bench_scenario_floor(void);
bench_status bench_scenario_uncontended(void);
bench_status bench_scenario_throughput(void);
bench_status bench_scenario_contended(void);
bench_status bench_scenario_peers(void);
bench_status bench_scenario_watchdog(void);
bench_status bench_scenario_scheduler(void);
bench_status bench_scenario_redlock(void);
bench_status bench_scenario_cluster(void);
bench_status bench_scenario_rwlock(void);
bench_status bench_scenario_semaphore(void);

/* PING round trips on one connection into 's' (bounded by count and time). */
int bench_ping_samples(redisContext *ctx, bench_samples *s, size_t count, int64_t max_ns);

/* A random 32-hex-char token, as dlock and redis-py use. */
void bench_token(char out[33]);

/* The exact Lua text libdlock runs (prelude + script), embedded in
 * dlock_static at build time; redis-benchmark is given the same scripts. */
extern const char dlock__lua_acquire[], dlock__lua_release[];

/* The compare-and-delete every Redis lock client uses to release. */
extern const char bench_cad_script[];

#endif
