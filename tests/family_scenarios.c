/*
 * family_scenarios.c - the semaphore and read-write lock scenarios that
 * every backend must pass, written once (test_zk_family.c and
 * test_pg_family.c run them on their servers; the Redis tests have their
 * own, with its queue and hand-off details). Each scenario takes its
 * clients from fam_client_or_null(), which the test file defines; 'space'
 * keeps scenarios apart (a ZooKeeper namespace, a PostgreSQL schema).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "family_scenarios.h"
#include "harness.h"
#include "test.h"

static dlock_client *fam_client(const char *space) {
  dlock_client *c = fam_client_or_null(space);
  if (!c) TEST_FAIL("client on %s: %s", space, dlock_last_error());
  return c;
}

dlock_semaphore *fam_sem(dlock_client *c, const char *name, int permits) {
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, name, permits, NULL) != 0) TEST_FAIL("semaphore %s: %s", name, dlock_last_error());
  return s;
}

dlock_rwlock *fam_rw(dlock_client *c, const char *name, int side) {
  dlock_rwlock *l = NULL;
  if (dlock_rwlock_new(&l, c, name, side, NULL) != 0) TEST_FAIL("rwlock %s: %s", name, dlock_last_error());
  return l;
}

void fam_permits_are_counted_fences_rise_and_status_shows_them(void) {
  dlock_client *c = fam_client("fam1");
  dlock_semaphore *s[3] = {fam_sem(c, "pool", 2), fam_sem(c, "pool", 2), fam_sem(c, "pool", 2)};
  ASSERT_OK(dlock_semaphore_acquire(s[0], 0));
  ASSERT_OK(dlock_semaphore_acquire(s[1], 0));
  ASSERT(dlock_semaphore_fence(s[1]) > dlock_semaphore_fence(s[0]));
  ASSERT_STATUS(dlock_semaphore_acquire(s[2], 0), DLOCK_EBUSY);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "pool", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.permits, 2);
  ASSERT_EQ(info.permits_used, 2);
  ASSERT_OK(dlock_semaphore_release(s[0]));
  ASSERT_OK(dlock_semaphore_acquire(s[2], 0));
  ASSERT(dlock_semaphore_fence(s[2]) > dlock_semaphore_fence(s[1]));
  ASSERT_OK(dlock_semaphore_release(s[1]));
  ASSERT_OK(dlock_semaphore_release(s[2]));
  ASSERT_STATUS(dlock_semaphore_release(s[2]), DLOCK_ENOTHELD);
  for (int i = 0; i < 3; i++) dlock_semaphore_free(s[i]);
  dlock_client_free(c);
}

void fam_a_limit_other_than_the_stored_one_is_an_error_naming_both(void) {
  dlock_client *a = fam_client("fam2"), *b = fam_client("fam2");
  dlock_semaphore *s3 = fam_sem(a, "lim", 3), *s5 = fam_sem(b, "lim", 5);
  ASSERT_OK(dlock_semaphore_acquire(s3, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s5, 0), DLOCK_ELIMIT);
  ASSERT_CONTAINS(dlock_last_error(), "3 permits");
  ASSERT_CONTAINS(dlock_last_error(), "asks for 5");
  ASSERT_OK(dlock_semaphore_release(s3));
  /* The limit goes with the last permit. */
  ASSERT_OK(dlock_semaphore_acquire(s5, 0));
  ASSERT_OK(dlock_semaphore_release(s5));
  dlock_semaphore_free(s3);
  dlock_semaphore_free(s5);
  dlock_client_free(a);
  dlock_client_free(b);
}

void fam_a_name_is_one_kind_of_lock_at_a_time(void) {
  dlock_client *c = fam_client("fam3");
  dlock_semaphore *s = fam_sem(c, "k", 2);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "k", NULL));
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "semaphore");
  dlock_rwlock *r = fam_rw(c, "k", DLOCK_RW_READ);
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_semaphore_release(s));
  /* A mutex's name refuses the semaphore and the read-write lock. */
  dlock_mutex *m2 = NULL;
  ASSERT_OK(dlock_mutex_new(&m2, c, "k2", NULL));
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  dlock_semaphore *s2 = fam_sem(c, "k2", 2);
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "mutex");
  dlock_rwlock *w = fam_rw(c, "k2", DLOCK_RW_WRITE);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_mutex_free(m2);
  dlock_rwlock_free(w);
  dlock_semaphore_free(s2);
  dlock_rwlock_free(r);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

#define ROUNDS 3
struct eight {
  atomic_int inside, max_inside, failed;
};
static struct eight *shared;

