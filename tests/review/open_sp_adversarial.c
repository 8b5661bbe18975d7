/*
 * open_sp_adversarial.c - adversarial review of the Sentinel, Cluster and
 * PostgreSQL promises (issue 22 items 5-10), with real servers and real
 * faults. Every test here FAILED on the code it was written against; each
 * says what it shows.
 *
 * The promise attacked (docs/topologies.md, the table's "the guard across a
 * failover" row): under Sentinel and Cluster without WAIT the guard "refuses
 * tokens issued before the change of master" -- and so, by implication,
 * admits a token issued after it. guard.lua implements this with
 * {R}:guard:epoch = "<replid> <floor>": when it meets a new replication id it
 * raises the floor to the server clock *at the time of that guard check*,
 * not at the time of the change of master, and it keeps no floor at all when
 * the epoch key itself was lost with the data.
 *
 * Attacks that HELD (no test kept): a Cluster release sent right after the
 * SIGKILL of the slot's master waited for the promoted replica and freed the
 * lock (OK after 2.3 s); the DLOCK_LOST_FAILOVER reports of a watchdog and a
 * fixed-lease holder whose writes were lost (see 3c); the fences rising
 * across the lost writes; an advisory-mode acquire after
 * pg_terminate_backend of every dlock session (the pooled hold connections);
 * a queued waiter killed with SIGKILL stopped counting at once (the next
 * waiter had the lock 7 ms after the release); with wait_replicas=1 and the
 * replica SIGSTOPped, the guard answered DLOCK_EREPLICAS twice; advisory mode
 * through PgBouncer in transaction mode, the holder's backend terminated: a
 * second holder got in (4 ms) and the first was reported lost 179 ms later
 * (the window the doc admits).
 */
#include "../harness_cluster.h"
#include "../harness_pg.h"
#include "../harness_sentinel.h"
#include "../test.h"

#include <dlock.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SP_PG /* the Redis part: open_sp_adversarial (-DDLOCK_OPEN_FINDINGS=ON) */

static dlock_client *client_tmo(const char *url, int command_timeout_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = command_timeout_ms;
  dlock_client *c = NULL;
  /* The deployment may still be settling: retry for a bounded time. */
  for (int i = 0; i < 60 && dlock_client_new(&c, &o) != DLOCK_OK; i++) th_sleep_ms(500);
  return c;
}

static dlock_client *client_of(const char *url) { return client_tmo(url, 0); }

/* Acquire 'name' (lease 'lease_ms'), retrying through a failover for at most
 * 60 s. Returns the fence, 0 on failure (the mutex freed). */
static uint64_t take_n(dlock_client *c, const char *name, int64_t lease_ms, dlock_mutex **out, int tries) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  *out = NULL;
  for (int i = 0; i < tries; i++) {
    dlock_mutex *m = NULL;
    if (dlock_mutex_new(&m, c, name, &mo) != DLOCK_OK) return 0;
    int rc = dlock_mutex_acquire(m, 2000);
    if (rc == DLOCK_OK) {
      *out = m;
      return dlock_mutex_fence(m);
    }
    dlock_mutex_free(m);
    th_sleep_ms(500);
  }
  fprintf(stderr, "  acquire of '%s' never succeeded: %s\n", name, dlock_last_error());
  return 0;
}

static uint64_t take(dlock_client *c, const char *name, int64_t lease_ms, dlock_mutex **out) {
  return take_n(c, name, lease_ms, out, 24);
}

/* A guard check, retried while the deployment answers with transient
 * errors (a failover in progress); ESTALE and OK are answers. */
static int guard(dlock_client *c, const char *res, uint64_t tok) {
  int rc = DLOCK_EIO;
  for (int i = 0; i < 60; i++) {
    rc = dlock_guard_check(c, res, tok);
    if (rc == DLOCK_OK || rc == DLOCK_ESTALE) return rc;
    th_sleep_ms(500);
  }
  return rc;
}

