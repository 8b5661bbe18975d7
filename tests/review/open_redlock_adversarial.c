/*
 * open_redlock_adversarial.c - the adversarial review of the Redlock
 * promises after issue 22 (branch revrl): one test per finding, each failed
 * on the code as reviewed (main at 676c4f2). 5 real redis-server processes,
 * real faults (kill -9 + restart empty, SIGSTOP/SIGCONT), loopback only.
 *
 * The shared setup: A holds 'orders' (a fixed 30 s lease) on a bare majority,
 * nodes 1-3, because nodes 4 and 5 held a leftover foreign token at that
 * moment (a crashed earlier holder's, or a node-redlock peer's; 3 s lease).
 * That token expires; node 3 is then killed and restarted empty. Only ONE
 * node lost data, and A's lease has ~25 s left: docs/redlock.md promises that
 * the restarted node is held out of every client's quorum ("the restart
 * marker, for every client, also a new one"), so no one else may hold
 * 'orders' now. Classic Redlock's delayed restart is safe here (node 3 held
 * out: a newcomer gets nodes 4 and 5 only, 2 of 5).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

#define N 5

static th_redis srv[N];
static int started;

static void start_nodes(void) {
  if (th_redis_start_n(srv, N, NULL) != 0) TEST_SKIP("cannot start 5 redis-server processes");
  started = 1;
}

static void stop_nodes(void) {
  if (!started) return;
  for (int i = 0; i < N; i++)
    if (srv[i].pid > 0) kill(srv[i].pid, SIGCONT);
  th_redis_stop_n(srv, N);
  started = 0;
}

static dlock_client *new_client(const char *prefix, int cmd_timeout_ms) {
  char url[2048];
  th_redlock_url(srv, N, url, sizeof url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.key_prefix = prefix;
  o.command_timeout_ms = cmd_timeout_ms;
  o.connect_timeout_ms = cmd_timeout_ms;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

/* A holds 'key_name' (under 'prefix') on nodes 1-3 only; node 3 then restarts
 * empty. Returns A's mutex (held), or NULL after a TEST_FAIL-worthy setup
 * problem (message printed). */
static dlock_mutex *setup_a_on_bare_majority(dlock_client **ca, const char *prefix,
                                            const char *name, const char *full_key) {
  char out[256];
  for (int i = 3; i < 5; i++) {
    if (th_redis_cli(&srv[i], out, sizeof out, "SET '%s' foreignfeedfacefeedfacefeedface PX 3000", full_key) != 0)
      return NULL;
  }
  *ca = new_client(prefix, 2000);
  if (!*ca) return NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  dlock_mutex *a = NULL;
  if (dlock_mutex_new(&a, *ca, name, &mo) != 0) return NULL;
  int rc = dlock_mutex_acquire(a, 0);
  if (rc != 0) {
    fprintf(stderr, "  setup: A's acquire: %d %s\n", rc, dlock_mutex_errmsg(a));
    dlock_mutex_free(a);
    return NULL;
  }
  th_sleep_ms(3500); /* the foreign token on nodes 4 and 5 expires */
  for (int i = 3; i < 5; i++) {
    th_redis_cli(&srv[i], out, sizeof out, "EXISTS '%s'", full_key);
    if (strcmp(out, "0") != 0) fprintf(stderr, "  setup: node %d still has the key (%s)\n", i + 1, out);
  }
  if (th_redis_restart(&srv[2]) != 0) { dlock_mutex_free(a); return NULL; }
  th_sleep_ms(300);
  return a;
}

/*
 * Finding 1 (high): the restart marker is defeated when the nodes that have
 * it do not answer. "A node without the marker counts toward an early
 * decision only once every node answered" - but a node that never answers
 * (frozen, partitioned) is simply counted as failed, and then no answering
 * node shows the marker, the deployment looks fresh, and the node that
 * restarted empty counts at once. With A holding on nodes 1-3 (setup above),
 * node 3 restarted empty and nodes 1 and 2 frozen (SIGSTOP: no data lost
 * there), a new client B gets nodes 3, 4, 5 = a majority and holds 'orders'
 * while A's 30 s hold is still valid. One data loss, two paused nodes: two
 * holders. Expected: B is refused (node 3 not counted: it may have forgotten
 * a hold; nodes 1/2 unknown), at worst DLOCK_EQUORUM.
 */
