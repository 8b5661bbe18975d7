/*
 * test_rwlock.c - the read-write lock against a real redis-server: readers
 * share, a writer holds alone, a waiting writer blocks later readers, mixed
 * contention keeps a writers-only counter exact, fences order writers after
 * readers, a killed reader's share returns after its lease, the holder
 * thread's read-in-write and refused upgrade, kinds kept apart, status,
 * extend and renewal, cancel, and Redlock's refusal.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client(void) { return test_client(srv.url); }

/* One side of 'name' with a fixed lease ('lease_ms' 0: watchdog mode). */
static dlock_lock_info info(dlock_client *c, const char *name) {
  dlock_lock_info i;
  dlock_lock_info_init(&i);
  if (dlock_lock_info_get(c, name, &i) != 0) TEST_FAIL("status of '%s': %s", name, dlock_last_error());
  return i;
}

/* Wait (bounded) until 'name' shows 'n' waiting writers. */
static int wait_for_waiting_writers(dlock_client *c, const char *name, int64_t n) {
  for (int i = 0; i < 500; i++) {
    if (info(c, name).waiting_writers == n) return 1;
    th_sleep_ms(10);
  }
  return 0;
}

/* A thread: acquire one side, note when, hold for 'hold_ms', release. */
typedef struct holder {
  dlock_rwlock *rw;
  int64_t wait_ms, hold_ms;
  int rc;
  uint64_t fence;
  long long got_at, released_at;
  atomic_int done;
} holder;

static void *hold_for(void *arg) {
  holder *h = arg;
  h->rc = dlock_rwlock_acquire(h->rw, h->wait_ms);
  h->got_at = th_now_ms();
  h->fence = dlock_rwlock_fence(h->rw);
  if (h->rc == 0) {
    th_sleep_ms(h->hold_ms);
    h->released_at = th_now_ms();
    dlock_rwlock_release(h->rw);
  }
  atomic_store(&h->done, 1);
  return NULL;
}

TEST(readers_overlap_and_a_writer_is_kept_out_while_they_hold) {
  dlock_client *c1 = client(), *c2 = client(), *c3 = client();
  /* The writer on its own client: this thread's reads through c1 or c2
   * would make its write an upgrade (refused, see below). */
  dlock_rwlock *r1 = test_rwlock(c1, "rw:share", DLOCK_RW_READ, 10000),
               *r2 = test_rwlock(c2, "rw:share", DLOCK_RW_READ, 10000),
               *r3 = test_rwlock(c2, "rw:share", DLOCK_RW_READ, 10000),
               *w = test_rwlock(c3, "rw:share", DLOCK_RW_WRITE, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0));
  ASSERT_OK(dlock_rwlock_acquire(r3, 0));
  dlock_lock_info i = info(c1, "rw:share");
  ASSERT(i.rwlock && i.held && !i.writer);
  ASSERT_EQ(i.readers, 3);
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_rwlock_release(r1));
  ASSERT_OK(dlock_rwlock_release(r2));
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_rwlock_release(r3));
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_release(w));
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "EXISTS rw:share {rw:share}:meta");
  ASSERT_STR_EQ(out, "0");
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(r3);
  dlock_rwlock_free(w);
  dlock_client_free(c1);
  dlock_client_free(c2);
  dlock_client_free(c3);
}

