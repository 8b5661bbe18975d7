/*
 * review_pg_family.c - the adversarial review of the PostgreSQL semaphore
 * and read-write lock (src/pg/, the lease tables; branch revzkpg): one test
 * per finding, each FAILED on the code as reviewed. Registered as ctest
 * "review/review_pg_family" with the labels "review" and "pg". Every finding
 * is fixed since, and its test runs by default (NEED_PG).
 * Real PostgreSQL through harness_pg.h, public API only (dlock.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness.h"
#include "harness_pg.h"
#include "test.h"

static th_pg srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) { srv_up = th_pg_suite_start(&srv, skip_why, sizeof skip_why); }

void test_teardown(void) {
  if (srv_up) th_pg_stop(&srv);
}

#define NEED_PG()                           \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

static dlock_client *client(const char *schema) {
  dlock_client *c = th_pg_client(&srv, schema, NULL);
  if (!c) TEST_FAIL("client on schema %s: %s", schema, dlock_last_error());
  return c;
}

static dlock_rwlock *rw(dlock_client *c, const char *name, int side, int64_t watchdog_lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = watchdog_lease_ms;
  dlock_rwlock *l = NULL;
  if (dlock_rwlock_new(&l, c, name, side, &mo) != 0) TEST_FAIL("rwlock %s: %s", name, dlock_last_error());
  return l;
}

/* ---- Finding 1: a read "in the shadow" of a write that is gone ----
 *
 * pg_acquire() (src/pg/backend.c) passes p_shadow = true to fam_acquire()
 * (src/pg/pg_sql.c) whenever this thread's write handle on the name is
 * held and not yet seen lost, and fam_acquire() then grants the read without
 * looking at anything ("ok := true"). The core learns a loss only at the
 * watchdog's next renewal; until then a write hold that was force-released
 * (or whose lease ran out) still counts. Another client's writer takes the
 * name, and this thread's read is granted beside it: a reader alongside a
 * writer. (ZooKeeper checks that the shared node still exists.) */
TEST(review_a_read_in_the_shadow_of_a_force_released_write_does_not_join_the_new_writer) {
  NEED_PG();
  dlock_client *a = client("rpf1"), *b = client("rpf1");
  /* A long watchdog lease: the core does not notice the loss for ~20 s. */
  dlock_rwlock *w = rw(a, "doc", DLOCK_RW_WRITE, 60000), *r = rw(a, "doc", DLOCK_RW_READ, 60000);
  dlock_rwlock *w2 = rw(b, "doc", DLOCK_RW_WRITE, 0);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(b, "doc", &was_held));
  ASSERT_EQ(was_held, 1);
  ASSERT_OK(dlock_rwlock_acquire(w2, 0)); /* the name is free: another writer holds it now */
  int rc = dlock_rwlock_acquire(r, 0);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "doc", &info));
  if (rc == 0)
    TEST_FAIL("the read was granted beside another client's writer (readers %lld, writer %d)",
              (long long)info.readers, info.writer);
  ASSERT(rc == DLOCK_EBUSY || rc == DLOCK_ELOST);
  ASSERT_OK(dlock_rwlock_release(w2));
  dlock_rwlock_release(w);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_rwlock_free(w2);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- Finding 2: a mutex and a semaphore on one name, both held ----
 *
 * The mutex's acquire (sql_acquire) checks "no live hold in holds" in its
 * statement's snapshot, without the families row lock; fam_acquire() checks
 * "no live row in locks" after locking the families row, but an uncommitted
 * INSERT into locks is invisible to it and does not block it. Started
 * together on a fresh name, both commit: a mutex and a semaphore permit
 * held at once. docs/postgres.md: "a name is one kind at a time ... at most
 * N permits, ... whatever the interleaving". Up to 400 rounds (or 40 s). */

typedef struct {
  dlock_client *c;
  pthread_barrier_t *go;
  char name[64];
  int rc;
} racer;

static void *race_mutex(void *arg) {
  racer *x = arg;
  dlock_mutex *m = NULL;
  x->rc = -100;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  int ok = dlock_mutex_new(&m, x->c, x->name, &mo) == 0;
  pthread_barrier_wait(x->go);
  if (ok) x->rc = dlock_mutex_acquire(m, 0);
  pthread_barrier_wait(x->go); /* both answered: look, then let go */
  pthread_barrier_wait(x->go);
  if (x->rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  return NULL;
}

static void *race_sem(void *arg) {
  racer *x = arg;
  dlock_semaphore *s = NULL;
  x->rc = -100;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  int ok = dlock_semaphore_new(&s, x->c, x->name, 2, &mo) == 0;
  pthread_barrier_wait(x->go);
  if (ok) x->rc = dlock_semaphore_acquire(s, 0);
  pthread_barrier_wait(x->go);
  pthread_barrier_wait(x->go);
  if (x->rc == 0) dlock_semaphore_release(s);
  dlock_semaphore_free(s);
  return NULL;
}

TEST(review_a_mutex_and_a_semaphore_racing_on_a_fresh_name_never_both_hold) {
  NEED_PG();
  dlock_client *a = client("rpf2"), *b = client("rpf2");
  long long until = th_now_ms() + 40000L * th_time_factor();
  int both = -1, rounds = 0;
  for (int i = 0; i < 400 && th_now_ms() < until && both < 0; i++, rounds++) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    racer rm = {.c = a, .go = &go}, rs = {.c = b, .go = &go};
    snprintf(rm.name, sizeof rm.name, "race-%d", i);
    snprintf(rs.name, sizeof rs.name, "race-%d", i);
    pthread_t tm, ts;
    pthread_create(&tm, NULL, race_mutex, &rm);
    pthread_create(&ts, NULL, race_sem, &rs);
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&go);
    if (rm.rc == 0 && rs.rc == 0) both = i;
    pthread_barrier_wait(&go);
    pthread_join(tm, NULL);
    pthread_join(ts, NULL);
    pthread_barrier_destroy(&go);
  }
  if (both >= 0) TEST_FAIL("round %d of %d: the mutex and the semaphore 'race-%d' were both held", both, rounds, both);
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST_MAIN()
