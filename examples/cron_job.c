/*
 * cron_job.c - a job deployed on every node that runs once per tick across
 * all of them: start this program on several hosts (or several times on one).
 * Build: cc cron_job.c $(pkg-config --cflags --libs dlock) -o cron_job
 * Run:   DLOCK_URL=redis://127.0.0.1:6379 ./cron_job   (stops after 30 s)
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include <dlock.h>

static int close_unpaid_orders(const dlock_tick *tick, void *arg) {
  (void)arg;
  printf("%s: tick %" PRId64 " runs here, on %s, fence %" PRIu64 "\n", tick->job, tick->scheduled_unix_ms / 1000,
         tick->node, tick->fence);
  return 0;
}

static void log_event(const dlock_sched_event *ev, void *arg) {
  (void)arg;
  if (ev->kind == DLOCK_SCHED_SKIPPED) printf("%s: tick run by %s\n", ev->job, ev->node);
  if (ev->kind == DLOCK_SCHED_ERROR) fprintf(stderr, "%s: %s\n", ev->job, ev->message);
}

int main(void) {
  /* One line per tick even when piped (a log file, journald): line-buffered. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  dlock_client *c;
  if (dlock_client_new(&c, NULL) != 0) {
    fprintf(stderr, "cron_job: %s\n", dlock_last_error());
    return 1;
  }
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.on_event = log_event;
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_most_for_ms = 60000;
  dlock_sched *s = NULL;
  int rc = dlock_sched_new(&s, c, &so);
  if (!rc) rc = dlock_sched_add_cron(s, "close-unpaid-orders", "0/10 * * * * ?", &jo, close_unpaid_orders, NULL);
  if (!rc) rc = dlock_sched_start(s);
  if (rc) {
    fprintf(stderr, "cron_job: %s\n", dlock_last_error());
  } else {
    struct timespec ts = {30, 0};
    nanosleep(&ts, NULL);
    dlock_sched_stop(s, 10000);
  }
  dlock_sched_free(s);
  dlock_client_free(c);
  return rc ? 1 : 0;
}
