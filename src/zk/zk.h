/*
 * zk.h - the ZooKeeper backend of libdlock, as a self-contained module.
 *
 * Locks in Apache Curator's InterProcessMutex layout (so that dlock and Java
 * services using Curator exclude each other), fences from the lock node's
 * czxid, loss from the ZooKeeper session, the fencing guard as a versioned
 * znode, and the scheduler's tick claims as first-create-wins nodes. See
 * docs/zookeeper.md. Only src/zk/ includes <zookeeper/zookeeper.h>; this
 * header does not, so that the core can hold a dlock__zk without it.
 *
 * Every function returns 0 (or a documented count) on success and a DLOCK_E*
 * status on failure, with dlock__error() naming the server and the path.
 */
#ifndef DLOCK_ZK_H
#define DLOCK_ZK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

/* ---- URL (zk/url.c) ---- */

#define DLOCK__ZK_DEFAULT_SESSION_MS 10000
#define DLOCK__ZK_DEFAULT_CONNECT_MS 5000

/* zk://host1:2181,host2:2181[/namespace][?session_timeout=10s&connect_timeout=5s&digest=user:pass] */
typedef struct dlock__zk_url {
  char *hosts;            /* "host1:2181,host2:2181" as the C client takes it */
  char *ns;               /* "" or "/a/b": no trailing '/' */
  int session_timeout_ms; /* asked for; the server may grant another */
  int connect_timeout_ms;
  char *digest;    /* "user:pass" or NULL */
  char shown[512]; /* the URL with the digest password masked */
} dlock__zk_url;

/* 1 when 'url' starts with "zk://". */
int dlock__zk_url_is(const char *url);
/* Parse 'url' into 'u' (zeroed first). DLOCK_EURL with the reason. */
int dlock__zk_url_parse(const char *url, dlock__zk_url *u);
void dlock__zk_url_clear(dlock__zk_url *u);
/* 'url' with the password of ?digest=user:PASSWORD replaced by "***" (also
 * when malformed); always NUL-terminated in 'buf'. */
void dlock__zk_url_redact(const char *url, char *buf, size_t len);
/* Check a lock, resource or job name as a ZooKeeper path below the
 * namespace: components separated by single '/', none empty, "." or "..",
 * no control characters, not starting with the reserved "_dlock_".
 * 'what' names the argument in the error ("lock name"). */
int dlock__zk_check_name(const char *what, const char *name);

/* ---- Session (zk/session.c) ---- */

typedef struct dlock__zk dlock__zk;

/* What the session tells the core. */
typedef enum dlock__zk_event {
  DLOCK__ZK_SUSPENDED = 1,   /* connection lost: holds are uncertain from now */
  DLOCK__ZK_RECONNECTED = 2, /* the same session again: holds are certain again */
  DLOCK__ZK_LOST = 3,        /* the session is over (or may be): every hold is lost */
  DLOCK__ZK_NODE_GONE = 4    /* a watched hold's node was deleted (a forced release, or our
                                own release): look at the holds now (dlock__zk_watch_held) */
} dlock__zk_event;

/* Called from the session's monitor thread, never with a module lock held.
 * 'reason' is DLOCK_LOST_NONE except for DLOCK__ZK_LOST: DLOCK_LOST_EXPIRED
 * (the ensemble said so) or DLOCK_LOST_UNREACHABLE (the session timeout
 * passed on our clock since the last answer). */
typedef void (*dlock__zk_event_fn)(dlock__zk *z, dlock__zk_event ev, dlock_lost_reason reason, void *arg);

/* Connect to the ensemble of 'url' and wait until a session is established
 * (the URL's connect timeout). DLOCK_EURL, DLOCK_ECONNECT (unreachable, or
 * a server that does not speak ZooKeeper: the message says which),
 * DLOCK_EAUTH (digest refused). */
