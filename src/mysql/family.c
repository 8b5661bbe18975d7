/*
 * family.c - the MySQL/MariaDB backend's semaphores and read-write locks in
 * lease mode (docs/mysql.md, "Semaphores and read-write locks"), decided on
 * the database's clock as the mutex is.
 *
 * The name's row in dlock_locks is the family's too: every statement on a
 * name's holds runs in a transaction that locks that row first, so they
 * take turns; its fence column is the name's one fence counter (a
 * semaphore's permits and a lock's readers and writer all draw from it),
 * and while a hold is live the row carries a marker token ('*s:<limit>' or
 * '*r') with an expiry no earlier than any hold's, so the mutex's acquire
 * (which takes a row whose token is free or whose lease ran out) never
 * takes a name held as another kind. dlock_holds has one row per hold;
 * dlock_waiters one per waiter, kept live by the waiter's own tries (a
 * heartbeat in 'expires'), in arrival order ('seq'): free permits go to
 * the first waiters, a writer waits for every hold and every waiter ahead,
 * a reader for the writer and the writers queued ahead.
 *
 * Every transaction decides by the hold's token, so a lost reply is
 * answered by running it once more (an acquire that committed finds its
 * own hold and keeps its fence; a release finds the trace in 'released').
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mysql/my_internal.h"

#define NOW6 "UTC_TIMESTAMP(6)"
/* A waiter not seen for this long is gone (it refreshes at every try). */
#define WAITER_TTL_MS 3000
/* Sizes: a name as X'..' is at most 514 bytes, an owner 2052. */
#define SQL_MAX 4000

typedef struct acq {
  const dlock__my_fam *f;
  dlock__my *my;
  int queue;
  /* out */
  int norow, taken;
  uint64_t fence;
  int64_t live, first_ttl;
} acq;

static const char *kind_of(const char *marker) { return marker[1] == 's' ? "semaphore" : "read-write lock"; }

