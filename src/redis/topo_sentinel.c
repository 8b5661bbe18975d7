/*
 * topo_sentinel.c - the Redis Sentinel topology: every key lives on the
 * master that the sentinels name for one service, and that master moves.
 *
 * Discovery follows the Sentinel client spec: ask each sentinel (short
 * timeout) `SENTINEL get-master-addr-by-name SERVICE`, trust the address a
 * majority of the sentinels that answered name, connect and check `ROLE` is
 * master, else ask again. Nothing is cached across reconnects: the master is
 * resolved again whenever a command on it failed on the connection or was
 * answered READONLY/MASTERDOWN (dlock__node.suspect), and whenever the
 * watcher thread learns of a switch, from `+switch-master` (subscribed on one
 * sentinel, an accelerator) or from polling every sentinel once a second
 * (the rule). Resolution happens on the next route(), so a command that may
 * have run is never resent: it fails as before, the next one goes to the new
 * master.
 *
 * Each master address seen gets its own node (connection pool), kept until
 * the topology is destroyed, so a node pointer handed out stays valid.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_topo.h"

#define SENTINEL_TIMEOUT_MS 500 /* per sentinel: a dead one must not stall discovery */
#define POLL_MS 1000            /* the watcher asks every sentinel this often */
#define MAX_NODES 32            /* distinct master addresses kept */
#define ROLE_RETRY_MS 100

typedef struct sentinel_topo {
  dlock__topology base;
  dlock__sentinel_url u;
  int max_conns;
  pthread_mutex_t mu; /* guards resolving and the fields below */
  dlock__node *nodes[MAX_NODES];
  int nnodes;
  _Atomic(dlock__node *) current;
  atomic_int recheck; /* the watcher saw a switch: resolve before the next command */
  atomic_uint_fast64_t epoch;
  pthread_mutex_t warn_mu; /* guards 'warning' (asked with or without 'mu') */
  char warning[512];       /* the last disagreement between sentinels, "" if none */
  /* Watcher thread. */
  pthread_t thread;
  int thread_started;
  int wake[2];
  atomic_int stop;
} sentinel_topo;

/* ---- Asking the sentinels ---- */

static void append(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

enum { ANS_ADDR, ANS_UNKNOWN, ANS_NOT_SENTINEL, ANS_FAILED };

typedef struct answer {
  int kind;
  char host[256];
  int port;
  char detail[200]; /* why it failed */
} answer;

static dlock__endpoint short_timeouts(const dlock__endpoint *ep) {
  dlock__endpoint e = *ep; /* shallow: the strings stay owned by 'ep' */
  if (e.connect_timeout_ms > SENTINEL_TIMEOUT_MS) e.connect_timeout_ms = SENTINEL_TIMEOUT_MS;
  if (e.command_timeout_ms > SENTINEL_TIMEOUT_MS) e.command_timeout_ms = SENTINEL_TIMEOUT_MS;
  return e;
}

/* "a:1, b:2": the sentinels, for messages. */
static void sentinel_list(const sentinel_topo *t, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < t->u.nsentinels; i++) append(buf, len, "%s%s", i ? ", " : "", t->u.sentinel[i].display);
}

/* The last error without the "host:port: " a connection error starts with
 * (the message names the sentinel already). */
static void copy_detail(answer *a, const dlock__endpoint *ep) {
  const char *e = dlock_last_error();
  size_t dl = strlen(ep->display);
  if (!strncmp(e, ep->display, dl) && e[dl] == ':' && e[dl + 1] == ' ') e += dl + 2;
  snprintf(a->detail, sizeof a->detail, "%s", e);
}

