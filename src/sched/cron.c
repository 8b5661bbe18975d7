/*
 * cron.c - Quartz cron expressions (and, on request, 5-field Unix ones).
 *
 * The parser turns each field into a bit set plus, for the day fields, one
 * of the special forms (L, L-n, nW, LW, nL, n#k). The next-fire search walks
 * the wall-clock fields from the year down, jumping straight to the next set
 * bit of each, then maps the wall time to an instant through tz.c.
 */
#include "cron.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dlock.h"

typedef enum field_id {
  FIELD_SECONDS = 0,
  FIELD_MINUTES = 1,
  FIELD_HOURS = 2,
  FIELD_DAY_OF_MONTH = 3,
  FIELD_MONTH = 4,
  FIELD_DAY_OF_WEEK = 5,
  FIELD_YEAR = 6
} field_id;

#define FIELD_COUNT 7

static const char *const field_names[FIELD_COUNT] = {
    "seconds", "minutes", "hours", "day-of-month", "month", "day-of-week", "year",
};

typedef enum dom_kind {
  DOM_SET = 0,            /* the days in 'dom' */
  DOM_ANY = 1,            /* '?' */
  DOM_LAST = 2,           /* L, L-n: the last day minus 'dom_arg' */
  DOM_LAST_WEEKDAY = 3,   /* LW, L-nW: the weekday nearest the last day minus 'dom_arg' */
  DOM_NEAREST_WEEKDAY = 4 /* nW: the weekday nearest day 'dom_arg' */
} dom_kind;

typedef enum dow_kind {
  DOW_SET = 0,           /* the weekdays in 'dow' */
  DOW_ANY = 1,           /* '?' */
  DOW_LAST_IN_MONTH = 2, /* nL: the last weekday 'dow_arg' of the month */
  DOW_NTH = 3            /* n#k: weekday 'dow_arg', occurrence 'dow_nth' */
} dow_kind;

struct dlock__cron {
  uint64_t seconds;  /* bit s, 0..59 */
  uint64_t minutes;  /* bit m, 0..59 */
  uint32_t hours;    /* bit h, 0..23 */
  uint32_t dom;      /* bit d, 1..31 */
  uint32_t months;   /* bit m, 1..12 */
  uint32_t dow;      /* bit w, 0 = Sunday .. 6 = Saturday */
  uint64_t years[3]; /* bit y - 1970, 1970..2099 (a year field) */
  int any_year;      /* no year field: every year, no end (see find_wall) */
  dom_kind dom_kind;
  int dom_arg;
  dow_kind dow_kind;
  int dow_arg;
  int dow_nth;
  int unix_mode;
  /* Unix mode: the day field starts with '*' (Vixie cron's DOM_STAR and
   * DOW_STAR), which makes the two day fields combine with AND, not OR. */
  int dom_star;
  int dow_star;
  char *text;
};

/* ---- Parser ---- */

typedef struct parser {
  const char *expr;
  int unix_mode;
  char *err;
  size_t err_len;
  field_id field;
  size_t pos;      /* index into expr */
  size_t end;      /* end of the current field */
  uint64_t set[3]; /* the values named so far, bit (value - field_min) */
  /* The special form of the field, if any (it must stand alone). */
  const char *special;
  size_t special_pos;
} parser;

typedef struct field_range {
  int min;
  int max;
} field_range;

static field_range range_of(const parser *p, field_id f) {
  switch (f) {
  case FIELD_SECONDS:
    return (field_range){0, 59};
  case FIELD_MINUTES:
    return (field_range){0, 59};
  case FIELD_HOURS:
    return (field_range){0, 23};
  case FIELD_DAY_OF_MONTH:
    return (field_range){1, 31};
  case FIELD_MONTH:
    return (field_range){1, 12};
  case FIELD_DAY_OF_WEEK:
    return p->unix_mode ? (field_range){0, 7} : (field_range){1, 7};
  case FIELD_YEAR:
    return (field_range){DLOCK__CRON_MIN_YEAR, DLOCK__CRON_MAX_YEAR};
  }
  return (field_range){0, 0};
}

static int fail_at(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t pos, const char *fmt, ...) {
  if (p->err == NULL || p->err_len == 0) return DLOCK_EINVAL;
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  snprintf(p->err, p->err_len, "%s: %s at column %zu in \"%s\"", field_names[p->field], what, pos + 1, p->expr);
  return DLOCK_EINVAL;
}

static int peek(const parser *p) { return p->pos < p->end ? (unsigned char)p->expr[p->pos] : -1; }

