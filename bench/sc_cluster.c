/*
 * sc_cluster.c - dlock on a 3-master Redis Cluster next to one standalone
 * server, both started here with the same settings (no pinning): the
 * uncontended acquire+release cycle (alternating blocks, so that drift hits
 * both alike; target: the cluster within 10% of the single node, since a
 * routed command costs no extra round trip once the slot map is known), and
 * contended hand-offs between 4 threads with a client each. Every server is
 * stopped by PID, also when interrupted (tracked as children).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#include "bench.h"

#define NODES 4 /* node 0: standalone; 1..3: the cluster's masters */
#define BLOCK 500

typedef struct node {
  pid_t pid;
  int port;
} node;

static node nodes[NODES];
static char workdir[256];

static int ping(int port) {
  struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
  redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
  int ok = 0;
  if (ctx && !ctx->err) {
    redisReply *r = redisCommand(ctx, "PING");
    ok = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
  }
  redisFree(ctx);
  return ok;
}

static int start_node_once(int i, int cluster) {
  char dir[320], port_s[16], bus_s[16], log[360];
  snprintf(dir, sizeof dir, "%s/n%d", workdir, i);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -1;
  nodes[i].port = bench_free_port();
  snprintf(port_s, sizeof port_s, "%d", nodes[i].port);
  snprintf(bus_s, sizeof bus_s, "%d", bench_free_port());
  snprintf(log, sizeof log, "%s/redis.log", dir);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    if (cluster)
      execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--dir", dir, "--logfile", log,
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--maxmemory-policy", "noeviction",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", bus_s, (char *)NULL);
    else
      execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--dir", dir, "--logfile", log,
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--maxmemory-policy", "noeviction", (char *)NULL);
    _exit(127);
  }
  nodes[i].pid = pid;
  bench_track_child(pid);
  for (int t = 0; t < 100; t++) {
    bench_sleep_ms(50);
    if (waitpid(pid, NULL, WNOHANG) == pid) { /* exited: its port was taken */
      bench_untrack_child(pid);
      nodes[i].pid = 0;
      return -1;
    }
    if (ping(nodes[i].port)) return 0;
  }
  return -1;
}

/* Ports found free may be taken before redis-server binds them: try a few. */
static int start_node(int i, int cluster) {
  for (int attempt = 0; attempt < 5; attempt++) {
    if (start_node_once(i, cluster) == 0) return 0;
    if (nodes[i].pid > 0) {
      kill(nodes[i].pid, SIGKILL);
      waitpid(nodes[i].pid, NULL, 0);
      bench_untrack_child(nodes[i].pid);
      nodes[i].pid = 0;
    }
  }
  return -1;
}

static void stop_all(void) {
  for (int i = 0; i < NODES; i++) {
    if (nodes[i].pid <= 0) continue;
    kill(nodes[i].pid, SIGKILL);
    waitpid(nodes[i].pid, NULL, 0);
    bench_untrack_child(nodes[i].pid);
    nodes[i].pid = 0;
  }
  if (workdir[0]) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) fprintf(stderr, "dlock-bench: could not remove %s\n", workdir);
    workdir[0] = '\0';
  }
}

