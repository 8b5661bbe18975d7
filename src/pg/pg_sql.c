/*
 * pg_sql.c - the SQL of the PostgreSQL backend, one statement per
 * operation (docs/postgres.md explains each). "@S" stands for dlock's schema
 * (a validated identifier, so it can be spliced into the text).
 *
 * Every decision is taken on the database's clock, clock_timestamp(), never
 * on the client's. Each statement is safe to run twice with the same
 * arguments unless noted (force release), so that a reply lost with its
 * connection can be answered by sending it once more.
 *
 * Notifications (pg_notify on the channel "dlock.<schema>", "@C" below, sent
 * at commit): one per change of a lock, its payload "NAME TARGET" or "NAME
 * TARGET f". TARGET is the waiter's token a release hands the lock to, ""
 * (every waiter of NAME looks again), or "-" for a change that wakes no
 * waiter (an acquire, a waiter come or gone: for `dlock status --watch`); a
 * trailing " f" marks a forced release. pg_lock.c reads them.
 */
#include <stdlib.h>
#include <string.h>

#include "pg/pg_internal.h"

/* A new fence: the sequence's next value, but never below the database
 * clock in microseconds since the epoch (issue 22 item 8). Sequences are
 * replicated asynchronously like the rest: a promoted asynchronous standby
 * may hand out again values the old primary already gave; the clock floor
 * keeps the next fences above them as long as the new primary's clock is
 * not behind the old one's. Each use also takes the name's (or job's) last
 * fence + 1, so fences of one name rise even if the clock steps back. Old
 * fences (sequence values) stay below: an upgrade keeps them rising. */
#define DLOCK__PG_FENCE_NEXT \
  "greatest(nextval('@S.fence_seq'), floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint)"
/* A waiter row 'a' counts while its heartbeat runs and, when it names a
 * live key, while that key is held: each waiting client holds a shared
 * advisory lock (DLOCK__PG_LIVE_CLASS, its key) on its LISTEN connection,
 * which ends with the process (kill -9 closes the socket, the server ends
 * the session and its locks). A dead waiter then stops counting at once,
 * not at the end of its heartbeat. Key 0 (no LISTEN connection: polling
 * through a transaction-mode pooler): the heartbeat alone. The IN list is
 * one uncorrelated subquery: pg_locks is read once per statement. */
#define LIVE_CLASS_STR "1684826999"
/* A name's prune lock (fourth review, finding 1): a mutex's acquire takes
 * it shared (transaction level) before it computes a new fence; prune()
 * deletes a name's locks row only when it gets it exclusive at once
 * (pg_try_...: never waits, a name being acquired stays). An acquire that
 * meets a row prune deleted therefore waits for prune's commit before it
 * takes its fence from fence_seq, which prune raised above the deleted
 * fence. The key is the schema and name's hash; a collision only makes a
 * prune skip a row. PRUNE_KEY serializes prunes (their raise of fence_seq). */
#define NAME_CLASS_STR "1684826998"
#define NAME_KEY(name) NAME_CLASS_STR ", hashtext('@S.' || " name ")"
#define PRUNE_KEY "1684826997, 0"
#define WAITER_LIVE(a)                                                                                    \
  "(" a ".live_key = 0 OR " a ".live_key IN (SELECT k.objid::bigint FROM pg_locks k WHERE k.locktype = "  \
  "'advisory' AND k.classid = " LIVE_CLASS_STR "::oid AND k.objsubid = 2 AND k.granted AND k.database = " \
  "(SELECT d.oid FROM pg_database d WHERE d.datname = current_database())))"

/* Schema objects. Created in one transaction, serialized by an advisory
 * transaction lock so that two first users do not race in CREATE. */
