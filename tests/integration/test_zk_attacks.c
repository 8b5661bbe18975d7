/*
 * test_zk_attacks.c - adversarial review of the ZooKeeper backend
 * (branch revzk): attacks on the promises of docs/zookeeper.md with real
 * servers and a raw, unauthenticated libzookeeper client. Registered as
 * ctest "review/test_zk_attacks" (labels "review" and "zk").
 *
 * FINDING 1 (ACLs, "Parents left open"): dlock__zk_close_path() decides a
 * parent is open only from its world:anyone entry (world_beyond_read() in
 * src/zk/session.c). Any other entry that admits clients without our
 * credentials is trusted: an `ip:` entry (ip:127.0.0.1, or ip:0.0.0.0/0,
 * which matches every client), another user's digest, ... A client with no
 * credentials that creates the lock path (or _dlock_guard) first, with the
 * ACL `ip:0.0.0.0/0:cdrwa, world:anyone:r`, passes the check: dlock puts its
 * holder's node there, does not close the path, and the attacker deletes
 * the holder's node (a second digest client then gets the lock while the
 * first still holds), queues a node that sorts first, or lowers the guard
 * (a stale token is admitted). The docs promise that with ?digest= "a
 * client without credentials ... can neither delete a holder's node, nor
 * ... create a node in a lock path, nor lower ... a guard", and that an
 * open parent is closed or refused with DLOCK_EAUTH. These tests FAIL on
 * the code as reviewed (cd6223b): the raw delete / setData succeed.
 * The attacker needs create rights where the lock path goes (the namespace
 * left open, as the root is by default, or a namespace it made first).
 * Tests (FAIL today): review_adv_acl_ip_any_entry_lets_an_unauthenticated_
 * client_delete_a_holders_node, ..._ip_loopback_entry_..., and
 * review_adv_acl_ip_any_entry_lets_an_unauthenticated_client_lower_a_guard.
 *
 * FINDING 3 (guard, no sync before its read): see the comment of
 * review_adv_guard_admits_a_stale_token_read_from_a_lagging_follower
 * (FAILS today): after token 101 was admitted, token 100 is admitted on a
 * follower that has not yet applied 101.
 *
 * FINDING 4 (a jam, lower severity): under a namespace left open, an
 * emptied closed lock path is deleted and replaced by an unauthenticated
 * client with a planted first node (review_adv_acl_open_namespace_lets_an_
 * unauthenticated_client_jam_a_closed_lock_path, FAILS today).
 *
 * HELD (pass today, they show the attacked promise holds):
 * - review_adv_partition_follower_cut_at_the_minimum_session_of_two_ticks:
 *   tick 1000 ms, session 2000 ms (ZooKeeper's minimum ratio, where the
 *   leader's pings of the follower are exactly as frequent as dlock's syncs);
 *   a follower cut off: in 8 trials the holder's valid_until lay 498-2147 ms
 *   before the waiter's grant.
 * - review_adv_partition_leader_that_loses_its_quorum_while_the_holder_talks_
 *   to_it: the case docs/zookeeper.md argues but did not test; the top-id
 *   server is restarted first so that the cut-off leader cannot win the
 *   next election (election ports are not proxied), and it is frozen
 *   once it stepped down (the holder counts itself lost), for the same
 *   reason; margins 1.0-2.2 s when the others elected at once, 23-33 s when
 *   elections dragged (tick 1000, syncLimit 5, session 2000).
 * - review_adv_history_of_four_processes_under_sigstop_and_a_killed_leader_
 *   has_no_overlap: 142 holds, 5 SIGSTOPs of 3 s, the leader killed -9:
 *   no overlap of counted holds, fences in grant order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef THREADED
#define THREADED 1
#endif
#include <zookeeper/zookeeper.h>

#include "harness.h"
#include "harness_zk.h"
#include "internal.h"
#include "test.h"
#include "zk/zk.h"

static th_zk srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) {
  srv_up = th_zk_suite_start(&srv, 200, skip_why, sizeof skip_why);
  zoo_set_debug_level((ZooLogLevel)0);
}

void test_teardown(void) {
  if (srv_up) th_zk_stop(&srv);
}

#define NEED_SERVER()                       \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

static const char *url_of(const char *ns, const char *params) {
  static char buf[8][512];
  static int next;
  char *b = buf[next++ % 8];
  snprintf(b, 512, "zk://%s%s%s%s", srv.hostport, ns, params && *params ? "?" : "", params ? params : "");
  return b;
}

static dlock__zk *zk_connect(const char *url) {
  dlock__zk *z = NULL;
  if (dlock__zk_connect(url, &z) != 0) TEST_FAIL("connect %s: %s", url, dlock_last_error());
  return z;
}

/* The attacker: a session with no credentials, connected within 30 s. */
static zhandle_t *raw_connect(void) {
  zhandle_t *zh = zookeeper_init(srv.hostport, NULL, 10000, NULL, NULL, 0);
  if (!zh) TEST_FAIL("zookeeper_init %s failed", srv.hostport);
  long limit = 30000L * th_time_factor();
  for (long waited = 0; zoo_state(zh) != ZOO_CONNECTED_STATE; waited += 20) {
    if (waited >= limit) {
      zookeeper_close(zh);
      TEST_FAIL("the raw client did not connect to %s within %ld ms", srv.hostport, limit);
    }
    usleep(20000);
  }
  return zh;
}

#define DIGEST "digest=alice:s3cret"

static char scheme_ip[] = "ip", id_all[] = "0.0.0.0/0", id_lo[] = "127.0.0.1", scheme_world[] = "world",
            id_anyone[] = "anyone";

/* `ip:<id>:cdrwa, world:anyone:r`: world:anyone may only read, so dlock
 * takes it for closed, but every client (no credentials needed) whose
 * address matches <id> has every right. */
static struct ACL_vector *ip_open_acl(int all) {
  static struct ACL a[2];
  static struct ACL_vector v = {2, a};
  a[0].perms = ZOO_PERM_ALL;
  a[0].id.scheme = scheme_ip;
  a[0].id.id = all ? id_all : id_lo;
  a[1].perms = ZOO_PERM_READ;
  a[1].id.scheme = scheme_world;
  a[1].id.id = id_anyone;
  return &v;
}

