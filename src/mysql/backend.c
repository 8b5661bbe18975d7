/*
 * backend.c - the MySQL/MariaDB backend's table of operations (backend.h),
 * lease mode (docs/mysql.md): one row per lock name in dlock_locks, which
 * is also the name's fence counter (never deleted), decided on the
 * database's clock (UTC_TIMESTAMP(6)) by one autocommit statement per
 * operation. The fence comes back through LAST_INSERT_ID(expr), which the
 * statement's own reply carries: no second round trip, no transaction.
 *
 * Acquire, release, renew and the guard are safe to send twice: they
 * decide by the hold's token (the call's nonce), so after a lost reply the
 * statement is sent once more and answers as the first would have (an
 * acquire that ran finds its own token and keeps its fence). Force release
 * is never sent twice.
 *
 * Waits: MySQL has no LISTEN/NOTIFY; a mutex's waiter waits on the name's
 * doorbell (a GET_LOCK its holder holds while it holds the lock: below),
 * and otherwise tries again after a bounded, growing back-off
 * (BACKOFF_MIN_MS doubling to BACKOFF_MAX_MS, jittered).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mysql/my_internal.h"

/* Advisory mode: the "lease" the watchdog uses to pace its look at the
 * session (every third of it). */
#define ADVISORY_CHECK_MS 1500
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 200

/* A name with the client's prefix: at most the prefix and a DLOCK_MAX_NAME_LEN name. */
#define FULL_MAX (2 * DLOCK_MAX_NAME_LEN + 2)
/* A name as a hex literal. */
#define HEX_MAX (2 * FULL_MAX + 8)
#define NOW6 "UTC_TIMESTAMP(6)"

typedef struct my_lock {
  char name[DLOCK__MY_NAME_MAX + 1];
  char hname[2 * DLOCK__MY_NAME_MAX + 4]; /* X'..' */
  char owner_hex[2 * 1024 + 4];
  char token[DLOCK__TOKEN_HEX + 1]; /* the hold's, set by acquire */
  /* Advisory mode: GET_LOCK's name, and the session that holds it (used by
   * one thread at a time: the holder's or the watchdog's). */
  char key[48];
  pthread_mutex_t mu;
  void *session;
  int64_t session_id; /* its server session's CONNECTION_ID() */
  int moved;          /* a look ran on another server session: lost for good */
  /* Lease mode's mutex: the doorbell, GET_LOCK on 'bell' held by the
   * holder's 'bell_session' while it holds the lock (under mu). */
  char bell[64];
  MYSQL *bell_session;
} my_lock;

extern const dlock__backend_ops dlock__mysql_ops;

static dlock__my *myc(const dlock_client *c) { return (dlock__my *)c->be; }
static my_lock *myl(const dlock_mutex *m) { return (my_lock *)m->be; }

/* A semaphore or read-write lock handle, for family.c: its hold of 'token'. */
static int is_family(const dlock_mutex *m) { return m->kind != DLOCK__KIND_MUTEX; }
static dlock__my_fam fam_of(dlock_mutex *m, const char *token, int64_t lease_ms, const char *shadow) {
  my_lock *l = myl(m);
  dlock__my_fam f = {.hname = l->hname,
                     .name = l->name,
                     .token = token,
                     .permits = m->permits,
                     .shadow = shadow,
                     .owner_hex = l->owner_hex,
                     .lease_ms = lease_ms};
  f.side = m->kind == DLOCK__KIND_SEMAPHORE ? 'p' : m->kind == DLOCK__KIND_READ ? 'r' : 'w';
  return f;
}

int dlock__my_full_hex(const dlock_client *c, const char *what, const char *name, char *hex) {
  char full[FULL_MAX];
  snprintf(full, sizeof full, "%s%s", c->prefix ? c->prefix : "", name);
  size_t len = strlen(full);
  if (len > DLOCK__MY_NAME_MAX)
    return dlock__error(DLOCK_ENAME,
                        "%s name '%.40s...' is %zu bytes%s; dlock's MySQL tables hold names of at "
                        "most %d bytes (%s): use a shorter name",
                        what, full, len, c->prefix_len ? " with the key prefix" : "", DLOCK__MY_NAME_MAX, c->server);
  dlock__my_hex(full, len, hex);
  return 0;
}

/* ---- Client ---- */

static const dlock__backend_ops my_advisory_ops; /* below */

static int my_open(dlock_client *c, const dlock_client_options *o, const char *url) {
  if (!url) return dlock__error(DLOCK_EURL, "MySQL: no URL given");
  dlock__my *my = NULL;
  int rc = dlock__my_connect(url, o, &my);
  if (rc) return rc;
  c->be = my;
  snprintf(c->server, sizeof c->server, "%s", my->display);
  c->command_timeout_ms = my->command_timeout_ms;
  c->caps = my->advisory ? DLOCK__CAP_SESSION : DLOCK__CAP_SEMAPHORE | DLOCK__CAP_RWLOCK;
  if (my->advisory) c->ops = &my_advisory_ops;
  return 0;
}

static int not_advisory(dlock_client *c, const char *what) {
  return dlock__error(DLOCK_EINVAL,
                      "%s is not offered in advisory mode (%s): GET_LOCK has no fence and no list "
                      "of names; drop mode=advisory from the URL to use dlock's lease table",
                      what, c->server);
}

static void my_close(dlock_client *c) {
  dlock__my_close(myc(c));
  c->be = NULL;
}