static const char sql_init[] =
    "BEGIN;\n"
    "SELECT pg_advisory_xact_lock(7161483726112374001);\n"
    "CREATE SCHEMA IF NOT EXISTS @S;\n"
    "CREATE SEQUENCE IF NOT EXISTS @S.fence_seq;\n"
    "CREATE SEQUENCE IF NOT EXISTS @S.waiter_seq;\n"
    "CREATE TABLE IF NOT EXISTS @S.locks (\n"
    "  name varchar(255) PRIMARY KEY,\n"
    "  token text NOT NULL,\n"
    "  fence bigint NOT NULL,\n"
    "  expires timestamptz NOT NULL,\n"
    "  since timestamptz NOT NULL,\n"
    "  released boolean NOT NULL DEFAULT false,\n"
    "  owner_info text NOT NULL DEFAULT '');\n"
    "CREATE TABLE IF NOT EXISTS @S.waiters (\n"
    "  name varchar(255) NOT NULL,\n"
    "  token text NOT NULL,\n"
    "  seq bigint NOT NULL,\n"
    "  expires timestamptz NOT NULL,\n"
    "  PRIMARY KEY (name, token));\n"
    "CREATE TABLE IF NOT EXISTS @S.guards (\n"
    "  resource varchar(255) PRIMARY KEY,\n"
    "  fence bigint NOT NULL,\n"
    "  updated timestamptz NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS @S.sched_ticks (\n"
    "  job varchar(255) PRIMARY KEY,\n"
    "  tick bigint NOT NULL,\n"
    "  run_token text NOT NULL,\n"
    "  node text NOT NULL,\n"
    "  fence bigint NOT NULL,\n"
    "  start_ms bigint NOT NULL,\n"
    "  lock_expires timestamptz NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS @S.sched_runs (\n"
    "  id bigserial PRIMARY KEY,\n"
    "  job varchar(255) NOT NULL,\n"
    "  run_token text NOT NULL,\n"
    "  node text NOT NULL,\n"
    "  fence bigint NOT NULL,\n"
    "  scheduled_ms bigint NOT NULL,\n"
    "  start_ms bigint NOT NULL,\n"
    "  duration_ms bigint NOT NULL,\n"
    "  outcome text NOT NULL,\n"
    "  UNIQUE (job, run_token));\n"
    /* The scheduler's claim as one function call: a per-job row serializes
     * claims; the run token makes a second call answer as the first. */
    "CREATE OR REPLACE FUNCTION @S.sched_claim(p_job text, p_tick bigint, p_token text, p_node text,\n"
    "    p_lock_ms bigint, p_tol_ms bigint,\n"
    "    OUT outcome int, OUT fence bigint, OUT start_ms bigint, OUT skew_ms bigint)\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  t @S.sched_ticks%ROWTYPE;\n"
    "BEGIN\n"
    "  skew_ms := p_tick - now_ms;\n"
    "  IF skew_ms > p_tol_ms THEN outcome := -1; RETURN; END IF;\n"
    "  INSERT INTO @S.sched_ticks VALUES (p_job, -1, '', '', 0, 0, '-infinity') ON CONFLICT DO NOTHING;\n"
    "  SELECT * INTO t FROM @S.sched_ticks s WHERE s.job = p_job FOR UPDATE;\n"
    "  IF t.run_token = p_token THEN\n"
    "    outcome := 1; fence := t.fence; start_ms := t.start_ms; RETURN;\n"
    "  END IF;\n"
    "  IF t.tick >= p_tick THEN outcome := 0; RETURN; END IF;\n"
    "  IF t.lock_expires > clock_timestamp() THEN outcome := 2; RETURN; END IF;\n"
    "  fence := greatest(" DLOCK__PG_FENCE_NEXT ", t.fence + 1);\n"
    "  start_ms := now_ms;\n"
    "  UPDATE @S.sched_ticks s SET tick = p_tick, run_token = p_token, node = p_node, fence = sched_claim.fence,\n"
    "    start_ms = now_ms, lock_expires = clock_timestamp() + p_lock_ms * interval '1 millisecond'\n"
    "    WHERE s.job = p_job;\n"
    "  outcome := 1;\n"
    "END $f$;\n"
    /* A fixed-delay job's claim: due 'p_delay_ms' after the last run ended
     * (its row's tick holds that end once the run finished; a run's start
     * while it goes on), and only while no run holds the job lock. Not due:
     * outcome 0 and how long until it is (-1: a run holds the lock). */
    "CREATE OR REPLACE FUNCTION @S.sched_claim_delay(p_job text, p_delay_ms bigint, p_token text, p_node text,\n"
    "    p_lock_ms bigint, OUT outcome int, OUT fence bigint, OUT start_ms bigint, OUT tick bigint,\n"
    "    OUT wait_ms bigint)\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  t @S.sched_ticks%ROWTYPE;\n"
    "BEGIN\n"
    "  INSERT INTO @S.sched_ticks VALUES (p_job, -1, '', '', 0, 0, '-infinity') ON CONFLICT DO NOTHING;\n"
    "  SELECT * INTO t FROM @S.sched_ticks s WHERE s.job = p_job FOR UPDATE;\n"
    "  IF t.run_token = p_token THEN\n"
    "    outcome := 1; fence := t.fence; start_ms := t.start_ms; tick := t.tick; RETURN;\n"
    "  END IF;\n"
    "  IF t.lock_expires > clock_timestamp() THEN outcome := 0; wait_ms := -1; RETURN; END IF;\n"
    "  IF t.tick >= 0 AND now_ms < t.tick + p_delay_ms THEN\n"
    "    outcome := 0; wait_ms := t.tick + p_delay_ms - now_ms; RETURN;\n"
    "  END IF;\n"
    "  fence := greatest(" DLOCK__PG_FENCE_NEXT ", t.fence + 1);\n"
    "  start_ms := now_ms;\n"
    "  tick := CASE WHEN t.tick >= 0 THEN t.tick + p_delay_ms ELSE now_ms END;\n"
    "  UPDATE @S.sched_ticks s SET tick = now_ms, run_token = p_token, node = p_node,\n"
    "    fence = sched_claim_delay.fence, start_ms = now_ms,\n"
    "    lock_expires = clock_timestamp() + p_lock_ms * interval '1 millisecond' WHERE s.job = p_job;\n"
    "  outcome := 1;\n"
    "END $f$;\n"
    "CREATE OR REPLACE FUNCTION @S.sched_finish(p_job text, p_token text, p_node text, p_fence bigint,\n"
    "    p_sched bigint, p_start bigint, p_dur bigint, p_outcome text, p_keep int) RETURNS int\n"
    "LANGUAGE plpgsql AS $f$\n"
    "BEGIN\n"
    "  UPDATE @S.sched_ticks s SET lock_expires = least(s.lock_expires, clock_timestamp())\n"
    "    WHERE s.job = p_job AND s.run_token = p_token;\n"
    "  INSERT INTO @S.sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, outcome)\n"
    "    VALUES (p_job, p_token, p_node, p_fence, p_sched, p_start, p_dur, p_outcome)\n"
    "    ON CONFLICT (job, run_token) DO NOTHING;\n"
    "  DELETE FROM @S.sched_runs r WHERE r.job = p_job AND r.id <= (SELECT x.id FROM @S.sched_runs x\n"
    "    WHERE x.job = p_job ORDER BY x.id DESC OFFSET greatest(p_keep, 1) LIMIT 1);\n"
    "  RETURN 1;\n"
    "END $f$;\n"
    /* A job's state (dlock job pause/resume/trigger; docs/scheduler.md): a row
     * per job operated. trig_*: the pending manual trigger; manual_*: the
     * last one claimed (its id and run token), so that a trigger or a claim
     * sent twice answers as the first. A change notifies "<job> job". */
    "CREATE TABLE IF NOT EXISTS @S.sched_jobs (\n"
    "  job varchar(255) PRIMARY KEY,\n"
    "  paused_by text, paused_reason text, paused_ms bigint,\n"
    "  trig_ms bigint, trig_by text, trig_id text,\n"
    "  manual_ms bigint, manual_id text, manual_token text, manual_fence bigint, manual_start bigint);\n"
    "CREATE OR REPLACE FUNCTION @S.sched_job_set(p_job text, p_op text, p_by text, p_reason text, p_id text,\n"
    "    p_channel text) RETURNS int\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  j @S.sched_jobs%ROWTYPE;\n"
    "  changed int := 0;\n"
    "BEGIN\n"
    "  IF p_op NOT IN ('pause', 'resume', 'trigger') THEN\n"
    "    RAISE EXCEPTION 'dlock: unknown job operation %', p_op;\n"
    "  END IF;\n"
    "  INSERT INTO @S.sched_jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;\n"
    "  SELECT * INTO j FROM @S.sched_jobs x WHERE x.job = p_job FOR UPDATE;\n"
    "  IF p_op = 'pause' AND j.paused_by IS NULL THEN\n"
    "    UPDATE @S.sched_jobs x SET paused_by = p_by, paused_reason = p_reason, paused_ms = now_ms\n"
    "      WHERE x.job = p_job;\n"
    "    changed := 1;\n"
    "  ELSIF p_op = 'resume' AND j.paused_by IS NOT NULL THEN\n"
    "    UPDATE @S.sched_jobs x SET paused_by = NULL, paused_reason = NULL, paused_ms = NULL WHERE x.job = p_job;\n"
    "    changed := 1;\n"
    "  ELSIF p_op = 'trigger' THEN\n"
    "    IF j.manual_id = p_id OR j.trig_id = p_id THEN RETURN 1; END IF;\n"
    "    IF j.trig_id IS NULL THEN\n"
    "      UPDATE @S.sched_jobs x SET trig_ms = now_ms, trig_by = p_by, trig_id = p_id WHERE x.job = p_job;\n"
    "      changed := 1;\n"
    "    END IF;\n"
    "  END IF;\n"
    "  IF changed = 1 THEN PERFORM pg_notify(p_channel, p_job || ' job'); END IF;\n"
    "  RETURN changed;\n"
    "END $f$;\n"
    /* A claim that obeys the job's state (sched_jobs). A tick: while paused,
     * consumed (so that it is recorded once) and recorded as skipped with
     * who and why (outcome 3; a run still going makes it 2, busy, as
     * always), else sched_claim(); 'pending' a manual
     * trigger waits. 'p_manual': the pending trigger instead (it runs even
     * while paused): 4 none pending, 2 a run holds the job lock (it stays
     * pending), 1 yours ('trig' its time). Safe to call twice. */
    "CREATE OR REPLACE FUNCTION @S.sched_claim_job(p_job text, p_tick bigint, p_token text, p_node text,\n"
    "    p_lock_ms bigint, p_tol_ms bigint, p_keep int, p_manual boolean,\n"
    "    OUT outcome int, OUT fence bigint, OUT start_ms bigint, OUT skew_ms bigint, OUT why text,\n"
    "    OUT pending boolean, OUT trig bigint)\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  t @S.sched_ticks%ROWTYPE;\n"
    "  j @S.sched_jobs%ROWTYPE;\n"
    "BEGIN\n"
    "  pending := false;\n"
    "  IF NOT p_manual THEN\n"
    "    SELECT * INTO j FROM @S.sched_jobs x WHERE x.job = p_job;\n"
    "    pending := COALESCE(j.trig_id IS NOT NULL, false);\n"
    "    IF j.paused_by IS NULL THEN\n"
    "      SELECT c.outcome, c.fence, c.start_ms, c.skew_ms INTO outcome, fence, start_ms, skew_ms\n"
    "        FROM @S.sched_claim(p_job, p_tick, p_token, p_node, p_lock_ms, p_tol_ms) c;\n"
    "      RETURN;\n"
    "    END IF;\n"
    /* Paused: claimed without a job lock (a second call answers 1 again),
     * and recorded as skipped instead of run. */
    "    SELECT c.outcome, c.skew_ms INTO outcome, skew_ms\n"
    "      FROM @S.sched_claim(p_job, p_tick, p_token, p_node, 0, p_tol_ms) c;\n"
    "    IF outcome <> 1 THEN RETURN; END IF;\n"
    "    why := 'skipped: paused by ' || j.paused_by ||\n"
    "      CASE WHEN j.paused_reason <> '' THEN ': ' || j.paused_reason ELSE '' END;\n"
    "    INSERT INTO @S.sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, outcome)\n"
    "      VALUES (p_job, p_token, p_node, 0, p_tick, now_ms, -1, left(why, 63))\n"
    "      ON CONFLICT (job, run_token) DO NOTHING;\n"
    "    DELETE FROM @S.sched_runs r WHERE r.job = p_job AND r.id <= (SELECT x.id FROM @S.sched_runs x\n"
    "      WHERE x.job = p_job ORDER BY x.id DESC OFFSET greatest(p_keep, 1) LIMIT 1);\n"
    "    outcome := 3; RETURN;\n"
    "  END IF;\n"
    "  INSERT INTO @S.sched_ticks VALUES (p_job, -1, '', '', 0, 0, '-infinity') ON CONFLICT DO NOTHING;\n"
    "  SELECT * INTO t FROM @S.sched_ticks s WHERE s.job = p_job FOR UPDATE;\n"
    "  SELECT * INTO j FROM @S.sched_jobs x WHERE x.job = p_job FOR UPDATE;\n"
    "  IF j.manual_token = p_token THEN\n"
    "    outcome := 1; fence := j.manual_fence; start_ms := j.manual_start; trig := j.manual_ms; RETURN;\n"
    "  END IF;\n"
    "  IF j.trig_id IS NULL THEN outcome := 4; RETURN; END IF;\n"
    "  IF t.lock_expires > clock_timestamp() THEN outcome := 2; RETURN; END IF;\n"
    "  fence := greatest(" DLOCK__PG_FENCE_NEXT ", t.fence + 1);\n"
    "  start_ms := now_ms;\n"
    "  trig := j.trig_ms;\n"
    "  UPDATE @S.sched_ticks s SET run_token = p_token, node = p_node, fence = sched_claim_job.fence,\n"
    "    start_ms = now_ms, lock_expires = clock_timestamp() + p_lock_ms * interval '1 millisecond'\n"
    "    WHERE s.job = p_job;\n"
    "  UPDATE @S.sched_jobs x SET trig_ms = NULL, trig_by = NULL, trig_id = NULL, manual_ms = j.trig_ms,\n"
    "    manual_id = j.trig_id, manual_token = p_token, manual_fence = sched_claim_job.fence,\n"
    "    manual_start = now_ms WHERE x.job = p_job;\n"
    "  outcome := 1;\n"
    "END $f$;\n"
    /* A fixed-delay job's claim that obeys the pause: a paused job's due run
     * is recorded as skipped (outcome 3) and the next one is due a delay
     * later; else sched_claim_delay(). */
    "CREATE OR REPLACE FUNCTION @S.sched_claim_delay_job(p_job text, p_delay_ms bigint, p_token text,\n"
    "    p_node text, p_lock_ms bigint, p_keep int, OUT outcome int, OUT fence bigint, OUT start_ms bigint,\n"
    "    OUT claimed bigint, OUT wait_ms bigint, OUT why text, OUT pending boolean)\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;\n"
    "  t @S.sched_ticks%ROWTYPE;\n"
    "  j @S.sched_jobs%ROWTYPE;\n"
    "  due bigint;\n"
    "BEGIN\n"
    "  SELECT * INTO j FROM @S.sched_jobs x WHERE x.job = p_job;\n"
    "  pending := COALESCE(j.trig_id IS NOT NULL, false);\n"
    "  IF j.paused_by IS NOT NULL THEN\n"
    "    INSERT INTO @S.sched_ticks VALUES (p_job, -1, '', '', 0, 0, '-infinity') ON CONFLICT DO NOTHING;\n"
    "    SELECT * INTO t FROM @S.sched_ticks s WHERE s.job = p_job FOR UPDATE;\n"
    "    IF t.run_token <> p_token AND t.lock_expires <= clock_timestamp()\n"
    "       AND (t.tick < 0 OR now_ms >= t.tick + p_delay_ms) THEN\n"
    "      due := CASE WHEN t.tick >= 0 THEN t.tick + p_delay_ms ELSE now_ms END;\n"
    "      why := 'skipped: paused by ' || j.paused_by ||\n"
    "        CASE WHEN j.paused_reason <> '' THEN ': ' || j.paused_reason ELSE '' END;\n"
    "      UPDATE @S.sched_ticks s SET tick = now_ms WHERE s.job = p_job;\n"
    "      INSERT INTO @S.sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, duration_ms, outcome)\n"
    "        VALUES (p_job, p_token, p_node, 0, due, now_ms, -1, left(why, 63))\n"
    "        ON CONFLICT (job, run_token) DO NOTHING;\n"
    "      DELETE FROM @S.sched_runs r WHERE r.job = p_job AND r.id <= (SELECT x.id FROM @S.sched_runs x\n"
    "        WHERE x.job = p_job ORDER BY x.id DESC OFFSET greatest(p_keep, 1) LIMIT 1);\n"
    "      outcome := 3; RETURN;\n"
    "    END IF;\n"
    "  END IF;\n"
    "  SELECT c.outcome, c.fence, c.start_ms, c.tick, c.wait_ms INTO outcome, fence, start_ms, claimed, wait_ms\n"
    "    FROM @S.sched_claim_delay(p_job, p_delay_ms, p_token, p_node, p_lock_ms) c;\n"
    "END $f$;\n"
    /* The lock family (semaphores, read-write locks): one row per name
     * (its kind and limit, and the row every acquire of the name locks),
     * one row per hold (a permit, a reader, the writer). Waiters share the
     * mutex's queue table, with the side they wait for. */
    /* Each ALTER only when its column is missing (an upgrade): even with IF
     * NOT EXISTS an ALTER takes its table's ACCESS EXCLUSIVE lock, and a
     * second first user's init would then deadlock with the first user's
     * releases, which lock locks and then waiters. */
    "DO $a$ BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '@S.waiters'::regclass\n"
    "                 AND attname = 'side' AND NOT attisdropped) THEN\n"
    "    ALTER TABLE @S.waiters ADD COLUMN side text NOT NULL DEFAULT '';\n"
    "  END IF;\n"
    "END $a$;\n"
    /* The waiter's live key (see WAITER_LIVE), 0: none. */
    "DO $a$ BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '@S.waiters'::regclass\n"
    "                 AND attname = 'live_key' AND NOT attisdropped) THEN\n"
    "    ALTER TABLE @S.waiters ADD COLUMN live_key bigint NOT NULL DEFAULT 0;\n"
    "  END IF;\n"
    "END $a$;\n"
    /* Where a mutex and the family meet (one kind per name, whatever the
     * interleaving): a family grant marks the name's locks row until its
     * lease's end ('family_until', and 'family_since' its moment), and a
     * mutex does not take a row so marked. A mutex's statement sees the
     * family's holds only if they committed before it began; the mark on
     * the row it writes is seen in any case (ON CONFLICT ... WHERE reads
     * the row's latest version, after waiting for the granting
     * transaction). */
    "DO $a$ BEGIN\n"
    "  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '@S.locks'::regclass\n"
    "                 AND attname = 'family_since' AND NOT attisdropped) THEN\n"
    "    ALTER TABLE @S.locks ADD COLUMN IF NOT EXISTS family_until timestamptz,\n"
    "      ADD COLUMN IF NOT EXISTS family_since timestamptz;\n"
    "  END IF;\n"
    "END $a$;\n"
    "CREATE TABLE IF NOT EXISTS @S.families (\n"
    "  name varchar(255) PRIMARY KEY,\n"
    "  kind text NOT NULL,\n"
    "  permits int NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS @S.holds (\n"
    "  name varchar(255) NOT NULL,\n"
    "  token text NOT NULL,\n"
    "  side text NOT NULL,\n"
    "  fence bigint NOT NULL,\n"
    "  expires timestamptz NOT NULL,\n"
    "  since timestamptz NOT NULL,\n"
    "  released boolean NOT NULL DEFAULT false,\n"
    "  owner_info text NOT NULL DEFAULT '',\n"
    "  PRIMARY KEY (name, token));\n"
    /* One acquire of a permit ('p'), a read ('r') or the write ('w') side.
     * The name's row is locked first, so the holds counted next are exact
     * (each statement of a function sees the commits before it). A second
     * call with the same token answers as the first (its hold, its fence).
     * A waiter ahead (queued earlier, alive) goes first: for a permit, the
     * free permits go to the first waiters; a writer waits for every hold
     * and every waiter ahead; a reader waits for the writer and for writers
     * queued ahead ('p_shadow': the token of this thread's other hold of
     * the name, '' none; while that hold is live the read goes at once, once
     * it ended the read waits its turn like any). err: 'mutex', 'kind
     * <kind>', 'limit <n>'. The version with a boolean 'p_shadow' trusted the
     * caller's word that its hold still stood: dropped. 'held' and 'ahead':
     * the live holds and the live waiters ahead of this caller (for the
     * refusal's message). A waiter counts while it is live (WAITER_LIVE).
     * The families and locks rows are created if missing and locked; a
     * prune (prune()) may delete either between the insert and the lock,
     * then both are made again (bounded: a prune deletes only a name with
     * no live hold, which then stays so while this call holds the row). The
     * version without 'p_live' (no liveness, no counts) stays for clients
     * of the older schema; this version's clients do not call it. */
    "DROP FUNCTION IF EXISTS @S.fam_acquire(text, text, text, int, bigint, text, boolean);\n"
    "CREATE OR REPLACE FUNCTION @S.fam_acquire(p_name text, p_token text, p_side text, p_permits int,\n"
    "    p_lease_ms bigint, p_info text, p_shadow text, p_live bigint,\n"
    "    OUT fence bigint, OUT wait_ms bigint, OUT err text, OUT held bigint, OUT ahead bigint)\n"
    "LANGUAGE plpgsql AS $f$\n"
    "DECLARE\n"
    "  k text := CASE WHEN p_side = 'p' THEN 'semaphore' ELSE 'rwlock' END;\n"
    "  f @S.families%ROWTYPE;\n"
    "  h @S.holds%ROWTYPE;\n"
    "  my_seq bigint;\n"
    "  live bigint;\n"
    "  ok boolean;\n"
    "  tries int := 0;\n"
    "BEGIN\n"
    "  LOOP\n"
    "    INSERT INTO @S.families VALUES (p_name, k, p_permits) ON CONFLICT DO NOTHING;\n"
    "    SELECT * INTO f FROM @S.families x WHERE x.name = p_name FOR UPDATE;\n"
    "    EXIT WHEN FOUND;\n"
    "    tries := tries + 1;\n"
    "    IF tries > 20 THEN RAISE EXCEPTION 'dlock: the row of % in families keeps vanishing', p_name; END IF;\n"
    "  END LOOP;\n"
    /* The name's locks row, locked: a mutex's acquire in flight (an insert
     * or an update of that row) is waited for, and seen by the next look. */
    "  LOOP\n"
    "    INSERT INTO @S.locks (name, token, fence, expires, since, released, owner_info)\n"
    "      VALUES (p_name, '', 0, clock_timestamp(), clock_timestamp(), true, '') ON CONFLICT (name) DO NOTHING;\n"
    "    PERFORM 1 FROM @S.locks l WHERE l.name = p_name FOR UPDATE;\n"
    "    EXIT WHEN FOUND;\n"
    "    tries := tries + 1;\n"
    "    IF tries > 20 THEN RAISE EXCEPTION 'dlock: the row of % in locks keeps vanishing', p_name; END IF;\n"
    "  END LOOP;\n"
    "  IF EXISTS (SELECT 1 FROM @S.locks l WHERE l.name = p_name AND NOT l.released\n"
    "             AND l.expires > clock_timestamp()) THEN\n"
    "    err := 'mutex'; RETURN;\n"
    "  END IF;\n"
    /* Holds that ended a minute ago go, their fences into the name's locks
     * row (locked above) in the same statement: the next fence of the name
     * stays above them when the clock stepped back (fifth review, finding
     * 1: the name's last fences went with the rows). */
    "  WITH d AS (DELETE FROM @S.holds x WHERE x.name = p_name\n"
    "             AND x.expires < clock_timestamp() - interval '1 minute' RETURNING x.fence)\n"
    "  UPDATE @S.locks l SET fence = m.fence FROM (SELECT max(d.fence) AS fence FROM d) m\n"
    "    WHERE l.name = p_name AND m.fence > l.fence;\n"
    "  SELECT * INTO h FROM @S.holds x WHERE x.name = p_name AND x.token = p_token;\n"
    "  IF FOUND AND NOT h.released AND h.expires > clock_timestamp() THEN\n"
    "    UPDATE @S.holds x SET expires = clock_timestamp() + p_lease_ms * interval '1 millisecond'\n"
    "      WHERE x.name = p_name AND x.token = p_token;\n"
    "    fence := h.fence; RETURN;\n"
    "  END IF;\n"
    "  SELECT count(*) INTO live FROM @S.holds x WHERE x.name = p_name AND NOT x.released\n"
    "    AND x.expires > clock_timestamp();\n"
    "  held := live;\n"
    "  IF live = 0 THEN\n"
    "    UPDATE @S.families x SET kind = k, permits = p_permits WHERE x.name = p_name;\n"
    "    f.kind := k; f.permits := p_permits;\n"
    "  ELSIF f.kind <> k THEN\n"
    "    err := 'kind ' || f.kind; RETURN;\n"
    "  ELSIF k = 'semaphore' AND f.permits <> p_permits THEN\n"
    "    err := 'limit ' || f.permits; RETURN;\n"
    "  END IF;\n"
    "  SELECT w.seq INTO my_seq FROM @S.waiters w WHERE w.name = p_name AND w.token = p_token;\n"
    "  my_seq := COALESCE(my_seq, 9223372036854775807);\n"
    "  SELECT count(*) INTO ahead FROM @S.waiters w WHERE w.name = p_name AND w.token <> p_token\n"
    "    AND w.expires > clock_timestamp() AND w.seq < my_seq AND " WAITER_LIVE(
        "w") ";\n"
             "  IF p_shadow <> '' AND EXISTS (SELECT 1 FROM @S.holds x WHERE x.name = p_name AND x.token = p_shadow\n"
             "                                AND NOT x.released AND x.expires > clock_timestamp()) THEN\n"
             "    ok := true;\n"
             "  ELSIF p_side = 'p' THEN\n"
             "    ok := live + ahead < f.permits;\n"
             "  ELSIF p_side = 'w' THEN\n"
             "    ok := live = 0 AND ahead = 0;\n"
             "  ELSE\n"
             "    ok := NOT EXISTS (SELECT 1 FROM @S.holds x WHERE x.name = p_name AND x.side = 'w' AND NOT "
             "x.released\n"
             "                      AND x.expires > clock_timestamp())\n"
             "      AND NOT EXISTS (SELECT 1 FROM @S.waiters w WHERE w.name = p_name AND w.token <> p_token\n"
             "                      AND w.side = 'w' AND w.expires > clock_timestamp() AND w.seq < my_seq\n"
             "                      AND " WAITER_LIVE(
                 "w") ");\n"
                      "  END IF;\n"
                      "  IF NOT ok THEN\n"
                      "    SELECT greatest(0, ceil(extract(epoch FROM (min(x.expires) - clock_timestamp())) * "
                      "1000))::bigint\n"
                      "      INTO wait_ms FROM @S.holds x WHERE x.name = p_name AND NOT x.released\n"
                      "      AND x.expires > clock_timestamp();\n"
                      "    wait_ms := COALESCE(wait_ms, -1);\n"
                      "    RETURN;\n"
                      "  END IF;\n"
                      "  fence := greatest(" DLOCK__PG_FENCE_NEXT ",\n"
                      "    COALESCE((SELECT max(x.fence) FROM @S.holds x WHERE x.name = p_name), 0) + 1,\n"
                      "    COALESCE((SELECT l.fence FROM @S.locks l WHERE l.name = p_name), 0) + 1);\n"
                      "  INSERT INTO @S.holds AS x VALUES (p_name, p_token, p_side, fence,\n"
                      "      clock_timestamp() + p_lease_ms * interval '1 millisecond', clock_timestamp(), false, "
                      "p_info)\n"
                      "    ON CONFLICT (name, token) DO UPDATE SET side = EXCLUDED.side, fence = EXCLUDED.fence,\n"
                      "      expires = EXCLUDED.expires, since = EXCLUDED.since, released = false, owner_info = "
                      "EXCLUDED.owner_info;\n"
                      /* family_since is the hold's own since (not a later clock_timestamp():
     * the clock moves within the transaction), so that its release, which
     * clears the mark where family_since <= its since, does clear it. The
     * row keeps the name's highest fence, whatever the kind: a mutex's
     * acquire takes the row's fence + 1 (fifth review, finding 2: it did
     * not see the holds' fences). */
                      "  UPDATE @S.locks l SET fence = greatest(l.fence, fam_acquire.fence),\n"
                      "      family_since = (SELECT x.since FROM @S.holds x WHERE x.name = p_name\n"
                      "      AND x.token = p_token), family_until = greatest(l.family_until,\n"
                      "      clock_timestamp() + p_lease_ms * interval '1 millisecond') WHERE l.name = p_name;\n"
                      "END $f$;\n"
                      /* Pruning (dlock prune, and now and then after a release): rows that no
     * hold or waiter needs, whose time ended before 'p_older_ms' ago, at most
     * 'p_limit' per table. A row is deleted only while its own condition
     * holds on its newest version (the DELETE's WHERE names the target row:
     * a concurrent acquire, renewal or heartbeat that made it live again is
     * waited for and re-checked), so a live hold, a live family mark or a
     * live waiter is never deleted. A deleted row's fence is kept in
     * fence_seq (raised to the highest fence deleted, never lowered), so a
     * name whose row was deleted gets a higher fence next time even when the
     * clock stepped back (without it only the row kept that name's fences
     * rising: third review, finding 2). A
     * family's name goes under its families row, locked as fam_acquire
     * locks it, once no hold of it is left; fam_acquire makes the rows again
     * when they vanished under it. The guards and the scheduler's rows are
     * never pruned: they are what refuses a stale fence or a tick claimed
     * twice. */
                      "CREATE OR REPLACE FUNCTION @S.prune(p_older_ms bigint, p_limit int,\n"
                      "    OUT n_locks bigint, OUT n_waiters bigint, OUT n_holds bigint, OUT n_families bigint)\n"
                      "LANGUAGE plpgsql AS $f$\n"
                      "DECLARE\n"
                      "  cutoff timestamptz := clock_timestamp() - greatest(p_older_ms, 0) * interval '1 "
                      "millisecond';\n"
                      "  n bigint;\n"
                      "  hw bigint := 0;\n"
                      "  m bigint;\n"
                      "  r record;\n"
                      "BEGIN\n"
                      "  n_locks := 0; n_families := 0;\n"
                      "  DELETE FROM @S.waiters w WHERE (w.name, w.token) IN (SELECT x.name, x.token FROM @S.waiters "
                      "x\n"
                      "    WHERE x.expires < cutoff LIMIT p_limit) AND w.expires < cutoff;\n"
                      "  GET DIAGNOSTICS n_waiters = ROW_COUNT;\n"
                      "  WITH d AS (DELETE FROM @S.holds h WHERE (h.name, h.token) IN (SELECT x.name, x.token FROM "
                      "@S.holds x\n"
                      "    WHERE x.expires < cutoff LIMIT p_limit) AND h.expires < cutoff RETURNING h.fence)\n"
                      "    SELECT count(*), COALESCE(max(d.fence), 0) INTO n_holds, hw FROM d;\n"
                      "  FOR r IN SELECT f.name FROM @S.families f WHERE NOT EXISTS (SELECT 1 FROM @S.holds x WHERE "
                      "x.name = f.name)\n"
                      "      AND NOT EXISTS (SELECT 1 FROM @S.waiters w WHERE w.name = f.name AND w.expires >= "
                      "cutoff)\n"
                      "      LIMIT p_limit FOR UPDATE SKIP LOCKED LOOP\n"
                      /* Looked at again under the row's lock: this statement sees every
     * grant that committed before it. */
                      "    CONTINUE WHEN EXISTS (SELECT 1 FROM @S.holds x WHERE x.name = r.name)\n"
                      "      OR EXISTS (SELECT 1 FROM @S.waiters w WHERE w.name = r.name AND w.expires >= cutoff);\n"
                      "    WITH d AS (DELETE FROM @S.locks l WHERE l.name = r.name AND CASE WHEN l.expires < cutoff\n"
                      "      AND (l.family_until IS NULL OR l.family_until < cutoff)\n"
                      "      THEN pg_try_advisory_xact_lock(" NAME_KEY(
                          "l.name") ") ELSE false END RETURNING l.fence)\n"
                                    "      SELECT count(*), COALESCE(max(d.fence), 0) INTO n, m FROM d;\n"
                                    "    hw := greatest(hw, m);\n"
                                    "    n_locks := n_locks + n;\n"
                                    "    DELETE FROM @S.families f WHERE f.name = r.name;\n"
                                    "    n_families := n_families + 1;\n"
                                    "  END LOOP;\n"
                                    "  WITH d AS (DELETE FROM @S.locks l WHERE l.name IN (SELECT x.name FROM @S.locks "
                                    "x WHERE x.expires < cutoff\n"
                                    "      AND (x.family_until IS NULL OR x.family_until < cutoff)\n"
                                    "      AND NOT EXISTS (SELECT 1 FROM @S.families f WHERE f.name = x.name)\n"
                                    "      AND NOT EXISTS (SELECT 1 FROM @S.waiters w WHERE w.name = x.name AND "
                                    "w.expires >= cutoff)\n"
                                    "      LIMIT p_limit)\n"
                                    "    AND CASE WHEN l.expires < cutoff AND (l.family_until IS NULL OR "
                                    "l.family_until < cutoff)\n"
                                    "      THEN pg_try_advisory_xact_lock(" NAME_KEY(
                                        "l.name") ") ELSE false END RETURNING l.fence)\n"
                                                  "    SELECT count(*), COALESCE(max(d.fence), 0) INTO n, m FROM d;\n"
                                                  "  n_locks := n_locks + n;\n"
                                                  /* The sequence is a non-transactional counter: setval takes effect at
     * once, before this transaction's commit, which the acquires of the
     * deleted names wait for (NAME_KEY). Prunes raise it one at a time
     * (PRUNE_KEY), and only above a value nextval just handed out (nextval
     * needs USAGE, setval UPDATE: no SELECT on the sequence). No
     * compare-and-set exists for sequences: other names' nextvals between
     * the two that pass hw would be handed out again, to other names (a
     * name's fences still rise: its row's fence + 1). */
                                                  "  hw := greatest(hw, m);\n"
                                                  "  IF hw > 0 THEN\n"
                                                  "    PERFORM pg_advisory_xact_lock(" PRUNE_KEY ");\n"
                                                  "    IF hw > nextval('@S.fence_seq') THEN\n"
                                                  "      PERFORM setval('@S.fence_seq', hw);\n"
                                                  "    END IF;\n"
                                                  "  END IF;\n"
                                                  "END $f$;\n"
                                                  "COMMIT;";

