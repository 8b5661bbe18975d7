/*
 * pg.h - the PostgreSQL backend (lease table, guard table, scheduler
 * tables, optional advisory mode), as a self-contained module.
 *
 * Each function mirrors one operation of the backend seam of issue 10
 * (docs/postgres.md, "Wiring"): the seam's table of operations calls these
 * with the backend's client struct. Only src/pg/ includes <libpq-fe.h>;
 * this header does not, so callers need no libpq headers.
 *
 * All lock decisions are taken on the database's clock (clock_timestamp());
 * the local deadline (valid_until) is ours, counted from the moment the
 * acquire or renewal was sent, as for Redis. Statements are sent unnamed
 * through the extended protocol (no named prepared statements, no SET), so
 * command connections work through PgBouncer in transaction mode; only the
 * LISTEN connection needs a direct or session-pooled server.
 */
#ifndef DLOCK_PG_H
#define DLOCK_PG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* The longest lock, job or resource name the tables hold (varchar). */
#define DLOCK__PG_NAME_MAX 255
/* The longest schema name (PostgreSQL identifiers are at most 63 bytes). */
#define DLOCK__PG_SCHEMA_MAX 63

typedef struct dlock__pg dlock__pg;

typedef struct dlock__pg_options {
  int max_connections;    /* command connections in the pool; 0: 4 */
  int command_timeout_ms; /* each statement, client side; 0: 5000 */
  int connect_timeout_ms; /* 0: 5000 */
  int poll_ms;            /* waiters re-check at least this often; 0: 1000 */
  /* dlock_client_options.password: overrides the URL's, PGPASSWORD and
   * ~/.pgpass ("" for none), so that a password need not be in the URL. */
  char password[1024];
} dlock__pg_options;

/* A hold as acquire fills it in; release, renew and remaining read it. */
typedef struct dlock__pg_hold {
  char name[DLOCK__PG_NAME_MAX + 1];
  char token[DLOCK__TOKEN_HEX + 1];
  uint64_t fence; /* 0 in advisory mode (no fence) */
  int64_t lease_ms;
  dlock_mono_ms valid_until; /* local deadline; INT64_MAX in advisory mode */
  void *session;             /* advisory mode: the connection that holds it */
  int resent;                /* out: the last statement was sent twice */
  int lost;                  /* in (release): the core saw the hold lost (dlock_lost_reason) */
  /* The lock family (table mode): "" a mutex, "p" a semaphore's permit of
   * 'permits', "r" or "w" a read-write lock's side; 'shadow': the token of
   * this thread's other hold of the name ("" none): while that hold is live
   * on the server, a read goes at once (docs/rwlock.md). */
  char side[2];
  int permits;
  char shadow[DLOCK__TOKEN_HEX + 1];
} dlock__pg_hold;

/* 1 when 'url' names PostgreSQL: postgres:// or postgresql://, or a libpq
 * keyword/value string ("host=... dbname=..."). */
int dlock__pg_url_is_pg(const char *url);

/* Connect: parse 'url' (the libpq URI or keyword/value string, passed to
 * libpq unchanged except for dlock's own parameters dlock_schema=NAME and
 * mode=advisory, removed first), open one connection and check the server.
 * Schema objects are created on first use (dlock__pg_init). */
int dlock__pg_connect(const char *url, const dlock__pg_options *opts, dlock__pg **out);
void dlock__pg_close(dlock__pg *pg);
/* "postgres://user:***@127.0.0.1:5432/db" style name for messages. */
const char *dlock__pg_display(const dlock__pg *pg);
const char *dlock__pg_schema(const dlock__pg *pg);
int dlock__pg_is_advisory(const dlock__pg *pg);
/* Warnings found at run time (a LISTEN connection that gets no
 * notifications, ...); "" when none. */
const char *dlock__pg_warnings(dlock__pg *pg);

/* Capability flags for the seam. */
#define DLOCK__PG_CAP_WATCHDOG 1u /* leases that need renewing (table mode) */
#define DLOCK__PG_CAP_SESSION 2u  /* held by a session (advisory mode) */
#define DLOCK__PG_CAP_FENCE 4u    /* acquisitions carry a fence */
unsigned dlock__pg_caps(const dlock__pg *pg);

/* One round trip ("SELECT 1"). */
int dlock__pg_ping(dlock__pg *pg);
/* Create the schema, tables, sequence and functions (IF NOT EXISTS); for
 * `dlock init --url postgres://...` and first use. Without the rights:
 * DLOCK_ENOPERM saying who can run it. */
