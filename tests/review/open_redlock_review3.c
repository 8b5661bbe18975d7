/*
 * open_redlock_review3.c - the third adversarial review of Redlock
 * (docs/redlock.md), branch rev3rl: one TEST per finding, each FAILING on
 * the code as reviewed (main at fd2d0a8). Five real redis-servers
 * (harness.h), SIGSTOP, kill -9, FLUSHALL; public API only. Built and run
 * only with -DDLOCK_OPEN_FINDINGS=ON (ctest -R open/open_redlock_review3).
 *
 * Findings (each test's comment quotes the promise):
 *  1. one_server_under_its_ipv4_mapped_name_is_refused (low): 127.0.0.1:P
 *     and [::ffff:127.0.0.1]:P, one server, are accepted as two nodes
 *     (shares_address compares AF_INET with AF_INET6 never); with the third
 *     node frozen, one server makes the majority.
 *  2. a_renewal_takes_the_absent_nodes_also_when_a_held_node_is_frozen
 *     (medium, availability): the newest fix (seed_absent) runs only after
 *     the renewal's poll ends, and extend_decided() waits for a frozen node
 *     while the absent nodes could make the majority: the poll ends at the
 *     hold's deadline and the hold is lost with 4 of 5 nodes up.
 *  3. a_node_that_kept_its_marker_but_answers_busy_keeps_the_deployment_
 *     from_looking_new (high, safety: two holders): judge_markers() counts
 *     an error reply to the marker read (-BUSY here) as an answer without
 *     a marker, so with four nodes flushed and the fifth (which kept its
 *     marker and the holder's key) busy, the deployment looks new and a
 *     second client takes the lock on the flushed four while the first
 *     holder's 20 s lease has 18 s to run.
 *  4. a_contenders_partial_attempt_does_not_end_the_hold_when_a_held_node_
 *     restarted (medium, availability): in the newest fix's scenario, a
 *     contender's partial attempt on the two free nodes at renewal time
 *     ends the hold at once as DLOCK_LOST_TAKEN ("another owner holds the
 *     lock now"): the restarted node's "key gone" counts as a final no,
 *     neither confirmed nor failed; no one holds the lock and 4 of 5 nodes
 *     are up (1 of 3 runs with four real contender processes; the test
 *     leaves the contender's token for 1.5 s and fails every run).
 *
 * Attacks that held (no finding):
 *  - The renewal's taking of absent nodes (seed_absent, rl_extend.lua 3)
 *    read for two majorities: it runs only before the local deadline and
 *    counts only replies that came before it; the keys that confirmed the
 *    previous renewal live past that deadline, so a majority of ours is
 *    alive whenever a node is taken; a node emptied since our last look
 *    answers 2 (quarantine written), not 3 (read; finding 4's and 2's
 *    runs exercise it). Read, not run: a late seed reaching a frozen node
 *    when it resumes leaves a ghost token on a minority only; an explicit
 *    dlock_mutex_extend passes no limit (INT64_MAX), so its taking may run
 *    after the hold's deadline, but the extend is then answered "lost
 *    before the reply came" and the release removes the token.
 *  - Fences after a renewal-taken node (no hold record, counter not raised
 *    to F): a later majority meets a node of the acquire's majority that
 *    stored F unless more nodes lost their data than "Fences across the
 *    quorum" allows; on one machine the clock floor carries it anyway.
 *  - Release vs renewal: release_begin stops the watchdog and waits for a
 *    renewal in flight before the release is sent (no seed after it).
 *  - Release once decided (delete_decided): decided only when the nodes
 *    that may still hold our key cannot make a majority.
 *  - The same as finding 3 with node 5 restarted WITH its data (appendonly,
 *    appendfsync always, key-load-delay) and answering -LOADING to a new
 *    client: held, the connection's PING fails there, so not every node
 *    "answered" (only an error on a connection already open is counted
 *    as an answer).
 *  - One server as redis://127.0.0.1:P and unix:///.../redis.sock in
 *    redlock_urls: refused (a unix:// entry is not accepted there).
 *    Not tried: a server's plain and TLS ports as two nodes (different
 *    ports, outside the documented "names that resolve to one address";
 *    comparing the run_id each node's INFO reports at connect would refuse
 *    every form of the same server, finding 1 included).
 *  - Chaos with a history check (build/rv3chaos.c in this worktree, not
 *    committed: it passed): 5 processes, watchdog leases 0.8-4 s, a new
 *    client in a third of the rounds, one hold in five ended by _exit()
 *    while held (its keys stay), node 1 never faulted, nodes 2-5 restarted
 *    empty (kill -9), FLUSHALLed and frozen 0.8-3.8 s (at most two frozen
 *    at once); each holder appends "in, last moment believed valid, fence"
 *    to an O_APPEND file; 7 runs of 30-45 s (4 with the crashes), 13-28
 *    holds each (the quarantines keep the lock unavailable much of the
 *    time): no overlap of holds believed valid, fences strictly rising.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

#define N 5
static th_redis srv[N];
static char url[1024];
static int frozen[N];

void test_setup(void) {
  if (th_redis_start_n(srv, N, NULL) != 0) {
    fprintf(stderr, "cannot start %d redis-servers\n", N);
    exit(1);
  }
  th_redlock_url(srv, N, url, sizeof url);
}

void test_teardown(void) {
  for (int i = 0; i < N; i++)
    if (srv[i].pid > 0) kill(srv[i].pid, SIGCONT);
  th_redis_stop_n(srv, N);
}

static void thaw_all(void) {
  for (int i = 0; i < N; i++) {
    if (srv[i].pid > 0) kill(srv[i].pid, SIGCONT);
    frozen[i] = 0;
  }
}

static dlock_client *client_of(const char *u, int cmd_ms) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = u;
  o.connect_timeout_ms = cmd_ms;
  o.command_timeout_ms = cmd_ms;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

/* ---- Finding: one server under an IPv4-mapped IPv6 name ---- */

