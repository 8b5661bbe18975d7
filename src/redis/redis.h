/*
 * redis.h - the Redis backend: its declarations, shared by src/redis/ only
 * (and the tests of its parts).
 *
 * Layers, bottom up: url (endpoint) -> conn (one socket or TLS stream
 * speaking RESP, encoded and parsed here: no Redis client library) -> node and topology (pools of
 * connections, routing by key: standalone, Sentinel, Cluster, Redlock) ->
 * scripts (EVALSHA with NOSCRIPT fallback) -> lock, waiters, admin, sched,
 * check: the operations of dlock__redis_ops (backend.h).
 */
#ifndef DLOCK_REDIS_H
#define DLOCK_REDIS_H

#include "internal.h"

typedef struct ssl_ctx_st SSL_CTX;

/* ---- Endpoint (url.c) ---- */

typedef struct dlock__endpoint {
  int is_unix;
  int tls;
  char *host;      /* tcp */
  int port;        /* tcp */
  char *path;      /* unix */
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
  } *seeds;
} dlock__endpoint;

/* Parse 'url' into 'ep' (zeroed first). */
int dlock__url_parse(const char *url, dlock__endpoint *ep);
void dlock__endpoint_clear(dlock__endpoint *ep);

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

/* ---- Replies (conn.c) ---- */

typedef enum dlock__reply_type {
  DLOCK__REPLY_STRING,
  DLOCK__REPLY_ARRAY,
  DLOCK__REPLY_INTEGER,
  DLOCK__REPLY_NIL,
  DLOCK__REPLY_STATUS,
  DLOCK__REPLY_ERROR
} dlock__reply_type;

typedef struct dlock__reply {
  dlock__reply_type type;
  long long integer;
  char *str; /* NUL-terminated; STRING, STATUS, ERROR */
  size_t len;
  size_t elements;
  struct dlock__reply **element;
} dlock__reply;

void dlock__reply_free(dlock__reply *r);

/* ---- Reply reader (reader.c) ---- */

/* Bounds on one reply. Real replies to dlock's commands are far smaller
 * (the largest are INFO and SCAN pages); a reply that announces more is
 * refused with DLOCK_EPROTO before anything is allocated for it. */
#define DLOCK__REPLY_MAX_ELEMENTS ((size_t)1 << 20)    /* array elements, all levels */
#define DLOCK__REPLY_MAX_BULK ((size_t)64 << 20)       /* one bulk string */
#define DLOCK__REPLY_MAX_BYTES ((size_t)256 << 20)     /* the whole reply */
#define DLOCK__REPLY_MAX_LINE ((size_t)1 << 20)        /* status, error, length lines */

typedef struct dlock__reader_limits {
  size_t max_elements;
  size_t max_bulk;
  size_t max_reply;
} dlock__reader_limits;

typedef struct dlock__reader dlock__reader;

void dlock__reader_default_limits(dlock__reader_limits *l);
/* NULL limits: the defaults above. NULL when out of memory. */
dlock__reader *dlock__reader_new(const dlock__reader_limits *limits);
void dlock__reader_free(dlock__reader *rd);
/* Append bytes. DLOCK_EPROTO when they cannot be part of a bounded reply. */
int dlock__reader_feed(dlock__reader *rd, const char *data, size_t n);
/* 0 and *out = the next whole reply, or *out = NULL when more bytes are
 * needed; DLOCK_EPROTO (sticky) with dlock__reader_error() saying why. */
int dlock__reader_get(dlock__reader *rd, dlock__reply **out);
const char *dlock__reader_error(const dlock__reader *rd);
/* Bytes fed but not yet returned as replies. */
size_t dlock__reader_pending(const dlock__reader *rd);
/* One reply from a byte buffer, through the same reader (tests, fuzzing):
 * 0 with *out set (or NULL when 'buf' holds no whole reply) and *used the
 * bytes it took; DLOCK_EPROTO/DLOCK_ENOMEM with the reason in 'err'. */
