/*
 * dlock.h - distributed locks: the whole public API of libdlock.
 *
 * A dlock_client talks to one deployment (a URL; its scheme picks the
 * backend: dlock_url_backend(), docs/topologies.md). A dlock_mutex is a
 * named, leased, fenced lock taken through a client. Every call returns 0 or
 * a negative DLOCK_E* status; dlock_strerror() names it and the handle's
 * errmsg says which server and key were involved and what to do.
 *
 * Ownership: every string passed in is copied. Each *_new has a *_free that
 * accepts NULL. Handles are thread-safe unless a comment says otherwise.
 *
 * ABI rule for the structs the caller allocates (dlock_client_options,
 * dlock_mutex_options, dlock_lock_info, dlock_sched_options,
 * dlock_job_options, dlock_run_record): each begins with 'struct_size',
 * which its dlock_*_init() sets to the size of the struct in the dlock.h the
 * caller was compiled with. Always call the _init first, then set fields.
 *  - Within a major version, fields are only ever added at the end of
 *    these structs, and functions are only added, never changed.
 *  - The library reads (and, for results, writes) only the first
 *    'struct_size' bytes: a program built against an older dlock.h keeps
 *    working with a newer libdlock, the fields it does not know taking
 *    their defaults.
 *  - A 'struct_size' of 0 or garbage (never initialised), or larger than
 *    the library knows (built against a newer dlock.h than the library) is
 *    refused with DLOCK_EINVAL, and dlock_last_error() names the _init to
 *    call.
 *
 * Structs the library hands out (dlock_tick, dlock_sched_event) may also
 * grow at the end; read only the fields you know.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH: 0.1.0 is 100. */
#define DLOCK_VERSION_NUMBER (DLOCK_VERSION_MAJOR * 10000 + DLOCK_VERSION_MINOR * 100 + DLOCK_VERSION_PATCH)

/* ---- Errors ---- */

/* Status codes. Negative, named, numbered here and never renumbered. */
#define DLOCK_ERRNO_MAP(XX)                                                       \
  XX(EBUSY, -1, "lock is held by another owner")                                  \
  XX(ENOTHELD, -2, "lock is not held by this owner")                              \
  XX(EINVAL, -3, "invalid argument")                                              \
  XX(ENAME, -4, "invalid lock or resource name")                                  \
  XX(ERANGE, -5, "duration or number out of range")                               \
  XX(EURL, -6, "malformed server URL")                                            \
  XX(ECONNECT, -7, "cannot connect to the server")                                \
  XX(EAUTH, -8, "authentication to the server failed")                            \
  XX(ETIMEDOUT, -9, "the server did not answer in time")                          \
  XX(EIO, -10, "connection to the server lost")                                   \
  XX(ETLS, -11, "TLS failure")                                                    \
  XX(EPROTO, -12, "unexpected reply from the server")                             \
  XX(ESERVER, -13, "the server returned an error")                                \
  XX(EWRONGTYPE, -14, "key exists with a type dlock does not use")                \
  XX(ENOPERM, -15, "the server's ACL denied the command or key")                  \
  XX(ELOST, -16, "lock was lost")                                                 \
  XX(ESTALE, -17, "fencing token is stale")                                       \
  XX(ENOMEM, -18, "out of memory")                                                \
  XX(EUNKNOWN, -19, "outcome unknown: the lock may be held until its lease ends") \
  XX(ESYS, -20, "operating system error")                                         \
  XX(ECLOSED, -21, "client is shutting down")                                     \
  XX(EREADONLY, -22, "the server is read-only (a replica or standby)")            \
  XX(ESERVEROOM, -23, "the server is out of memory (maxmemory)")                  \
  XX(ECANCELED, -24, "wait was canceled")                                         \
  XX(ECRON, -25, "invalid cron expression")                                       \
  XX(ETZ, -26, "unknown or unreadable time zone")                                 \
  XX(ETIME, -27, "invalid time")                                                  \
  XX(EFENCE, -28, "fence counter holds a value dlock cannot continue from")       \
  XX(ETOPOLOGY, -29, "the deployment's topology could not be resolved")           \
  XX(EREPLICAS, -30, "replicas did not acknowledge the write in time")            \
  XX(ECLUSTER, -31, "the cluster is not usable as the URL says")                  \
  XX(EFOREIGN, -32, "key is not a dlock lock (no dlock metadata)")                \
  XX(EQUORUM, -33, "no majority of the nodes confirmed in time")                  \
  XX(EDB, -34, "the server has no such database (the URL's /db)")                 \
  XX(ELIMIT, -35, "semaphore's stored limit differs from the caller's")           \
  XX(EUPGRADE, -36, "read -> write upgrade refused: it would deadlock")           \
  XX(ENOLATCH, -37, "no such latch: never set, or expired")                       \
  XX(ENOTREADY, -38, "the server is not ready (loading, busy or failing over)")

typedef enum dlock_status {
  DLOCK_OK = 0,
#define DLOCK__ENUM(name, code, text) DLOCK_##name = (code),
  DLOCK_ERRNO_MAP(DLOCK__ENUM)
#undef DLOCK__ENUM
} dlock_status;

/* Short English text for 'status' ("lock is held by another owner").
 * Never NULL; unknown codes give "unknown dlock status". */
DLOCK_API const char *dlock_strerror(int status);
/* The enum name for 'status' without the prefix ("EBUSY"), or "UNKNOWN". */
DLOCK_API const char *dlock_err_name(int status);
/* Detail of the last failed dlock call made by this thread: which server,
 * which key, what it said and what to do. Empty string when none. */
DLOCK_API const char *dlock_last_error(void);

/* ---- Version ---- */

/* The version of the libdlock in use at run time ("0.1.0"), which may be
 * newer than DLOCK_VERSION, the dlock.h the program was compiled with. */
DLOCK_API const char *dlock_version(void);
/* The same as a number, MAJOR * 10000 + MINOR * 100 + PATCH, to compare
 * with DLOCK_VERSION_NUMBER: e.g. refuse to run on an older library. */
DLOCK_API int dlock_version_number(void);

/* ---- Time ---- */

/* Milliseconds on the monotonic clock (CLOCK_MONOTONIC). Not wall time. */
typedef int64_t dlock_mono_ms;
DLOCK_API dlock_mono_ms dlock_mono_now(void);

/* Wait forever in dlock_mutex_acquire(). */
#define DLOCK_WAIT_FOREVER ((int64_t)-1)
/* Largest duration accepted anywhere: 30 days. */
#define DLOCK_MAX_DURATION_MS ((int64_t)30 * 24 * 3600 * 1000)
/* Parse a duration as the dlock command and option strings take it:
 * number-unit pairs from the largest unit to the smallest, each unit once
 * ("1m30s", "1h2m", "2d", "500ms"; units d, h, m, s, ms), a decimal
 * fraction ("1.5s", "0.5d"), or a lone number of seconds ("10", "0.25").
 * No sign, no spaces. It must come to a whole number of milliseconds and at
 * most DLOCK_MAX_DURATION_MS. Returns 0 and *ms; DLOCK_EINVAL for malformed
 * text, DLOCK_ERANGE beyond 30 days; dlock_last_error() says what is wrong
 * ("bad duration '5x': unknown unit at 'x' ..."). */
DLOCK_API int dlock_duration_parse(const char *text, int64_t *ms);
/* Longest lock name, resource name or key prefix, in bytes. */
#define DLOCK_MAX_NAME_LEN 512

/* ---- Client ---- */

typedef struct dlock_client dlock_client;
/* An event of a client (see "Events" below); the hook that receives them. */
typedef struct dlock_event dlock_event;
typedef void (*dlock_event_cb)(const dlock_event *ev, void *arg);

