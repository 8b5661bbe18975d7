/*
 * backend.h - the seam between libdlock's backend-neutral core and its
 * backends (backend.c's scheme registry lists them).
 *
 * As curl's TLS backends do, each backend fills one table of operations
 * (dlock__backend_ops) and the core calls only through it. The core keeps
 * what every backend shares: the client and lock handles, reentrancy, the
 * watchdog thread and the loss rule (callback, fd, lost(), the local
 * deadline), cancellation, errors, and the scheduler's timing. A backend
 * keeps its own state behind c->be (per client) and m->be (per handle), and
 * is the only code that includes its client library. The URL scheme picks
 * the backend (dlock__backend_for, from backend.c's scheme registry).
 *
 * Every operation returns 0 (or a documented count) or a DLOCK_E* status
 * with dlock__error() saying what failed and where (the server, key or path).
 */
#ifndef DLOCK_BACKEND_H
#define DLOCK_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock.h"

typedef struct dlock__backend_ops dlock__backend_ops;

/* Capabilities: per-client facts only, set by open() in c->caps (what a
 * backend offers as a whole is the sub-tables it points to, below). */
#define DLOCK__CAP_SESSION \
  1u                            /* holds live as long as a session (or a transaction): the
                                   watchdog's renew() only reads the session's validity */
#define DLOCK__CAP_SEMAPHORE 2u /* handles of kind DLOCK__KIND_SEMAPHORE (internal.h) */
#define DLOCK__CAP_RWLOCK 4u    /* handles of kind DLOCK__KIND_READ and _WRITE */

/* What an acquire answers on success. */
typedef struct dlock__grant {
  uint64_t fence;            /* 0 only where holds carry no fence (advisory modes) */
  int64_t lease_ms;          /* the lease in force (session backends: the session timeout) */
  dlock_mono_ms start;       /* the moment the hold counts from (before the request left) */
  dlock_mono_ms valid_until; /* the local deadline (dlock__valid_until(start, lease) for leases) */
  int64_t claim_ms;          /* 0, or the hold runs on this shorter lease (a hand-off's claim, counted
                                from 'start') until the watchdog's first renewal sets 'lease_ms' */
} dlock__grant;

/* One hold in a watchdog batch. */
typedef struct dlock__renewal {
  dlock_mutex *m;            /* in: the handle (its backend state is stable while held) */
  const char *token;         /* in: the hold's token, as the core saw it */
  int64_t lease_ms;          /* in: the lease to renew */
  int status;                /* out: 0 renewed; DLOCK_ELOST (see 'lost'); else not renewed this time */
  dlock_lost_reason lost;    /* out, with DLOCK_ELOST */
  dlock_mono_ms sent;        /* out: when the renewal left (leases: valid_until counts from here) */
  dlock_mono_ms valid_until; /* out, with status 0: the new local deadline */
} dlock__renewal;

/* A scheduler claim: one tick of one job. */
typedef struct dlock__claim {
  /* in */
  const char *job;
  int64_t tick_ms;     /* the tick (wall ms); fixed delay: 0, the backend names the tick */
  int64_t delay_ms;    /* fixed delay: the delay after the last end; else 0 */
  const char *token;   /* the run's random token (32 hex) */
  const char *node;    /* this node's name */
  int64_t at_most_ms;  /* lock_at_most_for */
  int64_t at_least_ms; /* lock_at_least_for */
  int allow_overlap;
  int history_len;
  int64_t ahead_ms; /* refuse a tick this far ahead of the server's clock */
  int manual;       /* 1: claim the job's pending manual trigger (dlock_job_trigger), not a tick;
                                tick_ms and delay_ms are 0. It runs even while the job is paused. */
  /* out */
  int outcome;             /* DLOCK__CLAIM_* */
  uint64_t fence;          /* YOURS */
  int64_t start_ms;        /* YOURS: the server's clock at the claim */
  int64_t claimed_tick_ms; /* YOURS with a fixed delay: the tick claimed */
  int64_t server_now_ms;   /* AHEAD: the server's clock */
  int64_t wait_ms;         /* WAIT: look again after this long */
  char by[128];            /* TAKEN, BUSY: the node that has it */
  char why[160];           /* PAUSED: "skipped: paused by WHO: REASON", as recorded in the history */
  int trigger_pending;     /* a tick's claim: a manual trigger waits (claim it with 'manual') */
  int maybe_ran;           /* after a failure: the claim may hold the job lock (undo it) */
} dlock__claim;

