/*
 * pg_bench.c - dlock-pg-bench: the PostgreSQL backend's costs against a
 * floor, until the backend is wired into `dlock bench` (docs/postgres.md):
 *
 *   floor        pg_advisory_lock + pg_advisory_unlock on one libpq
 *                connection: two round trips, no table, no fence
 *   uncontended  the lease table: acquire (one upsert) + release (one
 *                update + notify) through the module, one thread
 *   advisory     advisory mode (?mode=advisory): acquire + release through
 *                the module, one thread (hold connections are pooled:
 *                one round trip each)
 *   contended    4 processes on one name: acquire (waiting) + an unguarded
 *                counter increment + release; the counter must be exact
 *
 * Usage: dlock-pg-bench URL [--quick]   (exit 0, 1 a correctness check
 * failed, 2 usage, 69 no server)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "pg/pg.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *scenario, double *lat, int n, double total_us) {
  qsort(lat, (size_t)n, sizeof *lat, cmp_d);
  printf("%-12s %8d ops %10.0f ops/s   p50 %7.0f us   p99 %7.0f us\n", scenario, n, n / (total_us / 1e6), lat[n / 2],
         lat[(int)(n * 0.99)]);
}

static int floor_loop(const char *url, int n) {
  PGconn *c = PQconnectdb(url);
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "dlock-pg-bench: %s", PQerrorMessage(c));
    PQfinish(c);
    return 69;
  }
  double *lat = malloc(sizeof *lat * (size_t)n);
  const char *vals[1] = {"4242"};
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    double s = now_us();
    PGresult *r = PQexecParams(c, "SELECT pg_advisory_lock($1::bigint)", 1, NULL, vals, NULL, NULL, 0);
    PQclear(r);
    r = PQexecParams(c, "SELECT pg_advisory_unlock($1::bigint)", 1, NULL, vals, NULL, NULL, 0);
    PQclear(r);
    lat[i] = now_us() - s;
  }
  report("floor", lat, n, now_us() - t0);
  free(lat);
  PQfinish(c);
  return 0;
}

static int uncontended(const char *url, int n) {
  dlock__pg *pg;
  if (dlock__pg_connect(url, NULL, &pg) != 0) {
    fprintf(stderr, "dlock-pg-bench: %s\n", dlock_last_error());
    return 69;
  }
  double *lat = malloc(sizeof *lat * (size_t)n);
  double t0 = now_us();
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    double s = now_us();
    dlock__pg_hold h;
    rc = dlock__pg_acquire(pg, "bench:uncontended", 30000, NULL, 0, NULL, &h);
    if (rc == 0) rc = dlock__pg_release(pg, &h);
    lat[i] = now_us() - s;
  }
  if (rc != 0)
    fprintf(stderr, "dlock-pg-bench: uncontended: %s\n", dlock_last_error());
  else
    report("uncontended", lat, n, now_us() - t0);
  free(lat);
  dlock__pg_close(pg);
  return rc ? 1 : 0;
}

static int advisory(const char *url, int n) {
  char adv[1200];
  int uri = strstr(url, "://") != NULL;
  snprintf(adv, sizeof adv, "%s%smode=advisory", url, !uri ? " " : strchr(url, '?') ? "&" : "?");
  dlock__pg *pg;
  if (dlock__pg_connect(adv, NULL, &pg) != 0) {
    fprintf(stderr, "dlock-pg-bench: %s\n", dlock_last_error());
    return 69;
  }
  double *lat = malloc(sizeof *lat * (size_t)n);
  double t0 = now_us();
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    double s = now_us();
    dlock__pg_hold h;
    rc = dlock__pg_acquire(pg, "bench:advisory", 30000, NULL, 0, NULL, &h);
    if (rc == 0) rc = dlock__pg_release(pg, &h);
    lat[i] = now_us() - s;
  }
  if (rc != 0)
    fprintf(stderr, "dlock-pg-bench: advisory: %s\n", dlock_last_error());
  else
    report("advisory", lat, n, now_us() - t0);
  free(lat);
  dlock__pg_close(pg);
  return rc ? 1 : 0;
}

static int contended_child(const char *url, const char *path, int n) {
  dlock__pg *pg;
  dlock__pg_options o = {.poll_ms = 200};
  if (dlock__pg_connect(url, &o, &pg) != 0) return 69;
  for (int i = 0; i < n; i++) {
    dlock__pg_hold h;
    if (dlock__pg_acquire(pg, "bench:contended", 30000, NULL, 60000, NULL, &h) != 0) {
      fprintf(stderr, "dlock-pg-bench: contended: %s\n", dlock_last_error());
      return 1;
    }
    FILE *f = fopen(path, "r+");
    long v = 0;
    if (!f || fscanf(f, "%ld", &v) != 1) return 1;
    rewind(f);
    fprintf(f, "%ld\n", v + 1);
    fclose(f);
    if (dlock__pg_release(pg, &h) != 0) return 1;
  }
  dlock__pg_close(pg);
  return 0;
}

static int contended(const char *url, int procs, int n) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/dlock-pg-bench-%d", (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f, "0\n");
  fclose(f);
  double t0 = now_us();
  pid_t kids[16];
  fflush(NULL);
  for (int i = 0; i < procs; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(contended_child(url, path, n));
  }
  int ok = 1;
  for (int i = 0; i < procs; i++) {
    int st;
    if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  double total = now_us() - t0;
  long v = -1;
  f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
  }
  unlink(path);
  int exact = v == (long)procs * n;
  printf("%-12s %8d ops %10.0f ops/s   %d processes, counter %ld of %d: %s\n", "contended", procs * n,
         procs * n / (total / 1e6), procs, v, procs * n, exact ? "exact" : "NOT EXACT");
  return ok && exact ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--quick") != 0)) {
    fprintf(stderr, "usage: dlock-pg-bench URL [--quick]\n");
    return 2;
  }
  int quick = argc == 3;
  const char *url = argv[1];
  int rc = floor_loop(url, quick ? 200 : 5000);
  if (rc) return rc;
  rc = uncontended(url, quick ? 200 : 5000);
  if (rc) return rc;
  rc = advisory(url, quick ? 200 : 5000);
  if (rc) return rc;
  return contended(url, 4, quick ? 10 : 250);
}
