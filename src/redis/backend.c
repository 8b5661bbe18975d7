/*
 * backend.c - the Redis backend's table of operations (backend.h): the URL
 * and options become a topology (standalone, Sentinel, Cluster, Redlock);
 * the operations themselves live in lock.c, admin.c, check.c and sched.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_TIMEOUT_MS 2000
#define DEFAULT_MAX_CONNECTIONS 64

/* Replace *field with a copy of 'value' when given. */
static int override(char **field, const char *value) {
  if (!value) return 0;
  char *copy = strdup(value);
  if (!copy) return dlock__error(DLOCK_ENOMEM, "out of memory");
  free(*field);
  *field = copy;
  return 0;
}

static int check_timeout(const char *what, int ms) {
  if (ms < 0 || ms > 3600 * 1000)
    return dlock__error(DLOCK_ERANGE, "%s is %d ms; it must be 0 (default) or 1..3600000", what, ms);
  return 0;
}

static int build_endpoint(const dlock_client_options *o, const char *url, dlock__endpoint *ep) {
  if (!url || !*url) url = DEFAULT_URL;
  int rc;
  if ((rc = check_timeout("connect_timeout_ms", o->connect_timeout_ms)) ||
      (rc = check_timeout("command_timeout_ms", o->command_timeout_ms)))
    return rc;
  if ((rc = dlock__url_parse(url, ep))) return rc;
  if ((rc = override(&ep->username, o->username)) || (rc = override(&ep->password, o->password)) ||
      (rc = override(&ep->tls_ca_file, o->tls_ca_file)) || (rc = override(&ep->tls_cert_file, o->tls_cert_file)) ||
      (rc = override(&ep->tls_key_file, o->tls_key_file)) ||
      (rc = override(&ep->tls_server_name, o->tls_server_name))) {
    dlock__endpoint_clear(ep);
    return rc;
  }
  if (o->tls_skip_verify) ep->tls_skip_verify = 1;
  if (!ep->tls && (ep->tls_ca_file || ep->tls_cert_file || ep->tls_key_file || ep->tls_server_name)) {
    char shown[256];
    dlock_url_redact(url, shown, sizeof shown);
    dlock__endpoint_clear(ep);
    return dlock__error(DLOCK_EINVAL,
                        "TLS files or server name given, but the URL '%.200s' is not "
                        "rediss://; use rediss:// for TLS",
                        shown);
  }
  ep->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
  ep->command_timeout_ms = o->command_timeout_ms ? o->command_timeout_ms : DEFAULT_TIMEOUT_MS;
  return 0;
}

/* A redis-sentinel:// URL: the options' credentials are the master's (the
 * sentinels' are in the URL's userinfo); TLS is not offered there yet. */
static int build_sentinel(const dlock_client_options *o, const char *url, dlock__sentinel_url *u) {
  int rc;
  if ((rc = check_timeout("connect_timeout_ms", o->connect_timeout_ms)) ||
      (rc = check_timeout("command_timeout_ms", o->command_timeout_ms)))
    return rc;
  if (o->tls_ca_file || o->tls_cert_file || o->tls_key_file || o->tls_server_name || o->tls_skip_verify)
    return dlock__error(DLOCK_EINVAL, "TLS options given with a redis-sentinel:// URL; dlock speaks to "
                                      "sentinels and their master without TLS only");
  if ((rc = dlock__url_parse_sentinel(url, u))) return rc;
  if ((rc = override(&u->master.username, o->username)) || (rc = override(&u->master.password, o->password))) {
    dlock__sentinel_url_clear(u);
    return rc;
  }
  int connect_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
  int command_ms = o->command_timeout_ms ? o->command_timeout_ms : DEFAULT_TIMEOUT_MS;
  u->master.connect_timeout_ms = connect_ms;
  u->master.command_timeout_ms = command_ms;
  for (int i = 0; i < u->nsentinels; i++) {
    u->sentinel[i].connect_timeout_ms = connect_ms;
    u->sentinel[i].command_timeout_ms = command_ms;
  }
  return 0;
}

/* The WAIT options (the URL's unless the options say otherwise). */
static int set_wait(dlock__topology *t, const dlock_client_options *o, int url_replicas, int url_timeout_ms,
                    int command_timeout_ms) {
  if (o->wait_replicas < 0 || o->wait_replicas > 100)
    return dlock__error(DLOCK_ERANGE, "wait_replicas is %d; it must be 0 (none) or 1..100", o->wait_replicas);
  int replicas = o->wait_replicas ? o->wait_replicas : url_replicas;
  int timeout = o->wait_timeout_ms ? o->wait_timeout_ms : url_timeout_ms;
  if (!timeout) timeout = command_timeout_ms / 2;
  if (replicas && (timeout <= 0 || timeout >= command_timeout_ms))
    return dlock__error(DLOCK_ERANGE,
                        "wait_timeout is %d ms; it must be 1 ms or more and shorter than the "
                        "command timeout (%d ms), which bounds the pipeline that carries the WAIT",
                        timeout, command_timeout_ms);
  t->wait_replicas = replicas;
  t->wait_timeout_ms = timeout;
  return 0;
}