int dlock__zk_connect(const char *url, dlock__zk **out);
/* Close the session: the ensemble deletes its ephemeral nodes at once. */
void dlock__zk_free(dlock__zk *z);
/* The ensemble and namespace, for messages ("zk 127.0.0.1:2181/app"). */
const char *dlock__zk_server(const dlock__zk *z);
/* The server the session talks to now ("127.0.0.1:2181"), "" when none. */
void dlock__zk_connected_to(dlock__zk *z, char *buf, size_t len);
/* Register the loss callback (NULL to remove). */
void dlock__zk_on_event(dlock__zk *z, dlock__zk_event_fn fn, void *arg);
/* A round trip to the ensemble (exists "/"). */
int dlock__zk_ping(dlock__zk *z);
/* The session's validity: the moment (monotonic) after which the ensemble
 * may have expired it: the send time of the last answered request plus 3/4
 * of the negotiated session timeout (the leader learns of our contact late
 * by up to a quarter of it, see session.c), less 1% + 2 ms for clock drift.
 * Moves forward while the connection lives (pings every quarter timeout). */
dlock_mono_ms dlock__zk_valid_until(dlock__zk *z);
/* DLOCK_LOST_NONE while the session may still be alive, else why not. Also
 * answers from valid_until itself. */
dlock_lost_reason dlock__zk_lost(dlock__zk *z);
/* The current session in one look: its id and validity (0 and 0 when
 * there is none), and DLOCK_LOST_NONE or why it is over. */
dlock_lost_reason dlock__zk_session_view(dlock__zk *z, int64_t *id, dlock_mono_ms *valid_until);
/* 1 while disconnected (SUSPENDED) and not yet lost. */
int dlock__zk_uncertain(dlock__zk *z);
/* The negotiated session timeout and the session id (0 before connect). */
int dlock__zk_session_timeout_ms(dlock__zk *z);
int64_t dlock__zk_session_id(dlock__zk *z);
/* Wake every thread waiting in dlock__zk_acquire() on 'z' so that it
 * re-reads its 'cancel' flag. */
void dlock__zk_wake(dlock__zk *z);

/* ---- Locks (zk/lock.c) ---- */

/* The side of a lock a node stands for (Curator's lock names). */
typedef enum dlock__zk_side {
  DLOCK__ZK_MUTEX = 0, /* InterProcessMutex: "lock-" */
  DLOCK__ZK_READ = 1,  /* InterProcessReadWriteLock: "__READ__" */
  DLOCK__ZK_WRITE = 2, /* and "__WRIT__" */
  /* LeaderLatch: "latch-", an election's mutex (core/election.c), so that
   * Curator's LeaderLatch candidates and dlock's stand in one election: the
   * first node leads, each watches its predecessor, the data is the
   * candidate's id (dlock's value). 3 is a semaphore's lease. */
  DLOCK__ZK_LATCH = 4
} dlock__zk_side;

/* One hold: our lock node. */
typedef struct dlock__zk_hold {
  char *lock_path;           /* "/ns/name" */
  char *node_path;           /* "/ns/name/_c_<uuid>-lock-0000000007" */
  uint64_t fence;            /* czxid of node_path */
  int64_t session;           /* the session that owns the node */
  dlock_mono_ms valid_until; /* that session's validity when the lock was ours */
} dlock__zk_hold;

void dlock__zk_hold_clear(dlock__zk_hold *h);

/* Take the lock 'name'. 'wait_ms': 0 try once, DLOCK_WAIT_FOREVER, or up
 * to that long in the queue (a waiter watches only its predecessor).
 * 'owner_info' (may be NULL) becomes the node's data. 'cancel' (may be NULL)
 * is read at each wake-up (dlock__zk_wake()). 0 and '*out'; DLOCK_EBUSY
 * (not acquired in time: our node is deleted), DLOCK_ECANCELED, DLOCK_EFOREIGN
 * (the lock path holds children that are not lock nodes), DLOCK_EUNKNOWN
 * (our node may exist and could not be found or deleted: it goes with the
 * session), connection errors. */
int dlock__zk_acquire(dlock__zk *z, const char *name, const char *owner_info, int64_t wait_ms, const atomic_int *cancel,
                      dlock__zk_hold *out);
/* As dlock__zk_acquire(), for one side of a read-write lock (or the mutex):
 * a writer holds when its node is the first of all, a reader when no
 * writer's node comes before it (a waiting writer keeps later readers out).
 * DLOCK_EWRONGTYPE when the name is held as another kind. */
int dlock__zk_acquire_side(dlock__zk *z, const char *name, dlock__zk_side side, const char *owner_info, int64_t wait_ms,
                           const atomic_int *cancel, dlock__zk_hold *out);
