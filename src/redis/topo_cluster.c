/*
 * topo_cluster.c - the Redis Cluster topology: a slot router over dlock__node.
 *
 * Keys map to one of 16384 slots (CRC16/XMODEM of the key, or of its {hash
 * tag}); the slot map comes from CLUSTER SLOTS at connect and again after a
 * MOVED, a CLUSTERDOWN or a connection error (at most every REFRESH_MIN_MS),
 * and before a command to a node whose last command failed in transport (a
 * frozen master sends no MOVED), never per command. Redirect replies mean
 * the command did not run, so they are followed: MOVED (update the slot,
 * resend), ASK (ASKING + resend once, map unchanged), TRYAGAIN and
 * CLUSTERDOWN (bounded back-off within the command timeout). A command that
 * may have run is never resent.
 *
 * Nodes are created on first sight and live until the client is freed, so a
 * node pointer returned by route() stays valid; the slot map is an array of
 * atomic node indexes, so routing takes no lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_topo.h"

#define MAX_NODES 1024
#define NO_NODE 0xffff
#define REFRESH_MIN_MS 100
#define MAX_REDIRECTS 16
#define BACKOFF_FIRST_MS 10
#define BACKOFF_MAX_MS 200

/* ---- Pure parts (unit-tested) ---- */

unsigned dlock__crc16(const char *buf, size_t len) {
  /* CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, as the cluster spec. */
  unsigned crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (unsigned)(unsigned char)buf[i] << 8;
    for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

int dlock__cluster_slot(const char *key, size_t len) {
  /* The hash tag: the part between the first '{' and the next '}', if non-empty. */
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) return (int)(dlock__crc16(open + 1, (size_t)(close - open - 1)) & 16383);
  }
  return (int)(dlock__crc16(key, len) & 16383);
}

/* "host:port" (IPv6 hosts unbracketed, so split at the last ':'); an empty
 * host means "the node that answered" ('self'). */
static int parse_addr(const char *s, size_t n, const char *self, dlock__hostport *out) {
  const char *colon = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == ':') colon = s + i;
  if (!colon) return -1;
  size_t hl = (size_t)(colon - s);
  const char *host = s;
  if (hl == 0 || (hl == 1 && s[0] == '?')) {
    if (!self) return -1;
    host = self;
    hl = strlen(self);
  }
  if (hl >= sizeof out->host) return -1;
  long port = 0;
  const char *p = colon + 1;
  if (p == s + n) return -1;
  for (; p < s + n; p++) {
    if (*p < '0' || *p > '9' || port > 65535) return -1;
    port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535) return -1;
  memcpy(out->host, host, hl);
  out->host[hl] = '\0';
  out->port = (int)port;
  return 0;
}

int dlock__cluster_parse_redirect(const char *err, const char *self, int *is_ask, int *slot, dlock__hostport *to) {
  if (!strncmp(err, "MOVED ", 6))
    *is_ask = 0;
  else if (!strncmp(err, "ASK ", 4))
    *is_ask = 1;
  else
    return -1;
  const char *p = err + (*is_ask ? 4 : 6);
  char *end;
  long s = strtol(p, &end, 10);
  if (end == p || *end != ' ' || s < 0 || s > 16383) return -1;
  p = end + 1;
  size_t n = strcspn(p, " \r\n");
  if (parse_addr(p, n, self, to) != 0) return -1;
  *slot = (int)s;
  return 0;
}

static int reply_int(const dlock__reply *r, long long *v) {
  if (r->type == DLOCK__REPLY_INTEGER) {
    *v = r->integer;
    return 0;
  }
  return -1;
}

/* One [host, port, id, ...] entry of CLUSTER SLOTS. */
static int parse_slot_node(const dlock__reply *r, const char *self, dlock__hostport *out) {
  long long port;
  if (r->type != DLOCK__REPLY_ARRAY || r->elements < 2 || r->element[0]->type != DLOCK__REPLY_STRING ||
      reply_int(r->element[1], &port) || port < 1 || port > 65535)
    return -1;
  const char *host = r->element[0]->str;
  if (!*host || !strcmp(host, "?")) host = self; /* unknown endpoint: the node we asked */
  if (!host || strlen(host) >= sizeof out->host) return -1;
  snprintf(out->host, sizeof out->host, "%s", host);
  out->port = (int)port;
  return 0;
}

