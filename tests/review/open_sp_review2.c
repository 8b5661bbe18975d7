/*
 * open_sp_review2.c - adversarial review (branch revsp2) of the promises of
 * docs/topologies.md for Redis Sentinel and Cluster (the guard's floor across
 * a change of master) and of docs/postgres.md (the doctor's replication
 * checks). Real servers (tests/harness_*.h), real faults (SIGKILL, restart
 * without data), no mocks. Each TEST below is an OPEN finding: it fails on
 * the code it was written against. Built only with -DDLOCK_OPEN_FINDINGS=ON.
 *
 * Attacks that held (the held_* tests below pass; they skip unless
 * DLOCK_REVSP2_HELD=1, so that the binary fails only on the findings):
 *  - Sentinel, a replica that missed the lock's write (frozen by SIGSTOP
 *    while 40 MB fill its link, the master SIGKILLed, the replica thawed and
 *    promoted without the key): watchdog holder lost as DLOCK_LOST_FAILOVER;
 *    fixed lease: dlock_mutex_extend() is DLOCK_ENOTHELD "the Redis master
 *    failed over" and dlock_mutex_lost() FAILOVER; the new holder's fence is
 *    above the lost one (clock floor); the guard refuses the old token
 *    (ESTALE, "the master changed") and admits the new one.
 *  - A token issued on the new master before the first guard check there:
 *    admitted (held_* tests; the floor is taken by that acquire, at or below
 *    its fence). A resource first guarded after the failover: by reading
 *    prelude.lua, the same (the floor is per server/slot, not per resource).
 *  - Redis Cluster, the same replica-missed-the-write failover of the lock's
 *    slot master (3 masters + 1 replica each): LOST_FAILOVER, fence rises,
 *    old token refused, new admitted.
 *  - Cluster, a lock in another slot than the resource's: refused once after
 *    a failover, as documented (a wrong refusal, never a stale admission);
 *    the reverse rounding of FINDING 1/3 (a floor up to 1 s above a
 *    never-promoted master's start, refusing a token of its first second)
 *    cannot be reached: a rebooted cluster master serves nothing for its
 *    first 2 s (CLUSTER_WRITABLE_DELAY).
 *  - Sentinel with wait_replicas=1, the replica frozen: a guard admission is
 *    DLOCK_EREPLICAS, twice; the lower token then ESTALE (held_* test).
 *  - A normal reshard (slot migrated with its keys): by reading, the slot's
 *    epoch record and {R}:guard move with it, so nothing is lost; but the
 *    new owner floors at its own start, so holders are NOT refused once as
 *    docs/topologies.md says ("holders acquire again once") -- harmless
 *    there; the unsafe case is FINDING 4, where the keys did not move.
 *  - PostgreSQL doctor (read, not all run): FIRST k with more standbys
 *    ('potential' counted as asynchronous), ANY k with more quorum members
 *    than k, and a user who cannot see sync_state all warn as promised. Not
 *    promised, so not findings: a disconnected async standby (a slot, not
 *    streaming) gives "no standby streams"; a logical subscriber's walsender
 *    counts as an asynchronous standby (a false warning).
 *  - (read, not run) The guard's commit with synchronous_commit = off/local
 *    on a plain crash (no standby) loses guard rows too; the docs list only acquire, release
 *    and tick claim as forced on, so only the synchronous-standby case
 *    (where the docs say "none of this happens") is a finding (FINDING 2).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>

#include "dlock.h"
#include "harness.h"
#include "harness_cluster.h"
#include "harness_pg.h"
#include "harness_sentinel.h"
#include "test.h"

static dlock_client *new_client(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 4000;
  dlock_client *c = NULL;
  for (int i = 0; i < 40 && !c; i++) {
    if (dlock_client_new(&c, &o) != 0) { c = NULL; th_sleep_ms(100); }
  }
  return c;
}

/*
 * ATTACK THAT HELD (kept as a passing check, not registered as a finding):
 * a replica that missed the lock's write. The master's link to its replica
 * is frozen (SIGSTOP; SIGCONT 200 ms after the master's death) and 40 MB
 * written first fill the replication socket, a watchdog holder acquires at once
 * (fence f1, admitted by the guard), the master is SIGKILLed before the
 * replica reconnects, the replica (without the key) is promoted.
 * Promised: the holder's hold is lost as DLOCK_LOST_FAILOVER; a new holder's
 * fence is above f1; the guard refuses f1 and admits the new fence.
 */