typedef struct dlock_client_options {
  size_t struct_size; /* set by dlock_client_options_init(); see the top */
  /* redis://[user[:password]@]host[:port][/db]
   * rediss://... (TLS; query: ?cacert=F&cert=F&key=F&sni=NAME)
   * unix:///path/to/redis.sock[?db=N&user=U&password=P]
   * redis-sentinel://[user[:password]@]host[:port][,host[:port]...]/SERVICE
   *   [?db=N&master_user=U&master_password=P&wait_replicas=N&wait_timeout=MS]
   *   (the userinfo authenticates to the sentinels, port 26379 by
   *   default; the master's credentials are master_user and
   *   master_password, or 'username'/'password' below; no TLS)
   * redis-cluster://[user[:password]@]host:port,host:port,...[?...] (the
   *   cluster's seeds; rediss-cluster:// for TLS; no WAIT; see
   *   docs/topologies.md)
   * redlock://[user:pass@]host1:port1,[user:pass@]host2:port2,...[/db][?...]
   *   (a majority vote over 3 or more independent masters, 5 advised; each
   *   node takes the query options of redis://; see docs/redlock.md)
   * zk://, postgres://, postgresql://, mysql://, mariadb://: the other
   *   backends (README.md, "Connecting"; dlock_url_backend() names the
   *   backend of a URL)
   * NULL: $DLOCK_URL, else redis://127.0.0.1:6379 */
  const char *url;
  int connect_timeout_ms; /* 0: 2000 */
  int command_timeout_ms; /* 0: 2000 */
  /* Prepended to every lock and resource name to form the server's names
   * (keys, paths, rows). May not
   * contain braces. A prefix is a whole key segment: it always ends with
   * ':', which is appended when missing ("app" and "app:" both give the
   * key "app:orders" for the name "orders"), so that status, list and
   * forced release never reach the locks of a prefix such as "app2:".
   * A longer prefix that starts with this one ("app:eu:") lies inside it,
   * as a directory lies inside its parent. NULL or "": none, the key is
   * exactly the name. See docs/keys.md. */
  const char *key_prefix;
  /* These override what the URL says, when not NULL, for the backends that
   * take them (README.md, "Connecting", says which: some take the password
   * alone, some neither). */
  const char *username;
  const char *password;
  const char *tls_ca_file;     /* PEM CA bundle; NULL: system default paths */
  const char *tls_cert_file;   /* client certificate (PEM) */
  const char *tls_key_file;    /* client private key (PEM) */
  const char *tls_server_name; /* name checked in the server certificate; NULL: the host */
  int tls_skip_verify;         /* 1: do not verify the server (tests only) */
  int max_connections;         /* pooled command connections; 0: 64 */
  /* After every acquire, renewal and guard check, `WAIT wait_replicas
   * wait_timeout_ms` in the same pipeline: fewer acknowledging replicas fail
   * closed with DLOCK_EREPLICAS (an acquire is undone; a renewal does not
   * count; a guard admission must not be written on, see
   * docs/topologies.md). 0: no WAIT (or what the URL says). Costs one
   * replication round trip per acquire and renewal. */
  int wait_replicas;
  int wait_timeout_ms; /* 0: the URL's, else half the command timeout */
  /* redlock:// with a full URL per node (redis:// or rediss://, so TLS and
   * credentials may differ per node): 'redlock_nurls' (3 or more) entries;
   * 'url' must then be NULL. The overrides above apply to every node.
   * See docs/redlock.md. */
  const char *const *redlock_urls;
  int redlock_nurls;
  /* Called for every event of this client's locks, elections and jobs, in
   * order, from one thread of the client's own that holds no dlock lock (a
   * queue in between: the call that made the event does not wait for it).
   * It may call dlock functions, but not dlock_client_free(). Events queued
   * when dlock_client_free() is called are delivered first. NULL: none. */
  dlock_event_cb on_event;
  void *on_event_arg;
  /* Lock, election and job names that dlock_client_metrics_write() may show
   * in a 'name' label (by default no name is a label): a comma-separated
   * list, "*" for every name. NULL: none (elections and jobs then have one
   * series for all; locks are counted by kind only). Keep it short: every
   * name is a time series. */
  const char *metrics_names;
} dlock_client_options;

/* Fill 'opts' with defaults (all zero/NULL) and set its struct_size. */
DLOCK_API void dlock_client_options_init(dlock_client_options *opts);

/* Create a client and check that the server answers (connect, AUTH, SELECT,
 * PING), then read its maxmemory-policy (INFO memory; a refusal is not an
 * error) for dlock_client_warnings(). 'opts' may be NULL. On failure *out is NULL and dlock_last_error()
 * explains. The client reconnects transparently later on. */
DLOCK_API int dlock_client_new(dlock_client **out, const dlock_client_options *opts);

/* Stop the client's threads and close its connections. Free every
 * dlock_mutex and dlock_sched of the client first: dlock_mutex_free()
 * releases a lock still held; the handles must not outlive the client. */
DLOCK_API void dlock_client_free(dlock_client *c);

/* "host:port", "unix:/path" or "tls host:port": for messages. */
DLOCK_API const char *dlock_client_server(const dlock_client *c);

/* Round trip to the server. */
DLOCK_API int dlock_client_ping(dlock_client *c);

/* The backend the URL chose, by its short lower-case name (the same for
 * every URL scheme of one backend). */
DLOCK_API const char *dlock_client_backend(const dlock_client *c);

/* The backend a URL's scheme names, from libdlock's one registry of URL
 * schemes (no I/O; only the scheme is read): the name of its server
 * technology for messages ("cannot use %s at %s"), the same for every
 * scheme of one backend. NULL or "": $DLOCK_URL, else the default URL.
 * A backend this build leaves out is named too (dlock_client_new() then
 * says how to build it in). NULL when no backend takes the scheme, with
 * dlock_last_error() saying so and listing the schemes; otherwise
 * dlock_last_error() is left as it was (ask while reporting a failure). */
DLOCK_API const char *dlock_url_backend(const char *url);

/* Create what the backend keeps its locks in, for a deployment where the
 * application's user may not do it at run time (e.g. a schema, tables and
 * a sequence, IF NOT EXISTS; `dlock init`). On a backend that needs
 * nothing made ahead (its doc in docs/ says which): 0, with
 * dlock_last_error() saying so ("nothing to create on ..."); after a
 * setup that made or found everything, 0 and "". */
DLOCK_API int dlock_client_setup(dlock_client *c);

/* What dlock_client_new() found wrong with the server, one warning per line
 * (each names the server, the setting and the fix); "" when nothing. Today:
 * a maxmemory-policy other than noeviction, read with INFO memory. Every
 * dlock key has a TTL, so allkeys-* and volatile-* policies alike may evict a
 * held lock's key, and another client then acquires it. "" also when the
 * server would not say (INFO denied by the ACL): dlock_client_check() tells
 * that case apart. Valid until dlock_client_free(). */
DLOCK_API const char *dlock_client_warnings(const dlock_client *c);

typedef enum dlock_check_level {
  DLOCK_CHECK_OK = 0,
  DLOCK_CHECK_WARN = 1, /* works, with a risk the text names */
  DLOCK_CHECK_FAIL = 2  /* locks are not safe, or do not work, with this server */
} dlock_check_level;

/* One finding of dlock_client_check(). */
typedef struct dlock_check {
  const char *name; /* "eviction", "persistence", "replication", "clock",
                            * "scripts" or "pubsub" (static strings) */
  dlock_check_level level;
  char found[512]; /* what was found, naming the server */
  char fix[512];   /* what to do; "" when OK */
  int64_t skew_ms; /* "clock": server clock minus ours (midpoint of the round trip) */
} dlock_check;

/* Up to this many checks (size 'out' with it). */
#define DLOCK_CHECK_MAX 8

/* Examine what locks rely on, on the server of 'c', with its user's rights:
 * eviction (maxmemory-policy), persistence (AOF, RDB), replicas and
 * min-replicas-to-write, the server clock against ours, scripts (EVALSHA,
 * EVAL and the commands they call, by taking and releasing the lock
 * "dlock-doctor" under the client's prefix) and pub/sub (PUBLISH, SUBSCRIBE
 * on that lock's hand-off channel). A setting the ACL hides is a WARN that
 * says so. Writes up to 'max' findings to 'out' and returns how many, or a
 * negative status when the server cannot be asked at all. */
DLOCK_API int dlock_client_check(dlock_client *c, dlock_check *out, int max);
/* Independent nodes (redlock://): the same checks on node 'i' alone (dlock_client_check looks at
 * the first node that answers); see dlock_client_node_count(). */
DLOCK_API int dlock_client_check_node(dlock_client *c, int i, dlock_check *out, int max);

/* 'url' as it may be shown in a message or a log: the password replaced by
 * three stars (user:PASSWORD@host and a lone PASSWORD@host keep the user
 * name and the host; ?password=PASSWORD keeps the parameter's name, and so
 * does any parameter other than db, user, cacert, cert, key, sni and
 * insecure, since a mistyped name may carry a password; a zk:// URL's
 * ?digest=user:PASSWORD keeps the user), also
 * when the URL is malformed. Writes at most 'len'
 * bytes, always NUL-terminated (truncated if need be). Every message of
 * libdlock that quotes a URL masks it this way. */
DLOCK_API void dlock_url_redact(const char *url, char *buf, size_t len);

/* A warning about the deployment that did not stop the client, e.g.
 * sentinels that disagree on the master (the client follows the majority).
 * Copies it into 'buf' (NUL-terminated) and returns 1, or 0 with "" when
 * there is none. */
DLOCK_API int dlock_client_topology_warning(dlock_client *c, char *buf, size_t len);

/* ---- Mutex ---- */

typedef struct dlock_mutex dlock_mutex;