static int my_ping(dlock_client *c) {
  dlock__my_res r;
  int rc = dlock__my_run(myc(c), "SELECT 1", 1, &r);
  if (r.rows) mysql_free_result(r.rows);
  return rc;
}

static int my_setup(dlock_client *c) { return dlock__my_init(myc(c)); }

/* ---- The doctor ---- */

static void add_check(dlock_check *out, int max, int *n, const char *name, dlock_check_level level, const char *fix,
                      const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add_check(dlock_check *out, int max, int *n, const char *name, dlock_check_level level, const char *fix,
                      const char *fmt, ...) {
  if (*n >= max) return;
  dlock_check *k = &out[(*n)++];
  memset(k, 0, sizeof *k);
  k->name = name;
  k->level = level;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(k->found, sizeof k->found, fmt, ap);
  va_end(ap);
  snprintf(k->fix, sizeof k->fix, "%s", fix);
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int my_check(dlock_client *c, dlock_check *out, int max) {
  dlock__my *my = myc(c);
  dlock__my_res r;
  int rc = dlock__my_run(my,
                         "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'read_only', 'super_read_only', "
                         "'innodb_read_only', 'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', "
                         "'wsrep_on', 'version_comment')",
                         1, &r);
  if (rc) return rc;
  char version[80] = "", comment[80] = "", flush[8] = "", sync[16] = "", log_bin[8] = "OFF", wsrep[8] = "OFF";
  int ro = 0;
  MYSQL_ROW row;
  while ((row = mysql_fetch_row(r.rows)) != NULL) {
    const char *k = row[0], *v = row[1] ? row[1] : "";
    if (!strcmp(k, "version"))
      snprintf(version, sizeof version, "%s", v);
    else if (!strcmp(k, "version_comment"))
      snprintf(comment, sizeof comment, "%s", v);
    else if (!strcmp(k, "innodb_flush_log_at_trx_commit"))
      snprintf(flush, sizeof flush, "%s", v);
    else if (!strcmp(k, "sync_binlog"))
      snprintf(sync, sizeof sync, "%s", v);
    else if (!strcmp(k, "log_bin"))
      snprintf(log_bin, sizeof log_bin, "%s", v);
    else if (!strcmp(k, "wsrep_on"))
      snprintf(wsrep, sizeof wsrep, "%s", v);
    else if (!strcmp(v, "ON"))
      ro = 1; /* read_only, super_read_only, innodb_read_only */
  }
  mysql_free_result(r.rows);
  int n = 0;
  add_check(out, max, &n, "server", DLOCK_CHECK_OK, "", "%s answers, %s %s", my->display,
            strstr(version, "MariaDB") ? "MariaDB" : "MySQL", version);
  if (ro)
    add_check(
        out, max, &n, "read-only", DLOCK_CHECK_FAIL, "point the URL at the primary, or SET GLOBAL read_only = OFF",
        "%s is read-only (read_only, super_read_only or innodb_read_only is ON): no lock can be taken", my->display);
  else
    add_check(out, max, &n, "read-only", DLOCK_CHECK_OK, "", "%s takes writes", my->display);
  if (strcmp(flush, "1") != 0)
    add_check(out, max, &n, "durability", DLOCK_CHECK_FAIL,
              "SET GLOBAL innodb_flush_log_at_trx_commit = 1 (and in my.cnf)",
              "innodb_flush_log_at_trx_commit is %s on %s: a crash can lose the last second of commits, so a lease "
              "or a fence already handed out can be handed out again",
              flush, my->display);
  else if (!strcmp(log_bin, "ON") && strcmp(sync, "1") != 0)
    add_check(out, max, &n, "durability", DLOCK_CHECK_WARN, "SET GLOBAL sync_binlog = 1 (and in my.cnf)",
              "binary log on with sync_binlog = %s on %s: after an OS crash a replica promoted from the binary "
              "log may lack the last fences",
              sync, my->display);
  else
    add_check(out, max, &n, "durability", DLOCK_CHECK_OK, "",
              "innodb_flush_log_at_trx_commit = 1%s on %s: a commit survives a crash",
              !strcmp(log_bin, "ON") ? ", sync_binlog = 1" : "", my->display);
  if (!strcmp(wsrep, "ON"))
    add_check(out, max, &n, "replication", DLOCK_CHECK_WARN,
              "point every dlock client at one node of the cluster (or a proxy that sends all writes to one)",
              "%s is a Galera node (wsrep_on): writes to dlock's rows on two nodes at once are settled only at "
              "commit, and GET_LOCK is not replicated",
              my->display);
  /* The tables and the rights on them: statements that change nothing. */
  static const char *const probes[] = {
      "SELECT name FROM dlock_locks WHERE 1 = 0",
      "UPDATE dlock_locks SET fence = fence WHERE 1 = 0",
      "INSERT INTO dlock_locks (name) SELECT name FROM dlock_locks WHERE 1 = 0",
      ("INSERT INTO dlock_guards (resource, fence, updated) SELECT resource, fence, updated FROM dlock_guards "
       "WHERE 1 = 0"),
      "UPDATE dlock_guards SET fence = fence WHERE 1 = 0",
      /* Semaphores, read-write locks (their holds and waiters end with a
       * DELETE) and the scheduler. */
      "INSERT INTO dlock_holds (name, token, side, fence, expires, since) SELECT name, token, side, fence, expires, "
      "since FROM dlock_holds WHERE 1 = 0",
      "UPDATE dlock_holds SET fence = fence WHERE 1 = 0",
      "DELETE FROM dlock_holds WHERE 1 = 0",
      "INSERT INTO dlock_waiters (name, token, side, expires) SELECT name, token, side, expires FROM dlock_waiters "
      "WHERE 1 = 0",
      "DELETE FROM dlock_waiters WHERE 1 = 0",
      "INSERT INTO dlock_sched (job) SELECT job FROM dlock_sched WHERE 1 = 0",
      "UPDATE dlock_sched SET fence = fence WHERE 1 = 0",
      ("INSERT INTO dlock_sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, outcome) "
       "SELECT job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, outcome FROM dlock_sched_runs "
       "WHERE 1 = 0"),
      "DELETE FROM dlock_sched_runs WHERE 1 = 0",
  };
  /* Missing tables: named, not made (the doctor changes nothing). */
  rc = dlock__my_run(my,
                     "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
                     "TABLE_NAME IN ('dlock_locks', 'dlock_guards', 'dlock_holds', 'dlock_waiters', 'dlock_sched', "
                     "'dlock_sched_runs')",
                     1, &r);
  if (rc) return rc;
  int tables = atoi(dlock__my_cell(&r, 0));
  mysql_free_result(r.rows);
  int rights_ok = tables == 6;
  if (!rights_ok)
    add_check(out, max, &n, "rights", DLOCK_CHECK_FAIL,
              "run `dlock init --url ...` once as a user that may CREATE in it, then grant the run-time user the "
              "rights docs/mysql.md lists (SELECT, INSERT, UPDATE on dlock_locks, dlock_guards and dlock_sched; "
              "DELETE too on dlock_holds, dlock_waiters and dlock_sched_runs)",
              "dlock's tables are missing in '%s' on %s", my->db, my->display);
  for (size_t i = 0; i < sizeof probes / sizeof probes[0] && rights_ok; i++) {
    dlock__my_res p;
    int prc = dlock__my_run(my, probes[i], 1, &p);
    if (p.rows) mysql_free_result(p.rows);
    if (prc == DLOCK_ENOPERM || prc == DLOCK_ESERVER) {
      rights_ok = 0;
      add_check(out, max, &n, "rights", DLOCK_CHECK_FAIL,
                "run `dlock init` as a user that may CREATE, then GRANT SELECT, INSERT, UPDATE on dlock_locks, "
                "dlock_guards and dlock_sched, and SELECT, INSERT, UPDATE, DELETE on dlock_holds, dlock_waiters "
                "and dlock_sched_runs (docs/mysql.md)",
                "%s", dlock_last_error());
    } else if (prc && prc != DLOCK_EREADONLY) {
      return prc;
    }
    dlock__error_clear();
  }
  if (rights_ok)
    add_check(out, max, &n, "rights", DLOCK_CHECK_OK, "", "user '%s' may read and write dlock's tables in '%s'",
              my->user, my->db);
  /* The clock: the server's against ours, at the midpoint of the round trip. */
  int64_t t0 = wall_ms();
  rc = dlock__my_run(my, "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', " NOW6 ") DIV 1000", 1, &r);
  int64_t t1 = wall_ms();
  if (rc) return rc;
  int64_t server = strtoll(dlock__my_cell(&r, 0), NULL, 10);
  mysql_free_result(r.rows);
  int64_t skew = server - (t0 + t1) / 2;
  int64_t a = skew < 0 ? -skew : skew;
  if (a > 2000)
    add_check(out, max, &n, "clock", a > 30000 ? DLOCK_CHECK_FAIL : DLOCK_CHECK_WARN, "run NTP (chrony) on both hosts",
              "the clock of %s differs from this host's by %" PRId64 " ms: leases are decided on the server's "
              "clock, but a schedule's ticks come from this one",
              my->display, skew);
  else
    add_check(out, max, &n, "clock", DLOCK_CHECK_OK, "", "the clock of %s is within %" PRId64 " ms of this host's",
              my->display, a);
  if (n > 0 && !strcmp(out[n - 1].name, "clock")) out[n - 1].skew_ms = skew;
  return n;
}

/* ---- Lock handles ---- */

static int my_lock_new(dlock_mutex *m) {
  my_lock *l = calloc(1, sizeof *l);
  if (!l) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__my_full_hex(m->client, "lock", m->name, l->hname);
  if (rc) {
    free(l);
    return rc;
  }
  snprintf(l->name, sizeof l->name, "%s%s", m->client->prefix ? m->client->prefix : "", m->name);
  const char *oi = m->owner_info ? m->owner_info : "";
  dlock__my_hex(oi, strnlen(oi, 1024), l->owner_hex);
  dlock__my_adv_key(l->name, l->key);
  snprintf(l->bell, sizeof l->bell, "dlockbell:%s", l->key + 6); /* not advisory mode's key */
  pthread_mutex_init(&l->mu, NULL);
  m->be = l;
  return 0;
}

static void bell_ring(dlock_mutex *m);

static void my_lock_free(dlock_mutex *m) {
  my_lock *l = myl(m);
  if (!l) return;
  bell_ring(m);
  dlock__my_adv_close(l->session); /* a hold never released: it ends with its session */
  pthread_mutex_destroy(&l->mu);
  free(m->be);
  m->be = NULL;
}

/* One try: 1 taken (fence in '*fence'), 0 held by another owner, or a status. */
static int try_take(dlock_mutex *m, const char *token, int64_t lease_ms, uint64_t *fence, int *maybe_ran) {
  dlock__my *my = myc(m->client);
  my_lock *l = myl(m);
  char sql[4800];
  /* Left to right: 'since' and 'fence' look at the old token before it is
   * set. Our own token (a resend after a lost reply) keeps its fence. */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET since = IF(token = '%s', since, " NOW6 "), "
           "fence = IF(token = '%s', LAST_INSERT_ID(fence), LAST_INSERT_ID(fence + 1)), token = '%s', "
           "expires = DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND), owner_info = %s "
           "WHERE name = %s AND (token = '' OR token = '%s' OR expires <= " NOW6 ")",
           token, token, token, lease_ms * 1000, l->owner_hex, l->hname, token);
  for (int pass = 0; pass < 2; pass++) {
    dlock__my_res r;
    int rc = dlock__my_run(my, sql, 1, &r);
    if (rc) {
      *maybe_ran = r.maybe_ran;
      return rc;
    }
    if (r.affected == 1) {
      if (r.insert_id == 0 || r.insert_id > (uint64_t)INT64_MAX) {
        *maybe_ran = 1;
        return dlock__error(DLOCK_EFENCE, "lock '%s' on %s: the fence counter gave %" PRIu64 ", not 1..2^63-1", l->name,
                            my->display, r.insert_id);
      }
      *fence = r.insert_id;
      return 1;
    }
    if (pass == 1) break;
    /* Nothing matched: the row is held (by a mutex, or marked by a
     * semaphore's or read-write lock's holds: family.c), or there is none
     * yet. Make it (its fence counter starts at 0), then try once more. */
    char q[800];
    snprintf(q, sizeof q, "SELECT token, expires > " NOW6 " FROM dlock_locks WHERE name = %s", l->hname);
    rc = dlock__my_run(my, q, 1, &r);
    if (rc) return rc;
    MYSQL_ROW row = mysql_fetch_row(r.rows);
    int there = row != NULL, family = row && row[0] && row[0][0] == '*' && row[1] && row[1][0] == '1';
    char marker[40];
    snprintf(marker, sizeof marker, "%s", family ? row[0] : "");
    mysql_free_result(r.rows);
    if (family)
      return dlock__error(DLOCK_EWRONGTYPE, "'%s' on %s is held as a %s: a name is one kind of lock at a time", l->name,
                          my->display, marker[1] == 's' ? "semaphore" : "read-write lock");
    if (there) break; /* held */
    snprintf(q, sizeof q, "INSERT IGNORE INTO dlock_locks (name) VALUES (%s)", l->hname);
    rc = dlock__my_run(my, q, 1, &r);
    if (rc) return rc;
  }
  return 0;
}

static int canceled(void *m) { return dlock__mutex_canceled(m); }

static int adv_acquire(dlock_mutex *m, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out) {
  my_lock *l = myl(m);
  dlock_mono_ms start = dlock_mono_now();
  void *session = NULL;
  int64_t id = 0;
  int rc = dlock__my_adv_acquire(myc(m->client), l->key, l->name, wait_ms, deadline, canceled, m, &session, &id);
  if (rc) return rc;
  pthread_mutex_lock(&l->mu);
  l->session = session;
  l->session_id = id;
  l->moved = 0;
  pthread_mutex_unlock(&l->mu);
  out->fence = 0;
  out->lease_ms = ADVISORY_CHECK_MS;
  out->start = start;
  out->valid_until = INT64_MAX; /* held while the session lives: the watchdog looks at it */
  return 0;
}

/* Advisory mode: is the hold's session still holding it (0, else
 * DLOCK_ELOST; '*moved' when a look ran on another server session, once
 * seen for good: that session may serve other clients' statements). */
static int adv_check(dlock_mutex *m, int *moved) {
  my_lock *l = myl(m);
  pthread_mutex_lock(&l->mu);
  int rc = DLOCK_ELOST, now_moved = 0;
  if (l->session && !l->moved) rc = dlock__my_adv_check(myc(m->client), l->session, l->key, l->session_id, &now_moved);
  l->moved |= now_moved;
  if (moved) *moved = l->moved;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

/* ---- The doorbell (docs/mysql.md, "Waiting") ----
 * MySQL has no LISTEN/NOTIFY, but GET_LOCK wakes its waiters at once when
 * the lock is released or its session ends. So the holder of a mutex holds
 * the name's bell (a GET_LOCK of its own, on a session of its own) while it
 * holds the lock and lets it go when it releases; a waiter waits on the
 * bell, in slices, between its tries. Best effort all through: a bell that
 * is not to be had (another waiter has it for a moment, or the client has
 * DLOCK__MY_BELLS sessions in use) leaves the back-off alone, and a bell
 * that rings with the lock still held (the holder's bell session ended, or
 * it had none) sends the waiter back to its back-off. The lock is the row:
 * the bell only says when to look again. */
#define BELL_SLICE_MS 250
#define BELL_FREE_MS 5 /* a GET_LOCK this quick found the bell free: not a ring */

static void bell_arm(dlock_mutex *m) {
  dlock__my *my = myc(m->client);
  my_lock *l = myl(m);
  MYSQL *s = NULL;
  if (dlock__my_bell_get(my, &s) == 0) {
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', 0)", l->bell);
    int rc = 0;
    int64_t v = dlock__my_session_value(my, s, sql, &rc);
    pthread_mutex_lock(&l->mu);
    if (rc == 0 && v == 1 && !l->bell_session) l->bell_session = s, s = NULL;
    pthread_mutex_unlock(&l->mu);
    if (s) dlock__my_bell_put(my, s, rc != 0);
  }
  dlock__error_clear();
}

static void bell_ring(dlock_mutex *m) {
  my_lock *l = myl(m);
  pthread_mutex_lock(&l->mu);
  MYSQL *s = l->bell_session;
  l->bell_session = NULL;
  pthread_mutex_unlock(&l->mu);
  if (!s) return;
  char sql[120];
  snprintf(sql, sizeof sql, "SELECT RELEASE_LOCK('%s')", l->bell);
  int rc = 0;
  dlock__my_session_value(myc(m->client), s, sql, &rc);
  dlock__my_bell_put(myc(m->client), s, rc != 0);
  dlock__error_clear();
}

/* Wait on the bell until it rings, 'until' or one slice passes (then the
 * waiter looks again: a lease can run out with its holder's bell still
 * held). 1 it rang or the slice passed (look again now), 0 the bell was
 * free at once or not to be had (the back-off decides). */
static int bell_wait(dlock_mutex *m, dlock_mono_ms until) {
  dlock__my *my = myc(m->client);
  MYSQL *s = NULL;
  dlock_mono_ms now = dlock_mono_now();
  if (now >= until || dlock__my_bell_get(my, &s) != 0) {
    dlock__error_clear();
    return 0;
  }
  int64_t slice = until - now > BELL_SLICE_MS ? BELL_SLICE_MS : until - now;
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', %" PRId64 ".%03" PRId64 ")", myl(m)->bell, slice / 1000,
           slice % 1000);
  int err = 0, look = 0;
  int64_t v = dlock__my_session_value(my, s, sql, &err);
  if (!err && v == 1) {
    snprintf(sql, sizeof sql, "SELECT RELEASE_LOCK('%s')", myl(m)->bell);
    dlock__my_session_value(my, s, sql, &err);
    look = dlock_mono_now() - now >= BELL_FREE_MS; /* free at once: no holder's bell */
  } else if (!err && v == 0) {
    look = 1; /* the slice passed */
  }
  dlock__my_bell_put(my, s, err != 0);
  dlock__error_clear();
  return look;
}

static int my_acquire(dlock_mutex *m, int64_t lease_ms, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out) {
  if (myc(m->client)->advisory) return adv_acquire(m, wait_ms, deadline, out);
  char token[DLOCK__TOKEN_HEX + 1];
  pthread_mutex_lock(&m->mu);
  memcpy(token, m->token, sizeof token);
  pthread_mutex_unlock(&m->mu);
  /* A read side taken by a thread that holds the name already goes at once
   * (docs/rwlock.md); the server checks that hold is still live. */
  char own[DLOCK__TOKEN_HEX + 1];
  dlock__my_fam f = fam_of(m, token, lease_ms, dlock__rw_own_token(m, own) ? own : NULL);
  char busy[600] = "";
  int queued = 0;
  int64_t backoff = BACKOFF_MIN_MS;
  for (unsigned tries = 0;; tries++) {
    dlock_mono_ms sent = dlock_mono_now();
    uint64_t fence = 0;
    int maybe_ran = 0;
    int rc;
    if (is_family(m)) {
      /* A waiter queues (and stays live by trying again), so that it is
       * served in its turn and counted in the status. */
      rc = dlock__my_fam_try(myc(m->client), &f, wait_ms != 0, &fence, busy, sizeof busy, &maybe_ran);
      queued |= rc == 0 && wait_ms != 0;
      if (rc < 0 && queued) {
        char why[1024];
        snprintf(why, sizeof why, "%s", dlock_last_error());
        dlock__my_fam_unqueue(myc(m->client), &f);
        dlock__error(rc, "%s", why);
      }
    } else {
      rc = try_take(m, token, lease_ms, &fence, &maybe_ran);
    }
    if (rc == 1) {
      memcpy(myl(m)->token, token, sizeof token);
      if (!is_family(m)) bell_arm(m);
      out->fence = fence;
      out->lease_ms = lease_ms;
      out->start = sent;
      out->valid_until = dlock__valid_until(sent, lease_ms);
      return 0;
    }
    if (rc < 0) {
      if (maybe_ran) {
        /* The message names the server first (the core adds the lock). */
        return dlock__error(DLOCK_EUNKNOWN, "%s; it may be held by this call until its lease (%" PRId64 " ms) ends",
                            dlock_last_error(), lease_ms);
      }
      return rc;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (wait_ms == 0 || now >= deadline) {
      if (queued) dlock__my_fam_unqueue(myc(m->client), &f);
      if (busy[0]) return dlock__error(DLOCK_EBUSY, "%s", busy);
      return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another owner (%s)", myl(m)->name,
                          myc(m->client)->display);
    }
    /* Back off, jittered, never past the deadline; a cancel ends the wait. */
    int64_t sleep = backoff / 2 + (int64_t)(((unsigned)rand() ^ tries) % (unsigned)(backoff / 2 + 1));
    if (deadline != INT64_MAX && now + sleep > deadline) sleep = deadline - now;
    /* A mutex's waiter waits on the doorbell first (a cancel is seen
     * within its slice); when it rang, it looks again at once. */
    if (!is_family(m) && bell_wait(m, deadline) == 1) {
      if (dlock__mutex_canceled(m)) return dlock__error(DLOCK_ECANCELED, "the wait was canceled");
      continue;
    }
    if (dlock__mutex_wait(m, now + sleep)) {
      if (queued) dlock__my_fam_unqueue(myc(m->client), &f);
      return dlock__error(DLOCK_ECANCELED, "the wait was canceled");
    }
    if (backoff < BACKOFF_MAX_MS) backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
}

static int release_lease(dlock_mutex *m);

static int my_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost) {
  (void)valid_until;
  int rc = release_lease(m);
  if (myl(m)->bell_session) { /* after the row is free: a waiter woken now finds it so */
    char why[1024];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    bell_ring(m);
    if (rc) dlock__error(rc, "%s", why);
  }
  if (lost == DLOCK_LOST_NONE || rc == DLOCK_EUNKNOWN) return rc;
  /* The core had seen the hold lost (its local deadline passed, or a
   * renewal found it gone): the row is freed all the same, but the hold
   * did not last until now, whatever the row said. */
  return dlock__error(DLOCK_ENOTHELD, "lock '%s' on %s: the hold had been lost before this release (%s)%s",
                      myl(m)->name, myc(m->client)->display, dlock_lost_reason_str(lost),
                      rc == 0 ? "; its row is freed now" : "");
}

/* The release statement (or advisory mode's RELEASE_LOCK). */
static int release_lease(dlock_mutex *m) {
  dlock__my *my = myc(m->client);
  my_lock *l = myl(m);
  if (my->advisory) {
    pthread_mutex_lock(&l->mu);
    void *session = l->session;
    l->session = NULL;
    pthread_mutex_unlock(&l->mu);
    if (!session)
      return dlock__error(DLOCK_ENOTHELD, "lock '%s' on %s: its session had ended (advisory mode)", l->name,
                          my->display);
    return dlock__my_adv_release(my, session, l->key, l->session_id, l->name);
  }
  if (is_family(m)) {
    dlock__my_fam f = fam_of(m, l->token, 0, NULL);
    return dlock__my_fam_release(my, &f);
  }
  char sql[900];
  const char *token = l->token;
  /* LAST_INSERT_ID says whether the lease was still running (2) or had run
   * out (1); 'last' keeps the token with '+' or '-' for a resend to read. */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET owner_info = IF(LAST_INSERT_ID(IF(expires > " NOW6 ", 2, 1)) > 0, '', ''), "
           "last = CONCAT(token, IF(expires > " NOW6 ", '+', '-')), token = '', expires = LEAST(expires, " NOW6 ") "
           "WHERE name = %s AND token = '%s'",
           l->hname, token);
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 1, &r);
  if (rc) {
    if (r.maybe_ran)
      return dlock__error(DLOCK_EUNKNOWN, "release of '%s': %s; the lock ends by its lease at the latest", l->name,
                          dlock_last_error()); /* the message names the server */
    return rc;
  }
  int live = r.affected == 1 && r.insert_id == 2;
  if (r.affected == 0 && r.resent) {
    /* Sent twice: the first copy may have released it. Its trace says how. */
    snprintf(sql, sizeof sql, "SELECT last FROM dlock_locks WHERE name = %s", l->hname);
    rc = dlock__my_run(my, sql, 1, &r);
    if (rc) return rc;
    char last[40];
    snprintf(last, sizeof last, "%s", dlock__my_cell(&r, 0));
    mysql_free_result(r.rows);
    if (strncmp(last, token, DLOCK__TOKEN_HEX) != 0)
      return dlock__error(DLOCK_EUNKNOWN,
                          "release of '%s' on %s: its reply was lost and the lock has changed "
                          "hands since, so whether the hold lasted until the release cannot be told",
                          l->name, my->display);
    live = last[DLOCK__TOKEN_HEX] == '+';
    r.affected = 1;
  }
  if (live) return 0;
  if (r.affected == 1)
    return dlock__error(DLOCK_ENOTHELD,
                        "lock '%s' on %s: its lease had run out before the release (no other owner "
                        "took it meanwhile)",
                        l->name, my->display);
  return dlock__error(DLOCK_ENOTHELD,
                      "lock '%s' on %s is no longer held by this owner: its lease ran out or it "
                      "was freed, and another owner may have it",
                      l->name, my->display);
}

