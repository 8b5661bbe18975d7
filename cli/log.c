/*
 * log.c - the log lines of the commands that run for long (run, hold,
 * elect, cron, every): "dlock: MESSAGE" on stderr, or with --log-format
 * json one JSON object per line, with the same field names for every
 * command (docs/metrics.md, "The dlock command"). Each line is one write(),
 * so that the lines of several threads, or of several processes sharing a
 * log, never interleave.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static int log_json;
static const char *log_job;  /* cron, every: the job ("job" field) */
static const char *log_name; /* the lock, election or job ("name" field) */

int cli_log_format_opt(const char *cmd, const char *arg, int *json) {
  if (strcmp(arg, "json") != 0 && strcmp(arg, "text") != 0)
    return cli_usage_error(cmd, "--log-format: '%s' is neither text (the default) nor json", arg);
  *json = strcmp(arg, "json") == 0;
  return 0;
}

void cli_log_setup(int json, const char *job, const char *name) {
  log_json = json;
  log_job = job;
  log_name = name;
}

int cli_log_json(void) { return log_json; }

static void put(const char *text, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, text, len);
    if (n <= 0) return;
    text += n;
    len -= (size_t)n;
  }
}

static void json_field(FILE *f, const char *key, const char *value) {
  if (value == NULL) return;
  fprintf(f, ",\"%s\":", key);
  cli_json_string(f, value);
}

static void line_json(const char *level, const char *event, const cli_log_fields *f, const char *message) {
  static const cli_log_fields none = {0};
  char *text = NULL, when[64], host[256] = "";
  size_t len = 0;
  struct timespec now;
  FILE *out = open_memstream(&text, &len);

  if (out == NULL) return;
  if (f == NULL) f = &none;
  clock_gettime(CLOCK_REALTIME, &now);
  cli_format_time_ms((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, "UTC", when, sizeof when);
  gethostname(host, sizeof host - 1);
  fprintf(out, "{\"time\":\"%s\",\"level\":\"%s\",\"event\":\"%s\"", when, level, event);
  json_field(out, "job", log_job);
  json_field(out, "name", log_name);
  json_field(out, "host", host);
  fprintf(out, ",\"pid\":%ld", (long)getpid());
  if (f->tick != 0) {
    cli_format_time_ms(f->tick, "UTC", when, sizeof when);
    fprintf(out, ",\"tick\":\"%s\",\"tick_unix_ms\":%lld", when, (long long)f->tick);
  }
  json_field(out, "node", f->node);
  if (f->fence != 0) fprintf(out, ",\"fence\":%llu", (unsigned long long)f->fence);
  if (f->has_duration) fprintf(out, ",\"duration_ms\":%lld", (long long)f->duration_ms);
  if (f->has_wait) fprintf(out, ",\"wait_ms\":%lld", (long long)f->wait_ms);
  if (f->has_exit) fprintf(out, ",\"exit\":%d", f->exit_status);
  json_field(out, "signal", f->signal);
  json_field(out, "reason", f->reason);
  json_field(out, "holder", f->holder);
  json_field(out, "message", message);
  fputs("}\n", out);
  if (fclose(out) == 0) put(text, len);
  free(text);
}

void cli_log_line(const char *level, const char *event, const cli_log_fields *f, const char *message) {
  if (log_json) {
    line_json(level, event, f, message);
  } else if (message != NULL) {
    size_t n = strlen(message);
    char *text = malloc(n + 8);
    if (text == NULL) return;
    memcpy(text, "dlock: ", 7);
    memcpy(text + 7, message, n);
    text[n + 7] = '\n';
    put(text, n + 8);
    free(text);
  }
}

void cli_log(const char *level, const char *event, const cli_log_fields *f, const char *fmt, ...) {
  char *message = NULL;
  va_list ap;

  va_start(ap, fmt);
  int n = vasprintf(&message, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  cli_log_line(level, event, f, message);
  free(message);
}
