/*
 * redis_topo.h - the Redis backend's endpoints (url.c), connections (conn.c), nodes
 * and topologies (node.c, topo_sentinel.c, topo_cluster.c, topo_redlock.c).
 */
#ifndef DLOCK_REDIS_TOPO_H
#define DLOCK_REDIS_TOPO_H

#include "internal.h"
#include "redis_resp.h"

typedef struct ssl_ctx_st SSL_CTX;

/* ---- Endpoint (url.c) ---- */

typedef struct dlock__endpoint {
  int is_unix;
  int tls;
  char *host; /* tcp */
  int port;   /* tcp */
  char *path; /* unix */
  int db;
  char *username;
  char *password;
  char *tls_ca_file, *tls_cert_file, *tls_key_file, *tls_server_name;
  int tls_skip_verify;
  int connect_timeout_ms;
  int command_timeout_ms;
  char display[300]; /* "127.0.0.1:6379", "unix:/path", "tls 127.0.0.1:6380" */
  /* redis-cluster:// only: every seed (host/port above are seeds[0]). */
  int cluster;
  int nseeds;
  struct dlock__seed {
    char *host;
    int port;
  } * seeds;
} dlock__endpoint;

/* Parse 'url' into 'ep' (zeroed first). */
int dlock__url_parse(const char *url, dlock__endpoint *ep);
void dlock__endpoint_clear(dlock__endpoint *ep);
/* A URL with its password masked, for messages (the ops table's redact). */
void dlock__redis_redact(const char *url, char *buf, size_t len);

/* A redis-sentinel:// URL (url.c): the sentinels to ask, the service name,
 * and the master's endpoint template (db, credentials; the host comes from
 * the sentinels). */
#define DLOCK__SENTINEL_MAX 16
typedef struct dlock__sentinel_url {
  int nsentinels;
  dlock__endpoint sentinel[DLOCK__SENTINEL_MAX];
  char *service;
  dlock__endpoint master;
  int wait_replicas;   /* WAIT after acquire and renewal; 0: none */
  int wait_timeout_ms; /* 0: default */
  char shown[300];     /* the URL with passwords masked, for messages */
} dlock__sentinel_url;

int dlock__url_is_sentinel(const char *url);
int dlock__url_parse_sentinel(const char *url, dlock__sentinel_url *u);
void dlock__sentinel_url_clear(dlock__sentinel_url *u);

/* ---- Connection (conn.c) ---- */

typedef struct dlock__conn dlock__conn;

int dlock__tls_ctx_new(const dlock__endpoint *ep, SSL_CTX **out);
void dlock__tls_ctx_free(SSL_CTX *ctx);

/* Connect, handshake TLS, AUTH and SELECT; all before 'deadline'. */
int dlock__conn_open(const dlock__endpoint *ep, SSL_CTX *ctx, dlock__conn **out);
/* The same, given up at 'limit' too when that comes before the connect timeout. */
int dlock__conn_open_until(const dlock__endpoint *ep, SSL_CTX *ctx, dlock_mono_ms limit, dlock__conn **out);
void dlock__conn_close(dlock__conn *c);
int dlock__conn_fd(const dlock__conn *c);
/* Queue a command in the output buffer (no I/O). */
int dlock__conn_append(dlock__conn *c, const dlock__cmd *cmd);
/* Write the output buffer; read one reply. On any failure the connection is
 * marked broken and must be closed. */
int dlock__conn_flush(dlock__conn *c, dlock_mono_ms deadline);
int dlock__conn_read(dlock__conn *c, dlock_mono_ms deadline, dlock__reply **out);
/* Read without waiting: 0 with '*out' a reply, or NULL when no whole reply
 * has arrived yet; failures as dlock__conn_read (the connection is broken). */
int dlock__conn_try_read(dlock__conn *c, dlock__reply **out);
/* 1 when a whole reply is already buffered (no I/O needed to read it). */
int dlock__conn_has_buffered(dlock__conn *c);
int dlock__conn_broken(const dlock__conn *c);
/* For a pooled connection about to carry a command: 1 if the server closed
 * it (or sent something unasked) while it sat idle. No I/O beyond poll(0). */
int dlock__conn_idle_closed(dlock__conn *c);
/* ---- Nodes and topology (node.c) ---- */

/* A Redis server with a pool of command connections. */
typedef struct dlock__node {
  dlock__endpoint ep;
  SSL_CTX *ssl_ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dlock__conn **idle;
  int nidle;
  int nopen;
  int max_conns;
  /* Set when a command failed on the connection or was answered READONLY or
   * MASTERDOWN: a topology that can move (Sentinel) re-resolves before the
   * next command. */
  atomic_int suspect;
} dlock__node;