static void my_undo(dlock_mutex *m) {
  (void)my_release(m, 0, DLOCK_LOST_NONE);
  dlock__error_clear();
}

/* Why the hold of 'token' is gone: another owner has the name, a forced
 * release ended it (its 'last' is "<token>!", my_force_release), or neither. */
static dlock_lost_reason why_lost(dlock_mutex *m, const char *token) {
  char sql[700];
  snprintf(sql, sizeof sql, "SELECT token, last FROM dlock_locks WHERE name = %s", myl(m)->hname);
  dlock__my_res r;
  dlock_lost_reason why = DLOCK_LOST_EXPIRED;
  if (dlock__my_run(myc(m->client), sql, 1, &r) == 0) {
    const char *t = dlock__my_cell(&r, 0), *last = dlock__my_cell(&r, 1);
    size_t tl = strlen(token);
    if (!strncmp(last, token, tl) && !strcmp(last + tl, "!"))
      why = DLOCK_LOST_DELETED;
    else if (t[0] && strcmp(t, token) != 0)
      why = DLOCK_LOST_TAKEN;
    mysql_free_result(r.rows);
  }
  dlock__error_clear();
  return why;
}

static int my_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                     dlock_lost_reason *lost) {
  dlock__my *my = myc(m->client);
  if (my->advisory) {
    *sent = dlock_mono_now();
    int moved = 0;
    if (adv_check(m, &moved) == 0) return 0;
    *lost = DLOCK_LOST_EXPIRED;
    if (moved)
      return dlock__error(DLOCK_ELOST,
                          "lock '%s' on %s: a look at it ran on another server session than the "
                          "hold's, so a proxy at %s:%u shares sessions and other clients may run on the one that "
                          "holds it: advisory mode needs its own server session (point the URL at the server "
                          "itself, or use lease mode)",
                          myl(m)->name, my->display, my->host, my->port);
    return dlock__error(DLOCK_ELOST, "lock '%s' on %s: the session that held it has ended (advisory mode)",
                        myl(m)->name, my->display);
  }
  if (is_family(m)) {
    dlock__my_fam f = fam_of(m, token, lease_ms, NULL);
    *sent = dlock_mono_now();
    return dlock__my_fam_extend(my, &f, lease_ms, lost);
  }
  char sql[900];
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET expires = DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND) "
           "WHERE name = %s AND token = '%s' AND expires > " NOW6,
           lease_ms * 1000, myl(m)->hname, token);
  *sent = dlock_mono_now();
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 1, &r);
  if (rc) return rc;
  if (r.affected == 1) return 0;
  *lost = why_lost(m, token);
  return dlock__error(DLOCK_ELOST, "lock '%s' on %s is no longer held by this owner (%s)", myl(m)->name, my->display,
                      *lost == DLOCK_LOST_TAKEN     ? "another owner has it"
                      : *lost == DLOCK_LOST_DELETED ? "it was force-released"
                                                    : "its lease ran out or it was freed");
}