/* One permit of the semaphore 'name' (Curator's InterProcessSemaphoreV2
 * layout, see lock.c) with 'permits' in all: DLOCK_ELIMIT when its holders
 * stored another limit; otherwise as dlock__zk_acquire(). The hold is the
 * lease node (release with dlock__zk_release()). */
int dlock__zk_sem_acquire(dlock__zk *z, const char *name, int permits, const char *owner_info, int64_t wait_ms,
                          const atomic_int *cancel, dlock__zk_hold *out);
/* The scheduler's job lock of 'job': a lock in the same layout at
 * /ns/_dlock_sched/<job>/run, tried once (wait 0). As dlock__zk_acquire(). */
int dlock__zk_job_lock_try(dlock__zk *z, const char *job, const char *owner_info, dlock__zk_hold *out);
/* Delete our node. 0 (also when a lost reply's resend finds it gone in the
 * same session: only we or a force-release delete it), DLOCK_ENOTHELD when it
 * was already gone at the first try, DLOCK_EUNKNOWN when no answer came
 * (the node then ends with the session). */
int dlock__zk_release(dlock__zk *z, dlock__zk_hold *h);
/* 1 while our node exists and belongs to this session, 0 if not, or < 0
 * (DLOCK_ETIMEDOUT when no answer came before the session's deadline). */
int dlock__zk_is_held(dlock__zk *z, const dlock__zk_hold *h);
/* Set an exists watch on the node of 'h' (asynchronous: no wait): its
 * deletion while the session lives, or its absence already, delivers
 * DLOCK__ZK_NODE_GONE, so that a forced release is seen at once. */
void dlock__zk_watch_held(dlock__zk *z, const dlock__zk_hold *h);
/* The same, waiting for the answer no later than 'deadline' either. */
int dlock__zk_is_held_until(dlock__zk *z, const dlock__zk_hold *h, dlock_mono_ms deadline);

typedef struct dlock__zk_info {
  int held;                         /* a lock node exists */
  uint64_t fence;                   /* czxid of the holder's node */
  int64_t since_unix_ms;            /* its ctime (the ensemble's clock) */
  int64_t owner_session;            /* its ephemeralOwner */
  int64_t waiters;                  /* lock nodes after the holder's */
  char holder[256];                 /* the holder's node name */
  char owner_info[1025];            /* its data (Curator writes the holder's IP) */
  int kind;                         /* 0 nothing there, 1 mutex, 2 read-write lock, 3 semaphore */
  int64_t readers, waiting_writers; /* a read-write lock's read holders and waiting writers */
  int writer;                       /* 1 when its write side is held */
  int64_t permits, permits_used;    /* a semaphore's stored limit (0: unknown) and leases */
} dlock__zk_info;

int dlock__zk_info_get(dlock__zk *z, const char *name, dlock__zk_info *out);
/* Call 'fn' with each lock (a node below the namespace with lock nodes
 * among its children, searched down to 16 levels; 'fn' may be NULL);
 * returns how many. */
int dlock__zk_list(dlock__zk *z, void (*fn)(const char *name, void *arg), void *arg);
/* Delete the holders' nodes of 'name' (only lock nodes, never the path
 * itself or anything else): a mutex's holder, a read-write lock's writer or
 * every reader ahead of the first writer, every permit of a semaphore. 1
 * deleted, 0 not held, or < 0. Safe to resend: a node name is never reused. */
int dlock__zk_force_release(dlock__zk *z, const char *name);
/* dlock_lock_holders for a semaphore: each lease, oldest first (lock.c). */
int dlock__zk_holders(dlock__zk *z, const char *name, void (*fn)(const dlock_holder *, void *), void *arg);
/* dlock_watch_* (watch.c): child watches on the lock's nodes. */
int dlock__zk_watch_open(dlock__zk *z, dlock_watch *w);
int dlock__zk_watch_add(dlock__zk *z, dlock_watch *w, const char *name);
void dlock__zk_watch_rearm(dlock__zk *z, dlock_watch *w);
void dlock__zk_watch_close(dlock__zk *z, dlock_watch *w);
/* As dlock__zk_force_release(), only while the holder of a mutex or an
 * election is the node whose czxid is 'fence' (an election's epoch): 1
 * deleted, 0 when another node holds, none does, or 'fence' is 0. */
int dlock__zk_force_release_fence(dlock__zk *z, const char *name, uint64_t fence);