static void attack_mutex(const char *ns, int all) {
  zhandle_t *raw = raw_connect();
  char lockpath[128];
  snprintf(lockpath, sizeof lockpath, "%s/orders", ns);
  /* The attacker makes the namespace and the lock path before any dlock. */
  int zrc = zoo_create(raw, ns, NULL, -1, ip_open_acl(all), ZOO_PERSISTENT, NULL, 0);
  if (zrc != ZOK) TEST_FAIL("create %s: %s", ns, zerror(zrc));
  zrc = zoo_create(raw, lockpath, NULL, -1, ip_open_acl(all), ZOO_PERSISTENT, NULL, 0);
  if (zrc != ZOK) TEST_FAIL("create %s: %s", lockpath, zerror(zrc));

  dlock__zk *z1 = zk_connect(url_of(ns, DIGEST));
  dlock__zk *z2 = zk_connect(url_of(ns, DIGEST));
  dlock__zk_hold h1, h2;
  memset(&h2, 0, sizeof h2);
  /* dlock must either close the path or refuse it (DLOCK_EAUTH). */
  int rc = dlock__zk_acquire(z1, "orders", "alice-1", 0, NULL, &h1);
  if (rc == DLOCK_EAUTH) goto out_refused;
  ASSERT_OK(rc);
  /* The promise: no delete, no write, no queue jumping by a client
   * without credentials. */
  zrc = zoo_delete(raw, h1.node_path, -1);
  if (zrc == ZOK) {
    /* The damage: a second digest client gets the lock while z1 holds
     * (z1 learns only at its watchdog's next look). */
    int rc2 = dlock__zk_acquire(z2, "orders", "alice-2", 0, NULL, &h2);
    TEST_FAIL("an unauthenticated client (ACL ip:%s on %s, not closed by dlock) deleted the holder's node %s; "
              "a second client's acquire then answered %d (0 = two holders)",
              all ? id_all : id_lo, lockpath, h1.node_path, rc2);
  }
  ASSERT_EQ(zrc, ZNOAUTH);
  char node[600];
  char jump[256];
  snprintf(jump, sizeof jump, "%s/_c_00000000-0000-4000-8000-000000000000-lock-0000000000", lockpath);
  zrc = zoo_create(raw, jump, "x", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, node, (int)sizeof node);
  if (zrc == ZOK) TEST_FAIL("an unauthenticated client created %s (sorts first in the queue)", jump);
  ASSERT_OK(dlock__zk_release(z1, &h1));
  dlock__zk_hold_clear(&h1);
  dlock__zk_free(z2);
  dlock__zk_free(z1);
  zookeeper_close(raw);
  return;
out_refused:
  dlock__zk_free(z2);
  dlock__zk_free(z1);
  zookeeper_close(raw);
}

/* Adversarial review of ZooKeeper (branch revzk), finding 1. */
REVIEW_TEST(review_adv_acl_ip_any_entry_lets_an_unauthenticated_client_delete_a_holders_node) {
  NEED_SERVER();
  attack_mutex("/adv1", 1);
}

/* Adversarial review of ZooKeeper (branch revzk), finding 1. */
REVIEW_TEST(review_adv_acl_ip_loopback_entry_lets_an_unauthenticated_client_delete_a_holders_node) {
  NEED_SERVER();
  attack_mutex("/adv2", 0);
}

/* The guard: _dlock_guard made first by the attacker with ip:0.0.0.0/0:cdrwa.
 * dlock trusts it; the attacker lowers the guard and a stale token is
 * admitted. */
