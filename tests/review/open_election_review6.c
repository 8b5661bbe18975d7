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
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = zk_url;
  if (dlock_client_new(&c, &co) != 0) {
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

TEST_MAIN()

#else

TEST(zookeeper_is_not_built) { TEST_SKIP("built without ZooKeeper"); }

TEST_MAIN()

#endif