int dlock__node_init(dlock__node *n, const dlock__endpoint *ep, int max_conns);
void dlock__node_destroy(dlock__node *n);
/* Send 'n' commands as one pipeline and read their replies (replies[i] may
 * be an error reply). A pooled connection the server has closed is noticed
 * before use (no round trip) and replaced; once the commands may have left,
 * they are never sent again here. On failure '*sent' (may be NULL) tells
 * whether the commands may have reached the server: if so, whether they ran
 * is unknown, and only the caller knows whether its script is safe to resend. */
int dlock__node_exec(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent);
/* The same with every wait (pool, connect, I/O) also ending at 'limit': the
 * watchdog bounds renewals by the earliest validity deadline it watches. */
/* Mark the node suspect (Sentinel: resolve the master again) when 'rc' is a
 * connection failure or a reply says the server is no longer a writable
 * master; returns 'rc'. */
int dlock__node_note_outcome(dlock__node *node, int rc, dlock__reply **replies, size_t n);
int dlock__node_exec_until(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent,
                           dlock_mono_ms limit);

/* The seam for deployments other than one standalone server: the lock code
 * asks the topology for the node that owns a key. Cluster routes by slot,
 * Sentinel follows the master; Redlock replaces the single node with a quorum
 * over several (see docs/design.md). */
typedef struct dlock__topology dlock__topology;
typedef struct dlock__script_call dlock__script_call;
struct dlock__topology {
  const char *kind;
  /* The node for 'key' ("" for any node). */
  dlock__node *(*route)(dlock__topology *t, const char *key, size_t keylen);
  void (*destroy)(dlock__topology *t);
  /* Optional (NULL for standalone). */
  /* route() that can fail: NULL with '*rc' and dlock__error set when no node
   * can be found (sentinels unreachable, ...) or none by 'limit' (monotonic
   * ms, INT64_MAX for none; DLOCK_ETIMEDOUT). Use through dlock__route(). */
  dlock__node *(*route_rc)(dlock__topology *t, const char *key, size_t keylen, dlock_mono_ms limit, int *rc);
  /* Run 'n' commands, command i for the key keys[i], as one pipeline to the
   * node of keys[0], following redirects (cluster: MOVED, ASK, TRYAGAIN,
   * CLUSTERDOWN). Same contract as dlock__node_exec_until, 'limit'
   * included: a command that may have run is never sent again. A pipeline
   * whose keys live on several nodes is split by node; when some nodes
   * answer and others fail, the failed commands get an error reply that
   * starts with "DLOCKIO" (outcome unknown) and the call returns 0. When
   * set, every command goes through it; route() only names the owner. */
  int (*exec)(dlock__topology *t, const dlock__cmd *cmds, const char *const *keys, const size_t *keylens, size_t n,
              dlock__reply **replies, int *sent, dlock_mono_ms limit);
  /* How many master failovers this client has seen that may have moved
   * 'key' to another server: Sentinel counts every switch of its one
   * master, Cluster the failovers of the key's slot. A hold that began at
   * another count may have been lost to a failover (DLOCK_LOST_FAILOVER). */
  uint64_t (*failovers)(dlock__topology *t, const char *key, size_t keylen);
  /* The masters that own keys (for scans, cluster); returns the count.
   * NULL: the one node of route(""). */
  int (*masters)(dlock__topology *t, dlock__node **out, int max);
  /* Copy a warning about the deployment (sentinels that disagree) into
   * 'buf'; 1 when there is one. */
  int (*warning)(dlock__topology *t, char *buf, size_t len);
  /* WAIT numreplicas timeout after acquire and renewal (0: none). Sentinel
   * and standalone only: a cluster topology leaves it 0. */
  int wait_replicas;
  int wait_timeout_ms;
  /* Redlock: run 'calls' on every node and answer for the quorum (one
   * synthesized reply per call); DLOCK__QUORUM_PASS for the scripts it
   * leaves to route() (guard, scheduler). NULL elsewhere. */
  int (*quorum_run)(dlock__topology *t, dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies,
                    dlock_mono_ms limit);
};
#define DLOCK__QUORUM_PASS 1

int dlock__topology_standalone_new(const dlock__endpoint *ep, int max_conns, dlock__topology **out);
/* Sentinel (topo_sentinel.c): resolves the master of 'u->service' through
 * the sentinels; takes over 'u'. '*display' receives a name for messages. */
int dlock__topology_sentinel_new(dlock__sentinel_url *u, int max_conns, dlock__topology **out, char *display,
                                 size_t displaylen);
/* Redlock (topo_redlock.c): the node URLs of a redlock:// URL as redis://
 * URLs ('*out', '*n'; free with dlock__redlock_urls_free), and the topology
 * over their endpoints (takes them over; 'display' names it for messages). */
