/*
 * internal.h - the backend-neutral core's declarations, shared by every
 * source file of libdlock (the backends include it too).
 *
 * Layers, bottom up: errors/clock/token/validate (no I/O) -> the backend seam
 * (backend.h: one table of operations per backend) -> client, mutex,
 * watchdog (core/) and the scheduler (sched/). Each backend adds its own
 * private header (src/<backend>/).
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "dlock.h"

/* ---- Errors (errors.c) ---- */

/* Record 'status' and a formatted detail as this thread's last error;
 * returns 'status' so that callers can `return dlock__error(...)`. An
 * argument may be dlock_last_error() itself (formatted apart, then copied). */
int dlock__error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dlock__error_clear(void);
/* Prepend context ("acquire 'orders:1' on 127.0.0.1:6379: ") to the last error. */
void dlock__error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* dlock_lost_reason_str(), in the words of the backend of 'c' where the
 * reason is about its server (the ops' 'unreachable'). */
const char *dlock__lost_reason_on(const dlock_client *c, dlock_lost_reason reason);

/* ---- Versions and the ABI rule of caller-allocated structs (abi.c) ---- */

/* Where the first layout of a struct ends: the size a caller built against
 * the oldest dlock.h of this major version passes. Fields added later go
 * after it; these stay as they are. */
#define DLOCK__END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define DLOCK__CLIENT_OPTIONS_V1 DLOCK__END_OF(dlock_client_options, max_connections)
#define DLOCK__MUTEX_OPTIONS_V1 DLOCK__END_OF(dlock_mutex_options, owner_info)
#define DLOCK__LOCK_INFO_V1 DLOCK__END_OF(dlock_lock_info, owner_info)
#define DLOCK__SCHED_OPTIONS_V1 DLOCK__END_OF(dlock_sched_options, on_event_arg)
#define DLOCK__JOB_OPTIONS_V1 DLOCK__END_OF(dlock_job_options, history_len)
#define DLOCK__RUN_RECORD_V1 DLOCK__END_OF(dlock_run_record, outcome)
/* A history entry's outcome as the backend keeps it ("[manual] ok") split
 * into outcome and trigger (sched/sched.c). */
void dlock__outcome_decode(dlock_run_record *rec);

/* Check the struct_size (the first member) of the caller's struct 'given'
 * of type 'type' ("dlock_lock_info"): 0 when it lies in [min, full], else
 * DLOCK_EINVAL saying to call <type>_init(). */
int dlock__struct_check(const void *given, size_t min, size_t full, const char *type);
/* Take the caller's options 'src' (may be NULL) into 'dst', which holds the
 * defaults of the full layout ('full' bytes): the first struct_size bytes of
 * 'src' are copied over them. 0, or DLOCK_EINVAL from dlock__struct_check(). */
int dlock__options_in(void *dst, size_t full, const void *src, size_t min, const char *type);

/* ---- Clock and sleep (clock.c) ---- */

/* The same monotonic clock in nanoseconds (for spans too short for ms). */
int64_t dlock__mono_ns(void);
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
/* A fencing token as a server sends it: decimal digits, no sign, no
 * leading zero, at most 2^63-1 (what dlock issues). 0 on success, -1 (no
 * error recorded) otherwise: no rounding, no silent overflow. */
int dlock__parse_fence(const char *s, size_t len, uint64_t *out);

/* ---- Client (client.c) ---- */

typedef struct dlock__watchdog dlock__watchdog;
typedef struct dlock__metrics dlock__metrics;

struct dlock_client {
  const dlock__backend_ops *ops;
  void *be;         /* the backend's state */
  unsigned caps;    /* DLOCK__CAP_* of this client */
  char server[300]; /* display name of the server(s), for messages */
  int command_timeout_ms;
  char *prefix; /* "" when none; ends in ':' otherwise */
  size_t prefix_len;
  char id[17]; /* random; names this client (wake-up channels, lock nodes) */
  atomic_int closing;
  dlock__watchdog *watchdog; /* started on first hold */
  pthread_mutex_t lazy_mu;   /* guards starting lazy threads (watchdog, a backend's) */
  char warnings[1024];       /* dlock_client_warnings(): set once at connect */
  dlock__metrics *metrics;   /* metrics.c: counters, the event queue */
};

/* ---- Lock handles (mutex.c) ---- */

/* The kind of lock a handle takes. Every kind is a dlock_mutex inside (the
 * public dlock_semaphore and dlock_rwlock handles point to one), so that
 * leases, the watchdog, waits, cancellation and loss are the same code;
 * the backend's operations look at m->kind. */
typedef enum dlock__kind {
  DLOCK__KIND_MUTEX,
  DLOCK__KIND_SEMAPHORE, /* one of m->permits permits */
  DLOCK__KIND_READ,      /* the shared side of a read-write lock */
  DLOCK__KIND_WRITE      /* its exclusive side */
} dlock__kind;

enum { DLOCK__REL_NONE, DLOCK__REL_PENDING, DLOCK__REL_DONE };

/* A renewal or extend of one hold that is in flight (dlock__lease_op_begin):
 * the caller's own, on its stack, or one of the watchdog's batch. */
typedef struct dlock__lease_op {
  dlock_mono_ms until;          /* the deadline it sets if it ran, counted from before it left */
  dlock_mono_ms others;         /* the earliest 'until' of the calls in flight with it */
  struct dlock__lease_op *next; /* the handle's list */
} dlock__lease_op;

struct dlock_mutex {
  dlock_client *client;
  char *name;
  dlock__kind kind;
  int permits;  /* semaphore: the limit given to _new() */
  int election; /* an election's mutex (core/election.c): a backend may keep it in another layout */
  void *be;     /* the backend's state for this handle */
  dlock_mutex_options opts;
  char *owner_info;

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;  /* hold state changes, wake-ups */
  int busy;           /* a thread holds or is acquiring through this handle */
  pthread_t owner;
  unsigned hold_count;
  char token[DLOCK__TOKEN_HEX + 1];
  uint64_t fence;
  int64_t lease_ms; /* lease in force (fixed or watchdog) */
  int watchdog_mode;
  dlock_mono_ms acquired_at;
  dlock_mono_ms valid_until;
  int renew_tried;            /* the watchdog sent a renewal that has not succeeded (yet) */
  dlock__lease_op *lease_ops; /* renewals and extends in flight */
  int64_t claim_ms;           /* dlock__grant.claim_ms: renew once to lease_ms, even a fixed lease */
  atomic_int lost;            /* dlock_lost_reason; written under mu, read anywhere */
  int lost_fd;                /* eventfd, -1 until asked for */

  /* A pipelined release (dlock_mutex_release_async): its reply is awaited
   * (PENDING) or its outcome not yet read (DONE). */
  int rel_state; /* DLOCK__REL_NONE, _PENDING, _DONE */
  int rel_rc;
  char rel_msg[512];

  /* Waiting. */
  int woken;           /* a wake-up (grant message, release) arrived */
  unsigned cancel_gen; /* bumped by dlock_mutex_cancel(): waits begun before end */
  unsigned wait_gen;   /* cancel_gen when the thread now acquiring began */
  atomic_int canceled; /* the acquire in progress was canceled (for backends that poll) */

  /* Watchdog membership (guarded by the watchdog's mutex): a place in its
   * two heaps (renewals, deadlines; SIZE_MAX: not in it) and their keys. */
  size_t wd_slot[2];
  dlock_mono_ms wd_key[2];
  int64_t wd_early; /* renewed up to this much before wd_next_renew */
  int wd_registered;
  int wd_in_callback;
  dlock_mono_ms wd_next_renew;

  char errmsg[512];

  /* Metrics (metrics.c): a hold counted in the gauges, since when. */
  atomic_int mx_held;
  int64_t mx_since_ns;
  /* Its series by name: NULL when metrics_names does not name it (set at
   * _new), then the entry, made at its first count (metrics.c). */
  _Atomic(void *) mx_named;
};

/* A handle of any kind ('permits' for a semaphore, else 1); the mutex's
 * checks of name and options, and the backend's lock_new(). A kind the
 * backend does not offer (caps) is a clear error. */
int dlock__lock_new(dlock_mutex **out, dlock_client *c, const char *name, dlock__kind kind, int permits,
                    const dlock_mutex_options *opts);
const char *dlock__kind_name(dlock__kind kind);

/* ---- Read-write locks (rwlock.c) ---- */

/* A read handle's acquire: the token of a live hold this thread has on the
 * same name and client (its write side first, else another read handle),
 * into 'token' (DLOCK__TOKEN_HEX + 1 bytes; "" none). 1 when there is one:
 * the backend then grants the read at once (no wait behind its own hold). */
int dlock__rw_own_token(const dlock_mutex *m, char *token);
/* Before a write handle's acquire: DLOCK_EUPGRADE when this thread holds the
 * read side of the name (the upgrade deadlocks), else 0. */
int dlock__rw_check_upgrade(dlock_mutex *m);
/* dlock_mutex_free() of a read or write handle: take it off the list first. */
void dlock__rw_forget(dlock_mutex *m);
/* ---- Countdown latches (latch.c) ---- */

struct dlock_latch {
  dlock_client *client;
  char *name;
  void *be;           /* the backend's state */
  pthread_mutex_t mu; /* guards what follows */
  int waiting;        /* a thread is in dlock_latch_wait() on this handle */
  char errmsg[512];
};

/* ---- Loss (mutex.c) ---- */

/* Mark 'm' lost (once): set reason, signal the fd. Caller holds m->mu. */
void dlock__mutex_mark_lost(dlock_mutex *m, dlock_lost_reason reason);
/* The loss rule (docs/design.md): a hold whose valid_until has passed is
 * lost, whoever looks first. Marks it if so; returns the reason in force
 * (DLOCK_LOST_NONE while the hold is valid). Caller holds m->mu. */
dlock_lost_reason dlock__mutex_check_deadline(dlock_mutex *m, dlock_mono_ms now);
/* A renewal succeeded, its reply handled at 'now', with the new deadline
 * 'valid_until': 1 when it counts (valid_until moves), 0 when the hold was
 * lost before (the deadline passed first). Caller holds m->mu. */
int dlock__mutex_renewed(dlock_mutex *m, dlock_mono_ms valid_until, dlock_mono_ms now);
/* Renewals (the watchdog's) and extends (the caller's) of one hold can be in
 * flight at once on different connections: the server may run them in either
 * order, whatever order their replies come in, and the last to run sets the
 * expiry. So a call that succeeds may set the deadline only to the earliest
 * 'until' among itself and the calls in flight with it at any moment of its
 * flight. begin: before the call leaves ('until' from a time before it
 * leaves); as the call may run before its answer comes, it also brings
 * valid_until down to 'until' when that is earlier (1 when it did). end:
 * after its answer; returns min(until, that earliest). Both under m->mu;
 * every begun op is ended. */
int dlock__lease_op_begin(dlock_mutex *m, dlock__lease_op *op, dlock_mono_ms until);
dlock_mono_ms dlock__lease_op_end(dlock_mutex *m, dlock__lease_op *op, dlock_mono_ms until);
/* Local validity deadline for a lease that began at 'start'. */
dlock_mono_ms dlock__valid_until(dlock_mono_ms start, int64_t lease_ms);

/* ---- Watchdog (watchdog.c) ---- */

int dlock__watchdog_add(dlock_client *c, dlock_mutex *m);
/* Remove 'm'; waits for a lost-callback on 'm' to finish (unless called from it). */
void dlock__watchdog_remove(dlock_client *c, dlock_mutex *m);
void dlock__watchdog_stop(dlock_client *c);
/* After an extend that may have shortened the lease ('lease_ms' from 'start'):
 * make the watchdog look at 'm' again in time. */
void dlock__watchdog_rearm(dlock_client *c, dlock_mutex *m, dlock_mono_ms start, int64_t lease_ms);

/* ---- Watches (watch.c) ---- */

/* How often a watch wakes by itself where changes go unnotified. */
#define DLOCK__WATCH_BOUND_MS 2000
struct dlock_watch {
  dlock_client *client;
  void *be;           /* the backend's state */
  int wake[2];        /* self-pipe: readable while a wake-up waits */
  atomic_int bounded; /* some change goes unnotified: wake every DLOCK__WATCH_BOUND_MS */
};
/* A watched lock may have changed (any thread; async-signal-safe); 'what'
 * 1, or DLOCK_WATCH_FORCED | 1 for a forced release. */
void dlock__watch_wake(dlock_watch *w, unsigned what);

/* ---- Metrics and events (metrics.c, docs/metrics.md) ---- */

/* Always on: relaxed atomic counters on the hot path, no lock; the event
 * queue only when the client has an on_event hook. */
int dlock__metrics_new(dlock_client *c, const dlock_client_options *o);
/* Deliver the events queued, stop the event thread (dlock_client_free). */
void dlock__metrics_stop(dlock_client *c);
void dlock__metrics_free(dlock_client *c);
/* An acquire begins (returns its start, for _acquire_end) and ends:
 * 'how' 1 a reentrant hold, 2 a hand-off. */
/* A new handle: find its series by name when metrics_names allows it. */
void dlock__metrics_lock_new(dlock_mutex *m);
int64_t dlock__metrics_acquire_begin(dlock_mutex *m);
void dlock__metrics_acquire_end(dlock_mutex *m, int64_t began, int64_t wait_ms, int rc, int how);
/* A hold begins (acquired) and ends, released (reason NONE) or lost, once
 * whichever comes first. Either may be called under m->mu. */
void dlock__metrics_hold_begin(dlock_mutex *m);
void dlock__metrics_hold_end(dlock_mutex *m, dlock_lost_reason reason);
/* A release's outcome ('pipelined': of dlock_mutex_release_async); the
 * RELEASED event of a last hold. */
void dlock__metrics_release_outcome(dlock_mutex *m, int rc);
void dlock__metrics_released(dlock_mutex *m, int rc);
void dlock__metrics_unknown(dlock_client *c, const char *op);
/* The watchdog: a batch of 'n' renewals took 'ns'; one renewal's outcome
 * (status as dlock__renewal's; 'left_ms' of the hold's deadline when it was
 * renewed, 'lease_ms' the lease it renewed). */
void dlock__metrics_renew_batch(dlock_client *c, size_t n, int64_t ns);
void dlock__metrics_renewed(dlock_mutex *m, int status, int64_t left_ms, int64_t lease_ms);
/* The scheduler: a run starts and ends, a tick's other outcomes
 * (dlock_sched_event_kind). */
void dlock__metrics_job_started(dlock_client *c, const char *job, int64_t tick, uint64_t fence);
void dlock__metrics_job_finished(dlock_client *c, const char *job, int64_t tick, uint64_t fence, int status,
                                 int64_t duration_ms);
void dlock__metrics_job_other(dlock_client *c, const char *job, int kind);

#endif /* DLOCK_INTERNAL_H */
