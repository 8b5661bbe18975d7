/*
 * metrics_cost.c - what the metrics add to one acquire + release cycle, in
 * CPU time, without a server: the calls mutex.c makes (acquire begin and
 * end, hold begin and end, the release's outcome and event) on a handle of
 * a client made here, N times, timed on this thread's CPU clock (which a
 * busy machine does not inflate as it does wall time). No hook: its queue
 * costs only when on_event is set. docs/PERFORMANCE.md, "Metrics".
 * Usage: dlock-metrics-cost [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 5000000;
  static dlock_client c;
  static dlock_mutex m;
  dlock_client_options o;
  dlock_client_options_init(&o);
  if (dlock__metrics_new(&c, &o) != 0) return 70;
  m.client = &c;
  static char name[] = "bench";
  m.name = name;
  m.kind = DLOCK__KIND_MUTEX;
  for (int round = 0; round < 5; round++) {
    double t0 = cpu_ns();
    for (long i = 0; i < n; i++) {
      int64_t began = dlock__metrics_acquire_begin(&m);
      dlock__metrics_hold_begin(&m);
      dlock__metrics_acquire_end(&m, began, 0, 0, 0);
      dlock__metrics_hold_end(&m, DLOCK_LOST_NONE);
      dlock__metrics_release_outcome(&m, 0);
      dlock__metrics_released(&m, 0);
    }
    printf("round %d: %.1f ns of CPU per cycle (%ld cycles)\n", round + 1, (cpu_ns() - t0) / (double)n, n);
  }
  dlock__metrics_free(&c);
  return 0;
}