/* $1 name, $2 token, $3 lease ms, $4 owner info, $5 waiter heartbeat ms,
 * $6 the waiter's live key (WAITER_LIVE; 0 none).
 * Takes the row when it is absent, released, expired, or already ours (a
 * second run of the same acquire keeps the fence and start of the hold);
 * a live waiter that arrived earlier than this caller (a try counts as
 * arriving last) keeps it from barging. Returns the fence (NULL: busy) and
 * the holder's remaining lease, and the kind when the name is held as a
 * semaphore or read-write lock (then nothing is taken), the live waiters
 * ahead of this caller, and whether this caller's waiter row was there (a
 * waiter whose row was pruned queues again). A waiter's row is deleted by a separate
 * statement after success (one statement must not modify a row twice).
 * set_config('synchronous_commit', 'on', true) makes this transaction commit
 * synchronously whatever the server's default, so a crash cannot lose a fence
 * already handed out (and no session SET: poolers stay fine). */
static const char sql_acquire[] =
    "WITH w AS (UPDATE @S.waiters SET expires = clock_timestamp() + $5::bigint * interval '1 millisecond',\n"
    "             live_key = $6::bigint WHERE name = $1 AND token = $2 RETURNING seq),\n"
    "ahead AS (SELECT count(*) AS n FROM @S.waiters x WHERE x.name = $1 AND x.token <> $2\n"
    "          AND x.expires > clock_timestamp() AND " WAITER_LIVE(
        "x") "\n"
             "          AND x.seq < COALESCE((SELECT seq FROM w), 9223372036854775807)),\n"
             "cur AS (SELECT token, expires, released FROM @S.locks WHERE name = $1),\n"
             "fam AS (SELECT 1 FROM @S.holds h WHERE h.name = $1 AND NOT h.released AND h.expires > clock_timestamp()\n"
             "        LIMIT 1),\n"
             "pk AS (SELECT pg_advisory_xact_lock_shared(" NAME_KEY(
                 "$1") ")),\n"
                       "ins AS (INSERT INTO @S.locks AS l (name, token, fence, expires, since, released, owner_info)\n"
                       "  SELECT $1, $2, " DLOCK__PG_FENCE_NEXT
                       ", clock_timestamp() + $3::bigint * interval '1 millisecond',\n"
                       "         clock_timestamp(), false, $4\n"
                       "  WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.token <> $2 AND NOT cur.released\n"
                       "                    AND cur.expires > clock_timestamp())\n"
                       "    AND (SELECT n FROM ahead) = 0\n"
                       "    AND NOT EXISTS (SELECT 1 FROM fam)\n"
                       "    AND EXISTS (SELECT 1 FROM pk)\n"
                       "  ON CONFLICT (name) DO UPDATE SET\n"
                       "    fence = CASE WHEN l.token = EXCLUDED.token AND NOT l.released AND l.expires > "
                       "clock_timestamp()\n"
                       "                 THEN l.fence ELSE greatest(EXCLUDED.fence, l.fence + 1) END,\n"
                       "    since = CASE WHEN l.token = EXCLUDED.token AND NOT l.released AND l.expires > "
                       "clock_timestamp()\n"
                       "                 THEN l.since ELSE EXCLUDED.since END,\n"
                       "    token = EXCLUDED.token, expires = EXCLUDED.expires, released = false,\n"
                       "    owner_info = EXCLUDED.owner_info\n"
                       "  WHERE (l.released OR l.expires <= clock_timestamp() OR l.token = EXCLUDED.token)\n"
                       "    AND (l.family_until IS NULL OR l.family_until <= clock_timestamp())\n"
                       "  RETURNING l.fence),\n"
                       "n AS (SELECT pg_notify(@C, $1 || ' -') FROM ins)\n"
                       "SELECT (SELECT fence FROM ins),\n"
                       "       (SELECT greatest(0, ceil(extract(epoch FROM (cur.expires - clock_timestamp())) * "
                       "1000))::bigint\n"
                       "          FROM cur WHERE NOT cur.released),\n"
                       "       set_config('synchronous_commit', 'on', true),\n"
                       "       (SELECT f.kind FROM @S.families f WHERE f.name = $1 AND EXISTS (SELECT 1 FROM fam)),\n"
                       "       (SELECT n FROM ahead), (SELECT count(*) FROM w), (SELECT count(*) FROM n)";