typedef enum dlock_lost_reason {
  DLOCK_LOST_NONE = 0,
  DLOCK_LOST_EXPIRED = 1,     /* the key vanished: the lease ran out (or a DEL) */
  DLOCK_LOST_TAKEN = 2,       /* another owner holds the key now */
  DLOCK_LOST_UNREACHABLE = 3, /* renewals were sent but none succeeded before valid_until */
  DLOCK_LOST_MAX_HOLD = 4,    /* the cap on the total hold time was reached */
  DLOCK_LOST_DEADLINE = 5,    /* valid_until passed without a renewal (fixed leases) */
  /* A failover moved the lock's key to another master since the hold began
   * (redis-sentinel://: the master changed; redis-cluster://: the key's slot failed over to a
   * replica) and the new master does not hold our token: the write was not
   * replicated in time, or another owner took the lock on the new master
   * (docs/topologies.md). */
  DLOCK_LOST_FAILOVER = 6,
  /* Another client deleted the key (dlock_lock_force_release(), "dlock
   * release --force"): told apart from EXPIRED by a tombstone the forced
   * release leaves for as long as the lease had left. A key deleted by
   * other means (DEL) reads as EXPIRED. */
  DLOCK_LOST_DELETED = 7
} dlock_lost_reason;

DLOCK_API const char *dlock_lost_reason_str(dlock_lost_reason reason);

/* ---- Events (docs/metrics.md) ---- */

/* What happened to a lock, an election or a job of a client, for traces and
 * custom sinks (dlock_client_options.on_event). */
typedef enum dlock_event_kind {
  DLOCK_EVENT_ACQUIRE_STARTED = 1,  /* an acquire began (it may wait) */
  DLOCK_EVENT_ACQUIRE_FINISHED = 2, /* it ended: 'status' 0 (acquired, 'fence') or why not;
                                     * 'duration_us' the wait */
  DLOCK_EVENT_RELEASED = 3,         /* the last hold was released: 'status' the release's
                                     * (0 for a pipelined one, queued); 'duration_us' the hold */
  DLOCK_EVENT_LOST = 4,             /* a hold was lost: 'reason'; 'duration_us' the hold */
  DLOCK_EVENT_RENEWED_LATE = 5,     /* a renewal succeeded with less than a third of the
                                     * lease left: 'duration_us' what was left */
  DLOCK_EVENT_ELECTED = 6,          /* this client leads the election 'name' ('fence': epoch) */
  DLOCK_EVENT_DEPOSED = 7,          /* its term ended: 'reason' NONE when it resigned */
  DLOCK_EVENT_JOB_STARTED = 8,      /* a run of job 'name' began on this node */
  DLOCK_EVENT_JOB_FINISHED = 9      /* it ended: 'status' the job's result; 'duration_us' the run */
} dlock_event_kind;

struct dlock_event {
  dlock_event_kind kind;
  uint64_t seq;              /* 1, 2, 3 ... per client, in order: a gap is events dropped
                              * because the queue (4096) was full */
  int64_t unix_us;           /* when it happened, wall clock */
  const char *name;          /* the lock, election or job name (valid during the call) */
  const char *lock_kind;     /* "mutex", "semaphore", "read", "write", "election", "job" */
  int status;                /* 0 or a DLOCK_E* status; a job's own result */
  uint64_t fence;            /* the hold's fence, the term's epoch, the run's fence; 0 if none */
  int64_t duration_us;       /* see the kinds; -1 when it does not apply */
  dlock_lost_reason reason;  /* LOST, DEPOSED */
  int64_t scheduled_unix_ms; /* jobs: the tick; 0 otherwise */
};

/* "acquire.started", "acquire.finished", "released", "lost", "renewed.late",
 * "elected", "deposed", "job.started", "job.finished"; "unknown". */
DLOCK_API const char *dlock_event_kind_str(dlock_event_kind kind);

/* ---- Metrics (docs/metrics.md) ---- */

typedef enum dlock_metrics_format {
  DLOCK_METRICS_PROMETHEUS = 0, /* the Prometheus text format 0.0.4 */
  DLOCK_METRICS_OPENMETRICS = 1 /* OpenMetrics 1.0 text (ends with "# EOF") */
} dlock_metrics_format;

/* Write the client's metrics (counters, gauges and histograms named dlock_*,
 * always kept, docs/metrics.md) to 'f'. 0, or DLOCK_EINVAL, DLOCK_ESYS (a
 * write failed, errno in dlock_last_error()). No I/O to the server. */
DLOCK_API int dlock_client_metrics_write(dlock_client *c, FILE *f, dlock_metrics_format format);
/* The same into 'buf' (NUL-terminated, truncated to 'len'): returns the
 * length of the whole text (as snprintf), or a negative status. */
DLOCK_API int dlock_client_metrics_snprint(dlock_client *c, char *buf, size_t len, dlock_metrics_format format);

/* Called once, from the client's watchdog thread, when a held lock is found
 * lost, with the reason dlock_mutex_lost() reports. A loss at the deadline is
 * reported at valid_until, also while the server does not answer. Keep it short:
 * other handles' callbacks and fds wait for it. Do not call
 * dlock_mutex_free() on 'm' from it. For a semaphore 'm' is the
 * semaphore's own pointer (dlock_semaphore_mutex()): cast it back to
 * dlock_semaphore *. */
typedef void (*dlock_lost_cb)(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg);

typedef struct dlock_mutex_options {
  size_t struct_size; /* set by dlock_mutex_options_init(); see the top */
  /* Fixed lease: the lock expires 'lease_ms' after acquire unless extended,
   * and the hold is lost (DLOCK_LOST_DEADLINE) at its valid_until.
   * 0: watchdog mode, a 'watchdog_lease_ms' lease renewed every third of it
   * for as long as the lock is held. */
  int64_t lease_ms;
  int64_t watchdog_lease_ms; /* 0: 30000 */
  /* Watchdog mode: stop renewing after this long in total. 0: no cap. */
  int64_t max_hold_ms;
  dlock_lost_cb on_lost;
  void *on_lost_arg;
  /* Free text stored next to the lock while held (who holds it), shown by
   * dlock_lock_info_get(). NULL: none. At most 1024 bytes. */
  const char *owner_info;
} dlock_mutex_options;

DLOCK_API void dlock_mutex_options_init(dlock_mutex_options *opts);

/* A handle on the lock 'name' (1..DLOCK_MAX_NAME_LEN bytes, no NUL, CR, LF,
 * '{' or '}'). Creating it does no I/O. 'opts' may be NULL. */
DLOCK_API int dlock_mutex_new(dlock_mutex **out, dlock_client *c, const char *name, const dlock_mutex_options *opts);

/* Releases the lock if held (best effort), then frees. NULL is a no-op. */
DLOCK_API void dlock_mutex_free(dlock_mutex *m);

/* Acquire. 'wait_ms' 0: try once; DLOCK_WAIT_FOREVER: until acquired;
 * otherwise wait up to that long. Returns 0, DLOCK_EBUSY when another owner
 * held it for the whole wait, or an error. If this thread already holds the
 * lock through 'm', the hold count goes up and 0 is returned at once with the
 * same fence. A thread other than the holder waits for the holder to release. */
DLOCK_API int dlock_mutex_acquire(dlock_mutex *m, int64_t wait_ms);

/* Make every dlock_mutex_acquire() now waiting on 'm' in other threads
 * (for the server or for another thread of ours) return DLOCK_ECANCELED soon; a
 * waiter withdraws from the wait queue first. An acquire that succeeds at
 * the same moment returns 0: release it. Safe from any thread; not
 * async-signal-safe. No effect on waits that begin later. */
DLOCK_API void dlock_mutex_cancel(dlock_mutex *m);

/* Release one hold; the key is deleted (compare-and-delete) when the count
 * reaches zero and a waiter is woken. DLOCK_ENOTHELD when this thread does
 * not hold it, when the server no longer has our token, or when the hold was
 * lost before (dlock_mutex_lost() != DLOCK_LOST_NONE; our key is still
 * deleted if the server has it): another owner's key is never touched.
 * DLOCK_EUNKNOWN when the release may have run but its outcome could not be
 * learned (its reply was lost and asking again failed, or came after our
 * lease could have run out); the handle is released either way and the key
 * expires with its lease. */
DLOCK_API int dlock_mutex_release(dlock_mutex *m);

/* Release like dlock_mutex_release(), but return without waiting for the
 * reply (back-to-back cycles on one thread). The handle is released at once.
 * The release waits, queued, for the client's next command to the same
 * server (the next acquire, typically), which carries it ahead of itself
 * in the same write: one round trip per cycle, not two, and the thread's
 * order is kept. When no command follows, it is sent 1 ms later (so a
 * waiter on another client may see the lock free up to about 2 ms late).
 * The outcome is never dropped: dlock_mutex_release_result() gives it
 * (waiting for the reply if needed), and until then the next acquire on 'm'
 * first reads it and, if it is a failure, returns that failure ("the
 * previous pipelined release: ...") without acquiring.
 * A lost reply is DLOCK_EUNKNOWN, never sent again; a queued release that
 * never left (its connection failed first) is DLOCK_EIO. 0 when queued (or when an
 * inner hold of a reentrant count was released); a status when it could not
 * be sent (the handle is released and the key expires with its lease).
 * Where the backend cannot pipeline it (docs/topologies.md) the release
 * runs synchronously and its outcome waits for dlock_mutex_release_result() all the same. */