/* Asks before 'limit' (INT64_MAX: none): the watchdog's renewal waits on it. */
static void ask_one(const dlock__endpoint *sentinel, const char *service, dlock_mono_ms limit, answer *a) {
  memset(a, 0, sizeof *a);
  a->kind = ANS_FAILED;
  dlock__endpoint ep = short_timeouts(sentinel);
  dlock_mono_ms now = dlock_mono_now();
  if (now >= limit) {
    snprintf(a->detail, sizeof a->detail, "not asked: the deadline had passed");
    return;
  }
  if (limit - now < ep.connect_timeout_ms) ep.connect_timeout_ms = (int)(limit - now);
  if (limit - now < ep.command_timeout_ms) ep.command_timeout_ms = (int)(limit - now);
  dlock__conn *conn = NULL;
  if (dlock__conn_open(&ep, NULL, &conn) != 0) {
    copy_detail(a, sentinel);
    return;
  }
  const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", service};
  size_t lens[3] = {8, 23, strlen(service)};
  dlock__cmd cmd = {3, argv, lens};
  dlock__reply *r = NULL;
  dlock_mono_ms deadline = dlock_mono_now() + ep.command_timeout_ms;
  int rc = dlock__conn_append(conn, &cmd);
  if (!rc) rc = dlock__conn_flush(conn, deadline);
  if (!rc) rc = dlock__conn_read(conn, deadline, &r);
  if (rc) {
    copy_detail(a, sentinel);
  } else if (r->type == DLOCK__REPLY_NIL) {
    a->kind = ANS_UNKNOWN;
  } else if (r->type == DLOCK__REPLY_ERROR) {
    /* A plain Redis: "ERR unknown command 'SENTINEL'"; an ACL may refuse too. */
    int not_sentinel = strstr(r->str, "unknown command") || strstr(r->str, "unknown subcommand");
    a->kind = not_sentinel ? ANS_NOT_SENTINEL : ANS_FAILED;
    snprintf(a->detail, sizeof a->detail, "it answered '%.150s'", r->str);
  } else if (r->type == DLOCK__REPLY_ARRAY && r->elements == 2 && r->element[0]->type == DLOCK__REPLY_STRING &&
             r->element[1]->type == DLOCK__REPLY_STRING && r->element[0]->len < sizeof a->host &&
             atoi(r->element[1]->str) > 0 && atoi(r->element[1]->str) < 65536) {
    a->kind = ANS_ADDR;
    memcpy(a->host, r->element[0]->str, r->element[0]->len + 1);
    a->port = atoi(r->element[1]->str);
  } else {
    snprintf(a->detail, sizeof a->detail, "unexpected reply to SENTINEL get-master-addr-by-name");
  }
  dlock__reply_free(r);
  dlock__conn_close(conn);
}

static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

/* Ask every sentinel; the address named by a majority of those that answered
 * goes to host/port. Otherwise DLOCK_ETOPOLOGY saying which sentinels failed
 * how. A disagreement that still has a majority is kept as a warning. */
