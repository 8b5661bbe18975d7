/*
 * my_internal.h - what the MySQL/MariaDB backend's files share: the client
 * struct, the connection pool, one statement with its outcome. Includes
 * <mysql.h> (MariaDB Connector/C); only the files in src/mysql/ include it.
 *
 * Every name, token and owner string goes into SQL as a hexadecimal literal
 * (X'...'), never as quoted text: no escaping to get wrong, whatever
 * sql_mode says (NO_BACKSLASH_ESCAPES), so no injection through a name.
 * Names are VARBINARY: compared byte for byte, no collation folding case.
 */
#ifndef DLOCK_MY_INTERNAL_H
#define DLOCK_MY_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <mysql.h>

#include "internal.h"
#include "mysql/my_url.h"

/* The longest lock or resource name the tables hold (VARBINARY(255)). */
#define DLOCK__MY_NAME_MAX 255
#define DLOCK__MY_POOL_MAX 16
/* Doorbell sessions per client at most (held bells and waits on them). */
#define DLOCK__MY_BELLS 16

typedef struct dlock__my {
  char display[400]; /* mysql://user:***@host:port/db: no password */
  char host[256], user[128], password[256], db[65];
  unsigned port;
  int advisory; /* ?mode=advisory (refused for now: docs/mysql.md) */
  int command_timeout_ms, connect_timeout_ms, max_connections;
  pthread_mutex_t mu; /* the pool */
  pthread_cond_t cv;
  MYSQL *idle[DLOCK__MY_POOL_MAX];
  int nidle, nopen;
  int created;                   /* the tables were made by this client (once) */
  MYSQL *bells[DLOCK__MY_BELLS]; /* idle doorbell sessions (under mu) */
  int nbells, bells_out;         /* idle; in use */
} dlock__my;

/* One statement's outcome. */
typedef struct dlock__my_res {
  MYSQL_RES *rows;    /* a SELECT's rows (mysql_free_result), else NULL */
  uint64_t affected;  /* rows matched (CLIENT_FOUND_ROWS) */
  uint64_t insert_id; /* LAST_INSERT_ID(expr) of the statement */
  int resent;         /* sent a second time after a lost reply (twice-safe only) */
  int maybe_ran;      /* failed after it may have run */
} dlock__my_res;

/* Parse 'url' and open a first connection. */
int dlock__my_connect(const char *url, const dlock_client_options *o, dlock__my **out);
void dlock__my_close(dlock__my *my);
/* One statement on a pooled connection. 'twice_safe': after a lost reply
 * it is sent once more on a new connection (res->resent). A missing table
 * (1146) makes the tables (dlock__my_init) and runs it again. */
int dlock__my_run(dlock__my *my, const char *sql, int twice_safe, dlock__my_res *res);
/* A transaction (READ COMMITTED) on one pooled connection: 'fn' runs its
 * statements with dlock__my_tx_run() and returns 0 (commit), 1 (a
 * statement failed: handled as dlock__my_run handles it) or a DLOCK_E*
 * status of its own (rolled back, returned). It must decide by tokens: a
 * lost connection runs it once more ('*resent'); '*maybe_ran' when it
 * failed after it may have committed. Either pointer may be NULL. */
typedef struct dlock__my_tx dlock__my_tx;
int dlock__my_txn(dlock__my *my, int (*fn)(dlock__my_tx *tx, void *arg), void *arg, int *resent, int *maybe_ran);
/* One statement of the transaction: 0, or 1 (fn returns 1 then). */
int dlock__my_tx_run(dlock__my_tx *tx, const char *sql, dlock__my_res *res);
/* Create dlock's tables (IF NOT EXISTS): `dlock init`. */
int dlock__my_init(dlock__my *my);
/* 'n' bytes of 's' as a SQL literal X'..' into 'out' (2n + 4 bytes). */
void dlock__my_hex(const char *s, size_t n, char *out);
/* The first column of the first row of a result as text ("" when NULL or none). */
const char *dlock__my_cell(dlock__my_res *r, unsigned col);

/* A connection of its own (advisory mode's hold), not from the pool. */
int dlock__my_open_session(dlock__my *my, MYSQL **out);
/* One statement on a session of its own: its first cell as a number, -1
 * for NULL, or '*rc' a status (the session is gone: DLOCK_EIO). */
int64_t dlock__my_session_value(dlock__my *my, MYSQL *s, const char *sql, int *rc);
/* The same for the first 'n' cells of its first row ('vals', -1 for NULL):
 * 0, 1 when it answered no row, or a status. */
int dlock__my_session_row(dlock__my *my, MYSQL *s, const char *sql, int64_t *vals, int n);
/* Doorbell sessions (backend.c, "Waiting" in docs/mysql.md): an idle one
 * from the client's cache or a new one; DLOCK_EBUSY when DLOCK__MY_BELLS
 * are in use already (then no doorbell: the back-off alone). */
int dlock__my_bell_get(dlock__my *my, MYSQL **out);
void dlock__my_bell_put(dlock__my *my, MYSQL *s, int broken);

