/*
 * test_cluster.c - dlock on a real 3-master Redis Cluster (loopback, started
 * by harness_cluster.c): exclusion across processes, names on every master,
 * a slot migration under contention, sharded pub/sub wake-ups, listing
 * across masters, a master failover during a hold, and bad input.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_cluster.h"
#include "redis.h"
#include "test.h"

static th_cluster cl;
static th_cluster fc; /* the failover test's own cluster (static: the harness keeps pointers to its nodes) */

void test_setup(void) {
  if (th_cluster_start(&cl, 3, 0) != 0) {
    fprintf(stderr, "cannot start a Redis Cluster\n");
    exit(1);
  }
}

void test_teardown(void) {
  th_cluster_stop(&fc);
  th_cluster_stop(&cl);
}

static dlock_client *client_or_null(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

/* ---- Routing ---- */

TEST(thirty_names_spread_over_all_masters_lock_and_release) {
  dlock_client *c = test_client(cl.url);
  ASSERT(c);
  int per_node[TH_CLUSTER_MAX] = {0};
  for (int i = 0; i < 30; i++) {
    char name[32];
    snprintf(name, sizeof name, "t:spread:%d", i);
    dlock_mutex *m = test_mutex(c, name, 30000);
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    uint64_t fence = dlock_mutex_fence(m);
    ASSERT(fence > 0);
    int owner = th_cluster_owner(&cl, name);
    ASSERT(owner >= 0);
    char out[128];
    ASSERT_EQ(th_redis_cli(&cl.node[owner], out, sizeof out, "EXISTS '%s' '{%s}:fence'", name, name), 0);
    per_node[owner]++;
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    ASSERT_OK(dlock_lock_info_get(c, name, &info));
    ASSERT_EQ(info.held, 1);
    ASSERT_EQ(info.fence, fence);
    ASSERT_OK(dlock_mutex_release(m));
    ASSERT_OK(dlock_lock_info_get(c, name, &info));
    ASSERT_EQ(info.held, 0);
    dlock_mutex_free(m);
  }
  for (int i = 0; i < 3; i++) ASSERT(per_node[i] > 0); /* every master served some */
  dlock_client_free(c);
}

static void count_name(const char *name, void *arg) {
  if (!strncmp(name, "t:list:", 7)) (*(int *)arg)++;
}

TEST(list_finds_the_locks_of_every_master) {
  dlock_client *c = test_client(cl.url);
  ASSERT(c);
  dlock_mutex *m[12];
  int per_node[TH_CLUSTER_MAX] = {0};
  for (int i = 0; i < 12; i++) {
    char name[32];
    snprintf(name, sizeof name, "t:list:%d", i);
    m[i] = test_mutex(c, name, 30000);
    ASSERT_OK(dlock_mutex_acquire(m[i], 0));
    per_node[th_cluster_owner(&cl, name)]++;
  }
  for (int i = 0; i < 3; i++) ASSERT(per_node[i] > 0);
  int seen = 0;
  ASSERT_EQ(dlock_lock_list(c, "t:list:*", count_name, &seen), 12);
  ASSERT_EQ(seen, 12);
  for (int i = 0; i < 12; i++) {
    ASSERT_OK(dlock_mutex_release(m[i]));
    dlock_mutex_free(m[i]);
  }
  seen = 0;
  ASSERT_EQ(dlock_lock_list(c, "t:list:*", count_name, &seen), 0);
  dlock_client_free(c);
}

TEST(force_release_and_the_guard_route_by_slot) {
  dlock_client *c = test_client(cl.url);
  ASSERT(c);
  for (int i = 0; i < 6; i++) {
    char name[32];
    snprintf(name, sizeof name, "t:force:%d", i);
    dlock_mutex *m = test_mutex(c, name, 30000);
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    uint64_t fence = dlock_mutex_fence(m);
    ASSERT_OK(dlock_guard_check(c, name, fence));
    ASSERT_STATUS(dlock_guard_check(c, name, fence - 1), DLOCK_ESTALE);
    int was = 0;
    ASSERT_OK(dlock_lock_force_release(c, name, &was));
    ASSERT_EQ(was, 1);
    ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
    dlock_mutex_free(m);
  }
  dlock_client_free(c);
}

/* ---- Hand-off by sharded pub/sub ---- */

struct other_thread {
  dlock_mutex *m;
  int rc;
  long long acquired_at;
};

static void *acquire_in_thread(void *arg) {
  struct other_thread *t = arg;
  t->rc = dlock_mutex_acquire(t->m, 10000 * th_time_factor());
  t->acquired_at = th_now_ms();
  if (t->rc == 0) dlock_mutex_release(t->m);
  return NULL;
}

/* Wake a waiter on a lock of each master: by the hand-off message, well
 * before the waiter's 2 s re-check. */
static void check_wakeup(const char *name) {
  dlock_client *c1 = test_client(cl.url), *c2 = test_client(cl.url);
  ASSERT(c1 && c2);
  dlock_mutex *a = test_mutex(c1, name, 0), *b = test_mutex(c2, name, 0);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  struct other_thread t = {b, -99, 0};
  pthread_t th;
  pthread_create(&th, NULL, acquire_in_thread, &t);
  th_sleep_ms(300);
  long long released = th_now_ms();
  ASSERT_OK(dlock_mutex_release(a));
  pthread_join(th, NULL);
  ASSERT_OK(t.rc);
  if (t.acquired_at - released >= 1000 * th_time_factor())
    TEST_FAIL("'%s': the waiter took %lld ms after the release", name, t.acquired_at - released);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

TEST(waiters_on_every_master_are_woken_by_sharded_pubsub) {
  int seen[TH_CLUSTER_MAX] = {0}, done = 0;
  for (int i = 0; i < 40 && done < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "t:wake:%d", i);
    int owner = th_cluster_owner(&cl, name);
    ASSERT(owner >= 0);
    if (seen[owner]++) continue;
    check_wakeup(name);
    done++;
  }
  ASSERT_EQ(done, 3);
}

/* ---- Exclusion across processes ---- */

#define PROCS 4
#define ROUNDS 30

static long read_counter(const char *path) {
  FILE *f = fopen(path, "r");
  long v = 0;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = -1000000;
    fclose(f);
  }
  return v;
}

