/*
 * test_sentinel.c - dlock through Redis Sentinel: a master, a replica and
 * three sentinels on loopback (harness_sentinel.h). URL errors, discovery
 * and its errors, exclusion across processes, sentinels that disagree, and
 * failovers (master killed with SIGKILL) while a lock is held.
 */
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_sentinel.h"
#include "test.h"

static th_sentinel_set set; /* shared by the tests that do not fail over */
static th_sentinel_set fo;  /* started by each failover test */
static th_redis stale_srv, stale_sentinel;

void test_setup(void) {
  if (th_sentinel_set_start(&set, "dlocksvc") != 0) exit(1);
}

void test_teardown(void) {
  th_sentinel_set_stop(&set);
  th_sentinel_set_stop(&fo);
  th_redis_stop(&stale_sentinel);
  th_redis_stop(&stale_srv);
}

static int new_client(dlock_client **c, const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  *c = NULL;
  return dlock_client_new(c, &o);
}

/* ---- URL errors: no I/O ---- */

TEST(sentinel_urls_with_bad_parts_are_refused_with_the_reason_and_no_password) {
  static const struct {
    const char *url, *says;
  } bad[] = {
      {"redis-sentinel:///svc", "empty sentinel address"},
      {"redis-sentinel://u:s3cret@/svc", "empty sentinel address"},
      {"redis-sentinel://127.0.0.1:26379", "no service name"},
      {"redis-sentinel://127.0.0.1:26379/", "no service name"},
      {"redis-sentinel://u:s3cret@127.0.0.1:1,127.0.0.1:1/svc", "listed twice"},
      {"redis-sentinel://127.0.0.1:1,127.0.0.1:2,/svc", "empty sentinel address"},
      {"redis-sentinel://127.0.0.1:99999/svc", "port must be"},
      {"redis-sentinel://127.0.0.1/svc/2", "may not contain '/'"},
      {"redis-sentinel://127.0.0.1/svc?db=x", "db must be"},
      {"redis-sentinel://127.0.0.1/svc?master_password=s3cret&bogus=1", "unknown parameter 'bogus'"},
      {"redis-sentinel://127.0.0.1/svc?wait_replicas=1&wait_timeout=0", "wait_timeout"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_client *c;
    ASSERT_STATUS(new_client(&c, bad[i].url), DLOCK_EURL);
    ASSERT(c == NULL);
    ASSERT_CONTAINS(dlock_last_error(), bad[i].says);
    if (strstr(dlock_last_error(), "s3cret")) TEST_FAIL("password printed: %s", dlock_last_error());
  }
}

/* ---- Discovery ---- */

TEST(a_client_finds_the_master_through_the_sentinels_and_locks_there) {
  dlock_client *c;
  ASSERT_OK(new_client(&c, set.url));
  ASSERT_CONTAINS(dlock_client_server(c), "dlocksvc");
  dlock_mutex *m = test_mutex(c, "s:basic", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > 0);
  /* The key is on the master (and replicated), not merely somewhere. */
  char out[256];
  th_redis_cli(&set.master, out, sizeof out, "EXISTS s:basic");
  ASSERT_STR_EQ(out, "1");
  char warning[256];
  ASSERT_EQ(dlock_client_topology_warning(c, warning, sizeof warning), 0);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The rules of a client do not depend on the topology: a key prefix is a
 * whole segment ("app" is "app:"), and the eviction policy is read at
 * connect and warned about. */
TEST(through_sentinel_a_key_prefix_is_a_whole_segment_and_eviction_is_checked) {
  char out[256];
  th_redis_cli(&set.master, out, sizeof out, "CONFIG SET maxmemory-policy allkeys-lru");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = set.url;
  o.key_prefix = "app";
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  th_redis_cli(&set.master, out, sizeof out, "CONFIG SET maxmemory-policy noeviction");
  ASSERT_OK(rc);
  ASSERT_CONTAINS(dlock_client_warnings(c), "allkeys-lru");
  dlock_mutex *m = test_mutex(c, "s:pfx", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  th_redis_cli(&set.master, out, sizeof out, "EXISTS app:s:pfx");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(an_unknown_service_name_is_a_clear_error_naming_the_sentinels) {
  char url[600];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/nosuchsvc", set.sentinel[0].port,
           set.sentinel[1].port);
  dlock_client *c;
  ASSERT_STATUS(new_client(&c, url), DLOCK_ETOPOLOGY);
  ASSERT_CONTAINS(dlock_last_error(), "service 'nosuchsvc' is unknown to the sentinels");
  char port[32];
  snprintf(port, sizeof port, "127.0.0.1:%d", set.sentinel[1].port);
  ASSERT_CONTAINS(dlock_last_error(), port);
}

TEST(a_sentinel_url_that_points_at_a_plain_redis_says_so) {
  char url[600];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d/dlocksvc", set.master.port);
  dlock_client *c;
  ASSERT_STATUS(new_client(&c, url), DLOCK_ETOPOLOGY);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d: not a Redis Sentinel", set.master.port);
  ASSERT_CONTAINS(dlock_last_error(), want);
}

TEST(unreachable_sentinels_are_each_named_with_their_error) {
  int p1 = th_free_port(), p2 = th_free_port();
  char url[600];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/dlocksvc", p1, p2);
  dlock_client *c;
  ASSERT_STATUS(new_client(&c, url), DLOCK_ETOPOLOGY);
  ASSERT_CONTAINS(dlock_last_error(), "no sentinel could be asked");
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", p2);
  ASSERT_CONTAINS(dlock_last_error(), want);
}

TEST(one_dead_sentinel_of_three_does_not_matter) {
  char url[600];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/dlocksvc", th_free_port(),
           set.sentinel[1].port, set.sentinel[2].port);
  dlock_client *c;
  ASSERT_OK(new_client(&c, url));
  ASSERT_OK(dlock_client_ping(c));
  dlock_client_free(c);
}

/* ---- WAIT: locks acknowledged by replicas ---- */

TEST(wait_replicas_fails_closed_when_too_few_replicas_acknowledge) {
  char url[700];
  /* Two replicas asked for, one exists: the acquire is undone. */
  snprintf(url, sizeof url, "%s?wait_replicas=2&wait_timeout=200ms", set.url);
  dlock_client *c;
  ASSERT_OK(new_client(&c, url));
  dlock_mutex *m = test_mutex(c, "s:wait2", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EREPLICAS);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "only 1 of the 2 replicas");
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "released again");
  ASSERT_EQ(dlock_mutex_fence(m), 0);
  char out[256];
  th_redis_cli(&set.master, out, sizeof out, "EXISTS s:wait2");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(wait_replicas_one_acquires_and_a_renewal_the_replica_misses_does_not_count) {
  char url[700];
  snprintf(url, sizeof url, "%s?wait_replicas=1&wait_timeout=300", set.url);
  dlock_client *c;
  ASSERT_OK(new_client(&c, url));
  dlock_mutex *m = test_mutex(c, "s:wait1", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  /* The replica has the key: WAIT returned after it acknowledged. */
  char out[256];
  th_redis_cli(&set.replica, out, sizeof out, "EXISTS s:wait1");
  ASSERT_STR_EQ(out, "1");
  dlock_mono_ms valid = dlock_mutex_valid_until(m);
  kill(set.replica.pid, SIGSTOP);
  int rc = dlock_mutex_extend(m, 20000);
  kill(set.replica.pid, SIGCONT);
  ASSERT_STATUS(rc, DLOCK_EREPLICAS);
  ASSERT_EQ(dlock_mutex_valid_until(m), valid);
  ASSERT_OK(dlock_mutex_extend(m, 20000));
  ASSERT(dlock_mutex_valid_until(m) > valid);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_wait_timeout_not_shorter_than_the_command_timeout_is_refused) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = set.url;
  o.wait_replicas = 1;
  o.wait_timeout_ms = 5000;
  dlock_client *c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_ERANGE);
  ASSERT_CONTAINS(dlock_last_error(), "shorter than the command timeout");
}