TEST(a_writer_holds_alone) {
  dlock_client *c1 = client(), *c2 = client();
  dlock_rwlock *w = test_rwlock(c1, "rw:alone", DLOCK_RW_WRITE, 10000),
               *w2 = test_rwlock(c2, "rw:alone", DLOCK_RW_WRITE, 10000),
               *r = test_rwlock(c2, "rw:alone", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EBUSY);
  ASSERT_STATUS(dlock_rwlock_acquire(w2, 0), DLOCK_EBUSY);
  ASSERT_STATUS(dlock_rwlock_acquire(r, 200), DLOCK_EBUSY);
  dlock_lock_info i = info(c2, "rw:alone");
  ASSERT(i.writer && i.readers == 0 && i.fence == dlock_rwlock_fence(w));
  /* A reader waiting for the writer is woken by its release. */
  holder h = {.rw = r, .wait_ms = 20000, .hold_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, hold_for, &h);
  th_sleep_ms(300);
  ASSERT(!atomic_load(&h.done));
  long long released = th_now_ms();
  ASSERT_OK(dlock_rwlock_release(w));
  pthread_join(t, NULL);
  ASSERT_OK(h.rc);
  ASSERT(h.got_at - released < 1500); /* the wake-up, not the 2 s re-check */
  dlock_rwlock_free(w);
  dlock_rwlock_free(w2);
  dlock_rwlock_free(r);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

TEST(a_reader_arriving_while_a_writer_waits_waits_behind_it) {
  dlock_client *c1 = client(), *c2 = client(), *c3 = client();
  dlock_rwlock *r1 = test_rwlock(c1, "rw:order", DLOCK_RW_READ, 10000),
               *w = test_rwlock(c2, "rw:order", DLOCK_RW_WRITE, 10000),
               *r2 = test_rwlock(c3, "rw:order", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  holder hw = {.rw = w, .wait_ms = 20000, .hold_ms = 400};
  pthread_t tw, tr;
  pthread_create(&tw, NULL, hold_for, &hw);
  ASSERT(wait_for_waiting_writers(c1, "rw:order", 1));
  /* Readers hold, but a writer waits: a new reader does not slip past it. */
  ASSERT_STATUS(dlock_rwlock_acquire(r2, 0), DLOCK_EBUSY);
  holder hr = {.rw = r2, .wait_ms = 20000, .hold_ms = 0};
  pthread_create(&tr, NULL, hold_for, &hr);
  th_sleep_ms(300);
  ASSERT(!atomic_load(&hr.done) && !atomic_load(&hw.done));
  ASSERT_OK(dlock_rwlock_release(r1));
  pthread_join(tw, NULL);
  pthread_join(tr, NULL);
  ASSERT_OK(hw.rc);
  ASSERT_OK(hr.rc);
  ASSERT(hr.got_at >= hw.released_at);
  ASSERT(hr.fence > hw.fence);
  dlock_rwlock_free(r1);
  dlock_rwlock_free(w);
  dlock_rwlock_free(r2);
  dlock_client_free(c1);
  dlock_client_free(c2);
  dlock_client_free(c3);
}

/* Mixed contention: writers bump an unguarded counter (read, pause, write);
 * readers check that it does not move while they hold. */
static long counter; /* guarded by the rwlock only */
static atomic_int moved_under_reader, readers_now, readers_max;

typedef struct worker {
  int write;
  int rounds;
  int rc;
} worker;

static void *work(void *arg) {
  worker *wk = arg;
  dlock_client *c = test_client(srv.url);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  dlock_rwlock *rw = NULL;
  wk->rc = dlock_rwlock_new(&rw, c, "rw:mixed", wk->write ? DLOCK_RW_WRITE : DLOCK_RW_READ, &mo);
  for (int i = 0; i < wk->rounds && wk->rc == 0; i++) {
    if ((wk->rc = dlock_rwlock_acquire(rw, 30000)) != 0) break;
    long seen = __atomic_load_n(&counter, __ATOMIC_RELAXED);
    if (wk->write) {
      usleep(500);
      __atomic_store_n(&counter, seen + 1, __ATOMIC_RELAXED);
    } else {
      int now = atomic_fetch_add(&readers_now, 1) + 1;
      int max = atomic_load(&readers_max);
      while (now > max && !atomic_compare_exchange_weak(&readers_max, &max, now)) {
      }
      usleep(1000);
      if (__atomic_load_n(&counter, __ATOMIC_RELAXED) != seen) atomic_fetch_add(&moved_under_reader, 1);
      atomic_fetch_sub(&readers_now, 1);
    }
    wk->rc = dlock_rwlock_release(rw);
  }
  dlock_rwlock_free(rw);
  dlock_client_free(c);
  return NULL;
}

TEST(mixed_readers_and_writers_keep_a_writers_only_counter_exact) {
  enum { WRITERS = 4, READERS = 4, ROUNDS = 40 };
  worker wk[WRITERS + READERS];
  pthread_t t[WRITERS + READERS];
  counter = 0;
  for (int i = 0; i < WRITERS + READERS; i++) {
    wk[i] = (worker){.write = i < WRITERS, .rounds = ROUNDS, .rc = -99};
    pthread_create(&t[i], NULL, work, &wk[i]);
  }
  for (int i = 0; i < WRITERS + READERS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < WRITERS + READERS; i++) ASSERT_OK(wk[i].rc);
  ASSERT_EQ(counter, WRITERS * ROUNDS);
  ASSERT_EQ(atomic_load(&moved_under_reader), 0);
  printf("  readers at once: up to %d\n", atomic_load(&readers_max));
}

TEST(a_writers_fence_is_above_every_earlier_readers_and_writers) {
  dlock_client *c = client();
  dlock_rwlock *r1 = test_rwlock(c, "rw:fence", DLOCK_RW_READ, 10000),
               *r2 = test_rwlock(c, "rw:fence", DLOCK_RW_READ, 10000),
               *w = test_rwlock(c, "rw:fence", DLOCK_RW_WRITE, 10000);
  uint64_t last = 0;
  for (int round = 0; round < 3; round++) {
    ASSERT_OK(dlock_rwlock_acquire(r1, 0));
    ASSERT_OK(dlock_rwlock_acquire(r2, 0));
    uint64_t f1 = dlock_rwlock_fence(r1), f2 = dlock_rwlock_fence(r2);
    ASSERT(f1 > last && f2 > f1); /* one counter per name: every acquisition rises */
    ASSERT_OK(dlock_rwlock_release(r1));
    ASSERT_OK(dlock_rwlock_release(r2));
    ASSERT_OK(dlock_rwlock_acquire(w, 0));
    ASSERT(dlock_rwlock_fence(w) > f2);
    last = dlock_rwlock_fence(w);
    ASSERT_OK(dlock_rwlock_release(w));
  }
  /* Exact above 2^53: the counter is a decimal string. */
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "SET {rw:fence}:fence 9007199254740993");
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_EQ(dlock_rwlock_fence(r1), 9007199254740994ULL);
  ASSERT_OK(dlock_rwlock_release(r1));
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_EQ(dlock_rwlock_fence(w), 9007199254740995ULL);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(w);
  dlock_client_free(c);
}

static int crash_reading(void *arg) {
  (void)arg;
  dlock_client *c = test_client(srv.url);
  dlock_rwlock *r = NULL;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 3000 * th_time_factor();
  if (dlock_rwlock_new(&r, c, "rw:crash", DLOCK_RW_READ, &mo) || dlock_rwlock_acquire(r, 0)) return 1;
  raise(SIGKILL);
  return 2;
}

TEST(a_reader_killed_with_sigkill_gives_its_share_back_after_its_lease) {
  /* Forked before this process has threads of its own (a client's). */
  pid_t pid = th_spawn(crash_reading, NULL);
  int st = th_wait(pid, 20000);
  ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  dlock_client *c = client();
  dlock_rwlock *other = test_rwlock(c, "rw:crash", DLOCK_RW_READ, 30000),
               *w = test_rwlock(c, "rw:crash", DLOCK_RW_WRITE, 10000);
  ASSERT_OK(dlock_rwlock_acquire(other, 0)); /* a live reader: the key outlives the crashed one's lease */
  ASSERT_EQ(info(c, "rw:crash").readers, 2);
  ASSERT_OK(dlock_rwlock_release(other));
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_rwlock_acquire(w, 10000 * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 5000 * th_time_factor());
  ASSERT_EQ(info(c, "rw:crash").readers, 0);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(other);
  dlock_rwlock_free(w);
  dlock_client_free(c);
}

TEST(the_writer_thread_may_read_but_a_reader_is_refused_the_upgrade) {
  dlock_client *c = client(), *c2 = client();
  dlock_rwlock *w = test_rwlock(c, "rw:re", DLOCK_RW_WRITE, 10000), *r = test_rwlock(c, "rw:re", DLOCK_RW_READ, 10000),
               *w2 = test_rwlock(c2, "rw:re", DLOCK_RW_WRITE, 10000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  /* Another writer waits: the holder's own read still goes at once. */
  holder h = {.rw = w2, .wait_ms = 20000, .hold_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, hold_for, &h);
  ASSERT(wait_for_waiting_writers(c, "rw:re", 1));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT(dlock_rwlock_fence(r) > dlock_rwlock_fence(w));
  ASSERT_OK(dlock_rwlock_acquire(w, 0)); /* reentry on the write handle itself */
  ASSERT_OK(dlock_rwlock_release(w));
  ASSERT_OK(dlock_rwlock_release(w)); /* write side released: still reading */
  ASSERT_EQ(dlock_mutex_is_held(dlock_rwlock_mutex(r)), 1);
  /* A second read handle of a thread that reads goes at once too, past the
   * waiting writer (which waits for this thread's read). */
  dlock_rwlock *r_again = test_rwlock(c, "rw:re", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r_again, 0));
  ASSERT_OK(dlock_rwlock_release(r_again));
  dlock_rwlock_free(r_again);
  /* Holding the read side, the write side would wait for itself. */
  ASSERT_STATUS(dlock_rwlock_acquire(w, 0), DLOCK_EUPGRADE);
  ASSERT_CONTAINS(dlock_rwlock_errmsg(w), "release the read side first");
  ASSERT_STATUS(dlock_rwlock_acquire(w, 5000), DLOCK_EUPGRADE);
  ASSERT(!atomic_load(&h.done));
  ASSERT_OK(dlock_rwlock_release(r));
  pthread_join(t, NULL);
  ASSERT_OK(h.rc);
  /* Another thread of the process is no upgrade: it just waits its turn. */
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  holder h2 = {.rw = w, .wait_ms = 20000, .hold_ms = 0};
  pthread_create(&t, NULL, hold_for, &h2);
  th_sleep_ms(200);
  ASSERT_OK(dlock_rwlock_release(r));
  pthread_join(t, NULL);
  ASSERT_OK(h2.rc);
  dlock_rwlock_free(w);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(a_name_is_one_kind_a_mutex_and_an_rwlock_refuse_each_other) {
  dlock_client *c = client();
  dlock_mutex *m = test_mutex(c, "rw:kind", 10000);
  dlock_rwlock *r = test_rwlock(c, "rw:kind", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_rwlock_errmsg(r), "in use as a mutex");
  ASSERT_STATUS(dlock_rwlock_acquire(r, 1000), DLOCK_EWRONGTYPE);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EWRONGTYPE);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "in use as a read-write lock");
  ASSERT_OK(dlock_rwlock_release(r));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_rwlock_free(r);
  dlock_client_free(c);
}