static int ask_sentinels(sentinel_topo *t, char *host, size_t hostlen, int *port, dlock_mono_ms limit) {
  answer a[DLOCK__SENTINEL_MAX];
  int n = t->u.nsentinels, answered = 0, best = -1, best_votes = 0;
  for (int i = 0; i < n; i++) {
    ask_one(&t->u.sentinel[i], t->u.service, limit, &a[i]);
    if (a[i].kind == ANS_ADDR || a[i].kind == ANS_UNKNOWN) answered++;
  }
  for (int i = 0; i < n; i++) {
    if (a[i].kind != ANS_ADDR) continue;
    int votes = 0;
    for (int j = 0; j < n; j++)
      if (a[j].kind == ANS_ADDR && a[j].port == a[i].port && !strcmp(a[j].host, a[i].host)) votes++;
    if (votes > best_votes) best = i, best_votes = votes;
  }
  const char *svc = t->u.service;
  if (best >= 0 && best_votes * 2 > answered) {
    char warning[sizeof t->warning] = "";
    for (int i = 0; i < n; i++) {
      if (a[i].kind == ANS_ADDR && (a[i].port != a[best].port || strcmp(a[i].host, a[best].host)))
        append(warning, sizeof warning, "%ssentinel %s names %s:%d", warning[0] ? "; " : "", t->u.sentinel[i].display,
               a[i].host, a[i].port);
      else if (a[i].kind == ANS_UNKNOWN)
        append(warning, sizeof warning, "%ssentinel %s does not know the service", warning[0] ? "; " : "",
               t->u.sentinel[i].display);
    }
    pthread_mutex_lock(&t->warn_mu);
    if (warning[0])
      snprintf(t->warning, sizeof t->warning,
               "sentinels disagree on the master of '%.100s': %s; following the %d of %d "
               "that name %s:%d",
               svc, warning, best_votes, answered, a[best].host, a[best].port);
    else
      t->warning[0] = '\0';
    pthread_mutex_unlock(&t->warn_mu);
    snprintf(host, hostlen, "%s", a[best].host);
    *port = a[best].port;
    return 0;
  }
  char msg[900] = "";
  int not_sentinel = 0, unknown = 0;
  for (int i = 0; i < n; i++) {
    not_sentinel += a[i].kind == ANS_NOT_SENTINEL;
    unknown += a[i].kind == ANS_UNKNOWN;
  }
  if (not_sentinel == n) {
    for (int i = 0; i < n; i++)
      append(msg, sizeof msg, "%s%s (%s)", i ? ", " : "", t->u.sentinel[i].display, a[i].detail);
    return dlock__error(DLOCK_ETOPOLOGY,
                        "%s: not a Redis Sentinel: %s; a redis-sentinel:// URL lists the sentinels "
                        "(port 26379 by default), not the Redis server (use redis://host:port for one server)",
                        n == 1 ? t->u.sentinel[0].display : "none of the servers is", msg);
  }
  if (answered == 0) {
    for (int i = 0; i < n; i++)
      append(msg, sizeof msg, "%s%s: %s", i ? "; " : "", t->u.sentinel[i].display, a[i].detail);
    return dlock__error(DLOCK_ETOPOLOGY,
                        "no sentinel could be asked for the master of '%.100s': %s; are the "
                        "sentinels running at these addresses?",
                        svc, msg);
  }
  if (unknown == answered) {
    for (int i = 0; i < n; i++)
      if (a[i].kind == ANS_UNKNOWN) append(msg, sizeof msg, "%s%s", msg[0] ? ", " : "", t->u.sentinel[i].display);
    return dlock__error(DLOCK_ETOPOLOGY,
                        "service '%.100s' is unknown to the sentinels (%s); check the service "
                        "name (SENTINEL MASTERS lists the monitored ones)",
                        svc, msg);
  }
  for (int i = 0; i < n; i++) {
    if (a[i].kind == ANS_ADDR)
      append(msg, sizeof msg, "%s%s names %s:%d", msg[0] ? "; " : "", t->u.sentinel[i].display, a[i].host, a[i].port);
    else if (a[i].kind == ANS_UNKNOWN)
      append(msg, sizeof msg, "%s%s does not know it", msg[0] ? "; " : "", t->u.sentinel[i].display);
    else
      append(msg, sizeof msg, "%s%s failed: %s", msg[0] ? "; " : "", t->u.sentinel[i].display, a[i].detail);
  }
  return dlock__error(DLOCK_ETOPOLOGY,
                      "no majority of the %d sentinels that answered names one master for "
                      "'%.100s': %s; a failover may be under way: retry",
                      answered, svc, msg);
}

/* ---- Nodes per master address ---- */

static dlock__node *node_for(sentinel_topo *t, const char *host, int port, int *rc) {
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i]->ep.port == port && !strcmp(t->nodes[i]->ep.host, host)) return t->nodes[i];
  if (t->nnodes == MAX_NODES) {
    *rc = dlock__error(DLOCK_ETOPOLOGY,
                       "the master of '%.100s' moved between more than %d addresses; create "
                       "a new client",
                       t->u.service, MAX_NODES);
    return NULL;
  }
  dlock__endpoint ep = t->u.master; /* copy the template's strings */
  ep.username = ep.password = NULL;
  ep.host = strdup(host);
  if (t->u.master.username) ep.username = strdup(t->u.master.username);
  if (t->u.master.password) ep.password = strdup(t->u.master.password);
  ep.path = ep.tls_ca_file = ep.tls_cert_file = ep.tls_key_file = ep.tls_server_name = NULL;
  ep.port = port;
  snprintf(ep.display, sizeof ep.display, "%s%s%s:%d", strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
           port);
  dlock__node *n = calloc(1, sizeof *n);
  if (!n || !ep.host || (t->u.master.username && !ep.username) || (t->u.master.password && !ep.password)) {
    free(n);
    dlock__endpoint_clear(&ep);
    *rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  if ((*rc = dlock__node_init(n, &ep, t->max_conns))) {
    free(n);
    return NULL;
  }
  t->nodes[t->nnodes++] = n;
  return n;
}