int dlock__cluster_parse_slots(const dlock__reply *r, const char *self, dlock__slot_range **out, size_t *nout) {
  *out = NULL;
  *nout = 0;
  if (r->type != DLOCK__REPLY_ARRAY) return -1;
  dlock__slot_range *v = calloc(r->elements ? r->elements : 1, sizeof *v);
  if (!v) return -2;
  for (size_t i = 0; i < r->elements; i++) {
    const dlock__reply *e = r->element[i];
    long long a, b;
    if (e->type != DLOCK__REPLY_ARRAY || e->elements < 3 || reply_int(e->element[0], &a) ||
        reply_int(e->element[1], &b) || a < 0 || b > 16383 || a > b ||
        parse_slot_node(e->element[2], self, &v[i].master)) {
      free(v);
      return -1;
    }
    v[i].start = (int)a;
    v[i].end = (int)b;
    for (size_t j = 3; j < e->elements && v[i].nreplicas < DLOCK__MAX_REPLICAS; j++)
      if (parse_slot_node(e->element[j], self, &v[i].replica[v[i].nreplicas]) == 0) v[i].nreplicas++;
  }
  *out = v;
  *nout = r->elements;
  return 0;
}

/* ---- The topology ---- */

typedef struct cluster {
  dlock__topology base;
  dlock__endpoint tmpl; /* credentials, TLS and timeouts for every node */
  int max_conns;
  pthread_mutex_t mu; /* node creation and map changes */
  dlock__node *nodes[MAX_NODES];
  atomic_int nnodes;
  int replica_of[MAX_NODES];           /* in the last CLUSTER SLOTS: index of its master, or -1 */
  int new_replica_of[MAX_NODES];       /* scratch for apply_map() */
  unsigned char was_master[MAX_NODES]; /* scratch for apply_map() */
  _Atomic uint16_t slot_node[16384];
  atomic_uint_fast64_t slot_failovers[16384];
  pthread_mutex_t refresh_mu;
  dlock_mono_ms last_refresh;
  /* A node whose last command or CLUSTER SLOTS failed in transport (it may be
   * frozen or gone): the map is reloaded before a command is routed to it,
   * and it is asked last. Cleared when it answers. */
  atomic_uchar suspect[MAX_NODES];
  /* The node that answered the last CLUSTER SLOTS (-1: none yet): where a
   * command for no key goes (PING at connect), so that a client starts
   * while slot 0's master is down. */
  atomic_int answered;
} cluster;

static int ep_copy(const dlock__endpoint *src, const char *host, int port, dlock__endpoint *dst) {
  memset(dst, 0, sizeof *dst);
  dst->tls = src->tls;
  dst->port = port;
  dst->tls_skip_verify = src->tls_skip_verify;
  dst->connect_timeout_ms = src->connect_timeout_ms;
  dst->command_timeout_ms = src->command_timeout_ms;
  struct {
    char **d;
    const char *s;
  } strs[] = {
      {&dst->host, host},
      {&dst->username, src->username},
      {&dst->password, src->password},
      {&dst->tls_ca_file, src->tls_ca_file},
      {&dst->tls_cert_file, src->tls_cert_file},
      {&dst->tls_key_file, src->tls_key_file},
      {&dst->tls_server_name, src->tls_server_name},
  };
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (strs[i].s && !(*strs[i].d = strdup(strs[i].s))) {
      dlock__endpoint_clear(dst);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
  snprintf(dst->display, sizeof dst->display, "%s%s%s%s:%d", dst->tls ? "tls " : "", strchr(host, ':') ? "[" : "", host,
           strchr(host, ':') ? "]" : "", port);
  return 0;
}

/* Index of the node at host:port, created if new; -1 on failure. Caller holds cl->mu. */
static int node_index_locked(cluster *cl, const char *host, int port) {
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++)
    if (cl->nodes[i]->ep.port == port && !strcmp(cl->nodes[i]->ep.host, host)) return i;
  if (n == MAX_NODES) {
    dlock__error(DLOCK_ERANGE, "more than %d cluster nodes seen", MAX_NODES);
    return -1;
  }
  dlock__node *node = calloc(1, sizeof *node);
  dlock__endpoint ep;
  if (!node) {
    dlock__error(DLOCK_ENOMEM, "out of memory");
    return -1;
  }
  if (ep_copy(&cl->tmpl, host, port, &ep) || dlock__node_init(node, &ep, cl->max_conns)) {
    free(node);
    return -1;
  }
  cl->nodes[n] = node;
  cl->replica_of[n] = -1;
  atomic_store(&cl->nnodes, n + 1); /* publish after the node is complete */
  return n;
}