static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alpha(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static int upper(int c) { return (c >= 'a' && c <= 'z') ? c - 'a' + 'A' : c; }

/* The character at p->pos is wrong: say so, with a hint for the characters
 * that are valid elsewhere. */
static int unexpected(parser *p) {
  int c = peek(p);
  if (c < 0) return fail_at(p, p->pos, "expected a value");
  int u = upper(c);
  if (p->unix_mode && (u == 'L' || u == 'W' || u == '#' || u == '?'))
    return fail_at(p, p->pos, "unexpected '%c' ('%c' is not supported in 5-field Unix cron)", c, c);
  if (c == '?' && p->field != FIELD_DAY_OF_MONTH && p->field != FIELD_DAY_OF_WEEK)
    return fail_at(p, p->pos, "unexpected '?' ('?' is only allowed in day-of-month and day-of-week)");
  if (c == '?') return fail_at(p, p->pos, "unexpected '?' ('?' must be the whole field)");
  if (u == 'L' && p->field != FIELD_DAY_OF_MONTH && p->field != FIELD_DAY_OF_WEEK)
    return fail_at(p, p->pos, "unexpected '%c' ('L' is only allowed in day-of-month and day-of-week)", c);
  if (u == 'W' && p->field != FIELD_DAY_OF_MONTH)
    return fail_at(p, p->pos, "unexpected '%c' ('W' is only allowed in day-of-month)", c);
  if (c == '#' && p->field != FIELD_DAY_OF_WEEK)
    return fail_at(p, p->pos, "unexpected '#' ('#' is only allowed in day-of-week)");
  if (c >= 0x21 && c < 0x7f) return fail_at(p, p->pos, "unexpected '%c'", c);
  return fail_at(p, p->pos, "unexpected byte 0x%02x", (unsigned)c);
}

static void add_value(parser *p, int v) {
  int idx = v - range_of(p, p->field).min;
  p->set[idx / 64] |= UINT64_C(1) << (idx % 64);
}

/* Digits at p->pos; absurdly long numbers saturate so that the range check
 * reports them instead of overflowing. */
static void parse_number(parser *p, int *out) {
  long v = 0;
  while (is_digit(peek(p))) {
    if (v < 1000000) v = v * 10 + (peek(p) - '0');
    p->pos++;
  }
  *out = v > 1000000 ? 1000000 : (int)v;
}

static const char *const month_names[12] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                            "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[7] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

/* A number or, in month and day-of-week, a three-letter name. */
static int parse_value(parser *p, int *out) {
  size_t start = p->pos;
  field_range r = range_of(p, p->field);
  int c = peek(p);
  if (is_alpha(c) && (p->field == FIELD_MONTH || p->field == FIELD_DAY_OF_WEEK)) {
    char name[4] = {0, 0, 0, 0};
    size_t n = 0;
    while (n < 3 && is_alpha(peek(p))) {
      name[n++] = (char)upper(peek(p));
      p->pos++;
    }
    if (p->field == FIELD_MONTH) {
      for (int i = 0; i < 12; i++)
        if (strcmp(name, month_names[i]) == 0) {
          *out = i + 1;
          return 0;
        }
    } else {
      for (int i = 0; i < 7; i++)
        if (strcmp(name, day_names[i]) == 0) {
          /* Quartz counts SUN as 1; Unix cron as 0. */
          *out = p->unix_mode ? i : i + 1;
          return 0;
        }
    }
    return fail_at(p, start, "unknown name '%.*s' (expected %s)", (int)n, p->expr + start,
                   p->field == FIELD_MONTH ? "JAN-DEC" : "SUN-SAT");
  }
  if (!is_digit(c)) return unexpected(p);
  int v;
  parse_number(p, &v);
  /* Junk glued to a number ("20x0") is the real mistake, not its range. */
  int next = upper(peek(p));
  if (is_alpha(next) && next != 'L' && next != 'W') return unexpected(p);
  if (v < r.min || v > r.max)
    return fail_at(p, start, "value %.*s out of range %d-%d", (int)(p->pos - start), p->expr + start, r.min, r.max);
  *out = v;
  return 0;
}

/* The largest step Quartz's CronExpression accepts in each field: below
 * the number of values for seconds, minutes and hours (59, 59, 23), up to it
 * for day-of-month, month and day-of-week (31, 12, 7). Quartz sets no limit
 * for years; we stop at the number of years a field can name. */
static int max_step(const parser *p) {
  switch (p->field) {
  case FIELD_SECONDS:
  case FIELD_MINUTES:
    return 59;
  case FIELD_HOURS:
    return 23;
  case FIELD_DAY_OF_MONTH:
    return 31;
  case FIELD_MONTH:
    return 12;
  case FIELD_DAY_OF_WEEK:
    return 7;
  case FIELD_YEAR:
    break;
  }
  return DLOCK__CRON_MAX_YEAR - DLOCK__CRON_MIN_YEAR + 1;
}

/* At '/'; 'first' is the value the step starts from, for the hint. */
static int parse_step(parser *p, int first, int *out) {
  p->pos++;
  size_t start = p->pos;
  int v;
  if (!is_digit(peek(p))) {
    if (peek(p) < 0) return fail_at(p, p->pos, "expected a step after '/'");
    return unexpected(p);
  }
  parse_number(p, &v);
  int max = max_step(p);
  if (v < 1) return fail_at(p, start, "step %.*s out of range 1-%d", (int)(p->pos - start), p->expr + start, max);
  if (v > max)
    return fail_at(p, start,
                   "step %.*s out of range 1-%d (Quartz rejects larger steps; for one fire "
                   "per cycle write the value alone, e.g. %d)",
                   (int)(p->pos - start), p->expr + start, max, first);
  *out = v;
  return 0;
}

/* Every 'step'-th value from 'lo' to 'hi'. When lo > hi the range wraps past
 * the field's maximum (FRI-MON, 22-2), as Quartz allows. */
static int add_range(parser *p, size_t at, int lo, int hi, int step) {
  field_range r = range_of(p, p->field);
  int cycle_max = r.max;
  if (p->unix_mode && p->field == FIELD_DAY_OF_WEEK) {
    /* 0 and 7 are both Sunday: walk the week as 0..6 so that a step never
     * counts Sunday twice. */
    cycle_max = 6;
    if (lo > hi && lo == 7) lo = 0;
    if (lo <= hi) {
      for (int v = lo; v <= hi; v += step) add_value(p, v % 7);
      return 0;
    }
  }
  if (lo <= hi) {
    for (int v = lo; v <= hi; v += step) add_value(p, v);
    return 0;
  }
  if (p->field == FIELD_YEAR) return fail_at(p, at, "range %d-%d goes backwards (years do not wrap)", lo, hi);
  int span = cycle_max - r.min + 1;
  int count = (cycle_max - lo + 1) + (hi - r.min + 1);
  for (int k = 0; k < count; k += step) {
    int v = lo + k;
    if (v > cycle_max) v -= span;
    add_value(p, v);
  }
  return 0;
}

/* L, L-n, LW, nW, nL and n#k stand alone in their field, as Quartz
 * documents; 'form' names the one found, for messages. */
static int mark_special(parser *p, size_t at, int items_before, const char *form) {
  if (items_before > 0) return fail_at(p, at, "'%s' must be the only value in %s", form, field_names[p->field]);
  p->special = form;
  p->special_pos = at;
  return 0;
}

static int special_not_alone(parser *p) {
  return fail_at(p, p->special_pos, "'%s' must be the only value in %s", p->special, field_names[p->field]);
}

/* The three-letter name of value 'v' in month or day-of-week. */
static const char *value_name(const parser *p, int v) {
  if (p->field == FIELD_MONTH) return month_names[v - 1];
  return day_names[p->unix_mode ? v % 7 : v - 1];
}

/* Quartz reads a range as two names or two numbers, never one of each
 * ("MON-5", "1-MAR"): say so, and give both spellings of what was meant. */
static int mixed_range(parser *p, size_t at, int lo, int hi) {
  return fail_at(p, at, "range %.*s mixes a name and a number (write %s-%s or %d-%d)", (int)(p->pos - at), p->expr + at,
                 value_name(p, lo), value_name(p, hi), lo, hi);
}

/* One comma-separated item of a field. */
static int parse_item(parser *p, dlock__cron *c, int items_before) {
  size_t start = p->pos;
  field_range r = range_of(p, p->field);
  int rc, step;
  int quartz = !p->unix_mode;
  int lo_all = r.min;
  int hi_all = (p->unix_mode && p->field == FIELD_DAY_OF_WEEK) ? 6 : r.max;

  if (p->special) return special_not_alone(p);

  if (peek(p) == '*') {
    p->pos++;
    if (peek(p) == '/') {
      if ((rc = parse_step(p, lo_all, &step)) != 0) return rc;
      return add_range(p, start, lo_all, hi_all, step);
    }
    return add_range(p, start, lo_all, hi_all, 1);
  }

  int u = upper(peek(p));
  if (quartz && u == 'L' && p->field == FIELD_DAY_OF_MONTH) {
    /* L, L-n, LW or L-nW (Quartz: offsets 0-30, and W after either) */
    p->pos++;
    c->dom_kind = DOM_LAST;
    c->dom_arg = 0;
    int has_offset = peek(p) == '-';
    if (has_offset) {
      p->pos++;
      size_t npos = p->pos;
      int n;
      if (!is_digit(peek(p))) {
        if (peek(p) < 0) return fail_at(p, p->pos, "expected a number of days after 'L-'");
        return unexpected(p);
      }
      parse_number(p, &n);
      if (n > 30)
        return fail_at(p, npos,
                       "offset %.*s out of range 0-30 in 'L-n' (no month has more "
                       "than 31 days)",
                       (int)(p->pos - npos), p->expr + npos);
      c->dom_arg = n;
    }
    int weekday = upper(peek(p)) == 'W';
    const char *form = weekday ? (has_offset ? "L-nW" : "LW") : (has_offset ? "L-n" : "L");
    if ((rc = mark_special(p, start, items_before, form)) != 0) return rc;
    if (weekday) {
      p->pos++;
      c->dom_kind = DOM_LAST_WEEKDAY;
    }
    return 0;
  }
  if (quartz && u == 'L' && p->field == FIELD_DAY_OF_WEEK) {
    /* 'L' alone in day-of-week is Saturday (7). */
    if ((rc = mark_special(p, start, items_before, "L")) != 0) return rc;
    p->pos++;
    add_value(p, 7);
    return 0;
  }

  int lo;
  if ((rc = parse_value(p, &lo)) != 0) return rc;
  if (peek(p) == '-') {
    p->pos++;
    int hi;
    size_t hi_pos = p->pos;
    if (peek(p) < 0) return fail_at(p, p->pos, "expected a value after '-'");
    if ((rc = parse_value(p, &hi)) != 0) return rc;
    if (is_alpha((unsigned char)p->expr[start]) != is_alpha((unsigned char)p->expr[hi_pos]))
      return mixed_range(p, start, lo, hi);
    step = 1;
    if (peek(p) == '/' && (rc = parse_step(p, lo, &step)) != 0) return rc;
    u = upper(peek(p));
    if (quartz &&
        ((u == 'W' && p->field == FIELD_DAY_OF_MONTH) || ((u == 'L' || u == '#') && p->field == FIELD_DAY_OF_WEEK)))
      return fail_at(p, p->pos, "unexpected '%c' ('%c' needs a single day, not a range)", p->expr[p->pos],
                     p->expr[p->pos]);
    return add_range(p, start, lo, hi, step);
  }
  if (peek(p) == '/') {
    if ((rc = parse_step(p, lo, &step)) != 0) return rc;
    return add_range(p, start, lo, hi_all, step);
  }
  u = upper(peek(p));
  if (quartz && u == 'W' && p->field == FIELD_DAY_OF_MONTH) {
    if ((rc = mark_special(p, start, items_before, "nW")) != 0) return rc;
    p->pos++;
    c->dom_kind = DOM_NEAREST_WEEKDAY;
    c->dom_arg = lo;
    return 0;
  }
  if (quartz && u == 'L' && p->field == FIELD_DAY_OF_WEEK) {
    if ((rc = mark_special(p, start, items_before, "nL")) != 0) return rc;
    p->pos++;
    c->dow_kind = DOW_LAST_IN_MONTH;
    c->dow_arg = lo - 1;
    return 0;
  }
  if (quartz && u == '#' && p->field == FIELD_DAY_OF_WEEK) {
    if ((rc = mark_special(p, start, items_before, "n#k")) != 0) return rc;
    p->pos++;
    size_t npos = p->pos;
    int k;
    if (!is_digit(peek(p))) {
      if (peek(p) < 0) return fail_at(p, p->pos, "expected an occurrence 1-5 after '#'");
      return unexpected(p);
    }
    parse_number(p, &k);
    if (k < 1 || k > 5)
      return fail_at(p, npos, "occurrence %.*s out of range 1-5", (int)(p->pos - npos), p->expr + npos);
    c->dow_kind = DOW_NTH;
    c->dow_arg = lo - 1;
    c->dow_nth = k;
    return 0;
  }
  return add_range(p, start, lo, lo, 1);
}

/* Parse the field [start, end) of p->expr into 'c'. */
static int parse_field(parser *p, dlock__cron *c, field_id f, size_t start, size_t end) {
  p->field = f;
  p->pos = start;
  p->end = end;
  memset(p->set, 0, sizeof(p->set));
  p->special = NULL;

  if (p->expr[start] == '?' && !p->unix_mode && (f == FIELD_DAY_OF_MONTH || f == FIELD_DAY_OF_WEEK)) {
    if (end - start > 1) {
      p->pos = start + 1;
      return unexpected(p);
    }
    if (f == FIELD_DAY_OF_MONTH)
      c->dom_kind = DOM_ANY;
    else
      c->dow_kind = DOW_ANY;
    return 0;
  }
  if (f == FIELD_DAY_OF_MONTH) c->dom_star = p->expr[start] == '*';
  if (f == FIELD_DAY_OF_WEEK) c->dow_star = p->expr[start] == '*';

  int items = 0;
  for (;;) {
    int rc = parse_item(p, c, items);
    if (rc != 0) return rc;
    items++;
    if (p->pos == p->end) break;
    if (peek(p) != ',') return unexpected(p);
    p->pos++;
    if (p->pos == p->end) return fail_at(p, p->pos, "expected a value after ','");
    if (p->special) return special_not_alone(p);
  }

  uint64_t lo = p->set[0];
  switch (f) {
  case FIELD_SECONDS:
    c->seconds = lo;
    break;
  case FIELD_MINUTES:
    c->minutes = lo;
    break;
  case FIELD_HOURS:
    c->hours = (uint32_t)lo;
    break;
  /* Bit (value - min): shift days and months back to bit 'value'. */
  case FIELD_DAY_OF_MONTH:
    c->dom = (uint32_t)(lo << 1);
    break;
  case FIELD_MONTH:
    c->months = (uint32_t)(lo << 1);
    break;
  case FIELD_DAY_OF_WEEK:
    if (p->unix_mode)
      c->dow = (uint32_t)lo;
    else
      c->dow = (uint32_t)(lo & 0x7f); /* Quartz 1..7 is bit 0..6 already */
    break;
  case FIELD_YEAR:
    memcpy(c->years, p->set, sizeof(c->years));
    break;
  }
  return 0;
}

static int is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

/* dlock's extension (Vixie cron's, not Quartz's): "@daily" and the like,
 * each the Quartz expression of the usual Unix meaning. */
static const struct {
  const char *name, *quartz;
} macros[] = {
    {"@yearly", "0 0 0 1 1 ? *"}, {"@annually", "0 0 0 1 1 ? *"}, {"@monthly", "0 0 0 1 * ?"},
    {"@weekly", "0 0 0 ? * SUN"}, {"@daily", "0 0 0 * * ?"},      {"@midnight", "0 0 0 * * ?"},
    {"@hourly", "0 0 * * * ?"},
};

/* The expansion of a macro 'expr' (blanks around it allowed), NULL when
 * 'expr' is no macro; *unknown set when it starts with '@' but is none. */
static const char *cron_macro(const char *expr, int *unknown) {
  *unknown = 0;
  while (is_space(*expr)) expr++;
  if (*expr != '@') return NULL;
  size_t n = 0;
  while (expr[n] != '\0' && !is_space(expr[n])) n++;
  for (size_t k = n; expr[k] != '\0'; k++)
    if (!is_space(expr[k])) {
      *unknown = 1;
      return NULL;
    }
  for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
    if (strlen(macros[i].name) == n && strncasecmp(expr, macros[i].name, n) == 0) return macros[i].quartz;
  *unknown = 1;
  return NULL;
}

int dlock__cron_parse(const char *expr, unsigned flags, dlock__cron **out, char *err, size_t err_len) {
  if (out) *out = NULL;
  if (err && err_len) err[0] = '\0';
  if (expr == NULL || out == NULL) {
    if (err && err_len) snprintf(err, err_len, "no cron expression given");
    return DLOCK_EINVAL;
  }
  int unknown_macro;
  const char *macro = cron_macro(expr, &unknown_macro);
  if (macro) {
    /* Parsed as its Quartz expansion; the text stays what the caller wrote
     * ("@daily"), for messages and the run history. */
    int rc = dlock__cron_parse(macro, flags & ~DLOCK__CRON_UNIX5, out, err, err_len);
    char *text = rc == 0 ? strdup(expr) : NULL;
    if (rc == 0 && text == NULL) {
      dlock__cron_free(*out);
      *out = NULL;
      if (err && err_len) snprintf(err, err_len, "out of memory");
      return DLOCK_ENOMEM;
    }
    if (rc == 0) {
      free((*out)->text);
      (*out)->text = text;
    }
    return rc;
  }
  if (unknown_macro) {
    if (err && err_len)
      snprintf(err, err_len,
               "unknown cron macro in \"%s\": dlock knows @yearly, @annually, @monthly, "
               "@weekly, @daily, @midnight and @hourly, alone (an extension of dlock; Quartz has none)",
               expr);
    return DLOCK_EINVAL;
  }

  size_t starts[8], ends[8];
  size_t nfields = 0, i = 0, len = strlen(expr);
  while (i < len) {
    while (i < len && is_space(expr[i])) i++;
    if (i == len) break;
    size_t s = i;
    while (i < len && !is_space(expr[i])) i++;
    if (nfields < 8) {
      starts[nfields] = s;
      ends[nfields] = i;
    }
    nfields++;
  }
  int allow_unix = (flags & DLOCK__CRON_UNIX5) != 0;
  if (nfields > 7 || nfields < 6) {
    if (!(allow_unix && nfields == 5)) {
      if (err && err_len) {
        if (nfields == 0)
          snprintf(err, err_len, "empty cron expression");
        else if (nfields == 5)
          snprintf(err, err_len,
                   "expected 6 or 7 fields (seconds minutes hours day-of-month month day-of-week "
                   "[year]), got 5 in \"%s\"; a 5-field Unix expression needs Unix mode "
                   "(DLOCK_CRON_UNIX; the command's --unix)",
                   expr);
        else if (nfields > 7)
          snprintf(err, err_len,
                   "expected %s fields (seconds minutes hours day-of-month month day-of-week "
                   "[year]), got %zu: unexpected field at column %zu in \"%s\"",
                   allow_unix ? "5, 6 or 7" : "6 or 7", nfields, starts[7] + 1, expr);
        else
          snprintf(err, err_len,
                   "expected %s fields (seconds minutes hours day-of-month month day-of-week "
                   "[year]), got %zu in \"%s\"",
                   allow_unix ? "5, 6 or 7" : "6 or 7", nfields, expr);
      }
      return DLOCK_EINVAL;
    }
  }

  dlock__cron *c = calloc(1, sizeof(*c));
  if (c == NULL || (c->text = strdup(expr)) == NULL) {
    free(c);
    if (err && err_len) snprintf(err, err_len, "out of memory");
    return DLOCK_ENOMEM;
  }
  parser p = {expr, nfields == 5, err, err_len, FIELD_SECONDS, 0, 0, {0, 0, 0}, NULL, 0};
  c->unix_mode = p.unix_mode;
  int rc = 0;
  if (p.unix_mode) {
    /* m h dom mon dow: seconds are always 0, any year. */
    c->seconds = 1;
    static const field_id unix_fields[5] = {FIELD_MINUTES, FIELD_HOURS, FIELD_DAY_OF_MONTH, FIELD_MONTH,
                                            FIELD_DAY_OF_WEEK};
    for (size_t f = 0; f < 5 && rc == 0; f++) rc = parse_field(&p, c, unix_fields[f], starts[f], ends[f]);
  } else {
    for (size_t f = 0; f < nfields && rc == 0; f++) rc = parse_field(&p, c, (field_id)f, starts[f], ends[f]);
  }
  /* A year field '*' is every year, with no last one, as no year field:
   * '@yearly' ("0 0 0 1 1 ? *") must not stop in 2099 (issue 22 item 10).
   * Ranges, lists and steps name years, so they end in 2099 at the latest. */
  c->any_year = nfields < 7 || (ends[6] - starts[6] == 1 && expr[starts[6]] == '*');

  if (rc == 0 && !p.unix_mode) {
    /* Quartz needs '?' in exactly one of the two day fields. */
    int dom_q = c->dom_kind == DOM_ANY, dow_q = c->dow_kind == DOW_ANY;
    p.field = FIELD_DAY_OF_WEEK;
    if (dom_q && dow_q)
      rc = fail_at(&p, starts[5], "'?' may be used in only one of day-of-month and day-of-week");
    else if (!dom_q && !dow_q)
      rc = fail_at(&p, starts[5],
                   "one of day-of-month and day-of-week must be '?' (e.g. \"0 0 12 ? * MON\" or "
                   "\"0 0 12 1 * ?\")");
  }
  if (rc != 0) {
    dlock__cron_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void dlock__cron_free(dlock__cron *cron) {
  if (cron == NULL) return;
  free(cron->text);
  free(cron);
}

const char *dlock__cron_text(const dlock__cron *cron) { return cron ? cron->text : ""; }

int dlock__cron_is_unix(const dlock__cron *cron) { return cron ? cron->unix_mode : 0; }

/* ---- Next fire time ---- */

/* The lowest set bit of 'mask' at or above 'from', or -1. */
static int next_bit(uint64_t mask, int from) {
  if (from < 0) from = 0;
  if (from >= 64) return -1;
  uint64_t m = mask & (~UINT64_C(0) << from);
  return m ? __builtin_ctzll(m) : -1;
}

static int year_in(const dlock__cron *c, int64_t y) {
  if (c->any_year) return y >= DLOCK__CRON_MIN_YEAR && y <= DLOCK__CRON_END_YEAR;
  if (y < DLOCK__CRON_MIN_YEAR || y > DLOCK__CRON_MAX_YEAR) return 0;
  int idx = (int)(y - DLOCK__CRON_MIN_YEAR);
  return (int)((c->years[idx / 64] >> (idx % 64)) & 1);
}

/* The days (bit d) of month 'm' of year 'y' on which the expression fires. */
static uint32_t day_mask(const dlock__cron *c, int64_t y, int m) {
  int dim = dlock__tz_days_in_month(y, m);
  int first_wd = dlock__tz_weekday(dlock__tz_days_from_civil(y, m, 1));
  uint32_t all = (uint32_t)(((UINT64_C(1) << dim) - 1) << 1);
  uint32_t dom = all, dow = all;
#define WEEKDAY_OF(day) ((first_wd + (day)-1) % 7)

  switch (c->dom_kind) {
  case DOM_SET:
    dom = c->dom & all;
    break;
  case DOM_ANY:
    break;
  case DOM_LAST: {
    int d = dim - c->dom_arg;
    dom = d >= 1 ? UINT32_C(1) << d : 0;
    break;
  }
  case DOM_LAST_WEEKDAY:
  case DOM_NEAREST_WEEKDAY: {
    /* LW and L-nW are nW with n counted from the month's end, as in
       * Quartz's CronExpression. */
    int n = c->dom_kind == DOM_LAST_WEEKDAY ? dim - c->dom_arg : c->dom_arg;
    if (n > dim || n < 1) {
      /* The day does not exist this month: no fire, as for plain "31"
         * and for L-n. */
      dom = 0;
      break;
    }
    int d = n, wd = WEEKDAY_OF(n);
    /* Never leave the month: 1st on a Saturday -> Monday the 3rd, last
       * day on a Sunday -> the Friday before. */
    if (wd == 6)
      d = n == 1 ? 3 : n - 1;
    else if (wd == 0)
      d = n == dim ? n - 2 : n + 1;
    dom = UINT32_C(1) << d;
    break;
  }
  }

  switch (c->dow_kind) {
  case DOW_SET:
    dow = 0;
    for (int w = 0; w < 7; w++) {
      if (!(c->dow & (UINT32_C(1) << w))) continue;
      for (int d = 1 + (w - first_wd + 7) % 7; d <= dim; d += 7) dow |= UINT32_C(1) << d;
    }
    break;
  case DOW_ANY:
    break;
  case DOW_LAST_IN_MONTH: {
    int d = dim - (WEEKDAY_OF(dim) - c->dow_arg + 7) % 7;
    dow = UINT32_C(1) << d;
    break;
  }
  case DOW_NTH: {
    int d = 1 + (c->dow_arg - first_wd + 7) % 7 + 7 * (c->dow_nth - 1);
    dow = d <= dim ? UINT32_C(1) << d : 0;
    break;
  }
  }
#undef WEEKDAY_OF

  /* Vixie cron: when both day fields are restricted (neither starts with
   * '*'), a day matching either one fires. */
  if (c->unix_mode && !c->dom_star && !c->dow_star) return dom | dow;
  return dom & dow;
}

typedef struct wall {
  int64_t y;
  int mo, d, h, mi, s;
} wall;

/* The first wall time at or after 'w' that the expression names, in place.
 * Returns 0 when there is none up to the end of year 'last'.
 * Each field that has no match left carries into the one above it and the
 * next round starts there, so the loop runs a few times per year at most. */
static int find_wall(const dlock__cron *c, wall *w, int64_t last) {
  if (w->y < DLOCK__CRON_MIN_YEAR) *w = (wall){DLOCK__CRON_MIN_YEAR, 1, 1, 0, 0, 0};
  for (int guard = 0; guard < 65536; guard++) {
    if (w->y > last) return 0;
    if (!year_in(c, w->y)) {
      int64_t y = w->y + 1;
      while (y <= last && !year_in(c, y)) y++;
      if (y > last) return 0;
      *w = (wall){y, 1, 1, 0, 0, 0};
    }
    int mo = next_bit(c->months, w->mo);
    if (mo < 0 || mo > 12) {
      *w = (wall){w->y + 1, 1, 1, 0, 0, 0};
      continue;
    }
    if (mo != w->mo) *w = (wall){w->y, mo, 1, 0, 0, 0};

    int d = next_bit(day_mask(c, w->y, w->mo), w->d);
    if (d < 0) {
      *w = (wall){w->y, w->mo + 1, 1, 0, 0, 0};
      continue;
    }
    if (d != w->d) *w = (wall){w->y, w->mo, d, 0, 0, 0};

    int h = next_bit(c->hours, w->h);
    if (h < 0) {
      *w = (wall){w->y, w->mo, w->d + 1, 0, 0, 0};
      continue;
    }
    if (h != w->h) *w = (wall){w->y, w->mo, w->d, h, 0, 0};

    int mi = next_bit(c->minutes, w->mi);
    if (mi < 0) {
      *w = (wall){w->y, w->mo, w->d, w->h + 1, 0, 0};
      continue;
    }
    if (mi != w->mi) *w = (wall){w->y, w->mo, w->d, w->h, mi, 0};

    int s = next_bit(c->seconds, w->s);
    if (s < 0) {
      *w = (wall){w->y, w->mo, w->d, w->h, w->mi + 1, 0};
      continue;
    }
    w->s = s;
    return 1;
  }
  return 0;
}

static int64_t wall_to_local(const wall *w) {
  return dlock__tz_days_from_civil(w->y, w->mo, w->d) * 86400 + w->h * 3600 + w->mi * 60 + w->s;
}

static void local_to_wall(int64_t local, wall *w) {
  int64_t days = local / 86400, secs = local % 86400;
  if (secs < 0) {
    secs += 86400;
    days--;
  }
  dlock__tz_civil_from_days(days, &w->y, &w->mo, &w->d);
  w->h = (int)(secs / 3600);
  w->mi = (int)(secs / 60 % 60);
  w->s = (int)(secs % 60);
}

/* A day and more on either side of the years cron can name, which covers
 * every UT offset. */
#define OFFSET_MARGIN INT64_C(2 * 93600)

int dlock__cron_next(const dlock__cron *cron, const dlock__tz *tz, int64_t after, int64_t *next) {
  if (cron == NULL || next == NULL) return DLOCK_EINVAL;
  /* A year field ends in 2099 at the latest; without one, fire times go on
   * (as in Quartz) up to the last four-digit year. */
  int64_t end_year = cron->any_year ? DLOCK__CRON_END_YEAR : DLOCK__CRON_MAX_YEAR;
  int64_t end_local = dlock__tz_days_from_civil(end_year + 1, 1, 1) * 86400;
  if (after >= end_local + OFFSET_MARGIN) return DLOCK__CRON_NO_NEXT;
  int64_t from = after + 1;
  if (from < -OFFSET_MARGIN) from = -OFFSET_MARGIN;

  dlock__tz_period now;
  dlock__tz_period_at(tz, from, &now);
  int64_t wall_from = from + now.off;
  if (now.begin != INT64_MIN) {
    /* Just after a spring-forward change, the skipped wall times near its
     * end still fire (shifted forward by the gap) after 'from': with a 2 h
     * gap 01:00->03:00, 02:30 fires at 04:30. Start the search there. */
    int32_t before = dlock__tz_offset_at(tz, now.begin - 1);
    if (before < now.off && from + before < now.begin + now.off) wall_from = from + before;
  }
  /* Without a year field, whether a wall time fires depends only on the
   * calendar (skipped times fire shifted), which repeats every 400 years: a
   * search that finds nothing in that window never will, and stops there. This keeps "never fires" answers (30
   * February, a fifth Monday in February 2030) to a few thousand steps. */
  int64_t last = end_year;
  if (cron->any_year) {
    wall start;
    local_to_wall(wall_from, &start);
    if (start.y + DLOCK__CRON_HORIZON_YEARS < last) last = start.y + DLOCK__CRON_HORIZON_YEARS;
  }
  int64_t best = INT64_MAX;
  /* After a skipped wall time: wall times from here on fire after 'best'. */
  int64_t wall_limit = INT64_MAX;
  /* Each round either answers or moves past one DST change. */
  int done = 0;
  for (int round = 0; round < 16 && !done; round++) {
    wall w;
    local_to_wall(wall_from, &w);
    if (!find_wall(cron, &w, last)) break;
    int64_t local = wall_to_local(&w);
    if (local >= wall_limit) break;

    dlock__tz_local r;
    dlock__tz_resolve(tz, local, &r);
    switch (r.kind) {
    case DLOCK__TZ_LOCAL_UNIQUE:
      if (r.first > after) {
        if (r.first < best) best = r.first;
        done = 1;
      } else {
        /* Only a search started back in a spring-forward gap (above) gets
           * here: a wall time past the gap, in the offset of 'from', whose
           * instant is not after 'after'. Neither is any wall time up to that
           * of 'after' + 1 s in this offset, so jump there, not to the next
           * match: a 2 h gap's worth of matches (every 7 minutes in
           * Antarctica/Troll) used up the rounds and answered "never"
           * (issue 22 item 10). */
        wall_from = local + (after - r.first) + 1;
      }
      break;
    case DLOCK__TZ_LOCAL_REPEATED:
      if (r.first > after) {
        if (r.first < best) best = r.first;
        done = 1;
      } else {
        /* We are in the second pass of a repeated stretch: each of its
           * wall times fired on the first pass, so resume after it. */
        wall_from = r.wall_after > local ? r.wall_after : local + 1;
      }
      break;
    case DLOCK__TZ_LOCAL_SKIPPED:
      /* Shifted forward by the gap. A wall time just past the gap may
         * still come first in real time: look there once more. */
      if (r.first > after && r.first < best) best = r.first;
      wall_limit = r.first + (r.wall_after - r.after_gap);
      wall_from = r.wall_after > local ? r.wall_after : local + 1;
      break;
    }
  }
  /* A wall time late on 31 December 9999 west of Greenwich is already in
   * the year 10000 in UTC: past the last instant dlock reads or writes. */
  if (best == INT64_MAX || best > DLOCK__CRON_LAST_INSTANT) return DLOCK__CRON_NO_NEXT;
  *next = best;
  return 0;
}
