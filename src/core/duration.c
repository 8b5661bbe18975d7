/*
 * duration.c - the one duration parser of dlock, public as
 * dlock_duration_parse() and used by the dlock command for every
 * DURATION it takes: Go-style compounds ("1m30s", "1h2m", "500ms"), days
 * ("2d"), decimal fractions ("1.5s") and a lone number of seconds ("10",
 * as sleep(1) reads it). Pure: no I/O, no allocation.
 */
#include <string.h>

#include "internal.h"

#define HINT "(e.g. 250ms, 10s, 1m30s, 2d)"

typedef struct unit {
  const char *name;
  int64_t ms;
} unit;

/* Largest first: a compound must use them in this order, each once. */
static const unit units[] = {
    {"d", 24 * 3600 * 1000}, {"h", 3600 * 1000}, {"m", 60 * 1000}, {"s", 1000}, {"ms", 1},
};
#define NUNITS ((int)(sizeof units / sizeof units[0]))

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The unit at 'p' (longest match: "ms" before "m"); its index, or -1. */
static int unit_at(const char *p, size_t *len) {
  int best = -1;
  size_t best_len = 0;
  for (int i = 0; i < NUNITS; i++) {
    size_t n = strlen(units[i].name);
    if (n > best_len && strncmp(p, units[i].name, n) == 0 && !(p[n] >= 'a' && p[n] <= 'z')) {
      best = i;
      best_len = n;
    }
  }
  *len = best_len;
  return best;
}

int dlock_duration_parse(const char *text, int64_t *ms) {
  dlock__error_clear();
  if (!text || !ms) return dlock__error(DLOCK_EINVAL, "dlock_duration_parse: NULL argument");
  if (!*text) return dlock__error(DLOCK_EINVAL, "bad duration '': empty " HINT);
  const char *p = text;
  int64_t total = 0;
  int last_unit = -1; /* index into units of the previous term */
  int terms = 0;

  while (*p) {
    const char *term = p;
    if (*p == ' ' || *p == '\t')
      return dlock__error(DLOCK_EINVAL, "bad duration '%s': no spaces allowed (write 1h2m, not 1h 2m)", text);
    if (*p == '-') return dlock__error(DLOCK_EINVAL, "bad duration '%s': a duration cannot be negative", text);
    if (!is_digit(*p)) return dlock__error(DLOCK_EINVAL, "bad duration '%s': expected a digit at '%s' " HINT, text, p);
    int64_t whole = 0;
    for (; is_digit(*p); p++) {
      whole = whole * 10 + (*p - '0');
      /* Stop long before int64 overflows; the real limit is checked below. */
      if (whole > DLOCK_MAX_DURATION_MS)
        return dlock__error(DLOCK_ERANGE, "bad duration '%s': longer than the maximum of 30 days", text);
    }
    int64_t frac = 0, scale = 1;
    if (*p == '.') {
      p++;
      if (!is_digit(*p))
        return dlock__error(DLOCK_EINVAL, "bad duration '%s': a digit must follow the '.' " HINT, text);
      for (; is_digit(*p); p++) {
        if (scale == 1000000000)
          return dlock__error(DLOCK_EINVAL, "bad duration '%s': more than 9 digits after the '.'", text);
        frac = frac * 10 + (*p - '0');
        scale *= 10;
      }
    }
    size_t ulen;
    int u;
    if (*p == '\0' && terms == 0) {
      u = 3; /* a lone number counts seconds */
      ulen = 0;
    } else if (*p == '\0') {
      return dlock__error(DLOCK_EINVAL, "bad duration '%s': '%s' has no unit; only a lone number counts seconds", text,
                          term);
    } else if ((u = unit_at(p, &ulen)) < 0) {
      return dlock__error(DLOCK_EINVAL, "bad duration '%s': unknown unit at '%s', use d, h, m, s or ms " HINT, text, p);
    }
    if (u <= last_unit)
      return dlock__error(DLOCK_EINVAL,
                          "bad duration '%s': units must go from the largest to the smallest, each once "
                          "(d, h, m, s, ms): '%s' after '%s'",
                          text, units[u].name, units[last_unit].name);
    int64_t unit_ms = units[u].ms;
    /* A fraction must land on a whole millisecond: "1.5ms" is nothing the
     * library could honour, so say so rather than round silently. */
    if ((frac * unit_ms) % scale != 0)
      return dlock__error(DLOCK_EINVAL, "bad duration '%s': '%.*s' is not a whole number of milliseconds", text,
                          (int)(p + ulen - term), term);
    if (whole > (DLOCK_MAX_DURATION_MS - total) / unit_ms)
      return dlock__error(DLOCK_ERANGE, "bad duration '%s': longer than the maximum of 30 days", text);
    total += whole * unit_ms;
    total += frac * unit_ms / scale;
    if (total > DLOCK_MAX_DURATION_MS)
      return dlock__error(DLOCK_ERANGE, "bad duration '%s': longer than the maximum of 30 days", text);
    p += ulen;
    last_unit = u;
    terms++;
  }
  *ms = total;
  return 0;
}
