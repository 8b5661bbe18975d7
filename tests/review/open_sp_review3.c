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
#include <sys/stat.h>

#include "dlock.h"
#include "harness.h"
#include "harness_sentinel.h"
#include "harness_cluster.h"
#ifdef DLOCK_TEST_HAVE_PG
#include "harness_pg.h"
#endif
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

/* In a test body with locals why[], failed and a label done: note why and
 * go to the cleanup. */
#define STEP_FAIL(...)                              \
  do {                                              \
    snprintf(why, sizeof why, __VA_ARGS__);         \
    failed = 1;                                     \
    goto done;                                      \
  } while (0)

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

/* Wait until 'a' replicates 'b' with its link up (60 s). 0 or -1. */
static int wait_replica_of(const th_redis *a, const th_redis *b) {
  char bport[64];
  snprintf(bport, sizeof bport, "master_port:%d", b->port);
  return wait_info(a, 60000, "role:slave", bport, "master_link_status:up");
}

/* Cut replica 'a' off its master 'b': 'a' reconnects with a password that
 * 'b' (no password) refuses, once 'b' dropped its replica connection. */
static int cut_link(const th_redis *a, const th_redis *b, char *why, size_t len) {
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

static int get_key(const th_redis *r, const char *key, char *out, size_t len) {
  return th_redis_cli(r, out, len, "GET %s", key);
}

/* A guard check that has an answer (admitted or stale): tried every 0.5 s
 * for 10 s while the client finds its way after a change. */
static int guard_answer(dlock_client *c, const char *res, uint64_t token, uint64_t *hi) {
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
static int hold_and_guard(dlock_client *c, const char *who, int64_t lease_ms, dlock_mutex **m, uint64_t *fence) {
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
static int hold_and_guard_retry(dlock_client *c, const char *who, int64_t lease_ms, dlock_mutex **m,
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

  /* 1. A master: H1 takes t1 and passes the guard. */
  if (!(c1 = th_client_retry(s.url))) STEP_FAIL("no client of %s: %s", s.url, dlock_last_error());
  uint64_t t1 = 0;
  int rc = hold_and_guard(c1, "H1", 2000, &h1, &t1);
  if (rc != 0) STEP_FAIL("H1's acquire and guard check on A: %s", dlock_last_error());
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
  if (wait_replica_of(A, B) != 0) STEP_FAIL("A (port %d) did not become B's replica within 60 s", A->port);
  get_key(A, "dlock-epoch", out, sizeof out);
  fprintf(stderr, "  A as B's replica holds the record: %s\n", out);

  /* 3. Cut A's link: it reconnects with a password B refuses. */
  if (cut_link(A, B, why, sizeof why) != 0) {
    failed = 1;
    goto done;
  }
  th_sleep_ms(1500);
  if (wait_info(A, 2000, "master_link_status:down", NULL, NULL) != 0) STEP_FAIL("A's link to B came back");

  if (!(c2 = th_client_retry(s.url))) STEP_FAIL("no client after the failover: %s", dlock_last_error());
  uint64_t t2 = 0;
  rc = hold_and_guard_retry(c2, "H2", 2000, &h2, &t2);
  if (rc != 0) STEP_FAIL("H2's acquire and guard check on B (t2 = %" PRIu64 "): %s", t2, dlock_last_error());
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
  rc = guard_answer(c3, "res", t1, &hi);
  hist_note("H1", t1, rc);
  fprintf(stderr, "  H1's check with t1 on A: %s (highest %" PRIu64 ")\n", rc == 0 ? "admitted" : dlock_err_name(rc),
          hi);
  if (hist_check(why, sizeof why) != 0) failed = 1;
  else if (rc != DLOCK_ESTALE) snprintf(why, sizeof why, "H1's check: %s: %s", dlock_err_name(rc), dlock_last_error()), failed = 1;

done:
  kill(B->pid, SIGCONT);
  dlock_mutex_free(h2);
  dlock_mutex_free(h1);
  dlock_client_free(c3);
  dlock_client_free(c2);
  dlock_client_free(c1);
  th_sentinel_set_stop(&s);
  if (failed) TEST_FAIL("%s", why);
}

/* ==== Finding 1, on a cluster ====
 *
 * The same promise per slot (docs/topologies.md, Redis Cluster: "after a
 * failover of that slot's master, the guard refuses the tokens issued before
 * it, as under Sentinel"), and the same attack: the slot's record
 * ("{<n>}:dlock-epoch") of master A's first term comes back to A by
 * replication from B, which promoted when A froze and issued nothing before A
 * resynced; A's link is cut, B admits t2, B freezes, the cluster promotes A
 * again, which keeps its first term's floor and admits t1 < t2.
 */
static long long repl_num(const th_redis *r, const char *field) {
  char out[8192];
  if (th_redis_cli(r, out, sizeof out, "INFO replication") != 0) return -1;
  const char *p = strstr(out, field);
  return p ? atoll(p + strlen(field)) : -1;
}

static int epoch_key_of_slot(const th_redis *r, int slot, char *key, size_t len) {
  char keys[4096];
  if (th_redis_cli(r, keys, sizeof keys, "CLUSTER GETKEYSINSLOT %d 100", slot) != 0) return -1;
  char *save = NULL;
  for (char *k = strtok_r(keys, "\n", &save); k; k = strtok_r(NULL, "\n", &save))
    if (strstr(k, "dlock-epoch")) { snprintf(key, len, "'%s'", k); return 0; }
  return -1;
}

TEST(cluster_guard_admits_a_stale_token_on_a_master_promoted_a_second_time) {
  th_cluster cl;
  memset(&cl, 0, sizeof cl);
  if (th_cluster_start(&cl, 3, 1) != 0) TEST_SKIP("could not start a cluster of 3 masters with a replica each");
  dlock_client *c1 = NULL, *c2 = NULL, *c3 = NULL;
  dlock_mutex *h1 = NULL, *h2 = NULL;
  char why[512] = "", out[8192], rec_a[256] = "", ekey[256] = "";
  int failed = 0;
  th_redis *A = NULL, *B = NULL;
  hist_open(cl.node[0].dir);
  int ia = th_cluster_owner(&cl, "res");
  if (ia < 0) STEP_FAIL("no owner of \"res\"");
  A = &cl.node[ia];
  for (int j = 0; j < cl.n && !B; j++)
    if (j != ia && repl_num(&cl.node[j], "master_port:") == A->port) B = &cl.node[j];
  if (!B) STEP_FAIL("no replica of A (port %d)", A->port);
  th_redis_cli(A, out, sizeof out, "CLUSTER KEYSLOT res");
  int slot = atoi(out);

  if (!(c1 = th_client_retry(cl.url))) STEP_FAIL("no client of %s: %s", cl.url, dlock_last_error());
  uint64_t t1 = 0;
  int rc = hold_and_guard(c1, "H1", 2000, &h1, &t1);
  if (rc != 0) STEP_FAIL("H1's acquire and guard check on A: %s", dlock_last_error());
  if (epoch_key_of_slot(A, slot, ekey, sizeof ekey) != 0) STEP_FAIL("no dlock-epoch record in slot %d", slot);
  get_key(A, ekey, rec_a, sizeof rec_a);
  /* A replica of a cluster answers MOVED to a GET: wait for its offset. */
  long long want = repl_num(A, "master_repl_offset:");
  for (int i = 0; i < 100 && repl_num(B, "slave_repl_offset:") < want; i++) th_sleep_ms(100);
  if (want <= 0 || repl_num(B, "slave_repl_offset:") < want) STEP_FAIL("B did not reach A's offset %lld", want);
  fprintf(stderr, "  A's record %s: %s, t1 = %" PRIu64 "\n", ekey, rec_a, t1);

  kill(A->pid, SIGSTOP);
  /* Ask only the node that runs: redis-cli waits forever on a frozen one. */
  int promoted = wait_info(B, 60000, "role:master", NULL, NULL);
  kill(A->pid, SIGCONT);
  if (promoted != 0) STEP_FAIL("the cluster did not promote B (port %d)", B->port);
  if (wait_replica_of(A, B) != 0) STEP_FAIL("A (port %d) did not become B's replica within 60 s", A->port);

  if (cut_link(A, B, why, sizeof why) != 0) {
    failed = 1;
    goto done;
  }

  if (!(c2 = th_client_retry(cl.url))) STEP_FAIL("no client after the failover: %s", dlock_last_error());
  uint64_t t2 = 0;
  rc = hold_and_guard_retry(c2, "H2", 2000, &h2, &t2);
  if (rc != 0) STEP_FAIL("H2's acquire and guard check on B (t2 = %" PRIu64 "): %s", t2, dlock_last_error());
  get_key(B, ekey, out, sizeof out);
  fprintf(stderr, "  B's record: %s, t2 = %" PRIu64 "\n", out, t2);
  if (wait_info(A, 1000, "master_link_status:down", NULL, NULL) != 0) STEP_FAIL("A's link to B came back");
  dlock_mutex_release(h2);

  kill(B->pid, SIGSTOP);
  if (wait_info(A, 60000, "role:master", NULL, NULL) != 0)
    STEP_FAIL("the cluster did not promote A (port %d) again", A->port);
  get_key(A, ekey, out, sizeof out);
  fprintf(stderr, "  A promoted again holds: %s\n", out);

  if (!(c3 = th_client_retry(cl.url))) STEP_FAIL("no client after the second failover: %s", dlock_last_error());
  uint64_t hi = 0;
  rc = guard_answer(c3, "res", t1, &hi);
  hist_note("H1", t1, rc);
  fprintf(stderr, "  H1's check with t1 on A: %s\n", rc == 0 ? "admitted" : dlock_err_name(rc));
  if (hist_check(why, sizeof why) != 0) failed = 1;
  else if (rc != DLOCK_ESTALE) snprintf(why, sizeof why, "H1's check: %s: %s", dlock_err_name(rc), dlock_last_error()), failed = 1;
done:
  if (B) kill(B->pid, SIGCONT);
  dlock_mutex_free(h2);
  dlock_mutex_free(h1);
  dlock_client_free(c3);
  dlock_client_free(c2);
  dlock_client_free(c1);
  th_cluster_stop(&cl);
  if (failed) TEST_FAIL("%s", why);
}

/* ==== Finding 3 ====
 *
 * The promise (docs/topologies.md, Redis Cluster, "The fence guarantee"): "A
 * reshard that migrates the slot with its keys (redis-cli --cluster reshard,
 * MIGRATE) is no change of master for the guard: {R}:guard and the slot's
 * record move with the keys, the new owner floors the slot at its own start,
 * so holders go on (none is refused) and no admission is lost."
 *
 * The attack: the new owner's "own start" can be after the holder's token was
 * issued: a master restarted (kill -9, it rejoins with its own slots) after
 * the holder acquired on the old owner. Three masters: H1 acquires "res" on
 * its master M1 (fence t1, 60 s lease) and passes the guard; M2 restarts;
 * the slot of "res" is migrated from M1 to M2 with all its keys (SETSLOT
 * IMPORTING/MIGRATING, MIGRATE of every key of the slot, SETSLOT NODE); H1,
 * still holding, checks the guard with t1 again.
 * What happened: DLOCK_ESTALE ("the master changed"): M2 finds the moved
 * record of M1's process, floors the slot at its own start, after t1, and
 * refuses a holder whose lock is still held. A wrong refusal (the holder must
 * acquire again), never a stale admission; the docs promise none.
 */
static int cluster_id(const th_redis *r, char *id, size_t len) {
  return th_redis_cli(r, id, len, "CLUSTER MYID") == 0 && id[0] ? 0 : -1;
}

TEST(cluster_reshard_onto_a_restarted_master_refuses_a_live_holder) {
  th_cluster cl;
  memset(&cl, 0, sizeof cl);
  if (th_cluster_start(&cl, 3, 0) != 0) TEST_SKIP("could not start a 3-master cluster");
  dlock_client *c = NULL;
  dlock_mutex *h1 = NULL;
  char why[512] = "", out[8192];
  int failed = 0;
  int i1 = th_cluster_owner(&cl, "res");
  if (i1 < 0) STEP_FAIL("no owner of \"res\"");
  int i2 = (i1 + 1) % 3;
  th_redis *m1 = &cl.node[i1], *m2 = &cl.node[i2];
  if (!(c = th_client_retry(cl.url))) STEP_FAIL("no client of %s: %s", cl.url, dlock_last_error());
  uint64_t t1 = 0;
  int rc = hold_and_guard(c, "H1", 60000, &h1, &t1);
  if (rc != 0) STEP_FAIL("H1's acquire and guard check: %s", dlock_last_error());
  th_sleep_ms(1200); /* M2's next process starts in a later second than t1 */
  if (th_redis_restart(m2) != 0) STEP_FAIL("could not restart master %d", m2->port);
  if (th_cluster_wait_ok(&cl, NULL, 60000) != 0) STEP_FAIL("the cluster did not come back after M2's restart");
  char id1[128], id2[128];
  if (cluster_id(m1, id1, sizeof id1) || cluster_id(m2, id2, sizeof id2)) STEP_FAIL("CLUSTER MYID");
  th_redis_cli(m1, out, sizeof out, "CLUSTER KEYSLOT res");
  int slot = atoi(out);
  th_redis_cli(m2, out, sizeof out, "CLUSTER SETSLOT %d IMPORTING %s", slot, id1);
  th_redis_cli(m1, out, sizeof out, "CLUSTER SETSLOT %d MIGRATING %s", slot, id2);
  char keys[4096];
  if (th_redis_cli(m1, keys, sizeof keys, "CLUSTER GETKEYSINSLOT %d 100", slot) != 0 || !keys[0])
    STEP_FAIL("no keys in slot %d on M1", slot);
  fprintf(stderr, "  moving slot %d (%s) from %d to %d\n", slot, keys, m1->port, m2->port);
  char *save = NULL;
  for (char *k = strtok_r(keys, "\n", &save); k; k = strtok_r(NULL, "\n", &save)) {
    if (th_redis_cli(m1, out, sizeof out, "MIGRATE 127.0.0.1 %d '%s' 0 5000", m2->port, k) != 0 ||
        strstr(out, "ERR"))
      STEP_FAIL("MIGRATE %s: %s", k, out);
  }
  for (int i = 0; i < 3; i++) th_redis_cli(&cl.node[i], out, sizeof out, "CLUSTER SETSLOT %d NODE %s", slot, id2);
  if (th_cluster_wait_ok(&cl, "res", 30000) != 0) STEP_FAIL("the nodes do not agree that M2 owns \"res\"");
  if (th_cluster_owner(&cl, "res") != i2) STEP_FAIL("\"res\" did not move to M2");
  uint64_t hi = 0;
  rc = guard_answer(c, "res", t1, &hi);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", rc == 0 ? "" : dlock_last_error());
  int held = dlock_mutex_is_held(h1);
  fprintf(stderr, "  after the reshard: H1 (fence %" PRIu64 ", held %d) guard check: %s\n", t1, held,
          rc == 0 ? "admitted" : dlock_err_name(rc));
  if (rc != 0)
    STEP_FAIL("a reshard refused the live holder's token %" PRIu64 " (lock held: %d): %s: %s", t1, held,
              dlock_err_name(rc), msg);
done:
  dlock_mutex_free(h1);
  dlock_client_free(c);
  th_cluster_stop(&cl);
  if (failed) TEST_FAIL("%s", why);
}

/* ==== Finding 2 ====
 *
 * The promises (docs/postgres.md, "A step of the database host's clock"): "A
 * backward step lengthens leases ...; it is safe: a live hold is neither cut
 * nor lost, its renewal and release work, and the next fence of the name is
 * above the last"; (Fences) "at least the last fence of the same name ...
 * plus one, so that a clock stepped back cannot lower the fences of one
 * name"; (include/dlock.h, dlock_client_prune) "Never a live hold, a live
 * waiter, a fence guard or a scheduler's row, and fences keep rising (they
 * come from a sequence)"; (pg_sql.c, prune) "a name whose row was deleted
 * gets a higher fence next time".
 *
 * The attack: the fence is greatest(nextval(fence_seq), the clock in us,
 * the name's last fence + 1). The sequence is far below the clock, so after
 * a backward step only the name's row keeps its fences rising, and a prune
 * deletes that row once it is released and "older" than the cutoff on the
 * stepped clock. The server runs under libfaketime (TH_PG_PRELOAD):
 *   1. H1 acquires "res" (F0, the clock), passes the guard, releases.
 *   2. The database clock steps back two hours.
 *   3. H2 acquires "res" (F1 = F0 + 1: the row's fence), passes the guard,
 *      releases: the row's expiry is now on the stepped clock.
 *   4. dlock_client_prune(c, 1000, ...) 1.5 s later: the row is deleted.
 *   5. H3 acquires "res".
 * What happened: H3's fence is the stepped clock, two hours below F0 and F1:
 * fences went back, and the guard refuses the lock's current holder
 * (DLOCK_ESTALE) while a stale holder with F1 would still pass it, for the
 * two hours until the clock catches up.
 */
#ifdef DLOCK_TEST_HAVE_PG
static const char *faketime_lib(void) {
  static const char *const libs[] = {"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                     "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                     "/usr/lib/faketime/libfaketime.so.1"};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
    if (access(libs[i], R_OK) == 0) return libs[i];
  return NULL;
}

static int write_offset(const char *path, const char *offset) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "%s\n", offset);
  fclose(f);
  chmod(path, 0644);
  return 0;
}

static int pg_cycle(dlock_client *c, const char *who, uint64_t *fence, int *guard_rc) {
  dlock_mutex *m = NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 5000;
  int rc = dlock_mutex_new(&m, c, "res", &mo);
  if (rc == 0) rc = dlock_mutex_acquire(m, 10000);
  if (rc == 0) {
    *fence = dlock_mutex_fence(m);
    *guard_rc = dlock_guard_check(c, "res", *fence);
    hist_note(who, *fence, *guard_rc);
    rc = dlock_mutex_release(m);
  }
  dlock_mutex_free(m);
  return rc;
}

TEST(pg_fences_go_back_after_a_backward_clock_step_and_a_prune) {
  char why[512] = "";
  const char *lib = faketime_lib();
  if (!lib) TEST_SKIP("libfaketime is not installed");
  if (!th_pg_available(why, sizeof why)) TEST_SKIP("%s", why);
  char dir[] = "/tmp/rev3sp-ft-XXXXXX";
  if (!mkdtemp(dir)) TEST_SKIP("mkdtemp: %s", strerror(errno));
  chmod(dir, 0755);
  char ts[300];
  snprintf(ts, sizeof ts, "%s/offset", dir);
  write_offset(ts, "+0");
  setenv("FAKETIME_TIMESTAMP_FILE", ts, 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);
  setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
  setenv("TH_PG_PRELOAD", lib, 1);
  th_pg p;
  memset(&p, 0, sizeof p);
  int started = th_pg_start(&p, NULL);
  unsetenv("TH_PG_PRELOAD");
  if (started != 0) {
    unlink(ts);
    rmdir(dir);
    TEST_SKIP("could not start PostgreSQL under libfaketime");
  }
  hist_open(dir);
  dlock_client *c = NULL;
  int failed = 0, grc = 0;
  uint64_t f0 = 0, f1 = 0, f2 = 0;
  char out[256];
  if (!(c = th_pg_client(&p, "dlock", NULL))) {
    snprintf(why, sizeof why, "no client of %s: %s", p.url, dlock_last_error());
    failed = 1;
    goto done;
  }
  if (pg_cycle(c, "H1", &f0, &grc) != 0 || grc != 0) {
    snprintf(why, sizeof why, "H1's cycle: %s", dlock_last_error());
    failed = 1;
    goto done;
  }
  th_pg_sql(&p, NULL, out, sizeof out, "SELECT now()");
  fprintf(stderr, "  H1: fence %" PRIu64 " at %s\n", f0, out);
  write_offset(ts, "-7200");
  th_sleep_ms(300);
  th_pg_sql(&p, NULL, out, sizeof out, "SELECT clock_timestamp()");
  fprintf(stderr, "  the database clock stepped back: %s\n", out);
  if (pg_cycle(c, "H2", &f1, &grc) != 0 || grc != 0) {
    snprintf(why, sizeof why, "H2's cycle after the step: %s", dlock_last_error());
    failed = 1;
    goto done;
  }
  fprintf(stderr, "  H2: fence %" PRIu64 "\n", f1);
  th_sleep_ms(1500);
  int64_t pruned = 0, total = 0;
  for (int i = 0; i < 10; i++) {
    if (dlock_client_prune(c, 1000, &pruned) != 0) {
      snprintf(why, sizeof why, "prune: %s", dlock_last_error());
      failed = 1;
      goto done;
    }
    total += pruned;
    if (pruned == 0) break;
  }
  fprintf(stderr, "  pruned %" PRId64 " rows\n", total);
  uint64_t before = f1;
  if (pg_cycle(c, "H3", &f2, &grc) != 0) {
    snprintf(why, sizeof why, "H3's acquire: %s", dlock_last_error());
    failed = 1;
    goto done;
  }
  fprintf(stderr, "  H3: fence %" PRIu64 ", guard %s\n", f2, grc == 0 ? "admitted" : dlock_err_name(grc));
  /* H2, whose hold ended before H3's began, writes late with F1. */
  int stale = dlock_guard_check(c, "res", f1);
  hist_note("H2-late", f1, stale);
  if (f2 <= before) {
    snprintf(why, sizeof why,
             "the fence of \"res\" went back after a backward clock step and a prune: %" PRIu64 " (H1), %" PRIu64
             " (H2), then %" PRIu64 " (H3), whose guard check said %s while H2's late check with %" PRIu64 " said %s",
             f0, f1, f2, grc == 0 ? "admitted" : dlock_err_name(grc), f1, stale == 0 ? "admitted" : dlock_err_name(stale));
    failed = 1;
  }
done:
  dlock_client_free(c);
  th_pg_stop(&p);
  unsetenv("FAKETIME_TIMESTAMP_FILE");
  unlink(ts);
  unlink(hist_path);
  rmdir(dir);
  if (failed) TEST_FAIL("%s", why);
}
#endif

TEST_MAIN()