/* Redlock (topo_redlock.c): one endpoint per node, each built as a
 * redis:// URL of its own with the options' overrides. */
static int open_redlock(dlock_client *c, dlock__redis *rc_, const dlock_client_options *o, const char *url) {
  char **urls = NULL;
  int n = 0, rc = 0;
  if (url) {
    if ((rc = dlock__redlock_split(url, &urls, &n))) return rc;
  } else {
    if (o->url)
      return dlock__error(DLOCK_EINVAL, "both 'url' and 'redlock_urls' are set; give the Redlock nodes one way");
    if (!o->redlock_urls || o->redlock_nurls < 3 || o->redlock_nurls > DLOCK__REDLOCK_MAX)
      return dlock__error(DLOCK_EINVAL,
                          "redlock_urls has %d entries%s; Redlock needs 3 or more independent "
                          "masters (5 advised), at most %d",
                          o->redlock_nurls, o->redlock_urls ? "" : " (NULL)", DLOCK__REDLOCK_MAX);
    n = o->redlock_nurls;
  }
  if (n < 3) {
    dlock__redlock_urls_free(urls, n);
    char shown[512];
    dlock_url_redact(url, shown, sizeof shown);
    return dlock__error(DLOCK_EURL,
                        "bad Redlock URL '%s': %d node%s; Redlock needs 3 or more independent "
                        "masters (5 advised)",
                        shown, n, n == 1 ? "" : "s");
  }
  dlock__endpoint eps[DLOCK__REDLOCK_MAX];
  int built = 0;
  for (int i = 0; i < n && !rc; i++) {
    dlock_client_options one = *o;
    one.url = urls ? urls[i] : o->redlock_urls[i];
    if (!one.url || (strncmp(one.url, "redis://", 8) && strncmp(one.url, "rediss://", 9)))
      rc = dlock__error(DLOCK_EURL, "redlock_urls[%d] is not a redis:// or rediss:// URL", i);
    else if (!(rc = build_endpoint(&one, one.url, &eps[i])))
      built++;
  }
  dlock__redlock_urls_free(urls, urls ? n : 0);
  if (rc) {
    for (int i = 0; i < built; i++) dlock__endpoint_clear(&eps[i]);
    return rc;
  }
  c->command_timeout_ms = eps[0].command_timeout_ms;
  rc = dlock__topology_redlock_new(eps, n, o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS,
                                   &rc_->topo, c->server, sizeof c->server);
  if (!rc && (o->wait_replicas || o->wait_timeout_ms))
    rc = dlock__error(DLOCK_EINVAL, "wait_replicas with Redlock: its nodes are independent masters without "
                                    "replicas; the quorum replaces WAIT");
  return rc; /* no PING: Redlock starts while one node answers */
}

static int redis_ping(dlock_client *c) {
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  dlock__cmd cmd = {1, argv, lens};
  dlock__reply *r = NULL;
  int rc;
  dlock__node *node = dlock__route(c, "", 0, INT64_MAX, &rc);
  if (node) rc = dlock__node_exec(node, &cmd, 1, &r, NULL);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "%s: PING failed: %s", c->server, r->str);
  }
  dlock__reply_free(r);
  return rc;
}

static int open_topology(dlock_client *c, const dlock_client_options *o, const char *url) {
  dlock__redis *r = calloc(1, sizeof *r);
  if (!r) return dlock__error(DLOCK_ENOMEM, "out of memory");
  c->be = r;
  int rc;
  if (o->redlock_nurls || o->redlock_urls || (url && dlock__url_is_redlock(url)))
    return open_redlock(c, r, o, o->redlock_urls || o->redlock_nurls ? NULL : url);
  if (url && dlock__url_is_sentinel(url)) {
    dlock__sentinel_url u;
    if ((rc = build_sentinel(o, url, &u))) return rc;
    c->command_timeout_ms = u.master.command_timeout_ms;
    int url_replicas = u.wait_replicas, url_timeout = u.wait_timeout_ms;
    rc = dlock__topology_sentinel_new(&u, o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS, &r->topo,
                                      c->server, sizeof c->server);
    if (!rc) rc = set_wait(r->topo, o, url_replicas, url_timeout, c->command_timeout_ms);
  } else {
    dlock__endpoint ep;
    if ((rc = build_endpoint(o, url, &ep))) return rc;
    c->command_timeout_ms = ep.command_timeout_ms;
    snprintf(c->server, sizeof c->server, "%s", ep.display);
    if (ep.cluster) {
      /* WAIT counts the replicas of the connection's own writes: a pipeline
       * that a cluster splits by slot owner has no one such connection. */
      if (o->wait_replicas || o->wait_timeout_ms) {
        dlock__endpoint_clear(&ep);
        rc = dlock__error(DLOCK_EINVAL, "wait_replicas/wait_timeout_ms given with a redis-cluster:// URL: WAIT is "
                                        "offered on a single server and through Sentinel only (docs/topologies.md)");
      } else {
        snprintf(c->server, sizeof c->server, "cluster %s", ep.display);
        rc = dlock__topology_cluster_new(&ep, o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS,
                                         &r->topo);
      }
    } else {
      rc = dlock__topology_standalone_new(&ep, o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS,
                                          &r->topo);
      if (!rc) rc = set_wait(r->topo, o, 0, 0, c->command_timeout_ms);
    }
  }
  if (!rc) rc = redis_ping(c);
  if (!rc) dlock__check_at_connect(c);
  return rc;
}

