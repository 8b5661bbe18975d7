/*
 * tz.c - time zones from TZif files, civil calendar arithmetic, ISO 8601.
 *
 * The C library's localtime()/mktime() read the process-wide TZ and are not
 * usable from a library that serves many zones from many threads, so this
 * file reads the zoneinfo files itself (RFC 8536) and evaluates the POSIX TZ
 * footer for instants after the last stored transition.
 */
#include "tz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"

#define DEFAULT_TZDIR "/usr/share/zoneinfo"
/* Real TZif files are a few KiB; anything far larger is not one. */
#define MAX_TZIF_BYTES (1024 * 1024)
#define MAX_ZONE_NAME 255
/* RFC 8536 bounds a UT offset to [-89999, 93599] (just over a day), so two
 * instants that share a wall time are at most this far apart. */
#define MAX_OFFSET_SPREAD (2 * 93600)
/* Civil arithmetic below is exact for years 0..9999; instants are clamped
 * into that range before a POSIX rule is evaluated, so that no caller input
 * can overflow it. */
#define MIN_CIVIL_T INT64_C(-62167219200) /* 0000-01-01T00:00:00Z */
#define MAX_CIVIL_T INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* ---- Calendar ---- */

static int is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

/* Leap days in the years 1 .. y-1 ... counted on a proleptic calendar, so
 * that differences between two years give the leap days in between. */
static int64_t leap_days_before(int64_t y) {
  int64_t p = y - 1;
  return floor_div(p, 4) - floor_div(p, 100) + floor_div(p, 400);
}

static const int days_before_month[2][13] = {
    {0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334},
    {0, 0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335},
};

int64_t dlock__tz_days_from_civil(int64_t y, int m, int d) {
  int64_t days = 365 * (y - 1970) + leap_days_before(y) - leap_days_before(1970);
  return days + days_before_month[is_leap(y)][m] + d - 1;
}

void dlock__tz_civil_from_days(int64_t days, int64_t *y_out, int *m_out, int *d_out) {
  /* 146097 days make 400 years; the estimate is off by at most one year. */
  int64_t y = 1970 + floor_div(days * 400, 146097);
  while (dlock__tz_days_from_civil(y, 1, 1) > days) y--;
  while (dlock__tz_days_from_civil(y + 1, 1, 1) <= days) y++;
  int yday = (int)(days - dlock__tz_days_from_civil(y, 1, 1));
  int leap = is_leap(y);
  int m = 12;
  while (days_before_month[leap][m] > yday) m--;
  *y_out = y;
  *m_out = m;
  *d_out = yday - days_before_month[leap][m] + 1;
}