/* ---- Sentinels that disagree ---- */

TEST(when_sentinels_disagree_the_majority_wins_and_the_disagreement_is_reported) {
  /* A fourth sentinel monitors another server under the same service name. */
  if (th_redis_start(&stale_srv, NULL) != 0) TEST_FAIL("stale server");
  if (th_sentinel_start_one(&stale_sentinel, "dlocksvc", stale_srv.port, 1) != 0) TEST_FAIL("stale sentinel");
  char url[700];
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/dlocksvc",
           stale_sentinel.port, set.sentinel[0].port, set.sentinel[1].port, set.sentinel[2].port);
  dlock_client *c;
  ASSERT_OK(new_client(&c, url));
  dlock_mutex *m = test_mutex(c, "s:majority", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[256];
  th_redis_cli(&set.master, out, sizeof out, "EXISTS s:majority");
  ASSERT_STR_EQ(out, "1");
  th_redis_cli(&stale_srv, out, sizeof out, "EXISTS s:majority");
  ASSERT_STR_EQ(out, "0");
  char warning[600], want[64];
  ASSERT_EQ(dlock_client_topology_warning(c, warning, sizeof warning), 1);
  snprintf(want, sizeof want, "sentinel 127.0.0.1:%d names 127.0.0.1:%d", stale_sentinel.port, stale_srv.port);
  ASSERT_CONTAINS(warning, want);
  ASSERT_CONTAINS(warning, "following the 3 of 4");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);

  /* One against one: no majority, no guess. */
  snprintf(url, sizeof url, "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/dlocksvc", stale_sentinel.port,
           set.sentinel[0].port);
  ASSERT_STATUS(new_client(&c, url), DLOCK_ETOPOLOGY);
  ASSERT_CONTAINS(dlock_last_error(), "no majority");
  th_redis_stop(&stale_sentinel);
  th_redis_stop(&stale_srv);
}

