/*
 * harness_cluster.c - a private Redis Cluster for tests (see harness_cluster.h).
 */
#include "harness_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

int th_cluster_start(th_cluster *c, int masters, int replicas) {
  memset(c, 0, sizeof *c);
  int total = masters * (1 + replicas);
  if (masters < 3 || total > TH_CLUSTER_MAX) {
    fprintf(stderr, "harness: a cluster needs 3..%d nodes\n", TH_CLUSTER_MAX);
    return -1;
  }
  c->masters = masters;
  c->replicas = replicas;
  for (int i = 0; i < total; i++) {
    /* The bus port is chosen too: port + 10000 may be above 65535 or taken. */
    char conf[512];
    int started = -1;
    for (int attempt = 0; attempt < 3 && started != 0; attempt++) { /* a fresh bus port each time */
      snprintf(conf, sizeof conf,
               "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout %ld\n"
               "cluster-port %d\ncluster-replica-validity-factor 0\n",
               1000 * th_time_factor(), th_free_port());
      started = th_redis_start(&c->node[i], conf);
      if (started != 0) th_redis_stop(&c->node[i]);
    }
    if (started != 0) {
      fprintf(stderr, "harness: cluster node %d did not start\n", i);
      th_cluster_stop(c);
      return -1;
    }
    c->n++;
  }
  char cmd[2048];
  size_t off = (size_t)snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
  for (int i = 0; i < total; i++)
    off += (size_t)snprintf(cmd + off, sizeof cmd - off, " 127.0.0.1:%d", c->node[i].port);
  snprintf(cmd + off, sizeof cmd - off, " --cluster-replicas %d --cluster-yes >%s/create.log 2>&1", replicas,
           c->node[0].dir);
  int st = system(cmd);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "harness: redis-cli --cluster create failed; see %s/create.log\n", c->node[0].dir);
    th_cluster_stop(c);
    return -1;
  }
  off = (size_t)snprintf(c->url, sizeof c->url, "redis-cluster://");
  for (int i = 0; i < masters; i++)
    off += (size_t)snprintf(c->url + off, sizeof c->url - off, "%s127.0.0.1:%d", i ? "," : "", c->node[i].port);
  if (th_cluster_wait_ok(c, NULL, 30000 * th_time_factor()) != 0) {
    fprintf(stderr, "harness: the cluster did not reach cluster_state:ok\n");
    th_cluster_stop(c);
    return -1;
  }
  return 0;
}

void th_cluster_stop(th_cluster *c) {
  for (int i = 0; i < c->n; i++) th_redis_stop(&c->node[i]);
  c->n = 0;
}

int th_cluster_owner(th_cluster *c, const char *key) {
  for (int i = 0; i < c->n; i++) {
    if (c->node[i].pid <= 0) continue;
    char out[256];
    if (th_redis_cli(&c->node[i], out, sizeof out, "EXISTS '%s'", key) == 0 && (out[0] == '0' || out[0] == '1'))
      return i;
  }
  return -1;
}

int th_cluster_wait_ok(th_cluster *c, const char *key, long timeout_ms) {
  long long end = th_now_ms() + timeout_ms;
  while (th_now_ms() < end) {
    int ok = 1;
    for (int i = 0; i < c->n && ok; i++) {
      if (c->node[i].pid <= 0) continue;
      char out[4096];
      ok = th_redis_cli(&c->node[i], out, sizeof out, "CLUSTER INFO") == 0 && strstr(out, "cluster_state:ok");
      /* A replica counts once its initial sync is done. */
      if (ok && th_redis_cli(&c->node[i], out, sizeof out, "INFO replication") == 0 && strstr(out, "role:slave"))
        ok = strstr(out, "master_link_status:up") && strstr(out, "master_sync_in_progress:0");
    }
    /* Every master agrees on the slot owners ("--cluster check" sees no open slots or disagreement). */
    if (ok) {
      for (int i = 0; i < c->n; i++) {
        if (c->node[i].pid <= 0) continue;
        char cmd[600];
        snprintf(cmd, sizeof cmd, "redis-cli --cluster check 127.0.0.1:%d >/dev/null 2>&1", c->node[i].port);
        int st = system(cmd);
        ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        break;
      }
    }
    if (ok && key) {
      int owners = 0;
      for (int i = 0; i < c->n; i++) {
        if (c->node[i].pid <= 0) continue;
        char out[256];
        if (th_redis_cli(&c->node[i], out, sizeof out, "EXISTS '%s'", key) == 0 && (out[0] == '0' || out[0] == '1'))
          owners++;
      }
      ok = owners == 1;
    }
    if (ok) return 0;
    th_sleep_ms(100);
  }
  return -1;
}
