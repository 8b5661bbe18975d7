/*
 * sc_redlock.c - Redlock: an uncontended acquire(try once)+release cycle on
 * 3 and on 5 independent local redis-servers (started here, stopped by PID)
 * next to the same cycle on one of them alone (redis://), in alternating
 * blocks of the same run. The target (issue 8): the 5-node cycle costs at
 * most 2x the single-node cycle: the nodes are asked in parallel, and the
 * fence write-back is the one extra round trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h>

#include "bench.h"

#define NODES 5
#define BLOCK 200

typedef struct rl_server {
  pid_t pid;
  int port;
  char dir[64];
} rl_server;

static int rl_start(rl_server *s) {
  snprintf(s->dir, sizeof s->dir, "/tmp/dlock-bench-rl.XXXXXX");
  if (!mkdtemp(s->dir)) return -1;
  for (int attempt = 0; attempt < 20; attempt++) {
    s->port = bench_free_port();
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int devnull = open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
      }
      execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", s->dir, (char *)NULL);
      _exit(127);
    }
    s->pid = pid;
    bench_track_child(pid);
    for (int i = 0; i < 100; i++) {
      bench_sleep_ms(20);
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        bench_untrack_child(pid);
        s->pid = 0;
        break;
      }
      struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
      redisContext *ctx = redisConnectWithTimeout("127.0.0.1", s->port, tv);
      int ok = 0;
      if (ctx && !ctx->err) {
        /* Ours, not a server another run started on the port meanwhile. */
        redisReply *r = redisCommand(ctx, "INFO server");
        const char *id = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
        ok = id && atol(id + strlen("process_id:")) == (long)pid;
        freeReplyObject(r);
      }
      redisFree(ctx);
      if (ok) return 0;
    }
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      bench_untrack_child(s->pid);
      s->pid = 0;
    }
  }
  return -1;
}

static void rl_stop(rl_server *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    bench_untrack_child(s->pid);
    s->pid = 0;
  }
  if (s->dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0) { /* a leftover temp dir is harmless */
    }
    s->dir[0] = '\0';
  }
}

typedef struct target {
  const char *impl;
  dlock_client *c;
  dlock_mutex *m;
  bench_samples s;
} target;

static int open_target(target *t, const char *impl, const char *url, size_t count) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  t->impl = impl;
  if (dlock_client_new(&t->c, &o) != 0 || dlock_mutex_new(&t->m, t->c, "bench:redlock", &mo) != 0 ||
      bench_samples_init(&t->s, count) != 0) {
    fprintf(stderr, "dlock-bench: redlock scenario, %s: %s\n", impl, dlock_last_error());
    return -1;
  }
  return 0;
}

static int cycle(target *t) {
  int64_t t0 = bench_now_ns();
  int rc = dlock_mutex_acquire(t->m, 0);
  if (rc == 0) rc = dlock_mutex_release(t->m);
  int64_t t1 = bench_now_ns();
  if (rc != 0) {
    fprintf(stderr, "dlock-bench: redlock cycle (%s): %s: %s\n", t->impl, dlock_err_name(rc), dlock_mutex_errmsg(t->m));
    return -1;
  }
  bench_samples_add(&t->s, t1 - t0);
  return 0;
}

bench_status bench_scenario_redlock(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 600 : 10000;
  int64_t max_ns = (quick ? 2 : 30) * 1000000000LL;
  rl_server srv[NODES];
  memset(srv, 0, sizeof srv);
  bench_status status = BENCH_OK;
  target t[3];
  memset(t, 0, sizeof t);
  for (int i = 0; i < NODES; i++)
    if (rl_start(&srv[i]) != 0) {
      fprintf(stderr, "dlock-bench: redlock scenario: cannot start redis-server %d\n", i + 1);
      status = BENCH_UNAVAILABLE;
      goto done;
    }
  char one[64], three[160], five[256];
  snprintf(one, sizeof one, "redis://127.0.0.1:%d", srv[0].port);
  snprintf(three, sizeof three, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", srv[0].port, srv[1].port,
           srv[2].port);
  snprintf(five, sizeof five, "%s,127.0.0.1:%d,127.0.0.1:%d", three, srv[3].port, srv[4].port);
  if (open_target(&t[0], "dlock 1 node", one, count) || open_target(&t[1], "dlock redlock 3", three, count) ||
      open_target(&t[2], "dlock redlock 5", five, count)) {
    status = BENCH_FAILED;
    goto done;
  }
  for (int i = 0; i < 100 && status == BENCH_OK; i++)
    for (int k = 0; k < 3; k++)
      if (cycle(&t[k]) != 0) status = BENCH_FAILED;
  for (int k = 0; k < 3; k++) t[k].s.count = 0; /* warm-up not counted */
  bench_progress("%zu cycles each: one node, Redlock on 3, Redlock on 5, in blocks of %d", count, BLOCK);
  int64_t start = bench_now_ns();
  for (int round = 0; status == BENCH_OK && t[2].s.count < count && bench_now_ns() - start < max_ns && round < 100000;
       round++)
    for (int k = 0; k < 3 && status == BENCH_OK; k++)
      for (int i = 0; i < BLOCK && status == BENCH_OK; i++)
        if (cycle(&t[k]) != 0) status = BENCH_FAILED;
  if (status != BENCH_OK) goto done;
  double p50[3];
  for (int k = 0; k < 3; k++) {
    char note[64];
    snprintf(note, sizeof note, "%zu cycles", t[k].s.count);
    p50[k] = bench_samples_pct_us(&t[k].s, 50);
    bench_row("redlock", t[k].impl, "cycle p50", p50[k], "us", note);
    bench_row("redlock", t[k].impl, "cycle p99", bench_samples_pct_us(&t[k].s, 99), "us", "");
    bench_row("redlock", t[k].impl, "cycle p50 / 1 node", p50[0] > 0 ? p50[k] / p50[0] : 0, "x",
              k ? "3 rounds (acquire, fence write-back, release) vs 2" : "");
  }
  char detail[128];
  snprintf(detail, sizeof detail, "5-node p50 %.0f us vs 1-node %.0f us (%.2fx)", p50[2], p50[0],
           p50[0] > 0 ? p50[2] / p50[0] : 0);
  bench_target("redlock", "5-node cycle <= 2x one node", p50[0] > 0 && p50[2] <= 2 * p50[0], detail);
done:
  for (int k = 0; k < 3; k++) {
    dlock_mutex_free(t[k].m);
    dlock_client_free(t[k].c);
    bench_samples_free(&t[k].s);
  }
  for (int i = 0; i < NODES; i++) rl_stop(&srv[i]);
  return status;
}
