/*
 * clock.c - the monotonic clock that all lease arithmetic uses, and sleeps.
 * Wall time never enters lock validity: a clock step must not extend a lease.
 */
#include <errno.h>
#include <time.h>

#include "internal.h"

dlock_mono_ms dlock_mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (dlock_mono_ms)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dlock__mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void dlock__sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void dlock__deadline_timespec(dlock_mono_ms deadline, struct timespec *ts) {
  ts->tv_sec = (time_t)(deadline / 1000);
  ts->tv_nsec = (long)(deadline % 1000) * 1000000L;
}

int dlock__cond_init(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
  return rc == 0 ? 0 : DLOCK_ESYS;
}