/*
 * FINDING 1 (Sentinel, wrong outcome: a legitimate holder refused).
 * The guard is used once (its epoch record is made on the first master).
 * The master is SIGKILLed, Sentinel promotes the replica. A client then
 * acquires the lock ON THE NEW MASTER -- its fence is floored at the new
 * master's clock at that moment, t1 -- and only then, a little later (t2),
 * calls the guard for the first time since the failover. guard.lua sees a
 * new replid and raises the floor to the clock *now* (t2 > t1): the token,
 * issued after the change of master, is refused with DLOCK_ESTALE ("issued
 * before the Redis master changed"). The doc promises the opposite. In
 * practice every holder that acquired between the failover and the first
 * guard call is told its write is stale (and after re-acquiring, the same
 * happens to no one, so it is a liveness/false-loss bug, not an overlap).
 */
TEST(sentinel_guard_refuses_token_issued_after_failover) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "spadv1") != 0) TEST_SKIP("no sentinel deployment (redis-server/sentinel missing?)");
  dlock_client *c = client_of(s.url);
  if (!c) {
    th_sentinel_set_stop(&s);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex *m = NULL;
  uint64_t f1 = take(c, "spadv1", 60000, &m);
  ASSERT(f1 > 0);
  ASSERT_EQ(guard(c, "spadv1-res", f1), DLOCK_OK); /* epoch recorded on the first master */
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  th_sleep_ms(1500); /* let the replica have everything: no data is lost here */

  kill(s.master.pid, SIGKILL);
  if (th_sentinel_wait_master(&s, s.replica.port, 60000) != 0) {
    dlock_client_free(c);
    th_sentinel_set_stop(&s);
    TEST_FAIL("no failover to the replica within 60 s");
  }
  uint64_t f2 = take(c, "spadv1", 60000, &m); /* issued by the NEW master */
  ASSERT(f2 > f1);
  th_sleep_ms(300); /* the holder does some work before its first write */
  int rc = guard(c, "spadv1-res", f2);
  if (rc != DLOCK_OK)
    fprintf(stderr, "  token %" PRIu64 ", issued after the failover, refused: %s\n", f2, dlock_last_error());
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_sentinel_set_stop(&s);
  ASSERT_EQ(rc, DLOCK_OK);
}

/*
 * FINDING 2 (Cluster, same root cause "per slot"): the owner master of the
 * guard's slot is SIGKILLed, its replica takes over, a holder acquires on the
 * new master, then calls the guard 300 ms later: refused as "issued before
 * the master changed".
 */