static char counter_path[512];
static const char *counter_lock = "t:counter";

static char stop_path[512]; /* when set: run until this file exists (at most 'rounds') */

static int increment_unguarded(void *arg) {
  long rounds = (long)(intptr_t)arg;
  dlock_client *c = client_or_null(cl.url);
  dlock_mutex *m = NULL;
  if (!c || dlock_mutex_new(&m, c, counter_lock, NULL) != 0) return 10;
  long i;
  for (i = 0; i < rounds && !(stop_path[0] && access(stop_path, F_OK) == 0); i++) {
    int rc = dlock_mutex_acquire(m, 60000);
    if (rc != 0) {
      fprintf(stderr, "acquire: %s\n", dlock_last_error());
      return 11;
    }
    /* read, pause, write: loses updates unless the lock excludes others */
    long v = read_counter(counter_path);
    usleep(200);
    FILE *f = fopen(counter_path, "w");
    if (!f) return 12;
    fprintf(f, "%ld\n", v + 1);
    fclose(f);
    if ((rc = dlock_mutex_release(m)) != 0) {
      fprintf(stderr, "release: %s\n", dlock_last_error());
      return 13;
    }
  }
  if (stop_path[0]) { /* tell the parent how many increments this child made */
    char path[600];
    snprintf(path, sizeof path, "%s.%d", stop_path, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return 14;
    fprintf(f, "%ld\n", i);
    fclose(f);
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

static void reset_counter(void) {
  snprintf(counter_path, sizeof counter_path, "%s/counter", cl.node[0].dir);
  FILE *f = fopen(counter_path, "w");
  if (f) {
    fprintf(f, "0\n");
    fclose(f);
  }
}

TEST(four_processes_keep_an_unguarded_counter_exact) {
  reset_counter();
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = th_spawn(increment_unguarded, (void *)(intptr_t)ROUNDS);
  for (int i = 0; i < PROCS; i++) {
    int st = th_wait(pids[i], 240000);
    ASSERT(st != -1 && WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(read_counter(counter_path), PROCS * ROUNDS);
}

/* ---- A slot migration under contention ---- */

/* "CLUSTER MYID" of node i. */
static void node_id(int i, char *out, size_t n) { th_redis_cli(&cl.node[i], out, n, "CLUSTER MYID"); }

/* Move 'slot' from master 'from' to master 'to' as redis-cli --cluster
 * reshard does: IMPORTING/MIGRATING, MIGRATE the keys in batches, then
 * SETSLOT NODE everywhere. Returns the number of keys moved, -1 on failure. */
static int start_slot_move(int slot, int from, int to) {
  char fid[64], tid[64], out[256];
  node_id(from, fid, sizeof fid);
  node_id(to, tid, sizeof tid);
  if (th_redis_cli(&cl.node[to], out, sizeof out, "CLUSTER SETSLOT %d IMPORTING %s", slot, fid) || strcmp(out, "OK"))
    return -1;
  if (th_redis_cli(&cl.node[from], out, sizeof out, "CLUSTER SETSLOT %d MIGRATING %s", slot, tid) || strcmp(out, "OK"))
    return -1;
  return 0;
}

/* The rest of a move start_slot_move() began: the keys, then the owner. */
static int finish_slot_move(int slot, int from, int to) {
  char tid[64], out[8192];
  node_id(to, tid, sizeof tid);
  int moved = 0;
  for (int round = 0; round < 100; round++) {
    th_redis_cli(&cl.node[from], out, sizeof out, "CLUSTER GETKEYSINSLOT %d 100", slot);
    if (!out[0]) break;
    char keys[8192] = "";
    size_t off = 0;
    for (char *k = strtok(out, "\n"); k; k = strtok(NULL, "\n")) {
      off += (size_t)snprintf(keys + off, sizeof keys - off, " '%s'", k);
      moved++;
    }
    char res[256];
    th_redis_cli(&cl.node[from], res, sizeof res, "MIGRATE 127.0.0.1 %d \"\" 0 5000 KEYS%s", cl.node[to].port, keys);
    th_sleep_ms(20); /* let the contenders act between batches */
  }
  /* The destination first, as redis-cli does: then no node sends clients back. */
  th_redis_cli(&cl.node[to], out, sizeof out, "CLUSTER SETSLOT %d NODE %s", slot, tid);
  th_redis_cli(&cl.node[from], out, sizeof out, "CLUSTER SETSLOT %d NODE %s", slot, tid);
  for (int i = 0; i < cl.masters; i++)
    if (i != from && i != to) th_redis_cli(&cl.node[i], out, sizeof out, "CLUSTER SETSLOT %d NODE %s", slot, tid);
  return moved;
}

static int move_slot(int slot, int from, int to) {
  return start_slot_move(slot, from, to) ? -1 : finish_slot_move(slot, from, to);
}

TEST(four_processes_keep_the_counter_exact_while_the_lock_slot_moves) {
  counter_lock = "t:reshard";
  reset_counter();
  int slot = dlock__cluster_slot(counter_lock, strlen(counter_lock));
  /* The contenders run until the slot has moved 8 times (bounded: 5000 rounds each). */
  snprintf(stop_path, sizeof stop_path, "%s/stop", cl.node[0].dir);
  unlink(stop_path);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = th_spawn(increment_unguarded, (void *)(intptr_t)5000);
  int moves = 0, keys_moved = 0, running = PROCS;
  int st[PROCS];
  for (int i = 0; i < PROCS; i++) st[i] = -2;
  long long end = th_now_ms() + 240000;
  /* Move the slot around the masters until the contenders are done (at most 8 moves). */
  while (running > 0 && th_now_ms() < end) {
    if (moves < 8) {
      th_sleep_ms(150);
      int from = th_cluster_owner(&cl, counter_lock);
      ASSERT(from >= 0);
      int to = (from + 1) % cl.masters;
      int k = move_slot(slot, from, to);
      ASSERT(k >= 0);
      keys_moved += k;
      moves++;
    } else {
      FILE *f = fopen(stop_path, "w");
      if (f) fclose(f);
      th_sleep_ms(50);
    }
    for (int i = 0; i < PROCS; i++)
      if (st[i] == -2 && waitpid(pids[i], &st[i], WNOHANG) == pids[i]) running--;
  }
  FILE *stop = fopen(stop_path, "w");
  if (stop) fclose(stop);
  for (int i = 0; i < PROCS; i++)
    if (st[i] == -2) st[i] = th_wait(pids[i], 60000);
  for (int i = 0; i < PROCS; i++) {
    ASSERT(st[i] != -1 && WIFEXITED(st[i]));
    ASSERT_EQ(WEXITSTATUS(st[i]), 0);
  }
  long total = 0;
  for (int i = 0; i < PROCS; i++) {
    char path[600];
    snprintf(path, sizeof path, "%s.%d", stop_path, (int)pids[i]);
    long n = read_counter(path);
    ASSERT(n > 0); /* every contender got the lock */
    total += n;
  }
  stop_path[0] = '\0';
  ASSERT(moves >= 8);     /* the contenders were still running during all moves */
  ASSERT(keys_moved > 0); /* the lock's keys travelled with the slot */
  ASSERT_EQ(read_counter(counter_path), total);
  counter_lock = "t:counter";
}

TEST(a_waiter_is_still_woken_by_the_hand_off_after_its_slot_moved) {
  const char *name = "t:moved-wake";
  int slot = dlock__cluster_slot(name, strlen(name));
  dlock_client *c1 = test_client(cl.url), *c2 = test_client(cl.url);
  ASSERT(c1 && c2);
  dlock_mutex *a = test_mutex(c1, name, 0), *b = test_mutex(c2, name, 0);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  struct other_thread t = {b, -99, 0};
  pthread_t th;
  long long started = th_now_ms();
  pthread_create(&th, NULL, acquire_in_thread, &t);
  th_sleep_ms(300); /* the waiter is queued and subscribed on the slot's master */
  int from = th_cluster_owner(&cl, name);
  ASSERT(from >= 0);
  ASSERT(move_slot(slot, from, (from + 1) % cl.masters) > 0);
  ASSERT_EQ(th_cluster_owner(&cl, name), (from + 1) % cl.masters);
  /* The old master ended the subscription (sunsubscribe); the waiter's client
   * subscribes again on the new owner. Release just after the waiter's first
   * re-check (2 s after it queued), so that its next one is ~2 s away. */
  long long release_at = started + 2300 * th_time_factor();
  if (th_now_ms() < release_at) th_sleep_ms((long)(release_at - th_now_ms()));
  long long released = th_now_ms();
  ASSERT_OK(dlock_mutex_release(a));
  pthread_join(th, NULL);
  ASSERT_OK(t.rc);
  if (t.acquired_at - released >= 1000 * th_time_factor())
    TEST_FAIL("the waiter took %lld ms after the release", t.acquired_at - released);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

/* While a slot migrates, a script whose keys are partly moved (or, here,
 * partly there: the fence counter is, the lock key is not) is answered
 * TRYAGAIN: it did not run. A waiting acquire goes on through it for its
 * whole wait, even past the command timeout (each call's own retries end
 * there); before, the first call's TRYAGAIN ended the wait (a 4-process
 * run saw it at load 25 while the lock's slot moved). */
TEST(a_waiting_acquire_goes_on_through_a_slot_migration_longer_than_a_command) {
  const char *name = "t:tryagain";
  int slot = dlock__cluster_slot(name, strlen(name));
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = cl.url;
  o.command_timeout_ms = 300;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client: %s", dlock_last_error());
  dlock_mutex *m = test_mutex(c, name, 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0)); /* the fence counter exists now */
  ASSERT_OK(dlock_mutex_release(m));
  int from = th_cluster_owner(&cl, name);
  ASSERT(from >= 0);
  int to = (from + 1) % cl.masters;
  ASSERT_OK(start_slot_move(slot, from, to));
  struct other_thread t = {m, -99, 0};
  pthread_t th;
  pthread_create(&th, NULL, acquire_in_thread, &t);
  th_sleep_ms(1500); /* five command timeouts of TRYAGAIN */
  ASSERT(finish_slot_move(slot, from, to) > 0);
  pthread_join(th, NULL);
  if (t.rc != 0) TEST_FAIL("the waiting acquire ended with %s: %s", dlock_err_name(t.rc), dlock_mutex_errmsg(m));
  ASSERT_EQ(th_cluster_owner(&cl, name), to);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(names_and_prefixes_whose_keys_would_span_slots_are_refused) {
  dlock_client *c = test_client(cl.url);
  ASSERT(c);
  dlock_mutex *m = NULL;
  ASSERT_STATUS(dlock_mutex_new(&m, c, "orders{1}", NULL), DLOCK_ENAME);
  ASSERT_CONTAINS(dlock_last_error(), "hash tags");
  dlock_client_free(c);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = cl.url;
  o.key_prefix = "app{x}:";
  c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_ENAME);
  ASSERT_CONTAINS(dlock_last_error(), "key prefix");
}

/* ---- A master failover during a hold ---- */

static atomic_int lost_reason = -1;

static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m;
  (void)name;
  (void)arg;
  atomic_store(&lost_reason, (int)reason);
}

TEST(a_master_failover_during_a_hold_is_followed_and_a_lost_hold_is_reported) {
  /* Its own cluster, with a replica per master. */
  ASSERT_EQ(th_cluster_start(&fc, 3, 1), 0);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = fc.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    th_cluster_stop(&fc);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 8000 * th_time_factor(); /* renewed every third: outlives the failover */
  mo.on_lost = on_lost;
  dlock_mutex *m = NULL, *kept = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "t:failover", &mo));
  atomic_store(&lost_reason, -1);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t fence1 = dlock_mutex_fence(m);
  /* A second lock on the same slot ("{t:failover}" hash tag is the name
   * itself, so pick a name with the same slot by search). */
  int slot = dlock__cluster_slot("t:failover", 10);
  char twin[32] = "";
  for (int i = 0; i < 200000 && !twin[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "t:fo:%d", i);
    if (dlock__cluster_slot(name, strlen(name)) == slot) snprintf(twin, sizeof twin, "%s", name);
  }
  ASSERT(twin[0]);
  dlock_mutex_options ko;
  dlock_mutex_options_init(&ko);
  ko.watchdog_lease_ms = mo.watchdog_lease_ms;
  ASSERT_OK(dlock_mutex_new(&kept, c, twin, &ko));
  ASSERT_OK(dlock_mutex_acquire(kept, 0));

  int owner = th_cluster_owner(&fc, "t:failover");
  ASSERT(owner >= 0 && owner < 3);
  th_sleep_ms(300); /* replication on loopback is quick; let the replica have the keys */
  /* Kill the master: its replica is promoted after the node timeout. */
  kill(fc.node[owner].pid, SIGKILL);
  waitpid(fc.node[owner].pid, NULL, 0);
  fc.node[owner].pid = 0;
  int promoted = -1;
  for (long long end = th_now_ms() + 20000 * th_time_factor(); th_now_ms() < end && promoted < 0;) {
    int o2 = th_cluster_owner(&fc, "t:failover");
    if (o2 >= 0 && o2 != owner)
      promoted = o2;
    else
      th_sleep_ms(100);
  }
  ASSERT(promoted >= 0);
  /* The replica had our keys: both holds survive, renewed on the new master. */
  th_sleep_ms(mo.watchdog_lease_ms / 2);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  ASSERT_EQ(dlock_mutex_lost(kept), DLOCK_LOST_NONE);
  /* Now the write the replica "missed": the new master does not hold our
   * token. The watchdog's next renewal finds it and says why. */
  char out[64];
  ASSERT_EQ(th_redis_cli(&fc.node[promoted], out, sizeof out, "DEL t:failover"), 0);
  long long end = th_now_ms() + mo.watchdog_lease_ms;
  while (atomic_load(&lost_reason) < 0 && th_now_ms() < end) th_sleep_ms(50);
  ASSERT_EQ(atomic_load(&lost_reason), DLOCK_LOST_FAILOVER);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_FAILOVER);
  ASSERT_EQ(dlock_mutex_lost(kept), DLOCK_LOST_NONE);
  ASSERT_CONTAINS(dlock_lost_reason_str(DLOCK_LOST_FAILOVER), "failover");
  /* Fences keep rising on the new master. */
  dlock_mutex_release(m);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > fence1);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_mutex_release(kept));
  /* A loss without a failover is still TAKEN/EXPIRED. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_EQ(th_redis_cli(&fc.node[promoted], out, sizeof out, "DEL t:failover"), 0);
  ASSERT_STATUS(dlock_mutex_extend(m, 5000), DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_EXPIRED);
  dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_mutex_free(kept);
  dlock_client_free(c);
  th_cluster_stop(&fc);
}

/* ---- Bad input ---- */

