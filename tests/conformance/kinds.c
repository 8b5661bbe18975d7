/*
 * kinds.c - the contract of every lock kind other than the mutex, on every
 * backend that offers it (the conformance suite, docs/conformance.md):
 * semaphores, read-write locks, countdown latches. A backend that does not
 * offer a kind refuses its _new with the documented "not offered" error
 * (conf_sem, conf_rw, conf_latch). Handles come from cleanup.c; forked
 * children make and free their own.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "conformance.h"
#include "harness.h"
#include "test.h"

static void permits_are_counted_fences_rise_and_status_shows_them(void) {
  dlock_client *c = conf_client("fam1");
  dlock_semaphore *s[3] = {conf_sem(c, "pool", 2), conf_sem(c, "pool", 2), conf_sem(c, "pool", 2)};
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
}

static void a_limit_other_than_the_stored_one_is_an_error_naming_both(void) {
  dlock_client *a = conf_client("fam2"), *b = conf_client("fam2");
  dlock_semaphore *s3 = conf_sem(a, "lim", 3), *s5 = conf_sem(b, "lim", 5);
  ASSERT_OK(dlock_semaphore_acquire(s3, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s5, 0), DLOCK_ELIMIT);
  /* Both limits named; the wording is the backend's ("the limit 3", "3 permits"). */
  const char *e = dlock_last_error();
  if (!(strstr(e, "3 permits") || strstr(e, "limit 3")) || !strstr(e, "for 5"))
    TEST_FAIL("the error does not name the stored limit 3 and the asked 5: %s", e);
  ASSERT_OK(dlock_semaphore_release(s3));
  /* The limit goes with the last permit. */
  ASSERT_OK(dlock_semaphore_acquire(s5, 0));
  ASSERT_OK(dlock_semaphore_release(s5));
}

static void a_name_is_one_kind_of_lock_at_a_time(void) {
  dlock_client *c = conf_client("fam3");
  dlock_semaphore *s = conf_sem(c, "k", 2);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  dlock_mutex *m = conf_mutex(c, "k", NULL);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "semaphore");
  dlock_rwlock *r = conf_rw(c, "k", DLOCK_RW_READ);
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_semaphore_release(s));
  /* A mutex's name refuses the semaphore and the read-write lock. */
  dlock_mutex *m2 = conf_mutex(c, "k2", NULL);
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  dlock_semaphore *s2 = conf_sem(c, "k2", 2);
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_last_error(), "mutex");
  dlock_rwlock *w = conf_rw(c, "k2", DLOCK_RW_WRITE);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_mutex_release(m2));
}

#define ROUNDS 3
struct eight {
  atomic_int inside, max_inside, failed;
};
static struct eight *shared;

static int eight_child(void *arg) {
  int id = (int)(intptr_t)arg;
  shared = conf_shared(sizeof *shared);
  dlock_client *c = conf_fx->client("fam4");
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
    while (now > m && !atomic_compare_exchange_weak(&shared->max_inside, &m, now)) {
    }
    th_sleep_ms(300);
    atomic_fetch_sub(&shared->inside, 1);
    if (dlock_semaphore_release(s) != 0) return 13;
  }
  dlock_semaphore_free(s);
  dlock_client_free(c);
  return 0;
}