static int held_lost_write_failover(char *msg, size_t len, int fixed) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "revsp2b") != 0) { snprintf(msg, len, "skip: no sentinel set"); return 77; }
  int ret = 77;
  dlock_client *c1 = new_client(s.url), *c2 = NULL;
  dlock_mutex *h = NULL, *h2 = NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 20000;
  if (fixed) mo.lease_ms = 30000;
  if (!c1 || dlock_mutex_new(&h, c1, "revsp2-fo", &mo) != 0) { snprintf(msg, len, "skip: client"); goto out; }
  char out[4096];
  kill(s.replica.pid, SIGSTOP); /* the replica reads nothing until the master is dead */
  /* Fill the replication socket so that the lock's write stays in the master's buffer. */
  th_redis_cli(&s.master, out, sizeof out, "EVAL \"redis.call('SET', 'revsp2-big', string.rep('x', 40000000)) return 1\" 0");
  if (dlock_mutex_acquire(h, 0) != 0) { snprintf(msg, len, "skip: acquire %s", dlock_last_error()); goto out; }
  uint64_t f1 = dlock_mutex_fence(h);
  int g1 = dlock_guard_check(c1, "revsp2-fo", f1);
  kill(s.master.pid, SIGKILL);
  waitpid(s.master.pid, NULL, 0);
  s.master.pid = 0;
  th_sleep_ms(200);
  kill(s.replica.pid, SIGCONT);
  th_redis_cli(&s.replica, out, sizeof out, "EVAL \"return #redis.call('KEYS', '*revsp2-fo*')\" 0");
  fprintf(stderr, "  f1=%" PRIu64 " guard %d; keys of the lock on the replica after the kill: %s\n", f1, g1, out);
  if (strcmp(out, "0") != 0) { snprintf(msg, len, "skip: the replica got the write"); goto out; }
  if (th_sentinel_wait_master(&s, s.replica.port, 40000) != 0) { snprintf(msg, len, "skip: no failover"); goto out; }
  dlock_lost_reason why = DLOCK_LOST_NONE;
  int ext = 0;
  char extmsg[300] = "";
  if (fixed) {
    th_sleep_ms(1500);
    ext = dlock_mutex_extend(h, 30000);
    snprintf(extmsg, sizeof extmsg, " extend=%s (%s)", dlock_err_name(ext), ext ? dlock_last_error() : "");
    why = dlock_mutex_lost(h);
  } else {
    for (int i = 0; i < 250 && (why = dlock_mutex_lost(h)) == DLOCK_LOST_NONE; i++) th_sleep_ms(100);
  }
  c2 = new_client(s.url);
  if (!c2 || dlock_mutex_new(&h2, c2, "revsp2-fo", NULL) != 0) { snprintf(msg, len, "skip: client2"); goto out; }
  int rc = dlock_mutex_acquire(h2, 10000);
  uint64_t f2 = rc == 0 ? dlock_mutex_fence(h2) : 0;
  int gs = dlock_guard_check(c2, "revsp2-fo", f1);
  int gn = dlock_guard_check(c2, "revsp2-fo", f2);
  fprintf(stderr, " %s\n", extmsg);
  snprintf(msg, len, "lost=%s acquire2=%s f2=%" PRIu64 " (f1 %" PRIu64 ") guard(f1)=%s guard(f2)=%s",
           dlock_lost_reason_str(why), dlock_err_name(rc), f2, f1, dlock_err_name(gs), dlock_err_name(gn));
  ret = (why == DLOCK_LOST_FAILOVER && (!fixed || ext == DLOCK_ENOTHELD) && rc == 0 && f2 > f1 && gs == DLOCK_ESTALE && gn == 0) ? 0 : 1;
out:
  if (h2) dlock_mutex_free(h2);
  if (h) dlock_mutex_free(h);
  if (c2) dlock_client_free(c2);
  if (c1) dlock_client_free(c1);
  th_sentinel_set_stop(&s);
  return ret;
}