static int setup(char *cluster_url, size_t n, char *single_url, size_t m) {
  snprintf(workdir, sizeof workdir, "/tmp/dlock-bench-cluster.XXXXXX");
  if (!mkdtemp(workdir)) {
    workdir[0] = '\0';
    return -1;
  }
  for (int i = 0; i < NODES; i++)
    if (start_node(i, i > 0) != 0) {
      fprintf(stderr, "dlock-bench: redis-server %d did not start (see %s)\n", i, workdir);
      return -1;
    }
  char cmd[600];
  snprintf(cmd, sizeof cmd,
           "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d --cluster-yes >%s/create.log 2>&1",
           nodes[1].port, nodes[2].port, nodes[3].port, workdir);
  if (system(cmd) != 0) {
    fprintf(stderr, "dlock-bench: redis-cli --cluster create failed (see %s/create.log)\n", workdir);
    return -1;
  }
  snprintf(cmd, sizeof cmd, "redis-cli --cluster check 127.0.0.1:%d >/dev/null 2>&1", nodes[1].port);
  int ok = 0;
  for (int t = 0; t < 200 && !ok; t++) {
    ok = system(cmd) == 0;
    if (!ok) bench_sleep_ms(100);
  }
  if (!ok) return -1;
  snprintf(cluster_url, n, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", nodes[1].port, nodes[2].port);
  snprintf(single_url, m, "redis://127.0.0.1:%d", nodes[0].port);
  return 0;
}

/* ---- Contended: 4 threads, a client each, one name ---- */

#define CONTENDERS 4

typedef struct contender {
  const char *url;
  atomic_long *done;
  long target;
  int64_t deadline_ns;
  long counter_errors;
  int rc;
} contender;

static long shared_counter;

static void *contend(void *arg) {
  contender *c = arg;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = c->url;
  dlock_client *cl = NULL;
  dlock_mutex *m = NULL;
  if ((c->rc = dlock_client_new(&cl, &o)) != 0 || (c->rc = dlock_mutex_new(&m, cl, "bench:cluster:contended", NULL)))
    goto out;
  while (atomic_load(c->done) < c->target && bench_now_ns() < c->deadline_ns) {
    if ((c->rc = dlock_mutex_acquire(m, 30000)) != 0) break;
    long v = __atomic_load_n(&shared_counter, __ATOMIC_RELAXED);
    __atomic_store_n(&shared_counter, v + 1, __ATOMIC_RELAXED);
    atomic_fetch_add(c->done, 1);
    if ((c->rc = dlock_mutex_release(m)) != 0) break;
  }
out:
  if (c->rc) fprintf(stderr, "dlock-bench: contender: %s\n", dlock_last_error());
  dlock_mutex_free(m);
  dlock_client_free(cl);
  return NULL;
}

static int run_contended(const char *url, const char *impl, long target, int64_t max_ns) {
  atomic_long done = 0;
  shared_counter = 0;
  contender cs[CONTENDERS];
  pthread_t th[CONTENDERS];
  int64_t t0 = bench_now_ns();
  for (int i = 0; i < CONTENDERS; i++) {
    cs[i] = (contender){url, &done, target, t0 + max_ns, 0, 0};
    pthread_create(&th[i], NULL, contend, &cs[i]);
  }
  int rc = 0;
  for (int i = 0; i < CONTENDERS; i++) {
    pthread_join(th[i], NULL);
    if (cs[i].rc) rc = -1;
  }
  double s = (double)(bench_now_ns() - t0) / 1e9;
  long n = atomic_load(&done);
  char note[96];
  snprintf(note, sizeof note, "%d threads, one client each, %ld acquisitions", CONTENDERS, n);
  bench_row("cluster", impl, "contended acquisitions per second", s > 0 ? (double)n / s : 0, "/s", note);
  if (shared_counter != n) {
    fprintf(stderr, "dlock-bench: %s: counter %ld after %ld acquisitions: exclusion broken\n", impl, shared_counter, n);
    rc = -1;
  }
  return rc;
}

bench_status bench_scenario_cluster(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 2000 : 40000;
  int64_t max_ns = (quick ? 2 : 20) * 1000000000LL;
  char cluster_url[128], single_url[128];
  if (system("command -v redis-cli >/dev/null 2>&1") != 0) {
    bench_progress("no redis-cli: cluster scenario skipped");
    return BENCH_UNAVAILABLE;
  }
  bench_status status = BENCH_OK;
  dlock_client *cc = NULL, *sc = NULL;
  dlock_mutex *cm = NULL, *sm = NULL;
  bench_samples cs = {0}, ss = {0};
  if (setup(cluster_url, sizeof cluster_url, single_url, sizeof single_url) != 0) {
    stop_all();
    return BENCH_FAILED;
  }
  dlock_client_options o;
  dlock_client_options_init(&o);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  o.url = cluster_url;
  if (dlock_client_new(&cc, &o) || dlock_mutex_new(&cm, cc, "bench:uncontended", &mo)) {
    fprintf(stderr, "dlock-bench: cluster: %s\n", dlock_last_error());
    status = BENCH_FAILED;
    goto done;
  }
  o.url = single_url;
  if (dlock_client_new(&sc, &o) || dlock_mutex_new(&sm, sc, "bench:uncontended", &mo)) {
    fprintf(stderr, "dlock-bench: single node: %s\n", dlock_last_error());
    status = BENCH_FAILED;
    goto done;
  }
  if (bench_samples_init(&cs, count) || bench_samples_init(&ss, count)) {
    status = BENCH_FAILED;
    goto done;
  }
  for (int i = 0; i < 200 && status == BENCH_OK; i++)
    if (dlock_mutex_acquire(cm, 0) || dlock_mutex_release(cm) || dlock_mutex_acquire(sm, 0) || dlock_mutex_release(sm))
      status = BENCH_FAILED;
  bench_progress("%zu uncontended cycles each: 3-master cluster and single node, blocks of %d", count, BLOCK);
  double c_busy = 0, s_busy = 0;
  int64_t start = bench_now_ns();
  for (int round = 0; status == BENCH_OK && cs.count < count && bench_now_ns() - start < max_ns && round < 100000;
       round++) {
    for (int which = 0; which < 2 && status == BENCH_OK; which++) {
      dlock_mutex *m = which == 0 ? cm : sm;
      bench_samples *smp = which == 0 ? &cs : &ss;
      int64_t b0 = bench_now_ns();
      for (int i = 0; i < BLOCK && status == BENCH_OK; i++) {
        int64_t t0 = bench_now_ns();
        int rc = dlock_mutex_acquire(m, 0);
        if (rc == 0) rc = dlock_mutex_release(m);
        if (rc != 0) {
          fprintf(stderr, "dlock-bench: cycle: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(m));
          status = BENCH_FAILED;
        }
        bench_samples_add(smp, bench_now_ns() - t0);
      }
      *(which == 0 ? &c_busy : &s_busy) += (double)(bench_now_ns() - b0) / 1e9;
    }
  }
  if (status == BENCH_OK) {
    double c_rate = c_busy > 0 ? (double)cs.count / c_busy : 0, s_rate = s_busy > 0 ? (double)ss.count / s_busy : 0;
    char note[96];
    snprintf(note, sizeof note, "%zu cycles", cs.count);
    bench_row("cluster", "dlock-cluster", "uncontended cycle p50", bench_samples_pct_us(&cs, 50), "us", note);
    bench_row("cluster", "dlock-cluster", "uncontended cycles per second", c_rate, "/s", "");
    snprintf(note, sizeof note, "%zu cycles", ss.count);
    bench_row("cluster", "dlock-single", "uncontended cycle p50", bench_samples_pct_us(&ss, 50), "us", note);
    bench_row("cluster", "dlock-single", "uncontended cycles per second", s_rate, "/s", "");
    char detail[160];
    snprintf(detail, sizeof detail, "cluster %.0f/s vs single node %.0f/s (%.1f%%)", c_rate, s_rate,
             s_rate > 0 ? 100.0 * (c_rate - s_rate) / s_rate : 0);
    bench_target("cluster", "uncontended cycles/s on a 3-master cluster within 10% of one node",
                 s_rate > 0 && c_rate >= 0.9 * s_rate, detail);
    bench_progress("contended: %d threads on one name, cluster then single node", CONTENDERS);
    long target = quick ? 400 : 5000;
    if (run_contended(cluster_url, "dlock-cluster", target, max_ns) != 0 ||
        run_contended(single_url, "dlock-single", target, max_ns) != 0)
      status = BENCH_FAILED;
  }
done:
  bench_samples_free(&cs);
  bench_samples_free(&ss);
  dlock_mutex_free(cm);
  dlock_mutex_free(sm);
  dlock_client_free(cc);
  dlock_client_free(sc);
  stop_all();
  return status;
}