static void my_renew(dlock_client *c, dlock__renewal *r, size_t n, dlock_mono_ms limit) {
  for (size_t i = 0; i < n; i++) {
    r[i].lost = DLOCK_LOST_NONE;
    if (dlock_mono_now() >= limit) {
      r[i].sent = dlock_mono_now();
      r[i].status = DLOCK_ETIMEDOUT; /* not renewed this time */
      continue;
    }
    r[i].status = my_extend(r[i].m, r[i].token, r[i].lease_ms, &r[i].sent, &r[i].lost);
    if (r[i].status == 0)
      r[i].valid_until = myc(c)->advisory ? INT64_MAX : dlock__valid_until(r[i].sent, r[i].lease_ms);
  }
  dlock__error_clear();
}

static int my_held(dlock_mutex *m, const char *token, int64_t *ttl_ms) {
  if (myc(m->client)->advisory) {
    if (ttl_ms) *ttl_ms = -1; /* no expiry: as long as the session */
    return adv_check(m, NULL) == 0;
  }
  if (is_family(m)) {
    dlock__my_fam f = fam_of(m, token, 0, NULL);
    return dlock__my_fam_held(myc(m->client), &f, ttl_ms);
  }
  char sql[900];
  snprintf(sql, sizeof sql,
           "SELECT TIMESTAMPDIFF(MICROSECOND, " NOW6 ", expires) DIV 1000 FROM dlock_locks "
           "WHERE name = %s AND token = '%s' AND expires > " NOW6,
           myl(m)->hname, token);
  dlock__my_res r;
  int rc = dlock__my_run(myc(m->client), sql, 1, &r);
  if (rc) return rc;
  int held = mysql_num_rows(r.rows) == 1;
  if (held && ttl_ms) *ttl_ms = strtoll(dlock__my_cell(&r, 0), NULL, 10);
  mysql_free_result(r.rows);
  return held;
}