int dlock__reply_parse(const char *buf, size_t len, const dlock__reader_limits *limits,
                       dlock__reply **out, size_t *used, char *err, size_t err_len);
/* Map an error reply to a DLOCK_E* status (WRONGTYPE, NOPERM, NOAUTH, ...). */
int dlock__reply_error_status(const dlock__reply *r);

/* ---- Connection (conn.c) ---- */

typedef struct dlock__conn dlock__conn;

/* One command: argv with explicit lengths (binary safe). */
typedef struct dlock__cmd {
  int argc;
  const char **argv;
  const size_t *lens;
} dlock__cmd;

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
/* RESP encoding of 'cmd': at most dlock__resp_size() bytes, written by
 * dlock__resp_encode(), which returns how many it wrote. */
size_t dlock__resp_size(const dlock__cmd *cmd);
size_t dlock__resp_encode(char *out, const dlock__cmd *cmd);
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
  int (*exec)(dlock__topology *t, const dlock__cmd *cmds, const char *const *keys, const size_t *keylens,
              size_t n, dlock__reply **replies, int *sent, dlock_mono_ms limit);
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
  int (*quorum_run)(dlock__topology *t, dlock_client *c, dlock__script_call *calls, size_t n,
                    dlock__reply **replies, dlock_mono_ms limit);
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

/* ---- Scripts (scripts.c) ---- */

typedef enum dlock__script_id {
  DLOCK__SCRIPT_ACQUIRE,
  DLOCK__SCRIPT_RELEASE,
  DLOCK__SCRIPT_EXTEND,
  DLOCK__SCRIPT_WITHDRAW,
  DLOCK__SCRIPT_INFO,
  DLOCK__SCRIPT_FORCE_RELEASE,
  DLOCK__SCRIPT_GUARD,
  DLOCK__SCRIPT_SCHED_CLAIM,
  DLOCK__SCRIPT_SCHED_DELAY,
  DLOCK__SCRIPT_SCHED_FINISH,
  DLOCK__SCRIPT_SCHED_HISTORY,
  DLOCK__SCRIPT_RL_EXTEND, /* Redlock (topo_redlock.c) */
  DLOCK__SCRIPT_RL_FENCE,
  DLOCK__SCRIPT_RL_SCHED_UNCLAIM,
  DLOCK__SCRIPT_RL_MARKER,
  DLOCK__SCRIPT_RW_ACQUIRE, /* read-write locks (rwlock.c) */
  DLOCK__SCRIPT_RW_RELEASE,
  DLOCK__SCRIPT_RW_EXTEND,
  DLOCK__SCRIPT_RW_WITHDRAW,
  DLOCK__SCRIPT_RW_INFO,
  DLOCK__SCRIPT_LATCH_SET, /* countdown latches (latch.c) */
  DLOCK__SCRIPT_LATCH_DOWN,
  DLOCK__SCRIPT_LATCH_GET,
  DLOCK__SCRIPT_SEM_ACQUIRE, /* semaphores (semaphore.c, lua/sem_*.lua) */
  DLOCK__SCRIPT_SEM_RELEASE,
  DLOCK__SCRIPT_SEM_EXTEND,
  DLOCK__SCRIPT_SEM_WITHDRAW,
  DLOCK__SCRIPT_SEM_INFO,
  DLOCK__SCRIPT_PROCLAIM, /* leader election (election.c) */
  DLOCK__SCRIPT_COUNT
} dlock__script_id;

/* Up to this many KEYS and ARGV entries per script call. */
#define DLOCK__SCRIPT_MAX_ARGS 16