DLOCK_API int dlock_mutex_release_async(dlock_mutex *m);
/* The outcome of the last dlock_mutex_release_async() on 'm', as
 * dlock_mutex_release() would have answered; reads the reply first if it
 * has not come yet. Once per release: DLOCK_EINVAL when none is pending. */
DLOCK_API int dlock_mutex_release_result(dlock_mutex *m);

/* Set the remaining lease to 'lease_ms', only while the server still holds our
 * token. Never re-creates an expired key: DLOCK_ENOTHELD then. A lost hold
 * (also one whose valid_until passed) is not extended: DLOCK_ENOTHELD. An
 * extend that fails otherwise may have run: valid_until then becomes the
 * earlier of the old one and 'lease_ms' from the call (and is that already
 * while the call waits for its reply, which may come after it ran). In
 * watchdog mode the renewals go on with the watchdog's lease; an extend that
 * overlapped a renewal (either may run last on the server) sets valid_until to
 * the earlier of the two deadlines. */
DLOCK_API int dlock_mutex_extend(dlock_mutex *m, int64_t lease_ms);

/* Ask the server: 1 if it holds our token, 0 if not, negative on error. */
DLOCK_API int dlock_mutex_is_held(dlock_mutex *m);

/* Remaining lease in ms according to the server; DLOCK_ENOTHELD if not ours. */
DLOCK_API int dlock_mutex_remaining(dlock_mutex *m, int64_t *ttl_ms);

/* Fencing token of the current hold: strictly larger than every token issued
 * before for this name, at most 2^63-1. 0 when not held. When the name's
 * fence counter holds anything but an integer below 2^63-1, acquire fails
 * with DLOCK_EFENCE (never a repeated token). */
DLOCK_API uint64_t dlock_mutex_fence(const dlock_mutex *m);

/* Local view, no I/O: the reason the current hold was lost, or
 * DLOCK_LOST_NONE (also when not held). A hold is lost when renewal finds it
 * gone or taken, and at the latest at dlock_mutex_valid_until(): from then
 * on this answers DLOCK_LOST_DEADLINE (UNREACHABLE if renewals were sent and
 * failed, MAX_HOLD past max_hold_ms) by itself, even before the watchdog got
 * to it. Once lost, a hold stays lost until the next acquire. The fd and the
 * on_lost callback give the same reason. Thread-safe. */
DLOCK_API dlock_lost_reason dlock_mutex_lost(const dlock_mutex *m);

/* An fd that becomes readable when the current hold is lost (the same moment
 * and rule as dlock_mutex_lost()); for poll(). Asked for after the loss, it
 * is readable at once. Stays valid until dlock_mutex_free(); reset on the
 * next acquire. */
DLOCK_API int dlock_mutex_lost_fd(dlock_mutex *m);

/* The monotonic time after which the holder must assume the lock is gone,
 * even without news from the server: start of the last successful acquire or
 * renewal + lease - clock drift allowance. A hold handed over by a release
 * (a waiting acquire) starts on the shorter claim lease (3 s at most) from
 * the waiter's last call, until the watchdog's first renewal, due at a third
 * of it, sets the full lease (docs/design.md). A renewal counts only if its
 * reply arrives before this moment; when it passes, the hold is lost. 0 when
 * not held. */
DLOCK_API dlock_mono_ms dlock_mutex_valid_until(const dlock_mutex *m);

DLOCK_API const char *dlock_mutex_name(const dlock_mutex *m);
/* Detail of this handle's last failure. Empty string when none. */
DLOCK_API const char *dlock_mutex_errmsg(const dlock_mutex *m);

/* One call: acquire 'name' (waiting up to 'wait_ms'), run fn(fence, arg),
 * release. Returns fn's result when it ran (>= 0 expected), else the status
 * of the acquire. If the lock was lost while fn ran, returns DLOCK_ELOST. */
DLOCK_API int dlock_with_lock(dlock_client *c, const char *name, int64_t wait_ms, int (*fn)(uint64_t fence, void *arg),
                              void *arg);

/* ---- Semaphore (docs/semaphore.md) ---- */

/* N permits on one name: up to N holders at once, each permit held under a
 * lease of its own that the watchdog renews, so a crashed holder's permit
 * returns when its lease ends. Waiters are woken by a release in arrival
 * order (FIFO). Every acquisition gets a fence, rising per name. Where it is
 * not offered (docs/topologies.md), dlock_semaphore_new answers a clear
 * DLOCK_EINVAL.
 *
 * The verbs and their semantics are the mutex's, with the same
 * dlock_mutex_options (leases, watchdog, max_hold_ms, owner_info); one
 * handle holds at most one permit, reentrant for its holding thread (take
 * several permits with several handles). The on_lost callback receives the
 * semaphore's handle as its 'm' argument: cast it back to dlock_semaphore *. */
typedef struct dlock_semaphore dlock_semaphore;

/* The limit of a name is stored with it while a permit is held: a caller
 * giving another one gets DLOCK_ELIMIT naming both. */
#define DLOCK_SEMAPHORE_MAX_PERMITS 1000000

/* A handle on the semaphore 'name' with 'permits' permits in all
 * (1..DLOCK_SEMAPHORE_MAX_PERMITS). No I/O. 'opts' may be NULL. A name is
 * one kind of lock at a time: a name held as a mutex answers
 * DLOCK_EWRONGTYPE to a semaphore's acquire, and the other way round. */
DLOCK_API int dlock_semaphore_new(dlock_semaphore **out, dlock_client *c, const char *name, int permits,
                                  const dlock_mutex_options *opts);
DLOCK_API void dlock_semaphore_free(dlock_semaphore *s);
/* Take one permit (as dlock_mutex_acquire: 'wait_ms' 0 tries once,
 * DLOCK_WAIT_FOREVER waits; DLOCK_EBUSY when all permits stayed taken). */
DLOCK_API int dlock_semaphore_acquire(dlock_semaphore *s, int64_t wait_ms);
DLOCK_API void dlock_semaphore_cancel(dlock_semaphore *s);
/* Give the permit back; the first waiter gets it. DLOCK_ENOTHELD when its
 * lease had run out (no other holder's permit is touched). */
DLOCK_API int dlock_semaphore_release(dlock_semaphore *s);
DLOCK_API int dlock_semaphore_extend(dlock_semaphore *s, int64_t lease_ms);
/* The fence of this handle's permit (0 when none). */
DLOCK_API uint64_t dlock_semaphore_fence(const dlock_semaphore *s);
DLOCK_API dlock_lost_reason dlock_semaphore_lost(const dlock_semaphore *s);
DLOCK_API int dlock_semaphore_lost_fd(dlock_semaphore *s);
DLOCK_API dlock_mono_ms dlock_semaphore_valid_until(const dlock_semaphore *s);
DLOCK_API int dlock_semaphore_permits(const dlock_semaphore *s); /* the limit given to _new */
/* The semaphore as a lock handle (the same pointer the on_lost callback
 * gets): every dlock_mutex_* call works on it as the dlock_semaphore_* call
 * of the same verb (acquire takes a permit), so code written for a mutex
 * (a supervisor, "dlock run") serves both. It stays the semaphore's: free
 * it once, with either _free. */
DLOCK_API dlock_mutex *dlock_semaphore_mutex(dlock_semaphore *s);
DLOCK_API const char *dlock_semaphore_errmsg(const dlock_semaphore *s);

/* ---- Read-write lock (docs/rwlock.md) ---- */

/* Many readers or one writer on a name. A handle takes one side of it
 * (DLOCK_RW_READ or DLOCK_RW_WRITE), so that every call has the mutex's
 * shape and meaning: leases renewed by the watchdog (a crashed holder's
 * share returns when its lease ends), waits, cancel, loss, a fence per
 * acquisition (one rising counter per name: a writer's fence is above every
 * earlier reader's and writer's), reentrancy per handle and thread.
 * Order: a waiting writer blocks readers that come after it (no writer
 * starvation); waiters go in arrival order. A thread that holds either side
 * of a name may take its read side through another handle of the same
 * client at once (a writer reads its own data); a thread that holds the read
 * side is refused the write side with DLOCK_EUPGRADE (it would wait for
 * itself). A name is one kind: a mutex's name is refused (DLOCK_EWRONGTYPE)
 * and the other way round. Not offered everywhere (docs/rwlock.md):
 * dlock_rwlock_new answers DLOCK_EINVAL there. The lost callback's
 * 'm' is the rwlock handle: cast it with (dlock_rwlock *). */
typedef struct dlock_rwlock dlock_rwlock;

#define DLOCK_RW_READ 1  /* the shared side */
#define DLOCK_RW_WRITE 2 /* the exclusive side */