TEST(a_restarted_node_counts_when_the_nodes_with_the_marker_are_frozen) {
  start_nodes();
  dlock_client *ca = NULL, *cb = NULL;
  dlock_mutex *a = setup_a_on_bare_majority(&ca, NULL, "orders", "orders");
  if (!a) { stop_nodes(); TEST_FAIL("setup: A could not take 'orders' on nodes 1-3"); }
  kill(srv[0].pid, SIGSTOP);
  kill(srv[1].pid, SIGSTOP);
  cb = new_client(NULL, 1000);
  int rc = -1;
  char msg[1024] = "";
  long long a_left = 0;
  if (cb) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 30000;
    dlock_mutex *b = NULL;
    dlock_mutex_new(&b, cb, "orders", &mo);
    rc = dlock_mutex_acquire(b, 0);
    snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(b) ? dlock_mutex_errmsg(b) : "");
    a_left = (long long)dlock_mutex_valid_until(a) - dlock_mono_now();
    if (rc == 0) fprintf(stderr, "  B holds with fence %llu while A (fence %llu) has %lld ms left\n",
                         (unsigned long long)dlock_mutex_fence(b), (unsigned long long)dlock_mutex_fence(a), a_left);
    dlock_mutex_free(b);
  }
  kill(srv[0].pid, SIGCONT);
  kill(srv[1].pid, SIGCONT);
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (cb) dlock_client_free(cb);
  stop_nodes();
  if (!cb) TEST_FAIL("client B could not start");
  if (rc == 0 && a_left > 0)
    TEST_FAIL("B acquired 'orders' while A still held it (%lld ms left): node 3 restarted empty "
              "was counted because nodes 1-2 with the marker were frozen", a_left);
  printf("  B: rc %d (%s)\n", rc, msg);
}

/*
 * Finding 2 (medium): the marker is per key prefix, the lock keys are not.
 * docs/keys.md: prefixes nest like directories, a client without a prefix
 * is the root and reaches every lock by its full key, so the lock 'orders'
 * of a client with the prefix "app:" is the lock 'app:orders' of a client
 * without one: the same Redis key, the same lock. But the marker is
 * "<key prefix>dlock:redlock:marker", so A's acquire recorded
 * app:dlock:redlock:marker, and the root client B looks for
 * dlock:redlock:marker, finds it nowhere, sees "a fresh deployment" and
 * counts node 3 (restarted empty) at once: B gets nodes 3, 4, 5 and holds
 * the key A holds. No node is frozen here: one data loss is enough.
 */
TEST(a_restarted_node_counts_for_a_client_with_another_prefix_on_the_same_key) {
  start_nodes();
  dlock_client *ca = NULL, *cb = NULL;
  dlock_mutex *a = setup_a_on_bare_majority(&ca, "app:", "orders", "app:orders");
  if (!a) { stop_nodes(); TEST_FAIL("setup: A could not take 'app:orders' on nodes 1-3"); }
  cb = new_client(NULL, 2000);
  int rc = -1;
  char msg[1024] = "";
  long long a_left = 0;
  if (cb) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 30000;
    dlock_mutex *b = NULL;
    dlock_mutex_new(&b, cb, "app:orders", &mo);
    rc = dlock_mutex_acquire(b, 0);
    snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(b) ? dlock_mutex_errmsg(b) : "");
    a_left = (long long)dlock_mutex_valid_until(a) - dlock_mono_now();
    if (rc == 0) fprintf(stderr, "  B holds with fence %llu while A (fence %llu) has %lld ms left\n",
                         (unsigned long long)dlock_mutex_fence(b), (unsigned long long)dlock_mutex_fence(a), a_left);
    dlock_mutex_free(b);
  }
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (cb) dlock_client_free(cb);
  stop_nodes();
  if (!cb) TEST_FAIL("client B could not start");
  if (rc == 0 && a_left > 0)
    TEST_FAIL("B (no prefix) acquired 'app:orders' while A (prefix app:) held it (%lld ms left): "
              "the marker is per prefix, the key is not", a_left);
  printf("  B: rc %d (%s)\n", rc, msg);
}

/*
 * Finding 3 (high): the marker is laundered onto the node that lost it. A
 * successful acquire records the marker on each node that took it and
 * counts; while nodes 1 and 2 (which have the marker) are briefly frozen,
 * any client's acquire of ANY other name sees "a fresh deployment" (finding
 * 1), succeeds on nodes 3, 4, 5 and writes the marker onto node 3, which
 * restarted empty and forgot A's hold. From then on node 3 looks like a node
 * that kept its data, for every client, with every node healthy: after nodes
 * 1 and 2 resume, a new client C gets 'orders' on nodes 3, 4, 5 while A's
 * hold (nodes 1-3) is still valid. The pause is over before C's acquire; C
 * itself sees every node answer.
 */
