/*
 * pg_internal.h - what the PostgreSQL backend's files share: the client
 * struct, the pool, one statement with a deadline, the SQL texts. Includes
 * <libpq-fe.h>; only the files in src/pg/ include it.
 */
#ifndef DLOCK_PG_INTERNAL_H
#define DLOCK_PG_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>

#include <libpq-fe.h>

#include "pg/pg.h"

#define DLOCK__PG_POOL_MAX 16
#define DLOCK__PG_RING 64

enum {
  DLOCK__PG_SQL_ACQUIRE,
  DLOCK__PG_SQL_WAITER_ADD,
  DLOCK__PG_SQL_WAITER_DEL,
  DLOCK__PG_SQL_RELEASE,
  DLOCK__PG_SQL_RENEW,
  DLOCK__PG_SQL_REMAINING,
  DLOCK__PG_SQL_INFO,
  DLOCK__PG_SQL_LIST,
  DLOCK__PG_SQL_FORCE,
  DLOCK__PG_SQL_GUARD,
  DLOCK__PG_SQL_CLAIM,
  DLOCK__PG_SQL_FINISH,
  DLOCK__PG_SQL_HISTORY,
  DLOCK__PG_SQL_INIT,
  DLOCK__PG_SQL_FAM_ACQUIRE,
  DLOCK__PG_SQL_FAM_RELEASE,
  DLOCK__PG_SQL_FAM_INFO,
  DLOCK__PG_SQL_PRUNE,
  DLOCK__PG_SQL_FAM_HOLDERS,
  DLOCK__PG_SQL_COUNT
};

/* Advisory mode: a hold's connection. While it holds, a transaction is
 * open on it, and the lock is a transaction-level advisory lock of that
 * transaction (which every pooler keeps on one server session). */
typedef struct dlock__pg_hconn {
  PGconn *conn;
} dlock__pg_hconn;

struct dlock__pg {
  char display[400]; /* no password */
  char schema[DLOCK__PG_SCHEMA_MAX + 1];
  char channel[80]; /* NOTIFY channel: "dlock.<schema>" */
  char *conninfo;   /* the URL without dlock's parameters */
  int advisory;
  int parse_rc;
  dlock__pg_options opts;
  char *sql[DLOCK__PG_SQL_COUNT];
  atomic_int inited_flag; /* dlock__pg_init() succeeded */

  pthread_mutex_t mu; /* the pool */
  pthread_cond_t cv;
  PGconn *idle[DLOCK__PG_POOL_MAX];
  int nidle;
  int nopen;
  /* Advisory mode: hold connections whose lock was released, for the next
   * acquire (at most opts.max_connections). */
  dlock__pg_hconn *hidle[DLOCK__PG_POOL_MAX];
  int nhidle;