struct dlock__script_call {
  dlock__script_id script;
  int nkeys;
  const char *keys[DLOCK__SCRIPT_MAX_ARGS];
  size_t keylens[DLOCK__SCRIPT_MAX_ARGS];
  int nargs;
  const char *args[DLOCK__SCRIPT_MAX_ARGS];
  size_t arglens[DLOCK__SCRIPT_MAX_ARGS];
  int maybe_ran; /* out: the call failed after it may have reached the server */
  int resent;    /* out: dlock__script_run_twice_safe sent it a second time */
  /* out: replicas that acknowledged the pipeline's writes (WAIT after an
   * acquire or extend, when the topology asks for it); -1 when not asked. */
  int replicas;
  /* out, Redlock acquire that failed: 1 when no other owner held a majority
   * (a split between contenders, or too slow): the waiter retries after a
   * random delay, not at a wake-up; and the shortest lease left (ms) on a
   * node held by another owner, -1 when none (when to look again); and
   * how many nodes' grant messages wake the waiter (rl_need, below). */
  int rl_tie;
  long long rl_pttl;
  int rl_need;
};

const char *dlock__script_name(dlock__script_id id);
/* Run 'n' calls (all routed by the first key of calls[0]) as one pipeline
 * of EVALSHA; those answered NOSCRIPT are sent again as EVAL. */
int dlock__script_run(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies);
/* The SHA1 of a script as EVALSHA names it, and its text (with the prelude):
 * tests and the fault proxy match on the one and preload the other. */
const char *dlock__script_sha(dlock__script_id id);
const char *dlock__script_text(dlock__script_id id);
/* The argv of EVALSHA ('by_sha') or EVAL for one call, in 'e' (which must
 * outlive 'cmd'): command, sha or text, numkeys, keys, args. */
typedef struct dlock__eval_argv {
  const char *argv[3 + 2 * DLOCK__SCRIPT_MAX_ARGS];
  size_t lens[3 + 2 * DLOCK__SCRIPT_MAX_ARGS];
  char numkeys[8];
  char epoch[DLOCK_MAX_NAME_LEN + 32]; /* dlock__script_add_epoch's key */
} dlock__eval_argv;
void dlock__script_build_eval(dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call, int by_sha);
/* Sentinel and Cluster without WAIT: append to a built call, as its last
 * key, the record of the master's epoch (prelude.lua's DLOCK_EPOCH; docs/
 * topologies.md, "The guard across a failover"); nothing elsewhere. */
void dlock__script_add_epoch(dlock_client *c, dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call);
/* That key for a script whose first key is 'key0' into 'buf': its length, 0
 * when the topology keeps no such record. */
size_t dlock__epoch_key(dlock_client *c, const char *key0, size_t len0, char *buf, size_t cap);
/* The smallest number whose decimal string hashes to cluster slot 'slot'
 * (the tag of that slot's record): 0, or -1 when none was found. */
int dlock__epoch_slot_tag(int slot, uint32_t *tag);
/* 1 when 'r' is a NOSCRIPT error reply (send the call again as EVAL). */
int dlock__reply_is_noscript(const dlock__reply *r);
/* One call of a script that is safe to run twice with the same arguments:
 * when its reply was lost after it may have run, it is sent once more and
 * call->resent is set (the answer then describes the state after both runs;
 * each caller says what that means for its script). */
int dlock__script_run_twice_safe(dlock_client *c, dlock__script_call *call, dlock__reply **reply);
/* The same, giving up at 'limit' when that comes before the command timeout. */
int dlock__script_run_until(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies,
                            dlock_mono_ms limit);
/* 1 when 'call' (an acquire or extend) needed WAIT and too few replicas
 * acknowledged; the error detail says how many. */
int dlock__replicas_short(dlock_client *c, const dlock__script_call *call);

/* ---- The backend's client and handle state (backend.c) ---- */

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

/* ---- Server checks (check.c) ---- */

/* At connect: read maxmemory-policy (INFO memory) and note a policy that can
 * evict lock keys in c->warnings. Never fails the connect. */
void dlock__check_at_connect(dlock_client *c);

/* ---- Lock keys and handles (lock.c) ---- */

/* The Redis keys of one lock, see docs/keys.md. */
enum { DLOCK__K_LOCK, DLOCK__K_FENCE, DLOCK__K_META, DLOCK__K_QUEUE, DLOCK__K_WAITERS, DLOCK__K_COUNT };