/* ---- Admin ---- */

static int my_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  char hex[HEX_MAX], sql[1000];
  int rc = dlock__my_full_hex(c, "lock", name, hex);
  if (rc) return rc;
  if (myc(c)->advisory) {
    char full[FULL_MAX], key[48];
    snprintf(full, sizeof full, "%s%s", c->prefix ? c->prefix : "", name);
    dlock__my_adv_key(full, key);
    snprintf(sql, sizeof sql, "SELECT IS_USED_LOCK('%s') IS NOT NULL", key);
    dlock__my_res r;
    rc = dlock__my_run(myc(c), sql, 1, &r);
    if (rc) return rc;
    out->held = !strcmp(dlock__my_cell(&r, 0), "1");
    out->ttl_ms = out->held ? -1 : 0;
    mysql_free_result(r.rows);
    return 0;
  }
  snprintf(sql, sizeof sql,
           "SELECT token <> '' AND expires > " NOW6 ", fence, TIMESTAMPDIFF(MICROSECOND, " NOW6 ", expires) DIV "
           "1000, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', since) DIV 1000, owner_info, token FROM dlock_locks "
           "WHERE name = %s",
           hex);
  dlock__my_res r;
  rc = dlock__my_run(myc(c), sql, 1, &r);
  if (rc) return rc;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  if (row && row[5] && row[5][0] == '*') { /* a semaphore's or read-write lock's (family.c) */
    char marker[40];
    snprintf(marker, sizeof marker, "%s", row[5]);
    out->fence = strtoull(row[1] ? row[1] : "0", NULL, 10);
    mysql_free_result(r.rows);
    return dlock__my_fam_info(myc(c), hex, marker, out);
  }
  if (row) {
    out->held = row[0] && !strcmp(row[0], "1");
    out->fence = strtoull(row[1] ? row[1] : "0", NULL, 10);
    if (out->held) {
      out->ttl_ms = strtoll(row[2] ? row[2] : "0", NULL, 10);
      out->since_unix_ms = strtoll(row[3] ? row[3] : "0", NULL, 10);
      snprintf(out->owner_info, sizeof out->owner_info, "%s", row[4] ? row[4] : "");
    }
  }
  mysql_free_result(r.rows);
  return 0;
}