static dlock__node *node_at(cluster *cl, const char *host, int port) {
  pthread_mutex_lock(&cl->mu);
  int i = node_index_locked(cl, host, port);
  pthread_mutex_unlock(&cl->mu);
  return i < 0 ? NULL : cl->nodes[i];
}

static int index_of(cluster *cl, const dlock__node *node) {
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++)
    if (cl->nodes[i] == node) return i;
  return -1;
}

/* The master of 'slot' changed from 'from' to 'to' (node indexes): a failover
 * when 'to' was a replica of 'from', or 'from' is now a replica of 'to', or
 * 'to' served no slot before ('was_master', NULL: look it up). CLUSTER SLOTS
 * does not always list replicas (gossip may not have told the node yet), so
 * the last rule catches a promotion the first two miss; its false positive is
 * a reshard onto a new, empty master, which only matters for a hold that was
 * lost anyway (then reported as FAILOVER instead of TAKEN/EXPIRED). */
static void note_owner_change(cluster *cl, int slot, int from, int to, const int *new_replica_of,
                              const unsigned char *was_master) {
  if (from == NO_NODE || from == to) return;
  int served = 0;
  if (was_master) {
    served = was_master[to];
  } else {
    for (int s = 0; s < 16384 && !served; s++) served = atomic_load(&cl->slot_node[s]) == to;
  }
  if (cl->replica_of[to] == from || (new_replica_of && new_replica_of[from] == to) || !served)
    atomic_fetch_add(&cl->slot_failovers[slot], 1);
}

/* Apply a parsed CLUSTER SLOTS answer. */
static int apply_map(cluster *cl, const dlock__slot_range *v, size_t n) {
  pthread_mutex_lock(&cl->mu);
  int *new_replica_of = cl->new_replica_of;
  int rc = 0;
  for (int i = 0; i < MAX_NODES; i++) new_replica_of[i] = -2; /* not in this answer */
  unsigned char *was_master = cl->was_master;
  memset(was_master, 0, sizeof cl->was_master);
  for (int s = 0; s < 16384; s++) {
    unsigned i = atomic_load(&cl->slot_node[s]);
    if (i != NO_NODE) was_master[i] = 1;
  }
  int *masters = calloc(n ? n : 1, sizeof *masters);
  if (!masters) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; i < n && !rc; i++) {
    masters[i] = node_index_locked(cl, v[i].master.host, v[i].master.port);
    if (masters[i] < 0)
      rc = DLOCK_ENOMEM;
    else
      new_replica_of[masters[i]] = -1;
    for (int j = 0; j < v[i].nreplicas && !rc; j++) {
      int r = node_index_locked(cl, v[i].replica[j].host, v[i].replica[j].port);
      if (r < 0)
        rc = DLOCK_ENOMEM;
      else
        new_replica_of[r] = masters[i];
    }
  }
  for (size_t i = 0; i < n && !rc; i++)
    for (int s = v[i].start; s <= v[i].end; s++) {
      note_owner_change(cl, s, atomic_load(&cl->slot_node[s]), masters[i], new_replica_of, was_master);
      atomic_store(&cl->slot_node[s], (uint16_t)masters[i]);
    }
  /* A node missing from this answer (failed) keeps its last known role, so
   * that its promotion is still recognised in a later answer. */
  for (int i = 0; i < MAX_NODES && !rc; i++)
    if (new_replica_of[i] != -2) cl->replica_of[i] = new_replica_of[i];
  pthread_mutex_unlock(&cl->mu);
  free(masters);
  return rc;
}