/* ---- Advisory mode (advisory.c) ---- */
/* GET_LOCK's name for 'name' (47 bytes with the NUL). */
void dlock__my_adv_key(const char *name, char *out);
/* GET_LOCK on a new session, waiting until 'deadline' (wait_ms 0: once),
 * ending when canceled(arg); '*session' the connection that holds it and
 * '*session_id' its server session (CONNECTION_ID()). DLOCK_EINVAL when
 * the connection's statements ran on more than one server session (a
 * proxy that shares sessions): nothing is held then. */
int dlock__my_adv_acquire(dlock__my *my, const char *key, const char *shown, int64_t wait_ms, dlock_mono_ms deadline,
                          int (*canceled)(void *), void *arg, void **session, int64_t *session_id);
/* 0 while 'session' holds 'key' on server session 'session_id', else
 * DLOCK_ELOST ('*moved': the statement ran on another server session). */
int dlock__my_adv_check(dlock__my *my, void *session, const char *key, int64_t session_id, int *moved);
/* RELEASE_LOCK and close the session: 0, or DLOCK_ENOTHELD when it was
 * gone or the release ran on another server session. */
int dlock__my_adv_release(dlock__my *my, void *session, const char *key, int64_t session_id, const char *shown);
void dlock__my_adv_close(void *session);

/* 'name' with the client's key prefix, checked against the column's width
 * (DLOCK_ENAME naming 'what': "lock", "job"), as X'..' into 'hex'
 * (2 * DLOCK__MY_NAME_MAX + 4 bytes). */
int dlock__my_full_hex(const dlock_client *c, const char *what, const char *name, char *hex);

/* ---- The scheduler's claims (sched.c): backend.h's sched_* ---- */
int dlock__my_sched_claim(dlock_client *c, dlock__claim *cl);
int dlock__my_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours);
void dlock__my_sched_undo(dlock_client *c, const dlock__claim *cl);
int dlock__my_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max);

/* ---- A job's state (jobs.c): backend.h's job_* ---- */
int dlock__my_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id);
int dlock__my_job_get(dlock_client *c, const char *job, dlock_job_state *out);
int dlock__my_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
int dlock__my_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle);
void dlock__my_job_unwatch(dlock_client *c, void *handle);
/* For a tick's claim of the job 'hex' (a hex literal): 'why' ("skipped:
 * paused by ...", "" when not paused) and whether a trigger waits. */
int dlock__my_job_peek(dlock_client *c, const char *hex, char *why, size_t whylen, int *pending);
/* Claim the pending trigger (cl->manual) like a tick: the job lock of
 * dlock_sched and a fence, then the trigger (one winner). cl->outcome
 * YOURS, BUSY (it stays pending) or NONE. */
int dlock__my_job_claim_manual(dlock_client *c, dlock__claim *cl, const char *hex, const char *node_hex);

/* ---- Semaphores and read-write locks, lease mode (family.c) ---- */
typedef struct dlock__my_fam {
  const char *hname;     /* the name as X'..' */
  const char *name;      /* for messages (with the key prefix) */
  const char *token;     /* the hold's */
  char side;             /* 'p' a permit, 'r' the read side, 'w' the write side */
  int permits;           /* 'p': the limit */
  const char *shadow;    /* 'r': this thread's other hold of the name, or NULL */
  const char *owner_hex; /* owner_info as X'..' */
  int64_t lease_ms;
} dlock__my_fam;
/* One try: 1 taken ('*fence'), 0 not (why in 'busy'; queued as a waiter
 * when 'queue'), or a status (DLOCK_EWRONGTYPE, DLOCK_ELIMIT, ...). */
int dlock__my_fam_try(dlock__my *my, const dlock__my_fam *f, int queue, uint64_t *fence, char *busy, size_t len,
                      int *maybe_ran);
/* Leave the queue (a wait that gave up). Best effort. */
void dlock__my_fam_unqueue(dlock__my *my, const dlock__my_fam *f);
/* 0 released; DLOCK_ENOTHELD saying why; DLOCK_EUNKNOWN. */
int dlock__my_fam_release(dlock__my *my, const dlock__my_fam *f);
/* 0 renewed for 'lease_ms'; DLOCK_ELOST with '*lost'; another status. */
int dlock__my_fam_extend(dlock__my *my, const dlock__my_fam *f, int64_t lease_ms, dlock_lost_reason *lost);
/* 1 held ('*ttl_ms', may be NULL), 0 not, or a status. */
int dlock__my_fam_held(dlock__my *my, const dlock__my_fam *f, int64_t *ttl_ms);
/* The family's part of dlock_lock_info_get for a row marked 'marker' ('*s:N', '*r'). */
int dlock__my_fam_info(dlock__my *my, const char *hname, const char *marker, dlock_lock_info *out);
/* End every live hold of the name (force release); never sent twice. */
int dlock__my_fam_force(dlock__my *my, const char *hname, int *was_held);

#endif /* DLOCK_MY_INTERNAL_H */
