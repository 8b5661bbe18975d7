/*
 * open_election_review6.c - sixth review round, leader election (the
 * Curator LeaderLatch layout on ZooKeeper, the epoch-checked eviction):
 * open findings; each test FAILS on the code it was written against.
 *
 * Run: cmake -S . -B build/plain -DDLOCK_OPEN_FINDINGS=ON && cmake --build
 * build/plain -j2 && (cd build/plain && ctest -R open/open_election_review6
 * --output-on-failure)
 *
 * One standalone ZooKeeper (tick 200 ms) shared by the tests; a Curator
 * LeaderLatch participant written here (LatchWatch below, compiled with
 * javac by th_curator_build) that prints each change of
 * LeaderLatch.hasLeadership() as it polls it every 50 ms.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"
#include "../harness_zk.h"
#include "../test.h"

#ifdef DLOCK_TEST_HAVE_ZK

static th_zk zk;
static int zk_up;
static char zk_url[256];
static char java_dir[128];
static char java_src[256];

/* A LeaderLatch participant: "STARTED" once its node exists, then
 * "LEADER"/"NOTLEADER" at each change of hasLeadership() (polled every
 * 50 ms) for SECONDS, then "END LEADER" or "END NOTLEADER", close, exit 0.
 * args: CONNECT PATH watch ID:SECONDS. The class is named CuratorLock for
 * th_curator_spawn. */
static const char latch_src[] =
    "import java.util.concurrent.TimeUnit;\n"
    "import org.apache.curator.framework.CuratorFramework;\n"
    "import org.apache.curator.framework.CuratorFrameworkFactory;\n"
    "import org.apache.curator.framework.recipes.leader.LeaderLatch;\n"
    "import org.apache.curator.retry.RetryOneTime;\n"
    "public class CuratorLock {\n"
    "  public static void main(String[] a) throws Exception {\n"
    "    String id = a[3].substring(0, a[3].lastIndexOf(':'));\n"
    "    double secs = Double.parseDouble(a[3].substring(a[3].lastIndexOf(':') + 1));\n"
    "    CuratorFramework c = CuratorFrameworkFactory.builder().connectString(a[0]).sessionTimeoutMs(4000)\n"
    "        .connectionTimeoutMs(5000).retryPolicy(new RetryOneTime(200)).build();\n"
    "    c.start();\n"
    "    if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) { System.out.println(\"NOCONNECT\"); System.exit(2); }\n"
    "    LeaderLatch l = new LeaderLatch(c, a[1], id);\n"
    "    l.start();\n"
    "    for (int i = 0; i < 3000 && l.getOurPath() == null; i++) Thread.sleep(10);\n"
    "    System.out.println(\"STARTED\");\n"
    "    System.out.flush();\n"
    "    boolean was = false;\n"
    "    long end = System.currentTimeMillis() + (long) (secs * 1000);\n"
    "    while (System.currentTimeMillis() < end) {\n"
    "      boolean h = l.hasLeadership();\n"
    "      if (h != was) { System.out.println(h ? \"LEADER\" : \"NOTLEADER\"); System.out.flush(); was = h; }\n"
    "      Thread.sleep(50);\n"
    "    }\n"
    "    System.out.println(was ? \"END LEADER\" : \"END NOTLEADER\");\n"
    "    System.out.flush();\n"
    "    l.close();\n"
    "    c.close();\n"
    "    System.exit(0);\n"
    "  }\n"
    "}\n";

static void remove_java_dir(void) {
  if (java_src[0]) unlink(java_src);
  if (java_dir[0]) rmdir(java_dir);
  java_src[0] = java_dir[0] = '\0';
}

void test_setup(void) {}

void test_teardown(void) {
  if (zk_up) th_zk_stop(&zk);
  zk_up = 0;
  remove_java_dir();
}

/* The shared server and the compiled participant, or TEST_SKIP. */
static void need_zk_and_curator(void) {
  char why[512];
  if (!zk_up) {
    if (!th_zk_suite_start(&zk, 200, why, sizeof why)) TEST_SKIP("%s", why);
    zk_up = 1;
    snprintf(zk_url, sizeof zk_url, "zk://%s?session_timeout=4s", zk.hostport);
  }
  if (!java_dir[0]) {
    snprintf(java_dir, sizeof java_dir, "/tmp/rev6el-java-XXXXXX");
    if (!mkdtemp(java_dir)) {
      java_dir[0] = '\0';
      TEST_FAIL("mkdtemp: %s", strerror(errno));
    }
    snprintf(java_src, sizeof java_src, "%s/CuratorLock.java", java_dir);
    FILE *f = fopen(java_src, "w");
    if (!f) TEST_FAIL("cannot write %s", java_src);
    fputs(latch_src, f);
    fclose(f);
    if (th_curator_build(java_src, why, sizeof why) != 0) TEST_SKIP("%s", why);
  }
}

/* A client of the shared server (th_client_retry sets Redis timeouts,
 * which a zk:// URL refuses). */