/*
 * Promise (docs/redlock.md, "Nodes and URLs"): "a node listed twice is
 * refused, also under two names that resolve to one address
 * (`127.0.0.1:6379` and `localhost:6379`) when the client is created."
 * Attack: list node 1 as 127.0.0.1:P1 and as [::ffff:127.0.0.1]:P1 (the
 * IPv4-mapped IPv6 form of the same address; a connect to it reaches the
 * same IPv4 listener).
 * What happened: the client is created; both entries count as separate
 * nodes, so one server makes 2 of the 3 votes: with node 2 and node 3 down,
 * a lock is acquired on one server, a "majority" of a 3-node Redlock.
 */
TEST(one_server_under_its_ipv4_mapped_name_is_refused) {
  char u[512];
  snprintf(u, sizeof u, "redlock://127.0.0.1:%d,[::ffff:127.0.0.1]:%d,127.0.0.1:%d", srv[0].port, srv[0].port,
           srv[1].port);
  dlock_client *c = client_of(u, 1000);
  if (!c) {
    printf("  refused: %s\n", dlock_last_error());
    return;
  }
  /* Created: show what it costs. One acquire with every node up (the
   * deployment's markers count), then node 2 (srv[1]) frozen: one server is
   * a majority. */
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 5000;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "dup-name", &mo));
  if (dlock_mutex_acquire(m, 0) == 0) dlock_mutex_release(m);
  kill(srv[1].pid, SIGSTOP);
  frozen[1] = 1;
  int rc = dlock_mutex_acquire(m, 0);
  kill(srv[1].pid, SIGCONT);
  frozen[1] = 0;
  if (rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  TEST_FAIL("redlock://127.0.0.1:%d,[::ffff:127.0.0.1]:%d,... was accepted as two nodes; with the third frozen, "
            "an acquire on one server answered %d (%s)", srv[0].port, srv[0].port, rc,
            rc == 0 ? "acquired: one server made the majority" : dlock_err_name(rc));
}



/* ---- Finding: a frozen held node and the renewal's taking of absent nodes ---- */

/* Every node empty, then one acquire with every node answering (a new
 * deployment: every marker is promoted). */
