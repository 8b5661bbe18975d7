/*
 * sched_node.c - one scheduler node for the multi-process scheduler tests.
 *
 *   sched_node URL NODE rate|delay|cron PERIOD_MS|EXPR RUN_MS LIFETIME_MS OUTFILE [AT_MOST_MS]
 *
 * Runs one job named "t:sched-job"; each run appends one line
 * "tick_ms start_ms end_ms node fence" to OUTFILE with a single write(2)
 * (O_APPEND keeps lines whole across processes), after sleeping RUN_MS.
 * With $SCHED_NODE_EVENTS set, each scheduler event other than RAN appends
 * "kind tick_ms node status clock_skew_ms" to that file.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

static const char *outfile;
static long run_ms;

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void append_line(const char *path, const char *line, int n) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd >= 0) {
    if (write(fd, line, (size_t)n) != n) perror("sched_node: write");
    close(fd);
  }
}

static void on_event(const dlock_sched_event *ev, void *arg) {
  const char *path = arg;
  if (ev->kind == DLOCK_SCHED_RAN) return;
  char line[256];
  int n = snprintf(line, sizeof line, "%d %" PRId64 " %s %d %" PRId64 "\n", (int)ev->kind, ev->scheduled_unix_ms,
                   ev->node && ev->node[0] ? ev->node : "-", ev->status, ev->clock_skew_ms);
  append_line(path, line, n);
}

static int job(const dlock_tick *t, void *arg) {
  (void)arg;
  int64_t start = wall_ms();
  struct timespec ts = {run_ms / 1000, (run_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  char line[256];
  int n = snprintf(line, sizeof line, "%" PRId64 " %" PRId64 " %" PRId64 " %s %" PRIu64 "\n", t->scheduled_unix_ms,
                   start, wall_ms(), t->node, t->fence);
  append_line(outfile, line, n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr,
            "usage: sched_node URL NODE rate|delay|cron PERIOD_MS|EXPR RUN_MS LIFETIME_MS OUTFILE [AT_MOST_MS]\n");
    return 64;
  }
  outfile = argv[7];
  run_ms = atol(argv[5]);
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = argv[1];
  dlock_client *c;
  if (dlock_client_new(&c, &co) != 0) {
    fprintf(stderr, "sched_node: %s\n", dlock_last_error());
    return 69;
  }
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.node_name = argv[2];
  const char *events = getenv("SCHED_NODE_EVENTS");
  if (events && *events) {
    so.on_event = on_event;
    so.on_event_arg = (void *)events;
  }
  dlock_sched *s;
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  if (argc > 8) jo.lock_at_most_for_ms = atol(argv[8]);
  int rc = dlock_sched_new(&s, c, &so);
  if (!rc) {
    if (!strcmp(argv[3], "rate"))
      rc = dlock_sched_add_fixed_rate(s, "t:sched-job", atol(argv[4]), &jo, job, NULL);
    else if (!strcmp(argv[3], "delay"))
      rc = dlock_sched_add_fixed_delay(s, "t:sched-job", atol(argv[4]), &jo, job, NULL);
    else
      rc = dlock_sched_add_cron(s, "t:sched-job", argv[4], &jo, job, NULL);
  }
  if (!rc) rc = dlock_sched_start(s);
  if (rc) {
    fprintf(stderr, "sched_node: %s\n", dlock_last_error());
    return 70;
  }
  long life = atol(argv[6]);
  struct timespec ts = {life / 1000, (life % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  dlock_sched_stop(s, 30000);
  dlock_sched_free(s);
  dlock_client_free(c);
  return 0;
}