TEST(the_marker_is_written_onto_the_emptied_node_by_another_lock_and_then_it_counts) {
  start_nodes();
  dlock_client *ca = NULL, *cb = NULL, *cc = NULL;
  dlock_mutex *a = setup_a_on_bare_majority(&ca, NULL, "orders", "orders");
  if (!a) { stop_nodes(); TEST_FAIL("setup: A could not take 'orders' on nodes 1-3"); }
  kill(srv[0].pid, SIGSTOP);
  kill(srv[1].pid, SIGSTOP);
  int rb = -1, rc = -1;
  char msg[1024] = "", marker3[256] = "";
  long long a_left = 0;
  cb = new_client(NULL, 1000);
  if (cb) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 5000;
    dlock_mutex *b = NULL;
    dlock_mutex_new(&b, cb, "reports", &mo);
    rb = dlock_mutex_acquire(b, 0);
    if (rb == 0) dlock_mutex_release(b);
    dlock_mutex_free(b);
    dlock_client_free(cb);
  }
  kill(srv[0].pid, SIGCONT);
  kill(srv[1].pid, SIGCONT);
  th_sleep_ms(500);
  th_redis_cli(&srv[2], marker3, sizeof marker3, "EXISTS dlock:redlock:marker");
  cc = new_client(NULL, 2000);
  if (cc) {
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 30000;
    dlock_mutex *m = NULL;
    dlock_mutex_new(&m, cc, "orders", &mo);
    rc = dlock_mutex_acquire(m, 0);
    snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(m) ? dlock_mutex_errmsg(m) : "");
    a_left = (long long)dlock_mutex_valid_until(a) - dlock_mono_now();
    if (rc == 0) fprintf(stderr, "  C holds with fence %llu while A (fence %llu) has %lld ms left\n",
                         (unsigned long long)dlock_mutex_fence(m), (unsigned long long)dlock_mutex_fence(a), a_left);
    dlock_mutex_free(m);
  }
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (cc) dlock_client_free(cc);
  stop_nodes();
  printf("  B's acquire of 'reports' with nodes 1-2 frozen: %d; node 3 has the marker after: %s\n", rb, marker3);
  if (!cc) TEST_FAIL("client C could not start");
  if (rc == 0 && a_left > 0)
    TEST_FAIL("C acquired 'orders' with every node up while A still held it (%lld ms left): "
              "B's acquire of another lock wrote the marker onto the emptied node 3", a_left);
  printf("  C: rc %d (%s)\n", rc, msg);
}

/*
 * Finding 4 (high): fences go backwards between holds that do not overlap,
 * with one node of five losing its data. docs/redlock.md, "Fences across the
 * quorum", guarantees strictly increasing fences "also when up to a minority
 * of the nodes lost their data between the holds", arguing that the next
 * majority shares a node with the one that stored F, and that a node that
 * lost its counter restarts from its clock "above any fence it issued". But
 * the shared node may be the one that lost its data, and F was not issued
 * by it: it is the write-back of the highest counter of A's majority, here
 * node 1's, whose clock ran an hour ahead (simulated by its counter; the
 * docs do not ask for synchronised clocks). A holds 'orders' (3 s lease) on
 * nodes 1-3 (4 and 5 held a leftover foreign token then), F is written back
 * to nodes 1-3 only, A releases. Node 3 restarts empty and, once up longer
 * than the longest lease, counts again (as documented). Nodes 1 and 2 are
 * then unreachable (SIGSTOP; 2 of 5 down is within what Redlock survives;
 * they lose nothing). B's majority is nodes 3, 4, 5, none of which knows F:
 * B's fence is below A's. A late write of A's is then not refused by
 * fence checks where the data lives (WHERE fence < token).
 */