typedef struct dlock__lock_keys {
  char *key[DLOCK__K_COUNT];
  size_t len[DLOCK__K_COUNT];
} dlock__lock_keys;

int dlock__lock_keys_init(dlock__lock_keys *k, const dlock_client *c, const char *name);
void dlock__lock_keys_clear(dlock__lock_keys *k);
void dlock__script_call_keys(dlock__script_call *call, const dlock__lock_keys *k);

/* A lock handle's Redis state (m->be). */
typedef struct dlock__rmutex {
  dlock__lock_keys keys;
  char *channel; /* this client's wake-up channel for this lock */
  size_t channel_len;
  char waiter_id[48];
  int watch_tried;   /* dlock__subscriber_watch() was called for this handle */
  int subscribed;    /* ... and holds a reference on this many entries of the channel (Redlock: one per node) */
  uint64_t failovers_at_acquire; /* dlock__failovers() for the lock key when the hold began */
  /* Hand-off without a confirming call (guarded by m->mu): the nonce of the
   * acquire call in flight or last answered, and the fence of a grant
   * message that named it (0: none came). waiters.c fills grant_fence. */
  uint64_t nonce_seq;
  uint64_t grant_nonce;
  uint64_t grant_fence;
  /* Redlock (guarded by m->mu): grant messages since the last acquire call
   * was sent, and how many wake the waiter (0 or 1: the first). A waiter
   * woken by one node's hand-off while the others still hold would fail its
   * quorum try, and giving that node back passes it to the next waiter in
   * its queue: the order of arrival would be lost. */
  int grants;
  int grants_needed;
} dlock__rmutex;

static inline dlock__rmutex *dlock__rm(const dlock_mutex *m) { return (dlock__rmutex *)m->be; }

/* Why a hold is gone when Redis says the key is gone (taken 0) or another
 * token's (taken 1), or the forced release's tombstone says it was deleted
 * (-2): FAILOVER when the topology saw a failover that may have moved the
 * lock key (Sentinel: the master; Cluster: the key's slot) since the hold
 * began. 'reply' is the extend/release script's answer. */
dlock_lost_reason dlock__lost_reason(dlock_mutex *m, long long reply);

/* ---- Subscriber (waiters.c) ---- */

/* Subscribe this client to 'm's wake-up channel (once per handle); waits up
 * to the command timeout for the confirmation. Failure is not fatal for the
 * caller: waits then fall back to re-checks. */
int dlock__subscriber_watch(dlock_client *c, dlock_mutex *m);
void dlock__subscriber_unwatch(dlock_client *c, dlock_mutex *m);
/* Make 'm' findable by its waiter_id for grant messages. */
void dlock__subscriber_add_waiter(dlock_client *c, dlock_mutex *m);
void dlock__subscriber_remove_waiter(dlock_client *c, dlock_mutex *m);
void dlock__subscriber_stop(dlock_client *c);

/* ---- The operations of dlock__redis_ops (backend.c) ---- */

void dlock__redis_redact(const char *url, char *buf, size_t len);          /* url.c */
int dlock__redis_lock_new(dlock_mutex *m);                                 /* lock.c */
void dlock__redis_lock_free(dlock_mutex *m);
int dlock__redis_acquire(dlock_mutex *m, int64_t lease, int64_t wait_ms, dlock_mono_ms deadline,
                         dlock__grant *grant);
void dlock__redis_undo(dlock_mutex *m);
int dlock__redis_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
/* The same for the hold of 'token' (a pipelined release resent after
 * NOSCRIPT: the handle may have been acquired again since, by another thread),
 * acquired when dlock__failovers() was 'failovers_at_acquire': a hold the
 * master no longer has after a failover since then is reported as lost at
 * the failover, and '*found' (may be NULL) set to DLOCK_LOST_FAILOVER. */
int dlock__redis_release_token(dlock_mutex *m, const char *token, dlock_mono_ms valid_until,
                               dlock_lost_reason lost, uint64_t failovers_at_acquire, dlock_lost_reason *found);