static void fresh(void) {
  char out[64];
  thaw_all();
  for (int i = 0; i < N; i++) th_redis_cli(&srv[i], out, sizeof out, "FLUSHALL");
  dlock_client *c = client_of(url, 2000);
  if (!c) TEST_FAIL("setup: no client: %s", dlock_last_error());
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "rv3:warm", NULL) == 0 && dlock_mutex_acquire(m, 2000) == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/*
 * Promise (docs/redlock.md, "What each operation does" and "Renewal"): "A
 * renewal ... complete[s] as soon as [its] outcome is decided ... So one
 * frozen node of five costs each renewal and acquire a few milliseconds,
 * not its deadline, and holds with leases well under the command timeout
 * survive it"; "When fewer confirm but counted nodes without our key would
 * make the majority (the acquire's majority did not include them ...), the
 * renewal first takes them as an acquire would"; and "with 5 nodes, locks
 * are taken and renewed while any 3 answer".
 * Attack: A's acquire takes nodes 1-3 (4 and 5 hold a crashed client's
 * leftover token, which then expires: A's key is absent there, the nodes
 * count). Node 3 is then frozen (SIGSTOP), as a node restarting was in the
 * fix's scenario. A holds with the watchdog, a 3000 ms lease, under a
 * 5000 ms command timeout (the freeze comes before the first renewal).
 * What happened: the renewal has 2 confirmations (nodes 1, 2), 2 absent
 * counted nodes (4, 5) and node 3 pending; extend_decided() does not count
 * the absent nodes that could be taken, so it waits for the frozen node up
 * to the command timeout, cut at the hold's deadline; seed_absent() then
 * runs only while "now < limit", which has passed: the hold is lost at its
 * deadline (DLOCK_LOST_DEADLINE) with four of five nodes up, two holding
 * A's key and two free to take, and nobody else able to take the lock.
 * With a node restarted instead (the fix's test) the connection fails at
 * once and the taking runs; frozen, it never does.
 */
TEST(a_renewal_takes_the_absent_nodes_also_when_a_held_node_is_frozen) {
  fresh();
  char out[128];
  for (int i = 3; i < 5; i++)
    if (th_redis_cli(&srv[i], out, sizeof out, "SET rv3:frozen foreignfeedfacefeedfacefeedface PX 3000") != 0)
      TEST_FAIL("setup: SET on node %d", i + 1);
  dlock_client *ca = client_of(url, 5000);
  if (!ca) TEST_FAIL("setup: no client: %s", dlock_last_error());
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 3000;
  dlock_mutex *a = NULL;
  ASSERT_OK(dlock_mutex_new(&a, ca, "rv3:frozen", &mo));
  int rc = dlock_mutex_acquire(a, 0);
  long long acquired = th_now_ms();
  if (rc != 0) {
    dlock_mutex_free(a);
    dlock_client_free(ca);
    TEST_FAIL("setup: A's acquire on nodes 1-3: %d %s", rc, dlock_last_error());
  }
  /* The leftover token ends on nodes 4 and 5 (as it does when it expires). */
  /* The leftover token ends on nodes 4 and 5 (as it does when it expires),
   * and node 3 freezes, both before the watchdog's first renewal (a third
   * of the lease after the acquire): no renewal with every node up has
   * re-seeded nodes 4 and 5 yet. */
  for (int i = 3; i < 5; i++) th_redis_cli(&srv[i], out, sizeof out, "DEL rv3:frozen");
  kill(srv[2].pid, SIGSTOP);
  frozen[2] = 1;
  long long t0 = th_now_ms(), lost_at = 0;
  long long setup_ms = t0 - acquired;
  dlock_lost_reason lost = DLOCK_LOST_NONE;
  while (th_now_ms() - t0 < 9000) { /* three leases */
    lost = dlock_mutex_lost(a);
    if (lost != DLOCK_LOST_NONE) {
      lost_at = th_now_ms() - t0;
      break;
    }
    th_sleep_ms(50);
  }
  kill(srv[2].pid, SIGCONT);
  frozen[2] = 0;
  char k4[128] = "", k5[128] = "";
  th_redis_cli(&srv[3], k4, sizeof k4, "GET rv3:frozen");
  th_redis_cli(&srv[4], k5, sizeof k5, "GET rv3:frozen");
  printf("  keys on nodes 4, 5 after the freeze: '%s', '%s'\n", k4, k5);
  dlock_mutex_release(a);
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (setup_ms > 900) TEST_SKIP("the setup took %lld ms, past A's first renewal (a very slow machine?)", setup_ms);
  if (lost != DLOCK_LOST_NONE)
    TEST_FAIL("A's watchdog hold (3000 ms lease, 5000 ms command timeout) was lost (%s) %lld ms after node 3 froze, "
              "with nodes 1, 2 holding A's key and nodes 4, 5 up and free (their key now: '%s', '%s')",
              dlock_lost_reason_str(lost), lost_at, k4, k5);
}

/* ---- Finding: a node that kept its marker but answers with an error ---- */