/* $1 name, $2 token, $3 heartbeat ms, $4 side ('' for a mutex, else as
 * fam_acquire), $5 live key: queue by arrival (waiter_seq); a second run
 * finds the row and keeps its place. A new row is notified (watchers). */
static const char sql_waiter_add[] =
    "WITH old AS (DELETE FROM @S.waiters WHERE name = $1 AND token <> $2\n"
    "             AND expires < clock_timestamp() - interval '1 minute'),\n"
    "ins AS (INSERT INTO @S.waiters (name, token, seq, expires, side, live_key)\n"
    "  SELECT $1, $2, nextval('@S.waiter_seq'), clock_timestamp() + $3::bigint * interval '1 millisecond', $4,\n"
    "         $5::bigint\n"
    "  ON CONFLICT (name, token) DO NOTHING RETURNING 1)\n"
    "SELECT pg_notify(@C, $1 || ' -') FROM ins";

/* $1 name, $2 token, $3 side, $4 permits, $5 lease ms, $6 owner info,
 * $7 shadow token ('' none), $8 heartbeat ms, $9 live key: the waiter's
 * heartbeat, then fam_acquire. Returns the fence (NULL: not now), ms until
 * the first hold's lease ends (-1: none), the error word (NULL: none), the
 * live holds and the live waiters ahead, and whether this caller's waiter
 * row was there (as sql_acquire). */
