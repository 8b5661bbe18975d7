/*
 * test_watchdog.c - the watchdog's heaps (issue 30, item 3): many holds of
 * one client with mixed leases, taken at different moments, are all renewed
 * each on its own schedule (none lost, none renewed much more often than a
 * third of its lease), and the fixed-lease holds among them are lost at their
 * own deadlines, in deadline order, even those an extend moved earlier or later.
 * One redis-server for the file.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
}

void test_teardown(void) { th_redis_stop(&srv); }

static long evalsha_calls(void) {
  char out[8192];
  if (th_redis_cli(&srv, out, sizeof out, "INFO commandstats") != 0) return -1;
  const char *p = strstr(out, "cmdstat_evalsha:calls=");
  return p ? strtol(p + strlen("cmdstat_evalsha:calls="), NULL, 10) : 0;
}

typedef struct loss {
  atomic_int calls;
  atomic_llong at; /* dlock_mono_now() in the callback */
} loss;

static void on_lost(dlock_mutex *m, const char *name, dlock_lost_reason reason, void *arg) {
  (void)m, (void)name, (void)reason;
  loss *l = arg;
  atomic_store(&l->at, (long long)dlock_mono_now());
  atomic_fetch_add(&l->calls, 1);
}

#define RENEWED 600 /* watchdog holds */
#define WATCHED 60  /* fixed-lease holds */

/* ThreadSanitizer slows the watchdog's thread several times over, and CI
 * runs its stage beside the ASan one: 600 holds on 2 s leases were then
 * lost, as they should be on a starved machine. The leases scale there. */
#if defined(__SANITIZE_THREAD__)
#define SANITIZER_SLOWDOWN 3
#else
#define SANITIZER_SLOWDOWN 1
#endif