/* The release's message for a hold lost at a failover; 'v' as release.lua answers (0 or -1). */
const char *dlock__release_failover_msg(long long v);
int dlock__redis_release_async(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost); /* pipeline.c */
void dlock__redis_release_collect(dlock_mutex *m);
/* At close: read every pending reply (outcomes to their handles), free. */
void dlock__pipeline_free(dlock_client *c);
/* When pipelined releases for 'node' are corked (pipeline.c), send 'cmds'
 * after them on the pipeline connection, in the same write, and read their
 * replies, as dlock__node_exec_until would: returns 1 with the status in
 * '*out'. 0 when nothing is corked there: the caller sends them itself. */
int dlock__pipeline_exec(dlock_client *c, dlock__node *node, const dlock__cmd *cmds, size_t n,
                         dlock__reply **replies, int *sent, dlock_mono_ms limit, int *out);
int dlock__redis_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                        dlock_lost_reason *lost);
void dlock__redis_renew(dlock_client *c, dlock__renewal *rn, size_t n, dlock_mono_ms limit);
int dlock__redis_held(dlock_mutex *m, const char *token, int64_t *ttl_ms);
int dlock__redis_info(dlock_client *c, const char *name, dlock_lock_info *out);   /* admin.c */
int dlock__redis_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
int dlock__redis_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held);
int dlock__redis_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest);
int dlock__redis_check(dlock_client *c, dlock_check *out, int max);        /* check.c */
int dlock__redis_node_count(const dlock_client *c);                        /* topo_redlock.c */
const char *dlock__redis_node_name(const dlock_client *c, int i);
dlock__node *dlock__redlock_node(dlock_client *c, int i); /* the subscriber's homes (waiters.c) */
int dlock__redis_info_node(dlock_client *c, const char *name, int i, dlock_lock_info *out);
int dlock__redis_check_node(dlock_client *c, int i, dlock_check *out, int max);
int dlock__redis_sched_claim(dlock_client *c, dlock__claim *cl);           /* sched.c */
int dlock__redis_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec,
                              int *lock_was_ours);
void dlock__redis_sched_undo(dlock_client *c, const dlock__claim *cl);
int dlock__redis_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max);

/* ---- Read-write locks (rwlock.c): handles of kind READ and WRITE ---- */

static inline int dlock__is_rw(const dlock_mutex *m) {
  return m->kind == DLOCK__KIND_READ || m->kind == DLOCK__KIND_WRITE;
}
int dlock__redis_rw_acquire(dlock_mutex *m, int64_t lease, int64_t wait_ms, dlock_mono_ms deadline,
                            dlock__grant *grant);
void dlock__redis_rw_undo(dlock_mutex *m);
int dlock__redis_rw_held(dlock_mutex *m, const char *token, int64_t *ttl_ms);
/* dlock_lock_info for a name whose holders key is a read-write lock's. */
/* An rw_info.lua reply (12 elements; info.lua gives it for a read-write
 * lock's name) into 'out'. DLOCK_EPROTO when it is not one. */
int dlock__redis_rw_parse(const dlock__reply *r, dlock_lock_info *out);
int dlock__redis_rw_info(dlock_client *c, const char *name, dlock_lock_info *out);
/* Countdown latches (latch.c). */
int dlock__redis_latch_new(dlock_latch *l);
void dlock__redis_latch_free(dlock_latch *l);
int dlock__redis_latch_set(dlock_latch *l, int64_t count, int64_t expire_ms);
int dlock__redis_latch_count_down(dlock_latch *l, int64_t *left);
int dlock__redis_latch_get(dlock_latch *l, int64_t *count, int64_t *ttl_ms);
int dlock__redis_latch_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
int dlock__redis_latch_wait(dlock_latch *l, int64_t wait_ms, dlock_mono_ms deadline);
void dlock__redis_latch_cancel(dlock_latch *l);

/* This backend's table of operations (core/backend.c's scheme registry points to it). */
extern const dlock__backend_ops dlock__redis_ops;

#endif /* DLOCK_REDIS_H */