  /* The LISTEN connection and the notifications it received. */
  pthread_mutex_t ln_mu;
  pthread_cond_t ln_cv;
  PGconn *listen_conn;
  int ln_state;    /* 0 not started, 1 listening, -1 unusable (polling only) */
  int ln_reader;   /* a thread is reading the socket */
  int ln_starting; /* a thread is opening it (without ln_mu: connect, LISTEN, the probe) */
  /* A start cut short by its waiter's deadline or cancel once connected:
   * the connection, kept for the next start to go on with, and where it
   * was (1 LISTEN sent, 2 the probe sent, ln_probe, heard by ln_probe_until). */
  PGconn *ln_pend;
  int ln_phase;
  char ln_probe[64];
  dlock_mono_ms ln_probe_until;
  dlock_mono_ms ln_retry_at;
  uint64_t ln_gen; /* notifications received so far */
  char ln_ring[DLOCK__PG_RING][DLOCK__PG_NAME_MAX + DLOCK__TOKEN_HEX + 4];
  char warnings[512];
  char prune_warning[1024]; /* the release's last prune failed (under ln_mu); "" none */
  /* The key of the shared advisory lock the LISTEN connection holds while
   * it is up (class DLOCK__PG_LIVE_CLASS): waiter rows name it, so that
   * the server sees a waiter die with its process (pg_sql.c, WAITER_LIVE).
   * Random, 1..2^31-1; fixed for the client. */
  int32_t ln_key;
  int ln_keyed; /* the LISTEN connection holds it (with ln_state 1) */
  /* The holders' watch (pg_lock.c, dlock__pg_watch_*): while lease-mode
   * holds are held, a thread reads the LISTEN connection and calls hw_poke
   * on a notification that names one of them (a forced release notifies
   * the name). Under ln_mu; hw_names a multiset of the names held. */
  pthread_t hw_thread;
  int hw_started;
  atomic_int hw_stop;
  void (*hw_poke)(void *arg);
  void *hw_arg;
  char (*hw_names)[DLOCK__PG_NAME_MAX + 1];
  size_t hw_n, hw_cap;
  /* The schedulers' watches of their jobs' states (pg_lock.c,
   * dlock__pg_job_watch_add), woken by the same thread. Under ln_mu. */
  struct dlock__pg_jw *jw;
  /* The observers (dlock_watch_*, pg_lock.c dlock__pg_obs_*), told by the
   * same thread of every notification naming what they watch. Under ln_mu. */
  dlock__pg_obs *obs;
  /* When the last opportunistic prune ran (0: never). */
  atomic_llong pruned_at;
};

/* The class (first key) of the waiters' liveness locks: "dlkw". */
#define DLOCK__PG_LIVE_CLASS 1684826999

int dlock__pg_open(dlock__pg *pg, PGconn **out);
void dlock__pg_watch_stop(dlock__pg *pg); /* pg_lock.c: end the holders' watch (at close) */
/* The same, given up at 'limit' (0: none) when that comes first. */
int dlock__pg_open_until(dlock__pg *pg, dlock_mono_ms limit, PGconn **out);
/* The same, given up also when '*cancel' is set (DLOCK_ECANCELED). */
int dlock__pg_open_cancel(dlock__pg *pg, dlock_mono_ms limit, const atomic_int *cancel, PGconn **out);
int dlock__pg_get(dlock__pg *pg, dlock_mono_ms deadline, PGconn **out);
void dlock__pg_put(dlock__pg *pg, PGconn *conn, int broken);
/* 1 when an idle connection was closed by the server (no round trip). */
int dlock__pg_idle_closed(PGconn *conn);
int dlock__pg_result_error(dlock__pg *pg, const PGresult *res, PGconn *conn);
/* One statement on 'conn' ('n' < 0: a simple query, several statements). */
int dlock__pg_exec_on(dlock__pg *pg, PGconn *conn, const char *sql, int n, const char *const *vals,
                      dlock_mono_ms deadline, PGresult **out, int *sent);
/* One statement on a pooled connection, by 'limit' (0: the command
 * timeout). 'twice_safe': sent once more on a fresh connection when the
 * connection broke after sending (*resent = 1). '*maybe_ran': the call
 * failed after the statement may have run. Creates dlock's tables when they
 * are missing, once. */
int dlock__pg_run(dlock__pg *pg, const char *sql, int n, const char *const *vals, dlock_mono_ms limit, int twice_safe,
                  PGresult **out, int *resent, int *maybe_ran);