static int fam_acquire_tx(dlock__my_tx *tx, void *arg) {
  acq *a = arg;
  const dlock__my_fam *f = a->f;
  dlock__my *my = a->my;
  char sql[SQL_MAX];
  dlock__my_res r;
  snprintf(sql, sizeof sql, "SELECT token, expires > " NOW6 ", fence FROM dlock_locks WHERE name = %s FOR UPDATE",
           f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  if (!row) {
    mysql_free_result(r.rows);
    a->norow = 1;
    return DLOCK_EBUSY; /* rolled back; the caller makes the row */
  }
  char marker[40];
  snprintf(marker, sizeof marker, "%s", row[0] ? row[0] : "");
  int row_live = row[1] && row[1][0] == '1';
  mysql_free_result(r.rows);
  if (row_live && marker[0] && marker[0] != '*')
    return dlock__error(DLOCK_EWRONGTYPE,
                        "'%s' on %s is held as a mutex: a name is one kind of lock at a time "
                        "(use another name for the %s)",
                        f->name, my->display, f->side == 'p' ? "semaphore" : "read-write lock");
  /* Ended holds and gone waiters, a minute after their end. */
  snprintf(sql, sizeof sql, "DELETE FROM dlock_holds WHERE name = %s AND expires < " NOW6 " - INTERVAL 1 MINUTE",
           f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  snprintf(sql, sizeof sql, "DELETE FROM dlock_waiters WHERE name = %s AND expires < " NOW6 " - INTERVAL 1 MINUTE",
           f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  snprintf(sql, sizeof sql,
           "SELECT token, side, fence, released = 0 AND expires > " NOW6 ", TIMESTAMPDIFF(MICROSECOND, " NOW6
           ", expires) DIV 1000 FROM dlock_holds WHERE name = %s",
           f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  int own = 0, shadow = 0, writer = 0;
  uint64_t own_fence = 0;
  a->first_ttl = -1;
  while ((row = mysql_fetch_row(r.rows)) != NULL) {
    if (!row[3] || row[3][0] != '1') continue;
    a->live++;
    int64_t ttl = strtoll(row[4] ? row[4] : "0", NULL, 10);
    if (a->first_ttl < 0 || ttl < a->first_ttl) a->first_ttl = ttl;
    if (!strcmp(row[0], f->token)) {
      own = 1;
      own_fence = strtoull(row[2], NULL, 10);
    }
    if (f->shadow && !strcmp(row[0], f->shadow)) shadow = 1;
    if (row[1][0] == 'w') writer = 1;
  }
  mysql_free_result(r.rows);
  if (own) { /* sent again after a lost reply: the hold it made */
    snprintf(sql, sizeof sql,
             "UPDATE dlock_holds SET expires = DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND) "
             "WHERE name = %s AND token = '%s'",
             f->lease_ms * 1000, f->hname, f->token);
    if (dlock__my_tx_run(tx, sql, &r)) return 1;
    a->taken = 1;
    a->fence = own_fence;
  }
  char want[40];
  if (f->side == 'p')
    snprintf(want, sizeof want, "*s:%d", f->permits);
  else
    snprintf(want, sizeof want, "*r");
  if (!own && a->live > 0 && marker[0] == '*') {
    if ((marker[1] == 's') != (f->side == 'p'))
      return dlock__error(DLOCK_EWRONGTYPE, "'%s' on %s is held as a %s: a name is one kind of lock at a time", f->name,
                          my->display, kind_of(marker));
    if (f->side == 'p' && strcmp(marker, want) != 0)
      return dlock__error(DLOCK_ELIMIT,
                          "semaphore '%s' on %s has %s permits (stored by its holders), but this "
                          "caller asks for %d: every holder of a name must give the same limit",
                          f->name, my->display, marker + 3, f->permits);
  }
  if (!own) {
    /* The queue: live waiters ahead of this caller (by arrival). */
    snprintf(sql, sizeof sql,
             "SELECT token, side, seq FROM dlock_waiters WHERE name = %s AND expires > " NOW6 " ORDER BY seq",
             f->hname);
    if (dlock__my_tx_run(tx, sql, &r)) return 1;
    uint64_t my_seq = UINT64_MAX;
    while ((row = mysql_fetch_row(r.rows)) != NULL)
      if (!strcmp(row[0], f->token)) my_seq = strtoull(row[2], NULL, 10);
    int64_t ahead = 0, writers_ahead = 0;
    mysql_data_seek(r.rows, 0);
    while ((row = mysql_fetch_row(r.rows)) != NULL) {
      if (!strcmp(row[0], f->token) || strtoull(row[2], NULL, 10) >= my_seq) continue;
      ahead++;
      if (row[1][0] == 'w') writers_ahead++;
    }
    mysql_free_result(r.rows);
    int ok;
    if (shadow)
      ok = 1; /* this thread's other hold of the name stands: the read goes at once */
    else if (f->side == 'p')
      ok = a->live + ahead < f->permits;
    else if (f->side == 'w')
      ok = a->live == 0 && ahead == 0;
    else
      ok = !writer && writers_ahead == 0;
    if (!ok) {
      if (a->queue) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO dlock_waiters (name, token, side, expires) VALUES (%s, '%s', '%c', DATE_ADD(" NOW6
                 ", INTERVAL %d MICROSECOND)) ON DUPLICATE KEY UPDATE expires = VALUES(expires)",
                 f->hname, f->token, f->side, WAITER_TTL_MS * 1000);
        if (dlock__my_tx_run(tx, sql, &r)) return 1;
      }
      return 0; /* committed: not taken (the waiter's row stays) */
    }
    snprintf(sql, sizeof sql, "UPDATE dlock_locks SET fence = LAST_INSERT_ID(fence + 1) WHERE name = %s", f->hname);
    if (dlock__my_tx_run(tx, sql, &r)) return 1;
    a->fence = r.insert_id;
    if (a->fence == 0 || a->fence > (uint64_t)INT64_MAX)
      return dlock__error(DLOCK_EFENCE, "'%s' on %s: the fence counter gave %" PRIu64 ", not 1..2^63-1", f->name,
                          my->display, a->fence);
    snprintf(sql, sizeof sql,
             "INSERT INTO dlock_holds (name, token, side, fence, expires, since, released, owner_info) VALUES "
             "(%s, '%s', '%c', %" PRIu64 ", DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND), " NOW6 ", 0, %s) "
             "ON DUPLICATE KEY UPDATE side = VALUES(side), fence = VALUES(fence), expires = VALUES(expires), "
             "since = VALUES(since), released = 0, owner_info = VALUES(owner_info)",
             f->hname, f->token, f->side, a->fence, f->lease_ms * 1000, f->owner_hex);
    if (dlock__my_tx_run(tx, sql, &r)) return 1;
    a->taken = 1;
  }
  /* The row: the marker, and an expiry no earlier than this hold's. */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET since = IF(token = '%s' AND expires > " NOW6 ", since, " NOW6 "), "
           "expires = GREATEST(IF(token = '%s', expires, " NOW6 "), DATE_ADD(" NOW6 ", INTERVAL %" PRId64
           " MICROSECOND)), token = '%s' WHERE name = %s",
           want, want, f->lease_ms * 1000, want, f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  snprintf(sql, sizeof sql, "DELETE FROM dlock_waiters WHERE name = %s AND token = '%s'", f->hname, f->token);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  return 0;
}

int dlock__my_fam_try(dlock__my *my, const dlock__my_fam *f, int queue, uint64_t *fence, char *busy, size_t len,
                      int *maybe_ran) {
  for (int tries = 0; tries < 3; tries++) {
    acq a = {.f = f, .my = my, .queue = queue};
    int rc = dlock__my_txn(my, fam_acquire_tx, &a, NULL, maybe_ran);
    if (a.norow) {
      /* The name's first use: its row (the fence counter, from 0), then again. */
      char sql[700];
      dlock__my_res r;
      dlock__error_clear();
      snprintf(sql, sizeof sql, "INSERT IGNORE INTO dlock_locks (name) VALUES (%s)", f->hname);
      rc = dlock__my_run(my, sql, 1, &r);
      if (rc) return rc;
      continue;
    }
    if (rc) return rc;
    if (a.taken) {
      *fence = a.fence;
      return 1;
    }
    if (f->side == 'p')
      snprintf(busy, len, "all %d permits of semaphore '%s' on %s are held (the first lease ends in %" PRId64 " ms)",
               f->permits, f->name, my->display, a.first_ttl);
    else
      snprintf(busy, len,
               "read-write lock '%s' on %s is held (%" PRId64 " hold%s%s; the first lease ends in %" PRId64 " ms)",
               f->name, my->display, a.live, a.live == 1 ? "" : "s", a.live == 0 ? ", and a writer waits ahead" : "",
               a.first_ttl);
    return 0;
  }
  return dlock__error(DLOCK_EIO, "'%s' on %s: its row in dlock_locks keeps vanishing", f->name, my->display);
}

void dlock__my_fam_unqueue(dlock__my *my, const dlock__my_fam *f) {
  char sql[700];
  dlock__my_res r;
  snprintf(sql, sizeof sql, "DELETE FROM dlock_waiters WHERE name = %s AND token = '%s'", f->hname, f->token);
  (void)dlock__my_run(my, sql, 1, &r);
}

typedef struct rel {
  const dlock__my_fam *f;
  int changed, released; /* rows the release changed; the hold's 'released' after it (0: no row) */
  int64_t lease_ms;      /* extend: the new lease */
} rel;

static int lock_row(dlock__my_tx *tx, const dlock__my_fam *f) {
  char sql[700];
  dlock__my_res r;
  snprintf(sql, sizeof sql, "SELECT 1 FROM dlock_locks WHERE name = %s FOR UPDATE", f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  mysql_free_result(r.rows);
  return 0;
}

/* The hold's 'released' into x->released (0: no row). */
static int read_released(dlock__my_tx *tx, rel *x) {
  char sql[900];
  dlock__my_res r;
  snprintf(sql, sizeof sql, "SELECT released FROM dlock_holds WHERE name = %s AND token = '%s'", x->f->hname,
           x->f->token);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  x->released = atoi(dlock__my_cell(&r, 0));
  mysql_free_result(r.rows);
  return 0;
}

static int fam_release_tx(dlock__my_tx *tx, void *arg) {
  rel *x = arg;
  const dlock__my_fam *f = x->f;
  char sql[1600];
  dlock__my_res r;
  if (lock_row(tx, f)) return 1;
  snprintf(sql, sizeof sql,
           "UPDATE dlock_holds SET released = IF(expires > " NOW6 ", 1, 2), expires = LEAST(expires, " NOW6 ") "
           "WHERE name = %s AND token = '%s' AND released = 0",
           f->hname, f->token);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  x->changed = (int)r.affected;
  if (read_released(tx, x)) return 1;
  /* The row: free once no hold is left, else until the last one ends.
   * Left to right: the token looks at the new expiry. */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks l SET l.expires = COALESCE((SELECT MAX(h.expires) FROM dlock_holds h WHERE h.name = "
           "l.name AND h.released = 0 AND h.expires > " NOW6 "), LEAST(l.expires, " NOW6 ")), "
           "l.token = IF(l.expires > " NOW6 ", l.token, '') WHERE l.name = %s AND l.token LIKE '*%%'",
           f->hname);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  return 0;
}

int dlock__my_fam_release(dlock__my *my, const dlock__my_fam *f) {
  rel x = {.f = f};
  int resent = 0, maybe_ran = 0;
  int rc = dlock__my_txn(my, fam_release_tx, &x, &resent, &maybe_ran);
  if (rc) {
    if (maybe_ran)
      return dlock__error(DLOCK_EUNKNOWN, "release of '%s': %s; the hold ends by its lease at the latest", f->name,
                          dlock_last_error()); /* the message names the server */
    return rc;
  }
  /* Changed now, or by the first copy of a statement sent twice. */
  if (x.changed == 1 || resent) {
    if (x.released == 1) return 0;
    if (x.released == 2)
      return dlock__error(DLOCK_ENOTHELD, "'%s' on %s: its lease had run out before the release", f->name, my->display);
  }
  if (x.released == 3)
    return dlock__error(DLOCK_ENOTHELD, "'%s' on %s: the hold had been force-released (dlock release --force)", f->name,
                        my->display);
  return dlock__error(DLOCK_ENOTHELD,
                      "'%s' on %s is no longer held by this owner: its lease ran out or it was "
                      "freed",
                      f->name, my->display);
}

static int fam_extend_tx(dlock__my_tx *tx, void *arg) {
  rel *x = arg;
  char sql[1600];
  dlock__my_res r;
  if (lock_row(tx, x->f)) return 1;
  snprintf(sql, sizeof sql,
           "UPDATE dlock_holds SET expires = DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND) "
           "WHERE name = %s AND token = '%s' AND released = 0 AND expires > " NOW6,
           x->lease_ms * 1000, x->f->hname, x->f->token);
  if (dlock__my_tx_run(tx, sql, &r)) return 1;
  x->changed = (int)r.affected;
  if (x->changed == 0) return read_released(tx, x);
  snprintf(sql, sizeof sql,
           "UPDATE dlock_locks SET expires = GREATEST(expires, DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND)) "
           "WHERE name = %s AND token LIKE '*%%'",
           x->lease_ms * 1000, x->f->hname);
  return dlock__my_tx_run(tx, sql, &r);
}

int dlock__my_fam_extend(dlock__my *my, const dlock__my_fam *f, int64_t lease_ms, dlock_lost_reason *lost) {
  rel x = {.f = f, .lease_ms = lease_ms};
  int rc = dlock__my_txn(my, fam_extend_tx, &x, NULL, NULL);
  if (rc) return rc;
  if (x.changed >= 1) return 0;
  *lost = x.released == 3 ? DLOCK_LOST_DELETED : DLOCK_LOST_EXPIRED;
  return dlock__error(DLOCK_ELOST, "'%s' on %s is no longer held by this owner (%s)", f->name, my->display,
                      x.released == 3 ? "it was force-released" : "its lease ran out or it was freed");
}

int dlock__my_fam_held(dlock__my *my, const dlock__my_fam *f, int64_t *ttl_ms) {
  char sql[900];
  snprintf(sql, sizeof sql,
           "SELECT TIMESTAMPDIFF(MICROSECOND, " NOW6 ", expires) DIV 1000 FROM dlock_holds "
           "WHERE name = %s AND token = '%s' AND released = 0 AND expires > " NOW6,
           f->hname, f->token);
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 1, &r);
  if (rc) return rc;
  int held = mysql_num_rows(r.rows) == 1;
  if (held && ttl_ms) *ttl_ms = strtoll(dlock__my_cell(&r, 0), NULL, 10);
  mysql_free_result(r.rows);
  return held;
}

int dlock__my_fam_info(dlock__my *my, const char *hname, const char *marker, dlock_lock_info *out) {
  char sql[1600];
  snprintf(sql, sizeof sql,
           "SELECT COUNT(*), COALESCE(SUM(side = 'w'), 0), COALESCE(SUM(side = 'r'), 0), "
           "TIMESTAMPDIFF(MICROSECOND, " NOW6 ", MAX(expires)) DIV 1000, "
           "(SELECT COUNT(*) FROM dlock_waiters w WHERE w.name = %s AND w.expires > " NOW6 "), "
           "(SELECT COUNT(*) FROM dlock_waiters w WHERE w.name = %s AND w.expires > " NOW6 " AND w.side = 'w') "
           "FROM dlock_holds WHERE name = %s AND released = 0 AND expires > " NOW6,
           hname, hname, hname);
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 1, &r);
  if (rc) return rc;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  int64_t live = 0;
  if (row) {
    live = strtoll(row[0] ? row[0] : "0", NULL, 10);
    out->writer = row[1] && strtoll(row[1], NULL, 10) > 0;
    out->readers = strtoll(row[2] ? row[2] : "0", NULL, 10);
    out->ttl_ms = live ? strtoll(row[3] ? row[3] : "0", NULL, 10) : 0;
    out->waiters = strtoll(row[4] ? row[4] : "0", NULL, 10);
    out->waiting_writers = strtoll(row[5] ? row[5] : "0", NULL, 10);
  }
  mysql_free_result(r.rows);
  out->held = live > 0;
  if (marker[1] == 's') {
    out->permits = live > 0 ? strtoll(marker + 3, NULL, 10) : 0;
    out->permits_used = live;
  } else {
    out->rwlock = live > 0;
  }
  out->since_unix_ms = 0;
  out->owner_info[0] = '\0';
  if (live == 0) return 0;
  /* The newest holder's (the writer's, when there is one). */
  snprintf(sql, sizeof sql,
           "SELECT fence, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', since) DIV 1000, owner_info FROM dlock_holds "
           "WHERE name = %s AND released = 0 AND expires > " NOW6 " ORDER BY side = 'w' DESC, fence DESC LIMIT 1",
           hname);
  rc = dlock__my_run(my, sql, 1, &r);
  if (rc) return rc;
  row = mysql_fetch_row(r.rows);
  if (row) {
    out->fence = strtoull(row[0] ? row[0] : "0", NULL, 10);
    out->since_unix_ms = strtoll(row[1] ? row[1] : "0", NULL, 10);
    snprintf(out->owner_info, sizeof out->owner_info, "%s", row[2] ? row[2] : "");
  }
  mysql_free_result(r.rows);
  return 0;
}

int dlock__my_fam_force(dlock__my *my, const char *hname, int *was_held) {
  char sql[900];
  snprintf(sql, sizeof sql,
           "UPDATE dlock_holds SET released = 3, expires = LEAST(expires, " NOW6 ") WHERE name = %s AND released = 0 "
           "AND expires > " NOW6,
           hname);
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 0, &r); /* never twice: it frees whoever holds it */
  if (rc) return rc;
  *was_held = r.affected > 0;
  return 0;
}