/* Node i runs a script that keeps it busy for about 'ms' (it ends by
 * itself; SCRIPT KILL ends it sooner): every other command gets -BUSY once
 * busy-reply-threshold (100 ms here) has passed. */
static void make_busy(int i, int ms) {
  char out[128], cmd[600];
  th_redis_cli(&srv[i], out, sizeof out, "CONFIG SET busy-reply-threshold 100");
  snprintf(cmd, sizeof cmd,
           "redis-cli -p %d EVAL \"local t=redis.call('TIME') local e=tonumber(t[1])*1000+tonumber(t[2])/1000+%d "
           "while true do t=redis.call('TIME') if tonumber(t[1])*1000+tonumber(t[2])/1000>e then break end end "
           "return 1\" 0 >/dev/null 2>&1 &",
           srv[i].port, ms);
  if (system(cmd) != 0) TEST_FAIL("setup: cannot start the busy script on node %d", i + 1);
  for (int k = 0; k < 60; k++) { /* bounded: 3 s */
    th_sleep_ms(50);
    th_redis_cli(&srv[i], out, sizeof out, "PING");
    if (strstr(out, "BUSY")) return;
  }
  TEST_FAIL("setup: node %d never answered BUSY", i + 1);
}

static void end_busy(int i) {
  char out[128];
  for (int k = 0; k < 40; k++) { /* bounded: 4 s */
    th_redis_cli(&srv[i], out, sizeof out, "SCRIPT KILL");
    th_redis_cli(&srv[i], out, sizeof out, "PING");
    if (!strstr(out, "BUSY")) return;
    th_sleep_ms(100);
  }
}

/*
 * Promise (docs/redlock.md, "Restarts", Survived): "nodes losing their data
 * (restarted empty, flushed, replaced) at any moment, any number of them
 * short of all, also while other nodes are frozen or cut off ...: one node
 * that kept its marker (answering or not) ... stops the deployment from
 * looking new"; and "A new deployment ... is usable at once only when every
 * node answers".
 * Attack: A holds 'rv3:busy' on all five nodes (20 s fixed lease). Client
 * B is created (its creation meets every node: connections, INFO) but has
 * not acquired anything yet. Node 5 keeps its data and its marker but is
 * busy running a long script (any client's EVAL past busy-reply-threshold:
 * every command gets -BUSY), and nodes 1-4 are flushed (FLUSHALL: four of
 * five lose their data, short of all). B then acquires 'rv3:busy'.
 * What happened: judge_markers() counts node 5's -BUSY error reply as an
 * answer (only a failed connection clears 'all'), without a marker that
 * counts: every node "answered" and none has a marker, so the deployment
 * looks new, nodes 1-4 are promoted at once and B takes the lock on them
 * while A's hold is valid for many seconds more: two holders.
 */
