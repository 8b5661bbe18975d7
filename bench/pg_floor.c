/*
 * pg_floor.c - `dlock bench` on a PostgreSQL URL (dlock-bench, run by the
 * dlock command with the same arguments): the lease table through the
 * public API, uncontended and contended, against a floor of PostgreSQL
 * advisory locks in the same run. Moved here from the CLI (cli/cmd_bench.c)
 * so that the command links no libpq; built with DLOCK_WITH_POSTGRES only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#ifdef DLOCK_WITH_POSTGRES
#include <libpq-fe.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void row(const char *scenario, double *lat, int n, double total_us, const char *note) {
  if (n <= 0) {
    printf("%-18s %7s %10s %9s %9s  %s\n", scenario, "-", "-", "-", "-", note);
    return;
  }
  qsort(lat, (size_t)n, sizeof *lat, cmp_d);
  printf("%-18s %7d %10.0f %9.0f %9.0f  %s\n", scenario, n, n / (total_us / 1e6), lat[n / 2], lat[(int)(n * 0.99)],
         note);
}

/* The URL for libpq alone: without dlock's own parameters (dlock_schema, mode). */
static void libpq_url(const char *url, char *out, size_t len) {
  size_t o = 0;
  int uri = strstr(url, "://") != NULL;
  const char *p = url;
  char sep = uri ? '&' : ' ';
  if (uri) {
    const char *q = strchr(url, '?');
    size_t head = q ? (size_t)(q - url) : strlen(url);
    o = head < len - 1 ? head : len - 1;
    memcpy(out, url, o);
    p = q ? q + 1 : url + head;
  }
  int first = 1;
  while (*p) {
    size_t n = strcspn(p, uri ? "&" : " ");
    int mine = (n >= 13 && strncmp(p, "dlock_schema=", 13) == 0) || (n >= 5 && strncmp(p, "mode=", 5) == 0);
    if (!mine && n > 0 && o + n + 2 < len) {
      if (uri || !first) out[o++] = first && uri ? '?' : sep;
      memcpy(out + o, p, n);
      o += n;
      first = 0;
    }
    p += n;
    while (*p == sep) p++;
  }
  out[o] = '\0';
}

/* floor: pg_advisory_lock + pg_advisory_unlock on one connection. */
static int pg_floor(const char *conninfo, int n) {
  PGconn *c = PQconnectdb(conninfo);
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "dlock bench: floor: %s", PQerrorMessage(c));
    PQfinish(c);
    return 69;
  }
  double *lat = malloc(sizeof *lat * (size_t)n);
  const char *vals[1] = {"4242"};
  double t0 = now_us();
  for (int i = 0; lat && i < n; i++) {
    double s = now_us();
    PQclear(PQexecParams(c, "SELECT pg_advisory_lock($1::bigint)", 1, NULL, vals, NULL, NULL, 0));
    PQclear(PQexecParams(c, "SELECT pg_advisory_unlock($1::bigint)", 1, NULL, vals, NULL, NULL, 0));
    lat[i] = now_us() - s;
  }
  if (lat) row("floor (advisory)", lat, n, now_us() - t0, "pg_advisory_lock+unlock, 2 round trips, no fence");
  free(lat);
  PQfinish(c);
  return lat ? 0 : 70;
}

static dlock_client *pg_client(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    fprintf(stderr, "dlock bench: %s\n", dlock_last_error());
    return NULL;
  }
  return c;
}

/* uncontended: acquire + release of one lock on one thread. */
static int pg_uncontended(const char *url, int n) {
  dlock_client *c = pg_client(url);
  if (!c) return 69;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(&m, c, "dlock-bench:uncontended", &mo);
  double *lat = malloc(sizeof *lat * (size_t)n);
  double t0 = now_us();
  int i = 0;
  for (; rc == 0 && lat && i < n; i++) {
    double s = now_us();
    rc = dlock_mutex_acquire(m, 0);
    if (rc == 0) rc = dlock_mutex_release(m);
    lat[i] = now_us() - s;
  }
  if (rc != 0)
    fprintf(stderr, "dlock bench: uncontended: %s\n", dlock_last_error());
  else if (lat)
    row("uncontended", lat, n, now_us() - t0, "acquire+release, lease table, fenced");
  free(lat);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return rc ? 70 : 0;
}

/* What the contended processes share: an unguarded counter, the moment the
 * last holder was about to release, and each acquire's hand-off time. */
typedef struct shared {
  long counter;
  double released_at;
  double handoff[];
} shared;

