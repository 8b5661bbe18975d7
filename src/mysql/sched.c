/*
 * sched.c - the MySQL/MariaDB backend's scheduler claims (docs/mysql.md,
 * "The scheduler"): one row per job in dlock_sched, claimed by one UPDATE
 * on the database's clock (its last tick, the run that has it, the job
 * lock's end, the job's fence counter), and the runs' history in
 * dlock_sched_runs. The run's token makes every statement answer the same
 * when it is sent twice after a lost reply (a claim that ran finds its own
 * token and keeps its fence).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mysql/my_internal.h"

#define NOW6 "UTC_TIMESTAMP(6)"
#define NOW_MS "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', " NOW6 ") DIV 1000)"

static dlock__my *myc(const dlock_client *c) { return (dlock__my *)c->be; }

/* The claim's UPDATE for the job 'hex': the tick and the condition differ
 * between fixed-rate and fixed-delay jobs. Left to right: every column
 * looks at the old run_token, which is set last. */
static int claim_update(dlock_client *c, const dlock__claim *cl, const char *hex, const char *node_hex,
                        dlock__my_res *r) {
  char sql[2400], tick[200], cond[300];
  /* With allow_overlap no job lock keeps the next tick out: a 1 ms lock. */
  int64_t lock_ms = cl->allow_overlap && !cl->delay_ms ? 1 : cl->at_most_ms;
  if (cl->delay_ms) {
    snprintf(tick, sizeof tick,
             "claimed = IF(run_token = '%s', claimed, IF(tick >= 0, tick + %" PRId64 ", " NOW_MS
             ")), tick = IF(run_token = '%s', tick, " NOW_MS ")",
             cl->token, cl->delay_ms, cl->token);
    snprintf(cond, sizeof cond, "lock_expires <= " NOW6 " AND (tick < 0 OR " NOW_MS " >= tick + %" PRId64 ")",
             cl->delay_ms);
  } else {
    snprintf(tick, sizeof tick, "claimed = %" PRId64 ", tick = %" PRId64, cl->tick_ms, cl->tick_ms);
    snprintf(cond, sizeof cond,
             "tick < %" PRId64 " AND lock_expires <= " NOW6 " AND %" PRId64 " - " NOW_MS " <= %" PRId64, cl->tick_ms,
             cl->tick_ms, cl->ahead_ms);
  }
  snprintf(sql, sizeof sql,
           "UPDATE dlock_sched SET fence = IF(run_token = '%s', LAST_INSERT_ID(fence), LAST_INSERT_ID(fence + 1)), "
           "start_ms = IF(run_token = '%s', start_ms, " NOW_MS "), lock_expires = IF(run_token = '%s', lock_expires, "
           "DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND)), %s, node = %s, run_token = '%s' "
           "WHERE job = %s AND (run_token = '%s' OR (%s))",
           cl->token, cl->token, cl->token, lock_ms * 1000, tick, node_hex, cl->token, hex, cl->token, cond);
  return dlock__my_run(myc(c), sql, 1, r);
}

/* A paused job's claimed tick: recorded as skipped, with who and why. */
static int record_skip(dlock_client *c, dlock__claim *cl, const char *hex, const char *node_hex) {
  char out_hex[2 * 64 + 4], sql[1500];
  dlock__my_hex(cl->why, strnlen(cl->why, 63), out_hex);
  snprintf(sql, sizeof sql,
           "INSERT IGNORE INTO dlock_sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, "
           "outcome) VALUES (%s, '%s', %s, 0, %" PRId64 ", %" PRId64 ", -1, %s)",
           hex, cl->token, node_hex, cl->claimed_tick_ms, cl->start_ms, out_hex);
  dlock__my_res r;
  int rc = dlock__my_run(myc(c), sql, 1, &r);
  cl->outcome = DLOCK__CLAIM_PAUSED;
  return rc;
}