#define DLOCK__REDLOCK_MAX 16
int dlock__url_is_redlock(const char *url);
int dlock__redlock_split(const char *url, char ***out, int *n);
void dlock__redlock_urls_free(char **urls, int n);
void dlock__redlock_redact(const char *url, char *buf, size_t len);
int dlock__topology_redlock_new(dlock__endpoint *eps, int n, int max_conns, dlock__topology **out, char *display,
                                size_t displaylen);
/* Borrow a pooled connection for I/O the caller drives itself ('*fresh' 1
 * when it was opened now), and give it back ('failed': close it). */
int dlock__node_borrow(dlock__node *n, dlock_mono_ms limit, dlock__conn **out, int *fresh);
void dlock__node_return(dlock__node *n, dlock__conn *conn, int failed);
/* An idle pooled connection that is still open, without waiting or
 * connecting: 1 and '*out', or 0. */
int dlock__node_borrow_idle(dlock__node *n, dlock__conn **out);
/* Route with the error status: the node, or NULL and the status in '*rc'.
 * Gives up at 'limit' (INT64_MAX: none), e.g. while the master is resolved. */
dlock__node *dlock__route(dlock_client *c, const char *key, size_t keylen, dlock_mono_ms limit, int *rc);
/* Run 'n' commands for 'key' on its node, before 'limit': through t->exec
 * when set (cluster), else dlock__node_exec_until on dlock__route()'s node.
 * Same contract as dlock__node_exec_until. */
int dlock__topology_exec(dlock_client *c, const char *key, size_t keylen, const dlock__cmd *cmds, size_t n,
                         dlock__reply **replies, int *sent, dlock_mono_ms limit);
/* topo->failovers for 'key', 0 when the topology cannot fail over. */
uint64_t dlock__failovers(dlock__topology *t, const char *key, size_t keylen);

/* ---- Redis Cluster (topo_cluster.c) ---- */

#define DLOCK__MAX_REPLICAS 4
typedef struct dlock__hostport {
  char host[256];
  int port;
} dlock__hostport;
typedef struct dlock__slot_range {
  int start, end;
  dlock__hostport master;
  int nreplicas;
  dlock__hostport replica[DLOCK__MAX_REPLICAS];
} dlock__slot_range;

/* CRC16 (XMODEM) as Redis Cluster uses it; the key's slot (0..16383) honours
 * a non-empty {hash tag}. */
unsigned dlock__crc16(const char *buf, size_t len);
int dlock__cluster_slot(const char *key, size_t len);
/* Parse "MOVED <slot> <host>:<port>" / "ASK ..."; an empty host is 'self'.
 * Returns 0, or -1 when 'err' is not a well-formed redirect. */
int dlock__cluster_parse_redirect(const char *err, const char *self, int *is_ask, int *slot, dlock__hostport *to);
/* Parse a CLUSTER SLOTS reply into a malloc'ed array; 0, -1 malformed, -2 no memory. */
int dlock__cluster_parse_slots(const dlock__reply *r, const char *self, dlock__slot_range **out, size_t *n);
/* Takes over 'ep' (a redis-cluster:// endpoint), loads the slot map. */
int dlock__topology_cluster_new(dlock__endpoint *ep, int max_conns, dlock__topology **out);

/* ---- The backend's client state (backend.c): its topology ---- */

typedef struct dlock__subscriber dlock__subscriber;
typedef struct dlock__pipeline dlock__pipeline;

typedef struct dlock__redis {
  dlock__topology *topo;
  atomic_uint_fast64_t waiter_seq;
  dlock__subscriber *subscriber; /* started on first wait (under c->lazy_mu) */
  /* pipeline.c: made on the first release_async (under c->lazy_mu); read
   * without it by every script call (dlock__pipeline_exec) */
  _Atomic(dlock__pipeline *) pipeline;
} dlock__redis;

static inline dlock__redis *dlock__rc(const dlock_client *c) { return (dlock__redis *)c->be; }
static inline dlock__topology *dlock__topo(const dlock_client *c) { return dlock__rc(c)->topo; }

/* Hand-off messages use sharded pub/sub (SSUBSCRIBE/SPUBLISH on the slot's
 * master) on a cluster; waiter ids then carry ":s" so that the scripts know. */
static inline int dlock__sharded_pubsub(const dlock_client *c) { return dlock__topo(c)->exec != NULL; }

/* When pipelined releases for 'node' are corked (pipeline.c), send 'cmds'
 * after them on the pipeline connection, in the same write, and read their
 * replies, as dlock__node_exec_until would: returns 1 with the status in
 * '*out'. 0 when nothing is corked there: the caller sends them itself. */
int dlock__pipeline_exec(dlock_client *c, dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies,
                         int *sent, dlock_mono_ms limit, int *out);

#endif /* DLOCK_REDIS_TOPO_H */