static const char sql_fam_acquire[] =
    "WITH w AS (UPDATE @S.waiters SET expires = clock_timestamp() + $8::bigint * interval '1 millisecond',\n"
    "             live_key = $9::bigint WHERE name = $1 AND token = $2 RETURNING seq)\n"
    "SELECT a.fence, a.wait_ms, a.err, set_config('synchronous_commit', 'on', true), a.held, a.ahead,\n"
    "       (SELECT count(*) FROM w), CASE WHEN a.fence IS NOT NULL THEN pg_notify(@C, $1 || ' -') END\n"
    "FROM @S.fam_acquire($1, $2, $3, $4::int, $5::bigint, $6, $7, $9::bigint) a";

/* $1 name, $2 token, $3 channel: a family hold's release, answering as
 * sql_release does. Every waiter of the name is told (each looks again;
 * the order among them is kept by fam_acquire). */
static const char sql_fam_release[] =
    "WITH cur AS (SELECT released, since FROM @S.holds WHERE name = $1 AND token = $2),\n"
    "upd AS (UPDATE @S.holds SET released = true, expires = clock_timestamp()\n"
    "        WHERE name = $1 AND token = $2 AND NOT released AND expires > clock_timestamp() RETURNING 1),\n"
    "n AS (SELECT pg_notify($3, $1 || ' ') FROM upd),\n"
    /* The mark ends with the hold that made it (a later grant's mark stays,
     * a mutex may be waiting on that grant's transaction), or with the last
     * live hold of the family, when the latest grant is one this statement
     * sees (its hold ran out unreleased): a grant in flight holds the row
     * and writes a later family_since (grants are serialized by the
     * families row), which the re-check after the wait compares. */
    "clr AS (UPDATE @S.locks l SET family_until = clock_timestamp()\n"
    "        WHERE l.name = $1 AND EXISTS (SELECT 1 FROM upd) AND l.family_until > clock_timestamp()\n"
    "          AND (l.family_since <= (SELECT since FROM cur)\n"
    "               OR (l.family_since <= (SELECT max(x.since) FROM @S.holds x WHERE x.name = $1)\n"
    "                   AND NOT EXISTS (SELECT 1 FROM @S.holds x WHERE x.name = $1 AND x.token <> $2\n"
    "                                   AND NOT x.released AND x.expires > clock_timestamp()))))\n"
    "SELECT (SELECT count(*) FROM upd), EXISTS (SELECT 1 FROM cur),\n"
    "       COALESCE((SELECT released FROM cur), false), (SELECT count(*) FROM n),\n"
    "       set_config('synchronous_commit', 'on', true)";

