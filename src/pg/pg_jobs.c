/*
 * pg_jobs.c - a scheduled job's state on PostgreSQL (dlock job pause,
 * resume, trigger; backend.h's job_* slots): the sched_jobs table and the
 * functions sched_job_set(), sched_claim_job() and sched_claim_delay_job()
 * of pg_sql.c. A change is notified on the schema's channel as "<job> job";
 * a running scheduler hears it on the LISTEN connection (pg_lock.c,
 * dlock__pg_job_watch_add) and claims a pending trigger like a tick.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/pg_internal.h"

int dlock__pg_job_claim(dlock__pg *pg, const char *job, dlock__claim *cl, int64_t lock_ms, int *outcome,
                        uint64_t *fence, int64_t *start_ms, int64_t *skew_ms) {
  int rc = dlock__pg_check_name(pg, "job name", job);
  if (rc) return rc;
  char sql[400], tick[24], lk[24], tol[24], keep[24];
  /* set_config(..., true): this transaction commits synchronously, so a
   * crash cannot lose a fence already handed out (works through poolers). */
  snprintf(sql, sizeof sql,
           "SELECT outcome, fence, start_ms, skew_ms, why, pending, trig, set_config('synchronous_commit', 'on', "
           "true) FROM \"%s\".sched_claim_job($1, $2::bigint, $3, $4, $5::bigint, $6::bigint, $7::int, $8::boolean)",
           pg->schema);
  NUM(tick, cl->tick_ms);
  NUM(lk, lock_ms);
  NUM(tol, cl->ahead_ms);
  NUM(keep, cl->history_len > 0 ? cl->history_len : 100);
  const char *vals[8] = {job, tick, cl->token, cl->node ? cl->node : "", lk, tol, keep, cl->manual ? "true" : "false"};
  PGresult *r = NULL;
  /* Twice-safe: the run token makes a second call answer as the first. */
  rc = dlock__pg_run(pg, sql, 8, vals, 0, 1, &r, NULL, NULL);
  if (rc) return rc;
  *outcome = (int)col_i64(r, 0, 0);
  *fence = PQgetisnull(r, 0, 1) ? 0 : (uint64_t)col_i64(r, 0, 1);
  *start_ms = col_i64(r, 0, 2);
  *skew_ms = col_i64(r, 0, 3);
  snprintf(cl->why, sizeof cl->why, "%s", PQgetvalue(r, 0, 4));
  cl->trigger_pending = col_bool(r, 0, 5);
  if (cl->manual) cl->claimed_tick_ms = col_i64(r, 0, 6);
  PQclear(r);
  return 0;
}

int dlock__pg_job_set(dlock__pg *pg, const char *job, int op, const char *by, const char *reason, const char *id) {
  int rc = dlock__pg_check_name(pg, "job name", job);
  if (rc) return rc;
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT \"%s\".sched_job_set($1, $2, $3, $4, $5, $6)", pg->schema);
  const char *vals[6] = {job, op == DLOCK__JOB_PAUSE ? "pause" : op == DLOCK__JOB_RESUME ? "resume" : "trigger",
                         by,  reason,
                         id,  pg->channel};
  PGresult *r = NULL;
  /* Twice-safe: a pause or resume sent again changes nothing more; a trigger
   * names its id, which a second send finds pending or claimed. */
  rc = dlock__pg_run(pg, sql, 6, vals, 0, 1, &r, NULL, NULL);
  if (rc) return rc;
  rc = (int)col_i64(r, 0, 0);
  PQclear(r);
  return rc;
}

int dlock__pg_job_get(dlock__pg *pg, const char *job, dlock_job_state *out) {
  int rc = dlock__pg_check_name(pg, "job name", job);
  if (rc) return rc;
  char sql[200];
  snprintf(sql, sizeof sql,
           "SELECT paused_by, paused_reason, paused_ms, trig_id IS NOT NULL, trig_by, trig_ms FROM \"%s\".sched_jobs "
           "WHERE job = $1",
           pg->schema);
  const char *vals[1] = {job};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, sql, 1, vals, 0, 1, &r, NULL, NULL);
  if (rc) return rc;
  if (PQntuples(r) == 1) {
    if (!PQgetisnull(r, 0, 0)) {
      out->paused = 1;
      snprintf(out->paused_by, sizeof out->paused_by, "%s", PQgetvalue(r, 0, 0));
      snprintf(out->paused_reason, sizeof out->paused_reason, "%s", PQgetvalue(r, 0, 1));
      out->paused_unix_ms = col_i64(r, 0, 2);
    }
    if (col_bool(r, 0, 3)) {
      out->trigger_pending = 1;
      snprintf(out->trigger_by, sizeof out->trigger_by, "%s", PQgetvalue(r, 0, 4));
      out->trigger_unix_ms = col_i64(r, 0, 5);
    }
  }
  PQclear(r);
  return 0;
}

int dlock__pg_job_list(dlock__pg *pg, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  char sql[300];
  snprintf(sql, sizeof sql,
           "SELECT job FROM \"%s\".sched_jobs WHERE job LIKE $1 UNION SELECT job FROM \"%s\".sched_ticks "
           "WHERE job LIKE $1",
           pg->schema, pg->schema);
  char *like = dlock__pg_like(pattern);
  if (!like) return dlock__error(DLOCK_ENOMEM, "out of memory");
  const char *vals[1] = {like};
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, sql, 1, vals, 0, 1, &r, NULL, NULL);
  free(like);
  if (rc) return rc;
  int n = PQntuples(r);
  for (int i = 0; i < n; i++) fn(PQgetvalue(r, i, 0), arg);
  PQclear(r);
  return n;
}