static int is_transport_error(int rc) { return rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECONNECT; }

/* Note how a command to 'node' ended: a transport failure makes it suspect,
 * an answer clears that. */
static void note_node_result(cluster *cl, const dlock__node *node, int rc) {
  int i = index_of(cl, node);
  if (i < 0) return;
  if (!rc)
    atomic_store(&cl->suspect[i], 0);
  else if (is_transport_error(rc))
    atomic_store(&cl->suspect[i], 1);
}

/* Ask 'node' for CLUSTER SLOTS (before 'limit') and apply the answer. */
static int refresh_from(cluster *cl, dlock__node *node, dlock_mono_ms limit) {
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  size_t lens[2] = {7, 5};
  dlock__cmd cmd = {2, argv, lens};
  dlock__reply *r = NULL;
  int rc = dlock__node_exec_until(node, &cmd, 1, &r, NULL, limit);
  note_node_result(cl, node, rc);
  if (rc) return rc;
  if (r->type != DLOCK__REPLY_ERROR) atomic_store(&cl->answered, index_of(cl, node));
  if (r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    if (strstr(r->str, "cluster support disabled"))
      rc = dlock__error(DLOCK_ECLUSTER,
                        "%s is not in cluster mode (CLUSTER SLOTS: %s): use a redis:// URL for a "
                        "standalone server, or start it with 'cluster-enabled yes' and create the cluster",
                        node->ep.display, r->str);
    else
      dlock__error(rc, "%s: CLUSTER SLOTS failed: %s", node->ep.display, r->str);
    dlock__reply_free(r);
    return rc;
  }
  dlock__slot_range *v;
  size_t n;
  int prc = dlock__cluster_parse_slots(r, node->ep.host, &v, &n);
  dlock__reply_free(r);
  if (prc == -2) return dlock__error(DLOCK_ENOMEM, "out of memory");
  if (prc) return dlock__error(DLOCK_EPROTO, "%s: unexpected CLUSTER SLOTS reply", node->ep.display);
  if (n == 0) {
    free(v);
    return dlock__error(DLOCK_ECLUSTER,
                        "%s: the cluster has no slots assigned yet: create it first "
                        "(redis-cli --cluster create ...)",
                        node->ep.display);
  }
  rc = apply_map(cl, v, n);
  free(v);
  return rc;
}

/* Reload the slot map from the first node that answers before 'limit':
 * masters we know, then any other node, suspect nodes (see above) last. A
 * node that answers with an error (not in the cluster, no slots, refused
 * credentials) is passed over like one that does not answer; that error is
 * the result only when every node asked gave one. 'force' (connect) waits
 * for a reload under way and skips the rate limit; otherwise a reload that
 * another thread is doing is left to it, so that no caller waits past its
 * own limit for another's. A reload that asked nobody (no time left) does
 * not count for the rate limit. */
