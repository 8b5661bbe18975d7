/*
 * harness.h - start and stop private redis-server processes for tests.
 *
 * Each server gets its own temp dir, a free loopback port, no persistence
 * unless asked, and `enable-debug-command local`. It is stopped by PID (never
 * by name) from th_redis_stop(), at exit, and on SIGINT/SIGTERM/SIGALRM.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"

typedef struct th_redis {
  pid_t pid;
  int port;         /* plain TCP port */
  int tls_port;     /* 0 unless tls */
  char dir[256];    /* temp dir: config, logs, socket, certificates */
  char sock[300];   /* unix socket path */
  char url[512];    /* redis://127.0.0.1:PORT */
  char extra[2048]; /* extra config lines given at start (kept for restart) */
  int sentinel;     /* run with --sentinel (see harness_sentinel.h) */
} th_redis;

/* Start a server; 'extra_conf' (may be NULL) is appended to its config.
 * Returns 0, or -1 with a message on stderr. */
int th_redis_start(th_redis *r, const char *extra_conf);
/* The same, as a Redis Sentinel ('conf' holds its sentinel lines). */
int th_sentinel_start(th_redis *r, const char *conf);
/* Stop by PID (SIGTERM, then SIGKILL after 5 s) and remove the temp dir. */
void th_redis_stop(th_redis *r);
/* kill -9 the server and start it again on the same port and dir. */
int th_redis_restart(th_redis *r);
/* kill -9 the server and reap it (pid 0: down; th_redis_restart() brings it
 * back with its files). */
void th_redis_crash(th_redis *r);
/* Run redis-cli against the server; output (trimmed) into 'out'. Returns the
 * exit status. 'args' is a shell-quoted argument string. */
int th_redis_cli(const th_redis *r, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Redlock: start 'n' independent servers (each as th_redis_start), and
 * write "redlock://127.0.0.1:P1,...,127.0.0.1:Pn" into 'url'. Returns 0, or
 * -1 (the ones started are stopped). */
int th_redis_start_n(th_redis *r, int n, const char *extra_conf);
void th_redis_stop_n(th_redis *r, int n);
void th_redlock_url(const th_redis *r, int n, char *url, size_t len);
/* Generate a CA plus server and client certificates in r->dir/tls with openssl(1). */
int th_make_certs(const char *dir);

/* 1 when the name "localhost" resolves to 127.0.0.1 (where the test servers
 * listen), else 0 with the reason in 'why'. Tests that connect by that name
 * need a resolver (/etc/hosts) and skip without one. */
int th_localhost_resolves(char *why, size_t len);
/* A free TCP port on 127.0.0.1 (bind to 0 and read it back). */
int th_free_port(void);
/* How much slower than normal this run is (DLOCK_TEST_TIME_FACTOR, default 1;
 * valgrind runs set it). Timing bounds and short leases in tests scale by it. */
long th_time_factor(void);
/* Milliseconds on the monotonic clock. */
long long th_now_ms(void);
void th_sleep_ms(long ms);
/* Sleep until the wall clock is 'at_us' microseconds into a second. */
void th_sleep_to_frac(long at_us);
/* The integer 'field' of INFO server on 'r' (uptime_in_seconds, ...), -1 if none. */
long long th_redis_info_num(const th_redis *r, const char *field);
/* A client of 'url' with a 4 s command timeout, tried every 100 ms for 4 s
 * (a server that is starting up); NULL if none. */
dlock_client *th_client_retry(const char *url);
/* A thread body: acquire 'm' waiting up to 'wait_ms', note the result, the
 * time (th_now_ms) and the fence, release if acquired, then set 'done'. */
typedef struct th_waiter {
  dlock_mutex *m;
  int64_t wait_ms;
  int rc;
  uint64_t fence;
  long long acquired_at;
  int done; /* read with __atomic_load_n: the thread may still run */
} th_waiter;
void *th_wait_for_lock(void *arg);

/* One name taken at the same moment as a mutex on client 'a' and as a
 * semaphore of 2 permits on client 'b' (a lease of 'lease_ms'; 0: the
 * default options), each round on a fresh name "race-ROUND", for up to
 * 'max_rounds' rounds or 'ms': the first round in which both held (-1:
 * none), '*rounds' the rounds run. A name is one kind at a time. */
int th_race_mutex_and_semaphore(dlock_client *a, dlock_client *b, int max_rounds, long ms, int64_t lease_ms,
                                int *rounds);

/* Fork a child running fn(arg); returns its pid. The child exits with fn's result. */
pid_t th_spawn(int (*fn)(void *), void *arg);
/* Fork and exec argv (found on PATH), its output to /dev/null; returns its
 * pid. Unlike th_spawn the child runs no test code: under valgrind it is
 * not checked (--trace-children=no), so what the test had allocated before
 * the fork is not reported as the child's leak. */
pid_t th_spawn_argv(const char *const argv[]);
/* Wait for 'pid' up to 'timeout_ms'; returns the wait status, or -1 on timeout
 * (the child is then killed). */
int th_wait(pid_t pid, long timeout_ms);

#endif