/* ROLE on 'n': 1 master, 0 something else (named in 'role'), <0 error. */
static int check_role(dlock__node *n, char *role, size_t rolelen, dlock_mono_ms limit) {
  const char *argv[1] = {"ROLE"};
  size_t lens[1] = {4};
  dlock__cmd cmd = {1, argv, lens};
  dlock__reply *r = NULL;
  int rc = dlock__node_exec_until(n, &cmd, 1, &r, NULL, limit);
  if (rc) return rc;
  if (r->type == DLOCK__REPLY_ARRAY && r->elements > 0 && r->element[0]->type == DLOCK__REPLY_STRING) {
    snprintf(role, rolelen, "%s", r->element[0]->str);
    rc = !strcmp(role, "master");
  } else if (r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "%s: ROLE failed: %s", n->ep.display, r->str);
  } else {
    rc = dlock__error(DLOCK_EPROTO, "%s: unexpected reply to ROLE", n->ep.display);
  }
  dlock__reply_free(r);
  return rc;
}

/* At 'limit': DLOCK_ETIMEDOUT naming the sentinels, after what failed. */
static int resolve_timed_out(sentinel_topo *t, const char *what) {
  char list[600];
  sentinel_list(t, list, sizeof list);
  return dlock__error(DLOCK_ETIMEDOUT,
                      "the master of '%.100s' was not resolved through the sentinels (%s) before "
                      "the deadline: %.400s; the lock may be lost: check the master and the sentinels",
                      t->u.service, list, what);
}

/* Find the master now, before 'limit' (caller holds t->mu). */
static dlock__node *resolve(sentinel_topo *t, dlock_mono_ms limit, int *rc) {
  dlock_mono_ms deadline = dlock_mono_now() + t->u.master.command_timeout_ms;
  if (limit < deadline) deadline = limit;
  atomic_store(&t->recheck, 0);
  for (;;) {
    char host[256], role[32] = "";
    int port = 0;
    if ((*rc = ask_sentinels(t, host, sizeof host, &port, limit))) {
      if (dlock_mono_now() >= limit) {
        char why[512];
        snprintf(why, sizeof why, "%s", dlock_last_error());
        *rc = resolve_timed_out(t, why);
      }
      return NULL;
    }
    dlock__node *n = node_for(t, host, port, rc);
    if (!n) return NULL;
    int is_master = check_role(n, role, sizeof role, limit);
    if (is_master == 1) {
      atomic_store(&n->suspect, 0);
      dlock__node *old = atomic_exchange(&t->current, n);
      if (old && old != n) atomic_fetch_add(&t->epoch, 1);
      *rc = 0;
      return n;
    }
    if (is_master < 0) {
      *rc = is_master;
      dlock__error_prefix("the sentinels name %s as the master of '%.100s', but it cannot be used: ", n->ep.display,
                          t->u.service);
      return NULL;
    }
    /* A replica or a demoted master: the sentinels have not caught up yet. */
    if (dlock_mono_now() + ROLE_RETRY_MS >= deadline) {
      *rc = dlock__error(DLOCK_ETOPOLOGY,
                         "the sentinels name %s as the master of '%.100s', but it reports role "
                         "'%s'; a failover is probably under way: retry",
                         n->ep.display, t->u.service, role);
      return NULL;
    }
    dlock__sleep_ms(ROLE_RETRY_MS);
  }
}