/* Adversarial review of ZooKeeper (branch revzk), finding 1. */
REVIEW_TEST(review_adv_acl_ip_any_entry_lets_an_unauthenticated_client_lower_a_guard) {
  NEED_SERVER();
  zhandle_t *raw = raw_connect();
  ASSERT_EQ(zoo_create(raw, "/adv3", NULL, -1, ip_open_acl(1), ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_EQ(zoo_create(raw, "/adv3/_dlock_guard", NULL, -1, ip_open_acl(1), ZOO_PERSISTENT, NULL, 0), ZOK);
  dlock__zk *z = zk_connect(url_of("/adv3", DIGEST));
  int rc = dlock__zk_guard_check(z, "ledger", 100, NULL);
  if (rc != DLOCK_EAUTH) {
    ASSERT_OK(rc);
    /* Delete it and make it again at 1 (parent's ACL), or write it. */
    int zd = zoo_delete(raw, "/adv3/_dlock_guard/ledger", -1);
    int zc = zd == ZOK ? zoo_create(raw, "/adv3/_dlock_guard/ledger", "1", 1, ip_open_acl(1), ZOO_PERSISTENT, NULL, 0)
                       : zoo_set(raw, "/adv3/_dlock_guard/ledger", "1", 1, -1);
    rc = dlock__zk_guard_check(z, "ledger", 50, NULL);
    if (rc == 0)
      TEST_FAIL("an unauthenticated client lowered the guard (delete %s, then %s) and the stale token 50 was "
                "admitted after 100",
                zerror(zd), zerror(zc));
    ASSERT_STATUS(rc, DLOCK_ESTALE);
  }
  zookeeper_close(raw);
  dlock__zk_free(z);
}

/* ---- The validity model under partitions (FINDING 2 candidates) ---- */

#include "dlock.h"
#include "faultproxy.h"

#define EN TH_ZK_ENSEMBLE

typedef struct trial {
  long long granted; /* waiter's grant, ms after the cut */
  long long valid;   /* holder's valid_until, ms after the cut */
  int lost;          /* the holder's loss reason at the grant */
  int rc;            /* the waiter's acquire */
} trial;

/* Kill -9 server 'z' and start it again with the same command line,
 * environment and directory (read from /proc before the kill), so that it
 * rejoins the ensemble as a follower: the leader is then no longer the
 * server with the highest id, and a cut-off leader loses the next election. */
static th_zk_ensemble *other_leader_of; /* the ensemble of the node restarted */
static int restart_node(th_zk *z) {
  char path[64], *argv[256], *envp[512];
  static char cmd[65536], env[262144], cwd[512];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)z->pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(cmd, 1, sizeof cmd - 1, f);
  fclose(f);
  snprintf(path, sizeof path, "/proc/%d/environ", (int)z->pid);
  f = fopen(path, "r");
  if (!f) return -1;
  size_t m = fread(env, 1, sizeof env - 1, f);
  fclose(f);
  snprintf(path, sizeof path, "/proc/%d/cwd", (int)z->pid);
  ssize_t cl = readlink(path, cwd, sizeof cwd - 1);
  if (cl <= 0) return -1;
  cwd[cl] = 0;
  int argc = 0, envc = 0;
  for (size_t i = 0; i < n && argc < 255; i += strlen(cmd + i) + 1) argv[argc++] = cmd + i;
  argv[argc] = NULL;
  for (size_t i = 0; i < m && envc < 511; i += strlen(env + i) + 1) envp[envc++] = env + i;
  envp[envc] = NULL;
  pid_t old = z->pid;
  th_zk_kill9(z);
  (void)old;
  /* Wait until the others elected one of them, so that it rejoins as a
   * follower rather than winning the election again. */
  for (int i = 0; i < 300 && other_leader_of == NULL; i++) th_sleep_ms(100);
  if (other_leader_of) {
    long long until = th_now_ms() + 60000LL * th_time_factor();
    while (th_now_ms() < until && th_zk_leader(other_leader_of) < 0) th_sleep_ms(100);
  }
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (chdir(cwd) != 0) _exit(127);
    char log[600];
    snprintf(log, sizeof log, "%s/server-restarted.log", z->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    (void)envp;
    execvp(argv[0], argv);
    _exit(127);
  }
  z->pid = pid;
  return 0;
}

static void run_trial(int tick, int sync_limit, int session_ms, int cut_leader, trial *out) {
  th_zk_ensemble e;
  fp_proxy *via[EN][EN];
  memset(via, 0, sizeof via);
  int qport[EN], qvia[EN][EN];
  memset(qvia, 0, sizeof qvia);
  for (int j = 0; j < EN; j++) qport[j] = th_free_port();
  for (int i = 0; i < EN; i++)
    for (int j = 0; j < EN; j++) {
      if (i == j) continue;
      if (fp_start(&via[i][j], qport[j]) != 0) TEST_FAIL("fault proxy did not start");
      fp_raw(via[i][j], 1);
      qvia[i][j] = fp_port(via[i][j]);
    }
  if (th_zk_ensemble_start_via(&e, tick, sync_limit, qport, (const int(*)[EN])qvia) != 0)
    TEST_FAIL("the routed ensemble did not start");
  int leader = th_zk_leader(&e);
  if (leader < 0) TEST_FAIL("no leader");
  if (cut_leader) {
    /* Make a server other than the highest id lead (see restart_node). */
    int top = 0;
    for (int i = 1; i < EN; i++)
      if (e.node[i].myid > e.node[top].myid) top = i;
    if (leader == top) {
      other_leader_of = &e;
      int rr = restart_node(&e.node[top]);
      other_leader_of = NULL;
      if (rr != 0) TEST_FAIL("cannot restart the leader");
      long long until = th_now_ms() + 60000LL * th_time_factor();
      char mode[64] = "";
      do {
        th_sleep_ms(200);
        th_zk_mode(&e.node[top], mode, sizeof mode);
      } while (strcmp(mode, "follower") && th_now_ms() < until);
      if (strcmp(mode, "follower")) TEST_FAIL("the restarted server did not follow (mode '%s')", mode);
      leader = th_zk_leader(&e);
      if (leader < 0 || leader == top) TEST_FAIL("no other leader");
    }
  }
  int k = cut_leader ? leader : (leader + 1) % EN;
  char others[256] = "", url[512];
  for (int i = 0; i < EN; i++) {
    if (i == k) continue;
    size_t o = strlen(others);
    snprintf(others + o, sizeof others - o, "%s%s", o ? "," : "", e.node[i].hostport);
  }
  snprintf(url, sizeof url, "zk://%s/adv?session_timeout=%dms&connect_timeout=%lds", e.node[k].hostport, session_ms,
           20 * th_time_factor());
  dlock_client *hc = test_client(url);
  snprintf(url, sizeof url, "zk://%s/adv?session_timeout=%dms&connect_timeout=%lds", others, session_ms,
           20 * th_time_factor());
  dlock_client *wc = test_client(url);
  dlock_mutex *hm = test_mutex(hc, "job", 0), *wm = test_mutex(wc, "job", 0);
  ASSERT_OK(dlock_mutex_acquire(hm, 0));
  th_sleep_ms(2 * session_ms + 317 * (th_now_ms() % 7)); /* several pings; a varying phase */
  ASSERT_EQ(dlock_mutex_lost(hm), DLOCK_LOST_NONE);
  dlock_mono_ms cut = dlock_mono_now();
  for (int j = 0; j < EN; j++) {
    if (j == k) continue;
    fp_blackhole(via[k][j], 1);
    fp_blackhole(via[j][k], 1);
  }
  /* The waiter's own server may lose its leader too (when the leader is
   * cut off): its acquire then fails as unknown; queue again until granted. */
  long long give_up = th_now_ms() + 60000LL * th_time_factor();
  int tries = 0;
  int frozen = 0;
  do {
    out->rc = dlock_mutex_acquire(wm, 1000 * th_time_factor());
    tries++;
    /* A cut-off leader, once it stepped down (its holder's syncs go
     * unanswered: the holder counts itself lost), would win the next
     * election with the entries it logged alone (election ports are not
     * proxied) and never lead: freeze it from then on. Before that moment
     * it is left alone, which is the window this trial is about. */
    if (cut_leader && !frozen && dlock_mutex_lost(hm) != DLOCK_LOST_NONE) {
      th_zk_freeze(&e.node[k]);
      frozen = 1;
    }
    if (out->rc != 0) th_sleep_ms(50);
  } while (out->rc != 0 && th_now_ms() < give_up && tries < 500);
  dlock_mono_ms granted = dlock_mono_now();
  out->granted = granted - cut;
  out->valid = dlock_mutex_valid_until(hm) - cut;
  out->lost = (int)dlock_mutex_lost(hm);
  printf("  cut %s %d: waiter rc %d granted at %lld ms; holder valid_until %lld ms (margin %lld), lost '%s'\n",
         cut_leader ? "leader" : "follower", k, out->rc, out->granted, out->valid, out->granted - out->valid,
         dlock_lost_reason_str((dlock_lost_reason)out->lost));
  fflush(stdout);
  /* Heal the cut before freeing: freeing the holder's lost mutex releases
   * it, on a new session to its only server; with that server cut off (or
   * stopped) that waits out the connect timeout (40 s with the factor). */
  if (frozen) th_zk_thaw(&e.node[k]);
  for (int j = 0; j < EN; j++) {
    if (j == k) continue;
    fp_blackhole(via[k][j], 0);
    fp_blackhole(via[j][k], 0);
  }
  dlock_mutex_free(hm);
  dlock_mutex_free(wm);
  dlock_client_free(hc);
  dlock_client_free(wc);
  th_zk_ensemble_stop(&e);
  for (int i = 0; i < EN; i++)
    for (int j = 0; j < EN; j++) fp_stop(via[i][j]);
}

static void partition_trials(int cut_leader, int trials, int tick, int sync_limit, int session_ms) {
  char why[256];
  if (!th_zk_available(why, sizeof why)) TEST_SKIP("%s", why);
  int bad = 0;
  long long worst = 1LL << 40;
  for (int t = 0; t < trials; t++) {
    trial r;
    run_trial(tick, sync_limit, session_ms, cut_leader, &r);
    if (r.rc != 0) continue;
    long long margin = r.granted - r.valid;
    if (margin < worst) worst = margin;
    if (margin < 0 || r.lost == DLOCK_LOST_NONE) bad++;
  }
  if (bad)
    TEST_FAIL("%d of %d trials: two holders (the waiter granted while the holder cut off with the %s still counted "
              "itself valid; worst margin %lld ms)",
              bad, trials, cut_leader ? "leader" : "follower", worst);
}

/* DLOCK_LONG_TESTS=1: the slow variants (several minutes in all). */
static int long_tests(void) {
  const char *lt = getenv("DLOCK_LONG_TESTS");
  return lt && !strcmp(lt, "1");
}

/* Adversarial review of ZooKeeper (branch revzk), finding 2 candidates: held. */
REVIEW_TEST(review_adv_partition_follower_cut_at_the_minimum_session_of_two_ticks) {
  /* One trial by default (an ensemble each: 10-50 s on a busy machine),
   * the reviewer's 4 with DLOCK_LONG_TESTS=1. */
  partition_trials(0, long_tests() ? 4 : 1, 1000, 10, 2000);
}

/* Adversarial review of ZooKeeper (branch revzk), finding 2 candidates: held. */
REVIEW_TEST(review_adv_partition_leader_that_loses_its_quorum_while_the_holder_talks_to_it) {
  /* Elections after the cut can drag for minutes: too long for CI. */
  if (!long_tests())
    TEST_SKIP("takes several minutes (elections after the leader is cut off); set DLOCK_LONG_TESTS=1 to run it");
  partition_trials(1, 2, 1000, 5, 2000);
}

/* ---- FINDING 3: the guard reads from a lagging follower ----
 *
 * dlock__zk_guard_check(, NULL) (src/zk/sched.c) reads the guard with a plain
 * zoo_get on the session's own server and admits a token EQUAL to what it
 * read without any write: no sync first. ZooKeeper followers apply commits
 * asynchronously (reads are sequentially consistent per session, not
 * linearizable), so a client whose server lags sees an older guard. Here:
 * the guard is at 100; a client on follower F (whose quorum link to the
 * leader is slowed by 800 ms each way, well within syncLimit) has checked
 * 100; then token 101 is admitted through the other servers (a new holder),
 * and only AFTER that returned, the client on F checks the stale 100 again:
 * it is admitted (F still shows 100), where the guard promises DLOCK_ESTALE
 * for any token below one already admitted. The client on F is a healthy
 * session (its syncs are answered, valid_until moves) - this is the guard
 * service or an old holder whose node was force-released. FAILS on the code
 * as reviewed. (A lower stored value is safe: the conditional setData goes
 * through the leader and fails on the version.)
 */
/* Adversarial review of ZooKeeper (branch revzk), finding 3. */
REVIEW_TEST(review_adv_guard_admits_a_stale_token_read_from_a_lagging_follower) {
  char why[256];
  if (!th_zk_available(why, sizeof why)) TEST_SKIP("%s", why);
  th_zk_ensemble e;
  fp_proxy *via[EN][EN];
  memset(via, 0, sizeof via);
  int qport[EN], qvia[EN][EN];
  memset(qvia, 0, sizeof qvia);
  for (int j = 0; j < EN; j++) qport[j] = th_free_port();
  for (int i = 0; i < EN; i++)
    for (int j = 0; j < EN; j++) {
      if (i == j) continue;
      if (fp_start(&via[i][j], qport[j]) != 0) TEST_FAIL("fault proxy did not start");
      fp_raw(via[i][j], 1);
      qvia[i][j] = fp_port(via[i][j]);
    }
  if (th_zk_ensemble_start_via(&e, 200, 50, qport, (const int(*)[EN])qvia) != 0)
    TEST_FAIL("the routed ensemble did not start");
  int leader = th_zk_leader(&e);
  if (leader < 0) TEST_FAIL("no leader");
  int f = (leader + 1) % EN;
  char others[256] = "", url[512];
  for (int i = 0; i < EN; i++) {
    if (i == f) continue;
    size_t o = strlen(others);
    snprintf(others + o, sizeof others - o, "%s%s", o ? "," : "", e.node[i].hostport);
  }
  snprintf(url, sizeof url, "zk://%s/advg?session_timeout=8000ms&connect_timeout=20s", e.node[f].hostport);
  dlock_client *cf = test_client(url);
  snprintf(url, sizeof url, "zk://%s/advg?session_timeout=8000ms&connect_timeout=20s", others);
  dlock_client *co = test_client(url);

  ASSERT_OK(dlock_guard_check(co, "ledger", 100));
  th_sleep_ms(300);
  ASSERT_OK(dlock_guard_check(cf, "ledger", 100)); /* F has seen 100 */
  /* F's link to its leader slows down (both ways), as a busy follower's:
   * 250 ms keeps F behind when 101 is admitted (the check on F comes at
   * once) and leaves the sync's round trip (2 x 250 ms, plus the load)
   * well inside the 2/3 of the negotiated session after which the client
   * gives up; with 800 ms, on a busy machine, it gave up (ETIMEDOUT). */
  fp_delay(via[f][leader], 250);
  fp_delay(via[leader][f], 250);
  th_sleep_ms(2500);
  /* A new holder's token is admitted through the up-to-date servers... */
  ASSERT_OK(dlock_guard_check(co, "ledger", 101));
  /* ...and only then the old token is presented on F. */
  long long t0 = th_now_ms();
  int rc = dlock_guard_check(cf, "ledger", 100);
  long long took = th_now_ms() - t0;
  int rc2 = dlock_guard_check(co, "ledger", 100);
  printf("  after 101 was admitted: token 100 on the lagging follower -> %d (%lld ms), on the others -> %d\n", rc, took,
         rc2);
  fflush(stdout);
  th_zk_ensemble_stop(&e);
  dlock_client_free(cf);
  dlock_client_free(co);
  for (int i = 0; i < EN; i++)
    for (int j = 0; j < EN; j++) fp_stop(via[i][j]);
  if (rc == 0)
    TEST_FAIL("the guard admitted token 100 on a lagging follower after token 101 had been admitted (a stale "
              "holder's write would pass the guard)");
  ASSERT_STATUS(rc, DLOCK_ESTALE);
}

/* ---- History check: 4 processes, SIGSTOP of holders, kill -9 of a server ----
 *
 * Four forked processes take and release one mutex on a 3-node ensemble
 * (session 2 s) for about 25 s. Each writes one line per hold: fence, grant
 * time, and the end up to which the hold counted = min(release, the last
 * valid_until it read while holding, its loss). Meanwhile the parent freezes
 * a random worker with SIGSTOP for 3 s (longer than the session) every 2 s,
 * and kills the leader with kill -9 once. The check: no two counted holds
 * overlap, and fences grow with grant order. (This attack HELD in review.)
 */
#include <sys/wait.h>

#define HW 4
static void history_worker(const char *hosts, const char *file, long long stop_at, int seed) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s/hist?session_timeout=2000ms&connect_timeout=10s", hosts);
  dlock_client *c = NULL;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  if (dlock_client_new(&c, &o) != 0) _exit(3);
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "h", NULL) != 0) _exit(4);
  int fd = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);
  srand((unsigned)seed);
  while (th_now_ms() < stop_at) {
    if (dlock_mutex_acquire(m, 3000) != 0) continue;
    dlock_mono_ms a = dlock_mono_now();
    uint64_t fence = dlock_mutex_fence(m);
    dlock_mono_ms end = a, v = dlock_mutex_valid_until(m);
    int ms = 30 + rand() % 120;
    for (int i = 0; i < ms / 10; i++) {
      dlock_mono_ms now = dlock_mono_now();
      if (dlock_mutex_lost(m) != DLOCK_LOST_NONE || now >= v) break;
      v = dlock_mutex_valid_until(m);
      end = v; /* counted up to here */
      usleep(10000);
    }
    dlock_mono_ms r = dlock_mono_now();
    if (r < end) end = r;
    if (dlock_mutex_lost(m) != DLOCK_LOST_NONE && r < end) end = r;
    char line[160];
    int n = snprintf(line, sizeof line, "%" PRIu64 " %lld %lld\n", fence, (long long)a, (long long)end);
    if (write(fd, line, (size_t)n) != n) _exit(5);
    dlock_mutex_release(m);
    usleep((useconds_t)(rand() % 20000));
  }
  close(fd);
  _exit(0);
}