TEST(status_shows_readers_the_writer_and_waiting_writers) {
  dlock_client *c = client(), *c2 = client();
  dlock_rwlock *r1 = test_rwlock(c, "rw:status", DLOCK_RW_READ, 10000),
               *r2 = test_rwlock(c2, "rw:status", DLOCK_RW_READ, 10000),
               *w = test_rwlock(c2, "rw:status", DLOCK_RW_WRITE, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0));
  holder h = {.rw = w, .wait_ms = 20000, .hold_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, hold_for, &h);
  ASSERT(wait_for_waiting_writers(c, "rw:status", 1));
  dlock_lock_info i = info(c, "rw:status");
  ASSERT(i.rwlock && i.held && !i.writer && i.readers == 2 && i.waiters == 1 && i.ttl_ms > 0);
  int listed = 0;
  ASSERT_OK(dlock_rwlock_release(r1));
  ASSERT_OK(dlock_rwlock_release(r2));
  pthread_join(t, NULL);
  ASSERT_OK(h.rc);
  (void)listed;
  i = info(c, "rw:status");
  ASSERT(!i.held && i.readers == 0 && !i.writer);
  ASSERT(i.fence == h.fence); /* the last fence issued */
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(w);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(the_watchdog_renews_a_read_hold_and_an_expired_hold_is_never_revived) {
  dlock_client *c = client();
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 300;
  dlock_rwlock *r = NULL;
  ASSERT_OK(dlock_rwlock_new(&r, c, "rw:renew", DLOCK_RW_READ, &mo));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  th_sleep_ms(1500);
  ASSERT_EQ(dlock_rwlock_lost(r), DLOCK_LOST_NONE);
  ASSERT_EQ(dlock_mutex_is_held(dlock_rwlock_mutex(r)), 1);
  ASSERT_OK(dlock_rwlock_release(r));
  /* A fixed lease: extend sets it (the watchdog would renew a watchdog-mode
   * hold to its own lease at any moment). */
  dlock_rwlock *f = test_rwlock(c, "rw:renew", DLOCK_RW_READ, 10000),
               *keep = test_rwlock(c, "rw:renew", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(f, 0));
  char token[64];
  th_redis_cli(&srv, token, sizeof token, "ZRANGE rw:renew 0 0");
  ASSERT_EQ(strlen(token), 32);
  ASSERT_OK(dlock_rwlock_acquire(keep, 0)); /* keeps the key, so the stale member is still there */
  ASSERT_OK(dlock_rwlock_extend(keep, 5000));
  int64_t ttl = 0;
  ASSERT_OK(dlock_mutex_remaining(dlock_rwlock_mutex(keep), &ttl));
  ASSERT(ttl > 4000 && ttl <= 5000);
  /* Redis says f's lease ended (its score is in the past) though our local
   * deadline has not passed: the extend must not bring it back. */
  char out[64];
  th_redis_cli(&srv, out, sizeof out, "ZADD rw:renew XX 1 %s", token);
  ASSERT_STATUS(dlock_rwlock_extend(f, 5000), DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_rwlock_lost(f), DLOCK_LOST_EXPIRED);
  ASSERT_EQ(info(c, "rw:renew").readers, 1);
  ASSERT_STATUS(dlock_rwlock_release(f), DLOCK_ENOTHELD);
  ASSERT_OK(dlock_rwlock_release(keep));
  dlock_rwlock_free(r);
  dlock_rwlock_free(f);
  dlock_rwlock_free(keep);
  dlock_client_free(c);
}