static int eight_child(void *arg) {
  int id = (int)(intptr_t)arg;
  dlock_client *c = fam_client_or_null("fam4");
  if (!c) return 10;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "eight", 3, NULL) != 0) return 11;
  for (int r = 0; r < ROUNDS; r++) {
    if (dlock_semaphore_acquire(s, 90000L * th_time_factor()) != 0) {
      fprintf(stderr, "child %d: %s\n", id, dlock_last_error());
      return 12;
    }
    int now = atomic_fetch_add(&shared->inside, 1) + 1;
    int m = atomic_load(&shared->max_inside);
    while (now > m && !atomic_compare_exchange_weak(&shared->max_inside, &m, now)) {}
    th_sleep_ms(300);
    atomic_fetch_sub(&shared->inside, 1);
    if (dlock_semaphore_release(s) != 0) return 13;
  }
  dlock_semaphore_free(s);
  dlock_client_free(c);
  return 0;
}

void fam_eight_processes_on_three_permits_hold_at_most_three_and_reach_three(void) {
  shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(shared != MAP_FAILED);
  memset(shared, 0, sizeof *shared);
  pid_t pid[8];
  for (int i = 0; i < 8; i++) pid[i] = th_spawn(eight_child, (void *)(intptr_t)i);
  for (int i = 0; i < 8; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT(atomic_load(&shared->max_inside) <= 3);
  ASSERT_EQ(atomic_load(&shared->max_inside), 3);
  munmap(shared, sizeof *shared);
}

/* ---- Read-write locks ---- */

/* Acquire on a thread of its own, then release there when told to (a hold
 * belongs to the thread that took it). */
typedef struct rw_waiter {
  dlock_rwlock *l;
  int rc, release_rc;
  atomic_int done, go;
} rw_waiter;

static void *rw_wait(void *arg) {
  rw_waiter *w = arg;
  w->rc = dlock_rwlock_acquire(w->l, 60000L * th_time_factor());
  atomic_store(&w->done, 1);
  for (int i = 0; i < 6000 && !atomic_load(&w->go); i++) th_sleep_ms(10);
  w->release_rc = w->rc ? 0 : dlock_rwlock_release(w->l);
  return NULL;
}

static int64_t waiters_of(dlock_client *c, const char *name) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (dlock_lock_info_get(c, name, &info) != 0) return -1;
  return info.waiters;
}

void fam_readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out(void) {
  dlock_client *a = fam_client("fam6"), *b = fam_client("fam6"), *d = fam_client("fam6");
  dlock_rwlock *r1 = fam_rw(a, "doc", DLOCK_RW_READ), *r2 = fam_rw(b, "doc", DLOCK_RW_READ);
  dlock_rwlock *w = fam_rw(d, "doc", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0)); /* readers overlap */
  uint64_t last_read = dlock_rwlock_fence(r2) > dlock_rwlock_fence(r1) ? dlock_rwlock_fence(r2)
                                                                        : dlock_rwlock_fence(r1);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EBUSY);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "doc", &info));
  ASSERT_EQ(info.rwlock, 1);
  ASSERT_EQ(info.readers, 2);
  ASSERT_EQ(info.writer, 0);
  ASSERT_OK(dlock_rwlock_release(r2));
  /* A writer waits; a reader arriving now waits behind it. */
  rw_waiter ww = {.l = w};
  pthread_t t;
  pthread_create(&t, NULL, rw_wait, &ww);
  for (int i = 0; i < 400 && waiters_of(a, "doc") < 1; i++) th_sleep_ms(25);
  ASSERT_EQ(waiters_of(a, "doc"), 1);
  ASSERT_STATUS(dlock_rwlock_acquire(r2, 300), DLOCK_EBUSY);
  ASSERT_EQ(atomic_load(&ww.done), 0);
  ASSERT_OK(dlock_rwlock_release(r1));
  for (int i = 0; i < 2000 && !atomic_load(&ww.done); i++) th_sleep_ms(10);
  ASSERT_EQ(atomic_load(&ww.done), 1);
  ASSERT_OK(ww.rc);
  ASSERT(dlock_rwlock_fence(w) > last_read); /* above every earlier reader's */
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "doc", &info));
  ASSERT_EQ(info.writer, 1);
  ASSERT_STATUS(dlock_rwlock_acquire(r1, 0), DLOCK_EBUSY); /* the writer holds alone */
  atomic_store(&ww.go, 1);
  pthread_join(t, NULL);
  ASSERT_OK(ww.release_rc);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT(dlock_rwlock_fence(r1) > dlock_rwlock_fence(w));
  ASSERT_OK(dlock_rwlock_release(r1));
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(w);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(d);
}

