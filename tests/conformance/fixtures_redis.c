/*
 * fixtures_redis.c - the Redis deployments of the conformance suite: one
 * server behind the fault proxy, one TLS server, a Sentinel set (master,
 * replica, three sentinels), a 3-master Cluster, Redlock over 5 servers
 * (each behind a fault proxy for the lost replies).
 * A space is a key prefix. Freezing stops every data server with SIGSTOP
 * (Sentinel: the master and its replica, so that no failover can happen).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "harness.h"
#include "harness_cluster.h"
#include "harness_proxy.h"
#include "harness_sentinel.h"

#define REDIS_CAPS                                                                                           \
  (CONF_FORCE_NOTIFY | CONF_QUEUE | CONF_DEADLINE | CONF_FENCE | CONF_SEMAPHORE | CONF_RWLOCK | CONF_LATCH | \
   CONF_SCHED | CONF_GUARD | CONF_ADMIN | CONF_JOBS | CONF_WATCH_NOTIFY)

/* The servers a fixture freezes, and its URL. */
static th_redis *frozen_set[TH_CLUSTER_MAX];
static int nfrozen;
static char url[1024];

static dlock_client *client_at(const char *at, const char *space, int timeout_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = at;
  o.key_prefix = space;
  o.command_timeout_ms = timeout_ms;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static dlock_client *url_client(const char *space) { return client_at(url, space, 0); }
static const char *url_state(void) { return url; }
static void url_adopt(const char *state) { snprintf(url, sizeof url, "%s", state); }

static void signal_set(int sig) {
  for (int i = 0; i < nfrozen; i++) kill(frozen_set[i]->pid, sig);
}
static void freeze_set(void) { signal_set(SIGSTOP); }
static void thaw_set(void) { signal_set(SIGCONT); }

/* ---- One server, behind the fault proxy ---- */

static th_redis one;
static fp_proxy *fp;

static int one_start(char *why, size_t len) {
  if (th_proxy_start(&one, &fp) != 0) {
    snprintf(why, len, "redis-server or the fault proxy did not start");
    return 0;
  }
  snprintf(url, sizeof url, "%s", one.url);
  frozen_set[0] = &one;
  nfrozen = 1;
  return 1;
}

static void one_stop(void) { th_proxy_stop(&one, fp); }

static dlock_client *one_proxy_client(const char *space) {
  return client_at(fp_url(fp), space, (int)(2000 * th_time_factor()));
}

/* Every command of a lock names its key. */
static void one_drop(conf_call call, const char *name) {
  (void)call;
  fp_pass(fp);
  fp_drop_reply(fp, name, 1);
}

static int one_dropped(void) { return fp_dropped(fp); }

const conf_fixture conf_fx_redis = {
    .name = "redis",
    .caps = REDIS_CAPS,
    .start = one_start,
    .stop = one_stop,
    .client = url_client,
    .state = url_state,
    .adopt = url_adopt,
    .proxy_client = one_proxy_client,
    .drop_next_reply = one_drop,
    .dropped = one_dropped,
    .freeze = freeze_set,
    .thaw = thaw_set,
    .kill_free_ms = 2000,
};

/* ---- TLS ---- */

static th_redis tls;
static char certs[256];

static int tls_start(char *why, size_t len) {
  snprintf(certs, sizeof certs, "%s/dlock-conf-certs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(certs) || th_make_certs(certs) != 0) {
    snprintf(why, len, "cannot make certificates with openssl in %s", certs);
    return 0;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    int port = th_free_port();
    char extra[1500];
    snprintf(extra, sizeof extra,
             "tls-port %d\ntls-cert-file %s/server.crt\ntls-key-file %s/server.key\n"
             "tls-ca-cert-file %s/ca.crt\ntls-auth-clients no\n",
             port, certs, certs, certs);
    if (th_redis_start(&tls, extra) == 0) {
      snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/ca.crt", port, certs);
      frozen_set[0] = &tls;
      nfrozen = 1;
      return 1;
    }
  }
  snprintf(why, len, "redis-server with TLS did not start (built without TLS?)");
  return 0;
}

static void tls_stop(void) {
  th_redis_stop(&tls);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", certs);
}

const conf_fixture conf_fx_tls = {
    .name = "tls",
    .caps = REDIS_CAPS,
    .start = tls_start,
    .stop = tls_stop,
    .client = url_client,
    .state = url_state,
    .adopt = url_adopt,
    .freeze = freeze_set,
    .thaw = thaw_set,
    .kill_free_ms = 2000,
};

/* ---- Sentinel ---- */

static th_sentinel_set sentinels;

static int sentinel_start(char *why, size_t len) {
  if (th_sentinel_set_start(&sentinels, "conf") != 0) {
    snprintf(why, len, "the Sentinel set did not start");
    return 0;
  }
  snprintf(url, sizeof url, "%s", sentinels.url);
  frozen_set[0] = &sentinels.master;
  frozen_set[1] = &sentinels.replica;
  nfrozen = 2;
  return 1;
}

static void sentinel_stop(void) { th_sentinel_set_stop(&sentinels); }

static void sentinel_thaw(void) {
  thaw_set();
  if (th_sentinel_wait_master(&sentinels, sentinels.master.port, 30000 * th_time_factor()) != 0)
    fprintf(stderr, "conformance: after the thaw, the sentinels do not agree on the master\n");
}

const conf_fixture conf_fx_sentinel = {
    .name = "sentinel",
    .caps = REDIS_CAPS,
    .start = sentinel_start,
    .stop = sentinel_stop,
    .client = url_client,
    .state = url_state,
    .adopt = url_adopt,
    .freeze = freeze_set,
    .thaw = sentinel_thaw,
    .kill_free_ms = 2000,
};

/* ---- Cluster ---- */

static th_cluster cluster;

static int cluster_start(char *why, size_t len) {
  if (th_cluster_start(&cluster, 3, 0) != 0) {
    snprintf(why, len, "the Redis Cluster did not start");
    return 0;
  }
  snprintf(url, sizeof url, "%s", cluster.url);
  for (int i = 0; i < cluster.n; i++) frozen_set[i] = &cluster.node[i];
  nfrozen = cluster.n;
  return 1;
}

static void cluster_stop(void) { th_cluster_stop(&cluster); }

static void cluster_thaw(void) {
  thaw_set();
  if (th_cluster_wait_ok(&cluster, NULL, 30000 * th_time_factor()) != 0)
    fprintf(stderr, "conformance: after the thaw, the cluster is not ok\n");
}

const conf_fixture conf_fx_cluster = {
    .name = "cluster",
    .caps = REDIS_CAPS,
    .start = cluster_start,
    .stop = cluster_stop,
    .client = url_client,
    .state = url_state,
    .adopt = url_adopt,
    .freeze = freeze_set,
    .thaw = cluster_thaw,
    .kill_free_ms = 2000,
};

/* ---- Redlock ---- */

#define REDLOCK_NODES 5
static th_redis nodes[REDLOCK_NODES];
static fp_proxy *node_fp[REDLOCK_NODES]; /* one fault proxy in front of each node */
static char proxied_url[1024];

static void redlock_stop(void) {
  for (int i = 0; i < REDLOCK_NODES; i++) fp_stop(node_fp[i]);
  th_redis_stop_n(nodes, REDLOCK_NODES);
}

static int redlock_start(char *why, size_t len) {
  if (th_redis_start_n(nodes, REDLOCK_NODES, NULL) != 0) {
    snprintf(why, len, "%d redis-servers did not start", REDLOCK_NODES);
    return 0;
  }
  th_redlock_url(nodes, REDLOCK_NODES, url, sizeof url);
  int at = snprintf(proxied_url, sizeof proxied_url, "redlock://");
  for (int i = 0; i < REDLOCK_NODES; i++) {
    if (fp_start(&node_fp[i], nodes[i].port) != 0 || th_proxy_cache_scripts(node_fp[i]) != 0) {
      redlock_stop();
      snprintf(why, len, "the fault proxy in front of node %d did not start", i + 1);
      return 0;
    }
    at += snprintf(proxied_url + at, sizeof proxied_url - (size_t)at, "%s127.0.0.1:%d", i ? "," : "",
                   fp_port(node_fp[i]));
    frozen_set[i] = &nodes[i];
  }
  nfrozen = REDLOCK_NODES;
  return 1;
}

static dlock_client *redlock_proxy_client(const char *space) {
  return client_at(proxied_url, space, (int)(2000 * th_time_factor()));
}

/* Every node runs the command and its reply is lost. */
static void redlock_drop(conf_call call, const char *name) {
  (void)call;
  for (int i = 0; i < REDLOCK_NODES; i++) {
    fp_pass(node_fp[i]);
    fp_drop_reply(node_fp[i], name, 1);
  }
}

static int redlock_dropped(void) {
  int n = 0;
  for (int i = 0; i < REDLOCK_NODES; i++) n += fp_dropped(node_fp[i]);
  return n;
}

/* Independent nodes keep no shared count or queue: no semaphore, read-write
 * lock or latch (docs/redlock.md, docs/semaphore.md, docs/latch.md). */
const conf_fixture conf_fx_redlock = {
    .name = "redlock",
    .caps = CONF_FORCE_NOTIFY | CONF_QUEUE | CONF_DEADLINE | CONF_FENCE | CONF_SCHED | CONF_GUARD | CONF_ADMIN |
            CONF_WATCH_NOTIFY,
    .start = redlock_start,
    .stop = redlock_stop,
    .client = url_client,
    .state = url_state,
    .adopt = url_adopt,
    .proxy_client = redlock_proxy_client,
    .drop_next_reply = redlock_drop,
    .dropped = redlock_dropped,
    .freeze = freeze_set,
    .thaw = thaw_set,
    .kill_free_ms = 2000,
};