static void redis_close(dlock_client *c) {
  dlock__redis *r = dlock__rc(c);
  if (!r) return;
  dlock__subscriber_stop(c);
  dlock__pipeline_free(c);
  if (r->topo) r->topo->destroy(r->topo);
  free(r);
  c->be = NULL;
}

/* Redlock's node list in the options names Redis servers whatever the URL. */
static int redis_takes_options(const dlock_client_options *o) { return o->redlock_urls || o->redlock_nurls; }

/* Redlock's nodes are independent masters with no shared holders set, permit
 * set or wait queue: it offers the mutex only (docs/redlock.md). */
static int redis_open(dlock_client *c, const dlock_client_options *o, const char *url) {
  int rc = open_topology(c, o, url);
  if (!rc) c->caps = dlock__redis_node_count(c) > 0 ? 0 : DLOCK__CAP_SEMAPHORE | DLOCK__CAP_RWLOCK;
  return rc;
}

static int redis_query(dlock_client *c, int what, int node, void *out, size_t len) {
  int nodes = dlock__redis_node_count(c);
  switch (what) {
  case DLOCK__Q_NODE_COUNT:
    return nodes > 0 ? nodes : DLOCK__QUERY_NOT_OFFERED;
  case DLOCK__Q_NODE_NAME:
    *(const char **)out = dlock__redis_node_name(c, node);
    return 0;
  case DLOCK__Q_NODE_INFO: {
    dlock__node_info *q = out;
    return dlock__redis_info_node(c, q->name, node, q->info);
  }
  case DLOCK__Q_NODE_CHECK:
    return dlock__redis_check_node(c, node, out, (int)(len / sizeof(dlock_check)));
  case DLOCK__Q_TOPOLOGY_WARNING: {
    dlock__topology *t = dlock__topo(c);
    return t->warning ? t->warning(t, out, len) : 0;
  }
  case DLOCK__Q_DEPLOYMENT:
    if (nodes <= 0) return 0;
    snprintf(out, len, "Redlock");
    return 1;
  default:
    return DLOCK__QUERY_NOT_OFFERED;
  }
}

static const dlock__admin_ops redis_admin = {
    .info = dlock__redis_info,
    .list = dlock__redis_list,
    .force_release = dlock__redis_force_release,
    .check = dlock__redis_check,
    .holders = dlock__redis_holders,
    .watch_open = dlock__redis_watch_open,
    .watch_add = dlock__redis_watch_add,
    .watch_close = dlock__redis_watch_close,
};

static const dlock__guard_ops redis_guard = {.check = dlock__redis_guard_check};

static const dlock__pipeline_ops redis_pipeline = {
    .release_async = dlock__redis_release_async,
    .release_collect = dlock__redis_release_collect,
};

static const dlock__latch_ops redis_latch = {
    .create = dlock__redis_latch_new,
    .destroy = dlock__redis_latch_free,
    .set = dlock__redis_latch_set,
    .count_down = dlock__redis_latch_count_down,
    .get = dlock__redis_latch_get,
    .list = dlock__redis_latch_list,
    .wait = dlock__redis_latch_wait,
    .cancel = dlock__redis_latch_cancel,
};

static const dlock__sched_ops redis_sched = {
    .claim = dlock__redis_sched_claim,
    .finish = dlock__redis_sched_finish,
    .undo = dlock__redis_sched_undo,
    .history = dlock__redis_sched_history,
    .job_set = dlock__redis_job_set,
    .job_get = dlock__redis_job_get,
    .job_list = dlock__redis_job_list,
    .job_watch = dlock__redis_job_watch,
    .job_unwatch = dlock__redis_job_unwatch,
};

extern const struct dlock__election_ops dlock__redis_election_ops; /* election.c */

const dlock__backend_ops dlock__redis_ops = {
    .name = "redis",
    .unreachable = "Redis could not be reached to renew the lease in time",
    .takes_options = redis_takes_options,
    .redact = dlock__redis_redact,
    .open = redis_open,
    .close = redis_close,
    .ping = redis_ping,
    .query = redis_query,
    .lock_new = dlock__redis_lock_new,
    .lock_free = dlock__redis_lock_free,
    .acquire = dlock__redis_acquire,
    .undo = dlock__redis_undo,
    .release = dlock__redis_release,
    .extend = dlock__redis_extend,
    .renew = dlock__redis_renew,
    .held = dlock__redis_held,
    .admin = &redis_admin,
    .guard = &redis_guard,
    .pipeline = &redis_pipeline,
    .latch = &redis_latch,
    .sched = &redis_sched,
    .election = &dlock__redis_election_ops,
};