int dlock__pg_init(dlock__pg *pg);

/* Acquire 'name' for 'h' (h->token is chosen here). wait_ms: 0 try once,
 * >0 wait up to that long, <0 forever; 'cancel' (may be NULL) ends a wait
 * with DLOCK_ECANCELED when it becomes nonzero. lease_ms: the lease
 * (table mode). DLOCK_EBUSY when not acquired in time. */
int dlock__pg_acquire(dlock__pg *pg, const char *name, int64_t lease_ms, const char *owner_info, int64_t wait_ms,
                      const atomic_int *cancel, dlock__pg_hold *h);
/* The same for the hold of 'token' (32 hex: the core's token for the
 * handle; NULL: chosen here). */
int dlock__pg_acquire_as(dlock__pg *pg, const char *name, const char *token, int64_t lease_ms, const char *owner_info,
                         int64_t wait_ms, const atomic_int *cancel, dlock__pg_hold *h);
/* The same for a semaphore's permit or a read-write lock's side ('side'
 * "p", "r" or "w", with 'permits' and 'shadow' (NULL: none) as dlock__pg_hold has them;
 * "" is the mutex). DLOCK_EWRONGTYPE when the name is held as another kind,
 * DLOCK_ELIMIT when a semaphore's holders gave another limit. */
int dlock__pg_acquire_kind(dlock__pg *pg, const char *name, const char *token, const char *side, int permits,
                           const char *shadow, int64_t lease_ms, const char *owner_info, int64_t wait_ms,
                           const atomic_int *cancel, dlock__pg_hold *h);
/* Release: 0, DLOCK_ENOTHELD (the lease ran out or another owner has it),
 * DLOCK_EUNKNOWN when that cannot be told after a lost reply. */
int dlock__pg_release(dlock__pg *pg, dlock__pg_hold *h);
/* Lease mode: watch 'name' while it is held (after the acquire, before the
 * release): a notification naming it (a forced release) calls 'poke(arg)'
 * at once, from the watch thread. The first add starts the thread and the
 * LISTEN connection (bounded by 'until'). Advisory mode: nothing. */
void dlock__pg_watch_add(dlock__pg *pg, const char *name, void (*poke)(void *), void *arg, dlock_mono_ms until);
void dlock__pg_watch_remove(dlock__pg *pg, const char *name);
/* Lease mode: an observer (dlock_watch_*): 'wake(arg, what)' is called from
 * the watch thread (with a lock held: it must only note and wake) on every
 * notification that names a watched lock (DLOCK__PG_OBS_CHANGE, with
 * DLOCK__PG_OBS_FORCED for a forced release), and when the LISTEN
 * connection goes down (DLOCK__PG_OBS_DOWN: changes go unnotified) or comes
 * up again (DLOCK__PG_OBS_UP: some may have been missed meanwhile). */
typedef struct dlock__pg_obs dlock__pg_obs;
#define DLOCK__PG_OBS_CHANGE 1u
#define DLOCK__PG_OBS_FORCED 2u
#define DLOCK__PG_OBS_DOWN 4u
#define DLOCK__PG_OBS_UP 8u
int dlock__pg_obs_open(dlock__pg *pg, void (*wake)(void *arg, unsigned what), void *arg, dlock__pg_obs **out);
/* Watch 'name' too ('prefix': every name that starts with it). Waits
 * (bounded) for the LISTEN connection: 0 when it is up, 1 when changes
 * cannot be notified (advisory mode, a transaction-mode pooler, no
 * connection yet): the caller then reads again by itself. */
int dlock__pg_obs_add(dlock__pg_obs *o, const char *name, int prefix);
void dlock__pg_obs_close(dlock__pg_obs *o);

/* One renewal of a batch: in 'h', 'lease_ms'; out 'status' (0 renewed and
 * h->valid_until moved; DLOCK_ELOST with 'lost' EXPIRED or TAKEN; another
 * error when the statement failed, the hold is then unchanged). */
typedef struct dlock__pg_renewal {
  dlock__pg_hold *h;
  int64_t lease_ms;
  int status;
  dlock_lost_reason lost;
} dlock__pg_renewal;
/* Renew 'n' holds with ONE statement, giving up at 'limit' (0: the command
 * timeout). Returns 0 when the statement ran (see each status), else the
 * statement's error (all statuses set to it). */
int dlock__pg_renew(dlock__pg *pg, dlock__pg_renewal *r, size_t n, dlock_mono_ms limit);