TEST(cluster_guard_refuses_token_issued_after_failover) {
  th_cluster cl;
  if (th_cluster_start(&cl, 3, 1) != 0) TEST_SKIP("no cluster (redis-server/redis-cli missing?)");
  dlock_client *c = client_of(cl.url);
  if (!c) {
    th_cluster_stop(&cl);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  const char *gkey = "{spadv2}:guard";
  dlock_mutex *m = NULL;
  uint64_t f1 = take(c, "spadv2", 60000, &m);
  ASSERT(f1 > 0);
  ASSERT_EQ(guard(c, "spadv2", f1), DLOCK_OK);
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  th_sleep_ms(1500);
  int owner = th_cluster_owner(&cl, gkey);
  ASSERT(owner >= 0);
  kill(cl.node[owner].pid, SIGKILL);
  int moved = 0;
  for (int i = 0; i < 120 && !moved; i++) {
    th_sleep_ms(500);
    int o = th_cluster_owner(&cl, gkey);
    moved = o >= 0 && o != owner;
  }
  if (!moved) {
    dlock_client_free(c);
    th_cluster_stop(&cl);
    TEST_FAIL("no failover of the slot's master within 60 s");
  }
  uint64_t f2 = take(c, "spadv2", 60000, &m);
  ASSERT(f2 > f1);
  th_sleep_ms(300);
  int rc = guard(c, "spadv2", f2);
  if (rc != DLOCK_OK)
    fprintf(stderr, "  token %" PRIu64 ", issued after the failover, refused: %s\n", f2, dlock_last_error());
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_cluster_stop(&cl);
  ASSERT_EQ(rc, DLOCK_OK);
}

/*
 * FINDING 3 (Sentinel, safety: the guard admits a LOWER token after the
 * master changed). The epoch record {R}:guard:epoch lives in the same
 * dataset as the guard: when the data is lost, the record goes with it, and
 * guard.lua then starts a fresh record with floor 0 under the new replid
 * ("None yet ... start one") and admits anything. Here: A holds fence fa
 * (short lease), the lease ends, B acquires fb > fa and the guard admits fb.
 * The master (no persistence, the harness's default) is SIGKILLed and
 * restarted at once (the sentinels' down-after is raised so that nobody
 * fails over; the replica resyncs from the empty master). The master
 * changed (new replid: a restart, which guard.lua names as a change of
 * master). A, stale, writes with fa: the doc says a token issued before the
 * change of master is refused; the guard admits it. The same happens after a
 * failover to a replica that had not yet received the epoch record (the
 * first guard use of a resource just before the failover).
 */
TEST(sentinel_guard_admits_old_token_after_master_restart) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "spadv3") != 0) TEST_SKIP("no sentinel deployment (redis-server/sentinel missing?)");
  char out[256];
  for (int i = 0; i < TH_SENTINELS; i++)
    th_redis_cli(&s.sentinel[i], out, sizeof out, "SENTINEL SET spadv3 down-after-milliseconds 600000");
  dlock_client *c = client_of(s.url);
  if (!c) {
    th_sentinel_set_stop(&s);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex *a = NULL, *b = NULL;
  uint64_t fa = take(c, "spadv3", 500, &a); /* A: a 500 ms lease, then "paused" */
  ASSERT(fa > 0);
  th_sleep_ms(1200);
  uint64_t fb = take(c, "spadv3", 60000, &b);
  ASSERT(fb > fa);
  ASSERT_EQ(guard(c, "spadv3-res", fb), DLOCK_OK); /* B writes */
  ASSERT_EQ(guard(c, "spadv3-res", fa), DLOCK_ESTALE); /* A refused, as it should */
  th_sleep_ms(1000);

  if (th_redis_restart(&s.master) != 0) {
    dlock_client_free(c);
    th_sentinel_set_stop(&s);
    TEST_FAIL("master did not restart");
  }
  th_sleep_ms(3000); /* the replica resyncs from the (empty) restarted master */
  int rc = guard(c, "spadv3-res", fa); /* A wakes up and writes */
  fprintf(stderr, "  after the master's restart, stale token %" PRIu64 " (B wrote %" PRIu64 "): %s\n", fa, fb,
          rc == DLOCK_OK ? "ADMITTED" : dlock_last_error());
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_sentinel_set_stop(&s);
  ASSERT_EQ(rc, DLOCK_ESTALE);
}

/* Make the replica miss what the master writes next: SIGSTOP it (so that it
 * cannot reconnect) and have the master drop its link (CLIENT KILL TYPE
 * replica). The caller writes, SIGKILLs the master, then SIGCONTs the
 * replica (within Sentinel's down-after, so it is not itself down): the
 * writes exist on no surviving server. */
static void replica_cut(th_sentinel_set *s) {
  char out[256];
  kill(s->replica.pid, SIGSTOP);
  th_redis_cli(&s->master, out, sizeof out, "CLIENT KILL TYPE replica");
}

/*
 * FINDING 3c (Sentinel, safety, a real failover with lost writes; the worst
 * form of 3): a resource that was never guarded before the failover has no
 * epoch record anywhere, so the first guard check after the failover starts
 * one with floor 0 and admits a token issued on the old master before the
 * change of master. Here a watchdog holder and a fixed-lease holder take
 * their locks on a master whose replica misses them; the master is
 * SIGKILLed, the replica promoted, another client takes both names on the
 * new master (the loss the doc admits). The stale fixed-lease holder then
 * writes through the guard with its old token: ADMITTED. The doc's table
 * says the guard "refuses tokens issued before the change of master".
 * What HELD in the same run (asserted first, so the test fails only on the
 * guard): the watchdog holder's renewal marks it DLOCK_LOST_FAILOVER, the
 * fixed-lease release returns DLOCK_ENOTHELD with DLOCK_LOST_FAILOVER, and
 * fences rose across the lost writes.
 */