/* Run by hand: open_sp_review2 held_ (it passes when the promise holds). */
TEST(held_sentinel_replica_missed_lock_write_reports_failover) {
  if (!getenv("DLOCK_REVSP2_HELD")) TEST_SKIP("set DLOCK_REVSP2_HELD=1 to run the attacks that held");
  char msg[1024] = "";
  int r = held_lost_write_failover(msg, sizeof msg, 0);
  fprintf(stderr, "  %s\n", msg);
  if (r == 77) TEST_SKIP("%s", msg);
  if (r != 0) TEST_FAIL("%s", msg);
}

TEST(held_sentinel_replica_missed_lock_write_fixed_lease_extend_says_failover) {
  if (!getenv("DLOCK_REVSP2_HELD")) TEST_SKIP("set DLOCK_REVSP2_HELD=1 to run the attacks that held");
  char msg[1024] = "";
  int r = held_lost_write_failover(msg, sizeof msg, 1);
  fprintf(stderr, "  %s\n", msg);
  if (r == 77) TEST_SKIP("%s", msg);
  if (r != 0) TEST_FAIL("%s", msg);
}

/*
 * ATTACK THAT HELD (run with DLOCK_REVSP2_HELD=1): the same on Redis Cluster.
 * 3 masters + 1 replica each; the replica of the lock's master is frozen,
 * 40 MB in the lock's slot fill its link, a watchdog holder acquires (f1,
 * admitted by the guard on a resource named like the lock), the master is
 * SIGKILLed, the replica thawed and promoted without the lock. Promised:
 * DLOCK_LOST_FAILOVER, a new fence above f1, f1 refused, the new one admitted.
 */
TEST(held_cluster_replica_missed_lock_write_reports_failover) {
  if (!getenv("DLOCK_REVSP2_HELD")) TEST_SKIP("set DLOCK_REVSP2_HELD=1 to run the attacks that held");
  th_cluster cl;
  if (th_cluster_start(&cl, 3, 1) != 0) TEST_SKIP("no cluster");
  char fail[1024] = "", skip[256] = "", out[8192];
  dlock_client *c1 = NULL, *c2 = NULL;
  dlock_mutex *h = NULL, *h2 = NULL;
  const char *name = "revsp2-cfo";
  int o = th_cluster_owner(&cl, name), r = -1;
  char want[64];
  snprintf(want, sizeof want, "master_port:%d", o >= 0 ? cl.node[o].port : -1);
  for (int i = 0; i < cl.n && o >= 0; i++)
    if (i != o && th_redis_cli(&cl.node[i], out, sizeof out, "INFO replication") == 0 && strstr(out, want)) r = i;
  if (r < 0) { snprintf(skip, sizeof skip, "no replica of the lock's master found"); goto out; }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 20000;
  c1 = new_client(cl.url);
  if (!c1 || dlock_mutex_new(&h, c1, name, &mo) != 0) { snprintf(skip, sizeof skip, "client"); goto out; }
  kill(cl.node[r].pid, SIGSTOP);
  th_redis_cli(&cl.node[o], out, sizeof out,
               "EVAL \"redis.call('SET', KEYS[1], string.rep('x', 40000000)) return 1\" 1 '{revsp2-cfo}:big'");
  if (dlock_mutex_acquire(h, 0) != 0) { kill(cl.node[r].pid, SIGCONT); snprintf(skip, sizeof skip, "acquire"); goto out; }
  uint64_t f1 = dlock_mutex_fence(h);
  int g1 = dlock_guard_check(c1, name, f1);
  kill(cl.node[o].pid, SIGKILL);
  waitpid(cl.node[o].pid, NULL, 0);
  cl.node[o].pid = 0;
  th_sleep_ms(200);
  kill(cl.node[r].pid, SIGCONT);
  {
    char slot[32] = "";
    th_redis_cli(&cl.node[r], slot, sizeof slot, "CLUSTER KEYSLOT revsp2-cfo");
    for (int i = 0; i < 50; i++) { /* the thawed replica may take a moment to read its link */
      th_redis_cli(&cl.node[r], out, sizeof out, "CLUSTER GETKEYSINSLOT %s 20", slot);
      if (strstr(out, "big")) break;
      th_sleep_ms(100);
    }
  }
  fprintf(stderr, "  f1=%" PRIu64 " guard %d; keys of the slot on the replica: %s\n", f1, g1, out);
  {
    int has = 0;
    for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
      if (!strncmp(l, "revsp2-cfo", 10) && (l[10] == '\n' || l[10] == '\0')) has = 1;
    if (has) { snprintf(skip, sizeof skip, "the replica got the write"); goto out; }
  }
  dlock_lost_reason why = DLOCK_LOST_NONE;
  for (int i = 0; i < 250 && (why = dlock_mutex_lost(h)) == DLOCK_LOST_NONE; i++) th_sleep_ms(100);
  c2 = new_client(cl.url);
  if (!c2 || dlock_mutex_new(&h2, c2, name, NULL) != 0) { snprintf(skip, sizeof skip, "client2"); goto out; }
  int rc = dlock_mutex_acquire(h2, 15000);
  uint64_t f2 = rc == 0 ? dlock_mutex_fence(h2) : 0;
  int gs = dlock_guard_check(c2, name, f1), gn = dlock_guard_check(c2, name, f2);
  fprintf(stderr, "  lost=%s acquire2=%s f2=%" PRIu64 " guard(f1)=%s guard(f2)=%s\n", dlock_lost_reason_str(why),
          dlock_err_name(rc), f2, dlock_err_name(gs), dlock_err_name(gn));
  if (!(why == DLOCK_LOST_FAILOVER && rc == 0 && f2 > f1 && gs == DLOCK_ESTALE && gn == 0))
    snprintf(fail, sizeof fail, "lost=%s acquire2=%s f1=%" PRIu64 " f2=%" PRIu64 " guard(f1)=%s guard(f2)=%s",
             dlock_lost_reason_str(why), dlock_err_name(rc), f1, f2, dlock_err_name(gs), dlock_err_name(gn));
out:
  if (h2) dlock_mutex_free(h2);
  if (h) dlock_mutex_free(h);
  if (c2) dlock_client_free(c2);
  if (c1) dlock_client_free(c1);
  th_cluster_stop(&cl);
  if (fail[0]) TEST_FAIL("%s", fail);
  if (skip[0]) TEST_SKIP("%s", skip);
}

