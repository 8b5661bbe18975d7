/*
 * review_zk_acl.c - issue 22 item 2: "ZooKeeper ACLs are not applied to
 * dlock's nodes". Every node was created with an open ACL (world:anyone
 * cdrwa), even with ?digest=: a client with no credentials could lower a
 * guard (a stale token was then admitted), delete a holder's lock node (the
 * holder was not told) or create a child that sorts ahead in a lock's
 * queue. Each test FAILED on the code as reviewed (the raw client's delete,
 * setData or create succeeded). Registered as ctest "review/review_zk_acl"
 * with the labels "review" and "zk".
 *
 * A real ZooKeeper server (harness_zk.h); dlock's zk module for the
 * clients with credentials; the attacker is the raw libzookeeper C API with
 * no credentials at all.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static void expect_closed(zhandle_t *zh, const char *path) {
  int zrc = zoo_set(zh, path, "1", 1, -1);
  if (zrc != ZNOAUTH) TEST_FAIL("an unauthenticated setData on %s answered %s, not ZNOAUTH", path, zerror(zrc));
  char child[1200];
  snprintf(child, sizeof child, "%s/_c_00000000-0000-4000-8000-000000000000-lock-0000000000", path);
  zrc = zoo_create(zh, child, "x", 1, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, NULL, 0);
  if (zrc != ZNOAUTH && zrc != ZNOCHILDRENFOREPHEMERALS)
    TEST_FAIL("an unauthenticated create of %s answered %s, not ZNOAUTH", child, zerror(zrc));
  zrc = zoo_delete(zh, path, -1);
  if (zrc == ZOK) TEST_FAIL("an unauthenticated client deleted %s", path);
  zrc = zoo_set_acl(zh, path, -1, &ZOO_OPEN_ACL_UNSAFE);
  if (zrc != ZNOAUTH) TEST_FAIL("an unauthenticated setAcl on %s answered %s, not ZNOAUTH", path, zerror(zrc));
  int perms = world_perms(zh, path, &zrc);
  if (perms < 0) TEST_FAIL("getAcl %s: %s", path, zerror(zrc));
  if (perms & ~ZOO_PERM_READ)
    TEST_FAIL("%s grants world:anyone more than read (perms 0x%x)", path, (unsigned)perms);
}

/* expect_closed() on 'path' and every node below it; how many. */
static int expect_tree_closed(zhandle_t *zh, const char *path, int depth) {
  if (depth > 12) return 0;
  expect_closed(zh, path);
  struct String_vector v;
  int zrc = zoo_get_children(zh, path, 0, &v);
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

#define DIGEST "digest=alice:s3cret"

/* ---- A mutex: its holder's node, its lock path, its queue ---- */

TEST(review_with_a_digest_an_unauthenticated_client_can_neither_delete_nor_write_nor_jump_a_mutex) {
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

TEST(review_with_a_digest_an_unauthenticated_client_cannot_lower_a_guard) {
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

TEST(review_with_a_digest_every_node_dlock_creates_is_closed_to_unauthenticated_clients) {
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
   * a record + run + its node, _dlock_guard + r: 17 nodes, each closed. */
  int n = expect_tree_closed(raw, "/acl3", 0);
  if (n < 17) TEST_FAIL("only %d nodes under /acl3", n);
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

TEST(review_a_digest_client_closes_a_lock_path_and_a_guard_left_open_by_a_client_without_one) {
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
TEST(review_a_digest_client_refuses_an_open_lock_path_it_may_not_close) {
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