enum {
  DLOCK__CLAIM_YOURS = 1,
  DLOCK__CLAIM_TAKEN,  /* this tick (or a later one) was claimed by another run */
  DLOCK__CLAIM_BUSY,   /* the previous run still holds the job lock */
  DLOCK__CLAIM_AHEAD,  /* the tick lies ahead of the server's clock: this host's clock is wrong */
  DLOCK__CLAIM_WAIT,   /* fixed delay: not due yet */
  DLOCK__CLAIM_PAUSED, /* the job is paused: the tick was consumed and recorded as skipped */
  DLOCK__CLAIM_NONE    /* 'manual': no trigger is pending (another node claimed it) */
};

/* Operations on a job's state (dlock_job_pause, _resume, _trigger). */
enum { DLOCK__JOB_PAUSE = 1, DLOCK__JOB_RESUME, DLOCK__JOB_TRIGGER };

/* ---- Optional sub-tables: a backend points to those it offers ----
 * The pointer being there is the capability (NULL: not offered, and the core
 * answers a clear error naming the backend). Inside a sub-table every slot is
 * required unless it says what NULL means. */

/* Looking at locks from outside: dlock_lock_info_get, dlock_lock_list,
 * dlock_lock_force_release, and the server's upkeep. */
typedef struct dlock__admin_ops {
  int (*info)(dlock_client *c, const char *name, dlock_lock_info *out);
  int (*list)(dlock_client *c, const char *pattern, void (*fn)(const char *name, void *arg), void *arg);
  int (*force_release)(dlock_client *c, const char *name, unsigned flags, int *was_held);
  /* dlock_client_check. NULL: the core's check is a ping. */
  int (*check)(dlock_client *c, dlock_check *out, int max);
  /* Create what the backend needs (schema, tables). NULL: nothing to create. */
  int (*setup)(dlock_client *c);
  /* Delete what ended 'older_than_ms' ago ('*pruned' the rows deleted).
   * NULL: nothing to prune. */
  int (*prune)(dlock_client *c, int64_t older_than_ms, int64_t *pruned);
  /* dlock_watch_*: set up w->be (no names yet), watch one more lock (name
   * NULL: every lock of the prefix), free w->be. The backend calls
   * dlock__watch_wake(w) from any thread when a watched lock may have
   * changed. watch_add answers 1 when it cannot be told of that change: the
   * core then wakes the watch every DLOCK__WATCH_BOUND_MS. NULL watch_open:
   * no notifications at all (the same bound). */
  /* dlock_lock_holders for a semaphore or a read-write lock (a mutex's
   * holder comes from info). NULL: the newest holder, as info gives it. */
  int (*holders)(dlock_client *c, const char *name, void (*fn)(const dlock_holder *, void *), void *arg);
  int (*watch_open)(dlock_watch *w);
  int (*watch_add)(dlock_watch *w, const char *name);
  void (*watch_close)(dlock_watch *w);
  /* Called at each dlock_watch_wait() before it looks for a wake-up: set
   * again the watches that fired (one-shot watches). NULL: nothing to do. */
  void (*watch_rearm)(dlock_watch *w);
} dlock__admin_ops;

/* The fencing guard (dlock_guard_check). */
typedef struct dlock__guard_ops {
  int (*check)(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest);
} dlock__guard_ops;

