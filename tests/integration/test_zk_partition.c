/*
 * test_zk_partition.c - issue 22 item 1: a ZooKeeper follower cut off from
 * its leader keeps a hold alive.
 *
 * Finding (verbatim): "ZooKeeper, a partitioned follower keeps a hold alive
 * (two holders for 3-8 s). A client connected to a follower that lost the
 * leader keeps getting answers to its validity ping (`exists` is served
 * locally), so `valid_until` keeps moving while the ensemble has expired the
 * session and a waiter holds the lock."
 *
 * The test: a 3-node ensemble whose quorum links (follower to leader) run
 * through fault proxies (tests/faultproxy.h, raw mode). The holder's client
 * talks only to a follower; the follower's quorum links are cut (blackholed:
 * nothing passes, no connection closes, as in a real partition) while its
 * client port stays up. The follower keeps serving reads and heartbeats for
 * syncLimit ticks (here 10 s); the leader expires the holder's session after
 * its timeout (2 s) and a waiter on the other servers gets the lock. The
 * holder must have learned of its loss by then: its deadline
 * (dlock_mutex_valid_until()) lies before the waiter's grant, and its
 * on_lost callback came (reason "unreachable" or "deadline").
 *
 * Registered as ctest "review/test_zk_partition" (labels "review" and
 * "zk"). Public API only (dlock.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "faultproxy.h"
#include "harness.h"
#include "harness_zk.h"
#include "test.h"

#define N TH_ZK_ENSEMBLE
#define TICK_MS 200
#define SYNC_LIMIT 50 /* ticks: a cut-off follower serves on for 10 s */
#define SESSION_MS 2000

static th_zk_ensemble ens;
static int ens_up;
static fp_proxy *via[N][N]; /* via[i][j]: server i's link to server j's quorum port */
static dlock_client *holder_c, *waiter_c;
static dlock_mutex *holder_m, *waiter_m;

void test_teardown(void) {
  /* The servers first: a client closing its session on a cut-off follower
   * would wait for an answer that cannot come. */
  if (ens_up) th_zk_ensemble_stop(&ens);
  ens_up = 0;
  if (holder_m) dlock_mutex_free(holder_m);
  if (waiter_m) dlock_mutex_free(waiter_m);
  if (holder_c) dlock_client_free(holder_c);
  if (waiter_c) dlock_client_free(waiter_c);
  holder_m = waiter_m = NULL;
  holder_c = waiter_c = NULL;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      fp_stop(via[i][j]);
      via[i][j] = NULL;
    }
}

static void start_routed_ensemble(void) {
  char why[256];
  if (!th_zk_available(why, sizeof why)) TEST_SKIP("%s", why);
  int qport[N], qvia[N][N];
  memset(qvia, 0, sizeof qvia);
  for (int j = 0; j < N; j++) qport[j] = th_free_port();
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      if (i == j) continue;
      if (fp_start(&via[i][j], qport[j]) != 0) TEST_FAIL("fault proxy to quorum port %d did not start", qport[j]);
      fp_raw(via[i][j], 1);
      qvia[i][j] = fp_port(via[i][j]);
    }
  if (th_zk_ensemble_start_via(&ens, TICK_MS, SYNC_LIMIT, qport, (const int(*)[N])qvia) != 0)
    TEST_FAIL("the 3-node ensemble with proxied quorum links did not start (see above)");
  ens_up = 1;
}

/* Cut server 'k' off from the others: nothing passes on its quorum links,
 * in either direction; its client port is untouched. */
static void isolate(int k) {
  for (int j = 0; j < N; j++) {
    if (j == k) continue;
    fp_blackhole(via[k][j], 1);
    fp_blackhole(via[j][k], 1);
  }
}

static dlock_client *client_of(const char *hosts) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s/part?session_timeout=%dms&connect_timeout=%lds", hosts, SESSION_MS,
           10 * th_time_factor());
  return test_client(url);
}

