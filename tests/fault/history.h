/*
 * history.h - the fault matrix's history checker (issue 22 item 12).
 *
 * Every fault worker (fault_worker.c) appends one line per event to its own
 * log; the runner (fault_runner.c) appends the faults it injects to its own.
 * All times are CLOCK_MONOTONIC nanoseconds, comparable across the
 * processes of one machine. Lines are "TAG key=value ...":
 *
 *   B w= seq= name= kind=mutex|sem|read|write permits= fence= t_call= t_acq= vu= [fixed=0|1]
 *       a hold began: acquire called at t_call, returned 0 at t_acq, with
 *       dlock_mutex_valid_until() vu (ns); fixed=1: a fixed lease (no watchdog)
 *   R w= seq= vu=       the watchdog moved valid_until (written while holding)
 *   E w= seq= t_end= vu= lost=NONE|EXPIRED|... t_lost= rc=OK|ENOTHELD|... view=ok|late
 *       the hold ended: the worker stopped counting on it at t_end (the
 *       release call), or the loss signal fired at t_lost (0: none); rc is
 *       the release's outcome; view=late when dlock_mutex_lost() still said
 *       NONE after valid_until had passed
 *   G w= seq= res= fence= t_call= t_ret= rc=OK|ESTALE|...
 *       a write through the fencing guard (dlock_guard_check) with the fence
 *   F kind=stop|cont|kill w= t=   the runner froze, thawed or killed worker w
 *   F kind=<other> t= what=       a server fault (kept for the report only)
 *
 * A hold counts from t_acq to the earliest of t_end, t_lost and its last
 * known valid_until (a killed worker's hold has no E line: it counts until
 * the last vu it wrote). The checker reports, each with the lines involved:
 *  - overlap: two holds of a mutex or of the write side, more holds than
 *    permits of a semaphore, a writer with a reader;
 *  - fence order: a hold whose acquire was called after another hold of the
 *    same name had ended must have a larger fence;
 *  - wrong outcome: a release that returned OK after the hold was lost or
 *    after its valid_until; dlock_mutex_lost() saying NONE past valid_until;
 *  - late loss: a loss signalled (or not at all) more than the tolerance
 *    after valid_until, while the worker was not frozen by the runner;
 *  - guard: a write admitted after a higher fence had been admitted;
 *  - with no_loss, a loss the deployment should have survived;
 *  - with allow_reported_failover, an overlap counts only when neither hold
 *    was told (no loss signal and a release that returned OK).
 */
#ifndef DLOCK_TEST_FAULT_HISTORY_H
#define DLOCK_TEST_FAULT_HISTORY_H

#include <stdint.h>
#include <stdio.h>

typedef struct fh_policy {
  /* A loss signalled this much after valid_until is late. Default 2 s. */
  int64_t late_tol_ns;
  /* docs/topologies.md, Sentinel and Cluster without WAIT: "A lock taken or
   * renewed on the old master in the moments before it died may be missing
   * on the promoted replica. Then another client can take the same lock on
   * the new master while the first still believes it holds it, until" its
   * next renewal reports DLOCK_LOST_FAILOVER. 1: a hold whose loss was
   * reported as FAILOVER is left out of the overlap check (the reported loss
   * is what the deployment promises); a silent overlap is still one. With
   * a fixed lease the holder is told by its release (DLOCK_ENOTHELD): a
   * hold told in any way (a loss signal, a release other than OK) is left
   * out likewise. */
  int allow_reported_failover;
  /* 1: the faults of the run are ones the deployment survives without
   * losing a hold (docs/topologies.md, Redlock: "any minority of the nodes
   * down, frozen or restarted"): a loss signalled while the worker was not
   * frozen is a violation, except a fixed lease's at its valid_until. */
  int no_loss;
  /* 1: holds carry no fence (PostgreSQL advisory mode, docs/postgres.md:
   * "acquisitions carry fence 0"): no fence checks. */
  int no_fence;
} fh_policy;

void fh_policy_init(fh_policy *p);

typedef struct fh_history fh_history;

fh_history *fh_new(void);
void fh_free(fh_history *h);
/* Add one log line; 'where' ("w3.log:17") names it in the report. 0, or -1
 * for a line the checker cannot read (counted as a violation by fh_check). */
int fh_add_line(fh_history *h, const char *line, const char *where);
/* Every line of 'path', or of every *.log file in 'dir'. 0 or -1 (I/O). */
int fh_add_file(fh_history *h, const char *path);
int fh_add_dir(fh_history *h, const char *dir);
/* Check; one line per violation to 'report' (may be NULL), then a summary
 * line. Returns the number of violations. */
int fh_check(fh_history *h, const fh_policy *p, FILE *report);
/* Holds read so far (B lines), and those of them with no E line. */
int fh_holds(const fh_history *h);
int fh_open_holds(const fh_history *h);

#endif
