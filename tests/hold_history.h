/*
 * hold_history.h - the fifth review's history check (test_redlock_restart.c, test_pg_family.c):
 * each holder appends "H id fence in out" (monotonic ms; 'out' cut at the
 * hold's validity) to one O_APPEND file; the check finds two holds that
 * overlap while both were valid, and fences that fall between holds that do
 * not overlap.
 */
#ifndef DLOCK_HOLD_HISTORY_H
#define DLOCK_HOLD_HISTORY_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"

/* One line for a hold that began at 'in' and ended at 'out' (cut at 'valid_until'). */
static inline int h5_record(int fd, int id, uint64_t fence, dlock_mono_ms in, dlock_mono_ms out,
                            dlock_mono_ms valid_until) {
  if (out > valid_until) out = valid_until; /* believed valid only up to its validity */
  char line[160];
  int k = snprintf(line, sizeof line, "H %d %llu %lld %lld\n", id, (unsigned long long)fence, (long long)in,
                   (long long)out);
  return write(fd, line, (size_t)k) == k ? 0 : -1;
}

/* One hold of the mutex 'name' on 'c' (a fixed 'lease_ms', waiting up to
 * 'wait_ms'), kept 'min_ms' plus up to 'spread_ms' (random), recorded:
 * 1 held, 0 not, -1 the record could not be written. */
static inline int h5_one_hold(int fd, int id, dlock_client *c, const char *name, int64_t lease_ms, int64_t wait_ms,
                              long min_ms, int spread_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  dlock_mutex *m = NULL;
  int held = 0;
  if (dlock_mutex_new(&m, c, name, &mo) == 0 && dlock_mutex_acquire(m, wait_ms) == 0) {
    dlock_mono_ms in = dlock_mono_now(), vu = dlock_mutex_valid_until(m);
    uint64_t f = dlock_mutex_fence(m);
    th_sleep_ms(min_ms + rand() % spread_ms);
    held = h5_record(fd, id, f, in, dlock_mono_now(), vu) == 0 ? 1 : -1;
    dlock_mutex_release(m);
  }
  dlock_mutex_free(m);
  return held;
}

typedef struct h5_hold {
  int id;
  unsigned long long f;
  long long in, out;
} h5_hold;

static inline int h5_by_in(const void *a, const void *b) {
  const h5_hold *x = a, *y = b;
  return x->in < y->in ? -1 : x->in > y->in;
}

/* Reads 'path'; prints the first few violations; returns the number of
 * holds (-1: unreadable) and sets '*overlaps' and '*falls'. */
static inline int h5_check(const char *path, int *overlaps, int *falls) {
  static h5_hold h[40000];
  *overlaps = *falls = 0;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0;
  while (n < 40000 && fscanf(f, "H %d %llu %lld %lld\n", &h[n].id, &h[n].f, &h[n].in, &h[n].out) == 4) n++;
  fclose(f);
  qsort(h, (size_t)n, sizeof h[0], h5_by_in);
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n && h[b].in < h[a].out; b++)
      if (h[b].out > h[b].in && h[a].out > h[a].in && ++*overlaps < 5)
        fprintf(stderr, "  overlap: %d fence %llu [%lld, %lld] and %d fence %llu [%lld, %lld]\n", h[a].id, h[a].f,
                h[a].in, h[a].out, h[b].id, h[b].f, h[b].in, h[b].out);
  for (int a = 1; a < n; a++)
    if (h[a].f <= h[a - 1].f && h[a].in >= h[a - 1].out && ++*falls < 5)
      fprintf(stderr, "  fence fell: %llu then %llu\n", h[a - 1].f, h[a].f);
  return n;
}

/* ---- The run: worker processes appending their holds to one file ---- */

/* The run's file and its end (th_now_ms()), set by h5_run_start(). */
static char h5_path[512] __attribute__((unused));
static long long h5_until __attribute__((unused));

typedef struct h5_worker_arg {
  int id;
} h5_worker_arg;

/* Makes 'path' empty, sets the run's end 'ms' from now and spawns 'n' (at
 * most 8) processes of 'worker', each given its id 0..n-1 (an
 * h5_worker_arg) and begun with h5_worker_open(). 0, or -1 when the file
 * cannot be made. */
static inline int h5_run_start(const char *path, long long ms, int (*worker)(void *), int n, pid_t *kids) {
  static h5_worker_arg args[8];
  snprintf(h5_path, sizeof h5_path, "%s", path);
  int fd = open(h5_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  close(fd);
  h5_until = th_now_ms() + ms;
  for (int i = 0; i < n && i < 8; i++) {
    args[i].id = i;
    kids[i] = th_spawn(worker, &args[i]);
  }
  return 0;
}

/* A worker's start: its id, a random sequence of its own, and the run's file
 * opened to append (-1: it could not be). */
static inline int h5_worker_open(void *arg, int *id) {
  *id = ((h5_worker_arg *)arg)->id;
  srand((unsigned)(getpid() * 7919 + *id));
  return open(h5_path, O_WRONLY | O_APPEND);
}

/* Waits for the 'n' workers (exit 0, or 4: no hold, allowed when
 * 'none_ok'); returns how many failed. */
static inline int h5_wait_workers(const pid_t *kids, int n, int none_ok) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int st = th_wait(kids[i], 30000);
    if (st < 0 || !WIFEXITED(st) || (WEXITSTATUS(st) != 0 && !(none_ok && WEXITSTATUS(st) == 4))) bad++;
  }
  return bad;
}

#endif