/* ---- Mutual exclusion across processes ---- */

#define PROCS 4
#define ROUNDS 25

static long read_counter(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1000000;
    fclose(f);
  }
  return v;
}

static int increment_unguarded(void *arg) {
  const char *path = arg;
  dlock_client *c;
  dlock_mutex *m = NULL;
  if (new_client(&c, set.url) != 0 || dlock_mutex_new(&m, c, "s:counter", NULL) != 0) return 10;
  for (int i = 0; i < ROUNDS; i++) {
    if (dlock_mutex_acquire(m, 60000) != 0) return 11;
    long v = read_counter(path); /* read, pause, write: loses updates without the lock */
    usleep(200);
    FILE *f = fopen(path, "w");
    if (!f) return 12;
    fprintf(f, "%ld\n", v + 1);
    fclose(f);
    if (dlock_mutex_release(m) != 0) return 13;
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TEST(processes_contending_through_sentinel_keep_an_unguarded_counter_exact) {
  char path[512];
  snprintf(path, sizeof path, "%s/counter", set.master.dir);
  FILE *f = fopen(path, "w");
  ASSERT(f);
  fprintf(f, "0\n");
  fclose(f);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = th_spawn(increment_unguarded, path);
  for (int i = 0; i < PROCS; i++) {
    int st = th_wait(pids[i], 240000);
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(read_counter(path), PROCS * ROUNDS);
}

/* ---- Failover while a lock is held ---- */

static atomic_int lost_reason;

static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m;
  (void)name;
  (void)arg;
  atomic_store(&lost_reason, (int)reason);
}

/* th_sentinel_block_replication(), or the test fails. */
static void block_replication(th_sentinel_set *s) {
  if (th_sentinel_block_replication(s) != 0)
    TEST_FAIL("could not block the replication from the master (port %d)", s->master.port);
}

/* Acquire in watchdog mode, fail the master over, and report what the
 * client saw: the loss reason (0 none), and fences before and after. */
static void failover_with_lock(int wait_replicas, int lose_the_write, int *reason, uint64_t *before, uint64_t *after) {
  if (th_sentinel_set_start(&fo, wait_replicas ? "fowait" : "fonowait") != 0) TEST_FAIL("sentinel set");
  char url[700];
  snprintf(url, sizeof url, "%s%s", fo.url, wait_replicas ? "?wait_replicas=1&wait_timeout=1000" : "");
  dlock_client *c;
  ASSERT_OK(new_client(&c, url));
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  /* Renewed every 3 s, so that a lost write is seen soon after the
   * failover; where the write survives, a lease that outlasts a slow
   * failover on a busy machine (renewals fail until it is over). */
  mo.watchdog_lease_ms = (lose_the_write ? 9000 : 30000) * th_time_factor();
  mo.on_lost = on_lost;
  atomic_store(&lost_reason, 0);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "s:failover", &mo));
  /* A second client holds 's:queue' and our client waits on it once, so its
   * subscriber listens for hand-offs on the master. */
  dlock_client *c2;
  ASSERT_OK(new_client(&c2, fo.url));
  dlock_mutex *held = test_mutex(c2, "s:queue", 60000), *waiter = test_mutex(c, "s:queue", 60000);
  ASSERT_OK(dlock_mutex_acquire(held, 0));
  ASSERT_STATUS(dlock_mutex_acquire(waiter, 300), DLOCK_EBUSY);
  char out[256];
  th_redis_cli(&fo.master, out, sizeof out, "PUBSUB CHANNELS '{s:queue}:w:*'");
  ASSERT_CONTAINS(out, "{s:queue}:w:");
  if (lose_the_write) block_replication(&fo);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  *before = dlock_mutex_fence(m);
  kill(fo.master.pid, SIGKILL);
  if (lose_the_write) kill(fo.replica.pid, SIGCONT);
  if (th_sentinel_wait_master(&fo, fo.replica.port, 30000 * th_time_factor()) != 0)
    TEST_FAIL("no failover to the replica within 30 s");
  if (wait_replicas) {
    /* The new master needs a replica of its own to acknowledge renewals:
     * the old master's slot gets a fresh server replicating from it. */
    th_redis_stop(&fo.master);
    char conf[128], info[4096] = "";
    snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", fo.replica.port);
    if (th_redis_start(&fo.master, conf) != 0) TEST_FAIL("new replica");
    for (int i = 0; i < 500 && !strstr(info, "master_link_status:up"); i++) {
      th_sleep_ms(20);
      th_redis_cli(&fo.master, info, sizeof info, "INFO replication");
    }
  }
  /* A lost write: the watchdog renews every 3 s, within 6 s it has spoken to
   * the new master. A kept one: the release below speaks to it. */
  for (int i = 0; i < 120 && dlock_mutex_lost(m) == DLOCK_LOST_NONE; i++) th_sleep_ms(50 * th_time_factor());
  *reason = (int)dlock_mutex_lost(m);
  if (*reason == 0) {
    /* Still held: the new master has our token. */
    ASSERT_EQ(dlock_mutex_is_held(m), 1);
    ASSERT_OK(dlock_mutex_release(m));
  } else {
    ASSERT_EQ(atomic_load(&lost_reason), *reason);
    dlock_mutex_release(m);
  }
  /* The subscriber followed the master: it listens on the new one. */
  out[0] = '\0';
  for (int i = 0; i < 100 && !strstr(out, "{s:queue}:w:"); i++) {
    th_sleep_ms(50);
    th_redis_cli(&fo.replica, out, sizeof out, "PUBSUB CHANNELS '{s:queue}:w:*'");
  }
  ASSERT_CONTAINS(out, "{s:queue}:w:");
  /* The client follows the new master: a fresh acquire works there. */
  ASSERT_OK(dlock_mutex_acquire(m, 5000));
  *after = dlock_mutex_fence(m);
  th_redis_cli(&fo.replica, out, sizeof out, "EXISTS s:failover");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_mutex_free(waiter);
  dlock_client_free(c);
  dlock_mutex_free(held);
  dlock_client_free(c2);
  th_sentinel_set_stop(&fo);
}