/* Index of the node whose CLUSTER NODES "myself" line serves slot 0, or -1. */
static int slot0_owner(th_cluster *cl) {
  static char out[16384];
  for (int i = 0; i < cl->n; i++) {
    if (cl->node[i].pid <= 0 || th_redis_cli(&cl->node[i], out, sizeof out, "CLUSTER NODES") != 0) continue;
    for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
      char *e = strchr(l, '\n');
      size_t n = e ? (size_t)(e - l) : strlen(l);
      char line[4096];
      if (n >= sizeof line) n = sizeof line - 1;
      memcpy(line, l, n);
      line[n] = '\0';
      if (strstr(line, "myself") && strstr(line, "master") && (strstr(line, " 0-") || strstr(line, " 0\0")))
        return i;
    }
  }
  return -1;
}

/*
 * FINDING 4 (medium: a stale token admitted after a slot moved to another
 * master that never held its data).
 * Promise (docs/topologies.md, Redis Cluster, "The fence guarantee"): "A
 * reshard that moves the slot to another master counts as such a change
 * too: holders acquire again once" -- i.e. tokens issued before the change
 * are refused (as after a failover), the floor being the point of the change.
 * Attack: 3 masters, no replicas (the docs: a master lost with all its
 * replicas loses its slots' locks); a resource named like its lock; fa then
 * fb > fa admitted by the guard. The slot's master is SIGKILLed for good;
 * once the others mark it failed, the operator gives the slot to another
 * master (CLUSTER SETSLOT <slot> NODE <id> on the live masters, BUMPEPOCH,
 * cluster-require-full-coverage no) -- the slot moved to another master. The
 * stale holder of fa checks on it.
 * What happened: fa is admitted although fb > fa had been: the new owner
 * was never promoted, so prelude.lua floors the slot at that process's
 * start (long before fa), not at the change ("a slot a reshard moved here,
 * which loses nothing" -- but this move lost the guard's key).
 */