/* Reading results: a decimal into a buffer; a bigint column (-1 NULL); a boolean column. */
#define NUM(buf, v) snprintf(buf, sizeof buf, "%lld", (long long)(v))
static inline int64_t col_i64(const PGresult *r, int row, int col) {
  if (PQgetisnull(r, row, col)) return -1;
  return strtoll(PQgetvalue(r, row, col), NULL, 10);
}
static inline int col_bool(const PGresult *r, int row, int col) {
  return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

/* A glob ('*', '?'; NULL: all) as a LIKE pattern (malloc'd; NULL: no memory). */
char *dlock__pg_like(const char *pattern);
/* 0 when 'name' fits the tables (UTF-8, length), else DLOCK_ENAME naming 'what'. */
int dlock__pg_check_name(dlock__pg *pg, const char *what, const char *name);

/* ---- A scheduled job's state (pg_jobs.c; backend.h's job_* slots) ---- */
/* Claim a tick (or with cl->manual the pending trigger) of 'job' obeying
 * the job's state: '*outcome' as dlock__pg_sched_claim's, or 3 paused (the
 * tick recorded as skipped, cl->why), 4 no trigger pending; sets
 * cl->trigger_pending, and with cl->manual cl->claimed_tick_ms. */
int dlock__pg_job_claim(dlock__pg *pg, const char *job, dlock__claim *cl, int64_t lock_ms, int *outcome,
                        uint64_t *fence, int64_t *start_ms, int64_t *skew_ms);
int dlock__pg_job_set(dlock__pg *pg, const char *job, int op, const char *by, const char *reason, const char *id);
int dlock__pg_job_get(dlock__pg *pg, const char *job, dlock_job_state *out);
int dlock__pg_job_list(dlock__pg *pg, const char *pattern, void (*fn)(const char *, void *), void *arg);
/* Call 'wake(arg)' on every notification of the job's state (and when the
 * LISTEN connection comes back); waits for that connection until 'until'. */
int dlock__pg_job_watch_add(dlock__pg *pg, const char *job, void (*wake)(void *), void *arg, dlock_mono_ms until,
                            void **handle);
void dlock__pg_job_watch_remove(dlock__pg *pg, void *handle);

void dlock__pg_sql_build(dlock__pg *pg);
void dlock__pg_sql_free(dlock__pg *pg);

/* ---- Lock kinds (pg_kinds.c): what a kind adds to the acquire loop (pg_lock.c) ---- */

/* What a refused acquire saw: the holder's remaining lease (-1 unknown or
 * none), the live holds (a semaphore's permits, -1 unknown), the live
 * waiters ahead of this caller, whether its waiter row was there. */
typedef struct dlock__pg_seen {
  int64_t holder_ms;
  int64_t held;
  int64_t ahead;
  int queued;
} dlock__pg_seen;

/* One acquire try's common parameters, as text. */
typedef struct dlock__pg_try {
  const char *lease, *owner_info, *hb, *live, *permits;
} dlock__pg_try;

typedef struct dlock__pg_kind {
  const char *side;             /* dlock__pg_hold.side: "" mutex, "p" semaphore, "r" / "w" read-write lock */
  const char *word;             /* in messages: "mutex", "semaphore", "read-write lock" */
  int sql_acquire, sql_release; /* DLOCK__PG_SQL_*: the statements the loop sends */
  /* The acquire statement's parameters into 'vals' (room for 9); how many. */
  int (*acquire_args)(const dlock__pg_hold *h, const dlock__pg_try *t, const char **vals);
  /* The acquire's answer: 1st column the fence (NULL: not acquired), 2nd
   * the holder's remaining lease; 'col_refused' the other kind (or limit)
   * that refused it, with 'refused_prefix' put before it; live holds (-1:
   * none), waiters ahead, our waiter row. */
  int col_refused;
  const char *refused_prefix;
  int col_held, col_ahead, col_queued;
  /* A try that found it busy: first (may be NULL; 0 when it has nothing to
   * say), before the messages every kind shares; last, when it is held. */
  int (*busy_free)(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen);
  int (*busy_held)(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen);
} dlock__pg_kind;

/* The descriptor of a hold's kind (its side). */
const dlock__pg_kind *dlock__pg_kind_of(const dlock__pg_hold *h);
/* The side a handle of the core's kind 'kind' acquires as. */
const char *dlock__pg_kind_side(dlock__kind kind);

#endif /* DLOCK_PG_INTERNAL_H */
