/*
 * sc_semaphore.c - the semaphore next to the mutex in the same run: the
 * uncontended cycle (acquire try-once + release, fixed lease) of each in
 * alternating blocks, so that drift hits both alike; then the hand-off
 * latency under contention: one holder releases while one waiter waits,
 * from the release call to the waiter's acquire returning.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <dlock.h>

#include "bench.h"

#define BLOCK 500

static int cycle(dlock_mutex *m) {
  int rc = dlock_mutex_acquire(m, 0);
  if (rc == 0) rc = dlock_mutex_release(m);
  if (rc != 0)
    fprintf(stderr, "dlock-bench: semaphore scenario, '%s': %s: %s\n", dlock_mutex_name(m), dlock_err_name(rc),
            dlock_mutex_errmsg(m));
  return rc;
}

/* ---- Hand-off ---- */

typedef struct handoff {
  dlock_mutex *waiter;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;         /* rounds the waiter may start */
  int done;       /* rounds the waiter finished */
  int64_t got_ns; /* when its last acquire returned */
  int rc;
  int rounds;
} handoff;

static void *waiter_main(void *arg) {
  handoff *h = arg;
  for (int i = 0; i < h->rounds; i++) {
    pthread_mutex_lock(&h->mu);
    while (h->go <= i) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    int rc = dlock_mutex_acquire(h->waiter, 10000);
    int64_t t = bench_now_ns();
    if (rc == 0)
      rc = dlock_mutex_release(h->waiter);
    else
      fprintf(stderr, "dlock-bench: hand-off waiter: %s\n", dlock_mutex_errmsg(h->waiter));
    pthread_mutex_lock(&h->mu);
    h->got_ns = t;
    h->rc = rc;
    h->done = i + 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) break;
  }
  return NULL;
}

/* 'rounds' times: the holder takes it, lets the waiter start its wait,
 * releases; the sample runs from the release call to the waiter's acquire
 * returning (one hand-off message and one confirming script). */
static int handoff_run(dlock_mutex *holder, dlock_mutex *waiter, int rounds, bench_samples *s) {
  handoff h;
  memset(&h, 0, sizeof h);
  h.waiter = waiter;
  h.rounds = rounds;
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, waiter_main, &h) != 0) return -1;
  int status = 0;
  for (int i = 0; i < rounds && status == 0; i++) {
    if (dlock_mutex_acquire(holder, 10000) != 0) {
      fprintf(stderr, "dlock-bench: hand-off holder: %s\n", dlock_mutex_errmsg(holder));
      status = -1;
    }
    pthread_mutex_lock(&h.mu);
    h.go = status == 0 ? i + 1 : rounds; /* on failure: let the waiter run out */
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    if (status != 0) break;
    bench_sleep_ms(20); /* the waiter is queued by now */
    int64_t t0 = bench_now_ns();
    if (dlock_mutex_release(holder) != 0) status = -1;
    pthread_mutex_lock(&h.mu);
    while (h.done <= i && h.rc == 0) pthread_cond_wait(&h.cv, &h.mu);
    if (h.rc != 0)
      status = -1;
    else
      bench_samples_add(s, h.got_ns - t0);
    pthread_mutex_unlock(&h.mu);
  }
  pthread_mutex_lock(&h.mu);
  h.go = rounds;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  pthread_join(t, NULL);
  pthread_mutex_destroy(&h.mu);
  pthread_cond_destroy(&h.cv);
  return status;
}