TEST(a_forced_release_ends_every_hold_and_the_holders_learn_it_was_deleted) {
  dlock_client *c = client(), *c2 = client();
  dlock_rwlock *r1 = test_rwlock(c, "rw:force", DLOCK_RW_READ, 10000),
               *r2 = test_rwlock(c2, "rw:force", DLOCK_RW_READ, 10000),
               *w = test_rwlock(c2, "rw:force", DLOCK_RW_WRITE, 10000);
  ASSERT_OK(dlock_rwlock_acquire(r1, 0));
  ASSERT_OK(dlock_rwlock_acquire(r2, 0));
  holder h = {.rw = w, .wait_ms = 20000, .hold_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, hold_for, &h);
  ASSERT(wait_for_waiting_writers(c, "rw:force", 1));
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(c, "rw:force", &was_held));
  ASSERT_EQ(was_held, 1);
  pthread_join(t, NULL); /* the waiting writer was woken and took it */
  ASSERT_OK(h.rc);
  ASSERT_STATUS(dlock_rwlock_extend(r1, 5000), DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_rwlock_lost(r1), DLOCK_LOST_DELETED);
  ASSERT_STATUS(dlock_rwlock_release(r2), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_rwlock_errmsg(r2), "forced release");
  ASSERT_STATUS(dlock_rwlock_release(r1), DLOCK_ENOTHELD);
  ASSERT_OK(dlock_lock_force_release(c, "rw:force", &was_held));
  ASSERT_EQ(was_held, 0);
  dlock_rwlock_free(r1);
  dlock_rwlock_free(r2);
  dlock_rwlock_free(w);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(cancel_ends_a_readers_wait_and_it_leaves_the_queue) {
  dlock_client *c = client(), *c2 = client();
  dlock_rwlock *w = test_rwlock(c, "rw:cancel", DLOCK_RW_WRITE, 10000),
               *r = test_rwlock(c2, "rw:cancel", DLOCK_RW_READ, 10000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  holder h = {.rw = r, .wait_ms = DLOCK_WAIT_FOREVER, .hold_ms = 0};
  pthread_t t;
  pthread_create(&t, NULL, hold_for, &h);
  for (int i = 0; i < 500 && info(c, "rw:cancel").waiters != 1; i++) th_sleep_ms(10);
  dlock_rwlock_cancel(r);
  pthread_join(t, NULL);
  ASSERT_STATUS(h.rc, DLOCK_ECANCELED);
  ASSERT_EQ(info(c, "rw:cancel").waiters, 0);
  ASSERT_OK(dlock_rwlock_release(w));
  dlock_rwlock_free(w);
  dlock_rwlock_free(r);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(bad_input_is_a_clear_error) {
  dlock_client *c = client();
  dlock_rwlock *rw = (dlock_rwlock *)1;
  ASSERT_STATUS(dlock_rwlock_new(&rw, c, "rw:bad", 3, NULL), DLOCK_EINVAL);
  ASSERT(rw == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "DLOCK_RW_READ");
  ASSERT_STATUS(dlock_rwlock_new(&rw, c, "rw:{bad}", DLOCK_RW_READ, NULL), DLOCK_ENAME);
  ASSERT_STATUS(dlock_rwlock_acquire(NULL, 0), DLOCK_EINVAL);
  ASSERT_EQ(dlock_rwlock_side(NULL), 0);
  dlock_rwlock_free(NULL);
  dlock_client_free(c);
}

TEST(redlock_refuses_a_read_write_lock) {
  th_redis nodes[3];
  if (th_redis_start_n(nodes, 3, NULL) != 0) TEST_FAIL("cannot start 3 servers");
  char url[1024];
  th_redlock_url(nodes, 3, url, sizeof url);
  dlock_client *c = test_client(url);
  dlock_rwlock *rw = NULL;
  int rc = dlock_rwlock_new(&rw, c, "rw:redlock", DLOCK_RW_READ, NULL);
  char err[1024];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  dlock_rwlock_free(rw);
  dlock_client_free(c);
  th_redis_stop_n(nodes, 3);
  ASSERT_STATUS(rc, DLOCK_EINVAL);
  ASSERT_CONTAINS(err, "not offered");
  ASSERT_CONTAINS(err, "Redlock");
}

TEST_MAIN()
