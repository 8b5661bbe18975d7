/*
 * jobs.c - a scheduled job's state on MySQL/MariaDB (dlock job pause,
 * resume, trigger; backend.h's job_* slots): one row per job operated in
 * dlock_sched_jobs (its pause with who, why and when; the pending manual
 * trigger; the last claimed one, so that a trigger or a claim sent twice
 * answers as the first). Claims (sched.c) read it: a paused tick is
 * consumed and recorded as skipped, a trigger is claimed like a tick under
 * the job lock of dlock_sched. MySQL has no notification: a running
 * scheduler re-reads the state every JOB_REREAD_MS (job_watch).
 */
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mysql/my_internal.h"

#define NOW6 "UTC_TIMESTAMP(6)"
#define NOW_MS "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', " NOW6 ") DIV 1000)"
#define JOB_REREAD_MS 1000

static dlock__my *myc(const dlock_client *c) { return (dlock__my *)c->be; }

/* A text value as a hex literal (at most 'max' bytes of it). */
#define HEX_OF(buf, s, max) dlock__my_hex((s), strnlen((s), (max)), (buf))

int dlock__my_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id) {
  dlock__my *my = myc(c);
  char hex[2 * DLOCK__MY_NAME_MAX + 4], by_hex[2 * 128 + 4], why_hex[2 * 256 + 4], id_hex[2 * 32 + 4], sql[2000];
  int rc = dlock__my_full_hex(c, "job", job, hex);
  if (rc) return rc;
  HEX_OF(by_hex, by, 127);
  HEX_OF(why_hex, reason, 255);
  HEX_OF(id_hex, id, 32);
  dlock__my_res r;
  if (op == DLOCK__JOB_TRIGGER) {
    /* A second send finds its id pending or claimed. */
    snprintf(sql, sizeof sql,
             "SELECT COUNT(*) FROM dlock_sched_jobs WHERE job = %s AND (trig_id = %s OR manual_id = %s)", hex, id_hex,
             id_hex);
    if ((rc = dlock__my_run(my, sql, 1, &r))) return rc;
    int seen = atoi(dlock__my_cell(&r, 0));
    mysql_free_result(r.rows);
    if (seen) return 1;
  }
  /* A new row is the change; else the update where there is something to do. */
  if (op == DLOCK__JOB_PAUSE)
    snprintf(
        sql, sizeof sql,
        "INSERT IGNORE INTO dlock_sched_jobs (job, paused_by, paused_reason, paused_ms) VALUES (%s, %s, %s, " NOW_MS
        ")",
        hex, by_hex, why_hex);
  else if (op == DLOCK__JOB_TRIGGER)
    snprintf(sql, sizeof sql,
             "INSERT IGNORE INTO dlock_sched_jobs (job, trig_by, trig_id, trig_ms) VALUES (%s, %s, %s, " NOW_MS ")",
             hex, by_hex, id_hex);
  if (op != DLOCK__JOB_RESUME) {
    if ((rc = dlock__my_run(my, sql, 1, &r))) return rc;
    if (r.affected == 1) return 1;
  }
  if (op == DLOCK__JOB_PAUSE)
    snprintf(sql, sizeof sql,
             "UPDATE dlock_sched_jobs SET paused_by = %s, paused_reason = %s, paused_ms = " NOW_MS
             " WHERE job = %s AND paused_by IS NULL",
             by_hex, why_hex, hex);
  else if (op == DLOCK__JOB_RESUME)
    snprintf(sql, sizeof sql,
             "UPDATE dlock_sched_jobs SET paused_by = NULL, paused_reason = NULL, paused_ms = NULL WHERE job = %s AND "
             "paused_by IS NOT NULL",
             hex);
  else
    snprintf(sql, sizeof sql,
             "UPDATE dlock_sched_jobs SET trig_by = %s, trig_id = %s, trig_ms = " NOW_MS
             " WHERE job = %s AND trig_id IS NULL",
             by_hex, id_hex, hex);
  if ((rc = dlock__my_run(my, sql, 1, &r))) return rc;
  return r.affected == 1;
}