void fam_upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends(void) {
  dlock_client *a = fam_client("fam7"), *b = fam_client("fam7");
  dlock_rwlock *r = fam_rw(a, "up", DLOCK_RW_READ), *w = fam_rw(a, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EUPGRADE);
  ASSERT_OK(dlock_rwlock_release(r));
  /* A writer takes the read side at once, and a downgrade (release the
   * write side first) keeps other writers out while the read side lasts. */
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  dlock_rwlock *other = fam_rw(b, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_release(w));
  ASSERT_STATUS(dlock_rwlock_acquire(other, 300), DLOCK_EBUSY);
  ASSERT_EQ(dlock_mutex_is_held(dlock_rwlock_mutex(r)), 1);
  ASSERT_OK(dlock_rwlock_release(r));
  ASSERT_OK(dlock_rwlock_acquire(other, 10000L * th_time_factor()));
  ASSERT_OK(dlock_rwlock_release(other));
  dlock_rwlock_free(other);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Mixed readers and writers in four processes: writers update an unguarded
 * counter with a slow read-modify-write; readers check no writer is in. */
#define MIX_ROUNDS 12
struct mix {
  atomic_int writers_in, readers_in, bad;
  long counter; /* plain: only writers touch it */
  atomic_int writes;
};
static struct mix *mix;

static int mix_child(void *arg) {
  int id = (int)(intptr_t)arg;
  dlock_client *c = fam_client_or_null("fam8");
  if (!c) return 10;
  dlock_rwlock *r = NULL, *w = NULL;
  if (dlock_rwlock_new(&r, c, "mix", DLOCK_RW_READ, NULL) || dlock_rwlock_new(&w, c, "mix", DLOCK_RW_WRITE, NULL))
    return 11;
  for (int i = 0; i < MIX_ROUNDS; i++) {
    int write = (i + id) % 3 == 0;
    dlock_rwlock *l = write ? w : r;
    if (dlock_rwlock_acquire(l, 90000L * th_time_factor()) != 0) {
      fprintf(stderr, "child %d: %s\n", id, dlock_last_error());
      return 12;
    }
    if (write) {
      if (atomic_fetch_add(&mix->writers_in, 1) != 0 || atomic_load(&mix->readers_in) != 0)
        atomic_fetch_add(&mix->bad, 1);
      long v = mix->counter;
      th_sleep_ms(20);
      mix->counter = v + 1;
      atomic_fetch_add(&mix->writes, 1);
      atomic_fetch_sub(&mix->writers_in, 1);
    } else {
      atomic_fetch_add(&mix->readers_in, 1);
      if (atomic_load(&mix->writers_in) != 0) atomic_fetch_add(&mix->bad, 1);
      th_sleep_ms(20);
      atomic_fetch_sub(&mix->readers_in, 1);
    }
    if (dlock_rwlock_release(l) != 0) return 13;
  }
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_client_free(c);
  return 0;
}

void fam_mixed_readers_and_writers_keep_a_writers_only_counter_exact(void) {
  mix = mmap(NULL, sizeof *mix, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(mix != MAP_FAILED);
  memset(mix, 0, sizeof *mix);
  pid_t pid[4];
  for (int i = 0; i < 4; i++) pid[i] = th_spawn(mix_child, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(atomic_load(&mix->bad), 0);
  ASSERT(atomic_load(&mix->writes) > 0);
  ASSERT_EQ(mix->counter, (long)atomic_load(&mix->writes));
  munmap(mix, sizeof *mix);
}


/* A semaphore waiter that gives up (its wait ends, or it is canceled)
 * leaves nothing queued, and the permit goes on as if it never came. */
typedef struct sem_waiter {
  dlock_semaphore *s;
  int rc;
  atomic_int done;
} sem_waiter;

static void *sem_wait_forever(void *arg) {
  sem_waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->s, DLOCK_WAIT_FOREVER);
  atomic_store(&w->done, 1);
  if (w->rc == 0) dlock_semaphore_release(w->s);
  return NULL;
}

void fam_a_waiter_that_gives_up_or_is_canceled_leaves_nothing_queued(void) {
  dlock_client *a = fam_client("fam11"), *b = fam_client("fam11");
  dlock_semaphore *held = fam_sem(a, "giveup", 1), *late = fam_sem(b, "giveup", 1);
  ASSERT_OK(dlock_semaphore_acquire(held, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(late, 400), DLOCK_EBUSY);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "giveup", &info));
  ASSERT_EQ(info.permits_used, 1);
  ASSERT_EQ(info.waiters, 0);
  sem_waiter w = {.s = late};
  pthread_t t;
  pthread_create(&t, NULL, sem_wait_forever, &w);
  for (int i = 0; i < 400 && waiters_of(a, "giveup") < 1; i++) th_sleep_ms(25);
  ASSERT_EQ(waiters_of(a, "giveup"), 1);
  dlock_semaphore_cancel(late);
  pthread_join(t, NULL);
  ASSERT_STATUS(w.rc, DLOCK_ECANCELED);
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "giveup", &info));
  ASSERT_EQ(info.waiters, 0);
  ASSERT_EQ(info.permits_used, 1);
  ASSERT_OK(dlock_semaphore_release(held));
  ASSERT_OK(dlock_semaphore_acquire(late, 0)); /* nobody queued ahead any more */
  ASSERT_OK(dlock_semaphore_release(late));
  dlock_semaphore_free(held);
  dlock_semaphore_free(late);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- Every kind on one name of a deployment (Sentinel, Cluster) ---- */