/* The pipelined release (dlock_mutex_release_async). */
typedef struct dlock__pipeline_ops {
  /* Send the release of m->token without waiting for its reply. 0 when
   * sent: the outcome comes later through dlock__mutex_release_done() (as
   * release() would answer, with its message); a status when not sent
   * (nothing pending then). */
  int (*release_async)(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
  /* Read replies until the outcome for 'm' has come. */
  void (*release_collect)(dlock_mutex *m);
} dlock__pipeline_ops;

/* Countdown latches. l->be is the backend's state. */
typedef struct dlock__latch_ops {
  int (*create)(dlock_latch *l); /* check the name, set up l->be (no I/O) */
  void (*destroy)(dlock_latch *l);
  /* Start at 'count' expiring 'expire_ms' from now; DLOCK_EBUSY while counting. */
  int (*set)(dlock_latch *l, int64_t count, int64_t expire_ms);
  /* Count down once ('*left' the count after); DLOCK_ENOLATCH; never resent. */
  int (*count_down)(dlock_latch *l, int64_t *left);
  int (*get)(dlock_latch *l, int64_t *count, int64_t *ttl_ms); /* DLOCK_ENOLATCH when absent;
                                                                  ttl_ms may be NULL */
  /* The names with a latch, as admin->list gives the held locks'. */
  int (*list)(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
  /* Until zero (0), 'deadline' (DLOCK_EBUSY), absent (DLOCK_ENOLATCH) or a
   * cancel (DLOCK_ECANCELED): woken by the backend's notification, and
   * re-checking at least every 2 s so that a lost one strands no waiter. */
  int (*wait)(dlock_latch *l, int64_t wait_ms, dlock_mono_ms deadline);
  void (*cancel)(dlock_latch *l); /* end a wait() in progress */
} dlock__latch_ops;

/* The scheduler's claims. */
typedef struct dlock__sched_ops {
  /* Claim 'cl' (see dlock__claim). Safe to send twice with the same token. */
  int (*claim)(dlock_client *c, dlock__claim *cl);
  /* End the run of 'cl' recorded as 'rec' (a full dlock_run_record; its
   * duration_ms as measured here, which a backend may replace by the
   * server's measure): release the job lock (kept for at_least_ms after the
   * start) and append to the history. '*lock_was_ours' 0 when the run
   * outlived its job lock. Sent twice only where that is safe. */
  int (*finish)(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours);
  /* After a claim or finish whose outcome is unknown: free the job lock if it holds 'cl->token'. */
  void (*undo)(dlock_client *c, const dlock__claim *cl);
  /* Up to 'max' newest records into 'out' (full records), newest first;
   * returns how many. */
  int (*history)(dlock_client *c, const char *job, dlock_run_record *out, int max);

  /* ---- A job's state, for operating it (dlock_job_*). NULL: not offered
   * (then claim() never sees a pause, nor 'manual'). ---- */
  /* Apply 'op' (DLOCK__JOB_*) by 'by' ('reason': pause only) in one step on
   * the server, and notify the running schedulers (job_watch). Returns 1
   * when it changed the state, 0 when there was nothing to do. Safe to send
   * twice with the same 'id' (fresh per call). */
  int (*job_set)(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id);
  /* The pause and pending trigger of 'job' into 'out' (a full
   * dlock_job_state; the core adds the history's part). */
  int (*job_get)(dlock_client *c, const char *job, dlock_job_state *out);
  /* Call 'fn' for every job with a state or a claimed tick matching
   * 'pattern' (NULL: all), each name once; returns how many. */
  int (*job_list)(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
  /* Call 'wake(arg)' (from any thread; it must not block nor call dlock)
   * when the state of 'job' changes, by the backend's notification;
   * '*handle' for job_unwatch. A failure leaves the scheduler to learn of
   * triggers from its tick claims (trigger_pending). */
  int (*job_watch)(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle);
  void (*job_unwatch)(dlock_client *c, void *handle);
} dlock__sched_ops;

/* ---- The query hook: rare requests, as curl's connection filters have ----
 * query(c, what, node, out, len) answers DLOCK__QUERY_NOT_OFFERED for a
 * 'what' it does not know (setting no error), a status < 0 with the error
 * set, or as each query says. 'node' is the node asked about (0 when the
 * query has none). */
#define DLOCK__QUERY_NOT_OFFERED (-1000)
enum {
  /* How many independent nodes the client votes over (several masters, no
   * replication between them). Returns the count (> 0). */
  DLOCK__Q_NODE_COUNT = 1,
  /* The name of node 'node': out is a const char ** (valid while c is). 0. */
  DLOCK__Q_NODE_NAME,
  /* One node's view of a lock: out is a dlock__node_info. 0 or a status. */
  DLOCK__Q_NODE_INFO,
  /* One node's checks: out is a dlock_check array of 'len' bytes. Returns
   * how many entries it filled, or a status. */
  DLOCK__Q_NODE_CHECK,
  /* The warning about the deployment (dlock_client_topology_warning): out is
   * a char buffer of 'len' bytes. 1 when it wrote one, 0 none. */
  DLOCK__Q_TOPOLOGY_WARNING,
  /* The deployment's name when messages need it beside the backend's (one
   * backend, several deployments): out is a char buffer of 'len' bytes. 1
   * when it wrote one, 0 none. */
  DLOCK__Q_DEPLOYMENT,
};

typedef struct dlock__node_info {
  const char *name;      /* the lock's name */
  dlock_lock_info *info; /* a full dlock_lock_info */
} dlock__node_info;

/* ---- The required table: every backend fills every slot ---- */
struct dlock__backend_ops {
  const char *name; /* short, lower case: dlock_client_backend() */
  /* Why a hold was lost when its server could not be reached (DLOCK_LOST_UNREACHABLE),
   * in the backend's words: it names the server's technology. */
  const char *unreachable;

  /* ---- Client ---- */
  /* 1 when the options name this backend's servers without a URL (e.g. a
   * list of nodes); the core then picks this backend whatever the URL. NULL: never. */
  int (*takes_options)(const dlock_client_options *o);
  /* 'url' with every secret replaced by "***" (always NUL-terminated). */
  void (*redact)(const char *url, char *buf, size_t len);
  /* Connect: set c->be, c->server (a name for messages), c->caps (the
   * per-client DLOCK__CAP_* facts), c->command_timeout_ms, c->warnings. It
   * may set c->ops to another table of its own that offers less (a mode of
   * the URL without, say, the scheduler). 'url' is NULL when 'o' names the
   * servers another way (takes_options). On failure the core calls close(). */
  int (*open)(dlock_client *c, const dlock_client_options *o, const char *url);
  void (*close)(dlock_client *c); /* after the watchdog stopped; c->be may be NULL */
  int (*ping)(dlock_client *c);
  /* Rare requests (DLOCK__Q_*): dlock__query_none answers none. */
  int (*query)(dlock_client *c, int what, int node, void *out, size_t len);

  /* ---- Lock handles ---- */
  /* Check 'name' and set up m->be; the core has checked the generic rules
   * (and that c->caps offers m->kind). */
  int (*lock_new)(dlock_mutex *m);
  void (*lock_free)(dlock_mutex *m);
  /* Take the lock for m->token (set by the core) with the lease 'lease_ms':
   * wait_ms 0 tries once; otherwise wait until 'deadline' (INT64_MAX:
   * forever), woken by a release, ending with DLOCK_ECANCELED when
   * dlock__mutex_canceled(m) says so (the core calls wake() then). On
   * failure nothing of ours is left held, or the answer is DLOCK_EUNKNOWN
   * saying until when it may be. DLOCK_EBUSY: held by another owner. */
  int (*acquire)(dlock_mutex *m, int64_t lease_ms, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out);
  /* Wake a thread waiting in acquire() on 'm' (cancel). NULL: the backend
   * waits on m->cv with dlock__mutex_wait(), which the core wakes. */
  void (*wake)(dlock_mutex *m);
  /* Give up a hold that acquire() granted but the core cannot keep (the
   * watchdog could not start). Best effort. */
  void (*undo)(dlock_mutex *m);
  /* Release the hold of m->token. 'valid_until' is the local deadline in
   * force; 'lost' the loss the core saw. 0 released; DLOCK_ENOTHELD (the
   * hold was gone: say why); DLOCK_EUNKNOWN when that cannot be told. */
  int (*release)(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
  /* Set the lease of the hold of 'token' (m->token, copied under m->mu) to
   * 'lease_ms' from now: 0; DLOCK_ELOST with '*lost' when
   * the hold is gone; another status when it is not known (the core then
   * counts the hold as ending at the earlier deadline). '*sent' the moment
   * the request left. */
  int (*extend)(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent, dlock_lost_reason *lost);
  /* The watchdog's batch: renew each hold, giving up at 'limit'. */
  void (*renew)(dlock_client *c, dlock__renewal *r, size_t n, dlock_mono_ms limit);
  /* Is the hold of 'token' still ours on the server: 1 and '*ttl_ms' (-1: no
   * expiry; may be NULL), 0 not, or < 0. */
  int (*held)(dlock_mutex *m, const char *token, int64_t *ttl_ms);

  /* ---- Optional sub-tables (NULL: not offered) ---- */
  const dlock__admin_ops *admin;
  const dlock__guard_ops *guard;
  const dlock__pipeline_ops *pipeline;
  const dlock__latch_ops *latch;
  const dlock__sched_ops *sched;
  const struct dlock__election_ops *election; /* leader election (its epoch is a fence) */
};

/* What an election needs beyond the mutex (core/election.c). */
struct dlock__election_ops {
  /* Optional (NULL: not offered). Replace the owner_info of the hold of 'token' on m->name by 'value',
   * keeping its fence, since and lease: 0; DLOCK_ENOTHELD when 'token'
   * does not hold the lock on the server (nothing written). Safe to send
   * twice. */
  int (*proclaim)(dlock_mutex *m, const char *token, const char *value);
  /* Optional (NULL: not offered). A forced release of the mutex 'name' (an
   * election's) only while its hold's fence is 'epoch' (not 0), in one step
   * on the server: '*evicted' 1 when it was ended now, 0 when no hold or
   * another hold (a later term) has the name: nothing done. */
  int (*evict)(dlock_client *c, const char *name, uint64_t epoch, int *evicted);
};

/* The backend for 'url' (NULL: the default, the registry's first row), or
 * NULL with '*rc' and the error set: an unknown scheme lists the known ones,
 * a scheme this build leaves out names the CMake option. */
const dlock__backend_ops *dlock__backend_for(const char *url, int *rc);
/* As dlock__backend_for, unless a backend takes 'o' whatever the URL
 * (takes_options). */
const dlock__backend_ops *dlock__backend_for_options(const dlock_client_options *o, const char *url, int *rc);

/* ---- What the core offers the backends (core/mutex.c) ---- */

/* A query hook that answers none (DLOCK__QUERY_NOT_OFFERED). */
int dlock__query_none(dlock_client *c, int what, int node, void *out, size_t len);
/* Ask c's backend (query); DLOCK__QUERY_NOT_OFFERED when it has no answer. */
int dlock__query(dlock_client *c, int what, int node, void *out, size_t len);
/* ", NAME" when the backend names its deployment (DLOCK__Q_DEPLOYMENT), else
 * "": for messages such as "(the NAME backend, DEPLOYMENT)". Returns buf. */
const char *dlock__deployment_suffix(dlock_client *c, char *buf, size_t len);

/* Wait on m->cv for a wake-up (dlock__mutex_wake), a cancel, or 'until'.
 * 1 when canceled. */
int dlock__mutex_wait(dlock_mutex *m, dlock_mono_ms until);
/* The outcome of the pipelined release pending on 'm' (release_async):
 * 'rc' and its message (without the handle's context). */
void dlock__mutex_release_done(dlock_mutex *m, int rc, const char *msg);
/* Wake the thread waiting in dlock__mutex_wait() on 'm' (a grant arrived). */
void dlock__mutex_wake(dlock_mutex *m);
/* 1 when the acquire in progress on 'm' was canceled. */
int dlock__mutex_canceled(dlock_mutex *m);
/* The cancel flag as an atomic, for backends that poll it. */
const atomic_int *dlock__mutex_cancel_flag(dlock_mutex *m);
/* Finish a failing call on the handle: context in front of the detail
 * ("acquire 'orders' on SERVER: "), a copy in m->errmsg; returns 'rc'. */
int dlock__mutex_fail(dlock_mutex *m, int rc, const char *op);
/* The watchdog: look at every hold again now (a session event). */
void dlock__watchdog_poke(dlock_client *c);
/* Mark every hold of 'c' lost with 'reason' (a session ended); the
 * callbacks run on the watchdog thread. */
void dlock__client_lose_all(dlock_client *c, dlock_lost_reason reason);

#endif /* DLOCK_BACKEND_H */