/* A handle on side 'side' of the read-write lock 'name' (names as for
 * dlock_mutex_new). No I/O. 'opts' may be NULL. */
DLOCK_API int dlock_rwlock_new(dlock_rwlock **out, dlock_client *c, const char *name, int side,
                               const dlock_mutex_options *opts);
/* Releases the hold if held (best effort), then frees. NULL is a no-op. */
DLOCK_API void dlock_rwlock_free(dlock_rwlock *rw);
/* As dlock_mutex_acquire; DLOCK_EUPGRADE for the write side while this
 * thread holds the read side of the name through another handle. */
DLOCK_API int dlock_rwlock_acquire(dlock_rwlock *rw, int64_t wait_ms);
DLOCK_API void dlock_rwlock_cancel(dlock_rwlock *rw);
/* As dlock_mutex_release; the last hold's release wakes the waiters that
 * may go now (the next writer, or the readers ahead of the next writer). */
DLOCK_API int dlock_rwlock_release(dlock_rwlock *rw);
DLOCK_API int dlock_rwlock_extend(dlock_rwlock *rw, int64_t lease_ms);
DLOCK_API uint64_t dlock_rwlock_fence(const dlock_rwlock *rw);
DLOCK_API dlock_lost_reason dlock_rwlock_lost(const dlock_rwlock *rw);
DLOCK_API int dlock_rwlock_lost_fd(dlock_rwlock *rw);
DLOCK_API dlock_mono_ms dlock_rwlock_valid_until(const dlock_rwlock *rw);
DLOCK_API const char *dlock_rwlock_errmsg(const dlock_rwlock *rw);
/* DLOCK_RW_READ or DLOCK_RW_WRITE (0 for NULL). */
DLOCK_API int dlock_rwlock_side(const dlock_rwlock *rw);
/* The handle as a dlock_mutex, for code written against the mutex calls
 * (is_held, remaining, the lost callback's argument): every dlock_mutex_*
 * call on it acts on this side, with the rules above. */
DLOCK_API dlock_mutex *dlock_rwlock_mutex(dlock_rwlock *rw);

/* ---- Inspection and admin ---- */

typedef struct dlock_lock_info {
  size_t struct_size;    /* set by dlock_lock_info_init(); see the top */
  int held;              /* 1 when the key exists */
  int foreign;           /* 1 when held by a non-dlock client (no metadata) */
  int64_t ttl_ms;        /* remaining lease, -1 when held without expiry */
  uint64_t fence;        /* fence of the current hold, else the last issued */
  int64_t since_unix_ms; /* when the current hold began (server clock), 0 if unknown;
                           * on zk:// when the holder queued (its node's creation) */
  int64_t waiters;       /* processes registered as waiting */
  char owner_info[1025]; /* owner_info of the holder, "" if none */
  /* Added after the first layout (see the top): */
  /* A semaphore: its limit (0: not a semaphore) and the permits held now.
   * 'held' is 1 while one is held; fence, since_unix_ms and owner_info are
   * the newest holder's; ttl_ms runs until the last permit ends. */
  int64_t permits;
  int64_t permits_used;
  /* Read-write locks: */
  int rwlock;              /* 1 when the name is held as a read-write lock */
  int64_t readers;         /* live read holds */
  int writer;              /* 1 when the write side is held (held, fence, since and owner_info are its) */
  int64_t waiting_writers; /* waiters for the write side (the rest of 'waiters' wait to read) */
  /* A countdown latch of the same name (dlock_latch_*: a name may be a lock
   * and a latch at once; 'held' and the rest above are the lock's): */
  int latch;            /* 1 when one is set and has not expired */
  int64_t latch_count;  /* what is left to count down (0: open) */
  int64_t latch_ttl_ms; /* until it expires */
} dlock_lock_info;

/* Zero 'info' and set its struct_size: call before dlock_lock_info_get(). */
DLOCK_API void dlock_lock_info_init(dlock_lock_info *info);
/* What the server knows of the lock 'name', into 'out' (initialised with
 * dlock_lock_info_init()). */
DLOCK_API int dlock_lock_info_get(dlock_client *c, const char *name, dlock_lock_info *out);
/* Independent nodes (redlock://, docs/redlock.md): the number of nodes (0 when the
 * client is on another topology), the name of node 'i' ("127.0.0.1:6379"),
 * and lock 'name' as node 'i' alone sees it (dlock_lock_info_get answers
 * for the majority). */
DLOCK_API int dlock_client_node_count(const dlock_client *c);
DLOCK_API const char *dlock_client_node_name(const dlock_client *c, int i);
DLOCK_API int dlock_lock_info_get_node(dlock_client *c, const char *name, int i, dlock_lock_info *out);

/* Delete the lock 'name' whatever its owner (admin). 'was_held' (may be NULL)
 * receives 1 if a key was deleted. Wakes a waiter. A watchdog-mode holder is
 * told at once where the server can notify it (each backend's page says
 * whether and how): its lost callback and fd fire within milliseconds;
 * elsewhere at its next renewal, a third of its lease. Its loss, and its release, report DLOCK_LOST_DELETED
 * (a tombstone tells it apart from an expired lease). A key that dlock did not
 * take (no "{K}:meta" metadata: an application's own key, or another
 * library's lock) is left alone: DLOCK_EFOREIGN. Never sent twice: when its
 * reply is lost the answer is DLOCK_EUNKNOWN (look before trying again). */
DLOCK_API int dlock_lock_force_release(dlock_client *c, const char *name, int *was_held);

/* dlock_lock_force_release() may also delete a string key without dlock
 * metadata: a lock of another client library (same key, a random token as
 * its value). Check with dlock_lock_info_get() (foreign)
 * first: any string key of that name goes. */
#define DLOCK_FORCE_FOREIGN 1u

/* dlock_lock_force_release() with 'flags' (0 or DLOCK_FORCE_FOREIGN). */
DLOCK_API int dlock_lock_force_release_flags(dlock_client *c, const char *name, unsigned flags, int *was_held);

/* One hold of a lock, as dlock_lock_holders() hands it out (read only the
 * fields you know: it may grow at the end). */
typedef struct dlock_holder {
  uint64_t fence;         /* the hold's fence */
  int64_t ttl_ms;         /* its lease left, -1 without expiry */
  int64_t since_unix_ms;  /* when it began (server clock), 0 if unknown */
  const char *owner_info; /* its holder's owner_info ("" if none); valid during the call */
} dlock_holder;
/* Call fn(holder, arg) for each live hold of lock 'name': each permit of a
 * semaphore, each hold of a read-write lock, a mutex's one holder. Returns
 * how many, or a status. A backend that keeps no per-permit record hands
 * out the newest holder only (docs/cli.md says which). */
DLOCK_API int dlock_lock_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *h, void *arg),
                                 void *arg);

/* Call fn(name, arg) for each lock currently held, and each countdown latch
 * set, whose name matches the glob 'pattern' (NULL: all); a name that is
 * both is listed once. Uses SCAN; returns the number listed. */
DLOCK_API int dlock_lock_list(dlock_client *c, const char *pattern, void (*fn)(const char *name, void *arg), void *arg);

/* Delete what the backend keeps of locks that no one holds or waits for any
 * more, whose time ended more than 'older_than_ms' ago (admin, `dlock
 * prune`). Where locks leave rows behind (its doc in docs/ says so): the rows of
 * released and expired locks, of waiters
 * that died, of semaphores and read-write locks with no hold left; at most
 * DLOCK_PRUNE_BATCH rows per table per call, so call again while
 * '*pruned' (may be NULL: the rows deleted) is not 0. Never a live hold, a
 * live waiter, a fence guard or a scheduler's row, and fences keep rising
 * (they come from a sequence). A release also prunes now and then, rows
 * older than an hour. A backend that keeps nothing to prune (what a hold
 * keeps goes with its lease or its session) answers 0, '*pruned' 0, and
 * dlock_last_error() says so (empty after a prune that ran). */
DLOCK_API int dlock_client_prune(dlock_client *c, int64_t older_than_ms, int64_t *pruned);
#define DLOCK_PRUNE_BATCH 1000

/* ---- Watching locks change (`dlock status --watch`) ----
 * A watch sleeps until a lock it watches may have changed (taken, released,
 * deleted by a forced release, a waiter come or gone), woken by the
 * server's notifications; then read the lock again (dlock_lock_info_get)
 * and compare. A wake-up says "look", not what changed: one change may wake
 * it twice, and a reconnect wakes it too. What no notification tells (a
 * lease that runs out) is the caller's to time: wait no longer than the
 * lease left. Where the server sends nothing for a change,
 * dlock_watch_bound_ms() says how late it may be seen (docs/cli.md, "Watching"). */
typedef struct dlock_watch dlock_watch;
/* A watch on client 'c' (which must outlive it), watching nothing yet. */
DLOCK_API int dlock_watch_new(dlock_watch **out, dlock_client *c);
/* Watch the lock 'name' too; NULL: every lock of the client's prefix (new
 * names included). Waits up to the command timeout for the server. */
