/*
 * internal.h - declarations shared between libdlock's source files.
 *
 * Layers, bottom up: errors/clock/token (no I/O) -> url (endpoint) -> conn
 * (one socket or TLS stream speaking RESP; the only hiredis user) -> node and
 * topology (pools of connections, routing by key) -> scripts (EVALSHA with
 * NOSCRIPT fallback) -> mutex, watchdog, waiters, admin.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

typedef struct ssl_ctx_st SSL_CTX;

/* ---- Errors (errors.c) ---- */

/* Record 'status' and a formatted detail as this thread's last error;
 * returns 'status' so that callers can `return dlock__error(...)`. */
int dlock__error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dlock__error_clear(void);
/* Prepend context ("acquire 'orders:1' on 127.0.0.1:6379: ") to the last error. */
void dlock__error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- Clock and sleep (clock.c) ---- */

void dlock__sleep_ms(int64_t ms);
/* Fill 'ts' with the CLOCK_MONOTONIC time 'deadline' (for pthread_cond_timedwait
 * on a condvar created with dlock__cond_init). */
void dlock__deadline_timespec(dlock_mono_ms deadline, struct timespec *ts);
int dlock__cond_init(pthread_cond_t *cv);

/* ---- Random tokens (token.c) ---- */

#define DLOCK__TOKEN_HEX 32 /* 128 bits */
/* 'nbytes' random bytes from getrandom(2) written as 2*nbytes hex chars + NUL. */
int dlock__random_hex(char *out, size_t nbytes);

/* ---- Names and durations (validate.c) ---- */

int dlock__check_name(const char *what, const char *name);
int dlock__check_duration(const char *what, int64_t ms, int allow_zero);

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
void dlock__conn_close(dlock__conn *c);
int dlock__conn_fd(const dlock__conn *c);
/* Queue a command in the output buffer (no I/O). */
int dlock__conn_append(dlock__conn *c, const dlock__cmd *cmd);
/* Write the output buffer; read one reply. On any failure the connection is
 * marked broken and must be closed. */
int dlock__conn_flush(dlock__conn *c, dlock_mono_ms deadline);
int dlock__conn_read(dlock__conn *c, dlock_mono_ms deadline, dlock__reply **out);
/* 1 when a whole reply is already buffered (no I/O needed to read it). */
int dlock__conn_has_buffered(dlock__conn *c);
int dlock__conn_broken(const dlock__conn *c);

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
} dlock__node;

int dlock__node_init(dlock__node *n, const dlock__endpoint *ep, int max_conns);
void dlock__node_destroy(dlock__node *n);
/* Send 'n' commands as one pipeline and read their replies (replies[i] may
 * be an error reply). Retries once on a fresh connection when a pooled one
 * turns out dead before anything was read. On failure '*sent' (may be NULL)
 * tells whether the commands may have reached the server: if so, whether
 * they ran is unknown. */
int dlock__node_exec(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent);

/* The seam for deployments other than one standalone server: the lock code
 * asks the topology for the node that owns a key. Cluster routes by slot,
 * Sentinel follows the master; Redlock replaces the single node with a quorum
 * over several (see docs/design.md). */
typedef struct dlock__topology dlock__topology;
struct dlock__topology {
  const char *kind;
  /* The node for 'key' ("" for any node). */
  dlock__node *(*route)(dlock__topology *t, const char *key, size_t keylen);
  void (*destroy)(dlock__topology *t);
  /* Optional (NULL for standalone): run 'n' commands, command i for the
   * slot of keys[i], all sent first to the node of keys[0]; follows cluster
   * redirects (MOVED, ASK, TRYAGAIN, CLUSTERDOWN). Same contract as
   * dlock__node_exec. */
  int (*exec)(dlock__topology *t, const dlock__cmd *cmds, const char *const *keys, const size_t *keylens,
              size_t n, dlock__reply **replies, int *sent);
  /* Optional: how many master failovers this client saw for the key's slot
   * (a hold that began under another count may have been lost to one). */
  unsigned (*failovers)(dlock__topology *t, const char *key, size_t keylen);
  /* Optional: the masters that own slots (for scans); returns the count. */
  int (*masters)(dlock__topology *t, dlock__node **out, int max);
};

int dlock__topology_standalone_new(const dlock__endpoint *ep, int max_conns, dlock__topology **out);
/* Run commands for 'key' on its node: t->exec when set, else dlock__node_exec. */
int dlock__topology_exec(dlock__topology *t, const char *key, size_t keylen, const dlock__cmd *cmds, size_t n,
                         dlock__reply **replies, int *sent);

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
  DLOCK__SCRIPT_COUNT
} dlock__script_id;

/* Up to this many KEYS and ARGV entries per script call. */
#define DLOCK__SCRIPT_MAX_ARGS 16

typedef struct dlock__script_call {
  dlock__script_id script;
  int nkeys;
  const char *keys[DLOCK__SCRIPT_MAX_ARGS];
  size_t keylens[DLOCK__SCRIPT_MAX_ARGS];
  int nargs;
  const char *args[DLOCK__SCRIPT_MAX_ARGS];
  size_t arglens[DLOCK__SCRIPT_MAX_ARGS];
  int maybe_ran; /* out: the call failed after it may have reached the server */
} dlock__script_call;