static void eight_processes_on_three_permits_hold_at_most_three_and_reach_three(void) {
  /* Offered here? Asked before any child starts, so that a refusal ends
   * the scenario as "not offered". */
  dlock_client *probe = conf_client("fam4");
  conf_free(conf_sem(probe, "eight", 3));
  conf_free(probe);
  shared = conf_shared(sizeof *shared);
  pid_t pid[8];
  for (int i = 0; i < 8; i++) pid[i] = conf_spawn(eight_child, i);
  for (int i = 0; i < 8; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT(atomic_load(&shared->max_inside) <= 3);
  ASSERT_EQ(atomic_load(&shared->max_inside), 3);
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

static void readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out(void) {
  dlock_client *a = conf_client("fam6"), *b = conf_client("fam6"), *d = conf_client("fam6");
  dlock_rwlock *r1 = conf_rw(a, "doc", DLOCK_RW_READ), *r2 = conf_rw(b, "doc", DLOCK_RW_READ);
  dlock_rwlock *w = conf_rw(d, "doc", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0)); /* readers overlap */
  uint64_t last_read =
      dlock_rwlock_fence(r2) > dlock_rwlock_fence(r1) ? dlock_rwlock_fence(r2) : dlock_rwlock_fence(r1);
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
  ASSERT(conf_wait_waiters(a, "doc", 1, 10000L * th_time_factor()));
  ASSERT_EQ(conf_waiters(a, "doc"), 1);
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
}

static void upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends(void) {
  dlock_client *a = conf_client("fam7"), *b = conf_client("fam7");
  dlock_rwlock *r = conf_rw(a, "up", DLOCK_RW_READ), *w = conf_rw(a, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EUPGRADE);
  ASSERT_OK(dlock_rwlock_release(r));
  /* A writer takes the read side at once, and a downgrade (release the
   * write side first) keeps other writers out while the read side lasts. */
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  dlock_rwlock *other = conf_rw(b, "up", DLOCK_RW_WRITE);
  ASSERT_OK(dlock_rwlock_release(w));
  ASSERT_STATUS(dlock_rwlock_acquire(other, 300), DLOCK_EBUSY);
  ASSERT_EQ(dlock_mutex_is_held(dlock_rwlock_mutex(r)), 1);
  ASSERT_OK(dlock_rwlock_release(r));
  ASSERT_OK(dlock_rwlock_acquire(other, 10000L * th_time_factor()));
  ASSERT_OK(dlock_rwlock_release(other));
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
  mix = conf_shared(sizeof *mix);
  dlock_client *c = conf_fx->client("fam8");
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

static void mixed_readers_and_writers_keep_a_writers_only_counter_exact(void) {
  dlock_client *probe = conf_client("fam8"); /* as above */
  conf_free(conf_rw(probe, "mix", DLOCK_RW_WRITE));
  conf_free(probe);
  mix = conf_shared(sizeof *mix);
  pid_t pid[4];
  for (int i = 0; i < 4; i++) pid[i] = conf_spawn(mix_child, i);
  for (int i = 0; i < 4; i++) {
    int st = th_wait(pid[i], 180000L * th_time_factor());
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  ASSERT_EQ(atomic_load(&mix->bad), 0);
  ASSERT(atomic_load(&mix->writes) > 0);
  ASSERT_EQ(mix->counter, (long)atomic_load(&mix->writes));
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

static void a_waiter_that_gives_up_or_is_canceled_leaves_nothing_queued(void) {
  dlock_client *a = conf_client("fam11"), *b = conf_client("fam11");
  dlock_semaphore *held = conf_sem(a, "giveup", 1), *late = conf_sem(b, "giveup", 1);
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
  ASSERT(conf_wait_waiters(a, "giveup", 1, 10000L * th_time_factor()));
  ASSERT_EQ(conf_waiters(a, "giveup"), 1);
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
}

/* ---- A semaphore's waiter woken by a release ---- */

static void *sem_wait_then_keep(void *arg) {
  sem_waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->s, 30000L * th_time_factor());
  atomic_store(&w->done, 1);
  return NULL;
}

static void a_release_wakes_the_semaphore_waiter_with_a_higher_fence(void) {
  dlock_client *a = conf_client("kinds"), *b = conf_client("kinds");
  dlock_semaphore *s1 = conf_sem(a, "sem", 2), *s2 = conf_sem(a, "sem", 2), *s3 = conf_sem(b, "sem", 2);
  ASSERT_OK(dlock_semaphore_acquire(s1, 0));
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  ASSERT_STATUS(dlock_semaphore_acquire(s3, 0), DLOCK_EBUSY);
  sem_waiter w = {.s = s3};
  pthread_t t;
  pthread_create(&t, NULL, sem_wait_then_keep, &w);
  int queued = conf_wait_waiters(a, "sem", 1, 10000L * th_time_factor());
  ASSERT_OK(dlock_semaphore_release(s1));
  pthread_join(t, NULL);
  ASSERT(queued);
  ASSERT_OK(w.rc);
  ASSERT(dlock_semaphore_fence(s3) > dlock_semaphore_fence(s2));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "sem", &info));
  ASSERT_EQ(info.permits, 2);
  ASSERT_EQ(info.permits_used, 2);
  ASSERT_OK(dlock_semaphore_release(s2));
  conf_free(s3); /* releases its permit */
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(a, "sem", &info));
  ASSERT_EQ(info.permits_used, 0);
}

/* ---- Countdown latch ---- */

typedef struct latch_waiter {
  dlock_latch *l;
  int rc;
} latch_waiter;

static void *latch_wait(void *arg) {
  latch_waiter *w = arg;
  w->rc = dlock_latch_wait(w->l, 30000L * th_time_factor());
  return NULL;
}

static void a_latch_counted_down_to_zero_wakes_its_waiter(void) {
  dlock_client *a = conf_client("kinds"), *b = conf_client("kinds");
  dlock_latch *l = conf_latch(a, "latch"), *other = conf_latch(b, "latch");
  int64_t left = -1;
  ASSERT_STATUS(dlock_latch_count(other, &left), DLOCK_ENOLATCH); /* never set */
  ASSERT_OK(dlock_latch_set(l, 2, 60000));
  ASSERT_STATUS(dlock_latch_set(other, 2, 60000), DLOCK_EBUSY); /* counting */
  ASSERT_STATUS(dlock_latch_wait(other, 0), DLOCK_EBUSY);
  latch_waiter w = {.l = other, .rc = 1};
  pthread_t t;
  pthread_create(&t, NULL, latch_wait, &w);
  ASSERT_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 1);
  ASSERT_OK(dlock_latch_count_down(l, &left));
  ASSERT_EQ(left, 0);
  pthread_join(t, NULL);
  ASSERT_OK(w.rc);
  ASSERT_OK(dlock_latch_count(other, &left));
  ASSERT_EQ(left, 0);
}

#define SCENARIO(fn) \
  { #fn, fn }
const conf_scenario conf_kinds[] = {
    SCENARIO(permits_are_counted_fences_rise_and_status_shows_them),
    SCENARIO(a_limit_other_than_the_stored_one_is_an_error_naming_both),
    SCENARIO(a_name_is_one_kind_of_lock_at_a_time),
    SCENARIO(eight_processes_on_three_permits_hold_at_most_three_and_reach_three),
    SCENARIO(a_waiter_that_gives_up_or_is_canceled_leaves_nothing_queued),
    SCENARIO(a_release_wakes_the_semaphore_waiter_with_a_higher_fence),
    SCENARIO(readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out),
    SCENARIO(upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends),
    SCENARIO(mixed_readers_and_writers_keep_a_writers_only_counter_exact),
    SCENARIO(a_latch_counted_down_to_zero_wakes_its_waiter),
};
const size_t conf_kinds_len = sizeof conf_kinds / sizeof conf_kinds[0];
