/*
 * duration.c - parsing and printing the durations and numbers of the
 * command line. Durations ("250ms", "1m30s", "2d", "1.5s", a bare number
 * of seconds) are parsed by the library's dlock_duration_parse(), the one
 * parser of dlock; this file adds numbers and the format for messages.
 */
#include <string.h>

#include "cli.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The library's parser (src/core/duration.c), so that the command and library
 * option strings read durations alike. */
int cli_parse_duration(const char *text, int64_t *ms) { return dlock_duration_parse(text, ms) == 0 ? 0 : -1; }

int cli_parse_u64(const char *text, uint64_t max, uint64_t *out) {
  uint64_t v = 0;

  if (!is_digit(*text)) return -1;
  for (const char *p = text; *p != '\0'; p++) {
    if (!is_digit(*p)) return -1;
    uint64_t d = (uint64_t)(*p - '0');
    if (d > max || v > (max - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

void cli_format_duration(int64_t ms, char *buf, size_t len) {
  if (ms < 0) {
    snprintf(buf, len, "forever");
  } else if (ms < 1000) {
    snprintf(buf, len, "%lldms", (long long)ms);
  } else if (ms < 60 * 1000 && ms % 1000 == 0) {
    snprintf(buf, len, "%llds", (long long)(ms / 1000));
  } else if (ms < 60 * 1000) {
    snprintf(buf, len, "%lld.%03llds", (long long)(ms / 1000), (long long)(ms % 1000));
  } else if (ms < 3600 * 1000) {
    snprintf(buf, len, "%lldm %llds", (long long)(ms / 60000), (long long)(ms % 60000 / 1000));
  } else {
    snprintf(buf, len, "%lldh %lldm", (long long)(ms / 3600000), (long long)(ms % 3600000 / 60000));
  }
}
