/*
 * events_log.c - the event hook as log lines: one line per event of the
 * client's locks (docs/metrics.md, "Events"), written by the client's own
 * delivery thread while the program takes and releases a lock.
 * Build: cc events_log.c $(pkg-config --cflags --libs dlock) -o events_log
 */
#define _POSIX_C_SOURCE 200809L /* gmtime_r */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include <dlock.h>

static void log_event(const dlock_event *ev, void *arg) {
  FILE *out = arg;
  time_t s = (time_t)(ev->unix_us / 1000000);
  struct tm tm;
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", gmtime_r(&s, &tm));
  fprintf(out, "%s.%06" PRId64 "Z seq=%" PRIu64 " event=%s kind=%s name=%s", when, ev->unix_us % 1000000, ev->seq,
          dlock_event_kind_str(ev->kind), ev->lock_kind, ev->name);
  if (ev->fence) fprintf(out, " fence=%" PRIu64, ev->fence);
  if (ev->status) fprintf(out, " status=%s", dlock_err_name(ev->status));
  if (ev->reason) fprintf(out, " reason=\"%s\"", dlock_lost_reason_str(ev->reason));
  if (ev->duration_us >= 0) fprintf(out, " duration_ms=%.3f", ev->duration_us / 1000.0);
  fputc('\n', out);
  fflush(out);
}

static int work(uint64_t fence, void *arg) {
  (void)arg;
  printf("working under fence %" PRIu64 "\n", fence);
  return 0;
}

int main(void) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.on_event = log_event;
  o.on_event_arg = stderr;
  dlock_client *c;
  if (dlock_client_new(&c, &o) != 0) {
    fprintf(stderr, "events_log: %s\n", dlock_last_error());
    return 1;
  }
  int rc = dlock_with_lock(c, "jobs:events-log", 1000, work, NULL);
  if (rc < 0) fprintf(stderr, "events_log: %s: %s\n", dlock_err_name(rc), dlock_last_error());
  dlock_client_free(c); /* the events still queued are logged first */
  return rc < 0 ? 1 : 0;
}