TEST(cluster_slot_given_to_another_master_admits_stale_token) {
  th_cluster cl;
  if (th_cluster_start(&cl, 3, 0) != 0) TEST_SKIP("no cluster");
  char fail[1024] = "", skip[256] = "", out[16384], slot[32] = "", bid[64] = "";
  dlock_client *c = NULL, *c2 = NULL;
  dlock_mutex *m = NULL;
  char namebuf[64];
  const char *name = NULL;
  int o = -1, z = slot0_owner(&cl);
  /* A slot away from slot 0's master: dlock_client_new PINGs slot 0 (FINDING 5). */
  for (int k = 0; k < 200 && z >= 0 && !name; k++) {
    snprintf(namebuf, sizeof namebuf, "revsp2-orph%d", k);
    o = th_cluster_owner(&cl, namebuf);
    if (o >= 0 && o != z) name = namebuf;
  }
  if (!name) { snprintf(skip, sizeof skip, "no owner"); goto out; }
  int b = z, x = 3 - o - z; /* the slot goes to slot 0's master */
  c = new_client(cl.url);
  if (!c || dlock_mutex_new(&m, c, name, NULL) != 0) { snprintf(skip, sizeof skip, "client"); goto out; }
  if (dlock_mutex_acquire(m, 3000) != 0) { snprintf(skip, sizeof skip, "acquire"); goto out; }
  uint64_t fa = dlock_mutex_fence(m);
  int ga = dlock_guard_check(c, name, fa);
  dlock_mutex_release(m);
  if (dlock_mutex_acquire(m, 3000) != 0) { snprintf(skip, sizeof skip, "acquire2"); goto out; }
  uint64_t fb = dlock_mutex_fence(m);
  int gb = dlock_guard_check(c, name, fb);
  dlock_mutex_release(m);
  dlock_mutex_free(m); m = NULL;
  dlock_client_free(c); c = NULL;
  if (ga != 0 || gb != 0 || !(fb > fa)) { snprintf(skip, sizeof skip, "setup guard %d %d", ga, gb); goto out; }
  th_redis_cli(&cl.node[b], slot, sizeof slot, "CLUSTER KEYSLOT %s", name);
  th_redis_cli(&cl.node[b], bid, sizeof bid, "CLUSTER MYID");
  th_redis_cli(&cl.node[b], out, sizeof out, "CONFIG SET cluster-require-full-coverage no");
  th_redis_cli(&cl.node[x], out, sizeof out, "CONFIG SET cluster-require-full-coverage no");
  kill(cl.node[o].pid, SIGKILL);
  waitpid(cl.node[o].pid, NULL, 0);
  cl.node[o].pid = 0;
  {
    int failed = 0;
    for (int i = 0; i < 100 && !failed; i++) {
      th_sleep_ms(200);
      if (th_redis_cli(&cl.node[b], out, sizeof out, "CLUSTER NODES") == 0 && strstr(out, "fail") &&
          !strstr(out, "fail?"))
        failed = 1;
    }
    if (!failed) { snprintf(skip, sizeof skip, "the dead master was never marked failed"); goto out; }
  }
  th_redis_cli(&cl.node[b], out, sizeof out, "CLUSTER SETSLOT %s NODE %s", slot, bid);
  fprintf(stderr, "  SETSLOT %s NODE %s on the new owner: %s\n", slot, bid, out);
  th_redis_cli(&cl.node[b], out, sizeof out, "CLUSTER BUMPEPOCH");
  th_redis_cli(&cl.node[x], out, sizeof out, "CLUSTER SETSLOT %s NODE %s", slot, bid);
  {
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
      if (th_redis_cli(&cl.node[x], out, sizeof out, "CLUSTER COUNTKEYSINSLOT %s", slot) == 0 &&
          th_redis_cli(&cl.node[b], out, sizeof out, "SET %s:probe 1", name) == 0 && !strncmp(out, "OK", 2))
        ok = 1;
      else
        th_sleep_ms(200);
    }
    if (!ok) { snprintf(skip, sizeof skip, "the new owner does not serve the slot: %s", out); goto out; }
  }
  c2 = new_client(cl.url);
  if (!c2) {
    fprintf(stderr, "  client of %s: %s\n", cl.url, dlock_last_error());
    char url2[256];
    snprintf(url2, sizeof url2, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", cl.node[b].port, cl.node[x].port);
    c2 = new_client(url2);
  }
  if (!c2) { snprintf(skip, sizeof skip, "client2: %s", dlock_last_error()); goto out; }
  {
    uint64_t hi = 0;
    int rc = DLOCK_EIO;
    for (int i = 0; i < 20 && (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECLUSTER); i++) {
      rc = dlock_guard_check_highest(c2, name, fa, &hi);
      if (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECLUSTER) th_sleep_ms(300);
    }
    fprintf(stderr, "  fa=%" PRIu64 " fb=%" PRIu64 " admitted on the lost master; on the slot's new owner check(fa) -> %d (%s) %s\n",
            fa, fb, rc, dlock_err_name(rc), rc ? dlock_last_error() : "");
    if (rc == 0)
      snprintf(fail, sizeof fail,
               "after the slot moved to another master, fa=%" PRIu64 " was admitted although fb=%" PRIu64
               " > fa had been (docs: a move counts as a change of master, tokens before it refused)",
               fa, fb);
    else if (rc != DLOCK_ESTALE)
      snprintf(skip, sizeof skip, "check: %s", dlock_err_name(rc));
  }
out:
  if (m) dlock_mutex_free(m);
  if (c) dlock_client_free(c);
  if (c2) dlock_client_free(c2);
  th_cluster_stop(&cl);
  if (fail[0]) TEST_FAIL("%s", fail);
  if (skip[0]) TEST_SKIP("%s", skip);
}