/* The test files of the family scenarios define it; others get none. */
__attribute__((weak)) dlock_client *fam_client_or_null(const char *space) {
  (void)space;
  return NULL;
}

static void *sem_wait_then_keep(void *arg) {
  sem_waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->s, 30000L * th_time_factor());
  atomic_store(&w->done, 1);
  return NULL;
}

void fam_every_kind_on(dlock_client *a, dlock_client *b, const char *name) {
  char sem_name[64], rw_name[64], latch_name[64];
  snprintf(sem_name, sizeof sem_name, "%s:sem", name);
  snprintf(rw_name, sizeof rw_name, "%s:rw", name);
  snprintf(latch_name, sizeof latch_name, "%s:latch", name);
  /* Semaphore: two permits, a third caller waits and is woken by a release. */
  dlock_semaphore *s1 = fam_sem(a, sem_name, 2), *s2 = fam_sem(a, sem_name, 2), *s3 = fam_sem(b, sem_name, 2);
  ASSERT_OK(dlock_semaphore_acquire(s1, 0));
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s3, 0), DLOCK_EBUSY);
  sem_waiter w = {.s = s3};
  pthread_t t;
  pthread_create(&t, NULL, sem_wait_then_keep, &w);
  for (int i = 0; i < 400 && waiters_of(a, sem_name) < 1; i++) th_sleep_ms(25);
  ASSERT_OK(dlock_semaphore_release(s1));
  pthread_join(t, NULL);
  ASSERT_OK(w.rc);
  ASSERT(dlock_semaphore_fence(s3) > dlock_semaphore_fence(s2));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, sem_name, &info));
  ASSERT_EQ(info.permits, 2);
  ASSERT_EQ(info.permits_used, 2);
  ASSERT_OK(dlock_semaphore_release(s2));
  dlock_semaphore_free(s1);
  dlock_semaphore_free(s2);
  dlock_semaphore_free(s3); /* releases its permit */
  /* Read-write lock: readers share, a writer waits for them (the writer on
   * the other client: on the readers' own, this thread's read would make
   * its write an upgrade, refused). */
  dlock_rwlock *r1 = fam_rw(a, rw_name, DLOCK_RW_READ), *r2 = fam_rw(a, rw_name, DLOCK_RW_READ);
  dlock_rwlock *wr = fam_rw(b, rw_name, DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(wr, 0), DLOCK_EBUSY);
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, rw_name, &info));
  ASSERT_EQ(info.rwlock, 1);
  ASSERT_EQ(info.readers, 2);
  uint64_t reads = dlock_rwlock_fence(r1) > dlock_rwlock_fence(r2) ? dlock_rwlock_fence(r1) : dlock_rwlock_fence(r2);
  ASSERT_OK(dlock_rwlock_release(r1));
  ASSERT_OK(dlock_rwlock_release(r2));
  ASSERT_OK(dlock_rwlock_acquire(wr, 0));
  ASSERT(dlock_rwlock_fence(wr) > reads);
  ASSERT_STATUS(dlock_rwlock_acquire(r1, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_rwlock_release(wr));
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(wr);
  /* Latch: counted down to zero, a wait returns at once. */
  dlock_latch *l = NULL;
  ASSERT_OK(dlock_latch_new(&l, a, latch_name));
  ASSERT_OK(dlock_latch_set(l, 2, 60000));
  int64_t left = -1;
  ASSERT_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 1);
  ASSERT_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 0);
  ASSERT_OK(dlock_latch_wait(l, 1000));
  dlock_latch_free(l);
}