static dlock__node *sentinel_route_rc(dlock__topology *base, const char *key, size_t keylen, dlock_mono_ms limit,
                                      int *rc) {
  (void)key;
  (void)keylen;
  sentinel_topo *t = (sentinel_topo *)base;
  *rc = 0;
  dlock__node *n = atomic_load(&t->current);
  if (n && !atomic_load(&n->suspect) && !atomic_load(&t->recheck)) return n;
  if (limit == INT64_MAX) {
    pthread_mutex_lock(&t->mu);
  } else {
    /* Not queued behind another thread's resolve past 'limit'. The mutex
     * waits on CLOCK_REALTIME: convert the time left. */
    int64_t left = limit - dlock_mono_now();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (left < 0) left = 0;
    ts.tv_sec += (time_t)(left / 1000);
    ts.tv_nsec += (long)(left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (pthread_mutex_timedlock(&t->mu, &ts) != 0) {
      *rc = resolve_timed_out(t, "another thread was still resolving it");
      return NULL;
    }
  }
  /* Another thread may have resolved while we waited for the mutex. */
  n = atomic_load(&t->current);
  if (!n || atomic_load(&n->suspect) || atomic_load(&t->recheck)) {
    n = resolve(t, limit, rc);
    if (!n) atomic_store(&t->recheck, 1); /* not resolved (e.g. cut short by 'limit'): the next route tries again */
  }
  pthread_mutex_unlock(&t->mu);
  return n;
}

static dlock__node *sentinel_route(dlock__topology *base, const char *key, size_t keylen) {
  int rc;
  return sentinel_route_rc(base, key, keylen, INT64_MAX, &rc);
}

/* One master holds every key: each switch may have moved any of them. */
static uint64_t sentinel_failovers(dlock__topology *base, const char *key, size_t keylen) {
  (void)key;
  (void)keylen;
  return atomic_load(&((sentinel_topo *)base)->epoch);
}

/* ---- The watcher: +switch-master and polling ---- */

static int subscribe(sentinel_topo *t, int idx, dlock__conn **out) {
  dlock__endpoint ep = short_timeouts(&t->u.sentinel[idx]);
  dlock__conn *conn;
  int rc = dlock__conn_open(&ep, NULL, &conn);
  if (rc) return rc;
  const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
  size_t lens[2] = {9, 14};
  dlock__cmd cmd = {2, argv, lens};
  if ((rc = dlock__conn_append(conn, &cmd)) ||
      (rc = dlock__conn_flush(conn, dlock_mono_now() + ep.command_timeout_ms))) {
    dlock__conn_close(conn);
    return rc;
  }
  *out = conn;
  return 0;
}

/* "+switch-master" payload: "<service> <old ip> <old port> <new ip> <new port>". */
static int names_service(const sentinel_topo *t, const dlock__reply *r) {
  if (r->type != DLOCK__REPLY_ARRAY || r->elements != 3 || r->element[0]->type != DLOCK__REPLY_STRING ||
      strcmp(r->element[0]->str, "message") || r->element[2]->type != DLOCK__REPLY_STRING)
    return 0;
  size_t sl = strlen(t->u.service);
  return r->element[2]->len > sl && !memcmp(r->element[2]->str, t->u.service, sl) && r->element[2]->str[sl] == ' ';
}

static void *watcher_main(void *arg) {
  sentinel_topo *t = arg;
  dlock__conn *conn = NULL;
  int next_sentinel = 0;
  dlock_mono_ms next_poll = dlock_mono_now() + POLL_MS;
  while (!atomic_load(&t->stop)) {
    if (!conn && subscribe(t, next_sentinel, &conn) != 0) {
      conn = NULL;
      next_sentinel = (next_sentinel + 1) % t->u.nsentinels;
    }
    dlock_mono_ms now = dlock_mono_now();
    int wait = next_poll > now ? (int)(next_poll - now) : 0;
    struct pollfd p[2] = {{t->wake[0], POLLIN, 0}, {conn ? dlock__conn_fd(conn) : -1, POLLIN, 0}};
    int ready = conn && dlock__conn_has_buffered(conn) ? 1 : poll(p, 2, wait);
    if (atomic_load(&t->stop)) break;
    if (ready > 0 && conn && (dlock__conn_has_buffered(conn) || (p[1].revents & (POLLIN | POLLHUP | POLLERR)))) {
      dlock__reply *r = NULL;
      if (dlock__conn_read(conn, dlock_mono_now() + SENTINEL_TIMEOUT_MS, &r) != 0) {
        dlock__conn_close(conn);
        conn = NULL;
        next_sentinel = (next_sentinel + 1) % t->u.nsentinels;
      } else {
        if (names_service(t, r)) atomic_store(&t->recheck, 1);
        dlock__reply_free(r);
      }
    }
    if (dlock_mono_now() >= next_poll) {
      char host[256];
      int port = 0;
      if (ask_sentinels(t, host, sizeof host, &port, INT64_MAX) == 0) {
        dlock__node *cur = atomic_load(&t->current);
        if (cur && (cur->ep.port != port || strcmp(cur->ep.host, host))) atomic_store(&t->recheck, 1);
      }
      next_poll = dlock_mono_now() + POLL_MS;
    }
  }
  dlock__conn_close(conn);
  return NULL;
}

/* ---- Life cycle ---- */

static int sentinel_warning(dlock__topology *base, char *buf, size_t len);

static void sentinel_destroy(dlock__topology *base) {
  sentinel_topo *t = (sentinel_topo *)base;
  if (t->thread_started) {
    atomic_store(&t->stop, 1);
    char b = 1;
    ssize_t w = write(t->wake[1], &b, 1);
    (void)w;
    pthread_join(t->thread, NULL);
  }
  if (t->wake[0] >= 0) close(t->wake[0]);
  if (t->wake[1] >= 0) close(t->wake[1]);
  for (int i = 0; i < t->nnodes; i++) {
    dlock__node_destroy(t->nodes[i]);
    free(t->nodes[i]);
  }
  pthread_mutex_destroy(&t->mu);
  pthread_mutex_destroy(&t->warn_mu);
  dlock__sentinel_url_clear(&t->u);
  free(t);
}

int dlock__topology_sentinel_new(dlock__sentinel_url *u, int max_conns, dlock__topology **out, char *display,
                                 size_t displaylen) {
  sentinel_topo *t = calloc(1, sizeof *t);
  if (!t) {
    dlock__sentinel_url_clear(u);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  t->u = *u; /* takes over the strings */
  memset(u, 0, sizeof *u);
  t->max_conns = max_conns;
  t->wake[0] = t->wake[1] = -1;
  pthread_mutex_init(&t->mu, NULL);
  pthread_mutex_init(&t->warn_mu, NULL);
  t->base.kind = "sentinel";
  t->base.route = sentinel_route;
  t->base.route_rc = sentinel_route_rc;
  t->base.destroy = sentinel_destroy;
  t->base.failovers = sentinel_failovers;
  t->base.warning = sentinel_warning;
  t->base.wait_replicas = t->u.wait_replicas;
  t->base.wait_timeout_ms = t->u.wait_timeout_ms;
  snprintf(display, displaylen, "master of '%.100s' via sentinel %s%s", t->u.service, t->u.sentinel[0].display,
           t->u.nsentinels > 1 ? ",..." : "");
  if (pipe2(t->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno;
    t->wake[0] = t->wake[1] = -1;
    sentinel_destroy(&t->base);
    return dlock__error(DLOCK_ESYS, "pipe: %s", strerror(e));
  }
  if (pthread_create(&t->thread, NULL, watcher_main, t) != 0) {
    sentinel_destroy(&t->base);
    return dlock__error(DLOCK_ESYS, "cannot start the sentinel watcher thread");
  }
  t->thread_started = 1;
  *out = &t->base;
  return 0;
}

static int sentinel_warning(dlock__topology *base, char *buf, size_t len) {
  sentinel_topo *t = (sentinel_topo *)base;
  pthread_mutex_lock(&t->warn_mu);
  snprintf(buf, len, "%s", t->warning);
  pthread_mutex_unlock(&t->warn_mu);
  return buf[0] != '\0';
}