static int my_list(dlock_client *c, const char *pattern, void (*fn)(const char *name, void *arg), void *arg) {
  if (myc(c)->advisory) return not_advisory(c, "listing the held locks");
  /* The glob ('*', '?') as a LIKE pattern with '!' escaping, sent as hex. */
  char full[FULL_MAX], like[2 * FULL_MAX], hex[4 * FULL_MAX + 8], sql[5 * FULL_MAX + 300];
  snprintf(full, sizeof full, "%s%s", c->prefix ? c->prefix : "", pattern ? pattern : "*");
  size_t o = 0;
  for (const char *p = full; *p; p++) {
    if (*p == '*')
      like[o++] = '%';
    else if (*p == '?')
      like[o++] = '_';
    else {
      if (*p == '%' || *p == '_' || *p == '!') like[o++] = '!';
      like[o++] = *p;
    }
  }
  dlock__my_hex(like, o, hex);
  snprintf(sql, sizeof sql,
           "SELECT name FROM dlock_locks WHERE token <> '' AND expires > " NOW6 " AND name LIKE %s ESCAPE '!' "
           "ORDER BY name",
           hex);
  dlock__my_res r;
  int rc = dlock__my_run(myc(c), sql, 1, &r);
  if (rc) return rc;
  MYSQL_ROW row;
  while ((row = mysql_fetch_row(r.rows)) != NULL)
    if (row[0] && strlen(row[0]) >= c->prefix_len) fn(row[0] + c->prefix_len, arg);
  mysql_free_result(r.rows);
  return 0;
}