DLOCK_API int dlock_watch_add(dlock_watch *w, const char *name);
/* Sleep until a change may have happened (1, with DLOCK_WATCH_FORCED added
 * when a forced release was among the changes and the server said so) or
 * 'wait_ms' passed (0); wait_ms < 0: no limit. */
DLOCK_API int dlock_watch_wait(dlock_watch *w, int64_t wait_ms);
#define DLOCK_WATCH_FORCED 2
/* 0 when every watched change is notified; else the longest a change may
 * go unseen (the watch then wakes at least that often by itself). */
DLOCK_API int64_t dlock_watch_bound_ms(const dlock_watch *w);
/* A descriptor that polls readable while a wake-up waits (for poll(2) beside
 * the caller's own; dlock_watch_wait(w, 0) takes the wake-up). */
DLOCK_API int dlock_watch_fd(const dlock_watch *w);
/* NULL is a no-op. */
DLOCK_API void dlock_watch_free(dlock_watch *w);

/* ---- Fencing guard ---- */

/* Atomically compare 'token' with the highest token recorded for 'resource'
 * and record it if not lower. 0: admitted (token >= highest seen);
 * DLOCK_ESTALE: a newer holder has written since, reject the write.
 * DLOCK_ERANGE: 'token' is 0 or above 2^63-1 (never issued by dlock);
 * DLOCK_EFENCE: the recorded value is no such integer (the key is named).
 * With wait_replicas, DLOCK_EREPLICAS: recorded on the master, but too few
 * replicas acknowledged it; do not write. Under redis-sentinel:// or redis-cluster:// without
 * it, a token issued before the master last changed is DLOCK_ESTALE too
 * (docs/topologies.md, "The guard across a failover"). */
DLOCK_API int dlock_guard_check(dlock_client *c, const char *resource, uint64_t token);
/* dlock_guard_check() that also gives the highest token seen for 'resource'
 * after the check: 'token' when admitted, the newer one when DLOCK_ESTALE
 * (0 on other errors). 'highest' may be NULL. */
DLOCK_API int dlock_guard_check_highest(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest);

/* ---- Multi-lock: several names, all or nothing (docs/multilock.md) ---- */

typedef struct dlock_multi dlock_multi;

/* A handle on the 'n' locks 'names' (1..DLOCK_MULTI_MAX, each a lock name
 * as for dlock_mutex_new; a name given twice is DLOCK_EINVAL), each taken
 * as a mutex with 'opts' (may be NULL; on_lost is called per name, with the
 * name's own mutex handle). No I/O. Works on every backend with mutexes;
 * on a cluster each name lives in its own slot. */
#define DLOCK_MULTI_MAX 64
DLOCK_API int dlock_multi_new(dlock_multi **out, dlock_client *c, const char *const *names, size_t n,
                              const dlock_mutex_options *opts);
/* Releases what is held (best effort), then frees. NULL is a no-op. */
DLOCK_API void dlock_multi_free(dlock_multi *mm);
/* Take every name, or none: the names are taken one by one in a canonical
 * order (sorted by bytes, whatever order they were given in), so two
 * callers listing the same names in different orders never deadlock.
 * 'wait_ms' (0: try once; DLOCK_WAIT_FOREVER) bounds the whole call. When a
 * name cannot be taken, every name taken so far is released again before
 * the call returns that name's status (DLOCK_EBUSY, ...), and the error
 * names it and says why. DLOCK_EUNKNOWN when a name may still be held by us
 * (its acquire or its rollback had no certain outcome) until its lease
 * ends. Acquire, release and extend from the same thread, as for a mutex. */
DLOCK_API int dlock_multi_acquire(dlock_multi *mm, int64_t wait_ms);
/* Make a dlock_multi_acquire() waiting in another thread return
 * DLOCK_ECANCELED soon, with nothing held. Safe from any thread. */
DLOCK_API void dlock_multi_cancel(dlock_multi *mm);
/* Release every name (all are tried); the first failure is returned and
 * names its lock (DLOCK_ENOTHELD: that hold had been lost). */
DLOCK_API int dlock_multi_release(dlock_multi *mm);
/* Set the remaining lease of every name to 'lease_ms' (see
 * dlock_mutex_extend); the first failure is returned and names its lock. */
DLOCK_API int dlock_multi_extend(dlock_multi *mm, int64_t lease_ms);
/* The number of names, and name 'i' in the order given to _new(). */
DLOCK_API size_t dlock_multi_count(const dlock_multi *mm);
DLOCK_API const char *dlock_multi_name(const dlock_multi *mm, size_t i);
/* The fence of name 'i' (the order given to _new()); 0 when not held or
 * 'i' is out of range. One fence per name, each from that name's own
 * counter: fences of different names are not comparable, so there is no
 * single fence for the whole set. Guard each resource with its own name's
 * fence. */
DLOCK_API uint64_t dlock_multi_fence(const dlock_multi *mm, size_t i);
/* The loss of the first name found lost (DLOCK_LOST_NONE while all hold):
 * losing any one name loses the set. */
DLOCK_API dlock_lost_reason dlock_multi_lost(const dlock_multi *mm);
/* An fd readable as soon as any name's hold is lost (an epoll fd over the
 * names' dlock_mutex_lost_fd()s, for poll()). Valid until _free(). */
DLOCK_API int dlock_multi_lost_fd(dlock_multi *mm);
/* The earliest dlock_mutex_valid_until() of the names; 0 when not held. */
DLOCK_API dlock_mono_ms dlock_multi_valid_until(const dlock_multi *mm);
/* Detail of this handle's last failure. Empty string when none. */
DLOCK_API const char *dlock_multi_errmsg(const dlock_multi *mm);

/* ---- Countdown latch (docs/latch.md) ---- */

typedef struct dlock_latch dlock_latch;

/* A handle on the latch 'name' (a lock name's rules). No I/O. Where latches
 * are not offered (docs/latch.md), DLOCK_EINVAL saying so. A latch has
 * no fence, lease or loss: it guards nothing exclusive, it only counts. */
DLOCK_API int dlock_latch_new(dlock_latch **out, dlock_client *c, const char *name);
DLOCK_API void dlock_latch_free(dlock_latch *l);
/* Start the latch at 'count' (1..DLOCK_LATCH_MAX_COUNT); it expires
 * 'expire_ms' (1 ms..DLOCK_MAX_DURATION_MS) from now whatever its count, so
 * an abandoned latch does not live forever. DLOCK_EBUSY when it is already
 * counting (count > 0; the error says how many are left); a latch at zero
 * may be set again. */
#define DLOCK_LATCH_MAX_COUNT 1000000000
DLOCK_API int dlock_latch_set(dlock_latch *l, int64_t count, int64_t expire_ms);
/* Count down by one (not below zero); at zero every waiter is woken.
 * '*left' (may be NULL): the count after it. DLOCK_ENOLATCH when the latch
 * was never set or has expired. DLOCK_EUNKNOWN when the reply was lost (the
 * count-down may have counted; it is not resent). */
DLOCK_API int dlock_latch_count_down(dlock_latch *l, int64_t *left);
/* The current count into '*count'; DLOCK_ENOLATCH as above. */
DLOCK_API int dlock_latch_count(dlock_latch *l, int64_t *count);
/* Wait until the count is zero: 0 then; 'wait_ms' 0 looks once,
 * DLOCK_WAIT_FOREVER waits without limit. DLOCK_EBUSY when the count was
 * not zero for the whole wait, DLOCK_ENOLATCH when the latch does not exist
 * or expired (an abandoned latch never opens), DLOCK_ECANCELED. */
DLOCK_API int dlock_latch_wait(dlock_latch *l, int64_t wait_ms);
/* Make a dlock_latch_wait() in progress in another thread return
 * DLOCK_ECANCELED soon. */
DLOCK_API void dlock_latch_cancel(dlock_latch *l);
DLOCK_API const char *dlock_latch_name(const dlock_latch *l);
/* Detail of this handle's last failure. Empty string when none. */
DLOCK_API const char *dlock_latch_errmsg(const dlock_latch *l);

/* ---- Cron and time (pure, no I/O but zoneinfo files) ---- */

/* Accept the 5-field Unix form "m h dom mon dow" (day-of-week 0-7, 0 and 7 =
 * Sunday) besides Quartz's 6 or 7 fields. See docs/cron.md. */
#define DLOCK_CRON_UNIX 1u

/* The next 'n' fire times of the Quartz cron 'expr' strictly after
 * 'after_unix_s', with its fields read as wall time in the IANA zone 'tz'
 * (NULL: UTC). Writes up to 'n' times to 'out' and returns how many (fewer
 * when the expression stops firing), or DLOCK_ECRON (the message names the
 * field and column), DLOCK_ETZ, DLOCK_EINVAL. */
