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

/* Capabilities. */
#define DLOCK__CAP_LEASE 1u    /* holds are leases the watchdog renews */
#define DLOCK__CAP_SESSION 2u  /* holds live as long as a session (or a transaction): the
                                  watchdog's renew() only reads the session's validity */
#define DLOCK__CAP_FENCE 4u    /* every hold carries a fence (all but advisory mode) */
#define DLOCK__CAP_SCHED 8u    /* the scheduler's claims */
#define DLOCK__CAP_GUARD 16u   /* dlock_guard_check */
#define DLOCK__CAP_SEMAPHORE 32u /* handles of kind DLOCK__KIND_SEMAPHORE (internal.h) */
#define DLOCK__CAP_RWLOCK 64u  /* handles of kind DLOCK__KIND_READ and _WRITE */

/* What an acquire answers on success. */
typedef struct dlock__grant {
  uint64_t fence;            /* 0 only without DLOCK__CAP_FENCE */
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
  int64_t tick_ms;           /* the tick (wall ms); fixed delay: 0, the backend names the tick */
  int64_t delay_ms;          /* fixed delay: the delay after the last end; else 0 */
  const char *token;         /* the run's random token (32 hex) */
  const char *node;          /* this node's name */
  int64_t at_most_ms;        /* lock_at_most_for */
  int64_t at_least_ms;       /* lock_at_least_for */
  int allow_overlap;
  int history_len;
  int64_t ahead_ms;          /* refuse a tick this far ahead of the server's clock */
  /* out */
  int outcome;               /* DLOCK__CLAIM_* */
  uint64_t fence;            /* YOURS */
  int64_t start_ms;          /* YOURS: the server's clock at the claim */
  int64_t claimed_tick_ms;   /* YOURS with a fixed delay: the tick claimed */
  int64_t server_now_ms;     /* AHEAD: the server's clock */
  int64_t wait_ms;           /* WAIT: look again after this long */
  char by[128];              /* TAKEN, BUSY: the node that has it */
  int maybe_ran;             /* after a failure: the claim may hold the job lock (undo it) */
} dlock__claim;

enum {
  DLOCK__CLAIM_YOURS = 1,
  DLOCK__CLAIM_TAKEN,        /* this tick (or a later one) was claimed by another run */
  DLOCK__CLAIM_BUSY,         /* the previous run still holds the job lock */
  DLOCK__CLAIM_AHEAD,        /* the tick lies ahead of the server's clock: this host's clock is wrong */
  DLOCK__CLAIM_WAIT          /* fixed delay: not due yet */
};

struct dlock__backend_ops {
  const char *name;          /* short, lower case: dlock_client_backend() */
  unsigned caps;             /* DLOCK__CAP_*; a backend may refine it per client (caps_of) */
  /* Why a hold was lost when its server could not be reached (DLOCK_LOST_UNREACHABLE),
   * in the backend's words: it names the server's technology. */
  const char *unreachable;

  /* ---- Client ---- */
  /* Optional: 1 when the options name this backend's servers without a URL
   * (e.g. a list of nodes); the core then picks this backend whatever the URL. */
  int (*takes_options)(const dlock_client_options *o);
  /* 'url' with every secret replaced by "***" (always NUL-terminated). */
  void (*redact)(const char *url, char *buf, size_t len);
  /* Connect: set c->be, c->server (a name for messages), c->command_timeout_ms,
   * c->warnings. 'url' is NULL when 'o' names the servers another way
   * (Redlock's redlock_urls). On failure the core calls close(). */
  int (*open)(dlock_client *c, const dlock_client_options *o, const char *url);
  void (*close)(dlock_client *c);    /* after the watchdog stopped; c->be may be NULL */
  unsigned (*caps_of)(dlock_client *c); /* optional: caps for this client */
  int (*ping)(dlock_client *c);
  int (*setup)(dlock_client *c);     /* optional: create what the backend needs (schema, tables) */
  /* Optional: dlock_client_prune (delete what ended 'older_than_ms' ago;
   * '*pruned' the rows deleted). None: nothing to prune. */
  int (*prune)(dlock_client *c, int64_t older_than_ms, int64_t *pruned);
  int (*check)(dlock_client *c, dlock_check *out, int max); /* optional: dlock_client_check */
  int (*topology_warning)(dlock_client *c, char *buf, size_t len); /* optional */
  /* Optional: several independent servers (Redlock). */
  int (*node_count)(const dlock_client *c);
  const char *(*node_name)(const dlock_client *c, int i);
  int (*info_node)(dlock_client *c, const char *name, int i, dlock_lock_info *out);
  int (*check_node)(dlock_client *c, int i, dlock_check *out, int max);