TEST(a_node_that_kept_its_marker_but_answers_busy_keeps_the_deployment_from_looking_new) {
  fresh();
  char out[128];
  dlock_client *ca = client_of(url, 2000), *cb = NULL;
  if (!ca) TEST_FAIL("setup: no client: %s", dlock_last_error());
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 20000;
  dlock_mutex *a = NULL, *b = NULL;
  ASSERT_OK(dlock_mutex_new(&a, ca, "rv3:busy", &mo));
  int rc = dlock_mutex_acquire(a, 0);
  if (rc != 0) TEST_FAIL("setup: A's acquire: %d %s", rc, dlock_last_error());
  cb = client_of(url, 2000);
  if (!cb) TEST_FAIL("setup: no client B: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_new(&b, cb, "rv3:busy", &mo));
  make_busy(4, 8000);
  for (int i = 0; i < 4; i++) th_redis_cli(&srv[i], out, sizeof out, "FLUSHALL");
  int brc = dlock_mutex_acquire(b, 0);
  char bmsg[1200];
  snprintf(bmsg, sizeof bmsg, "%s", brc ? dlock_mutex_errmsg(b) : "");
  long long a_left = dlock_mutex_valid_until(a) - th_now_ms();
  dlock_lost_reason a_lost = dlock_mutex_lost(a);
  end_busy(4);
  if (brc == 0) dlock_mutex_release(b);
  dlock_mutex_release(a);
  dlock_mutex_free(b);
  dlock_mutex_free(a);
  dlock_client_free(cb);
  dlock_client_free(ca);
  printf("  B: %d %s\n", brc, bmsg);
  if (brc == 0 && a_lost == DLOCK_LOST_NONE && a_left > 0)
    TEST_FAIL("B acquired 'rv3:busy' on the four flushed nodes while A's hold was valid for %lld ms more: node 5, "
              "which kept its marker and A's key, answered -BUSY and the deployment looked new", a_left);
}

/*
 * Promise (docs/redlock.md, "Renewal"): a renewal short of a majority
 * "first takes" the counted nodes without our key; the loss is reported
 * "DLOCK_LOST_EXPIRED/TAKEN when a majority says the key is gone or
 * another owner's ... (a key absent on a majority of the counted nodes is
 * "expired" only when they could not be taken)"; "with 5 nodes, locks are
 * taken and renewed while any 3 answer".
 * Attack: the newest fix's scenario (A holds on nodes 1-3, node 3 restarts
 * empty, nodes 4 and 5 free) with a contender's attempt on nodes 4 and 5
 * in flight when A renews: a failed attempt of another client takes the
 * free nodes 4 and 5 for a moment before giving them back. Here that
 * attempt's token is left on nodes 4 and 5 for 1.5 s (as by a contender
 * killed before its cleanup, or one whose cleanup is slow); A's lease is
 * 3 s (watchdog), so A's renewals can take nodes 4 and 5 once it is gone.
 * With four processes of real contenders instead (new clients, waiting
 * acquires in a loop), A lost its hold the same way in 1 of 3 runs.
 * What happened: the renewal sees nodes 1, 2 confirm, node 3 answer "key
 * gone" (not counted: restarted) and nodes 4, 5 "another owner"; rl_extend
 * counts node 3's answer as a final no (it is neither confirmed nor
 * failed), so conf + failed = 2 < 3 and the hold is declared lost at once
 * as DLOCK_LOST_TAKEN ("another owner holds the lock now") while no other
 * owner holds it (a partial of 2 of 5), four of five nodes are up, and the
 * contender's token would have ended long before A's deadline. Without the
 * restart (node 3 holding A's key) the same renewal is fine.
 */
TEST(a_contenders_partial_attempt_does_not_end_the_hold_when_a_held_node_restarted) {
  fresh();
  char out[128];
  for (int i = 3; i < 5; i++)
    th_redis_cli(&srv[i], out, sizeof out, "SET rv3:contend foreignfeedfacefeedfacefeedface PX 3000");
  dlock_client *ca = client_of(url, 2000);
  if (!ca) TEST_FAIL("setup: no client");
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 3000;
  dlock_mutex *a = NULL;
  ASSERT_OK(dlock_mutex_new(&a, ca, "rv3:contend", &mo));
  int rc = dlock_mutex_acquire(a, 0);
  if (rc) TEST_FAIL("setup: A's acquire: %s", dlock_last_error());
  long long t0 = th_now_ms();
  /* Node 3 restarts empty; the contender's attempt holds nodes 4 and 5 for
   * 1.5 s more (before A's first renewal, a third of the lease in). */
  if (th_redis_restart(&srv[2]) != 0) TEST_FAIL("setup: restart node 3");
  for (int i = 3; i < 5; i++)
    th_redis_cli(&srv[i], out, sizeof out, "SET rv3:contend contenderfeedfacefeedfacefeedfa PX 1500");
  long long setup_ms = th_now_ms() - t0;
  dlock_lost_reason lost = DLOCK_LOST_NONE;
  long long lost_at = 0;
  while (th_now_ms() - t0 < 9000) { /* three leases */
    lost = dlock_mutex_lost(a);
    if (lost != DLOCK_LOST_NONE) {
      lost_at = th_now_ms() - t0;
      break;
    }
    th_sleep_ms(30);
  }
  char msg[600];
  snprintf(msg, sizeof msg, "%s", dlock_mutex_errmsg(a));
  dlock_mutex_release(a);
  dlock_mutex_free(a);
  dlock_client_free(ca);
  if (setup_ms > 900) TEST_SKIP("the setup took %lld ms, past A's first renewal (a very slow machine?)", setup_ms);
  if (lost != DLOCK_LOST_NONE)
    TEST_FAIL("A's watchdog hold (3000 ms lease) was lost (%s) at +%lld ms, with nodes 1, 2 holding A's key, node 3 "
              "restarted empty and nodes 4, 5 held for 1.5 s by a contender's partial attempt", dlock_lost_reason_str(lost),
              lost_at);
}

TEST_MAIN()