TEST(fences_go_backwards_after_one_node_loses_its_data_and_two_are_unreachable) {
  start_nodes();
  char out[256];
  struct timeval tv;
  gettimeofday(&tv, NULL);
  unsigned long long ahead = ((unsigned long long)tv.tv_sec + 3600ULL) * 1000000ULL;
  th_redis_cli(&srv[0], out, sizeof out, "SET '{orders}:fence' %llu", ahead);
  for (int i = 3; i < 5; i++)
    th_redis_cli(&srv[i], out, sizeof out, "SET orders foreignfeedfacefeedfacefeedface PX 2500");
  dlock_client *ca = new_client(NULL, 2000), *cb = NULL;
  if (!ca) { stop_nodes(); TEST_FAIL("client A could not start"); }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 3000;
  dlock_mutex *a = NULL;
  dlock_mutex_new(&a, ca, "orders", &mo);
  int ra = dlock_mutex_acquire(a, 0);
  unsigned long long fa = dlock_mutex_fence(a);
  if (ra == 0) dlock_mutex_release(a);
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (ra != 0) { stop_nodes(); TEST_FAIL("setup: A's acquire failed: %d", ra); }
  if (th_redis_restart(&srv[2]) != 0) { stop_nodes(); TEST_FAIL("cannot restart node 3"); }
  th_sleep_ms(5000); /* node 3 up longer than the longest lease (3 s); the foreign token is gone */
  kill(srv[0].pid, SIGSTOP);
  kill(srv[1].pid, SIGSTOP);
  int rb = -1;
  unsigned long long fb = 0;
  char msg[1024] = "";
  cb = new_client(NULL, 1000);
  if (cb) {
    dlock_mutex *b = NULL;
    dlock_mutex_new(&b, cb, "orders", &mo);
    rb = dlock_mutex_acquire(b, 0);
    fb = dlock_mutex_fence(b);
    snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(b) ? dlock_mutex_errmsg(b) : "");
    if (rb == 0) dlock_mutex_release(b);
    dlock_mutex_free(b);
    dlock_client_free(cb);
  }
  kill(srv[0].pid, SIGCONT);
  kill(srv[1].pid, SIGCONT);
  stop_nodes();
  printf("  A's fence %llu; B: rc %d fence %llu (%s)\n", fa, rb, fb, msg);
  if (rb == 0 && fb <= fa)
    TEST_FAIL("B's hold after A's has a lower fence: %llu <= %llu", fb, fa);
}

/*
 * Finding 5 (medium): a node emptied by FLUSHALL (or FLUSHDB, or a node
 * replaced by an empty one that was started long ago) is counted at once.
 * docs/redlock.md names FLUSHALL among the losses the marker detects ("a
 * node without it lost its data (a restart without persistence, FLUSHALL,
 * a node replaced by an empty one)"), but it holds such a node out only
 * while its uptime is below the longest lease, and FLUSHALL does not reset
 * the uptime. Nodes up 10 s, A holds 'orders' with an 8 s lease on nodes
 * 1-3 (4 and 5 held a leftover foreign token), node 3 is flushed: a new
 * client B is told node 3 has no marker, yet counts it (up 10 s > 8 s) and
 * holds 'orders' on nodes 3, 4, 5 while A's hold is valid.
 */
TEST(a_node_emptied_by_flushall_counts_at_once_when_up_longer_than_the_lease) {
  start_nodes();
  char out[256];
  th_sleep_ms(10000);
  for (int i = 3; i < 5; i++)
    th_redis_cli(&srv[i], out, sizeof out, "SET orders foreignfeedfacefeedfacefeedface PX 1000");
  dlock_client *ca = new_client(NULL, 2000), *cb = NULL;
  if (!ca) { stop_nodes(); TEST_FAIL("client A could not start"); }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 8000;
  dlock_mutex *a = NULL;
  dlock_mutex_new(&a, ca, "orders", &mo);
  int ra = dlock_mutex_acquire(a, 0);
  if (ra != 0) { dlock_mutex_free(a); dlock_client_free(ca); stop_nodes(); TEST_FAIL("setup: A's acquire failed: %d", ra); }
  th_sleep_ms(1200); /* the foreign token expires */
  th_redis_cli(&srv[2], out, sizeof out, "FLUSHALL");
  int rb = -1;
  char msg[1024] = "";
  long long a_left = 0;
  cb = new_client(NULL, 2000);
  if (cb) {
    dlock_mutex *b = NULL;
    dlock_mutex_new(&b, cb, "orders", &mo);
    rb = dlock_mutex_acquire(b, 0);
    snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(b) ? dlock_mutex_errmsg(b) : "");
    a_left = (long long)dlock_mutex_valid_until(a) - dlock_mono_now();
    dlock_mutex_free(b);
    dlock_client_free(cb);
  }
  dlock_mutex_free(a);
  dlock_client_free(ca);
  stop_nodes();
  printf("  B: rc %d, A has %lld ms left (%s)\n", rb, a_left, msg);
  if (rb == 0 && a_left > 0)
    TEST_FAIL("B acquired 'orders' while A still held it (%lld ms left): node 3, flushed, counted "
              "because its uptime exceeds the lease", a_left);
}

TEST_MAIN()
