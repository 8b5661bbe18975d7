/*
 * my_bench.c - dlock-my-bench: the MySQL/MariaDB backend's acquire +
 * release against a bare GET_LOCK/RELEASE_LOCK loop (docs/PERFORMANCE.md,
 * "MySQL/MariaDB backend"), side by side: blocks of A (dlock, lease mode,
 * through the public API) and B (GET_LOCK + RELEASE_LOCK on one
 * connection of the MariaDB Connector/C) alternate, so that both see the
 * same load; each block's mean is one sample, and the report gives the
 * median of the block means with their spread (min..max), and the p50/p99
 * of all operations. C, in the same rotation: dlock's advisory mode
 * (?mode=advisory: a connection of its own per hold, GET_LOCK on it after
 * the mark that tells a session-sharing proxy, docs/mysql.md). Then the
 * hand-off: a waiter blocked on the lock, the
 * holder releases; from just before the release to the waiter's acquire
 * returning (dlock: its doorbell, else its back-off; GET_LOCK: woken by
 * the server).
 *
 * Usage: dlock-my-bench HOST PORT USER PASSWORD DB [--quick]
 * Prints the load average first. Exit 0, or 1 when a call failed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mysql.h>

#include "dlock.h"

static const char *host, *user, *password, *db;
static unsigned port;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static MYSQL *connect_raw(void) {
  MYSQL *c = mysql_init(NULL);
  if (!c || !mysql_real_connect(c, host, user, password, db, port, NULL, 0)) {
    fprintf(stderr, "dlock-my-bench: cannot connect to %s:%u/%s: %s\n", host, port, db, c ? mysql_error(c) : "");
    return NULL;
  }
  return c;
}

/* GET_LOCK/RELEASE_LOCK's answer (1), else 0. */
static int one(MYSQL *c, const char *q) {
  if (mysql_real_query(c, q, strlen(q)) != 0) return 0;
  MYSQL_RES *r = mysql_store_result(c);
  MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
  int ok = row && row[0] && !strcmp(row[0], "1");
  if (r) mysql_free_result(r);
  return ok;
}

static dlock_client *client_in(const char *mode) {
  char url[300];
  snprintf(url, sizeof url, "mysql://%s:%u/%s%s", host, port, db, mode);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.username = user;
  o.password = password;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    fprintf(stderr, "dlock-my-bench: %s\n", dlock_last_error());
    return NULL;
  }
  return c;
}

static dlock_mutex *mutex(dlock_client *c, const char *name) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000; /* a fixed lease: no watchdog in the loop */
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) fprintf(stderr, "dlock-my-bench: %s\n", dlock_last_error());
  return m;
}

static dlock_client *client(void) { return client_in(""); }

/* One block of 'n' cycles; the latencies into 'lat'. 0, or -1. */
static int block_dlock(dlock_mutex *m, int n, double *lat) {
  for (int i = 0; i < n; i++) {
    double s = now_us();
    if (dlock_mutex_acquire(m, 0) != 0 || dlock_mutex_release(m) != 0) {
      fprintf(stderr, "dlock-my-bench: dlock: %s\n", dlock_last_error());
      return -1;
    }
    lat[i] = now_us() - s;
  }
  return 0;
}

static int block_get_lock(MYSQL *c, int n, double *lat) {
  for (int i = 0; i < n; i++) {
    double s = now_us();
    if (!one(c, "SELECT GET_LOCK('bench:floor', 0)") || !one(c, "SELECT RELEASE_LOCK('bench:floor')")) {
      fprintf(stderr, "dlock-my-bench: GET_LOCK: %s\n", mysql_error(c));
      return -1;
    }
    lat[i] = now_us() - s;
  }
  return 0;
}

static double mean(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return s / n;
}

/* The row of one implementation: its block means and all its latencies. */
static void report(const char *what, double *means, int blocks, double *all, int n) {
  qsort(means, (size_t)blocks, sizeof *means, cmp_d);
  qsort(all, (size_t)n, sizeof *all, cmp_d);
  double med = means[blocks / 2];
  printf("| %s | %d x %d | %.0f us (%.0f..%.0f) | %.0f /s | %.0f us | %.0f us |\n", what, blocks, n / blocks, med,
         means[0], means[blocks - 1], 1e6 / med, all[n / 2], all[(int)(n * 0.99)]);
}

/* ---- The hand-off ---- */

typedef struct waiter {
  dlock_mutex *m; /* dlock; NULL: GET_LOCK on 'c' */
  MYSQL *c;
  atomic_int ready;
  double got_us;
  int ok;
} waiter;