static atomic_llong lost_at; /* dlock_mono_now() when the holder's on_lost came, 0 before */
static atomic_int lost_reason;

static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m, (void)name, (void)arg;
  atomic_store(&lost_reason, (int)reason);
  atomic_store(&lost_at, (long long)dlock_mono_now());
}

/* Issue 22 item 1 (first review). */
REVIEW_TEST(a_hold_on_a_follower_cut_off_from_its_leader_is_lost_before_the_ensemble_can_grant_the_lock_to_another) {
  start_routed_ensemble();
  int leader = th_zk_leader(&ens);
  ASSERT(leader >= 0);
  int f = (leader + 1) % N; /* the holder's follower */
  char others[256] = "";
  for (int i = 0; i < N; i++) {
    if (i == f) continue;
    size_t o = strlen(others);
    snprintf(others + o, sizeof others - o, "%s%s", o ? "," : "", ens.node[i].hostport);
  }
  holder_c = client_of(ens.node[f].hostport);
  waiter_c = client_of(others);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.on_lost = on_lost;
  ASSERT_OK(dlock_mutex_new(&holder_m, holder_c, "job", &mo));
  waiter_m = test_mutex(waiter_c, "job", 0);
  ASSERT_OK(dlock_mutex_acquire(holder_m, 0));
  /* A few validity pings (every quarter of the session timeout) first. */
  th_sleep_ms(1200);
  ASSERT_EQ(dlock_mutex_lost(holder_m), DLOCK_LOST_NONE);

  dlock_mono_ms cut = dlock_mono_now();
  isolate(f);
  int rc = dlock_mutex_acquire(waiter_m, 30000 * th_time_factor());
  dlock_mono_ms granted = dlock_mono_now();
  dlock_mono_ms holder_valid = dlock_mutex_valid_until(holder_m);
  dlock_lost_reason holder_lost = dlock_mutex_lost(holder_m);
  long long lost_cb = atomic_load(&lost_at);
  printf("  cut at 0 ms; waiter granted at %lld ms; holder's valid_until %lld ms, its on_lost at %lld ms (%s)\n",
         (long long)(granted - cut), (long long)(holder_valid - cut), lost_cb ? lost_cb - cut : -1,
         dlock_lost_reason_str(holder_lost));
  ASSERT_OK(rc);
  /* The waiter got the lock only once the ensemble expired the holder's
   * session: the holder's deadline must lie before that moment. */
  if (holder_lost == DLOCK_LOST_NONE || holder_valid > granted)
    TEST_FAIL("two holders: the waiter was granted the lock %lld ms after the cut while the holder on the cut-off "
              "follower still counted itself valid until %lld ms",
              (long long)(granted - cut), (long long)(holder_valid - cut));
  /* And the holder was told (its on_lost), within a generous delivery
   * slack of the deadline for a busy machine. */
  long long until = th_now_ms() + 5000 * th_time_factor();
  while (!atomic_load(&lost_at) && th_now_ms() < until) th_sleep_ms(20);
  lost_cb = atomic_load(&lost_at);
  if (!lost_cb) TEST_FAIL("the holder's on_lost callback never came");
  /* The session's deadline (unreachable) or the handle's own copy of it,
   * which lags by up to a renewal (deadline): whichever passed first. */
  int why = atomic_load(&lost_reason);
  if (why != DLOCK_LOST_UNREACHABLE && why != DLOCK_LOST_DEADLINE)
    TEST_FAIL("the holder's loss reason is '%s', want the deadline passing without an answer",
              dlock_lost_reason_str((dlock_lost_reason)why));
  if (lost_cb > granted + 1000 * th_time_factor())
    TEST_FAIL("the holder's on_lost came %lld ms after the waiter's grant", (long long)(lost_cb - granted));
  ASSERT_OK(dlock_mutex_release(waiter_m));
}

TEST_MAIN()
