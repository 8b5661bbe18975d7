/*
 * sc_rwlock.c - the read-write lock (docs/rwlock.md) next to the mutex in
 * the same run: one thread's uncontended acquire(try once) + release of a
 * mutex, a read side and a write side (fixed lease, no watchdog traffic),
 * in alternating blocks so that drift hits all alike; then the hand-off
 * latency under contention, from the holder's release to the waiter's
 * acquire returning: write -> waiting reader, and mutex -> waiting mutex.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

#include "bench.h"

#define BLOCK 500

enum { K_MUTEX, K_READ, K_WRITE, K_COUNT };
static const char *const kind_impl[K_COUNT] = {"mutex", "rwlock-read", "rwlock-write"};

/* ---- Hand-off: one waiter thread, woken by the main thread's release ---- */

typedef struct handoff {
  dlock_mutex *waiter; /* the waiting side (a mutex, or a read side's mutex view) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go, done, stop, rc;
  int64_t acquired_ns;
} handoff;

static void *waiter_main(void *arg) {
  handoff *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->go && !h->stop) pthread_cond_wait(&h->cv, &h->mu);
    if (h->stop) break;
    h->go = 0;
    pthread_mutex_unlock(&h->mu);
    int rc = dlock_mutex_acquire(h->waiter, 10000);
    int64_t t = bench_now_ns();
    if (rc == 0) rc = dlock_mutex_release(h->waiter);
    pthread_mutex_lock(&h->mu);
    h->rc = rc;
    h->acquired_ns = t;
    h->done = 1;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* 'rounds' hand-offs from 'holder' to h->waiter. 0 or -1. */
static int measure_handoff(dlock_mutex *holder, handoff *h, int rounds, bench_samples *s) {
  for (int i = 0; i < rounds; i++) {
    if (dlock_mutex_acquire(holder, 0) != 0) {
      fprintf(stderr, "dlock-bench: rwlock hand-off: %s\n", dlock_mutex_errmsg(holder));
      return -1;
    }
    pthread_mutex_lock(&h->mu);
    h->go = 1;
    h->done = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    bench_sleep_ms(5); /* the waiter is queued by now (one round trip) */
    int64_t t0 = bench_now_ns();
    if (dlock_mutex_release(holder) != 0) return -1;
    pthread_mutex_lock(&h->mu);
    while (!h->done) pthread_cond_wait(&h->cv, &h->mu);
    int rc = h->rc;
    int64_t t1 = h->acquired_ns;
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) {
      fprintf(stderr, "dlock-bench: rwlock hand-off: the waiter got %s: %s\n", dlock_err_name(rc),
              dlock_mutex_errmsg(h->waiter));
      return -1;
    }
    bench_samples_add(s, t1 - t0);
  }
  return 0;
}

static int run_handoff(dlock_mutex *holder, dlock_mutex *waiter, int rounds, bench_samples *s) {
  handoff h = {.waiter = waiter};
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, waiter_main, &h) != 0) return -1;
  int rc = measure_handoff(holder, &h, rounds, s);
  pthread_mutex_lock(&h.mu);
  h.stop = 1;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  pthread_join(t, NULL);
  pthread_mutex_destroy(&h.mu);
  pthread_cond_destroy(&h.cv);
  return rc;
}