static void *wait_main(void *arg) {
  waiter *w = arg;
  atomic_store(&w->ready, 1);
  if (w->m)
    w->ok = dlock_mutex_acquire(w->m, 20000) == 0;
  else
    w->ok = one(w->c, "SELECT GET_LOCK('bench:handoff', 20)");
  w->got_us = now_us();
  if (w->ok && w->m) dlock_mutex_release(w->m);
  if (w->ok && !w->m) one(w->c, "SELECT RELEASE_LOCK('bench:handoff')");
  return NULL;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* 'rounds' hand-offs; the latencies (us) into 'lat'. */
static int handoff(int use_dlock, int rounds, double *lat) {
  dlock_client *ca = NULL, *cb = NULL;
  dlock_mutex *ma = NULL, *mb = NULL;
  MYSQL *a = NULL, *b = NULL;
  if (use_dlock) {
    if (!(ca = client()) || !(cb = client()) || !(ma = mutex(ca, "bench:handoff")) ||
        !(mb = mutex(cb, "bench:handoff")))
      return -1;
  } else if (!(a = connect_raw()) || !(b = connect_raw())) {
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < rounds && rc == 0; i++) {
    if (use_dlock ? dlock_mutex_acquire(ma, 0) != 0 : !one(a, "SELECT GET_LOCK('bench:handoff', 0)")) {
      rc = -1;
      break;
    }
    waiter w = {.m = mb, .c = b};
    pthread_t t;
    pthread_create(&t, NULL, wait_main, &w);
    while (!atomic_load(&w.ready)) sleep_ms(1);
    /* Let the waiter reach its wait (its back-off has grown past its start:
     * the release lands anywhere in a back-off step). */
    sleep_ms(300 + (i * 37) % 200);
    double s = now_us();
    if (use_dlock)
      dlock_mutex_release(ma);
    else
      one(a, "SELECT RELEASE_LOCK('bench:handoff')");
    pthread_join(t, NULL);
    if (!w.ok) rc = -1;
    lat[i] = w.got_us - s;
  }
  if (rc) fprintf(stderr, "dlock-my-bench: hand-off: %s\n", use_dlock ? dlock_last_error() : "GET_LOCK failed");
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
  if (a) mysql_close(a);
  if (b) mysql_close(b);
  return rc;
}

static void report_handoff(const char *what, double *lat, int n) {
  qsort(lat, (size_t)n, sizeof *lat, cmp_d);
  printf("| %s | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", what, n, mean(lat, n) / 1000, lat[0] / 1000,
         lat[n / 2] / 1000, lat[n - 1] / 1000);
}

int main(int argc, char **argv) {
  if (argc < 6 || argc > 7 || (argc == 7 && strcmp(argv[6], "--quick") != 0)) {
    fprintf(stderr, "usage: dlock-my-bench HOST PORT USER PASSWORD DB [--quick]\n");
    return 2;
  }
  host = argv[1];
  port = (unsigned)atoi(argv[2]);
  user = argv[3];
  password = argv[4];
  db = argv[5];
  int quick = argc == 7;
  int blocks = quick ? 2 : 20, per = quick ? 10 : 250, rounds = quick ? 2 : 20;
  double load[3] = {0, 0, 0};
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(f);
  }
  printf("load average before: %.2f %.2f %.2f\n\n", load[0], load[1], load[2]);
  dlock_client *c = client(), *ca = client_in("?mode=advisory");
  dlock_mutex *m = c ? mutex(c, "bench:uncontended") : NULL, *madv = ca ? mutex(ca, "bench:advisory") : NULL;
  MYSQL *raw = connect_raw();
  if (!m || !madv || !raw) return 1;
  double *am = calloc((size_t)blocks, sizeof *am), *bm = calloc((size_t)blocks, sizeof *bm);
  double *cm = calloc((size_t)blocks, sizeof *cm);
  double *aall = calloc((size_t)(blocks * per), sizeof *aall), *ball = calloc((size_t)(blocks * per), sizeof *ball);
  double *call = calloc((size_t)(blocks * per), sizeof *call);
  /* A warm-up block each (the row, the connections), not counted. */
  int rc = block_dlock(m, per, aall) || block_get_lock(raw, per, ball) || block_dlock(madv, per, call);
  for (int k = 0; k < blocks && !rc; k++) {
    /* A, B, C or C, B, A: none always runs first. */
    if (k % 2 == 0)
      rc = block_dlock(m, per, aall + k * per) || block_get_lock(raw, per, ball + k * per) ||
           block_dlock(madv, per, call + k * per);
    else
      rc = block_dlock(madv, per, call + k * per) || block_get_lock(raw, per, ball + k * per) ||
           block_dlock(m, per, aall + k * per);
    am[k] = mean(aall + k * per, per);
    bm[k] = mean(ball + k * per, per);
    cm[k] = mean(call + k * per, per);
  }
  if (!rc) {
    printf("| loop | blocks x cycles | cycle: median of block means (min..max) | cycles/s | p50 | p99 |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    report("A: dlock lease mode, acquire + release", am, blocks, aall, blocks * per);
    report("B: GET_LOCK + RELEASE_LOCK", bm, blocks, ball, blocks * per);
    report("C: dlock advisory mode, acquire + release", cm, blocks, call, blocks * per);
  }
  dlock_mutex_free(m);
  dlock_mutex_free(madv);
  dlock_client_free(c);
  dlock_client_free(ca);
  mysql_close(raw);
  free(am);
  free(bm);
  free(cm);
  free(aall);
  free(ball);
  free(call);
  if (rc) return 1;
  double *ha = calloc((size_t)rounds, sizeof *ha), *hb = calloc((size_t)rounds, sizeof *hb);
  rc = handoff(1, rounds, ha) || handoff(0, rounds, hb);
  if (!rc) {
    printf("\n| hand-off (release -> the waiter's acquire returns) | rounds | mean | min | p50 | max |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    report_handoff("dlock lease mode (doorbell)", ha, rounds);
    report_handoff("GET_LOCK (woken by the server)", hb, rounds);
  }
  free(ha);
  free(hb);
  f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(f);
  }
  printf("\nload average after: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  return rc ? 1 : 0;
}
