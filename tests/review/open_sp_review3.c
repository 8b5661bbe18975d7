/*
 * open_sp_review3.c - the third adversarial review of the Sentinel/Cluster
 * guard floor and the PostgreSQL guard (branch rev3sp). Each test is an open
 * finding: it fails on the code as reviewed. Real servers (harness_sentinel.h),
 * real faults (SIGSTOP, a replication link cut by the replica's own
 * configuration), a history of guard admissions appended to an O_APPEND file
 * and checked at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "harness_sentinel.h"
#include "test.h"

/* ---- a history of guard admissions (one line per answer, O_APPEND) ---- */

static char hist_path[512];

static void hist_open(const char *dir) {
  snprintf(hist_path, sizeof hist_path, "%s/guard-history", dir);
  unlink(hist_path);
}

static void hist_note(const char *who, uint64_t fence, int rc) {
  int fd = open(hist_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return;
  char line[160];
  int n = snprintf(line, sizeof line, "%s %" PRIu64 " %s\n", who, fence, rc == 0 ? "admitted" : dlock_err_name(rc));
  if (write(fd, line, (size_t)n) != n) { /* the check below reads what is there */ }
  close(fd);
}

/* The checker: no fence admitted after a higher one was admitted. Returns
 * 0, or -1 with the violation in 'why'. */
static int hist_check(char *why, size_t len) {
  FILE *f = fopen(hist_path, "r");
  if (!f) { snprintf(why, len, "no history at %s", hist_path); return -1; }
  char who[64], what[64];
  uint64_t fence, highest = 0;
  char highest_who[64] = "";
  int bad = 0;
  while (!bad && fscanf(f, "%63s %" SCNu64 " %63s", who, &fence, what) == 3) {
    if (strcmp(what, "admitted") != 0) continue;
    if (fence < highest) {
      snprintf(why, len, "%s's fence %" PRIu64 " admitted after %s's %" PRIu64 " was admitted", who, fence,
               highest_who, highest);
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

/* Wait until INFO replication on 'r' contains every one of the (up to 3)
 * strings. 0, or -1 after 'ms'. */
static int wait_info(const th_redis *r, long ms, const char *a, const char *b, const char *c) {
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

static int get_key(const th_redis *r, const char *key, char *out, size_t len) {
  return th_redis_cli(r, out, len, "GET %s", key);
}

/* ==== Finding 1 ====
 *
 * The promise (docs/topologies.md, "The guard across a failover"): "A record
 * of another process (a promoted replica holds the old master's) or no record
 * at all ... means that this process has issued no fence yet, so the floor is
 * taken then ... Every token the new master issues is at or above its floor,
 * and the guard admits no token below it: every token issued before the
 * change of master is refused with DLOCK_ESTALE"; the guard's own record
 * "can be missing on the promoted replica", which is what the floor is for
 * ("Tested with ... a failover that lost the resource's first admission").
 *
 * The attack: the floor record names a run id, and a record with this
 * process's run id is taken as "this process has served this dataset as
 * master since its floor". A server that was master, was demoted (the
 * sentinels make it a replica when it comes back after a failover) and is
 * promoted again keeps its run id, and the record of its first term comes
 * back to it by replication from the master between (which issued no fence
 * before the resync). Three masters in a row, A, B, A:
 *   1. A master: holder H1 acquires "res" (token t1) and passes the guard.
 *   2. A frozen (SIGSTOP): the sentinels promote B. A thawed: made B's
 *      replica, its dataset is B's, whose record is still A's ("<A's run id>
 *      <A's floor>").
 *   3. A's replication link is cut (A's masterauth set wrong, B's replica
 *      connection killed: A reconnects and is refused). H1's lease ends; H2
 *      acquires "res" on B (t2 > t1) and passes the guard (B's record now,
 *      {res}:guard = t2), neither reaching A: the last writes before a
 *      failover, lost.
 *   4. B frozen: the sentinels promote A.
 *   5. H1 (frozen all this time, as a holder may be) checks the guard with
 *      t1 on A.
 * What happened: A finds its own run id in the record, keeps the floor of its
 * first term (below t1) and admits t1 after t2 was admitted: a stale writer
 * passes the guard after a newer one wrote. A fresh promotion (floor = now)
 * would have refused it.
 */
TEST(sentinel_guard_admits_a_stale_token_on_a_master_promoted_a_second_time) {
  th_sentinel_set s;
  memset(&s, 0, sizeof s);
  if (th_sentinel_set_start(&s, "rev3") != 0) TEST_SKIP("could not start the Sentinel set");
  dlock_client *c1 = NULL, *c2 = NULL, *c3 = NULL;
  dlock_mutex *h1 = NULL, *h2 = NULL;
  char why[512] = "";
  char out[4096], rec_a[256] = "";
  int failed = 0;
  hist_open(s.master.dir);
  th_redis *A = &s.master, *B = &s.replica;
#define STEP_FAIL(...)                              \
  do {                                              \
    snprintf(why, sizeof why, __VA_ARGS__);         \
    failed = 1;                                     \
    goto done;                                      \
  } while (0)

  /* 1. A master: H1 takes t1 and passes the guard. */
  if (!(c1 = th_client_retry(s.url))) STEP_FAIL("no client of %s: %s", s.url, dlock_last_error());
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 2000;
  if (dlock_mutex_new(&h1, c1, "res", &mo) != 0) STEP_FAIL("mutex_new: %s", dlock_last_error());
  if (dlock_mutex_acquire(h1, 5000) != 0) STEP_FAIL("H1 acquire on A: %s", dlock_last_error());
  uint64_t t1 = dlock_mutex_fence(h1);
  int rc = dlock_guard_check(c1, "res", t1);
  hist_note("H1", t1, rc);
  if (rc != 0) STEP_FAIL("H1's first guard check on A: %s", dlock_last_error());
  get_key(A, "dlock-epoch", rec_a, sizeof rec_a);
  /* B has A's record and the guard's before A freezes. */
  for (int i = 0; i < 100; i++) {
    if (get_key(B, "dlock-epoch", out, sizeof out) == 0 && strcmp(out, rec_a) == 0) break;
    th_sleep_ms(100);
  }
  if (strcmp(out, rec_a) != 0) STEP_FAIL("B never got A's record '%s' (has '%s')", rec_a, out);
  fprintf(stderr, "  A's record: %s, t1 = %" PRIu64 "\n", rec_a, t1);

  /* 2. Failover to B; A thawed becomes B's replica. */
  kill(A->pid, SIGSTOP);
  int promoted = th_sentinel_wait_master(&s, B->port, 60000);
  kill(A->pid, SIGCONT);
  if (promoted != 0) STEP_FAIL("the sentinels did not promote B (port %d) within 60 s", B->port);
  char bport[64];
  snprintf(bport, sizeof bport, "master_port:%d", B->port);
  if (wait_info(A, 60000, "role:slave", bport, "master_link_status:up") != 0)
    STEP_FAIL("A (port %d) did not become B's replica within 60 s", A->port);
  get_key(A, "dlock-epoch", out, sizeof out);
  fprintf(stderr, "  A as B's replica holds the record: %s\n", out);

  /* 3. Cut A's link: it reconnects with a password B refuses. */
  if (th_redis_cli(A, out, sizeof out, "CONFIG SET masterauth rev3-wrong") != 0)
    STEP_FAIL("CONFIG SET masterauth on A: %s", out);
  th_redis_cli(B, out, sizeof out, "CLIENT KILL TYPE replica");
  if (wait_info(A, 20000, "master_link_status:down", NULL, NULL) != 0) STEP_FAIL("A's link to B stayed up");
  th_sleep_ms(1500);
  if (wait_info(A, 2000, "master_link_status:down", NULL, NULL) != 0) STEP_FAIL("A's link to B came back");

  if (!(c2 = th_client_retry(s.url))) STEP_FAIL("no client after the failover: %s", dlock_last_error());
  if (dlock_mutex_new(&h2, c2, "res", &mo) != 0) STEP_FAIL("mutex_new: %s", dlock_last_error());
  rc = -1;
  for (int i = 0; i < 20 && rc != 0; i++) {
    rc = dlock_mutex_acquire(h2, 5000);
    if (rc != 0) th_sleep_ms(500);
  }
  if (rc != 0) STEP_FAIL("H2 acquire on B: %s", dlock_last_error());
  uint64_t t2 = dlock_mutex_fence(h2);
  rc = dlock_guard_check(c2, "res", t2);
  hist_note("H2", t2, rc);
  if (rc != 0) STEP_FAIL("H2's guard check on B with t2 = %" PRIu64 ": %s", t2, dlock_last_error());
  get_key(B, "dlock-epoch", out, sizeof out);
  fprintf(stderr, "  B's record: %s, t2 = %" PRIu64 "\n", out, t2);
  if (wait_info(A, 1000, "master_link_status:down", NULL, NULL) != 0) STEP_FAIL("A's link to B came back");
  dlock_mutex_release(h2);

  /* 4. B frozen: the sentinels promote A. */
  kill(B->pid, SIGSTOP);
  promoted = th_sentinel_wait_master(&s, A->port, 60000);
  if (promoted != 0) STEP_FAIL("the sentinels did not promote A (port %d) again within 60 s", A->port);
  get_key(A, "dlock-epoch", out, sizeof out);
  fprintf(stderr, "  A promoted again holds the record: %s\n", out);

  /* 5. H1's stale token on A. */
  if (!(c3 = th_client_retry(s.url))) STEP_FAIL("no client after the second failover: %s", dlock_last_error());
  uint64_t hi = 0;
  rc = -1;
  for (int i = 0; i < 20; i++) {
    rc = dlock_guard_check_highest(c3, "res", t1, &hi);
    if (rc == 0 || rc == DLOCK_ESTALE) break;
    th_sleep_ms(500);
  }
  hist_note("H1", t1, rc);
  fprintf(stderr, "  H1's check with t1 on A: %s (highest %" PRIu64 ")\n", rc == 0 ? "admitted" : dlock_err_name(rc),
          hi);
  if (hist_check(why, sizeof why) != 0) failed = 1;
  else if (rc != DLOCK_ESTALE) snprintf(why, sizeof why, "H1's check: %s: %s", dlock_err_name(rc), dlock_last_error()), failed = 1;

done:
#undef STEP_FAIL
  kill(B->pid, SIGCONT);
  dlock_mutex_free(h2);
  dlock_mutex_free(h1);
  dlock_client_free(c3);
  dlock_client_free(c2);
  dlock_client_free(c1);
  th_sentinel_set_stop(&s);
  if (failed) TEST_FAIL("%s", why);
}

TEST_MAIN()
