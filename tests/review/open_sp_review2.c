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

static long long real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* Sleep until the wall clock is 'at_us' microseconds into a second. */
static void sleep_to_frac(long at_us) {
  long long now = real_us();
  long long frac = now % 1000000LL;
  long long wait = at_us - frac;
  if (wait <= 0) wait += 1000000LL;
  struct timespec ts = {(time_t)(wait / 1000000LL), (long)(wait % 1000000LL) * 1000L};
  nanosleep(&ts, NULL);
}

static long long info_num(const th_redis *r, const char *field) {
  char out[8192];
  if (th_redis_cli(r, out, sizeof out, "INFO server") != 0) return -1;
  const char *p = strstr(out, field);
  if (!p) return -1;
  p += strlen(field);
  if (*p != ':') return -1;
  return strtoll(p + 1, NULL, 10);
}

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
 * FINDING 1 (high: a stale token admitted after a higher one).
 * Promise (docs/topologies.md, "The guard across a failover"): a record lost
 * with the data ("a restart without persistence") means the floor is taken
 * "on one never promoted, the time its process started (it has been a master
 * since, so every token of an earlier master is below that). ... every token
 * issued before the change of master is refused with DLOCK_ESTALE".
 * Attack: Sentinel set; holder A gets fence fa and the guard admits it;
 * holder B gets fb > fa and the guard admits fb. The master is SIGKILLed and
 * restarted at once without its data (before the sentinels' down-after), in
 * the same wall-clock second as fa. Then, early in a later second (its
 * fraction below fa's), the stale holder A checks fa on the restarted master.
 * What happened: fa is ADMITTED (0), although fb > fa was admitted before.
 * Cause: prelude.lua computes the process start as server_time_usec -
 * uptime_in_seconds*1e6, but Redis's uptime is unixtime - stat_starttime in
 * whole seconds (time(NULL) at start), so that value is floor(start) plus
 * the fraction of the current second: anywhere in [floor(start),
 * floor(start)+1 s), up to a second BEFORE the real start, below tokens the
 * old process issued in its last second. (The reverse case, a floor up to a
 * second after the real start, cannot be reached on a cluster: see the
 * header.)
 */
TEST(sentinel_restart_without_data_admits_stale_token_of_same_second) {
  th_sentinel_set s;
  if (th_sentinel_set_start(&s, "revsp2a") != 0) TEST_SKIP("no sentinel set (redis-server/sentinel missing?)");
  dlock_client *c = NULL, *c2 = NULL;
  dlock_mutex *a = NULL, *b = NULL;
  int admitted_stale = 0, tried = 0;
  char detail[512] = "";
  long long t_end = th_now_ms() + 45000;
  for (int attempt = 0; attempt < 6 && !admitted_stale && th_now_ms() < t_end; attempt++) {
    char lock[64], res[64];
    snprintf(lock, sizeof lock, "revsp2-l%d", attempt);
    snprintf(res, sizeof res, "revsp2-r%d", attempt);
    if (!c) c = new_client(s.url);
    if (!c) break;
    if (dlock_mutex_new(&a, c, lock, NULL) != 0 || dlock_mutex_new(&b, c, lock, NULL) != 0) break;
    sleep_to_frac(100000); /* 0.1 s into a second */
    int rc = dlock_mutex_acquire(a, 2000);
    if (rc != 0) goto next;
    uint64_t fa = dlock_mutex_fence(a);
    if (dlock_guard_check(c, res, fa) != 0) goto next;
    dlock_mutex_release(a);
    if (dlock_mutex_acquire(b, 2000) != 0) goto next;
    uint64_t fb = dlock_mutex_fence(b);
    if (!(fb > fa) || dlock_guard_check(c, res, fb) != 0) goto next;
    /* Kill the master and restart it empty, at once. */
    dlock_mutex_free(a); a = NULL;
    dlock_mutex_free(b); b = NULL;
    dlock_client_free(c); c = NULL;
    if (th_redis_restart(&s.master) != 0) break;
    {
      long long t = info_num(&s.master, "server_time_usec");
      long long up = info_num(&s.master, "uptime_in_seconds");
      if (t < 0 || up < 0) goto next;
      long long start_s = t / 1000000LL - up;
      /* The restart must have happened in fa's second for the attack. */
      if (start_s != (long long)(fa / 1000000ULL)) {
        fprintf(stderr, "  (attempt %d: restart second %lld, fa's second %llu: again)\n", attempt, start_s,
                (unsigned long long)(fa / 1000000ULL));
        goto next;
      }
    }
    if (th_sentinel_wait_master(&s, s.master.port, 10000) != 0) goto next;
    c2 = new_client(s.url);
    if (!c2) goto next;
    /* Early in a later second: below fa's fraction. */
    {
      long fa_frac = (long)(fa % 1000000ULL);
      long at = fa_frac / 4;
      if (at < 2000) { fprintf(stderr, "  (fa too early in its second: again)\n"); goto next; }
      sleep_to_frac(at);
    }
    tried++;
    {
      uint64_t hi = 0;
      rc = dlock_guard_check_highest(c2, res, fa, &hi);
      snprintf(detail, sizeof detail,
               "fa=%" PRIu64 " admitted, then fb=%" PRIu64 " admitted; master restarted empty; "
               "guard_check(fa) on it -> %d (%s) highest %" PRIu64 ": %s",
               fa, fb, rc, dlock_err_name(rc), hi, rc ? dlock_last_error() : "");
      fprintf(stderr, "  %s\n", detail);
      char rec[512] = "";
      th_redis_cli(&s.master, rec, sizeof rec, "EVAL \"local k = redis.call('KEYS', '*dlock-epoch') "
                   "if k[1] then return k[1] .. ' = ' .. redis.call('GET', k[1]) end return ''\" 0");
      fprintf(stderr, "  the restarted master's record: %s (its process started at %lld s)\n", rec,
              info_num(&s.master, "server_time_usec") / 1000000LL - info_num(&s.master, "uptime_in_seconds"));
      if (rc == 0) admitted_stale = 1;
    }
  next:
    if (a) { dlock_mutex_free(a); a = NULL; }
    if (b) { dlock_mutex_free(b); b = NULL; }
    if (c2) { dlock_client_free(c2); c2 = NULL; }
  }
  if (a) dlock_mutex_free(a);
  if (b) dlock_mutex_free(b);
  if (c) dlock_client_free(c);
  th_sentinel_set_stop(&s);
  if (!tried && !admitted_stale) TEST_SKIP("the restart never landed in the token's second (machine too slow)");
  if (admitted_stale)
    TEST_FAIL("a token issued before the master's restart without data was admitted although a higher one "
              "had been: %s",
              detail);
}

static int pg_wait_sql(const th_pg *p, const char *sql, const char *want, long timeout_ms) {
  long long until = th_now_ms() + timeout_ms;
  char out[256];
  do {
    if (th_pg_sql(p, NULL, out, sizeof out, "%s", sql) == 0 && strcmp(out, want) == 0) return 0;
    th_sleep_ms(200);
  } while (th_now_ms() < until);
  fprintf(stderr, "  (waited for '%s' = '%s', last '%s')\n", sql, want, out);
  return -1;
}

/*
 * FINDING 2 (medium: a guard admission lost at a failover to a SYNCHRONOUS
 * standby; the stale fence admitted again).
 * Promise (docs/postgres.md, "Failover to an asynchronous standby"): "With
 * synchronous_standby_names set (and synchronous_commit on, which dlock's
 * statements force), a promoted synchronous standby has every commit that
 * was acknowledged, and none of this happens" -- "this" including "rows of
 * dlock.guards roll back (the guard admits once more a fence it had already
 * superseded)". The doctor, for synchronous_commit = local, says dlock's own
 * transactions are turned to on, set it on only "if other writers rely on it".
 * Attack: primary + one streaming standby made synchronous
 * (synchronous_standby_names '*', sync_state 'sync'; the doctor says
 * "replication: 1 standby, all synchronous"); the database default
 * synchronous_commit = local (the doctor warns "durability", saying dlock's
 * own transactions are turned on). Fences f1 < f2 < f3 are taken; the guard
 * admits f2 while the standby streams; the synchronous standby stops; the
 * guard admits f3 (in 3 ms: an acquire would have waited); the primary is
 * SIGKILLed and the synchronous standby promoted; the stale holder of f2
 * checks again on it.
 * What happened: the guard statement (pg_sql.c sql_guard) does not run
 * set_config('synchronous_commit','on',true) like the acquire does, so its
 * commit returned at once without the synchronous standby (an acquire
 * would have waited), the admission of f3 is gone on the promoted standby,
 * and f2 is admitted again after f3 had been.
 */
TEST(pg_guard_admission_lost_at_failover_to_synchronous_standby) {
  char why[256];
  if (!th_pg_available(why, sizeof why)) TEST_SKIP("%s", why);
  th_pg p, sb;
  memset(&sb, 0, sizeof sb);
  if (th_pg_start(&p, NULL) != 0) TEST_SKIP("postgres did not start");
  if (th_pg_start_standby(&sb, &p) != 0) { th_pg_stop(&p); TEST_SKIP("no standby"); }
  dlock_client *c = NULL, *c2 = NULL;
  dlock_mutex *m = NULL;
  char out[512], fail[1024] = "";
  int rc;
  uint64_t f1 = 0, f2 = 0, f3 = 0;
  th_pg_sql(&p, NULL, out, sizeof out, "ALTER SYSTEM SET synchronous_standby_names = '*'");
  th_pg_sql(&p, NULL, out, sizeof out, "SELECT pg_reload_conf()");
  th_pg_sql(&p, NULL, out, sizeof out, "ALTER DATABASE postgres SET synchronous_commit = local");
  if (pg_wait_sql(&p, "SELECT string_agg(sync_state, ',') FROM pg_stat_replication", "sync", 20000) != 0) {
    snprintf(fail, sizeof fail, "setup: the standby did not become synchronous");
    goto out;
  }
  c = th_pg_client(&p, "dlock", NULL);
  if (!c) { snprintf(fail, sizeof fail, "setup: client: %s", dlock_last_error()); goto out; }
  {
    dlock_check chk[DLOCK_CHECK_MAX];
    int n = dlock_client_check(c, chk, DLOCK_CHECK_MAX);
    for (int i = 0; i < n; i++)
      if (!strcmp(chk[i].name, "replication") || strstr(chk[i].found, "synchronous_commit"))
        fprintf(stderr, "  doctor %s: %s\n", chk[i].name, chk[i].found);
  }
  if (dlock_mutex_new(&m, c, "revsp2-pg", NULL) != 0) goto out;
  if ((rc = dlock_mutex_acquire(m, 5000)) != 0) { snprintf(fail, sizeof fail, "setup acquire1 %d", rc); goto out; }
  f1 = dlock_mutex_fence(m);
  dlock_mutex_release(m);
  if ((rc = dlock_mutex_acquire(m, 5000)) != 0) { snprintf(fail, sizeof fail, "setup acquire2 %d", rc); goto out; }
  f2 = dlock_mutex_fence(m);
  dlock_mutex_release(m);
  if ((rc = dlock_mutex_acquire(m, 5000)) != 0) { snprintf(fail, sizeof fail, "setup acquire3 %d", rc); goto out; }
  f3 = dlock_mutex_fence(m);
  dlock_mutex_release(m);
  if (!(f1 < f2 && f2 < f3)) { snprintf(fail, sizeof fail, "setup: fences %" PRIu64 " %" PRIu64 " %" PRIu64, f1, f2, f3); goto out; }
  if ((rc = dlock_guard_check(c, "revsp2-res", f2)) != 0) { snprintf(fail, sizeof fail, "setup guard f2 %d", rc); goto out; }
  /* Let the standby receive the row of f2, then stop it. */
  th_sleep_ms(1500);
  th_pg_halt(&sb, 0);
  long long t0 = th_now_ms();
  rc = dlock_guard_check(c, "revsp2-res", f3);
  fprintf(stderr, "  guard_check(f3=%" PRIu64 ") with the synchronous standby down -> %d (%s) in %lld ms\n", f3, rc,
          dlock_err_name(rc), th_now_ms() - t0);
  if (rc != 0) {
    /* Refused or unsure while the synchronous standby is down: the promise holds. */
    goto out;
  }
  th_pg_halt(&p, 1); /* the primary crashes */
  if (th_pg_relaunch(&sb) != 0) { snprintf(fail, sizeof fail, "setup: standby relaunch"); goto out; }
  th_pg_sql(&sb, NULL, out, sizeof out, "SELECT pg_promote(true, 30)");
  if (pg_wait_sql(&sb, "SELECT pg_is_in_recovery()", "f", 30000) != 0) {
    snprintf(fail, sizeof fail, "setup: standby not promoted");
    goto out;
  }
  c2 = th_pg_client(&sb, "dlock", NULL);
  if (!c2) { snprintf(fail, sizeof fail, "setup: client of promoted: %s", dlock_last_error()); goto out; }
  {
    uint64_t hi = 0;
    rc = dlock_guard_check_highest(c2, "revsp2-res", f2, &hi);
    fprintf(stderr, "  on the promoted synchronous standby: guard_check(f2=%" PRIu64 ") -> %d (%s), highest %" PRIu64 "\n",
            f2, rc, dlock_err_name(rc), hi);
    if (rc == 0)
      snprintf(fail, sizeof fail,
               "f3=%" PRIu64 " was admitted (acknowledged) before the failover to the synchronous standby, "
               "yet f2=%" PRIu64 " < f3 is admitted after it: the guard's commit did not wait for the "
               "synchronous standby",
               f3, f2);
  }
out:
  if (m) dlock_mutex_free(m);
  if (c) dlock_client_free(c);
  if (c2) dlock_client_free(c2);
  th_pg_stop(&sb);
  th_pg_stop(&p);
  if (fail[0]) TEST_FAIL("%s", fail);
}

/*
 * FINDING 3 (high: FINDING 1 on Redis Cluster, per slot).
 * Promise (docs/topologies.md, Redis Cluster, "The fence guarantee"): "the
 * floor is kept per slot ... after a failover of that slot's master, the
 * guard refuses the tokens issued before it, as under Sentinel"; Sentinel's
 * section: a record lost with the data (a restart without persistence) means
 * the floor is the time the process started, "so every token of an earlier
 * master is below that".
 * Attack: a 3-master cluster (no replicas, no persistence); the resource is
 * named like the lock (same slot, as the docs advise). Fence fa is admitted,
 * then fb > fa; the slot's master is SIGKILLed and restarted at once without
 * data (nodes.conf kept: master of its slots again) in fa's wall-clock
 * second; once it serves again, the stale holder checks fa early in a later
 * second (fraction below fa's).
 * What happened: fa is admitted after fb was (the slot's floor is
 * floor(start) + the fraction of the check's second, below fa).
 * (Held, for the record: the reverse side of this rounding -- a floor up to
 * a second AFTER the real start, which would refuse a token issued in the
 * process's first second by a lock of another slot -- cannot be reached on
 * a cluster: a rebooted master serves nothing for its first 2 s,
 * CLUSTER_WRITABLE_DELAY.)
 */
TEST(cluster_restart_without_data_admits_stale_token_of_same_second) {
  th_cluster cl;
  if (th_cluster_start(&cl, 3, 0) != 0) TEST_SKIP("no cluster (redis-server/redis-cli missing?)");
  dlock_client *c = NULL, *c2 = NULL;
  dlock_mutex *a = NULL, *b = NULL;
  char fail[1024] = "";
  int tried = 0;
  long long t_end = th_now_ms() + 45000;
  for (int attempt = 0; attempt < 5 && !fail[0] && th_now_ms() < t_end; attempt++) {
    char name[64];
    snprintf(name, sizeof name, "revsp2-c%d", attempt);
    int o = th_cluster_owner(&cl, name);
    if (o < 0) continue;
    if (!c) c = new_client(cl.url);
    if (!c) break;
    if (dlock_mutex_new(&a, c, name, NULL) != 0 || dlock_mutex_new(&b, c, name, NULL) != 0) break;
    sleep_to_frac(100000);
    if (dlock_mutex_acquire(a, 3000) != 0) goto next;
    uint64_t fa = dlock_mutex_fence(a);
    if (dlock_guard_check(c, name, fa) != 0) goto next;
    dlock_mutex_release(a);
    if (dlock_mutex_acquire(b, 3000) != 0) goto next;
    uint64_t fb = dlock_mutex_fence(b);
    if (!(fb > fa) || dlock_guard_check(c, name, fb) != 0) goto next;
    dlock_mutex_free(a); a = NULL;
    dlock_mutex_free(b); b = NULL;
    dlock_client_free(c); c = NULL;
    if (th_redis_restart(&cl.node[o]) != 0) break;
    {
      long long t = info_num(&cl.node[o], "server_time_usec"), up = info_num(&cl.node[o], "uptime_in_seconds");
      long long start_s = t / 1000000LL - up;
      if (t < 0 || up < 0 || start_s != (long long)(fa / 1000000ULL)) {
        fprintf(stderr, "  (attempt %d: restart second %lld, fa's %llu: again)\n", attempt, start_s,
                (unsigned long long)(fa / 1000000ULL));
        goto next;
      }
    }
    if (th_cluster_wait_ok(&cl, name, 20000) != 0) goto next;
    c2 = new_client(cl.url);
    if (!c2) goto next;
    {
      long at = (long)(fa % 1000000ULL) / 4;
      if (at < 2000) goto next;
      sleep_to_frac(at);
    }
    tried++;
    {
      uint64_t hi = 0;
      int rc = dlock_guard_check_highest(c2, name, fa, &hi);
      if (rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECONNECT) { tried--; goto next; }
      fprintf(stderr, "  fa=%" PRIu64 " then fb=%" PRIu64 " admitted; slot master restarted empty; check(fa) -> %d (%s)\n",
              fa, fb, rc, dlock_err_name(rc));
      if (rc == 0)
        snprintf(fail, sizeof fail,
                 "on the restarted slot master, fa=%" PRIu64 " was admitted although fb=%" PRIu64 " > fa had been",
                 fa, fb);
    }
  next:
    if (a) { dlock_mutex_free(a); a = NULL; }
    if (b) { dlock_mutex_free(b); b = NULL; }
    if (c2) { dlock_client_free(c2); c2 = NULL; }
  }
  if (c) dlock_client_free(c);
  th_cluster_stop(&cl);
  if (fail[0]) TEST_FAIL("%s", fail);
  if (!tried) TEST_SKIP("the restart never landed in the token's second (machine too slow)");
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

/*
 * FINDING 5 (medium: availability; no new client while one master is down).
 * Promise (docs/topologies.md, Redis Cluster): "The loss of a seed: any node
 * can tell the slot map"; a master lost with all its replicas loses "the
 * locks of that master's slots (the cluster stops serving those slots; with
 * cluster-require-full-coverage no the rest goes on)"; a master that has a
 * replica: "the client finds the new master and goes on".
 * Attack: 3 masters, no replicas, cluster-require-full-coverage no; the
 * master that serves slot 0 is SIGKILLed and marked failed by the others;
 * dlock_client_new() with the two live masters as seeds.
 * What happened: DLOCK_ECONNECT naming the dead master: redis_open()
 * (backend.c, redis_ping) PINGs the node routed for the key "" (slot 0) and
 * fails the whole client; no process can start a client (nor `dlock` run)
 * for the locks that the live masters serve, and with a replica the same
 * holds until the failover of slot 0's master completes.
 */
TEST(cluster_client_new_fails_while_slot0_master_is_down) {
  th_cluster cl;
  if (th_cluster_start(&cl, 3, 0) != 0) TEST_SKIP("no cluster");
  char fail[1024] = "", skip[256] = "", out[16384];
  int z = slot0_owner(&cl);
  if (z < 0) { snprintf(skip, sizeof skip, "no slot-0 owner found"); goto out; }
  int b = (z + 1) % 3, x = (z + 2) % 3;
  th_redis_cli(&cl.node[b], out, sizeof out, "CONFIG SET cluster-require-full-coverage no");
  th_redis_cli(&cl.node[x], out, sizeof out, "CONFIG SET cluster-require-full-coverage no");
  kill(cl.node[z].pid, SIGKILL);
  waitpid(cl.node[z].pid, NULL, 0);
  cl.node[z].pid = 0;
  {
    int failed = 0;
    for (int i = 0; i < 100 && !failed; i++) {
      th_sleep_ms(200);
      if (th_redis_cli(&cl.node[b], out, sizeof out, "CLUSTER INFO") == 0 && strstr(out, "cluster_state:ok") &&
          th_redis_cli(&cl.node[b], out, sizeof out, "CLUSTER NODES") == 0 && strstr(out, "fail") &&
          !strstr(out, "fail?"))
        failed = 1;
    }
    if (!failed) { snprintf(skip, sizeof skip, "the live masters never went back to cluster_state:ok"); goto out; }
  }
  char url[256];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", cl.node[b].port, cl.node[x].port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  fprintf(stderr, "  dlock_client_new(%s) with slot 0's master dead -> %d (%s) %s\n", url, rc, dlock_err_name(rc),
          rc ? dlock_last_error() : "");
  if (rc != 0)
    snprintf(fail, sizeof fail, "no client of the live masters: %s: %s", dlock_err_name(rc), dlock_last_error());
  if (c) dlock_client_free(c);
out:
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
