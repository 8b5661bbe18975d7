/*
 * cleanup.c - the handles a scenario makes, kept so that the runner frees
 * them after it whatever happened (a failure ends a scenario with longjmp),
 * and the small status helpers scenarios share.
 */
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "harness.h"
#include "test.h"

enum kind { K_CLIENT, K_MUTEX, K_SEM, K_RW, K_LATCH, K_MULTI, K_SCHED, K_ELECTION, K_OBSERVER };

#define HELD_MAX 256
static struct {
  enum kind kind;
  void *p;
} held[HELD_MAX];
static int nheld;

static void keep(enum kind kind, void *p) {
  if (nheld == HELD_MAX) TEST_FAIL("more than %d handles in one scenario", HELD_MAX);
  held[nheld].kind = kind;
  held[nheld++].p = p;
}

static void free_one(enum kind kind, void *p) {
  switch (kind) {
  case K_CLIENT:
    dlock_client_free(p);
    break;
  case K_MUTEX:
    dlock_mutex_free(p);
    break;
  case K_SEM:
    dlock_semaphore_free(p);
    break;
  case K_RW:
    dlock_rwlock_free(p);
    break;
  case K_LATCH:
    dlock_latch_free(p);
    break;
  case K_MULTI:
    dlock_multi_free(p);
    break;
  case K_SCHED:
    dlock_sched_free(p);
    break;
  case K_ELECTION:
    dlock_election_free(p);
    break;
  case K_OBSERVER:
    dlock_observer_free(p);
    break;
  }
}

void conf_free(void *p) {
  for (int i = nheld - 1; i >= 0; i--)
    if (held[i].p == p) {
      free_one(held[i].kind, p);
      memmove(&held[i], &held[i + 1], (size_t)(nheld - i - 1) * sizeof held[0]);
      nheld--;
      return;
    }
}

void conf_free_all(void) {
  /* Handles before the clients they belong to. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = nheld - 1; i >= 0; i--)
      if ((held[i].kind == K_CLIENT) == pass) free_one(held[i].kind, held[i].p);
  nheld = 0;
}

void conf_adopt_client(dlock_client *c) { keep(K_CLIENT, c); }
void conf_adopt_sched(dlock_sched *s) { keep(K_SCHED, s); }
void conf_adopt_election(dlock_election *e) { keep(K_ELECTION, e); }
void conf_adopt_observer(dlock_observer *o) { keep(K_OBSERVER, o); }

dlock_client *conf_client(const char *space) {
  dlock_client *c = conf_fx->client(space);
  if (!c) TEST_FAIL("a client of %s in '%s': %s", conf_fx->name, space, dlock_last_error());
  keep(K_CLIENT, c);
  return c;
}

dlock_mutex *conf_mutex(dlock_client *c, const char *name, const dlock_mutex_options *o) {
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, name, o));
  keep(K_MUTEX, m);
  return m;
}

dlock_semaphore *conf_sem(dlock_client *c, const char *name, int permits) {
  dlock_semaphore *s = NULL;
  conf_offered(CONF_SEMAPHORE, "a semaphore", dlock_semaphore_new(&s, c, name, permits, NULL));
  keep(K_SEM, s);
  return s;
}

dlock_rwlock *conf_rw(dlock_client *c, const char *name, int side) {
  dlock_rwlock *l = NULL;
  conf_offered(CONF_RWLOCK, "a read-write lock", dlock_rwlock_new(&l, c, name, side, NULL));
  keep(K_RW, l);
  return l;
}

dlock_latch *conf_latch(dlock_client *c, const char *name) {
  dlock_latch *l = NULL;
  conf_offered(CONF_LATCH, "a countdown latch", dlock_latch_new(&l, c, name));
  keep(K_LATCH, l);
  return l;
}

dlock_multi *conf_multi(dlock_client *c, const char *const *names, size_t n) {
  dlock_multi *mm = NULL;
  ASSERT_OK(dlock_multi_new(&mm, c, names, n, NULL));
  keep(K_MULTI, mm);
  return mm;
}

int64_t conf_waiters(dlock_client *c, const char *name) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (dlock_lock_info_get(c, name, &info) != 0) return -1;
  return info.waiters;
}

int conf_wait_waiters(dlock_client *c, const char *name, int64_t n, long ms) {
  long long until = th_now_ms() + ms;
  do {
    int64_t w = conf_waiters(c, name);
    if (n < 0 ? w == 0 : w >= n) return 1;
    th_sleep_ms(25);
  } while (th_now_ms() < until);
  return 0;
}