static int my_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  (void)flags; /* only dlock's own rows are ever touched */
  if (myc(c)->advisory) return not_advisory(c, "a forced release");
  char hex[HEX_MAX], sql[1000];
  int rc = dlock__my_full_hex(c, "lock", name, hex);
  if (rc) return rc;
  /* A semaphore's or read-write lock's holds first, then the row. */
  int family_held = 0;
  rc = dlock__my_fam_force(myc(c), hex, &family_held);
  if (rc) return rc;
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET owner_info = IF(LAST_INSERT_ID(IF(token <> '' AND expires > " NOW6 ", 2, 1)) > 0, "
           "'', ''), last = CONCAT(token, '!'), token = '', expires = LEAST(expires, " NOW6 ") WHERE name = %s",
           hex);
  dlock__my_res r;
  rc = dlock__my_run(myc(c), sql, 0, &r); /* never twice: it frees whoever holds it */
  if (rc) {
    if (r.maybe_ran)
      return dlock__error(DLOCK_EUNKNOWN, "force release of '%s': %s; look with `dlock status` before trying again",
                          name, dlock_last_error()); /* the message names the server */
    return rc;
  }
  *was_held = (r.affected == 1 && r.insert_id == 2) || family_held;
  return 0;
}

static int my_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest) {
  if (myc(c)->advisory) return not_advisory(c, "the fencing guard");
  char hex[HEX_MAX], sql[1000];
  int rc = dlock__my_full_hex(c, "resource", resource, hex);
  if (rc) return rc;
  /* Admit 'token' unless a higher one was admitted: the row keeps the
   * highest; LAST_INSERT_ID carries it back (0 for a new row). */
  snprintf(sql, sizeof sql,
           "INSERT INTO dlock_guards (resource, fence, updated) VALUES (%s, %" PRIu64 ", " NOW6 ") "
           "ON DUPLICATE KEY UPDATE updated = IF(fence <= %" PRIu64 ", " NOW6 ", updated), "
           "fence = LAST_INSERT_ID(GREATEST(fence, %" PRIu64 "))",
           hex, token, token, token);
  dlock__my_res r;
  rc = dlock__my_run(myc(c), sql, 1, &r);
  if (rc) return rc;
  uint64_t top = r.insert_id > token ? r.insert_id : token;
  if (highest) *highest = top;
  if (top > token)
    return dlock__error(DLOCK_ESTALE,
                        "resource '%s' on %s: fence %" PRIu64 " is stale, %" PRIu64 " was admitted "
                        "before: a newer holder has written, drop this write",
                        resource, c->server, token, top);
  return 0;
}