typedef struct hrec {
  uint64_t fence;
  long long a, end;
  int w;
} hrec;

static int cmp_hrec(const void *x, const void *y) {
  const hrec *p = x, *q = y;
  return p->a < q->a ? -1 : p->a > q->a;
}

/* Adversarial review of ZooKeeper (branch revzk): an attack that held. */
REVIEW_TEST(review_adv_history_of_four_processes_under_sigstop_and_a_killed_leader_has_no_overlap) {
  char why[256];
  if (!th_zk_available(why, sizeof why)) TEST_SKIP("%s", why);
  th_zk_ensemble e;
  if (th_zk_ensemble_start(&e, 200) != 0) TEST_FAIL("ensemble did not start");
  char dir[] = "/tmp/dlock-hist-XXXXXX";
  if (!mkdtemp(dir)) TEST_FAIL("mkdtemp");
  long long stop_at = th_now_ms() + 25000;
  pid_t pid[HW];
  char file[HW][128];
  for (int i = 0; i < HW; i++) {
    snprintf(file[i], sizeof file[i], "%s/w%d", dir, i);
    pid[i] = fork();
    if (pid[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      history_worker(e.hosts, file[i], stop_at, 1234 + i);
    }
  }
  int killed = 0, stops = 0;
  srand(99);
  while (th_now_ms() < stop_at - 2000) {
    th_sleep_ms(2000);
    int w = rand() % HW;
    kill(pid[w], SIGSTOP);
    stops++;
    if (!killed && th_now_ms() > stop_at - 15000) {
      int l = th_zk_leader(&e);
      if (l >= 0) th_zk_kill9(&e.node[l]);
      killed = 1;
    }
    th_sleep_ms(3000);
    kill(pid[w], SIGCONT);
  }
  for (int i = 0; i < HW; i++) {
    int st;
    long long until = th_now_ms() + 30000;
    while (waitpid(pid[i], &st, WNOHANG) == 0 && th_now_ms() < until) th_sleep_ms(50);
    kill(pid[i], SIGKILL);
    waitpid(pid[i], &st, WNOHANG);
  }
  th_zk_ensemble_stop(&e);
  static hrec h[20000];
  int n = 0;
  for (int i = 0; i < HW; i++) {
    FILE *f = fopen(file[i], "r");
    if (!f) continue;
    while (n < 20000 && fscanf(f, "%" SCNu64 " %lld %lld", &h[n].fence, &h[n].a, &h[n].end) == 3) h[n++].w = i;
    fclose(f);
  }
  for (int i = 0; i < HW; i++) unlink(file[i]);
  rmdir(dir);
  qsort(h, (size_t)n, sizeof h[0], cmp_hrec);
  int overlaps = 0, fence_bad = 0;
  long long worst = 0;
  for (int i = 1; i < n; i++) {
    if (h[i].fence <= h[i - 1].fence) fence_bad++;
    for (int j = i - 1; j >= 0 && j >= i - 50; j--)
      if (h[j].w != h[i].w && h[j].end > h[i].a) {
        overlaps++;
        if (h[j].end - h[i].a > worst) worst = h[j].end - h[i].a;
      }
  }
  printf("  %d holds, %d SIGSTOPs, leader killed %d; overlaps %d (worst %lld ms), fence order violations %d\n", n,
         stops, killed, overlaps, worst, fence_bad);
  if (n < 20) TEST_FAIL("only %d holds recorded", n);
  if (overlaps) TEST_FAIL("%d overlapping counted holds (worst %lld ms)", overlaps, worst);
  if (fence_bad) TEST_FAIL("%d fence order violations", fence_bad);
}

/* FINDING 4 (lower severity: a jam, not two holders). The namespace was made
 * by a client without a digest (open), dlock made the lock path closed. Once
 * the lock path is empty (between holders), the unauthenticated client
 * deletes it (it may: DELETE on the open namespace), creates it again open
 * and plants a persistent `..-lock-0000000000`. The next digest client
 * closes the path as documented, but the planted node stays first in the
 * queue: every acquire of the lock waits behind a node no session owns,
 * which the docs' "nor create a node in a lock path (no queue jumping)"
 * rules out. FAILS today (the acquire answers DLOCK_EBUSY). */
/* Adversarial review of ZooKeeper (branch revzk), finding 4. */
REVIEW_TEST(review_adv_acl_open_namespace_lets_an_unauthenticated_client_jam_a_closed_lock_path) {
  NEED_SERVER();
  zhandle_t *raw = raw_connect();
  ASSERT_EQ(zoo_create(raw, "/adv5", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0), ZOK);
  dlock__zk *z = zk_connect(url_of("/adv5", DIGEST));
  dlock__zk_hold h;
  ASSERT_OK(dlock__zk_acquire(z, "orders", "alice", 0, NULL, &h));
  ASSERT_OK(dlock__zk_release(z, &h));
  dlock__zk_hold_clear(&h);
  /* Empty now: delete, recreate open, plant a node that sorts first. */
  int zrc = zoo_delete(raw, "/adv5/orders", -1);
  if (zrc != ZOK) {
    printf("  delete of the empty closed lock path: %s (held)\n", zerror(zrc));
    zookeeper_close(raw);
    dlock__zk_free(z);
    return;
  }
  ASSERT_EQ(zoo_create(raw, "/adv5/orders", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_EQ(zoo_create(raw, "/adv5/orders/_c_00000000-0000-4000-8000-000000000000-lock-0000000000", "x", 1,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
            ZOK);
  int rc = dlock__zk_acquire(z, "orders", "alice", 500, NULL, &h);
  if (rc == 0) {
    dlock__zk_release(z, &h);
    dlock__zk_hold_clear(&h);
  }
  zookeeper_close(raw);
  dlock__zk_free(z);
  if (rc != 0)
    TEST_FAIL("an unauthenticated client replaced the empty lock path under an open namespace and planted a node "
              "ahead of every waiter: the digest client's acquire answers %d (%s)",
              rc, dlock_last_error());
}

/* FINDING 4, the fix (zkfix2): a persistent node planted ahead in a lock
 * path left open (here the lock path itself made open by a client without
 * credentials, with a second waiter-like planted node) is no holder: a
 * try-acquire (wait 0) with the digest closes the path, deletes what no
 * session owns, and gets the lock at once. */
/* Adversarial review of ZooKeeper (branch revzk), finding 4, the fix (zkfix2). */
REVIEW_TEST(review_adv_acl_planted_persistent_nodes_are_removed_on_a_try_acquire) {
  NEED_SERVER();
  zhandle_t *raw = raw_connect();
  ASSERT_EQ(zoo_create(raw, "/adv6", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_EQ(zoo_create(raw, "/adv6/orders", NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_EQ(zoo_create(raw, "/adv6/orders/_c_00000000-0000-4000-8000-000000000000-lock-0000000000", "x", 1,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
            ZOK);
  ASSERT_EQ(zoo_create(raw, "/adv6/orders/_c_00000000-0000-4000-8000-000000000001-lock-0000000001", "x", 1,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
            ZOK);
  dlock__zk *z = zk_connect(url_of("/adv6", DIGEST));
  dlock__zk_hold h;
  int rc = dlock__zk_acquire(z, "orders", "alice", 0, NULL, &h);
  if (rc == 0) {
    ASSERT_OK(dlock__zk_release(z, &h));
    dlock__zk_hold_clear(&h);
  }
  char err[512];
  snprintf(err, sizeof err, "%s", rc ? dlock_last_error() : "");
  /* The path is closed now: the raw client may not create there. */
  int zrc = zoo_create(raw, "/adv6/orders/_c_00000000-0000-4000-8000-000000000002-lock-", "x", 1, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL_SEQUENTIAL, NULL, 0);
  zookeeper_close(raw);
  dlock__zk_free(z);
  if (rc != 0) TEST_FAIL("a try-acquire behind planted persistent nodes answered %d (%s)", rc, err);
  ASSERT_EQ(zrc, ZNOAUTH);
}

/* ---- Issue 22 item 2 (branch zkacl): "ZooKeeper ACLs are not applied to
 * dlock's nodes". Every node was created with an open ACL (world:anyone
 * cdrwa), even with ?digest=: a client with no credentials could lower a
 * guard (a stale token was then admitted), delete a holder's lock node (the
 * holder was not told) or create a child that sorts ahead in a lock's
 * queue. Each test FAILED on the code as reviewed (the raw client's delete,
 * setData or create succeeded). ---- */

/* The rights world:anyone has on 'path' (ZOO_PERM_*), or -1 with zrc. */
static int world_perms(zhandle_t *zh, const char *path, int *zrc) {
  struct ACL_vector acl;
  struct Stat st;
  *zrc = zoo_get_acl(zh, path, &acl, &st);
  if (*zrc != ZOK) return -1;
  int perms = 0;
  for (int i = 0; i < acl.count; i++)
    if (!strcmp(acl.data[i].id.scheme, "world") && !strcmp(acl.data[i].id.id, "anyone")) perms |= acl.data[i].perms;
  deallocate_ACL_vector(&acl);
  return perms;
}

/* The attacks on one node: delete it, write it, create a child of it (for a
 * lock path: a node that sorts ahead of every other), take its ACL. Each
 * must be refused: ZNOAUTH (ZNOTEMPTY would do for a delete, but the parent's
 * ACL is checked first). */
static int expect_closed(zhandle_t *zh, const char *path) {
  int zrc = zoo_set(zh, path, "1", 1, -1);
  /* An empty container (a semaphore's "locks", a lock path) may be reaped
   * by the server at any time (its container check): a node gone did not
   * let the attack in, and its checks stop there. */
  if (zrc == ZNONODE) return 0;
  if (zrc != ZNOAUTH) TEST_FAIL("an unauthenticated setData on %s answered %s, not ZNOAUTH", path, zerror(zrc));
  char child[1200];
  snprintf(child, sizeof child, "%s/_c_00000000-0000-4000-8000-000000000000-lock-0000000000", path);
  zrc = zoo_create(zh, child, "x", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
  if (zrc != ZNOAUTH && zrc != ZNOCHILDRENFOREPHEMERALS)
    TEST_FAIL("an unauthenticated create of %s answered %s, not ZNOAUTH", child, zerror(zrc));
  zrc = zoo_delete(zh, path, -1);
  if (zrc == ZOK) TEST_FAIL("an unauthenticated client deleted %s", path);
  zrc = zoo_set_acl(zh, path, -1, &ZOO_OPEN_ACL_UNSAFE);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZNOAUTH) TEST_FAIL("an unauthenticated setAcl on %s answered %s, not ZNOAUTH", path, zerror(zrc));
  int perms = world_perms(zh, path, &zrc);
  if (perms < 0 && zrc == ZNONODE) return 0;
  if (perms < 0) TEST_FAIL("getAcl %s: %s", path, zerror(zrc));
  if (perms & ~ZOO_PERM_READ) TEST_FAIL("%s grants world:anyone more than read (perms 0x%x)", path, (unsigned)perms);
  return 1;
}

/* expect_closed() on 'path' and every node below it; how many. */
static int expect_tree_closed(zhandle_t *zh, const char *path, int depth) {
  if (depth > 12) return 0;
  if (!expect_closed(zh, path)) return 0;
  struct String_vector v;
  int zrc = zoo_get_children(zh, path, 0, &v);
  if (zrc == ZNONODE) return 0; /* a container reaped meanwhile */
  if (zrc != ZOK) TEST_FAIL("list %s: %s", path, zerror(zrc));
  int n = 1;
  for (int i = 0; i < v.count; i++) {
    char child[1200];
    snprintf(child, sizeof child, "%s/%s", path, v.data[i]);
    n += expect_tree_closed(zh, child, depth + 1);
  }
  deallocate_String_vector(&v);
  return n;
}

/* ---- A mutex: its holder's node, its lock path, its queue ---- */

/* Issue 22 item 2 (branch zkacl): ZooKeeper ACLs on dlock's nodes. */
REVIEW_TEST(review_with_a_digest_an_unauthenticated_client_can_neither_delete_nor_write_nor_jump_a_mutex) {
  NEED_SERVER();
  dlock__zk *z1 = zk_connect(url_of("/acl1", DIGEST));
  dlock__zk *z2 = zk_connect(url_of("/acl1", DIGEST));
  zhandle_t *raw = raw_connect();
  dlock__zk_hold h1, h2;
  ASSERT_OK(dlock__zk_acquire(z1, "orders/eu", "alice-1", 0, NULL, &h1));

  /* The holder's node, the lock path and the namespace above it. */
  expect_closed(raw, h1.node_path);
  expect_closed(raw, "/acl1/orders/eu");
  expect_closed(raw, "/acl1/orders");
  expect_closed(raw, "/acl1");
  /* Nor a sequential node, which would queue (or, named so, sort first). */
  char node[600];
  int zrc = zoo_create(raw, "/acl1/orders/eu/_c_00000000-0000-4000-8000-000000000000-lock-", "x", 1,
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, node, (int)sizeof node);
  ASSERT_EQ(zrc, ZNOAUTH);

  /* The holder keeps its lock, and nothing jumped the queue. */
  ASSERT_EQ(dlock__zk_is_held(z1, &h1), 1);
  dlock__zk_info info;
  ASSERT_OK(dlock__zk_info_get(z1, "orders/eu", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.waiters, 0);
  ASSERT_STR_EQ(info.holder, strrchr(h1.node_path, '/') + 1);

  /* A second client with the same digest is the same identity: excluded
   * while z1 holds, and it gets the lock once z1 releases. */
  ASSERT_STATUS(dlock__zk_acquire(z2, "orders/eu", "alice-2", 0, NULL, &h2), DLOCK_EBUSY);
  uint64_t fence1 = h1.fence;
  ASSERT_OK(dlock__zk_release(z1, &h1));
  dlock__zk_hold_clear(&h1);
  ASSERT_OK(dlock__zk_acquire(z2, "orders/eu", "alice-2", 0, NULL, &h2));
  ASSERT(h2.fence > fence1);
  ASSERT_STATUS(dlock__zk_acquire(z1, "orders/eu", "alice-1", 0, NULL, &h1), DLOCK_EBUSY);
  expect_closed(raw, h2.node_path);
  /* The same identity may force-release (the operator's tool). */
  ASSERT_EQ(dlock__zk_force_release(z1, "orders/eu"), 1);
  ASSERT_EQ(dlock__zk_is_held(z2, &h2), 0);
  dlock__zk_hold_clear(&h2);
  ASSERT_OK(dlock__zk_acquire(z1, "orders/eu", "alice-1", 0, NULL, &h1));

  /* A dlock client without credentials may read (status) but not queue:
   * a clear error naming the path and what to give. */
  dlock__zk *anon = zk_connect(url_of("/acl1", NULL));
  ASSERT_OK(dlock__zk_info_get(anon, "orders/eu", &info));
  ASSERT_EQ(info.held, 1);
  dlock__zk_hold h3;
  ASSERT_STATUS(dlock__zk_acquire(anon, "orders/eu", NULL, 0, NULL, &h3), DLOCK_EAUTH);
  ASSERT_CONTAINS(dlock_last_error(), "/acl1/orders/eu");
  ASSERT_CONTAINS(dlock_last_error(), "digest");
  ASSERT_STATUS(dlock__zk_force_release(anon, "orders/eu"), DLOCK_EAUTH);
  ASSERT_EQ(dlock__zk_is_held(z1, &h1), 1);
  /* A digest that is not alice's is another identity: refused too. */
  dlock__zk *bob = zk_connect(url_of("/acl1", "digest=bob:other"));
  ASSERT_STATUS(dlock__zk_acquire(bob, "orders/eu", NULL, 0, NULL, &h3), DLOCK_EAUTH);
  ASSERT_STATUS(dlock__zk_force_release(bob, "orders/eu"), DLOCK_EAUTH);
  ASSERT_EQ(dlock__zk_is_held(z1, &h1), 1);
  ASSERT_OK(dlock__zk_release(z1, &h1));

  dlock__zk_hold_clear(&h1);
  dlock__zk_hold_clear(&h2);
  dlock__zk_free(bob);
  dlock__zk_free(anon);
  zookeeper_close(raw);
  dlock__zk_free(z2);
  dlock__zk_free(z1);
}

/* ---- The guard: no lowering by setData, nor by delete and create ---- */

/* Issue 22 item 2 (branch zkacl): ZooKeeper ACLs on dlock's nodes. */
REVIEW_TEST(review_with_a_digest_an_unauthenticated_client_cannot_lower_a_guard) {
  NEED_SERVER();
  dlock__zk *z = zk_connect(url_of("/acl2", DIGEST));
  zhandle_t *raw = raw_connect();
  ASSERT_OK(dlock__zk_guard_check(z, "ledger", 100, NULL));
  expect_closed(raw, "/acl2/_dlock_guard/ledger");
  expect_closed(raw, "/acl2/_dlock_guard");
  /* Nor a guard of its own making for a resource not checked yet. */
  ASSERT_EQ(zoo_create(raw, "/acl2/_dlock_guard/payments", "1", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0),
            ZNOAUTH);
  /* Still 100: a stale token is refused, the current one admitted. */
  ASSERT_STATUS(dlock__zk_guard_check(z, "ledger", 50, NULL), DLOCK_ESTALE);
  ASSERT_OK(dlock__zk_guard_check(z, "ledger", 100, NULL));
  char buf[32];
  int len = (int)sizeof buf - 1;
  ASSERT_EQ(zoo_get(raw, "/acl2/_dlock_guard/ledger", 0, buf, &len, NULL), ZOK); /* world may read */
  buf[len > 0 ? len : 0] = '\0';
  ASSERT_STR_EQ(buf, "100");
  zookeeper_close(raw);
  dlock__zk_free(z);
}

/* ---- Every other node: read-write lock, semaphore, scheduler ---- */

/* Issue 22 item 2 (branch zkacl): ZooKeeper ACLs on dlock's nodes. */
REVIEW_TEST(review_with_a_digest_every_node_dlock_creates_is_closed_to_unauthenticated_clients) {
  NEED_SERVER();
  dlock__zk *z = zk_connect(url_of("/acl3", DIGEST));
  zhandle_t *raw = raw_connect();
  dlock__zk_hold rd, sem, job;
  ASSERT_OK(dlock__zk_acquire_side(z, "rw", DLOCK__ZK_READ, "reader", 0, NULL, &rd));
  ASSERT_OK(dlock__zk_sem_acquire(z, "pool", 2, "permit", 0, NULL, &sem));
  uint64_t fence = 0;
  char by[128];
  int64_t tick = 1700000000000;
  ASSERT_EQ(dlock__zk_sched_claim(z, "nightly", tick, "run-1", "host-a", 0, 16, &fence, by, sizeof by), 1);
  ASSERT_OK(dlock__zk_job_lock_try(z, "nightly", "host-a", &job));
  dlock_run_record rec;
  dlock_run_record_init(&rec);
  snprintf(rec.node, sizeof rec.node, "host-a");
  snprintf(rec.outcome, sizeof rec.outcome, "ok");
  rec.fence = fence;
  rec.scheduled_unix_ms = tick;
  ASSERT_OK(dlock__zk_sched_finish(z, "nightly", &rec, 16));
  ASSERT_OK(dlock__zk_guard_check(z, "r", 7, NULL));

  /* /acl3, rw + its reader, pool + locks (empty once the permit is taken)
   * + leases + a lease, _dlock_sched + nightly + ticks + a tick + history +
   * a record + run + its node, _dlock_guard + r: 17 nodes, each closed;
   * 16 if the server has reaped the empty "locks" container meanwhile. */
  int n = expect_tree_closed(raw, "/acl3", 0);
  if (n < 16) TEST_FAIL("only %d nodes under /acl3", n);
  /* The scheduler's tick stays claimed (no second claim of it). */
  ASSERT_EQ(dlock__zk_sched_claim(z, "nightly", tick, "run-2", "host-b", 0, 16, &fence, by, sizeof by), 0);
  ASSERT_EQ(dlock__zk_is_held(z, &rd), 1);
  ASSERT_EQ(dlock__zk_is_held(z, &sem), 1);
  ASSERT_EQ(dlock__zk_is_held(z, &job), 1);
  ASSERT_OK(dlock__zk_release(z, &rd));
  ASSERT_OK(dlock__zk_release(z, &sem));
  ASSERT_OK(dlock__zk_release(z, &job));
  dlock__zk_hold_clear(&rd);
  dlock__zk_hold_clear(&sem);
  dlock__zk_hold_clear(&job);
  zookeeper_close(raw);
  dlock__zk_free(z);
}

/* ---- Paths left open by a dlock without credentials ----
 *
 * A lock path and a guard created by an earlier client without a digest
 * are open to everyone. A client with a digest that puts a node there
 * closes them (it may: world:anyone has admin rights on them), so that its
 * node cannot be deleted and the guard cannot be lowered. */

/* Issue 22 item 2 (branch zkacl): ZooKeeper ACLs on dlock's nodes. */
REVIEW_TEST(review_a_digest_client_closes_a_lock_path_and_a_guard_left_open_by_a_client_without_one) {
  NEED_SERVER();
  dlock__zk *anon = zk_connect(url_of("/acl4", NULL));
  dlock__zk *z = zk_connect(url_of("/acl4", DIGEST));
  zhandle_t *raw = raw_connect();
  int zrc;
  dlock__zk_hold ha, h;
  /* The client without credentials holds: the lock path is open. */
  ASSERT_OK(dlock__zk_acquire(anon, "legacy", "anon", 0, NULL, &ha));
  ASSERT_EQ(world_perms(raw, "/acl4/legacy", &zrc), ZOO_PERM_ALL);
  ASSERT_OK(dlock__zk_guard_check(anon, "g", 10, NULL));
  ASSERT_EQ(world_perms(raw, "/acl4/_dlock_guard/g", &zrc), ZOO_PERM_ALL);

  /* The digest client queues there (busy): that closes the path. */
  ASSERT_STATUS(dlock__zk_acquire(z, "legacy", "alice", 0, NULL, &h), DLOCK_EBUSY);
  ASSERT_EQ(world_perms(raw, "/acl4/legacy", &zrc), ZOO_PERM_READ);
  /* The client without credentials can no longer delete its node: its
   * release says why, and the node goes with its session. */
  ASSERT_STATUS(dlock__zk_release(anon, &ha), DLOCK_EAUTH);
  ASSERT_CONTAINS(dlock_last_error(), "digest");
  dlock__zk_hold_clear(&ha);
  dlock__zk_free(anon);
  ASSERT_OK(dlock__zk_acquire(z, "legacy", "alice", 30000L * th_time_factor(), NULL, &h));
  expect_closed(raw, h.node_path);
  expect_closed(raw, "/acl4/legacy");
  ASSERT_EQ(dlock__zk_is_held(z, &h), 1);

  /* The guard: checked with a digest, then closed; 10 stays the floor. */
  ASSERT_OK(dlock__zk_guard_check(z, "g", 20, NULL));
  expect_closed(raw, "/acl4/_dlock_guard/g");
  expect_closed(raw, "/acl4/_dlock_guard");
  ASSERT_STATUS(dlock__zk_guard_check(z, "g", 15, NULL), DLOCK_ESTALE);
  ASSERT_OK(dlock__zk_release(z, &h));
  dlock__zk_hold_clear(&h);
  zookeeper_close(raw);
  dlock__zk_free(z);
}

/* An open path we may not close (world:anyone may create, delete and
 * write, but not change the ACL): refused with DLOCK_EAUTH naming it and
 * what to do, and our node is not left there; a guard is not trusted. */
/* Issue 22 item 2 (branch zkacl): ZooKeeper ACLs on dlock's nodes. */
REVIEW_TEST(review_a_digest_client_refuses_an_open_lock_path_it_may_not_close) {
  NEED_SERVER();
  zhandle_t *raw = raw_connect();
  struct ACL open_no_admin[1];
  open_no_admin[0].perms = ZOO_PERM_ALL & ~ZOO_PERM_ADMIN;
  open_no_admin[0].id = ZOO_ANYONE_ID_UNSAFE;
  struct ACL_vector acl = {1, open_no_admin};
  ASSERT_EQ(zoo_create(raw, "/acl5", NULL, -1, &acl, ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_EQ(zoo_create(raw, "/acl5/stuck", NULL, -1, &acl, ZOO_PERSISTENT, NULL, 0), ZOK);
  dlock__zk *z = zk_connect(url_of("/acl5", DIGEST));
  dlock__zk_hold h;
  ASSERT_STATUS(dlock__zk_acquire(z, "stuck", NULL, 0, NULL, &h), DLOCK_EAUTH);
  ASSERT_CONTAINS(dlock_last_error(), "/acl5/stuck");
  ASSERT_CONTAINS(dlock_last_error(), "setAcl");
  ASSERT(!strstr(dlock_last_error(), "s3cret"));
  struct Stat st;
  ASSERT_EQ(zoo_exists(raw, "/acl5/stuck", 0, &st), ZOK);
  ASSERT_EQ(st.numChildren, 0);
  /* The same for a guard whose parent is open that way. */
  ASSERT_EQ(zoo_create(raw, "/acl5/_dlock_guard", NULL, -1, &acl, ZOO_PERSISTENT, NULL, 0), ZOK);
  ASSERT_STATUS(dlock__zk_guard_check(z, "ledger", 5, NULL), DLOCK_EAUTH);
  ASSERT_CONTAINS(dlock_last_error(), "/acl5/_dlock_guard");
  zookeeper_close(raw);
  dlock__zk_free(z);
}

TEST_MAIN()