static int refresh(cluster *cl, int force, dlock_mono_ms limit) {
  if (force) {
    pthread_mutex_lock(&cl->refresh_mu);
  } else if (pthread_mutex_trylock(&cl->refresh_mu) != 0) {
    return 0;
  }
  dlock_mono_ms now = dlock_mono_now();
  if (!force && now - cl->last_refresh < REFRESH_MIN_MS) {
    pthread_mutex_unlock(&cl->refresh_mu);
    return 0;
  }
  int n = atomic_load(&cl->nnodes), rc = DLOCK_ECONNECT;
  int asked = 0, refused = 0, first_rc = 0, auth = 0, perm = 0; /* refused: answered with an error */
  char tried[900] = "";
  size_t off = 0;
  /* pass 0: masters, 1: other nodes, 2 and 3: the same among suspect nodes */
  for (int pass = 0; pass < 4 && rc && rc != DLOCK_ENOMEM; pass++)
    for (int i = 0; i < n && rc && rc != DLOCK_ENOMEM && dlock_mono_now() < limit; i++) {
      int is_master = cl->replica_of[i] < 0, is_suspect = atomic_load(&cl->suspect[i]) != 0;
      if (is_master != (pass % 2 == 0) || is_suspect != (pass >= 2)) continue;
      rc = refresh_from(cl, cl->nodes[i], limit);
      if (asked++ == 0) first_rc = rc;
      refused += rc == DLOCK_ECLUSTER || rc == DLOCK_EAUTH || rc == DLOCK_ENOPERM;
      auth |= rc == DLOCK_EAUTH;
      perm |= rc == DLOCK_ENOPERM;
      if (rc && rc != DLOCK_ENOMEM && off < sizeof tried - 1)
        off += (size_t)snprintf(tried + off, sizeof tried - off, "%s%s (%.250s)", off ? "; " : "",
                                cl->nodes[i]->ep.display, dlock_last_error());
    }
  if (asked) cl->last_refresh = now;
  pthread_mutex_unlock(&cl->refresh_mu);
  if (!rc || rc == DLOCK_ENOMEM) return rc;
  if (asked == 1 && refused == 1) return first_rc; /* its own message says what to fix */
  if (!asked) return dlock__error(DLOCK_ETIMEDOUT, "no time left to reload the cluster slot map (%d nodes known)", n);
  if (refused == asked) {
    /* Every node answered, none with a map: a wrong credential is what to
     * fix first, then permissions, then the cluster itself. */
    rc = auth ? DLOCK_EAUTH : perm ? DLOCK_ENOPERM : DLOCK_ECLUSTER;
    return dlock__error(rc, "no cluster node gave a slot map: %.1000s", tried);
  }
  return dlock__error(DLOCK_ECONNECT, "no cluster node answered CLUSTER SLOTS: %.1000s", tried);
}

/* refresh() for a command that failed: the caller reports the command's own
 * error, not what the reload met on the way. */
static int refresh_quietly(cluster *cl, dlock_mono_ms limit) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int rc = refresh(cl, 0, limit);
  dlock__error(0, "%s", saved);
  return rc;
}

static dlock__node *route_slot(cluster *cl, int slot) {
  unsigned i = atomic_load(&cl->slot_node[slot]);
  if (i == NO_NODE) { /* unassigned: any master answers with MOVED or CLUSTERDOWN */
    for (int s = 0; s < 16384; s++)
      if ((i = atomic_load(&cl->slot_node[s])) != NO_NODE) break;
    if (i == NO_NODE) i = 0;
  }
  return cl->nodes[i];
}

/* A key's slot owner. No key (""): a node that answered, not suspect since
 * (the last to give the map), else slot 0's owner: a command for the server
 * (PING, the doctor's) need not wait for the master of one slot. */
static dlock__node *cluster_route(dlock__topology *t, const char *key, size_t keylen) {
  cluster *cl = (cluster *)t;
  int a = atomic_load(&cl->answered);
  if (keylen == 0 && a >= 0 && a < atomic_load(&cl->nnodes) && !atomic_load(&cl->suspect[a])) return cl->nodes[a];
  return route_slot(cl, dlock__cluster_slot(key, keylen));
}

static int is_error(const dlock__reply *r, const char *code) {
  size_t n = strlen(code);
  return r && r->type == DLOCK__REPLY_ERROR && !strncmp(r->str, code, n) && (r->str[n] == ' ' || !r->str[n]);
}

/* Send one command again after a redirect (which says it did not run), before
 * 'limit'; ASK prefixes ASKING. */
static int resend(dlock__node *node, const dlock__cmd *cmd, int asking, dlock__reply **out, int *sent,
                  dlock_mono_ms limit) {
  if (!asking) return dlock__node_exec_until(node, cmd, 1, out, sent, limit);
  const char *argv[1] = {"ASKING"};
  size_t lens[1] = {6};
  dlock__cmd both[2] = {{1, argv, lens}, *cmd};
  dlock__reply *r[2] = {NULL, NULL};
  int rc = dlock__node_exec_until(node, both, 2, r, sent, limit);
  if (rc) return rc;
  dlock__reply_free(r[0]);
  *out = r[1];
  return 0;
}