static const dlock__admin_ops my_admin = {
    .info = my_info,
    .list = my_list,
    .force_release = my_force_release,
    .check = my_check,
    .setup = my_setup,
};

static const dlock__guard_ops my_guard = {.check = my_guard_check};

static const dlock__sched_ops my_sched = {
    .claim = dlock__my_sched_claim,
    .finish = dlock__my_sched_finish,
    .undo = dlock__my_sched_undo,
    .history = dlock__my_sched_history,
    .job_set = dlock__my_job_set,
    .job_get = dlock__my_job_get,
    .job_list = dlock__my_job_list,
    .job_watch = dlock__my_job_watch,
    .job_unwatch = dlock__my_job_unwatch,
};

/* Both modes' table; advisory mode has no scheduler (GET_LOCK keeps no claims). */
#define MY_REQUIRED_OPS                                                                                                \
  .name = "mysql", .unreachable = "MySQL could not be reached in time to renew the lease", .redact = dlock__my_redact, \
  .open = my_open, .close = my_close, .ping = my_ping, .query = dlock__query_none, .lock_new = my_lock_new,            \
  .lock_free = my_lock_free, .acquire = my_acquire, .undo = my_undo, .release = my_release, .extend = my_extend,       \
  .renew = my_renew, .held = my_held, .admin = &my_admin, .guard = &my_guard

/* Elections ride on the lease-mode mutex; proclaim is not there yet. */
static const struct dlock__election_ops my_election = {.proclaim = NULL};

const dlock__backend_ops dlock__mysql_ops = {MY_REQUIRED_OPS, .sched = &my_sched, .election = &my_election};
static const dlock__backend_ops my_advisory_ops = {MY_REQUIRED_OPS};