static int contended_child(const char *url, const char *conninfo, int advisory, shared *sh, int slot, int n) {
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  PGconn *pc = NULL;
  const char *vals[1] = {"4243"};
  if (advisory) {
    pc = PQconnectdb(conninfo);
    if (PQstatus(pc) != CONNECTION_OK) return 69;
  } else {
    if (!(c = pg_client(url))) return 69;
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 30000;
    if (dlock_mutex_new(&m, c, "dlock-bench:contended", &mo) != 0) return 70;
  }
  for (int i = 0; i < n; i++) {
    if (advisory) {
      PGresult *r = PQexecParams(pc, "SELECT pg_advisory_lock($1::bigint)", 1, NULL, vals, NULL, NULL, 0);
      int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
      PQclear(r);
      if (!ok) return 70;
    } else if (dlock_mutex_acquire(m, 60000) != 0) {
      fprintf(stderr, "dlock bench: contended: %s\n", dlock_last_error());
      return 70;
    }
    double got = now_us();
    sh->handoff[slot * n + i] = sh->released_at > 0 ? got - sh->released_at : -1;
    long v = sh->counter; /* unguarded read-modify-write: exact only under the lock */
    usleep(50);
    sh->counter = v + 1;
    sh->released_at = now_us();
    if (advisory)
      PQclear(PQexecParams(pc, "SELECT pg_advisory_unlock($1::bigint)", 1, NULL, vals, NULL, NULL, 0));
    else if (dlock_mutex_release(m) != 0)
      return 70;
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  PQfinish(pc);
  return 0;
}

/* contended: 'procs' processes on one lock, hand-off latency (from just
 * before a release to the next holder's acquire returning) and the count. */
static int pg_contended(const char *url, const char *conninfo, int advisory, int procs, int n) {
  size_t size = sizeof(shared) + sizeof(double) * (size_t)(procs * n);
  shared *sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 70;
  memset(sh, 0, size);
  fflush(NULL);
  pid_t kids[8];
  double t0 = now_us();
  int ok = 1;
  for (int i = 0; i < procs; i++) {
    kids[i] = fork();
    if (kids[i] == 0) _exit(contended_child(url, conninfo, advisory, sh, i, n));
    if (kids[i] < 0) ok = 0;
  }
  for (int i = 0; i < procs; i++) {
    int st;
    if (kids[i] <= 0 || waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  double total = now_us() - t0;
  int m = 0;
  for (int i = 0; i < procs * n; i++)
    if (sh->handoff[i] >= 0) sh->handoff[m++] = sh->handoff[i];
  char note[160];
  int exact = sh->counter == (long)procs * n;
  snprintf(note, sizeof note, "%d processes; hand-off latency; counter %ld of %d: %s", procs, sh->counter, procs * n,
           exact ? "exact" : "NOT EXACT");
  row(advisory ? "contended floor" : "contended", sh->handoff, m, total, note);
  munmap(sh, size);
  return ok && exact ? 0 : 1;
}

static int bench_pg(const char *url, int quick) {
  char conninfo[2048];
  libpq_url(url, conninfo, sizeof conninfo);
  char shown[512];
  dlock_url_redact(url, shown, sizeof shown);
  printf("dlock bench: PostgreSQL %s%s\n", shown, quick ? " (--quick)" : "");
  printf("%-18s %7s %10s %9s %9s  %s\n", "scenario", "ops", "ops/s", "p50 us", "p99 us", "");
  fflush(stdout);
  int n = quick ? 200 : 5000, k = quick ? 10 : 200;
  int rc = pg_floor(conninfo, n);
  if (!rc) rc = pg_uncontended(url, n);
  if (!rc) rc = pg_contended(url, conninfo, 1, 4, k);
  if (!rc) rc = pg_contended(url, conninfo, 0, 4, k);
  return rc;
}
#endif /* DLOCK_WITH_POSTGRES */

int bench_pg_main(int argc, char **argv) {
  const char *url = NULL;
  int quick = 0, other = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
      url = argv[++i];
    else if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else
      other = i;
  }
  const char *kind = url != NULL ? dlock_url_backend(url) : NULL;
  if (kind == NULL || strcmp(kind, "PostgreSQL") != 0) return -1;
  if (other) {
    fprintf(stderr,
            "dlock-bench: '%s': on PostgreSQL, dlock bench takes --url and --quick only; "
            "see 'dlock bench --help'\n",
            argv[other]);
    return 64;
  }
#ifdef DLOCK_WITH_POSTGRES
  return bench_pg(url, quick);
#else
  fprintf(stderr, "dlock-bench: this dlock-bench was built without the PostgreSQL backend "
                  "(-DDLOCK_WITH_POSTGRES=ON, libpq-dev)\n");
  return 64;
#endif
}