bench_status bench_scenario_rwlock(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 2000 : 30000;
  int rounds = quick ? 30 : 300;
  int64_t max_ns = (quick ? 1 : 15) * 1000000000LL;
  bench_status status = BENCH_OK;

  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_client *c = NULL, *c2 = NULL;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 30000;
  dlock_mutex *m = NULL, *m2 = NULL;
  dlock_rwlock *r = NULL, *w = NULL, *r2 = NULL;
  bench_samples s[K_COUNT] = {{0}}, hand_rw = {0}, hand_mutex = {0};
  if (dlock_client_new(&c, &copts) != 0 || dlock_client_new(&c2, &copts) != 0 ||
      dlock_mutex_new(&m, c, "bench:rw:mutex", &mopts) != 0 ||
      dlock_mutex_new(&m2, c2, "bench:rw:mutex", &mopts) != 0 ||
      dlock_rwlock_new(&r, c, "bench:rw:uncontended", DLOCK_RW_READ, &mopts) != 0 ||
      dlock_rwlock_new(&w, c, "bench:rw:uncontended:w", DLOCK_RW_WRITE, &mopts) != 0 ||
      dlock_rwlock_new(&r2, c2, "bench:rw:handoff", DLOCK_RW_READ, &mopts) != 0) {
    fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
    status = BENCH_FAILED;
    goto done;
  }
  dlock_mutex *h[K_COUNT] = {m, dlock_rwlock_mutex(r), dlock_rwlock_mutex(w)};
  for (int k = 0; k < K_COUNT; k++)
    if (bench_samples_init(&s[k], count)) status = BENCH_FAILED;
  if (bench_samples_init(&hand_rw, (size_t)rounds) || bench_samples_init(&hand_mutex, (size_t)rounds))
    status = BENCH_FAILED;
  for (int i = 0; i < 200 && status == BENCH_OK; i++) /* warm up: script caches, connections */
    for (int k = 0; k < K_COUNT; k++)
      if (dlock_mutex_acquire(h[k], 0) != 0 || dlock_mutex_release(h[k]) != 0) status = BENCH_FAILED;
  bench_progress("%zu uncontended cycles each: mutex, read side, write side, in blocks of %d", count, BLOCK);
  double busy[K_COUNT] = {0};
  int64_t start = bench_now_ns();
  for (int round = 0;
       status == BENCH_OK && s[K_MUTEX].count < count && bench_now_ns() - start < max_ns && round < 100000; round++) {
    for (int k = 0; k < K_COUNT && status == BENCH_OK; k++) {
      int64_t b0 = bench_now_ns();
      for (int i = 0; i < BLOCK && status == BENCH_OK; i++) {
        int64_t t0 = bench_now_ns();
        int rc = dlock_mutex_acquire(h[k], 0);
        if (rc == 0) rc = dlock_mutex_release(h[k]);
        if (rc != 0) {
          fprintf(stderr, "dlock-bench: %s cycle: %s: %s\n", kind_impl[k], dlock_err_name(rc),
                  dlock_mutex_errmsg(h[k]));
          status = BENCH_FAILED;
        }
        bench_samples_add(&s[k], bench_now_ns() - t0);
      }
      busy[k] += (double)(bench_now_ns() - b0) / 1e9;
    }
  }
  if (status != BENCH_OK) goto done;
  double rate[K_COUNT];
  for (int k = 0; k < K_COUNT; k++) {
    char note[64];
    snprintf(note, sizeof note, "%zu cycles", s[k].count);
    rate[k] = busy[k] > 0 ? (double)s[k].count / busy[k] : 0;
    bench_row("rwlock", kind_impl[k], "uncontended cycle p50", bench_samples_pct_us(&s[k], 50), "us", note);
    bench_row("rwlock", kind_impl[k], "uncontended cycle p99", bench_samples_pct_us(&s[k], 99), "us", "");
    bench_row("rwlock", kind_impl[k], "uncontended cycles per second", rate[k], "/s", "");
  }
  bench_row("rwlock", "ratio", "read side / mutex, cycles/s", rate[K_MUTEX] > 0 ? rate[K_READ] / rate[K_MUTEX] : 0, "x",
            "same run, same server");
  bench_row("rwlock", "ratio", "write side / mutex, cycles/s", rate[K_MUTEX] > 0 ? rate[K_WRITE] / rate[K_MUTEX] : 0,
            "x", "");

  bench_progress("%d hand-offs each: write side -> waiting reader, mutex -> waiting mutex", rounds);
  dlock_rwlock *hw = NULL;
  if (dlock_rwlock_new(&hw, c, "bench:rw:handoff", DLOCK_RW_WRITE, &mopts) != 0 ||
      run_handoff(dlock_rwlock_mutex(hw), dlock_rwlock_mutex(r2), rounds, &hand_rw) != 0 ||
      run_handoff(m, m2, rounds, &hand_mutex) != 0)
    status = BENCH_FAILED;
  dlock_rwlock_free(hw);
  if (status != BENCH_OK) goto done;
  char note[64];
  snprintf(note, sizeof note, "%zu hand-offs, release -> acquire returns", hand_rw.count);
  bench_row("rwlock", "rwlock write->read", "hand-off p50", bench_samples_pct_us(&hand_rw, 50), "us", note);
  bench_row("rwlock", "rwlock write->read", "hand-off p99", bench_samples_pct_us(&hand_rw, 99), "us", "");
  bench_row("rwlock", "mutex", "hand-off p50", bench_samples_pct_us(&hand_mutex, 50), "us", "");
  bench_row("rwlock", "mutex", "hand-off p99", bench_samples_pct_us(&hand_mutex, 99), "us", "");

done:
  for (int k = 0; k < K_COUNT; k++) bench_samples_free(&s[k]);
  bench_samples_free(&hand_rw);
  bench_samples_free(&hand_mutex);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_rwlock_free(r2);
  dlock_mutex_free(m);
  dlock_mutex_free(m2);
  dlock_client_free(c);
  dlock_client_free(c2);
  return status;
}
