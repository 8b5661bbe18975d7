/*
 * tz.h - IANA time zones and civil time, without the C library's tz code.
 *
 * Reads TZif files (v1, v2, v3 and v4, 64-bit data and the POSIX TZ footer)
 * from the zoneinfo directory; converts instants to wall time and back with
 * a fixed rule for skipped and repeated wall times; formats and parses
 * ISO 8601. No global state: a loaded zone is immutable and may be shared.
 */
#ifndef DLOCK_TZ_H
#define DLOCK_TZ_H

#include <stddef.h>
#include <stdint.h>

typedef struct dlock__tz dlock__tz;

/* Room for any message written by the functions below that take 'err'. */
#define DLOCK__TZ_ERR_MAX 256
/* Room for dlock__tz_format_iso8601(): "2026-03-29T03:00:00+02:00" or, for
 * historical offsets with seconds, "1890-01-01T00:00:00+00:53:28". */
#define DLOCK__TZ_ISO_MAX 32

/* Load the zone 'name' ("Europe/Berlin", "UTC") into *out. NULL or "UTC"
 * need no file. Files come from $TZDIR, else /usr/share/zoneinfo. Names that
 * are absolute, contain "..", or characters outside [A-Za-z0-9/_+-.] are
 * refused. Returns 0, DLOCK_EINVAL (unknown name, unreadable or corrupt
 * file, leap-second zone; 'err' says which) or DLOCK_ENOMEM. */
int dlock__tz_load(const char *name, dlock__tz **out, char *err, size_t err_len);

/* NULL is a no-op. */
void dlock__tz_free(dlock__tz *tz);

/* The name the zone was loaded with ("UTC" for NULL). */
const char *dlock__tz_name(const dlock__tz *tz);

/* Offset of wall time from UTC, in seconds east, at instant 't'.
 * A NULL 'tz' is UTC. */
int32_t dlock__tz_offset_at(const dlock__tz *tz, int64_t t);

/* A stretch of time with one offset: [begin, end), INT64_MIN/INT64_MAX
 * when unbounded. Two neighbouring periods may share an offset. */
typedef struct dlock__tz_period {
  int64_t begin;
  int64_t end;
  int32_t off;
} dlock__tz_period;

/* The period that holds instant 't'. */
void dlock__tz_period_at(const dlock__tz *tz, int64_t t, dlock__tz_period *out);

/* How a wall time maps to instants. */
typedef enum dlock__tz_local_kind {
  DLOCK__TZ_LOCAL_UNIQUE = 0,   /* exactly one instant: 'first' */
  DLOCK__TZ_LOCAL_REPEATED = 1, /* clocks went back: 'first' and 'second' */
  DLOCK__TZ_LOCAL_SKIPPED = 2   /* clocks went forward over it: none */
} dlock__tz_local_kind;

typedef struct dlock__tz_local {
  dlock__tz_local_kind kind;
  /* UNIQUE: the instant. REPEATED: the earlier instant. SKIPPED: the wall
   * time read with the offset in force before the gap, i.e. shifted forward
   * by the gap's length (02:30 in a 02:00->03:00 gap gives 03:30). */
  int64_t first;
  int64_t second;     /* REPEATED: the later instant; otherwise == first */
  int64_t after_gap;  /* SKIPPED: the first instant after the gap */
  int64_t wall_after; /* REPEATED and SKIPPED: first wall time (local
                         seconds) past the repeated or skipped stretch */
} dlock__tz_local;

/* Resolve 'local' (wall time as seconds since 1970-01-01T00:00:00 of the
 * wall clock) in 'tz' (NULL: UTC). */
void dlock__tz_resolve(const dlock__tz *tz, int64_t local, dlock__tz_local *out);

/* The single instant the library uses for a wall time: UNIQUE -> it,
 * REPEATED -> the first occurrence, SKIPPED -> shifted forward by the gap. */
int64_t dlock__tz_local_to_utc(const dlock__tz *tz, int64_t local);

/* ---- Civil calendar (proleptic Gregorian) ---- */

/* Days since 1970-01-01 of year 'y', month 'm' (1-12), day 'd' (1-31). */
int64_t dlock__tz_days_from_civil(int64_t y, int m, int d);
/* Inverse of dlock__tz_days_from_civil(). */
void dlock__tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d);
int dlock__tz_days_in_month(int64_t y, int m);
/* 0 = Sunday ... 6 = Saturday. */
int dlock__tz_weekday(int64_t days);

/* ---- ISO 8601 ---- */

/* Write 't' as wall time in 'tz' with its offset, e.g.
 * "2026-03-29T03:00:00+02:00" (UTC gives "+00:00"). 'buf' should hold
 * DLOCK__TZ_ISO_MAX bytes. Returns 0, or DLOCK_ERANGE when the year is
 * outside 0000-9999 or 'buf' is too small. */
int dlock__tz_format_iso8601(const dlock__tz *tz, int64_t t, char *buf, size_t buf_len);

/* Parse a point in time:
 *   "@1700000000"                  seconds since the epoch (may be negative)
 *   "2026-03-29T03:00:00+02:00"    with an offset (+HH:MM, +HHMM, +HH) or Z
 *   "2026-03-29T03:00:00"          wall time in 'tz' (NULL: UTC), resolved
 *   "2026-03-29 03:00", "2026-03-29"  as by dlock__tz_local_to_utc()
 * A fraction of a second (".250") is accepted and dropped (rounded down).
 * Returns 0 or DLOCK_EINVAL with a message in 'err'. */
int dlock__tz_parse_time(const char *text, const dlock__tz *tz, int64_t *out, char *err, size_t err_len);

#endif