DLOCK_API int dlock_cron_next(const char *expr, const char *tz, unsigned flags, int64_t after_unix_s, int64_t *out,
                              int n);

/* 'unix_s' as ISO 8601 with the offset in 'tz' (NULL: UTC), e.g.
 * "2026-03-29T03:00:00+02:00". 'len' >= 32 is always enough. */
DLOCK_API int dlock_time_format(int64_t unix_s, const char *tz, char *buf, size_t len);

/* Parse ISO 8601 ("2026-03-29T02:30:00+01:00", "...Z", or wall time in 'tz')
 * or "@EPOCH" into seconds since the epoch. DLOCK_ETIME on bad input. */
DLOCK_API int dlock_time_parse(const char *text, const char *tz, int64_t *unix_s);

/* ---- Scheduler: jobs that run once per tick across a fleet ---- */

typedef struct dlock_sched dlock_sched;

/* What a job's callback learns about the tick it runs. */
typedef struct dlock_tick {
  const char *job;
  int64_t scheduled_unix_ms; /* the tick: its scheduled fire time */
  uint64_t fence;            /* fencing token of this run */
  const char *node;          /* this scheduler's node name */
  const char *trigger;       /* "tick", or "manual" (dlock_job_trigger: scheduled_unix_ms is its time) */
} dlock_tick;

/* A job. Returns 0 on success; anything else is recorded as a failure. */
typedef int (*dlock_job_fn)(const dlock_tick *tick, void *arg);

typedef enum dlock_sched_event_kind {
  DLOCK_SCHED_RAN = 1,          /* this node ran the tick ('status' is the job's result) */
  DLOCK_SCHED_SKIPPED = 2,      /* another node claimed the tick ('node' says which) */
  DLOCK_SCHED_SKIPPED_BUSY = 3, /* the previous run still held the job lock: no overlap */
  DLOCK_SCHED_SKIPPED_POOL = 4, /* every worker of this node was busy; left to other nodes */
  DLOCK_SCHED_MISFIRED = 5,     /* the tick was too late to run (see docs/scheduler.md) */
  DLOCK_SCHED_ERROR = 6,        /* the server failed; 'status' and 'message' say how */
  /* This node's clock is ahead of the server's by more than
   * DLOCK_SCHED_CLOCK_TOLERANCE_MS: the tick was not claimed, so that the
   * nodes with a correct clock run it. 'clock_skew_ms' is the measured skew,
   * 'message' says what to fix. Reported for every tick until fixed. */
  DLOCK_SCHED_CLOCK_SKEW = 7,
  /* The job is paused (dlock_job_pause): the tick was consumed and recorded
   * as skipped; 'message' says who paused it and why. */
  DLOCK_SCHED_SKIPPED_PAUSED = 8
} dlock_sched_event_kind;

/* How far a tick may lie ahead of the server's clock when a node
 * claims it (docs/scheduler.md). */
#define DLOCK_SCHED_CLOCK_TOLERANCE_MS 5000

typedef struct dlock_sched_event {
  dlock_sched_event_kind kind;
  const char *job;
  int64_t scheduled_unix_ms;
  const char *node; /* who ran or claimed the tick */
  uint64_t fence;
  int64_t duration_ms;   /* RAN: how long the run took */
  int status;            /* RAN: the job's result; ERROR: a DLOCK_E* code */
  const char *message;   /* ERROR, CLOCK_SKEW: detail (valid during the callback only) */
  int64_t clock_skew_ms; /* CLOCK_SKEW: this node's clock minus the server's, measured */
  const char *trigger;   /* "tick", or "manual" for a run of dlock_job_trigger() */
} dlock_sched_event;

typedef struct dlock_sched_options {
  size_t struct_size;    /* set by dlock_sched_options_init(); see the top */
  int pool_size;         /* worker threads; 0: 1 (as Spring's default) */
  const char *node_name; /* NULL: "<hostname>:<pid>" */
  /* Called for every tick outcome, from scheduler threads. May be NULL. */
  void (*on_event)(const dlock_sched_event *ev, void *arg);
  void *on_event_arg;
} dlock_sched_options;

typedef struct dlock_job_options {
  size_t struct_size; /* set by dlock_job_options_init(); see the top */
  /* The job lock's lease: a run (or a crashed runner) blocks later ticks at
   * most this long. 0: 10 minutes. */
  int64_t lock_at_most_for_ms;
  /* Keep the job lock at least this long after a run starts, even if the
   * run ends sooner. 0: release at the end. */
  int64_t lock_at_least_for_ms;
  int allow_overlap;     /* 1: a tick may start while the previous run goes on */
  const char *time_zone; /* cron only: IANA zone; NULL: UTC */
  unsigned cron_flags;   /* cron only: DLOCK_CRON_UNIX */
  int history_len;       /* runs kept on the server; 0: 100 */
} dlock_job_options;

DLOCK_API void dlock_sched_options_init(dlock_sched_options *opts);
DLOCK_API void dlock_job_options_init(dlock_job_options *opts);

/* A scheduler on client 'c' ('opts' may be NULL). Add jobs, then start. */
DLOCK_API int dlock_sched_new(dlock_sched **out, dlock_client *c, const dlock_sched_options *opts);

/* Add a job named 'job' (a lock name) fired by a Quartz cron expression. */
DLOCK_API int dlock_sched_add_cron(dlock_sched *s, const char *job, const char *expr, const dlock_job_options *opts,
                                   dlock_job_fn fn, void *arg);
/* The shortest period of a fixed rate or delay: every tick is claimed on the
 * server, so a shorter one cannot be kept (DLOCK_ERANGE). */
#define DLOCK_SCHED_MIN_PERIOD_MS 100
/* Fixed rate: ticks every 'period_ms' on the epoch-aligned grid, so all nodes
 * agree on them. Ticks missed while nothing could run are skipped. */
DLOCK_API int dlock_sched_add_fixed_rate(dlock_sched *s, const char *job, int64_t period_ms,
                                         const dlock_job_options *opts, dlock_job_fn fn, void *arg);
/* Fixed delay: a run starts 'delay_ms' after the previous run (on any node)
 * ended, measured on the server's clock. */
DLOCK_API int dlock_sched_add_fixed_delay(dlock_sched *s, const char *job, int64_t delay_ms,
                                          const dlock_job_options *opts, dlock_job_fn fn, void *arg);

DLOCK_API int dlock_sched_start(dlock_sched *s);

/* Stop firing new ticks and wait up to 'timeout_ms' for running jobs.
 * DLOCK_ETIMEDOUT if some still run then (they finish in the background). */
DLOCK_API int dlock_sched_stop(dlock_sched *s, int64_t timeout_ms);

/* Stops (waiting for running jobs without limit) and frees. NULL is a no-op. */
DLOCK_API void dlock_sched_free(dlock_sched *s);

/* One entry of a job's run history, newest first. */
typedef struct dlock_run_record {
  size_t struct_size; /* set by dlock_run_record_init(); see the top */
  char node[128];
  uint64_t fence;
  int64_t scheduled_unix_ms;
  int64_t start_unix_ms; /* server clock */
  int64_t duration_ms;   /* -1 for a skipped tick */
  char outcome[64];      /* "ok", "failed: 3", "skipped: previous run still going",
                                "skipped: paused by WHO: REASON" */
  char trigger[16];      /* "tick", or "manual" (dlock_job_trigger; scheduled_unix_ms is
                                then the time of the trigger) */
} dlock_run_record;

/* Zero 'rec' and set its struct_size. */
DLOCK_API void dlock_run_record_init(dlock_run_record *rec);
/* Up to 'max' most recent records of 'job' into 'out'; returns how many.
 * The array is stepped through by out[0].struct_size: initialise every
 * element with dlock_run_record_init(), or at least the first. */
DLOCK_API int dlock_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max);

/* ---- Operating jobs: pause, resume, trigger (docs/scheduler.md, "Operations") ----
 * A job's state is kept on the server under its name, so every scheduler
 * running the job obeys it at its next tick; a trigger wakes them through
 * the server's notification. Offered where the backend keeps it
 * (docs/scheduler.md); elsewhere DLOCK_EINVAL names the backend.
 * 'by' says who (NULL: "<user>@<hostname>"); it may not contain '|', CR or LF. */

/* Pause 'job': its ticks are consumed and recorded as skipped ("skipped:
 * paused by BY: REASON") until dlock_job_resume(); a run in progress goes on.
 * 'reason' may be NULL. Returns 1 when paused now, 0 when it already was
 * (its first pause is kept). */
DLOCK_API int dlock_job_pause(dlock_client *c, const char *job, const char *by, const char *reason);
/* Resume 'job': 1 when it was paused, 0 when it was not. */
DLOCK_API int dlock_job_resume(dlock_client *c, const char *job, const char *by);
/* One extra run of 'job' now, on exactly one of the schedulers running it,
 * claimed like a tick (fenced, recorded with trigger "manual"), also while
 * the job is paused; if the previous run still holds the job lock, when it
 * ends. Returns 1 when requested, 0 when a trigger was already pending (one
 * at a time). Nothing runs while no scheduler runs the job. */