/* Is 'h' still ours on the server: 0 and '*remaining_ms' (database clock),
 * DLOCK_ELOST with '*lost' set when not. */
int dlock__pg_remaining(dlock__pg *pg, const dlock__pg_hold *h, int64_t *remaining_ms, dlock_lost_reason *lost);

/* What the server knows of 'name' (struct from dlock_lock_info_init()). */
int dlock__pg_info(dlock__pg *pg, const char *name, dlock_lock_info *out);
/* dlock_lock_holders for a semaphore or read-write lock (the holds table). */
int dlock__pg_holders(dlock__pg *pg, const char *name, void (*fn)(const dlock_holder *, void *), void *arg);
/* fn(name, arg) for each held lock whose name matches 'pattern' (a glob:
 * '*' and '?'; NULL: all). */
int dlock__pg_list(dlock__pg *pg, const char *pattern, void (*fn)(const char *name, void *arg), void *arg);
/* Free 'name' whatever its owner; '*was_held' 1 if a live hold was ended.
 * Never sent twice: DLOCK_EUNKNOWN when its reply was lost. */
int dlock__pg_force_release(dlock__pg *pg, const char *name, int *was_held);
/* As dlock__pg_force_release(), with 'fence' not 0: only the mutex hold of
 * that fence (an election's term), none of a family's holds. */
int dlock__pg_force_release_fence(dlock__pg *pg, const char *name, uint64_t fence, int *was_held);

/* The guard: admit 'fence' for 'resource' if no higher one was seen
 * (DLOCK_ESTALE otherwise). */
int dlock__pg_guard_check(dlock__pg *pg, const char *resource, uint64_t fence);
/* The same; when stale, '*highest' (may be NULL) is the fence admitted before. */
int dlock__pg_guard_check_highest(dlock__pg *pg, const char *resource, uint64_t fence, uint64_t *highest);

/* The scheduler. Claim tick 'tick_unix_ms' of 'job' for the run 'run_token'
 * (32 hex) on 'node', taking the job lock for 'lock_ms'. '*outcome':
 * 1 yours ('*fence', '*start_unix_ms' set), 0 the tick (or a later one) is
 * claimed by another run, 2 the previous run still holds the job lock
 * (skip), -1 the tick lies ahead of the database clock by more than
 * 'tolerance_ms' (this node's clock is wrong; '*skew_ms' says by how much).
 * Safe to run twice with the same run token. */
int dlock__pg_sched_claim(dlock__pg *pg, const char *job, int64_t tick_unix_ms, const char *run_token, const char *node,
                          int64_t lock_ms, int64_t tolerance_ms, int *outcome, uint64_t *fence, int64_t *start_unix_ms,
                          int64_t *skew_ms);
/* End the run: release the job lock (if still ours) and record it in the
 * history (kept to 'history_len' entries). Safe to run twice. */
int dlock__pg_sched_finish(dlock__pg *pg, const char *job, const char *run_token, const dlock_run_record *rec,
                           int history_len);
/* Up to 'max' most recent records of 'job', newest first; returns how many. */
int dlock__pg_sched_history(dlock__pg *pg, const char *job, dlock_run_record *out, int max);

/* Delete the rows that ended more than 'older_than_ms' ago and that no live
 * hold or waiter needs (pg_sql.c, prune()): at most 'limit' per table.
 * '*pruned' (may be NULL): the rows deleted. Advisory mode: nothing to
 * prune (DLOCK_EINVAL). */
int dlock__pg_prune(dlock__pg *pg, int64_t older_than_ms, int limit, int64_t *pruned);

/* `dlock doctor` checks: read-only server (standby or
 * default_transaction_read_only), the rights on dlock's schema,
 * synchronous_commit, asynchronous standbys (pg_stat_replication), the
 * database clock against ours. One line per finding into 'report';
 * returns how many problems were found (0: all fine) or a DLOCK_E* status
 * when the server could not be asked. */
int dlock__pg_doctor(dlock__pg *pg, char *report, size_t len);

/* Advisory mode's 64-bit key for 'name': the first 8 bytes of SHA-256 of
 * the name, big-endian, as a signed bigint. */
int64_t dlock__pg_advisory_key(const char *name);
/* Copy 'url' with any password replaced by "***" into 'out'. */
void dlock__pg_mask_url(const char *url, char *out, size_t len);

/* This backend's table of operations (core/backend.c's scheme registry points to it). */
extern const dlock__backend_ops dlock__pg_ops;

#endif /* DLOCK_PG_H */