int dlock__my_sched_claim(dlock_client *c, dlock__claim *cl) {
  dlock__my *my = myc(c);
  cl->maybe_ran = 0;
  char hex[2 * DLOCK__MY_NAME_MAX + 4], node_hex[2 * 128 + 4], sql[1000];
  int rc = dlock__my_full_hex(c, "job", cl->job, hex);
  if (rc) return rc;
  const char *node = cl->node ? cl->node : "";
  dlock__my_hex(node, strnlen(node, 127), node_hex);
  if (cl->manual) return dlock__my_job_claim_manual(c, cl, hex, node_hex);
  /* The job's state: paused, the tick is claimed without the job lock (a
   * 1 ms one) and recorded as skipped instead of run. */
  if ((rc = dlock__my_job_peek(c, hex, cl->why, sizeof cl->why, &cl->trigger_pending))) return rc;
  dlock__claim paused = *cl;
  if (cl->why[0]) paused.at_most_ms = 1, paused.allow_overlap = 1;
  for (int pass = 0; pass < 2; pass++) {
    dlock__my_res r;
    rc = claim_update(c, &paused, hex, node_hex, &r);
    if (rc) {
      cl->maybe_ran = 1; /* undo frees the job lock if it holds our token */
      dlock__error_prefix("job '%s': ", cl->job);
      return rc;
    }
    if (r.affected == 1) {
      if (r.insert_id == 0 || r.insert_id > (uint64_t)INT64_MAX) {
        cl->maybe_ran = 1;
        return dlock__error(DLOCK_EFENCE, "job '%s' on %s: the claim gave fence %" PRIu64 ", not 1..2^63-1", cl->job,
                            c->server, r.insert_id);
      }
      cl->fence = r.insert_id;
      snprintf(sql, sizeof sql, "SELECT start_ms, claimed FROM dlock_sched WHERE job = %s AND run_token = '%s'", hex,
               cl->token);
      rc = dlock__my_run(my, sql, 1, &r);
      if (rc) {
        cl->maybe_ran = 1;
        return rc;
      }
      MYSQL_ROW row = mysql_fetch_row(r.rows);
      cl->start_ms = row && row[0] ? strtoll(row[0], NULL, 10) : 0;
      cl->claimed_tick_ms = row && row[1] ? strtoll(row[1], NULL, 10) : cl->tick_ms;
      mysql_free_result(r.rows);
      cl->outcome = DLOCK__CLAIM_YOURS;
      if (cl->why[0]) return record_skip(c, cl, hex, node_hex);
      return 0;
    }
    /* Not claimed: why (the row as it is now), or there is no row yet. */
    snprintf(sql, sizeof sql, "SELECT tick, lock_expires > " NOW6 ", node, " NOW_MS " FROM dlock_sched WHERE job = %s",
             hex);
    rc = dlock__my_run(my, sql, 1, &r);
    if (rc) return rc;
    MYSQL_ROW row = mysql_fetch_row(r.rows);
    if (!row) {
      mysql_free_result(r.rows);
      snprintf(sql, sizeof sql, "INSERT IGNORE INTO dlock_sched (job) VALUES (%s)", hex);
      if ((rc = dlock__my_run(my, sql, 1, &r))) return rc;
      continue;
    }
    int64_t tick = strtoll(row[0] ? row[0] : "-1", NULL, 10), now = strtoll(row[3] ? row[3] : "0", NULL, 10);
    int busy = row[1] && row[1][0] == '1';
    snprintf(cl->by, sizeof cl->by, "%s", row[2] ? row[2] : "");
    mysql_free_result(r.rows);
    if (cl->delay_ms) {
      cl->outcome = DLOCK__CLAIM_WAIT;
      cl->wait_ms = busy ? -1 : tick >= 0 && now < tick + cl->delay_ms ? tick + cl->delay_ms - now : 0;
    } else if (cl->tick_ms - now > cl->ahead_ms && tick < cl->tick_ms) {
      cl->outcome = DLOCK__CLAIM_AHEAD;
      cl->server_now_ms = now;
    } else {
      cl->outcome = tick >= cl->tick_ms ? DLOCK__CLAIM_TAKEN : DLOCK__CLAIM_BUSY;
    }
    return 0;
  }
  return dlock__error(DLOCK_EIO, "job '%s' on %s: its row in dlock_sched keeps vanishing", cl->job, c->server);
}

