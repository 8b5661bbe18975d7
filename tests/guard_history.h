/*
 * guard_history.h - helpers of the guard tests through two failovers and a
 * reshard (third Sentinel/Cluster/PostgreSQL review, branch rev3sp), shared
 * by test_sentinel_guard.c and test_cluster_guard.c: a history of guard admissions
 * appended to an O_APPEND file and checked at the end, waits on INFO
 * replication, a replication link cut by the replica's own configuration,
 * and a holder that passes the guard once.
 */
#ifndef DLOCK_GUARD_HISTORY_H
#define DLOCK_GUARD_HISTORY_H

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"

/* ---- a history of guard admissions (one line per answer, O_APPEND) ---- */

static char hist_path[512] __attribute__((unused));

static inline void hist_open(const char *dir) {
  snprintf(hist_path, sizeof hist_path, "%s/guard-history", dir);
  unlink(hist_path);
}

static inline void hist_note(const char *who, uint64_t fence, int rc) {
  int fd = open(hist_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return;
  char line[160];
  int n = snprintf(line, sizeof line, "%s %" PRIu64 " %s\n", who, fence, rc == 0 ? "admitted" : dlock_err_name(rc));
  if (write(fd, line, (size_t)n) != n) { /* the check below reads what is there */
  }
  close(fd);
}

/* The checker: no fence admitted after a higher one was admitted. Returns
 * 0, or -1 with the violation in 'why'. */
static inline int hist_check(char *why, size_t len) {
  FILE *f = fopen(hist_path, "r");
  if (!f) {
    snprintf(why, len, "no history at %s", hist_path);
    return -1;
  }
  char who[64], what[64];
  uint64_t fence, highest = 0;
  char highest_who[64] = "";
  int bad = 0;
  while (!bad && fscanf(f, "%63s %" SCNu64 " %63s", who, &fence, what) == 3) {
    if (strcmp(what, "admitted") != 0) continue;
    if (fence < highest) {
      snprintf(why, len, "%s's fence %" PRIu64 " admitted after %s's %" PRIu64 " was admitted", who, fence, highest_who,
               highest);
      bad = 1;
    } else {
      highest = fence;
      snprintf(highest_who, sizeof highest_who, "%s", who);
    }
  }
  fclose(f);
  return bad ? -1 : 0;
}

/* ---- helpers ---- */

/* In a test body with locals why[], failed and a label done: note why and
 * go to the cleanup. */
#define STEP_FAIL(...)                      \
  do {                                      \
    snprintf(why, sizeof why, __VA_ARGS__); \
    failed = 1;                             \
    goto done;                              \
  } while (0)

/* Wait until INFO replication on 'r' contains every one of the (up to 3)
 * strings. 0, or -1 after 'ms'. */
static inline int wait_info(const th_redis *r, long ms, const char *a, const char *b, const char *c) {
  long long end = th_now_ms() + ms * th_time_factor();
  char out[8192];
  for (int i = 0; i < 10000 && th_now_ms() < end; i++) {
    if (th_redis_cli(r, out, sizeof out, "INFO replication") == 0 && strstr(out, a) && (!b || strstr(out, b)) &&
        (!c || strstr(out, c)))
      return 0;
    th_sleep_ms(100);
  }
  return -1;
}

/* Wait until 'a' replicates 'b' with its link up (60 s). 0 or -1. */
static inline int wait_replica_of(const th_redis *a, const th_redis *b) {
  char bport[64];
  snprintf(bport, sizeof bport, "master_port:%d", b->port);
  return wait_info(a, 60000, "role:slave", bport, "master_link_status:up");
}

/* Cut replica 'a' off its master 'b': 'a' reconnects with a password that
 * 'b' (no password) refuses, once 'b' dropped its replica connection. */
static inline int cut_link(const th_redis *a, const th_redis *b, char *why, size_t len) {
  char out[512];
  if (th_redis_cli(a, out, sizeof out, "CONFIG SET masterauth rev3-wrong") != 0) {
    snprintf(why, len, "CONFIG SET masterauth on port %d: %s", a->port, out);
    return -1;
  }
  th_redis_cli(b, out, sizeof out, "CLIENT KILL TYPE replica");
  if (wait_info(a, 20000, "master_link_status:down", NULL, NULL) != 0) {
    snprintf(why, len, "the link of port %d to its master %d stayed up", a->port, b->port);
    return -1;
  }
  return 0;
}

static inline int get_key(const th_redis *r, const char *key, char *out, size_t len) {
  return th_redis_cli(r, out, len, "GET %s", key);
}

/* A guard check that has an answer (admitted or stale): tried every 0.5 s
 * for 10 s while the client finds its way after a change. */
static inline int guard_answer(dlock_client *c, const char *res, uint64_t token, uint64_t *hi) {
  int rc = -1;
  for (int i = 0; i < 20; i++) {
    rc = dlock_guard_check_highest(c, res, token, hi);
    if (rc == 0 || rc == DLOCK_ESTALE) break;
    th_sleep_ms(500);
  }
  return rc;
}

/* A fixed-lease hold of "res" through 'c' and a first guard check with its
 * fence (noted as 'who' in the history). 0, or the failing call's code. */
static inline int hold_and_guard(dlock_client *c, const char *who, int64_t lease_ms, dlock_mutex **m, uint64_t *fence) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  int rc = dlock_mutex_new(m, c, "res", &mo);
  if (rc == 0) rc = dlock_mutex_acquire(*m, 5000);
  if (rc != 0) return rc;
  *fence = dlock_mutex_fence(*m);
  rc = dlock_guard_check(c, "res", *fence);
  hist_note(who, *fence, rc);
  return rc;
}

/* hold_and_guard() tried every 0.5 s for 10 s while the acquire fails (the
 * client finding the new master after a failover). */
static inline int hold_and_guard_retry(dlock_client *c, const char *who, int64_t lease_ms, dlock_mutex **m,
                                       uint64_t *fence) {
  int rc = -1;
  for (int i = 0; i < 20; i++) {
    *fence = 0;
    rc = hold_and_guard(c, who, lease_ms, m, fence);
    if (rc == 0 || *fence != 0) return rc; /* held: the guard's answer */
    dlock_mutex_free(*m);
    *m = NULL;
    th_sleep_ms(500);
  }
  return rc;
}

/* Repl field 'field' (e.g. "master_port:") of INFO replication on 'r', or -1. */
static inline long long repl_num(const th_redis *r, const char *field) {
  char out[8192];
  if (th_redis_cli(r, out, sizeof out, "INFO replication") != 0) return -1;
  const char *p = strstr(out, field);
  return p ? atoll(p + strlen(field)) : -1;
}

#endif