  /* ---- Lock handles ---- */
  /* Check 'name' and set up m->be; the core has checked the generic rules. */
  int (*lock_new)(dlock_mutex *m);
  void (*lock_free)(dlock_mutex *m);
  /* Take the lock for m->token (set by the core) with the lease 'lease_ms':
   * wait_ms 0 tries once; otherwise wait until 'deadline' (INT64_MAX:
   * forever), woken by a release, ending with DLOCK_ECANCELED when
   * dlock__mutex_canceled(m) says so (the core calls wake() then). On
   * failure nothing of ours is left held, or the answer is DLOCK_EUNKNOWN
   * saying until when it may be. DLOCK_EBUSY: held by another owner. */
  int (*acquire)(dlock_mutex *m, int64_t lease_ms, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out);
  /* Wake a thread waiting in acquire() on 'm' (cancel). Optional: a backend
   * that waits on m->cv with dlock__mutex_wait() needs none. */
  void (*wake)(dlock_mutex *m);
  /* Give up a hold that acquire() granted but the core cannot keep (the
   * watchdog could not start). Best effort. */
  void (*undo)(dlock_mutex *m);
  /* Release the hold of m->token. 'valid_until' is the local deadline in
   * force; 'lost' the loss the core saw. 0 released; DLOCK_ENOTHELD (the
   * hold was gone: say why); DLOCK_EUNKNOWN when that cannot be told. */
  int (*release)(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
  /* Optional: send the release of m->token without waiting for its reply.
   * 0 when sent: the outcome comes later through dlock__mutex_release_done()
   * (as release() would answer, with its message); a status when not sent
   * (nothing pending then). */
  int (*release_async)(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
  /* With release_async: read replies until the outcome for 'm' has come. */
  void (*release_collect)(dlock_mutex *m);
  /* Set the lease of the hold of 'token' (m->token, copied under m->mu) to
   * 'lease_ms' from now: 0; DLOCK_ELOST with '*lost' when
   * the hold is gone; another status when it is not known (the core then
   * counts the hold as ending at the earlier deadline). '*sent' the moment
   * the request left. */
  int (*extend)(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                dlock_lost_reason *lost);
  /* The watchdog's batch: renew each hold, giving up at 'limit'. */
  void (*renew)(dlock_client *c, dlock__renewal *r, size_t n, dlock_mono_ms limit);
  /* Is the hold of 'token' still ours on the server: 1 and '*ttl_ms' (-1: no
   * expiry; may be NULL), 0 not, or < 0. */
  int (*held)(dlock_mutex *m, const char *token, int64_t *ttl_ms);

  /* ---- Admin ---- */
  int (*info)(dlock_client *c, const char *name, dlock_lock_info *out);
  int (*list)(dlock_client *c, const char *pattern, void (*fn)(const char *name, void *arg), void *arg);
  int (*force_release)(dlock_client *c, const char *name, unsigned flags, int *was_held);
  int (*guard_check)(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest);

  /* ---- Countdown latches (optional: NULL where not offered; the core
   * then answers a clear error). l->be is the backend's state. ---- */
  int (*latch_new)(dlock_latch *l);   /* check the name, set up l->be (no I/O) */
  void (*latch_free)(dlock_latch *l);
  /* Start at 'count' expiring 'expire_ms' from now; DLOCK_EBUSY while counting. */
  int (*latch_set)(dlock_latch *l, int64_t count, int64_t expire_ms);
  /* Count down once ('*left' the count after); DLOCK_ENOLATCH; never resent. */
  int (*latch_count_down)(dlock_latch *l, int64_t *left);
  int (*latch_get)(dlock_latch *l, int64_t *count, int64_t *ttl_ms); /* DLOCK_ENOLATCH when absent;
                                                                         ttl_ms may be NULL */
  /* The names with a latch, as list() gives the held locks' (optional). */
  int (*latch_list)(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
  /* Until zero (0), 'deadline' (DLOCK_EBUSY), absent (DLOCK_ENOLATCH) or a
   * cancel (DLOCK_ECANCELED): woken by the backend's notification, and
   * re-checking at least every 2 s so that a lost one strands no waiter. */
  int (*latch_wait)(dlock_latch *l, int64_t wait_ms, dlock_mono_ms deadline);
  void (*latch_cancel)(dlock_latch *l); /* end a latch_wait() in progress */

  /* ---- Scheduler ---- */
  /* Claim 'cl' (see dlock__claim). Safe to send twice with the same token. */
  int (*sched_claim)(dlock_client *c, dlock__claim *cl);
  /* End the run of 'cl' recorded as 'rec' (a full dlock_run_record; its
   * duration_ms as measured here, which a backend may replace by the
   * server's measure): release the job lock (kept for at_least_ms after the
   * start) and append to the history. '*lock_was_ours' 0 when the run
   * outlived its job lock. Sent twice only where that is safe. */
  int (*sched_finish)(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours);
  /* After a claim or finish whose outcome is unknown: free the job lock if it holds 'cl->token'. */
  void (*sched_undo)(dlock_client *c, const dlock__claim *cl);
  /* Up to 'max' newest records into 'out' (full records), newest first;
   * returns how many. */
  int (*sched_history)(dlock_client *c, const char *job, dlock_run_record *out, int max);

  /* ---- Leader election (optional: NULL where not offered; core/election.c) ---- */
  const struct dlock__election_ops *election;
};

/* What an election needs beyond the mutex (core/election.c). */
struct dlock__election_ops {
  /* Replace the owner_info of the hold of 'token' on m->name by 'value',
   * keeping its fence, since and lease: 0; DLOCK_ENOTHELD when 'token'
   * does not hold the lock on the server (nothing written). Safe to send
   * twice. */
  int (*proclaim)(dlock_mutex *m, const char *token, const char *value);
};

/* The backend for 'url' (NULL: the default, the registry's first row), or
 * NULL with '*rc' and the error set: an unknown scheme lists the known ones,
 * a scheme this build leaves out names the CMake option. */
const dlock__backend_ops *dlock__backend_for(const char *url, int *rc);
/* As dlock__backend_for, unless a backend takes 'o' whatever the URL
 * (takes_options). */
const dlock__backend_ops *dlock__backend_for_options(const dlock_client_options *o, const char *url, int *rc);

/* ---- What the core offers the backends (core/mutex.c) ---- */

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