TEST(a_failover_that_loses_the_lock_write_is_reported_as_failover_and_fences_rise) {
  int reason;
  uint64_t before, after;
  failover_with_lock(0, 1, &reason, &before, &after);
  ASSERT_EQ(reason, DLOCK_LOST_FAILOVER);
  ASSERT(after > before);
}

TEST(a_lock_acknowledged_by_a_replica_survives_the_failover) {
  int reason;
  uint64_t before, after;
  failover_with_lock(1, 0, &reason, &before, &after);
  ASSERT_EQ(reason, DLOCK_LOST_NONE);
  ASSERT(after > before);
}

/* design.md ("Watchdog and loss"): a renewal gives up no later than the
 * earliest deadline it watches, so a server that does not answer delays no
 * loss by a command timeout. Through Sentinel, a renewal that follows a
 * failed one first resolves the master again (route); that resolve, ROLE on
 * the frozen master the sentinels still name included, must end at the
 * watchdog's limit too, so the callback and the fd come at valid_until. */
static atomic_llong frozen_lost_at;

static void on_lost_at(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m;
  (void)name;
  (void)arg;
  atomic_store(&lost_reason, (int)reason);
  atomic_store(&frozen_lost_at, (long long)dlock_mono_now());
}

TEST(a_frozen_master_is_reported_lost_at_valid_until_not_a_resolve_later) {
  if (th_sentinel_set_start(&fo, "fofrozen") != 0) TEST_FAIL("sentinel set");
  long f = th_time_factor();
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = fo.url;
  o.command_timeout_ms = (int)(1500 * f);
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 3000 * f; /* renewed at 1 s; that renewal times out at 2.5 s */
  mo.on_lost = on_lost_at;
  atomic_store(&lost_reason, 0);
  atomic_store(&frozen_lost_at, 0);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "s:frozen", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  int fd = dlock_mutex_lost_fd(m);
  ASSERT(fd >= 0);
  dlock_mono_ms valid_until = dlock_mutex_valid_until(m);
  /* Freeze the master and its replica: no failover can happen, so the
   * sentinels keep naming the frozen master. */
  kill(fo.replica.pid, SIGSTOP);
  kill(fo.master.pid, SIGSTOP);
  struct pollfd p = {fd, POLLIN, 0};
  int n = poll(&p, 1, (int)(10000 * f));
  dlock_mono_ms noticed = dlock_mono_now();
  for (int i = 0; i < 400 && atomic_load(&frozen_lost_at) == 0; i++) th_sleep_ms(10);
  kill(fo.master.pid, SIGCONT);
  kill(fo.replica.pid, SIGCONT);
  long long cb = atomic_load(&frozen_lost_at);
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_sentinel_set_stop(&fo);
  ASSERT_EQ(n, 1);
  ASSERT(noticed >= valid_until);
  if (noticed > valid_until + 300 * f)
    TEST_FAIL("the lost fd became readable %lld ms after valid_until (callback %lld ms after)",
              (long long)(noticed - valid_until), cb ? cb - (long long)valid_until : -1LL);
  ASSERT(cb && cb <= valid_until + 300 * f);
}

TEST_MAIN()