TEST(sentinel_guard_first_used_after_failover_admits_old_token) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "spadv5") != 0) TEST_SKIP("no sentinel deployment (redis-server/sentinel missing?)");
  dlock_client *ch = client_of(s.url), *cb = client_of(s.url);
  if (!ch || !cb) {
    if (ch) dlock_client_free(ch);
    if (cb) dlock_client_free(cb);
    th_sentinel_set_stop(&s);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 4000;
  dlock_mutex *w = NULL, *f = NULL, *bw = NULL, *bf = NULL;
  ASSERT_OK(dlock_mutex_new(&w, ch, "spadv5w", &mo));
  replica_cut(&s);
  int rcw = dlock_mutex_acquire(w, 2000);
  uint64_t ff = take(ch, "spadv5f", 60000, &f);
  uint64_t fw = dlock_mutex_fence(w);
  kill(s.master.pid, SIGKILL);
  kill(s.replica.pid, SIGCONT);
  ASSERT_OK(rcw);
  ASSERT(ff > 0);
  if (th_sentinel_wait_master(&s, s.replica.port, 60000) != 0) TEST_FAIL("no failover within 60 s");
  uint64_t gbw = take_n(cb, "spadv5w", 60000, &bw, 6);
  uint64_t gbf = take_n(cb, "spadv5f", 60000, &bf, 6);
  fprintf(stderr, "  lost on failover: holders %" PRIu64 "/%" PRIu64 ", new holders %" PRIu64 "/%" PRIu64 "\n", fw,
          ff, gbw, gbf);
  ASSERT(gbw > fw && gbf > ff); /* the writes were lost, and fences rose */
  int gr = guard(ch, "spadv5-res", ff);
  fprintf(stderr, "  guard (first use, after the failover), token %" PRIu64 " issued before it: %s\n", ff,
          gr == DLOCK_OK ? "ADMITTED" : dlock_last_error());
  /* The watchdog holder: a renewal within a third of 4 s finds the key taken. */
  dlock_lost_reason lw = DLOCK_LOST_NONE;
  for (int i = 0; i < 200 && (lw = dlock_mutex_lost(w)) == DLOCK_LOST_NONE; i++) th_sleep_ms(100);
  int rf = dlock_mutex_release(f);
  dlock_lost_reason lf = dlock_mutex_lost(f);
  fprintf(stderr, "  watchdog holder lost as %s; fixed-lease release %s, lost as %s\n", dlock_lost_reason_str(lw),
          dlock_err_name(rf), dlock_lost_reason_str(lf));
  dlock_mutex_release(w);
  dlock_mutex_free(w);
  dlock_mutex_free(f);
  dlock_mutex_release(bw);
  dlock_mutex_release(bf);
  dlock_mutex_free(bw);
  dlock_mutex_free(bf);
  dlock_client_free(ch);
  dlock_client_free(cb);
  th_sentinel_set_stop(&s);
  ASSERT_EQ(lw, DLOCK_LOST_FAILOVER);
  ASSERT_EQ(rf, DLOCK_ENOTHELD);
  ASSERT_EQ(lf, DLOCK_LOST_FAILOVER);
  ASSERT_EQ(gr, DLOCK_ESTALE);
}

/*
 * FINDING 3b (Sentinel, safety, a real failover): the same hole as 3. The
 * resource is guarded for the first time just before the failover, and the
 * replica misses that write (its link cut and the replica frozen for a few
 * hundred ms, as a lagging replica would): the guard key AND its epoch record
 * are lost together. On the promoted replica guard.lua finds no record,
 * starts one with floor 0 and admits A's token, issued on the old master
 * before the change of master and lower than the token B was admitted with.
 */