TEST(a_cluster_url_naming_a_standalone_server_is_a_clear_error) {
  static th_redis plain; /* static: the harness keeps a pointer to it */
  ASSERT_EQ(th_redis_start(&plain, NULL), 0);
  char url[128];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", plain.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  th_redis_stop(&plain);
  ASSERT_EQ(rc, DLOCK_ECLUSTER);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", plain.port);
  ASSERT_CONTAINS(msg, where);
  ASSERT_CONTAINS(msg, "not in cluster mode");
  ASSERT_CONTAINS(msg, "cluster-enabled yes");
}

TEST(unreachable_seeds_are_named_and_a_later_seed_is_used) {
  int dead = th_free_port();
  char url[256];
  snprintf(url, sizeof url, "redis-cluster://u:sekrit@127.0.0.1:%d", dead);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 500;
  dlock_client *c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_ECONNECT);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", dead);
  ASSERT_CONTAINS(dlock_last_error(), where);
  ASSERT(!strstr(dlock_last_error(), "sekrit"));
  /* A dead seed first, a live one second: the client connects. */
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", dead, cl.node[1].port);
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex *m = test_mutex(c, "t:seed", 5000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A seed (or a known node) that is not, or no longer, part of the cluster
 * (cluster mode on but no slots: a node restarted with an empty nodes.conf,
 * CLUSTER RESET) is passed over like a dead one: a later live seed gives the
 * map. Before, refresh() stopped at the first ECLUSTER and the connect failed. */
TEST(a_seed_outside_the_cluster_does_not_hide_a_later_live_seed) {
  static th_redis lone; /* static: the harness keeps a pointer to it */
  ASSERT_EQ(th_redis_start(&lone, "cluster-enabled yes\n"), 0);
  char url[256];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", lone.port, cl.node[1].port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&c, &o);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  th_redis_stop(&lone);
  if (rc != 0) TEST_FAIL("connect failed though the second seed is a live cluster node: %s", msg);
  dlock_mutex *m = test_mutex(c, "t:lone-seed", 5000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A command to a frozen (SIGSTOP, hung, blackholed) master times out, and no
 * MOVED ever comes from it: the node is marked suspect, and the next command
 * for its slots reloads the map first (asking the other nodes first), so the
 * promoted replica is found. Before, the reload after the timeout had no time
 * left, asked nobody, and every command went to the frozen node forever. */
static th_cluster fz; /* static: the harness keeps pointers to its nodes */

TEST(a_frozen_masters_failover_is_followed) {
  ASSERT_EQ(th_cluster_start(&fz, 3, 1), 0);
  long f = th_time_factor();
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = fz.url;
  o.command_timeout_ms = (int)(1000 * f);
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    th_cluster_stop(&fz);
    TEST_FAIL("client: %s", dlock_last_error());
  }
  dlock_mutex *m = test_mutex(c, "t:frz", 60000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  int owner = th_cluster_owner(&fz, "t:frz");
  ASSERT(owner >= 0);
  th_sleep_ms(300);
  pid_t frozen = fz.node[owner].pid;
  kill(frozen, SIGSTOP);
  fz.node[owner].pid = 0; /* th_cluster_owner: do not ask the frozen node */
  int promoted = -1;
  for (long long end = th_now_ms() + 20000 * f; th_now_ms() < end && promoted < 0;) {
    int o2 = th_cluster_owner(&fz, "t:frz");
    if (o2 >= 0 && o2 != owner)
      promoted = o2;
    else
      th_sleep_ms(100);
  }
  fz.node[owner].pid = frozen;
  int ok = 0, tries = 0;
  char last[512] = "";
  if (promoted >= 0) {
    for (long long end = th_now_ms() + 10000 * f; th_now_ms() < end && !ok; tries++) {
      int rc = dlock_mutex_acquire(m, 0);
      if (rc == 0)
        ok = 1;
      else
        snprintf(last, sizeof last, "%s", dlock_last_error());
      if (!ok) th_sleep_ms(100);
    }
  }
  kill(frozen, SIGCONT);
  if (ok) dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_cluster_stop(&fz);
  ASSERT(promoted >= 0);
  if (!ok) TEST_FAIL("%d acquires in 10 s after the replica was promoted all failed; last: %s", tries, last);
}

TEST_MAIN()