/* ---- Guard and scheduler (zk/sched.c) ---- */

/* The fencing guard: /ns/_dlock_guard/<resource> holds the highest token in
 * decimal, changed by conditional setData. 0 admitted, DLOCK_ESTALE,
 * DLOCK_ERANGE (token 0 or above 2^63-1), DLOCK_EFENCE (the node's data is
 * no such number). */
/* 'highest' (may be NULL): the token when admitted, the newer one when DLOCK_ESTALE. */
int dlock__zk_guard_check(dlock__zk *z, const char *resource, uint64_t token, uint64_t *highest);

/* Claim tick 'tick_unix_ms' of 'job' by creating
 * /ns/_dlock_sched/<job>/ticks/<tick, 20 digits> with 'run_token' and 'node'
 * as data. 1 claimed (fence = the tick node's czxid), 0 claimed by another
 * ('by' gets its node name), DLOCK_ETIME when the tick lies further ahead of
 * the ensemble's clock than 'ahead_ms' (this host's clock is wrong; the
 * claim is withdrawn), or < 0. A create whose reply was lost is resolved by
 * reading the node back (our run token or not). Old tick nodes beyond the
 * newest 'keep' are deleted. */
int dlock__zk_sched_claim(dlock__zk *z, const char *job, int64_t tick_unix_ms, const char *run_token, const char *node,
                          int64_t ahead_ms, int keep, uint64_t *fence, char *by, size_t bylen);
/* The same, for a paused job ('why': "skipped: paused by ..."): the tick
 * is consumed, marked paused; 2 when this claim consumed it (record the
 * skip), 0 another's, < 0. */
int dlock__zk_sched_claim_paused(dlock__zk *z, const char *job, int64_t tick_unix_ms, const char *run_token,
                                 const char *node, const char *why, int64_t ahead_ms, int keep, uint64_t *fence,
                                 char *by, size_t bylen);
/* A job's state (sched.c: <job>/state, <job>/trigger, <job>/manual). Apply
 * DLOCK__JOB_* (1 changed, 0 nothing to do, < 0). */
int dlock__zk_job_set(dlock__zk *z, const char *job, int op, const char *by, const char *reason, const char *id);
/* The pause and the pending trigger into 'out'. */
int dlock__zk_job_get(dlock__zk *z, const char *job, dlock_job_state *out);
/* For a tick's claim: 'why' ("skipped: paused by ...", "" when not paused)
 * and whether a trigger waits. */
int dlock__zk_job_peek(dlock__zk *z, const char *job, char *why, size_t whylen, int *pending);
/* Claim the pending trigger like a tick (<job>/manual/<ctime>-<id>): 1
 * ours (fence: its czxid; '*trigger_unix_ms' when it was made), 0 none
 * pending or another's ('by'), < 0. */
int dlock__zk_job_claim_manual(dlock__zk *z, const char *job, const char *run_token, const char *node, int keep,
                               uint64_t *fence, int64_t *trigger_unix_ms, char *by, size_t bylen);
/* Every job name under /ns/_dlock_sched; how many, or < 0. */
int dlock__zk_job_list(dlock__zk *z, void (*fn)(const char *, void *), void *arg);
/* Call 'wake(arg)' (from the session's thread) when <job>/trigger is made
 * or deleted, or the connection comes back. '*handle': mark it with
 * dlock__zk_job_unwatch, free it with dlock__zk_job_watch_free after
 * dlock__zk_free (the watcher may fire until the session ends). */
int dlock__zk_job_watch(dlock__zk *z, const char *job, void (*wake)(void *), void *arg, void **handle);
void dlock__zk_job_unwatch(void *handle);
void dlock__zk_job_watch_free(void *handle);
/* Append a run record to /ns/_dlock_sched/<job>/history (sequential nodes),
 * keeping the newest 'keep'. */
int dlock__zk_sched_finish(dlock__zk *z, const char *job, const dlock_run_record *rec, int keep);
/* Up to 'max' newest records, newest first; returns how many. */
int dlock__zk_sched_history(dlock__zk *z, const char *job, dlock_run_record *out, int max);

/* This backend's table of operations (core/backend.c's scheme registry points to it). */
extern const dlock__backend_ops dlock__zk_ops;

#endif /* DLOCK_ZK_H */