/* ATTACK THAT HELD (run with DLOCK_REVSP2_HELD=1): with wait_replicas=1 and
 * the only replica frozen (SIGSTOP), a guard admission of a higher token is
 * DLOCK_EREPLICAS ("do not write"), again on a second try, and the lower
 * token is then ESTALE (fail closed). Promised: "a token recorded on the
 * master that fewer than N replicas acknowledged is DLOCK_EREPLICAS". */
TEST(held_sentinel_wait_replicas_guard_unacknowledged_is_ereplicas) {
  if (!getenv("DLOCK_REVSP2_HELD")) TEST_SKIP("set DLOCK_REVSP2_HELD=1 to run the attacks that held");
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "revsp2w") != 0) TEST_SKIP("no sentinel set");
  char url[700], fail[512] = "";
  snprintf(url, sizeof url, "%s?wait_replicas=1&wait_timeout=300", s.url);
  dlock_client *c = new_client(url);
  dlock_mutex *m = NULL;
  if (!c || dlock_mutex_new(&m, c, "revsp2-w", NULL) != 0) { snprintf(fail, sizeof fail, "setup"); goto out; }
  if (dlock_mutex_acquire(m, 3000) != 0) { snprintf(fail, sizeof fail, "setup acquire %s", dlock_last_error()); goto out; }
  uint64_t f1 = dlock_mutex_fence(m);
  int g1 = dlock_guard_check(c, "revsp2-w", f1);
  dlock_mutex_release(m);
  kill(s.replica.pid, SIGSTOP);
  int g2 = dlock_guard_check(c, "revsp2-w", f1 + 1000);
  int g3 = dlock_guard_check(c, "revsp2-w", f1 + 1000);
  int g4 = dlock_guard_check(c, "revsp2-w", f1);
  kill(s.replica.pid, SIGCONT);
  fprintf(stderr, "  guard: f1 %s; replica frozen: f1+1000 %s, again %s, f1 %s\n", dlock_err_name(g1),
          dlock_err_name(g2), dlock_err_name(g3), dlock_err_name(g4));
  if (g1 != 0 || g2 != DLOCK_EREPLICAS || g3 != DLOCK_EREPLICAS || g4 == 0)
    snprintf(fail, sizeof fail, "guard: f1 %s; replica frozen: f1+1000 %s, again %s, f1 %s", dlock_err_name(g1),
             dlock_err_name(g2), dlock_err_name(g3), dlock_err_name(g4));
out:
  if (m) dlock_mutex_free(m);
  if (c) dlock_client_free(c);
  th_sentinel_set_stop(&s);
  if (fail[0]) TEST_FAIL("%s", fail);
}

TEST_MAIN()