/* $1 name: a family name's kind, limit, holds (all, readers, writer), the
 * newest hold's fence, start and owner info, the ms until the last hold's
 * lease ends, waiters (all, writers). No row: not a family name. */
static const char sql_fam_info[] =
    "SELECT f.kind, f.permits,\n"
    "  (SELECT count(*) FROM @S.holds x WHERE x.name = $1 AND NOT x.released AND x.expires > clock_timestamp()),\n"
    "  (SELECT count(*) FROM @S.holds x WHERE x.name = $1 AND x.side = 'r' AND NOT x.released\n"
    "     AND x.expires > clock_timestamp()),\n"
    "  EXISTS (SELECT 1 FROM @S.holds x WHERE x.name = $1 AND x.side = 'w' AND NOT x.released\n"
    "     AND x.expires > clock_timestamp()),\n"
    "  n.fence, floor(extract(epoch FROM n.since) * 1000)::bigint, n.owner_info,\n"
    "  (SELECT greatest(0, floor(extract(epoch FROM (max(x.expires) - clock_timestamp())) * 1000))::bigint\n"
    "     FROM @S.holds x WHERE x.name = $1 AND NOT x.released AND x.expires > clock_timestamp()),\n"
    "  (SELECT count(*) FROM @S.waiters w WHERE w.name = $1 AND w.expires > clock_timestamp()\n"
    "     AND " WAITER_LIVE(
        "w") "),\n"
             "  (SELECT count(*) FROM @S.waiters w WHERE w.name = $1 AND w.side = 'w' AND w.expires > "
             "clock_timestamp()\n"
             "     AND " WAITER_LIVE(
                 "w") ")\n"
                      "FROM @S.families f LEFT JOIN LATERAL (SELECT x.fence, x.since, x.owner_info FROM @S.holds x\n"
                      "  WHERE x.name = $1 AND NOT x.released AND x.expires > clock_timestamp() ORDER BY x.fence DESC "
                      "LIMIT 1) n\n"
                      "  ON true WHERE f.name = $1";