const char *dlock__script_name(dlock__script_id id);
/* Run 'n' calls (all routed by the first key of calls[0]) as one pipeline
 * of EVALSHA; those answered NOSCRIPT are sent again as EVAL. */
int dlock__script_run(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies);

/* ---- Client (client.c) ---- */

typedef struct dlock__watchdog dlock__watchdog;
typedef struct dlock__subscriber dlock__subscriber;

struct dlock_client {
  char server[300];       /* display name of the server, for messages */
  int command_timeout_ms;
  dlock__topology *topo;
  char *prefix; /* "" when none */
  size_t prefix_len;
  char id[17]; /* random; names this client's wake-up channels */
  atomic_uint_fast64_t waiter_seq;
  atomic_int closing;
  dlock__watchdog *watchdog;     /* started on first hold */
  dlock__subscriber *subscriber; /* started on first wait */
  pthread_mutex_t lazy_mu;       /* guards starting the two above */
};

/* Hand-off messages use sharded pub/sub (SSUBSCRIBE/SPUBLISH on the slot's
 * master) on a cluster; waiter ids then carry ":s" so that the scripts know. */
static inline int dlock__sharded_pubsub(const dlock_client *c) { return c->topo->exec != NULL; }

/* ---- Lock keys (mutex.c) ---- */

/* The Redis keys of one lock, see docs/keys.md. */
enum { DLOCK__K_LOCK, DLOCK__K_FENCE, DLOCK__K_META, DLOCK__K_QUEUE, DLOCK__K_WAITERS, DLOCK__K_COUNT };

typedef struct dlock__lock_keys {
  char *key[DLOCK__K_COUNT];
  size_t len[DLOCK__K_COUNT];
} dlock__lock_keys;

int dlock__lock_keys_init(dlock__lock_keys *k, const dlock_client *c, const char *name);
void dlock__lock_keys_clear(dlock__lock_keys *k);
void dlock__script_call_keys(dlock__script_call *call, const dlock__lock_keys *k);

/* ---- Mutex state shared with the watchdog and subscriber ---- */

struct dlock_mutex {
  dlock_client *client;
  char *name;
  dlock__lock_keys keys;
  char *channel; /* this client's wake-up channel for this lock */
  size_t channel_len;
  dlock_mutex_options opts;
  char *owner_info;

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;  /* hold state changes, wake-ups */
  int busy;           /* a thread holds or is acquiring through this handle */
  pthread_t owner;
  unsigned hold_count;
  char token[DLOCK__TOKEN_HEX + 1];
  uint64_t fence;
  int64_t lease_ms;       /* lease in force (fixed or watchdog) */
  int watchdog_mode;
  dlock_mono_ms acquired_at;
  dlock_mono_ms valid_until;
  atomic_int lost;        /* dlock_lost_reason */
  unsigned failovers_at_acquire; /* topo->failovers() when the hold began */
  int lost_fd;            /* eventfd, -1 until asked for */

  /* Waiting (see waiters.c). */
  char waiter_id[48];
  int waiting;
  int woken;              /* a grant message arrived */
  uint64_t granted_fence;
  unsigned cancel_gen;    /* bumped by dlock_mutex_cancel(): waits begun before end */
  unsigned wait_gen;      /* cancel_gen when the thread now acquiring began */
  int watch_tried;        /* dlock__subscriber_watch() was called for this handle */
  int subscribed;         /* ... and holds a reference on the channel */

  /* Watchdog list membership (guarded by the watchdog's mutex). */
  struct dlock_mutex *wd_prev, *wd_next;
  int wd_registered;
  int wd_in_callback;
  dlock_mono_ms wd_next_renew;

  char errmsg[512];
};

/* ---- Watchdog (watchdog.c) ---- */

int dlock__watchdog_add(dlock_client *c, dlock_mutex *m);
/* Remove 'm'; waits for a lost-callback on 'm' to finish (unless called from it). */
void dlock__watchdog_remove(dlock_client *c, dlock_mutex *m);
void dlock__watchdog_stop(dlock_client *c);
/* After an extend that may have shortened the lease ('lease_ms' from 'start'):
 * make the watchdog look at 'm' again in time. */
void dlock__watchdog_rearm(dlock_client *c, dlock_mutex *m, dlock_mono_ms start, int64_t lease_ms);
/* Mark 'm' lost (once): set reason, signal the fd. Caller holds m->mu. */
void dlock__mutex_mark_lost(dlock_mutex *m, dlock_lost_reason reason);
/* EXPIRED or TAKEN as seen by a renewal becomes FAILOVER when the router saw
 * the lock's slot fail over to another master since the hold began. */
dlock_lost_reason dlock__loss_reason(dlock_mutex *m, dlock_lost_reason seen);
/* Local validity deadline for a lease that began at 'start'. */
dlock_mono_ms dlock__valid_until(dlock_mono_ms start, int64_t lease_ms);

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

#endif /* DLOCK_INTERNAL_H */
