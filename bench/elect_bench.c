/*
 * elect_bench.c - dlock-elect-bench: leader election's two times, per
 * backend, on servers it starts itself (the test harness: redis-server,
 * ZooKeeper, PostgreSQL, three redis-servers for Redlock), repeated, with
 * the median and the spread (docs/PERFORMANCE.md, "Leader election"):
 *
 *   failover  a leader's `dlock elect` is killed with SIGKILL while a
 *             standby's waits: from the kill to the standby's COMMAND
 *             running (its first line read from a pipe). The old term ends
 *             with its lease (ZooKeeper: its session), so this is about
 *             the lease plus the standby's hand-off and fork/exec.
 *   hand-off  through the library: the leader resigns while another
 *             client's campaign waits; from just before the resign to that
 *             campaign returning.
 *
 * Usage: dlock-elect-bench DLOCK_BIN [--rounds N] [--lease-ms MS]
 *                          [--backend redis|zk|pg|redlock]...
 * Prints the load average first. Every server and process it starts is
 * stopped by PID on every exit path. Exit 0, or 1 when a step failed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#ifdef DLOCK_WITH_ZOOKEEPER
#include "harness_zk.h"
#endif
#ifdef DLOCK_WITH_POSTGRES
#include "harness_pg.h"
#endif

#define MAX_ROUNDS 100

static const char *dlock_bin;
static int rounds = 5;
static long lease_ms = 2000;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void report(const char *backend, const char *what, double *v, int n) {
  if (n == 0) {
    printf("| %s | %s | - | - | 0 |\n", backend, what);
    return;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  printf("| %s | %s | %.1f ms | %.1f-%.1f ms | %d |\n", backend, what, med, v[0], v[n - 1], n);
  fflush(stdout);
}

/* ---- hand-off, through the library ---- */

typedef struct waiter {
  dlock_election *e;
  int rc;
  double at;
} waiter;

static void *campaign_main(void *arg) {
  waiter *w = arg;
  w->rc = dlock_election_campaign(w->e, "standby", 30000);
  w->at = now_ms();
  return NULL;
}

static dlock_client *client_of(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) fprintf(stderr, "client %s: %s\n", url, dlock_last_error());
  return c;
}

/* Wait (bounded) until 'n' candidates wait at 'name', where the backend
 * counts them; a fixed 300 ms where it does not. */
static void wait_waiters(dlock_client *c, const char *name, int n) {
  double until = now_ms() + 10000;
  while (now_ms() < until) {
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    if (dlock_lock_info_get(c, name, &info) != 0) break;
    if (info.waiters >= n) return;
    usleep(5000);
  }
  usleep(300000);
}

static int handoff(const char *backend, const char *url) {
  double v[MAX_ROUNDS];
  int n = 0, rc = 0;
  dlock_client *a = client_of(url), *b = client_of(url);
  dlock_election *ea = NULL, *eb = NULL;
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = lease_ms;
  if (!a || !b || dlock_election_new(&ea, a, "bench-handoff", &o) || dlock_election_new(&eb, b, "bench-handoff", &o)) {
    fprintf(stderr, "%s: %s\n", backend, dlock_last_error());
    rc = 1;
    goto out;
  }
  for (int i = 0; i < rounds * 4 && i < MAX_ROUNDS; i++) {
    if (dlock_election_campaign(ea, "leader", 10000) != 0) {
      fprintf(stderr, "%s: campaign: %s\n", backend, dlock_last_error());
      rc = 1;
      break;
    }
    waiter w = {eb, 0, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, campaign_main, &w) != 0) {
      rc = 1;
      break;
    }
    wait_waiters(a, "bench-handoff", 1);
    double t0 = now_ms();
    int r = dlock_election_resign(ea);
    if (r) dlock_election_cancel(eb);
    pthread_join(t, NULL);
    if (r || w.rc) {
      fprintf(stderr, "%s: resign %d, campaign %d: %s\n", backend, r, w.rc, dlock_last_error());
      rc = 1;
      break;
    }
    v[n++] = w.at - t0;
    dlock_election_resign(eb);
  }
out:
  report(backend, "resign -> the waiting campaign returns", v, n);
  dlock_election_free(ea);
  dlock_election_free(eb);
  dlock_client_free(a);
  dlock_client_free(b);
  return rc;
}

/* ---- failover, through dlock elect ---- */

/* `dlock elect NAME --lease L -- sh -c 'echo started; exec sleep 30'` with
 * its stdout on a pipe ('*fd'). */
static pid_t spawn_elect(const char *url, const char *value, int *fd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    setenv("DLOCK_URL", url, 1);
    char lease[32], grace[32];
    snprintf(lease, sizeof lease, "%ldms", lease_ms);
    snprintf(grace, sizeof grace, "%ldms", lease_ms / 4);
    execl(dlock_bin, "dlock", "elect", "bench-failover", "--value", value, "--lease", lease, "--grace", grace, "--",
          "sh", "-c", "echo started; exec sleep 30", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  *fd = p[0];
  return pid;
}

/* 0 when a line came from 'fd' within 'ms'. */
static int read_started(int fd, long ms) {
  char buf[64];
  double until = now_ms() + ms;
  while (now_ms() < until) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0) continue;
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0) return -1;
    if (memchr(buf, '\n', (size_t)r)) return 0;
  }
  return -1;
}

