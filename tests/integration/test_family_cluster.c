/*
 * test_family_cluster.c - the multi-lock and the countdown latch on a real
 * 3-master Redis Cluster: a multi-lock whose names live on three masters is
 * taken and released whole, and a busy name on one master leaves nothing
 * held on the others; a latch's waiters are woken by sharded pub/sub in the
 * latch's slot. (Every lock kind on a cluster: tests/conformance/.)
 */
#include <pthread.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_cluster.h"
#include "test.h"

static th_cluster cl;

void test_setup(void) {
  if (th_cluster_start(&cl, 3, 0) != 0) {
    fprintf(stderr, "cannot start a Redis Cluster\n");
    exit(1);
  }
}

void test_teardown(void) { th_cluster_stop(&cl); }

/* Names "mc:<tag>:<i>" until one lives on each of the three masters;
 * names[k] is served by master k's node. */
static void names_on_every_master(char names[3][32]) {
  int found = 0;
  for (int i = 0; i < 1000 && found != 7; i++) {
    char name[32];
    snprintf(name, sizeof name, "mc:%d", i);
    int owner = th_cluster_owner(&cl, name);
    if (owner < 0 || owner > 2 || (found & (1 << owner))) continue;
    snprintf(names[owner], 32, "%s", name);
    found |= 1 << owner;
  }
  if (found != 7) TEST_FAIL("no names found on all three masters");
}

static int held_on_owner(const char *name) {
  char out[64];
  int owner = th_cluster_owner(&cl, name);
  th_redis_cli(&cl.node[owner], out, sizeof out, "EXISTS '%s'", name);
  return atoi(out);
}

TEST(a_multi_lock_across_three_masters_is_all_or_nothing) {
  char names[3][32];
  names_on_every_master(names);
  const char *list[3] = {names[0], names[1], names[2]};
  dlock_client *c = test_client(cl.url);
  dlock_client *other = test_client(cl.url);
  dlock_multi *mm = NULL;
  ASSERT_OK(dlock_multi_new(&mm, c, list, 3, NULL));
  ASSERT_OK(dlock_multi_acquire(mm, 0));
  for (int i = 0; i < 3; i++) {
    ASSERT(dlock_multi_fence(mm, (size_t)i) > 0);
    ASSERT_EQ(held_on_owner(names[i]), 1);
  }
  ASSERT_OK(dlock_multi_release(mm));
  for (int i = 0; i < 3; i++) ASSERT_EQ(held_on_owner(names[i]), 0);

  /* Another client holds the name that comes last in the taking order: the
   * two before it, on the other masters, are given back. */
  const char *last = list[0];
  for (int i = 1; i < 3; i++)
    if (strcmp(list[i], last) > 0) last = list[i];
  dlock_mutex *busy = test_mutex(other, last, 30000);
  ASSERT_OK(dlock_mutex_acquire(busy, 0));
  ASSERT_STATUS(dlock_multi_acquire(mm, 200), DLOCK_EBUSY);
  ASSERT_CONTAINS(dlock_multi_errmsg(mm), last);
  ASSERT_CONTAINS(dlock_multi_errmsg(mm), "(3 of 3");
  for (int i = 0; i < 3; i++)
    if (list[i] != last) ASSERT_EQ(held_on_owner(list[i]), 0);
  ASSERT_EQ(held_on_owner(last), 1); /* the other client's, untouched */
  ASSERT_OK(dlock_mutex_release(busy));
  ASSERT_OK(dlock_multi_acquire(mm, 0));
  ASSERT_OK(dlock_multi_release(mm));
  dlock_mutex_free(busy);
  dlock_multi_free(mm);
  dlock_client_free(other);
  dlock_client_free(c);
}

typedef struct waitarg {
  dlock_latch *l;
  int rc;
  long long woke_at;
} waitarg;

static void *waiter(void *arg) {
  waitarg *w = arg;
  w->rc = dlock_latch_wait(w->l, 30000 * th_time_factor());
  w->woke_at = th_now_ms();
  return NULL;
}

TEST(latch_waiters_on_every_master_are_woken_by_sharded_pubsub) {
  char names[3][32];
  names_on_every_master(names);
  dlock_client *c = test_client(cl.url);
  dlock_client *w = test_client(cl.url);
  dlock_latch *setter[3], *waiting[3];
  waitarg wa[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(dlock_latch_new(&setter[i], c, names[i]));
    ASSERT_OK(dlock_latch_new(&waiting[i], w, names[i]));
    ASSERT_OK(dlock_latch_set(setter[i], 1, 60000));
  }
  long long began = th_now_ms();
  for (int i = 0; i < 3; i++) {
    wa[i] = (waitarg){waiting[i], 1, 0};
    pthread_create(&t[i], NULL, waiter, &wa[i]);
  }
  /* Just after the waiters' first re-check (every 2 s): a waiter that
   * missed the message would wake about 1.8 s late. */
  th_sleep_ms(began + 2200 - th_now_ms());
  long long down_at[3];
  for (int i = 0; i < 3; i++) {
    int64_t left = -1;
    ASSERT_OK(dlock_latch_count_down(setter[i], &left));
    down_at[i] = th_now_ms();
    ASSERT_EQ(left, 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    ASSERT_OK(wa[i].rc);
    long long late = wa[i].woke_at - down_at[i];
    if (late > 1000 * th_time_factor()) TEST_FAIL("waiter on '%s' woke %lld ms after zero", names[i], late);
  }
  for (int i = 0; i < 3; i++) {
    dlock_latch_free(setter[i]);
    dlock_latch_free(waiting[i]);
  }
  dlock_client_free(w);
  dlock_client_free(c);
}

TEST_MAIN()