int dlock__my_job_get(dlock_client *c, const char *job, dlock_job_state *out) {
  char hex[2 * DLOCK__MY_NAME_MAX + 4], sql[800];
  int rc = dlock__my_full_hex(c, "job", job, hex);
  if (rc) return rc;
  snprintf(sql, sizeof sql,
           "SELECT paused_by, paused_reason, paused_ms, trig_id, trig_by, trig_ms FROM dlock_sched_jobs WHERE job = %s",
           hex);
  dlock__my_res r;
  if ((rc = dlock__my_run(myc(c), sql, 1, &r))) return rc;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  if (row && row[0]) {
    out->paused = 1;
    snprintf(out->paused_by, sizeof out->paused_by, "%s", row[0]);
    snprintf(out->paused_reason, sizeof out->paused_reason, "%s", row[1] ? row[1] : "");
    out->paused_unix_ms = row[2] ? strtoll(row[2], NULL, 10) : 0;
  }
  if (row && row[3]) {
    out->trigger_pending = 1;
    snprintf(out->trigger_by, sizeof out->trigger_by, "%s", row[4] ? row[4] : "");
    out->trigger_unix_ms = row[5] ? strtoll(row[5], NULL, 10) : 0;
  }
  mysql_free_result(r.rows);
  return 0;
}

int dlock__my_job_peek(dlock_client *c, const char *hex, char *why, size_t whylen, int *pending) {
  char sql[800];
  why[0] = '\0';
  *pending = 0;
  snprintf(sql, sizeof sql, "SELECT paused_by, paused_reason, trig_id IS NOT NULL FROM dlock_sched_jobs WHERE job = %s",
           hex);
  dlock__my_res r;
  int rc = dlock__my_run(myc(c), sql, 1, &r);
  if (rc == DLOCK_ENOPERM) { /* a user granted only the older tables: no job is paused (docs/mysql.md) */
    dlock__error_clear();
    return 0;
  }
  if (rc) return rc;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  if (row && row[0])
    snprintf(why, whylen, "skipped: paused by %s%s%s", row[0], row[1] && *row[1] ? ": " : "", row[1] ? row[1] : "");
  *pending = row && row[2] && row[2][0] == '1';
  mysql_free_result(r.rows);
  return 0;
}