/* Follow redirects for one command until it has a real answer, within
 * 'deadline' (the command timeout, or the caller's limit if earlier). */
static int settle(cluster *cl, const dlock__cmd *cmd, const char *key, size_t keylen, dlock__node *from,
                  dlock__reply **reply, dlock_mono_ms deadline, int *sent) {
  int64_t backoff = BACKOFF_FIRST_MS;
  int asked = 0, moved = 0, hops = 0;
  /* MOVED and ASK hops are counted; TRYAGAIN and CLUSTERDOWN waits are
   * bounded by the deadline (each waits at least BACKOFF_FIRST_MS). */
  for (;;) {
    dlock__reply *r = *reply;
    dlock__node *to = NULL;
    int asking = 0;
    if (r->type != DLOCK__REPLY_ERROR) return 0;
    int is_ask, slot;
    dlock__hostport hp;
    if (dlock__cluster_parse_redirect(r->str, from->ep.host, &is_ask, &slot, &hp) == 0) {
      if (hops++ >= MAX_REDIRECTS) return 0; /* the caller sees the redirect as an error */
      if (!(to = node_at(cl, hp.host, hp.port))) return DLOCK_ENOMEM;
      if (is_ask) {
        /* ASK is followed once: an ASK answered by another ASK is an error. */
        if (asked++) return 0;
        asking = 1;
      } else {
        /* A second MOVED in a row: the nodes disagree for a moment (a slot
         * migration ends with SETSLOT sent to each node in turn); back off. */
        if (moved++ > 0) {
          if (dlock_mono_now() + backoff >= deadline) return 0;
          dlock__sleep_ms(backoff);
          backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        refresh(cl, 0, deadline); /* usually many slots moved at once */
        /* The node that answered MOVED is authoritative for this slot, even
         * if the node that answered CLUSTER SLOTS has not heard yet. */
        pthread_mutex_lock(&cl->mu);
        int ti = index_of(cl, to);
        note_owner_change(cl, slot, atomic_load(&cl->slot_node[slot]), ti, NULL, NULL);
        atomic_store(&cl->slot_node[slot], (uint16_t)ti);
        pthread_mutex_unlock(&cl->mu);
      }
    } else if (is_error(r, "TRYAGAIN") || is_error(r, "CLUSTERDOWN")) {
      dlock_mono_ms now = dlock_mono_now();
      if (now + backoff >= deadline) return 0; /* out of time: the caller sees the error reply */
      dlock__sleep_ms(backoff);
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
      if (is_error(r, "CLUSTERDOWN")) refresh(cl, 0, deadline);
      asked = 0; /* after TRYAGAIN the source may send us to the target again */
      to = route_slot(cl, dlock__cluster_slot(key, keylen));
    } else {
      return 0; /* a real error reply */
    }
    if (dlock_mono_now() >= deadline)
      return dlock__error(DLOCK_ETIMEDOUT, "%s: redirected for the whole command timeout (last: %.200s)",
                          from->ep.display, r->str);
    dlock__reply *again = NULL;
    int rc = resend(to, cmd, asking, &again, sent, deadline);
    note_node_result(cl, to, rc);
    if (rc) {
      if (!*sent) refresh_quietly(cl, deadline);
      return rc;
    }
    dlock__reply_free(r);
    *reply = again;
    from = to;
  }
}

/* One pipeline to the node of keys[0]; redirected replies settled one by one.
 * Everything ends at the command timeout or at 'limit', whichever is first. */
static int exec_group(dlock__topology *t, const dlock__cmd *cmds, const char *const *keys, const size_t *keylens,
                      size_t n, dlock__reply **replies, int *sent, dlock_mono_ms limit) {
  cluster *cl = (cluster *)t;
  dlock__node *node = cluster_route(t, keys[0], keylens[0]);
  dlock_mono_ms deadline = dlock_mono_now() + cl->tmpl.command_timeout_ms;
  if (limit < deadline) deadline = limit;
  int ni = index_of(cl, node);
  if (ni >= 0 && atomic_load(&cl->suspect[ni])) {
    /* Its last command failed in transport: a frozen master sends no MOVED,
     * so only a reload (asking the other nodes first) finds its successor.
     * Within this command's own time, since the failed one had none left. */
    refresh_quietly(cl, deadline);
    node = cluster_route(t, keys[0], keylens[0]);
  }
  int rc = dlock__node_exec_until(node, cmds, n, replies, sent, deadline);
  note_node_result(cl, node, rc);
  /* Nothing reached the server (refused, reset before the write): the map
   * may be stale, or the slot's master is down and its replica not promoted
   * yet (the other nodes answer CLUSTERDOWN meanwhile). Nothing ran, so the
   * command is sent again, to the owner a reloaded map names, with the
   * back-off of CLUSTERDOWN, until it reaches a server or the deadline
   * (issue 22 item 10: a release failed at once here). */
  int64_t backoff = BACKOFF_FIRST_MS;
  for (int tries = 0; rc && !*sent && is_transport_error(rc) && tries < 1000; tries++) {
    if (tries > 0) {
      if (dlock_mono_now() + backoff >= deadline) break;
      dlock__sleep_ms(backoff);
      backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    refresh_quietly(cl, deadline);
    if (dlock_mono_now() >= deadline) break;
    node = cluster_route(t, keys[0], keylens[0]);
    rc = dlock__node_exec_until(node, cmds, n, replies, sent, deadline);
    note_node_result(cl, node, rc);
  }
  if (rc && *sent) refresh_quietly(cl, deadline); /* for the next command; this one's outcome stays unknown */
  if (rc) return rc;
  for (size_t i = 0; i < n; i++) {
    if (replies[i]->type != DLOCK__REPLY_ERROR) continue;
    int one_sent = 0;
    rc = settle(cl, &cmds[i], keys[i], keylens[i], node, &replies[i], deadline, &one_sent);
    if (rc) {
      /* The redirected command ran only if its resend may have; the others
       * of the pipeline were answered, so they ran. */
      *sent = n > 1 || one_sent;
      for (size_t j = 0; j < n; j++) {
        dlock__reply_free(replies[j]);
        replies[j] = NULL;
      }
      return rc;
    }
  }
  return 0;
}

/* An error reply standing for a transport failure of one group of a split
 * pipeline (the caller's other commands did get answers). */
static dlock__reply *failure_reply(void) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = DLOCK__REPLY_ERROR;
  const char *msg = dlock_last_error();
  if (!(r->str = malloc(strlen(msg) + 9))) {
    free(r);
    return NULL;
  }
  r->len = (size_t)sprintf(r->str, "DLOCKIO %s", msg);
  return r;
}

/* Split the pipeline by owner node (the watchdog renews locks of every
 * master at once); one pipeline per node, one after the other. When some
 * nodes fail and others answer, the failed commands get DLOCKIO error
 * replies, so that one dead master does not stall renewals on the others. */
static int cluster_exec(dlock__topology *t, const dlock__cmd *cmds, const char *const *keys, const size_t *keylens,
                        size_t n, dlock__reply **replies, int *sent, dlock_mono_ms limit) {
  int sent_here = 0;
  if (!sent) sent = &sent_here;
  *sent = 0;
  dlock__node *first = cluster_route(t, keys[0], keylens[0]);
  size_t same = 1;
  while (same < n && cluster_route(t, keys[same], keylens[same]) == first) same++;
  if (same == n) return exec_group(t, cmds, keys, keylens, n, replies, sent, limit);

  dlock__node **owner = malloc(n * sizeof *owner);
  size_t *idx = malloc(n * sizeof *idx);
  dlock__cmd *gc = malloc(n * sizeof *gc);
  const char **gk = malloc(n * sizeof *gk);
  size_t *gkl = malloc(n * sizeof *gkl);
  dlock__reply **gr = malloc(n * sizeof *gr);
  char *done = calloc(n, 1);
  int rc = 0, answered = 0, last_rc = 0;
  if (!owner || !idx || !gc || !gk || !gkl || !gr || !done) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    owner[i] = cluster_route(t, keys[i], keylens[i]);
    replies[i] = NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (done[i]) continue;
    size_t g = 0;
    for (size_t j = i; j < n; j++)
      if (!done[j] && owner[j] == owner[i]) {
        done[j] = 1;
        idx[g] = j;
        gc[g] = cmds[j];
        gk[g] = keys[j];
        gkl[g] = keylens[j];
        g++;
      }
    int gsent = 0;
    int grc = exec_group(t, gc, gk, gkl, g, gr, &gsent, limit);
    if (gsent) *sent = 1;
    for (size_t j = 0; j < g; j++) replies[idx[j]] = grc ? failure_reply() : gr[j];
    if (grc)
      last_rc = grc;
    else
      answered = 1;
    for (size_t j = 0; j < g && grc; j++)
      if (!replies[idx[j]]) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  if (!rc && !answered) rc = last_rc;
  if (rc)
    for (size_t i = 0; i < n; i++) {
      dlock__reply_free(replies[i]);
      replies[i] = NULL;
    }
out:
  free(owner);
  free(idx);
  free(gc);
  free(gk);
  free(gkl);
  free(gr);
  free(done);
  return rc;
}

static uint64_t cluster_failovers(dlock__topology *t, const char *key, size_t keylen) {
  return atomic_load(&((cluster *)t)->slot_failovers[dlock__cluster_slot(key, keylen)]);
}

static int cluster_masters(dlock__topology *t, dlock__node **out, int max) {
  cluster *cl = (cluster *)t;
  int n = 0;
  unsigned seen_last = NO_NODE;
  for (int s = 0; s < 16384; s++) {
    unsigned i = atomic_load(&cl->slot_node[s]);
    if (i == NO_NODE || i == seen_last) continue;
    seen_last = i;
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= out[j] == cl->nodes[i];
    if (!dup && n < max) out[n++] = cl->nodes[i];
  }
  return n;
}

static void cluster_destroy(dlock__topology *t) {
  cluster *cl = (cluster *)t;
  int n = atomic_load(&cl->nnodes);
  for (int i = 0; i < n; i++) {
    dlock__node_destroy(cl->nodes[i]);
    free(cl->nodes[i]);
  }
  dlock__endpoint_clear(&cl->tmpl);
  pthread_mutex_destroy(&cl->mu);
  pthread_mutex_destroy(&cl->refresh_mu);
  free(cl);
}

int dlock__topology_cluster_new(dlock__endpoint *ep, int max_conns, dlock__topology **out) {
  cluster *cl = calloc(1, sizeof *cl);
  if (!cl) {
    dlock__endpoint_clear(ep);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  cl->tmpl = *ep; /* takes over the endpoint's strings */
  memset(ep, 0, sizeof *ep);
  cl->max_conns = max_conns;
  pthread_mutex_init(&cl->mu, NULL);
  pthread_mutex_init(&cl->refresh_mu, NULL);
  for (int s = 0; s < 16384; s++) atomic_store(&cl->slot_node[s], NO_NODE);
  atomic_store(&cl->answered, -1);
  cl->base.kind = "cluster";
  cl->base.route = cluster_route;
  cl->base.destroy = cluster_destroy;
  cl->base.exec = cluster_exec;
  cl->base.failovers = cluster_failovers;
  cl->base.masters = cluster_masters;
  int rc = 0;
  pthread_mutex_lock(&cl->mu);
  for (int i = 0; i < cl->tmpl.nseeds && !rc; i++)
    if (node_index_locked(cl, cl->tmpl.seeds[i].host, cl->tmpl.seeds[i].port) < 0) rc = DLOCK_ENOMEM;
  pthread_mutex_unlock(&cl->mu);
  if (!rc) rc = refresh(cl, 1, INT64_MAX);
  if (rc) {
    cluster_destroy(&cl->base);
    return rc;
  }
  *out = &cl->base;
  return 0;
}