static dlock_client *zk_client(void) {
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = zk_url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &co) == 0 ? c : NULL;
}

/* Read lines from the participant until one starts with 'want' (within
 * 'ms'); 0 found, -1 not (the last line read in 'last'). */
static int await_line(int fd, const char *want, long ms, char *last, size_t len) {
  long long end = th_now_ms() + ms;
  last[0] = '\0';
  for (int i = 0; i < 200 && th_now_ms() < end; i++) {
    char line[256];
    if (th_read_line(fd, line, sizeof line, end - th_now_ms()) != 0) return -1;
    snprintf(last, len, "%s", line);
    if (!strncmp(line, want, strlen(want))) return 0;
  }
  return -1;
}

static void stop_child(pid_t *pid, int *fd) {
  if (*pid > 0) {
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
  }
  *pid = 0;
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/*
 * Finding 1 (high): evicting a Curator leader leaves it leading while a
 * dlock candidate leads too.
 *
 * Promise (docs/election.md, "ZooKeeper: one election with Curator's
 * LeaderLatch"): "A dlock candidate never leads while a Curator one does,
 * and the other way round"; and (the lock's admin) "`dlock elect --evict
 * NAME` (and `--resign`) forces out the term it read, by its epoch ... Its
 * process learns it at its next renewal and stops." The eviction is offered
 * on ZooKeeper for "the leader's node, if its czxid is the epoch", whoever's
 * node it is ("The epoch is the czxid of the leader's node, whoever's node it
 * is").
 *
 * Attack: a Curator LeaderLatch participant leads; a dlock candidate waits
 * behind it; `dlock elect --evict NAME` (the CLI, epoch read from the
 * server) deletes the Curator leader's node; the dlock candidate leads.
 *
 * What happens: LeaderLatch sets a watch only on the node ahead of it; the
 * first node (the leader) watches nothing, so the deletion of its own node
 * is never seen: LeaderLatch.hasLeadership() stays true for good (until its
 * session is lost) while the dlock candidate leads. The eviction answered
 * "evicted", the dlock candidate was elected, and the Curator participant
 * still says LEADER seconds later (its session is alive, 4 s timeout): two
 * leaders. The same with `dlock release --force NAME` and `dlock elect
 * --resign NAME --value <the Curator id>`.
 */
TEST(evicting_a_curator_leader_leaves_it_leading_beside_the_dlock_leader) {
  need_zk_and_curator();
  char name[64];
  snprintf(name, sizeof name, "rev6el-evict-curator-%d", (int)getpid());
  char path[80];
  snprintf(path, sizeof path, "/%s", name);
  int fd = -1;
  pid_t cur = th_curator_spawn(&fd, zk.hostport, path, "watch", "curator-1:25");
  ASSERT(cur > 0);
  char last[256];
  dlock_client *c = NULL;
  dlock_election *e = NULL;
  if (await_line(fd, "STARTED", 30000, last, sizeof last) || await_line(fd, "LEADER", 15000, last, sizeof last)) {
    stop_child(&cur, &fd);
    TEST_FAIL("the Curator participant did not lead (last line '%s')", last);
  }
  if (!(c = zk_client())) {
    stop_child(&cur, &fd);
    TEST_FAIL("connect %s: %s", zk_url, dlock_last_error());
  }
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = 3000;
  int rc = dlock_election_new(&e, c, name, &o);
  if (rc == 0) rc = dlock_election_campaign(e, "dlock-1", 300);
  if (rc != DLOCK_EBUSY) {
    stop_child(&cur, &fd);
    dlock_election_free(e);
    dlock_client_free(c);
    TEST_FAIL("the dlock candidate should wait behind the Curator leader: %d %s", rc, dlock_last_error());
  }
  /* The admin evicts the leader it sees, with the command line. */
  char cmd[1024], out[1024] = "";
  snprintf(cmd, sizeof cmd, "'%s' elect --evict '%s' --url '%s' 2>&1", DLOCK_BIN_PATH, name, zk_url);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = '\0';
  int st = p ? pclose(p) : -1;
  fprintf(stderr, "  dlock elect --evict: exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  rc = dlock_election_campaign(e, "dlock-1", 10000);
  if (rc != 0) {
    stop_child(&cur, &fd);
    dlock_election_free(e);
    dlock_client_free(c);
    TEST_FAIL("the dlock candidate was not elected after the eviction: %s", dlock_last_error());
  }
  long long elected_at = th_now_ms();
  uint64_t epoch = dlock_election_epoch(e);
  /* The Curator participant must stop leading; wait up to 8 s (twice its
   * session timeout). */
  int saw = await_line(fd, "NOTLEADER", 8000, last, sizeof last);
  long long waited = th_now_ms() - elected_at;
  dlock_lost_reason lost = dlock_election_lost(e);
  stop_child(&cur, &fd);
  dlock_election_resign(e);
  dlock_election_free(e);
  dlock_client_free(c);
  if (saw != 0)
    TEST_FAIL("two leaders: the dlock candidate leads (epoch %llu, lost=%d) and the evicted Curator participant "
              "still says it leads %lld ms later (last line '%s')",
              (unsigned long long)epoch, (int)lost, waited, last[0] ? last : "LEADER");
}

/* A candidate that resigns and stands again, 'terms' times (bounded in
 * time), with a pause between so that the name is often free. */
typedef struct churn {
  const char *name;
  int terms;
  int done, failed;
  char err[512];
} churn;

static void *churn_main(void *arg) {
  churn *ch = arg;
  dlock_client *c = zk_client();
  dlock_election *e = NULL;
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = 3000;
  if (!c || dlock_election_new(&e, c, ch->name, &o) != 0) {
    snprintf(ch->err, sizeof ch->err, "%s", dlock_last_error());
    ch->failed = 1;
  }
  long long end = th_now_ms() + 20000;
  for (int i = 0; !ch->failed && i < ch->terms && th_now_ms() < end; i++) {
    if (dlock_election_campaign(e, "churn", 5000) != 0) {
      snprintf(ch->err, sizeof ch->err, "campaign: %s", dlock_last_error());
      ch->failed = 1;
      break;
    }
    th_sleep_ms(2);
    dlock_election_resign(e);
    th_sleep_ms(3);
  }
  dlock_election_free(e);
  if (c) dlock_client_free(c);
  __atomic_store_n(&ch->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/*
 * Finding 2 (medium): on ZooKeeper, `dlock leader NAME` (dlock_election_leader,
 * so also the observer and `--am-i`) and `dlock elect --evict` fail with
 * DLOCK_EWRONGTYPE "lock path ... is held as an election (Curator's
 * LeaderLatch layout) ..., not as a mutex" when a candidate stands just as
 * the name was free.
 *
 * Promise (docs/election.md): "`dlock leader NAME` exits 0 when someone
 * leads (and prints who), 3 when no one does"; who leads is
 * "`dlock_lock_info_get`, read from the server every time"; an eviction
 * "ends only the term it read (its epoch): when a new term began in
 * between, that leader is left alone and the command says so, exit 1".
 *
 * Attack: one candidate resigns and stands again (a term of 2 ms, 3 ms
 * free between) while another client asks who leads in a loop (and, in the
 * race program of the review, evicts by the old epoch).
 *
 * What happens: src/zk/lock.c path_kind() lists the name's children once to
 * pick the kind; an empty list (no candidate at that moment) is taken as a
 * mutex's; queue_info()/queue_force() then list again, find the new
 * candidate's "latch-" node and refuse it as another kind's: EWRONGTYPE,
 * "pick another election name" for the election itself. The reader gets an
 * error instead of "no leader" or the new leader (`dlock leader` exits with
 * an error, a health check with --am-i fails), and the eviction fails with
 * the same wrong message instead of "a new term began". By the code, the
 * same race answers EWRONGTYPE to `dlock release --force NAME` and to
 * `dlock status` of a read-write lock or a semaphore whose name is free for
 * a moment (path_kind's default is a mutex's).
 */
TEST(asking_who_leads_during_a_hand_over_on_zookeeper_is_refused_as_another_kind_of_lock) {
  need_zk_and_curator();
  char name[64];
  snprintf(name, sizeof name, "rev6el-kind-race-%d", (int)getpid());
  churn ch = {.name = name, .terms = 2000};
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, churn_main, &ch) == 0);
  dlock_client *c = zk_client();
  int asks = 0, wrongtype = 0, other = 0, leaders = 0, none = 0;
  char first[1024] = "";
  long long end = th_now_ms() + 15000;
  for (int i = 0; c && i < 20000 && th_now_ms() < end && !__atomic_load_n(&ch.done, __ATOMIC_SEQ_CST); i++) {
    dlock_leader l;
    dlock_leader_init(&l);
    int rc = dlock_election_leader(c, name, &l);
    asks++;
    if (rc == DLOCK_EWRONGTYPE) {
      if (!wrongtype++) snprintf(first, sizeof first, "%s", dlock_last_error());
    } else if (rc) {
      if (!other++ && !first[0]) snprintf(first, sizeof first, "%s", dlock_last_error());
    } else if (l.has_leader) {
      leaders++;
    } else {
      none++;
    }
    if (wrongtype >= 3) break;
  }
  __atomic_store_n(&ch.terms, 0, __ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  if (c) dlock_client_free(c);
  fprintf(stderr, "  %d asks: %d leader, %d none, %d EWRONGTYPE, %d other errors\n", asks, leaders, none, wrongtype,
          other);
  if (ch.failed) TEST_FAIL("the churning candidate failed: %s", ch.err);
  if (wrongtype || other)
    TEST_FAIL("who leads election '%s' failed %d times during hand-overs (%d EWRONGTYPE); first: %s", name,
              wrongtype + other, wrongtype, first);
}

TEST_MAIN()

#else

TEST(zookeeper_is_not_built) { TEST_SKIP("built without ZooKeeper"); }

TEST_MAIN()

#endif