int dlock__my_job_claim_manual(dlock_client *c, dlock__claim *cl, const char *hex, const char *node_hex) {
  dlock__my *my = myc(c);
  char sql[2000], id_hex[2 * 32 + 4];
  snprintf(sql, sizeof sql,
           "SELECT trig_id, trig_ms, manual_token = '%s', manual_fence, manual_start, manual_ms FROM dlock_sched_jobs "
           "WHERE job = %s",
           cl->token, hex);
  dlock__my_res r;
  int rc = dlock__my_run(my, sql, 1, &r);
  if (rc) return rc;
  MYSQL_ROW row = mysql_fetch_row(r.rows);
  cl->outcome = DLOCK__CLAIM_NONE;
  if (row && row[2] && row[2][0] == '1') { /* a second send: the first one claimed it */
    cl->outcome = DLOCK__CLAIM_YOURS;
    cl->fence = strtoull(row[3] ? row[3] : "0", NULL, 10);
    cl->start_ms = row[4] ? strtoll(row[4], NULL, 10) : 0;
    cl->claimed_tick_ms = row[5] ? strtoll(row[5], NULL, 10) : 0;
  }
  int pending = row && row[0] && cl->outcome == DLOCK__CLAIM_NONE;
  if (pending) {
    HEX_OF(id_hex, row[0], 32);
    cl->claimed_tick_ms = row[1] ? strtoll(row[1], NULL, 10) : 0;
  }
  mysql_free_result(r.rows);
  if (!pending) return 0;
  /* The job lock and a fence, as a tick's claim takes them, leaving the
   * tick alone (the run token makes a second send keep its fence). */
  int64_t lock_ms = cl->allow_overlap ? 1 : cl->at_most_ms;
  snprintf(sql, sizeof sql,
           "UPDATE dlock_sched SET fence = IF(run_token = '%s', LAST_INSERT_ID(fence), LAST_INSERT_ID(fence + 1)), "
           "start_ms = IF(run_token = '%s', start_ms, " NOW_MS "), lock_expires = IF(run_token = '%s', lock_expires, "
           "DATE_ADD(" NOW6 ", INTERVAL %" PRId64 " MICROSECOND)), node = %s, run_token = '%s' "
           "WHERE job = %s AND (run_token = '%s' OR lock_expires <= " NOW6 ")",
           cl->token, cl->token, cl->token, lock_ms * 1000, node_hex, cl->token, hex, cl->token);
  for (int pass = 0; pass < 2; pass++) {
    if ((rc = dlock__my_run(my, sql, 1, &r))) {
      cl->maybe_ran = 1;
      return rc;
    }
    if (r.affected == 1 || pass) break;
    char ins[600];
    snprintf(ins, sizeof ins, "INSERT IGNORE INTO dlock_sched (job) VALUES (%s)", hex);
    if ((rc = dlock__my_run(my, ins, 1, &r))) return rc;
    if (r.affected != 1) break; /* the row was there: a run holds the lock */
  }
  if (r.affected != 1) {
    cl->outcome = DLOCK__CLAIM_BUSY; /* the trigger stays pending */
    return 0;
  }
  cl->fence = r.insert_id;
  snprintf(sql, sizeof sql, "SELECT start_ms FROM dlock_sched WHERE job = %s AND run_token = '%s'", hex, cl->token);
  if ((rc = dlock__my_run(my, sql, 1, &r))) {
    cl->maybe_ran = 1;
    return rc;
  }
  cl->start_ms = strtoll(dlock__my_cell(&r, 0), NULL, 10);
  mysql_free_result(r.rows);
  /* The trigger is ours if it is still the one read (one winner). */
  snprintf(sql, sizeof sql,
           "UPDATE dlock_sched_jobs SET manual_id = trig_id, manual_ms = trig_ms, manual_token = '%s', manual_fence = "
           "%" PRIu64 ", manual_start = %" PRId64 ", trig_id = NULL, trig_by = NULL, trig_ms = NULL "
           "WHERE job = %s AND trig_id = %s",
           cl->token, cl->fence, cl->start_ms, hex, id_hex);
  if ((rc = dlock__my_run(my, sql, 1, &r))) {
    cl->maybe_ran = 1;
    return rc;
  }
  if (r.affected == 1 || r.resent) {
    cl->outcome = DLOCK__CLAIM_YOURS;
  } else {
    cl->maybe_ran = 1; /* another took it: free the job lock (undo) */
    cl->outcome = DLOCK__CLAIM_NONE;
    dlock__my_sched_undo(c, cl);
    cl->maybe_ran = 0;
  }
  return 0;
}

int dlock__my_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  dlock__my_res r;
  int rc = dlock__my_run(myc(c), "SELECT job FROM dlock_sched_jobs UNION SELECT job FROM dlock_sched", 1, &r);
  if (rc) return rc;
  int n = 0;
  MYSQL_ROW row;
  size_t plen = c->prefix_len;
  while ((row = mysql_fetch_row(r.rows)) != NULL) {
    if (!row[0] || strlen(row[0]) < plen || (plen && strncmp(row[0], c->prefix, plen))) continue;
    if (pattern && fnmatch(pattern, row[0] + plen, 0)) continue;
    fn(row[0] + plen, arg);
    n++;
  }
  mysql_free_result(r.rows);
  return n;
}

/* ---- The re-read (no notification on MySQL) ---- */

typedef struct job_watch {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  void (*wake)(void *);
  void *arg;
} job_watch;

static void *reread_main(void *p) {
  job_watch *w = p;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    struct timespec ts;
    dlock__deadline_timespec(dlock_mono_now() + JOB_REREAD_MS, &ts);
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (!w->stop) w->wake(w->arg);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int dlock__my_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle) {
  (void)c;
  (void)job;
  *handle = NULL;
  job_watch *w = calloc(1, sizeof *w);
  if (!w) return dlock__error(DLOCK_ENOMEM, "out of memory");
  w->wake = wake;
  w->arg = arg;
  pthread_mutex_init(&w->mu, NULL);
  dlock__cond_init(&w->cv);
  if (pthread_create(&w->thread, NULL, reread_main, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return dlock__error(DLOCK_ENOMEM, "job '%s': could not start the thread that re-reads its state", job);
  }
  *handle = w;
  return 0;
}

void dlock__my_job_unwatch(dlock_client *c, void *handle) {
  (void)c;
  job_watch *w = handle;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}