int dlock__my_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours) {
  dlock__my *my = myc(c);
  *lock_was_ours = 0;
  char hex[2 * DLOCK__MY_NAME_MAX + 4], node_hex[2 * 128 + 4], out_hex[2 * 64 + 4], sql[2000];
  int rc = dlock__my_full_hex(c, "job", cl->job, hex);
  if (rc) return rc;
  /* The job lock: kept until lock_at_least_for after the start, ended
   * otherwise; ours only while it has not run out (LAST_INSERT_ID: 2). A
   * fixed-delay job's next run is due 'delay' after this end ('tick'). */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_sched SET lock_expires = IF(LAST_INSERT_ID(IF(lock_expires > " NOW6 ", 2, 1)) = 2, "
           "LEAST(lock_expires, GREATEST(" NOW6 ", DATE_ADD('1970-01-01', INTERVAL (start_ms + %" PRId64 ") * 1000 "
           "MICROSECOND))), lock_expires), tick = IF(%d, " NOW_MS ", tick) WHERE job = %s AND run_token = '%s'",
           cl->at_least_ms, cl->delay_ms ? 1 : 0, hex, cl->token);
  dlock__my_res r;
  rc = dlock__my_run(my, sql, 1, &r);
  if (rc) {
    dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  /* A resent statement may find the lock ended by its first run. */
  *lock_was_ours = (r.affected == 1 && r.insert_id == 2) || r.resent;
  dlock__my_hex(rec->node, strnlen(rec->node, sizeof rec->node), node_hex);
  dlock__my_hex(rec->outcome, strnlen(rec->outcome, 63), out_hex);
  snprintf(sql, sizeof sql,
           "INSERT IGNORE INTO dlock_sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, "
           "outcome) VALUES (%s, '%s', %s, %" PRIu64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s)",
           hex, cl->token, node_hex, rec->fence, rec->scheduled_unix_ms, rec->start_unix_ms, rec->duration_ms, out_hex);
  if ((rc = dlock__my_run(my, sql, 1, &r))) {
    dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  int keep = cl->history_len > 0 ? cl->history_len : 100;
  snprintf(sql, sizeof sql,
           "DELETE FROM dlock_sched_runs WHERE job = %s AND id <= (SELECT id FROM (SELECT id FROM dlock_sched_runs "
           "WHERE job = %s ORDER BY id DESC LIMIT 1 OFFSET %d) t)",
           hex, hex, keep);
  if ((rc = dlock__my_run(my, sql, 1, &r))) dlock__error_prefix("job '%s': ", cl->job);
  return rc;
}

void dlock__my_sched_undo(dlock_client *c, const dlock__claim *cl) {
  char hex[2 * DLOCK__MY_NAME_MAX + 4], sql[900];
  if (dlock__my_full_hex(c, "job", cl->job, hex) == 0) {
    snprintf(sql, sizeof sql,
             "UPDATE dlock_sched SET lock_expires = LEAST(lock_expires, " NOW6 ") WHERE job = %s AND run_token = '%s'",
             hex, cl->token);
    dlock__my_res r;
    (void)dlock__my_run(myc(c), sql, 1, &r);
  }
  dlock__error_clear();
}

int dlock__my_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max) {
  char hex[2 * DLOCK__MY_NAME_MAX + 4], sql[900];
  int rc = dlock__my_full_hex(c, "job", job, hex);
  if (rc) return rc;
  snprintf(sql, sizeof sql,
           "SELECT node, fence, scheduled_ms, start_ms, duration_ms, outcome FROM dlock_sched_runs WHERE job = %s "
           "ORDER BY id DESC LIMIT %d",
           hex, max);
  dlock__my_res r;
  if ((rc = dlock__my_run(myc(c), sql, 1, &r))) return rc;
  int n = 0;
  MYSQL_ROW row;
  while (n < max && (row = mysql_fetch_row(r.rows)) != NULL) {
    dlock_run_record *rec = &out[n++];
    snprintf(rec->node, sizeof rec->node, "%s", row[0] ? row[0] : "");
    rec->fence = strtoull(row[1] ? row[1] : "0", NULL, 10);
    rec->scheduled_unix_ms = strtoll(row[2] ? row[2] : "0", NULL, 10);
    rec->start_unix_ms = strtoll(row[3] ? row[3] : "0", NULL, 10);
    rec->duration_ms = strtoll(row[4] ? row[4] : "0", NULL, 10);
    snprintf(rec->outcome, sizeof rec->outcome, "%s", row[5] ? row[5] : "");
  }
  mysql_free_result(r.rows);
  return n;
}