bench_status bench_scenario_semaphore(void) {
  int quick = bench_options.quick;
  size_t count = quick ? 3000 : 30000;
  int rounds = quick ? 30 : 200;
  int64_t max_ns = (quick ? 1 : 15) * 1000000000LL;
  bench_status status = BENCH_OK;

  dlock_client_options copts;
  dlock_client_options_init(&copts);
  copts.url = bench_redis.url;
  dlock_client *c = NULL;
  dlock_mutex_options mopts;
  dlock_mutex_options_init(&mopts);
  mopts.lease_ms = 30000; /* fixed lease: no watchdog renewals in the figures */
  dlock_mutex *mx = NULL, *mx2 = NULL;
  dlock_semaphore *sem = NULL, *sem2 = NULL;
  bench_samples s_mx = {0}, s_sem = {0}, h_mx = {0}, h_sem = {0};
  if (dlock_client_new(&c, &copts) != 0 || dlock_mutex_new(&mx, c, "bench:sem:mutex", &mopts) != 0 ||
      dlock_mutex_new(&mx2, c, "bench:sem:mutex", &mopts) != 0 ||
      dlock_semaphore_new(&sem, c, "bench:sem:sem", 1, &mopts) != 0 ||
      dlock_semaphore_new(&sem2, c, "bench:sem:sem", 1, &mopts) != 0) {
    fprintf(stderr, "dlock-bench: %s\n", dlock_last_error());
    status = BENCH_FAILED;
    goto done;
  }
  dlock_mutex *sm = dlock_semaphore_mutex(sem), *sm2 = dlock_semaphore_mutex(sem2);
  if (bench_samples_init(&s_mx, count) || bench_samples_init(&s_sem, count) ||
      bench_samples_init(&h_mx, (size_t)rounds) || bench_samples_init(&h_sem, (size_t)rounds)) {
    status = BENCH_FAILED;
    goto done;
  }
  for (int i = 0; i < 200 && status == BENCH_OK; i++)
    if (cycle(mx) != 0 || cycle(sm) != 0) status = BENCH_FAILED;
  bench_progress("%zu uncontended cycles each: mutex, semaphore (1 permit), in blocks of %d", count, BLOCK);
  double busy[2] = {0, 0};
  int64_t start = bench_now_ns();
  while (status == BENCH_OK && s_sem.count < count && bench_now_ns() - start < max_ns) {
    for (int k = 0; k < 2 && status == BENCH_OK; k++) {
      dlock_mutex *m = k == 0 ? mx : sm;
      bench_samples *s = k == 0 ? &s_mx : &s_sem;
      int64_t b0 = bench_now_ns();
      for (int i = 0; i < BLOCK && status == BENCH_OK; i++) {
        int64_t t0 = bench_now_ns();
        if (cycle(m) != 0) status = BENCH_FAILED;
        bench_samples_add(s, bench_now_ns() - t0);
      }
      busy[k] += (double)(bench_now_ns() - b0) / 1e9;
    }
  }
  if (status != BENCH_OK) goto done;
  for (int k = 0; k < 2; k++) {
    bench_samples *s = k == 0 ? &s_mx : &s_sem;
    const char *impl = k == 0 ? "mutex" : "semaphore";
    char note[64];
    snprintf(note, sizeof note, "%zu cycles", s->count);
    bench_row("semaphore", impl, "uncontended cycle p50", bench_samples_pct_us(s, 50), "us", note);
    bench_row("semaphore", impl, "uncontended cycle p99", bench_samples_pct_us(s, 99), "us", "");
    bench_row("semaphore", impl, "uncontended cycles per second", busy[k] > 0 ? (double)s->count / busy[k] : 0, "/s",
              "");
  }
  double r_mx = busy[0] > 0 ? (double)s_mx.count / busy[0] : 0, r_sem = busy[1] > 0 ? (double)s_sem.count / busy[1] : 0;
  bench_row("semaphore", "ratio", "semaphore / mutex, uncontended cycles/s", r_mx > 0 ? r_sem / r_mx : 0, "x",
            "same run, alternating blocks");

  bench_progress("%d hand-offs each: mutex, semaphore (1 permit): release -> waiter's acquire returns", rounds);
  if (handoff_run(mx, mx2, rounds, &h_mx) != 0 || handoff_run(sm, sm2, rounds, &h_sem) != 0) {
    status = BENCH_FAILED;
    goto done;
  }
  bench_row("semaphore", "mutex", "hand-off p50", bench_samples_pct_us(&h_mx, 50), "us",
            "release call -> the waiter's acquire returns");
  bench_row("semaphore", "mutex", "hand-off p99", bench_samples_pct_us(&h_mx, 99), "us", "");
  bench_row("semaphore", "semaphore", "hand-off p50", bench_samples_pct_us(&h_sem, 50), "us", "");
  bench_row("semaphore", "semaphore", "hand-off p99", bench_samples_pct_us(&h_sem, 99), "us", "");

done:
  bench_samples_free(&s_mx);
  bench_samples_free(&s_sem);
  bench_samples_free(&h_mx);
  bench_samples_free(&h_sem);
  dlock_mutex_free(mx);
  dlock_mutex_free(mx2);
  dlock_semaphore_free(sem);
  dlock_semaphore_free(sem2);
  dlock_client_free(c);
  return status;
}
