/*
 * metrics_ab.c - the hot-path cost of the metrics (docs/PERFORMANCE.md,
 * "Metrics"): one thread, uncontended acquire (try once, fixed lease) +
 * release of one lock, for --seconds, printing cycles per second. Only the
 * public API that every libdlock has, so that bench/metrics_ab.sh runs the
 * same binary on the library with metrics and on the one before them
 * (LD_LIBRARY_PATH), in alternating blocks.
 * Usage: dlock-metrics-ab URL SECONDS
 */
#include <stdio.h>
#include <stdlib.h>

#include <dlock.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: dlock-metrics-ab URL SECONDS\n");
    return 64;
  }
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = argv[1];
  dlock_client *c;
  if (dlock_client_new(&c, &o) != 0) {
    fprintf(stderr, "dlock-metrics-ab: %s\n", dlock_last_error());
    return 69;
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000; /* fixed: no watchdog traffic */
  dlock_mutex *m;
  if (dlock_mutex_new(&m, c, "bench:metrics-ab", &mo) != 0) return 70;
  for (int i = 0; i < 200; i++) { /* warm: connection, scripts */
    if (dlock_mutex_acquire(m, 0) != 0 || dlock_mutex_release(m) != 0) return 70;
  }
  dlock_mono_ms end = dlock_mono_now() + (dlock_mono_ms)(atof(argv[2]) * 1000);
  long long n = 0;
  dlock_mono_ms start = dlock_mono_now(), now = start;
  while (now < end && n < 100000000) {
    if (dlock_mutex_acquire(m, 0) != 0 || dlock_mutex_release(m) != 0) {
      fprintf(stderr, "dlock-metrics-ab: %s\n", dlock_last_error());
      return 70;
    }
    n++;
    if ((n & 63) == 0) now = dlock_mono_now();
  }
  now = dlock_mono_now();
  printf("%.1f\n", (double)n * 1000.0 / (double)(now - start));
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}