TEST(many_holds_with_mixed_leases_are_each_renewed_on_time_and_the_fixed_ones_lost_in_deadline_order) {
  long f = th_time_factor() * SANITIZER_SLOWDOWN;
  static const int64_t leases[] = {2000, 2600, 3400, 4600, 6200}; /* watchdog leases, times f */
  dlock_client *c = test_client(srv.url);
  static dlock_mutex *held[RENEWED], *fixed[WATCHED];
  static loss lost_fixed[WATCHED], lost_renewed[RENEWED];
  static int64_t lease_of[RENEWED];
  static dlock_mono_ms first_until[RENEWED], last_until[RENEWED];
  static int advances[RENEWED];
  static dlock_mono_ms fixed_until[WATCHED];
  memset(lost_fixed, 0, sizeof lost_fixed);
  memset(lost_renewed, 0, sizeof lost_renewed);

  /* Taken in three waves, a little apart, so that renewals of the same lease
   * fall at different moments, with the fixed leases in between. */
  int nf = 0;
  for (int i = 0; i < RENEWED; i++) {
    if (i % (RENEWED / 3) == 0 && i) th_sleep_ms(150 * f);
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.lease_ms = 0;
    mo.watchdog_lease_ms = lease_of[i] = leases[(i * 7) % 5] * f;
    mo.on_lost = on_lost;
    mo.on_lost_arg = &lost_renewed[i];
    char name[64];
    snprintf(name, sizeof name, "t:wd:r%d", i);
    ASSERT_OK(dlock_mutex_new(&held[i], c, name, &mo));
    ASSERT_OK(dlock_mutex_acquire(held[i], 0));
    first_until[i] = last_until[i] = dlock_mutex_valid_until(held[i]);
    if (i % (RENEWED / WATCHED) == 0 && nf < WATCHED) {
      /* Fixed leases from 1.2 s to 4.2 s, not in the order they are taken. */
      dlock_mutex_options_init(&mo);
      mo.lease_ms = (1200 + (int64_t)((nf * 37) % WATCHED) * 50) * f;
      mo.on_lost = on_lost;
      mo.on_lost_arg = &lost_fixed[nf];
      snprintf(name, sizeof name, "t:wd:f%d", nf);
      ASSERT_OK(dlock_mutex_new(&fixed[nf], c, name, &mo));
      ASSERT_OK(dlock_mutex_acquire(fixed[nf], 0));
      /* An extend moves a deadline earlier (the heap's key must go down) or
       * later (the old key comes early and is read again). */
      if (nf < 10) ASSERT_OK(dlock_mutex_extend(fixed[nf], (900 + 40 * nf) * f));
      if (nf >= 10 && nf < 20) ASSERT_OK(dlock_mutex_extend(fixed[nf], (4000 + 40 * nf) * f));
      fixed_until[nf] = dlock_mutex_valid_until(fixed[nf]);
      nf++;
    }
  }
  ASSERT_EQ(nf, WATCHED);

  long calls0 = evalsha_calls();
  ASSERT(calls0 >= 0);
  long long t0 = th_now_ms(), run = 6000 * f;
  /* Sample every hold's deadline: it moves on at each renewal and must
   * never be reached. */
  for (int step = 0; step < 100000 && th_now_ms() < t0 + run; step++) {
    th_sleep_ms(40);
    dlock_mono_ms now = dlock_mono_now();
    for (int i = 0; i < RENEWED; i++) {
      dlock_mono_ms until = dlock_mutex_valid_until(held[i]);
      if (dlock_mutex_lost(held[i]) != DLOCK_LOST_NONE || until <= now)
        TEST_FAIL("hold %d (watchdog lease %lld ms) lost after %lld ms: %s", i, (long long)lease_of[i],
                  th_now_ms() - t0, dlock_lost_reason_str(dlock_mutex_lost(held[i])));
      if (until > last_until[i]) advances[i]++;
      last_until[i] = until;
    }
  }
  double wall = (double)(th_now_ms() - t0);
  long calls = evalsha_calls() - calls0;

  /* Each renewed at least a third as often as a third of its lease implies
   * (a busy machine may delay the watchdog, never by a whole lease). */
  double expected = 0;
  for (int i = 0; i < RENEWED; i++) {
    double due = wall / ((double)lease_of[i] / 3);
    expected += due;
    if (advances[i] < (int)(due / 3) || last_until[i] <= first_until[i])
      TEST_FAIL("hold %d (lease %lld ms) renewed %d times in %.0f ms, expected about %.1f", i, (long long)lease_of[i],
                advances[i], wall, due);
    ASSERT_EQ(atomic_load(&lost_renewed[i].calls), 0);
  }
  /* No renewal storm: every renewal is one script call, and none comes much
   * before a third of its lease (a twelfth early at most, to share a batch). */
  if (calls < expected / 2 || calls > expected * 1.6)
    TEST_FAIL("%ld renewal scripts in %.0f ms; expected about %.0f", calls, wall, expected);

  /* The fixed leases (all past their deadline by now but two: at most 4.8 s
   * from the acquire) are lost at their own deadline, not before, and the
   * callbacks came in deadline order. */
  long long late_max = 2000 * f;
  for (int i = 0; i < WATCHED; i++) {
    long long wait_until = th_now_ms() + 5000 * f;
    while (atomic_load(&lost_fixed[i].calls) == 0 && th_now_ms() < wait_until) th_sleep_ms(20);
    ASSERT_EQ(atomic_load(&lost_fixed[i].calls), 1);
    long long at = atomic_load(&lost_fixed[i].at);
    if (at < fixed_until[i] || at > fixed_until[i] + late_max)
      TEST_FAIL("fixed hold %d: deadline %lld, callback at %lld (%+lld ms)", i, (long long)fixed_until[i], at,
                at - (long long)fixed_until[i]);
    ASSERT_EQ(dlock_mutex_lost(fixed[i]), DLOCK_LOST_DEADLINE);
  }
  for (int i = 0; i < WATCHED; i++)
    for (int j = 0; j < WATCHED; j++)
      if (fixed_until[i] + 300 * f < fixed_until[j] && atomic_load(&lost_fixed[i].at) > atomic_load(&lost_fixed[j].at))
        TEST_FAIL("fixed hold %d (deadline %lld) reported lost after hold %d (deadline %lld)", i,
                  (long long)fixed_until[i], j, (long long)fixed_until[j]);

  for (int i = 0; i < RENEWED; i++) {
    ASSERT_OK(dlock_mutex_release(held[i]));
    dlock_mutex_free(held[i]);
  }
  for (int i = 0; i < WATCHED; i++) {
    dlock_mutex_release(fixed[i]); /* lost: the release reports it */
    dlock_mutex_free(fixed[i]);
  }
  dlock_client_free(c);
}

TEST_MAIN()