/* $1 name: every live hold of a semaphore or read-write lock
 * (dlock_lock_holders): fence, ms left, since (ms), owner info. */
static const char sql_fam_holders[] =
    "SELECT x.fence, greatest(0, floor(extract(epoch FROM (x.expires - clock_timestamp())) * 1000))::bigint,\n"
    "  floor(extract(epoch FROM x.since) * 1000)::bigint, coalesce(x.owner_info, '')\n"
    "FROM @S.holds x WHERE x.name = $1 AND NOT x.released AND x.expires > clock_timestamp() ORDER BY x.fence";

static const char sql_waiter_del[] = "WITH d AS (DELETE FROM @S.waiters WHERE name = $1 AND token = $2 RETURNING 1)\n"
                                     "SELECT pg_notify(@C, $1 || ' -') FROM d";

/* $1 name, $2 token, $3 channel. Marks the row released (a tombstone that
 * keeps the token: a second run finds "released by us") and tells the first
 * live waiter. Returns: released now, the row's token is ours, the row is
 * released. */
static const char sql_release[] =
    "WITH cur AS (SELECT token, released FROM @S.locks WHERE name = $1),\n"
    "upd AS (UPDATE @S.locks SET released = true, expires = clock_timestamp()\n"
    "        WHERE name = $1 AND token = $2 AND NOT released AND expires > clock_timestamp() RETURNING 1),\n"
    "nx AS (SELECT w.token FROM @S.waiters w WHERE w.name = $1 AND w.expires > clock_timestamp()\n"
    "       AND " WAITER_LIVE(
        "w") " ORDER BY w.seq LIMIT 1),\n"
             "n AS (SELECT pg_notify($3, $1 || ' ' || COALESCE((SELECT token FROM nx), '')) FROM upd)\n"
             "SELECT (SELECT count(*) FROM upd), COALESCE((SELECT token = $2 FROM cur), false),\n"
             "       COALESCE((SELECT released FROM cur), false), (SELECT count(*) FROM n),\n"
             "       set_config('synchronous_commit', 'on', true)";

/* $1 names, $2 tokens, $3 lease ms (arrays). Compare-and-extend: never
 * revives an expired, released or re-taken row. Per item: renewed, taken by
 * another owner. */