static void stop(pid_t pid, int sig) {
  if (pid <= 0) return;
  kill(pid, sig);
  if (th_wait(pid, 15000) < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
}

static int failover(const char *backend, const char *url) {
  double v[MAX_ROUNDS];
  int n = 0, rc = 0;
  dlock_client *c = client_of(url);
  if (!c) return 1;
  for (int i = 0; i < rounds && i < MAX_ROUNDS; i++) {
    int fa = -1, fb = -1;
    pid_t a = spawn_elect(url, "a", &fa), b = -1;
    if (a < 0 || read_started(fa, 30000) != 0) {
      fprintf(stderr, "%s: the first leader's command did not start\n", backend);
      rc = 1;
    } else if ((b = spawn_elect(url, "b", &fb)) < 0) {
      rc = 1;
    } else {
      wait_waiters(c, "bench-failover", 1);
      double t0 = now_ms();
      kill(a, SIGKILL);
      if (read_started(fb, 10 * lease_ms + 30000) != 0) {
        fprintf(stderr, "%s: the standby's command did not start\n", backend);
        rc = 1;
      } else {
        v[n++] = now_ms() - t0;
      }
    }
    stop(a, SIGKILL);
    stop(b, SIGTERM); /* it resigns */
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    if (rc) break;
    /* The killed leader's command ends at its deadline (its guardian):
     * within the lease. */
    usleep((useconds_t)lease_ms * 1000);
  }
  report(backend, "leader killed -9 -> the standby's command runs", v, n);
  dlock_client_free(c);
  return rc;
}

static int bench(const char *backend, const char *url) {
  int rc = handoff(backend, url);
  rc |= failover(backend, url);
  return rc;
}

static int want(const char *const *l, int k, const char *b) {
  for (int i = 0; i < k; i++)
    if (!strcmp(l[i], b)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *only[8];
  int n_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lease-ms") && i + 1 < argc)
      lease_ms = atol(argv[++i]);
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc && n_only < 8)
      only[n_only++] = argv[++i];
    else if (argv[i][0] != '-' && !dlock_bin)
      dlock_bin = argv[i];
    else {
      fprintf(stderr, "usage: %s DLOCK_BIN [--rounds N] [--lease-ms MS] [--backend redis|zk|pg|redlock]...\n", argv[0]);
      return 2;
    }
  }
  if (!dlock_bin || rounds < 1 || rounds > MAX_ROUNDS / 4 || lease_ms < 500) {
    fprintf(stderr, "%s: DLOCK_BIN is needed; --rounds 1..%d; --lease-ms >= 500\n", argv[0], MAX_ROUNDS / 4);
    return 2;
  }
  double load[3];
  if (getloadavg(load, 3) == 3)
    printf("load average %.2f %.2f %.2f, %ld CPUs; lease %ld ms; %d failovers and %d hand-offs per backend\n\n",
           load[0], load[1], load[2], sysconf(_SC_NPROCESSORS_ONLN), lease_ms, rounds, rounds * 4);
  printf("| backend | what | median | min-max | n |\n| --- | --- | --- | --- | --- |\n");
  int rc = 0;
#define WANT(b) (n_only == 0 || want(only, n_only, b))
  if (WANT("redis")) {
    th_redis r;
    if (th_redis_start(&r, NULL) == 0) {
      rc |= bench("redis", r.url);
      th_redis_stop(&r);
    } else {
      rc = 1;
    }
  }
#ifdef DLOCK_WITH_ZOOKEEPER
  if (WANT("zk")) {
    th_zk z;
    char why[256];
    if (th_zk_suite_start(&z, 200, why, sizeof why)) {
      char url[256];
      /* The session is the lease on ZooKeeper. */
      snprintf(url, sizeof url, "zk://%s/bench?session_timeout=%ldms", z.hostport, lease_ms);
      rc |= bench("zk", url);
      th_zk_stop(&z);
    } else {
      fprintf(stderr, "zk: %s\n", why);
      rc = 1;
    }
  }
#endif
#ifdef DLOCK_WITH_POSTGRES
  if (WANT("pg")) {
    th_pg p;
    char why[256];
    if (th_pg_suite_start(&p, why, sizeof why)) {
      char url[700];
      snprintf(url, sizeof url, "%s?dlock_schema=bench", p.url);
      rc |= bench("pg-lease", url);
      th_pg_stop(&p);
    } else {
      fprintf(stderr, "pg: %s\n", why);
      rc = 1;
    }
  }
#endif
  if (WANT("redlock")) {
    th_redis r[3];
    if (th_redis_start_n(r, 3, NULL) == 0) {
      char url[1024];
      th_redlock_url(r, 3, url, sizeof url);
      rc |= bench("redlock (3)", url);
      th_redis_stop_n(r, 3);
    } else {
      rc = 1;
    }
  }
  return rc;
}