TEST(sentinel_guard_admits_old_token_when_epoch_lost_in_failover) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "spadv4") != 0) TEST_SKIP("no sentinel deployment (redis-server/sentinel missing?)");
  dlock_client *c = client_of(s.url);
  if (!c) {
    th_sentinel_set_stop(&s);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex *a = NULL, *b = NULL;
  uint64_t fa = take(c, "spadv4", 500, &a); /* A: a 500 ms lease, then "paused" */
  ASSERT(fa > 0);
  th_sleep_ms(1200);
  uint64_t fb = take(c, "spadv4", 60000, &b);
  ASSERT(fb > fa);
  th_sleep_ms(1000); /* everything so far replicated */
  replica_cut(&s);
  int gb = dlock_guard_check(c, "spadv4-res", fb); /* B writes: the resource's first guard use */
  kill(s.master.pid, SIGKILL);
  kill(s.replica.pid, SIGCONT);
  ASSERT_EQ(gb, DLOCK_OK);
  if (th_sentinel_wait_master(&s, s.replica.port, 60000) != 0) TEST_FAIL("no failover within 60 s");
  int rc = guard(c, "spadv4-res", fa); /* A wakes up and writes, after the failover */
  fprintf(stderr, "  after the failover, stale token %" PRIu64 " (B was admitted with %" PRIu64 "): %s\n", fa, fb,
          rc == DLOCK_OK ? "ADMITTED" : dlock_last_error());
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  th_sentinel_set_stop(&s);
  ASSERT_EQ(rc, DLOCK_ESTALE);
}

#else /* SP_PG: the PostgreSQL part, open_sp_adversarial_pg (-DDLOCK_OPEN_FINDINGS=ON) */

static int replication_rows(const th_pg *p, const char *state) {
  char out[64];
  if (th_pg_sql(p, NULL, out, sizeof out, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = '%s'", state))
    return -1;
  return atoi(out);
}

/*
 * FINDING (PostgreSQL doctor, "replication"): docs/postgres.md says the
 * doctor warns when a failover could lose the last commits, and that "a
 * promoted synchronous standby has every commit that was acknowledged". With
 * quorum commit, synchronous_standby_names = 'ANY 1 (*)' and two standbys,
 * pg_stat_replication says sync_state 'quorum' for both, and a commit is
 * acknowledged once ONE of them has it: a failover to the other loses it
 * (a held lock free again, a guard row rolled back) exactly as with an
 * asynchronous standby. The doctor counts only 'async' and 'potential' as
 * asynchronous and reports "ok: replication: 2 standbys, all synchronous".
 * It must warn (or at least not call them all synchronous).
 */
TEST(pg_doctor_calls_quorum_standbys_synchronous) {
  th_pg p, s1, s2;
  char why[256];
  if (!th_pg_suite_start(&p, why, sizeof why)) TEST_SKIP("%s", why);
  char out[256];
  ASSERT_EQ(th_pg_sql(&p, NULL, out, sizeof out, "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'"), 0);
  ASSERT_EQ(th_pg_sql(&p, NULL, out, sizeof out, "SELECT pg_reload_conf()"), 0);
  if (th_pg_start_standby(&s1, &p) != 0 || th_pg_start_standby(&s2, &p) != 0) {
    th_pg_stop(&p);
    TEST_SKIP("standbys did not start");
  }
  int q = 0;
  for (int i = 0; i < 240 && (q = replication_rows(&p, "quorum")) < 2; i++) th_sleep_ms(250);
  ASSERT_EQ(q, 2);
  dlock_client *c = th_pg_client(&p, "spadv_doc", NULL);
  ASSERT(c != NULL);
  dlock_check ck[DLOCK_CHECK_MAX];
  int n = dlock_client_check(c, ck, DLOCK_CHECK_MAX);
  int level = -1;
  for (int i = 0; i < n; i++)
    if (ck[i].name && !strcmp(ck[i].name, "replication")) {
      level = (int)ck[i].level;
      fprintf(stderr, "  doctor, replication: level %d: %s\n", level, ck[i].found);
    }
  dlock_client_free(c);
  th_pg_stop(&s2);
  th_pg_stop(&s1);
  th_pg_stop(&p);
  ASSERT(n > 0);
  ASSERT_EQ(level, (int)DLOCK_CHECK_WARN);
}

#endif

TEST_MAIN()