static const char sql_renew[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS v(name, token, lease, "
    "i)),\n"
    "u AS (UPDATE @S.locks l SET expires = clock_timestamp() + v.lease * interval '1 millisecond' FROM v\n"
    "      WHERE l.name = v.name AND l.token = v.token AND NOT l.released AND l.expires > clock_timestamp()\n"
    "      RETURNING l.name, l.token),\n"
    /* A family hold (semaphore, read-write lock): its own row, by token. */
    "uf AS (UPDATE @S.holds l SET expires = clock_timestamp() + v.lease * interval '1 millisecond' FROM v\n"
    "      WHERE l.name = v.name AND l.token = v.token AND NOT l.released AND l.expires > clock_timestamp()\n"
    "      RETURNING l.name, l.token)\n"
    "SELECT v.i, (u.name IS NOT NULL OR uf.name IS NOT NULL),\n"
    "       COALESCE(c.token <> v.token AND NOT c.released AND c.expires > clock_timestamp(), false),\n"
    /* Ended by a forced release (sql_force marks the token). */
    "       COALESCE(c.token = 'forced:' || v.token, false)\n"
    "         OR EXISTS (SELECT 1 FROM @S.holds f WHERE f.name = v.name AND f.token = 'forced:' || v.token)\n"
    "FROM v LEFT JOIN u ON u.name = v.name AND u.token = v.token\n"
    "  LEFT JOIN uf ON uf.name = v.name AND uf.token = v.token LEFT JOIN @S.locks c ON c.name = v.name\n"
    "ORDER BY v.i";

/* $1 name, $2 token: ours and live, remaining ms, another live owner. */
static const char sql_remaining[] =
    "SELECT * FROM (\n"
    "  SELECT token = $2 AND NOT released AND expires > clock_timestamp() AS ours,\n"
    "         greatest(0, floor(extract(epoch FROM (expires - clock_timestamp())) * 1000))::bigint,\n"
    "         token <> $2 AND NOT released AND expires > clock_timestamp()\n"
    "  FROM @S.locks WHERE name = $1\n"
    "  UNION ALL\n"
    "  SELECT NOT released AND expires > clock_timestamp(),\n"
    "         greatest(0, floor(extract(epoch FROM (expires - clock_timestamp())) * 1000))::bigint, false\n"
    "  FROM @S.holds WHERE name = $1 AND token = $2) r ORDER BY ours DESC LIMIT 1";

/* $1 name: live, remaining ms, fence, since (unix ms), owner info, waiters. */
static const char sql_info[] =
    "SELECT l.live, l.ms, l.fence, l.since_ms, l.owner_info,\n"
    "       (SELECT count(*) FROM @S.waiters w WHERE w.name = $1 AND w.expires > clock_timestamp()\n"
    "          AND " WAITER_LIVE(
        "w") ")\n"
             "FROM (SELECT 1) one LEFT JOIN (\n"
             "  SELECT NOT released AND expires > clock_timestamp() AS live,\n"
             "         greatest(0, floor(extract(epoch FROM (expires - clock_timestamp())) * 1000))::bigint AS ms,\n"
             "         fence, floor(extract(epoch FROM since) * 1000)::bigint AS since_ms, owner_info\n"
             "  FROM @S.locks WHERE name = $1) l ON true";

/* $1 LIKE pattern. */
static const char sql_list[] =
    "SELECT name FROM @S.locks WHERE NOT released AND expires > clock_timestamp() AND name LIKE $1\n"
    "UNION SELECT name FROM @S.holds WHERE NOT released AND expires > clock_timestamp() AND name LIKE $1\n"
    "ORDER BY name";

/* $1 name, $2 channel. Not safe to run twice: between two runs a new holder
 * may take the lock, and the second would end its hold. The token is
 * replaced, so that the holder's release answers "not held" rather than
 * taking the row for its own earlier release; "forced:<token>" tells the
 * holder's renewal that it was a forced release (lost: deleted). */
static const char sql_force[] =
    "WITH upd AS (UPDATE @S.locks SET released = true, expires = clock_timestamp(), token = 'forced:' || token\n"
    "             WHERE name = $1 AND NOT released AND expires > clock_timestamp()\n"
    "             AND ($3::bigint = 0 OR fence = $3::bigint) RETURNING 1),\n"
    /* Every hold of a family name (each permit, the readers or the writer);
     * none when only the hold of fence $3 is to go (an election's eviction). */
    "updf AS (UPDATE @S.holds SET released = true, expires = clock_timestamp(), token = 'forced:' || token\n"
    "         WHERE name = $1 AND $3::bigint = 0 AND NOT released AND expires > clock_timestamp() RETURNING 1),\n"
    "nx AS (SELECT w.token FROM @S.waiters w WHERE w.name = $1 AND w.expires > clock_timestamp()\n"
    "       AND " WAITER_LIVE(
        "w") " ORDER BY w.seq LIMIT 1),\n"
             "n AS (SELECT pg_notify($2, $1 || ' ' || COALESCE((SELECT token FROM nx), '') || ' f') FROM upd),\n"
             "nf AS (SELECT pg_notify($2, $1 || '  f') WHERE EXISTS (SELECT 1 FROM updf)),\n"
             "clr AS (UPDATE @S.locks SET family_until = clock_timestamp()\n"
             "        WHERE name = $1 AND EXISTS (SELECT 1 FROM updf) AND family_until > clock_timestamp())\n"
             "SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM updf), (SELECT count(*) FROM n) + (SELECT "
             "count(*) FROM nf)";

/* $1 resource, $2 fence: admitted when not below the highest seen (an
 * equal fence is admitted again, so a second run answers as the first). */
static const char sql_guard[] =
    "WITH g AS (INSERT INTO @S.guards AS g (resource, fence, updated) VALUES ($1, $2::bigint, clock_timestamp())\n"
    "           ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, updated = EXCLUDED.updated\n"
    "           WHERE g.fence <= EXCLUDED.fence RETURNING fence)\n"
    "SELECT (SELECT count(*) FROM g), (SELECT fence FROM @S.guards WHERE resource = $1),\n"
    "       set_config('synchronous_commit', 'on', true)";

/* $1 older than (ms), $2 at most this many rows per table: prune(). */
static const char sql_prune[] = "SELECT n_locks, n_waiters, n_holds, n_families FROM @S.prune($1::bigint, $2::int)";

static const char sql_claim[] =
    "SELECT outcome, fence, start_ms, skew_ms, set_config('synchronous_commit', 'on', true) "
    "FROM @S.sched_claim($1, $2::bigint, $3, $4, $5::bigint, $6::bigint)";
static const char sql_finish[] = "SELECT @S.sched_finish($1, $2, $3, $4::bigint, $5::bigint, $6::bigint, $7::bigint, "
                                 "$8, $9::int)";
static const char sql_history[] = "SELECT node, fence, scheduled_ms, start_ms, duration_ms, outcome FROM "
                                  "@S.sched_runs WHERE job = $1 ORDER BY id DESC LIMIT $2::int";

/* "@S" becomes the quoted schema, "@C" the channel as a literal (the
 * schema is lowercase letters, digits and '_': nothing to escape). */
static char *expand(const char *tmpl, const char *schema) {
  size_t n = 0, sl = strlen(schema);
  for (const char *p = tmpl; *p; p++) n += (p[0] == '@' && (p[1] == 'S' || p[1] == 'C')) ? sl + 8 : 1;
  char *out = malloc(n + 1);
  if (!out) return NULL;
  char *o = out;
  for (const char *p = tmpl; *p; p++) {
    if (p[0] == '@' && p[1] == 'C') {
      o += sprintf(o, "'dlock.%s'", schema);
      p++;
    } else if (p[0] == '@' && p[1] == 'S') {
      *o++ = '"';
      memcpy(o, schema, sl);
      o += sl;
      *o++ = '"';
      p++;
    } else {
      *o++ = *p;
    }
  }
  *o = '\0';
  return out;
}

void dlock__pg_sql_build(dlock__pg *pg) {
  static const char *const tmpl[DLOCK__PG_SQL_COUNT] = {
      [DLOCK__PG_SQL_ACQUIRE] = sql_acquire,
      [DLOCK__PG_SQL_WAITER_ADD] = sql_waiter_add,
      [DLOCK__PG_SQL_WAITER_DEL] = sql_waiter_del,
      [DLOCK__PG_SQL_RELEASE] = sql_release,
      [DLOCK__PG_SQL_RENEW] = sql_renew,
      [DLOCK__PG_SQL_REMAINING] = sql_remaining,
      [DLOCK__PG_SQL_INFO] = sql_info,
      [DLOCK__PG_SQL_LIST] = sql_list,
      [DLOCK__PG_SQL_FORCE] = sql_force,
      [DLOCK__PG_SQL_GUARD] = sql_guard,
      [DLOCK__PG_SQL_CLAIM] = sql_claim,
      [DLOCK__PG_SQL_FINISH] = sql_finish,
      [DLOCK__PG_SQL_HISTORY] = sql_history,
      [DLOCK__PG_SQL_INIT] = sql_init,
      [DLOCK__PG_SQL_FAM_ACQUIRE] = sql_fam_acquire,
      [DLOCK__PG_SQL_FAM_RELEASE] = sql_fam_release,
      [DLOCK__PG_SQL_FAM_INFO] = sql_fam_info,
      [DLOCK__PG_SQL_PRUNE] = sql_prune,
      [DLOCK__PG_SQL_FAM_HOLDERS] = sql_fam_holders,
  };
  for (int i = 0; i < DLOCK__PG_SQL_COUNT; i++) pg->sql[i] = expand(tmpl[i], pg->schema);
}

void dlock__pg_sql_free(dlock__pg *pg) {
  for (int i = 0; i < DLOCK__PG_SQL_COUNT; i++) {
    free(pg->sql[i]);
    pg->sql[i] = NULL;
  }
}