int dlock__tz_days_in_month(int64_t y, int m) {
  static const int len[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return (m == 2 && is_leap(y)) ? 29 : len[m];
}

int dlock__tz_weekday(int64_t days) {
  /* 1970-01-01 was a Thursday. */
  return (int)(((days % 7) + 7 + 4) % 7);
}

/* ---- Zone data ---- */

typedef enum rule_kind {
  RULE_JULIAN_NO_LEAP = 0, /* Jn: 1..365, February 29 never counted */
  RULE_DAY_OF_YEAR = 1,    /* n: 0..365, February 29 counted */
  RULE_MONTH_WEEK_DAY = 2  /* Mm.w.d: weekday d of week w (5 = last) of month m */
} rule_kind;

typedef struct posix_rule {
  rule_kind kind;
  int day;   /* Jn and n */
  int month; /* Mm.w.d */
  int week;
  int weekday;
  int32_t time; /* seconds after local midnight; may be negative or > 24 h */
} posix_rule;

typedef struct posix_tz {
  int32_t std_off; /* seconds east of UTC */
  int32_t dst_off;
  int has_dst;
  posix_rule start; /* standard -> daylight, in local standard time */
  posix_rule end;   /* daylight -> standard, in local daylight time */
} posix_tz;

struct dlock__tz {
  char *name;
  size_t count;       /* transitions */
  int64_t *at;        /* ascending transition instants */
  int32_t *off_after; /* offset in force from at[i] on */
  int32_t initial_off;
  int has_footer;
  posix_tz footer;
};

/* A stretch of time with one offset: [begin, end). */
typedef struct span {
  int64_t begin;
  int64_t end;
  int32_t off;
} span;

static int64_t clamp_civil(int64_t t) {
  if (t < MIN_CIVIL_T) return MIN_CIVIL_T;
  if (t > MAX_CIVIL_T) return MAX_CIVIL_T;
  return t;
}

static int64_t rule_local_day(const posix_rule *r, int64_t y) {
  int64_t jan1 = dlock__tz_days_from_civil(y, 1, 1);
  switch (r->kind) {
  case RULE_JULIAN_NO_LEAP:
    return jan1 + r->day - 1 + ((is_leap(y) && r->day >= 60) ? 1 : 0);
  case RULE_DAY_OF_YEAR:
    return jan1 + r->day;
  case RULE_MONTH_WEEK_DAY: {
    int64_t first = dlock__tz_days_from_civil(y, r->month, 1);
    int64_t day = first + (r->weekday - dlock__tz_weekday(first) + 7) % 7 + 7 * (r->week - 1);
    if (day >= first + dlock__tz_days_in_month(y, r->month)) day -= 7;
    return day;
  }
  }
  return jan1;
}

typedef struct rule_change {
  int64_t at;
  int to_dst;
} rule_change;

static void posix_span(const posix_tz *p, int64_t t, span *s) {
  if (!p->has_dst) {
    s->begin = INT64_MIN;
    s->end = INT64_MAX;
    s->off = p->std_off;
    return;
  }
  int64_t tc = clamp_civil(t);
  int64_t y;
  int m, d;
  dlock__tz_civil_from_days(floor_div(tc + p->std_off, 86400), &y, &m, &d);

  /* The changes of the years around 't', in time order. At equal instants
   * the change to standard time goes first, so that a zone on permanent
   * daylight time written as "start Jan 1 00:00, end Dec 31 24:00" stays on
   * daylight time. */
  rule_change ch[8];
  int n = 0;
  for (int64_t yy = y - 1; yy <= y + 2; yy++) {
    ch[n].at = rule_local_day(&p->start, yy) * 86400 + p->start.time - p->std_off;
    ch[n++].to_dst = 1;
    ch[n].at = rule_local_day(&p->end, yy) * 86400 + p->end.time - p->dst_off;
    ch[n++].to_dst = 0;
  }
  for (int i = 1; i < n; i++) {
    rule_change c = ch[i];
    int j = i - 1;
    while (j >= 0 && (ch[j].at > c.at || (ch[j].at == c.at && ch[j].to_dst > c.to_dst))) {
      ch[j + 1] = ch[j];
      j--;
    }
    ch[j + 1] = c;
  }
  int last = -1;
  for (int i = 0; i < n; i++)
    if (ch[i].at <= tc) last = i;
  if (last < 0) {
    s->begin = INT64_MIN;
    s->end = ch[0].at;
    s->off = ch[0].to_dst ? p->std_off : p->dst_off;
  } else {
    s->begin = ch[last].at;
    s->end = last + 1 < n ? ch[last + 1].at : INT64_MAX;
    s->off = ch[last].to_dst ? p->dst_off : p->std_off;
  }
  /* Outside the civil range the rule was evaluated at the clamp point. */
  if (t != tc) {
    if (t < tc)
      s->begin = INT64_MIN;
    else
      s->end = INT64_MAX;
  }
}

static void find_span(const dlock__tz *tz, int64_t t, span *s) {
  if (tz == NULL) {
    s->begin = INT64_MIN;
    s->end = INT64_MAX;
    s->off = 0;
    return;
  }
  size_t n = tz->count;
  if (n == 0 || t < tz->at[0]) {
    if (n == 0 && tz->has_footer) {
      posix_span(&tz->footer, t, s);
      return;
    }
    s->begin = INT64_MIN;
    s->end = n ? tz->at[0] : INT64_MAX;
    s->off = tz->initial_off;
    return;
  }
  if (t >= tz->at[n - 1]) {
    if (tz->has_footer) {
      posix_span(&tz->footer, t, s);
      if (s->begin < tz->at[n - 1]) s->begin = tz->at[n - 1];
      return;
    }
    s->begin = tz->at[n - 1];
    s->end = INT64_MAX;
    s->off = tz->off_after[n - 1];
    return;
  }
  /* at[lo] <= t < at[hi] */
  size_t lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (tz->at[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  s->begin = tz->at[lo];
  s->end = tz->at[hi];
  s->off = tz->off_after[lo];
}

int32_t dlock__tz_offset_at(const dlock__tz *tz, int64_t t) {
  span s;
  find_span(tz, t, &s);
  return s.off;
}

void dlock__tz_period_at(const dlock__tz *tz, int64_t t, dlock__tz_period *out) {
  span s;
  find_span(tz, t, &s);
  out->begin = s.begin;
  out->end = s.end;
  out->off = s.off;
}

const char *dlock__tz_name(const dlock__tz *tz) { return tz ? tz->name : "UTC"; }

void dlock__tz_resolve(const dlock__tz *tz, int64_t local, dlock__tz_local *out) {
  local = clamp_civil(local);
  span s;
  find_span(tz, local, &s);
  int64_t u = local - s.off;
  /* Common case: the instant lies deep inside one span, so no other offset
   * can map another instant to this wall time. */
  if (s.begin <= u - MAX_OFFSET_SPREAD && s.end > u + MAX_OFFSET_SPREAD) {
    out->kind = DLOCK__TZ_LOCAL_UNIQUE;
    out->first = out->second = out->after_gap = u;
    out->wall_after = local;
    return;
  }

  /* Walk every span that could hold an instant with this wall time. */
  int found = 0;
  int64_t sol[2] = {0, 0};
  int64_t first_wall_after = local;
  int gap = 0;
  int64_t gap_first = 0, gap_end = 0, gap_wall_end = 0;
  find_span(tz, local - MAX_OFFSET_SPREAD, &s);
  for (int guard = 0; guard < 64; guard++) {
    int64_t cand = local - s.off;
    if (cand >= s.begin && cand < s.end) {
      if (found == 0) first_wall_after = s.end == INT64_MAX ? local : s.end + s.off;
      if (found < 2) sol[found] = cand;
      found++;
    }
    if (s.end == INT64_MAX || s.end > local + MAX_OFFSET_SPREAD) break;
    span next;
    find_span(tz, s.end, &next);
    if (!found && !gap && next.off > s.off && local >= s.end + s.off && local < s.end + next.off) {
      gap = 1;
      gap_first = local - s.off;
      gap_end = s.end;
      gap_wall_end = s.end + next.off;
    }
    s = next;
  }

  if (found >= 2) {
    out->kind = DLOCK__TZ_LOCAL_REPEATED;
    out->first = sol[0];
    out->second = sol[1];
    out->after_gap = sol[0];
    out->wall_after = first_wall_after;
  } else if (found == 1) {
    out->kind = DLOCK__TZ_LOCAL_UNIQUE;
    out->first = out->second = out->after_gap = sol[0];
    out->wall_after = local;
  } else if (gap) {
    out->kind = DLOCK__TZ_LOCAL_SKIPPED;
    out->first = out->second = gap_first;
    out->after_gap = gap_end;
    out->wall_after = gap_wall_end;
  } else {
    /* Unreachable with consistent data; keep a defined answer. */
    find_span(tz, local, &s);
    out->kind = DLOCK__TZ_LOCAL_UNIQUE;
    out->first = out->second = out->after_gap = local - s.off;
    out->wall_after = local;
  }
}

int64_t dlock__tz_local_to_utc(const dlock__tz *tz, int64_t local) {
  dlock__tz_local r;
  dlock__tz_resolve(tz, local, &r);
  return r.first;
}

/* ---- Loading ---- */

static void set_err(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t err_len, const char *fmt, ...) {
  if (err == NULL || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

static int check_zone_name(const char *name, char *err, size_t err_len) {
  size_t len = strlen(name);
  if (len == 0) {
    set_err(err, err_len, "empty time zone name");
    return DLOCK_EINVAL;
  }
  if (len > MAX_ZONE_NAME) {
    set_err(err, err_len, "time zone name is longer than %d bytes", MAX_ZONE_NAME);
    return DLOCK_EINVAL;
  }
  if (name[0] == '/' || name[len - 1] == '/') {
    set_err(err, err_len, "invalid time zone name \"%s\": must be a relative name like Europe/Berlin", name);
    return DLOCK_EINVAL;
  }
  if (strstr(name, "..") != NULL) {
    set_err(err, err_len, "invalid time zone name \"%s\": \"..\" is not allowed", name);
    return DLOCK_EINVAL;
  }
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '/' || c == '_' ||
             c == '+' || c == '-' || c == '.';
    if (!ok) {
      set_err(err, err_len, "invalid time zone name \"%s\": unexpected character at position %zu", name, i + 1);
      return DLOCK_EINVAL;
    }
    if (c == '/' && (name[i + 1] == '/' || name[i + 1] == '.')) {
      set_err(err, err_len, "invalid time zone name \"%s\"", name);
      return DLOCK_EINVAL;
    }
  }
  if (name[0] == '.') {
    set_err(err, err_len, "invalid time zone name \"%s\"", name);
    return DLOCK_EINVAL;
  }
  return 0;
}

/* Reads at most MAX_TZIF_BYTES + 1 so that oversized files are detected. */
static int read_file(const char *path, const char *name, unsigned char **buf_out, size_t *len_out, char *err,
                     size_t err_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      set_err(err, err_len, "unknown time zone \"%s\" (no file %s)", name, path);
    else
      set_err(err, err_len, "cannot open time zone file %s: %s", path, strerror(e));
    return DLOCK_EINVAL;
  }
  size_t cap = 8192, len = 0;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) {
    close(fd);
    set_err(err, err_len, "out of memory reading %s", path);
    return DLOCK_ENOMEM;
  }
  for (;;) {
    if (len == cap) {
      if (cap > MAX_TZIF_BYTES) {
        free(buf);
        close(fd);
        set_err(err, err_len, "time zone \"%s\": %s is too large to be a TZif file", name, path);
        return DLOCK_EINVAL;
      }
      unsigned char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        close(fd);
        set_err(err, err_len, "out of memory reading %s", path);
        return DLOCK_ENOMEM;
      }
      buf = bigger;
      cap *= 2;
    }
    ssize_t got = read(fd, buf + len, cap - len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      free(buf);
      close(fd);
      if (e == EISDIR)
        set_err(err, err_len, "unknown time zone \"%s\" (%s is a directory)", name, path);
      else
        set_err(err, err_len, "cannot read time zone file %s: %s", path, strerror(e));
      return DLOCK_EINVAL;
    }
    if (got == 0) break;
    len += (size_t)got;
  }
  close(fd);
  *buf_out = buf;
  *len_out = len;
  return 0;
}

static uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static int32_t be32s(const unsigned char *p) {
  uint32_t u = be32(p);
  return u > INT32_MAX ? -(int32_t)(~u) - 1 : (int32_t)u;
}

static int64_t be64s(const unsigned char *p) {
  uint64_t u = ((uint64_t)be32(p) << 32) | be32(p + 4);
  return u > INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u;
}

/* ---- POSIX TZ strings (the TZif footer) ---- */

typedef struct cursor {
  const char *s;
  size_t len;
  size_t i;
} cursor;

static int cur_peek(const cursor *c) { return c->i < c->len ? (unsigned char)c->s[c->i] : -1; }

static int is_digit(int ch) { return ch >= '0' && ch <= '9'; }
static int is_alpha(int ch) { return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z'); }

static int parse_tz_name(cursor *c) {
  size_t start = c->i;
  if (cur_peek(c) == '<') {
    c->i++;
    start = c->i;
    while (cur_peek(c) >= 0 && cur_peek(c) != '>') {
      int ch = cur_peek(c);
      if (!is_alpha(ch) && !is_digit(ch) && ch != '+' && ch != '-') return -1;
      c->i++;
    }
    if (cur_peek(c) != '>' || c->i - start < 3) return -1;
    c->i++;
    return 0;
  }
  while (is_alpha(cur_peek(c))) c->i++;
  return c->i - start >= 3 ? 0 : -1;
}

static int parse_num(cursor *c, int max_digits, int *v) {
  int n = 0, val = 0;
  while (is_digit(cur_peek(c)) && n < max_digits) {
    val = val * 10 + (cur_peek(c) - '0');
    c->i++;
    n++;
  }
  if (n == 0 || is_digit(cur_peek(c))) return -1;
  *v = val;
  return 0;
}

/* [+-]hh[:mm[:ss]] with hh <= max_hours; the sign is kept as written. */
static int parse_hms(cursor *c, int max_hours, int32_t *out) {
  int sign = 1, h, m = 0, s = 0;
  if (cur_peek(c) == '+' || cur_peek(c) == '-') {
    if (cur_peek(c) == '-') sign = -1;
    c->i++;
  }
  if (parse_num(c, 3, &h) != 0 || h > max_hours) return -1;
  if (cur_peek(c) == ':') {
    c->i++;
    if (parse_num(c, 2, &m) != 0 || m > 59) return -1;
    if (cur_peek(c) == ':') {
      c->i++;
      if (parse_num(c, 2, &s) != 0 || s > 59) return -1;
    }
  }
  *out = sign * (h * 3600 + m * 60 + s);
  return 0;
}

static int parse_rule(cursor *c, posix_rule *r) {
  int v;
  if (cur_peek(c) == 'J') {
    c->i++;
    if (parse_num(c, 3, &v) != 0 || v < 1 || v > 365) return -1;
    r->kind = RULE_JULIAN_NO_LEAP;
    r->day = v;
  } else if (cur_peek(c) == 'M') {
    int m, w, d;
    c->i++;
    if (parse_num(c, 2, &m) != 0 || m < 1 || m > 12 || cur_peek(c) != '.') return -1;
    c->i++;
    if (parse_num(c, 1, &w) != 0 || w < 1 || w > 5 || cur_peek(c) != '.') return -1;
    c->i++;
    if (parse_num(c, 1, &d) != 0 || d > 6) return -1;
    r->kind = RULE_MONTH_WEEK_DAY;
    r->month = m;
    r->week = w;
    r->weekday = d;
  } else {
    if (parse_num(c, 3, &v) != 0 || v > 365) return -1;
    r->kind = RULE_DAY_OF_YEAR;
    r->day = v;
  }
  r->time = 7200;
  if (cur_peek(c) == '/') {
    c->i++;
    /* RFC 8536 extends POSIX: the time may be -167..167 hours. */
    if (parse_hms(c, 167, &r->time) != 0) return -1;
  }
  return 0;
}

static int parse_posix_tz(const char *s, size_t len, posix_tz *p) {
  cursor c = {s, len, 0};
  int32_t west;
  memset(p, 0, sizeof(*p));
  if (parse_tz_name(&c) != 0 || parse_hms(&c, 24, &west) != 0) return -1;
  /* POSIX offsets count hours west of Greenwich. */
  p->std_off = -west;
  if (c.i == len) return 0;
  if (parse_tz_name(&c) != 0) return -1;
  p->has_dst = 1;
  p->dst_off = p->std_off + 3600;
  if (cur_peek(&c) != ',' && c.i < len) {
    if (parse_hms(&c, 24, &west) != 0) return -1;
    p->dst_off = -west;
  }
  if (c.i == len) {
    /* No rule given: POSIX leaves it to the implementation; use the US one. */
    p->start = (posix_rule){RULE_MONTH_WEEK_DAY, 0, 3, 2, 0, 7200};
    p->end = (posix_rule){RULE_MONTH_WEEK_DAY, 0, 11, 1, 0, 7200};
    return 0;
  }
  if (cur_peek(&c) != ',') return -1;
  c.i++;
  if (parse_rule(&c, &p->start) != 0 || cur_peek(&c) != ',') return -1;
  c.i++;
  if (parse_rule(&c, &p->end) != 0 || c.i != len) return -1;
  return 0;
}

/* ---- TZif ---- */

typedef struct tzif_header {
  uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
} tzif_header;

static void read_header(const unsigned char *p, tzif_header *h) {
  h->isutcnt = be32(p + 20);
  h->isstdcnt = be32(p + 24);
  h->leapcnt = be32(p + 28);
  h->timecnt = be32(p + 32);
  h->typecnt = be32(p + 36);
  h->charcnt = be32(p + 40);
}

static uint64_t block_size(const tzif_header *h, unsigned time_size) {
  return (uint64_t)h->timecnt * time_size + h->timecnt + (uint64_t)h->typecnt * 6 + h->charcnt +
         (uint64_t)h->leapcnt * (time_size + 4) + h->isstdcnt + h->isutcnt;
}

static int parse_tzif(const unsigned char *buf, size_t len, dlock__tz *tz, const char *path, char *err,
                      size_t err_len) {
#define CORRUPT(why)                                                                                  \
  do {                                                                                                \
    set_err(err, err_len, "time zone \"%s\": %s is not a valid TZif file (%s)", tz->name, path, why); \
    return DLOCK_EINVAL;                                                                              \
  } while (0)
  if (len < 44 || memcmp(buf, "TZif", 4) != 0) CORRUPT("bad magic");
  int version = buf[4];
  if (version != 0 && version < '2') CORRUPT("unknown version");
  tzif_header h;
  read_header(buf, &h);
  uint64_t v1_size = block_size(&h, 4);
  if (v1_size > len - 44) CORRUPT("truncated");
  unsigned time_size = 4;
  size_t pos = 44;
  if (version >= '2') {
    /* The 32-bit block is only for old readers; the 64-bit one follows. */
    pos = 44 + (size_t)v1_size;
    if (len - pos < 44 || memcmp(buf + pos, "TZif", 4) != 0) CORRUPT("missing 64-bit header");
    read_header(buf + pos, &h);
    pos += 44;
    time_size = 8;
  }
  if (h.typecnt == 0 || h.typecnt > 256) CORRUPT("bad type count");
  if (h.timecnt > 100000 || h.charcnt > 65536 || h.leapcnt > 100000) CORRUPT("bad counts");
  if ((h.isstdcnt != 0 && h.isstdcnt != h.typecnt) || (h.isutcnt != 0 && h.isutcnt != h.typecnt))
    CORRUPT("bad indicator counts");
  uint64_t size = block_size(&h, time_size);
  if (size > len - pos) CORRUPT("truncated");
  if (h.leapcnt != 0) {
    set_err(err, err_len,
            "time zone \"%s\": %s counts leap seconds, which libdlock does not support "
            "(use the zone without the right/ prefix)",
            tz->name, path);
    return DLOCK_EINVAL;
  }

  const unsigned char *times = buf + pos;
  const unsigned char *idx = times + (size_t)h.timecnt * time_size;
  const unsigned char *types = idx + h.timecnt;
  int32_t type_off[256];
  for (uint32_t i = 0; i < h.typecnt; i++) {
    int32_t off = be32s(types + 6 * i);
    if (off < -89999 || off > 93599) CORRUPT("offset out of range");
    if (types[6 * i + 4] > 1) CORRUPT("bad isdst flag");
    type_off[i] = off;
  }
  tz->initial_off = type_off[0];
  if (h.timecnt > 0) {
    tz->at = malloc(sizeof(int64_t) * h.timecnt);
    tz->off_after = malloc(sizeof(int32_t) * h.timecnt);
    if (tz->at == NULL || tz->off_after == NULL) {
      set_err(err, err_len, "out of memory loading time zone \"%s\"", tz->name);
      return DLOCK_ENOMEM;
    }
  }
  for (uint32_t i = 0; i < h.timecnt; i++) {
    int64_t at = time_size == 8 ? be64s(times + 8 * (size_t)i) : be32s(times + 4 * (size_t)i);
    /* Real data reaches back to -2^59 at most ("big bang" entries); the
     * bound keeps span arithmetic far from overflow. */
    if (at < -(INT64_C(1) << 60) || at > (INT64_C(1) << 60)) CORRUPT("transition out of range");
    if (i > 0 && at <= tz->at[i - 1]) CORRUPT("transitions out of order");
    if (idx[i] >= h.typecnt) CORRUPT("bad type index");
    tz->at[i] = at;
    tz->off_after[i] = type_off[idx[i]];
  }
  tz->count = h.timecnt;
  pos += (size_t)size;

  if (time_size == 8) {
    /* Footer: "\n" POSIX-TZ-string "\n"; an empty string means none. */
    if (pos >= len || buf[pos] != '\n') CORRUPT("missing footer");
    const unsigned char *start = buf + pos + 1;
    const unsigned char *nl = memchr(start, '\n', len - pos - 1);
    if (nl == NULL) CORRUPT("unterminated footer");
    size_t flen = (size_t)(nl - start);
    if (flen > 0) {
      if (parse_posix_tz((const char *)start, flen, &tz->footer) != 0) {
        set_err(err, err_len, "time zone \"%s\": %s has a TZ footer libdlock cannot read: \"%.*s\"", tz->name, path,
                (int)(flen > 64 ? 64 : flen), (const char *)start);
        return DLOCK_EINVAL;
      }
      tz->has_footer = 1;
    }
  }
  return 0;
#undef CORRUPT
}

void dlock__tz_free(dlock__tz *tz) {
  if (tz == NULL) return;
  free(tz->name);
  free(tz->at);
  free(tz->off_after);
  free(tz);
}

int dlock__tz_load(const char *name, dlock__tz **out, char *err, size_t err_len) {
  *out = NULL;
  if (err && err_len) err[0] = '\0';
  const char *display = name ? name : "UTC";
  int rc;
  if (name != NULL && strcmp(name, "UTC") != 0) {
    rc = check_zone_name(name, err, err_len);
    if (rc != 0) return rc;
  }
  dlock__tz *tz = calloc(1, sizeof(*tz));
  if (tz == NULL || (tz->name = strdup(display)) == NULL) {
    free(tz);
    set_err(err, err_len, "out of memory loading time zone \"%s\"", display);
    return DLOCK_ENOMEM;
  }
  if (name == NULL || strcmp(name, "UTC") == 0) {
    *out = tz;
    return 0;
  }

  const char *dir = secure_getenv("TZDIR");
  if (dir == NULL || dir[0] == '\0') dir = DEFAULT_TZDIR;
  size_t path_len = strlen(dir) + 1 + strlen(name) + 1;
  char *path = malloc(path_len);
  if (path == NULL) {
    dlock__tz_free(tz);
    set_err(err, err_len, "out of memory loading time zone \"%s\"", name);
    return DLOCK_ENOMEM;
  }
  snprintf(path, path_len, "%s/%s", dir, name);

  unsigned char *buf = NULL;
  size_t len = 0;
  rc = read_file(path, name, &buf, &len, err, err_len);
  if (rc == 0) rc = parse_tzif(buf, len, tz, path, err, err_len);
  free(buf);
  free(path);
  if (rc != 0) {
    dlock__tz_free(tz);
    return rc;
  }
  *out = tz;
  return 0;
}

/* ---- ISO 8601 ---- */

int dlock__tz_format_iso8601(const dlock__tz *tz, int64_t t, char *buf, size_t buf_len) {
  if (buf == NULL || buf_len == 0) return DLOCK_ERANGE;
  buf[0] = '\0';
  /* Offsets are under 26 h, so t + offset stays where civil arithmetic is
   * exact; the year check below catches the day on either side. */
  if (t < MIN_CIVIL_T || t > MAX_CIVIL_T) return DLOCK_ERANGE;
  int32_t off = dlock__tz_offset_at(tz, t);
  int64_t local = t + off;
  int64_t days = floor_div(local, 86400);
  int64_t secs = local - days * 86400;
  int64_t y;
  int m, d;
  dlock__tz_civil_from_days(days, &y, &m, &d);
  if (y < 0 || y > 9999) return DLOCK_ERANGE;
  int32_t aoff = off < 0 ? -off : off;
  char sign = off < 0 ? '-' : '+';
  int n;
  if (aoff % 60 != 0)
    n = snprintf(buf, buf_len, "%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d:%02d", (int)y, m, d, (int)(secs / 3600),
                 (int)(secs / 60 % 60), (int)(secs % 60), sign, (int)(aoff / 3600), (int)(aoff / 60 % 60),
                 (int)(aoff % 60));
  else
    n = snprintf(buf, buf_len, "%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", (int)y, m, d, (int)(secs / 3600),
                 (int)(secs / 60 % 60), (int)(secs % 60), sign, (int)(aoff / 3600), (int)(aoff / 60 % 60));
  if (n < 0 || (size_t)n >= buf_len) {
    buf[0] = '\0';
    return DLOCK_ERANGE;
  }
  return 0;
}

/* Exactly 'n' digits at text[*pos]. */
static int take_digits(const char *text, size_t *pos, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    char ch = text[*pos + (size_t)i];
    if (ch < '0' || ch > '9') return -1;
    v = v * 10 + (ch - '0');
  }
  *pos += (size_t)n;
  *out = v;
  return 0;
}

int dlock__tz_parse_time(const char *text, const dlock__tz *tz, int64_t *out, char *err, size_t err_len) {
  if (err && err_len) err[0] = '\0';
  if (text == NULL || text[0] == '\0') {
    set_err(err, err_len, "empty time; expected ISO 8601 (2026-03-29T03:00:00+02:00) or @EPOCH");
    return DLOCK_EINVAL;
  }
  if (text[0] == '@') {
    size_t i = 1;
    int neg = 0;
    if (text[i] == '-' || text[i] == '+') neg = text[i++] == '-';
    int64_t v = 0;
    size_t digits = 0;
    while (text[i] >= '0' && text[i] <= '9') {
      if (digits >= 12) {
        set_err(err, err_len, "time \"%s\": epoch seconds out of range", text);
        return DLOCK_EINVAL;
      }
      v = v * 10 + (text[i] - '0');
      i++;
      digits++;
    }
    if (digits == 0 || text[i] != '\0') {
      set_err(err, err_len, "time \"%s\": expected @ followed by seconds since 1970-01-01 UTC", text);
      return DLOCK_EINVAL;
    }
    *out = neg ? -v : v;
    return 0;
  }

  size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
#define BAD(what)                                                                 \
  do {                                                                            \
    set_err(err, err_len,                                                         \
            "time \"%s\": %s at column %zu (expected 2026-03-29T03:00:00+02:00, " \
            "2026-03-29T03:00:00Z, a local time or @EPOCH)",                      \
            text, what, pos + 1);                                                 \
    return DLOCK_EINVAL;                                                          \
  } while (0)
  if (take_digits(text, &pos, 4, &y) != 0) BAD("expected a 4-digit year");
  if (text[pos] != '-') BAD("expected '-'");
  pos++;
  size_t mo_pos = pos;
  if (take_digits(text, &pos, 2, &mo) != 0) BAD("expected a 2-digit month");
  if (text[pos] != '-') BAD("expected '-'");
  pos++;
  size_t d_pos = pos;
  if (take_digits(text, &pos, 2, &d) != 0) BAD("expected a 2-digit day");
  if (mo < 1 || mo > 12) {
    pos = mo_pos;
    BAD("month out of range 01-12");
  }
  if (d < 1 || d > dlock__tz_days_in_month(y, mo)) {
    pos = d_pos;
    BAD("day out of range for the month");
  }
  if (text[pos] == 'T' || text[pos] == 't' || text[pos] == ' ') {
    pos++;
    size_t h_pos = pos;
    if (take_digits(text, &pos, 2, &h) != 0) BAD("expected a 2-digit hour");
    if (text[pos] != ':') BAD("expected ':'");
    pos++;
    size_t mi_pos = pos;
    if (take_digits(text, &pos, 2, &mi) != 0) BAD("expected 2-digit minutes");
    size_t s_pos = pos;
    if (text[pos] == ':') {
      pos++;
      s_pos = pos;
      if (take_digits(text, &pos, 2, &s) != 0) BAD("expected 2-digit seconds");
      if (text[pos] == '.' || text[pos] == ',') {
        pos++;
        if (text[pos] < '0' || text[pos] > '9') BAD("expected digits after the decimal point");
        while (text[pos] >= '0' && text[pos] <= '9') pos++;
      }
    }
    if (h > 23) {
      pos = h_pos;
      BAD("hour out of range 00-23");
    }
    if (mi > 59) {
      pos = mi_pos;
      BAD("minutes out of range 00-59");
    }
    if (s > 59) {
      pos = s_pos;
      BAD("seconds out of range 00-59");
    }
  }
  int64_t local = dlock__tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
  if (text[pos] == '\0') {
    *out = dlock__tz_local_to_utc(tz, local);
    return 0;
  }
  if ((text[pos] == 'Z' || text[pos] == 'z') && text[pos + 1] == '\0') {
    *out = local;
    return 0;
  }
  if (text[pos] != '+' && text[pos] != '-') BAD("unexpected character");
  int sign = text[pos] == '-' ? -1 : 1;
  pos++;
  int oh, om = 0;
  if (take_digits(text, &pos, 2, &oh) != 0) BAD("expected a 2-digit offset hour");
  if (text[pos] == ':') pos++;
  if (text[pos] != '\0' && take_digits(text, &pos, 2, &om) != 0) BAD("expected offset minutes");
  if (text[pos] != '\0') BAD("unexpected character");
  if (oh > 23 || om > 59) BAD("offset out of range");
  *out = local - sign * (oh * 3600 + om * 60);
  return 0;
#undef BAD
}
