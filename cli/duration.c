/*
 * duration.c - parsing and printing the durations and numbers of the
 * command line. Pure functions, no I/O: "250ms", "10s", "5m", "1h", a bare
 * number of seconds (as sleep(1) and timeout(1) read it) and decimal
 * fractions ("1.5s") that come out as a whole number of milliseconds.
 */
#include <string.h>

#include "cli.h"

static int is_digit(char c)
{
  return c >= '0' && c <= '9';
}

/* Milliseconds per unit, or 0 for an unknown suffix. */
static int64_t unit_ms(const char *suffix)
{
  if (strcmp(suffix, "") == 0 || strcmp(suffix, "s") == 0)
    return 1000;
  if (strcmp(suffix, "ms") == 0)
    return 1;
  if (strcmp(suffix, "m") == 0)
    return 60 * 1000;
  if (strcmp(suffix, "h") == 0)
    return 3600 * 1000;
  return 0;
}

int cli_parse_duration(const char *text, int64_t *ms)
{
  const char *p = text;
  int64_t whole = 0;
  int64_t frac = 0;
  int64_t frac_scale = 1;

  if (!is_digit(*p))
    return -1; /* also rejects "", "-5s", "+5s" and " 5s" */
  for (; is_digit(*p); p++) {
    whole = whole * 10 + (*p - '0');
    /* Stop long before int64 could overflow; the real limit is below. */
    if (whole > DLOCK_MAX_DURATION_MS)
      return -1;
  }
  if (*p == '.') {
    p++;
    if (!is_digit(*p))
      return -1;
    for (; is_digit(*p); p++) {
      if (frac_scale >= 1000000000)
        return -1; /* more digits than any unit can use */
      frac = frac * 10 + (*p - '0');
      frac_scale *= 10;
    }
  }

  int64_t unit = unit_ms(p);
  if (unit == 0)
    return -1;
  if (whole > DLOCK_MAX_DURATION_MS / unit)
    return -1;
  /* A fraction must land on a whole millisecond: "1.5ms" means nothing
   * the library could honour, so say so rather than round silently. */
  if ((frac * unit) % frac_scale != 0)
    return -1;
  int64_t total = whole * unit + frac * unit / frac_scale;
  if (total > DLOCK_MAX_DURATION_MS)
    return -1;
  *ms = total;
  return 0;
}

int cli_parse_u64(const char *text, uint64_t max, uint64_t *out)
{
  uint64_t v = 0;

  if (!is_digit(*text))
    return -1;
  for (const char *p = text; *p != '\0'; p++) {
    if (!is_digit(*p))
      return -1;
    uint64_t d = (uint64_t)(*p - '0');
    if (d > max || v > (max - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

void cli_format_duration(int64_t ms, char *buf, size_t len)
{
  if (ms < 0) {
    snprintf(buf, len, "forever");
  } else if (ms < 1000) {
    snprintf(buf, len, "%lldms", (long long)ms);
  } else if (ms < 60 * 1000 && ms % 1000 == 0) {
    snprintf(buf, len, "%llds", (long long)(ms / 1000));
  } else if (ms < 60 * 1000) {
    snprintf(buf, len, "%lld.%03llds", (long long)(ms / 1000), (long long)(ms % 1000));
  } else if (ms < 3600 * 1000) {
    snprintf(buf, len, "%lldm %llds", (long long)(ms / 60000),
             (long long)(ms % 60000 / 1000));
  } else {
    snprintf(buf, len, "%lldh %lldm", (long long)(ms / 3600000),
             (long long)(ms % 3600000 / 60000));
  }
}