DLOCK_API int dlock_job_trigger(dlock_client *c, const char *job, const char *by);

typedef struct dlock_job_state {
  size_t struct_size; /* set by dlock_job_state_init(); see the top */
  int paused;
  char paused_by[128];
  char paused_reason[256];
  int64_t paused_unix_ms; /* server clock */
  int trigger_pending;
  char trigger_by[128];
  int64_t trigger_unix_ms; /* server clock */
  /* From the history (its last history_len entries): */
  int64_t last_run_unix_ms;     /* start of the newest run (skips not counted); 0: none */
  char last_outcome[64];        /* its outcome */
  int64_t last_success_unix_ms; /* end of the newest run that returned 0; 0: none */
} dlock_job_state;

DLOCK_API void dlock_job_state_init(dlock_job_state *st);
/* The state of 'job' (a job never operated nor run is simply not paused). */
DLOCK_API int dlock_job_state_get(dlock_client *c, const char *job, dlock_job_state *out);
/* Call 'fn' with each job that has run in the last 30 days or has a state,
 * whose name matches the glob 'pattern' (NULL: all); returns how many. */
DLOCK_API int dlock_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *job, void *arg), void *arg);

/* ---- Leader election (docs/election.md) ---- */

/* One leader among the candidates of an election 'name': leadership is a
 * hold of the mutex 'name' (the same key, row or node; `dlock status NAME`
 * shows it), so it has the mutex's lease and watchdog, its loss rule
 * (callback, fd, lost(), at the local deadline, never later) and its FIFO
 * hand-off between waiting candidates. The leader's 'value' (who it is, an
 * address) is the hold's owner_info: anyone reads it with
 * dlock_election_leader(). The epoch of a term is the hold's fence:
 * strictly rising across terms, usable with dlock_guard_check() and in SQL
 * as any fence, so that a leader paused past its lease is refused once its
 * successor has written. */
typedef struct dlock_election dlock_election;

typedef struct dlock_election_options {
  size_t struct_size; /* set by dlock_election_options_init(); see the top */
  int64_t lease_ms;   /* the leadership's lease, renewed every third of it; 0: 15000 */
  /* Called once, from the watchdog thread, when leadership is lost (as a
   * mutex's on_lost; 'm' is dlock_election_mutex()). May be NULL. */
  dlock_lost_cb on_lost;
  void *on_lost_arg;
  /* The value campaigns are expected to use (NULL: ""): a campaign with
   * another value makes the election's mutex handle anew (see
   * dlock_election_mutex()). */
  const char *value;
} dlock_election_options;

DLOCK_API void dlock_election_options_init(dlock_election_options *opts);
/* A candidate's handle on election 'name' (a lock name). No I/O. 'opts'
 * may be NULL. */
DLOCK_API int dlock_election_new(dlock_election **out, dlock_client *c, const char *name,
                                 const dlock_election_options *opts);
/* Resigns if leading (best effort), then frees. NULL is a no-op. */
DLOCK_API void dlock_election_free(dlock_election *e);
/* Stand for election with 'value' (at most 1024 bytes; NULL: ""): wait up
 * to 'wait_ms' (0: once; DLOCK_WAIT_FOREVER) until this candidate leads,
 * candidates being served in arrival order. 0: leading, with
 * dlock_election_epoch(); DLOCK_EBUSY: another led for the whole wait.
 * DLOCK_EINVAL while this handle leads already. A value other than the
 * last campaign's (or the options' value) makes the mutex handle anew: only
 * dlock_election_cancel() may be called meanwhile from other threads. */
DLOCK_API int dlock_election_campaign(dlock_election *e, const char *value, int64_t wait_ms);
/* Make a campaign waiting in another thread return DLOCK_ECANCELED soon. */
DLOCK_API void dlock_election_cancel(dlock_election *e);
/* Change the leader's value while keeping the term (same epoch), only
 * while the server still has this handle as the leader: DLOCK_ENOTHELD
 * when it does not (the value is not written). Where the backend cannot
 * (docs/election.md), DLOCK_EINVAL saying so. */
DLOCK_API int dlock_election_proclaim(dlock_election *e, const char *value);
/* Step down: the next candidate in line leads at once (no lease to wait
 * out). DLOCK_ENOTHELD when this handle did not lead (or had lost it). Any
 * thread may call it. */
DLOCK_API int dlock_election_resign(dlock_election *e);
/* The epoch of this handle's term; 0 when not leading. */
DLOCK_API uint64_t dlock_election_epoch(const dlock_election *e);
/* As dlock_mutex_lost(): DLOCK_LOST_NONE while leading (or not leading). */
DLOCK_API dlock_lost_reason dlock_election_lost(const dlock_election *e);
/* An fd readable when leadership is lost (dlock_mutex_lost_fd()); valid
 * until the next campaign with another value (or _free). */
DLOCK_API int dlock_election_lost_fd(dlock_election *e);
/* The local deadline of the term (dlock_mutex_valid_until()); 0 when not leading. */
DLOCK_API dlock_mono_ms dlock_election_valid_until(const dlock_election *e);
/* The election as a mutex handle (the on_lost callback's 'm'): for
 * dlock_mutex_is_held(), _remaining(); do not acquire or free it. A
 * campaign with another value than the last one makes it anew. */
DLOCK_API dlock_mutex *dlock_election_mutex(dlock_election *e);
DLOCK_API const char *dlock_election_name(const dlock_election *e);
DLOCK_API const char *dlock_election_errmsg(const dlock_election *e);

/* Who leads an election, as its server says. */
typedef struct dlock_leader {
  size_t struct_size;    /* set by dlock_leader_init(); see the top */
  int has_leader;        /* 0: no one leads now (the fields below are 0 and "") */
  uint64_t epoch;        /* the leader's epoch (the hold's fence) */
  int64_t since_unix_ms; /* when the term began (server clock), 0 if unknown; on
                            * zk:// when the leader's node was created, i.e. when it
                            * stood as a candidate (queued), which may be earlier */
  int64_t lease_left_ms; /* remaining lease; -1 when it lasts as long as a session */
  char value[1025];      /* the leader's value */
} dlock_leader;

DLOCK_API void dlock_leader_init(dlock_leader *out);
/* Who leads election 'name' now, read from the server (never a cache). 0
 * with has_leader 0 when no one does. */
DLOCK_API int dlock_election_leader(dlock_client *c, const char *name, dlock_leader *out);
/* Force out the leader of election 'name' only while its term is still the
 * one of 'epoch' (as dlock_election_leader() read it), in one step on the
 * server: a term begun since is left alone. '*evicted' (may be NULL): 1
 * when that term ended now, 0 when it had ended already or another term
 * leads (nothing done). The leader learns it at its next renewal.
 * DLOCK_EINVAL where not offered (docs/election.md); DLOCK_EFOREIGN when
 * the leader is another program's candidate that would not notice and would
 * go on leading (docs/election.md says where; so does
 * dlock_lock_force_release()). */
DLOCK_API int dlock_election_evict(dlock_client *c, const char *name, uint64_t epoch, int *evicted);

/* Watch an election, candidate or not: every change of leader (a new
 * epoch, a new value, or no leader) is queued, in order, and announced by
 * the callback and by an fd that stays readable while changes are queued.
 * Changes are read from the server every 'interval_ms': two terms that both
 * begin and end within one interval are seen as one change. */
typedef struct dlock_observer dlock_observer;

typedef struct dlock_observer_options {
  size_t struct_size;  /* set by dlock_observer_options_init(); see the top */
  int64_t interval_ms; /* how often the server is asked; 0: 100 */
  /* Called from the observer's thread for every change, after it is queued.
   * Keep it short. May be NULL. */
  void (*on_change)(const char *name, const dlock_leader *now, void *arg);
  void *on_change_arg;
} dlock_observer_options;

DLOCK_API void dlock_observer_options_init(dlock_observer_options *opts);
/* Start watching election 'name' (one thread per observer). The first
 * change queued is the state found at the start. */
DLOCK_API int dlock_observer_new(dlock_observer **out, dlock_client *c, const char *name,
                                 const dlock_observer_options *opts);
DLOCK_API void dlock_observer_free(dlock_observer *o);
/* An fd readable while changes are queued (for poll()). */
DLOCK_API int dlock_observer_fd(dlock_observer *o);
/* Take the oldest queued change into 'out' (dlock_leader_init'ed): 0, or
 * DLOCK_EBUSY when none is queued. A full queue (1024) drops the oldest. */
DLOCK_API int dlock_observer_next(dlock_observer *o, dlock_leader *out);
/* The last error in reading the server ("" when the last read worked). */
DLOCK_API const char *dlock_observer_errmsg(dlock_observer *o);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_H */
