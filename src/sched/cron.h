/*
 * cron.h - Quartz cron expressions: parse, then find the next fire time.
 *
 * Pure computation (tz.c reads zoneinfo files; nothing here does I/O). A
 * parsed expression is immutable, so one may be shared between threads.
 * Syntax, rules, the DST rule and the 5-field Unix mode: docs/cron.md.
 */
#ifndef DLOCK_CRON_H
#define DLOCK_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "tz.h"

typedef struct dlock__cron dlock__cron;

/* Flags for dlock__cron_parse(). */
/* Also accept the 5-field Unix form "m h dom mon dow" (day-of-week 0-7,
 * 0 and 7 = Sunday; Vixie-cron day matching). 6 and 7 fields stay Quartz. */
#define DLOCK__CRON_UNIX5 1u

/* dlock__cron_next() result when the expression never fires after the
 * given instant (its years are all past, or it names a day that does not
 * exist, such as 30 February). Positive: it is an answer, not an error. */
#define DLOCK__CRON_NO_NEXT 1

/* Room for any message written into 'err' by dlock__cron_parse(). */
#define DLOCK__CRON_ERR_MAX 512

/* Years a year field can name. */
#define DLOCK__CRON_MIN_YEAR 1970
#define DLOCK__CRON_MAX_YEAR 2099
/* Without a year field an expression fires in every year, as in Quartz, up
 * to the last four-digit year (ISO 8601 output stays four digits). */
#define DLOCK__CRON_END_YEAR 9999
/* The last fire time: 9999-12-31T23:59:59Z (what tz.c formats and reads). */
#define DLOCK__CRON_LAST_INSTANT INT64_C(253402300799)
/* ...and dlock__cron_next() searches at most this many years past 'after':
 * whether a wall time fires depends only on the calendar, which repeats
 * every 400 years, so an expression with no fire time in that window has
 * none at all. Quartz searches 100 years. */
#define DLOCK__CRON_HORIZON_YEARS 401

/* Parse 'expr' (6 or 7 Quartz fields; 5 Unix fields with DLOCK__CRON_UNIX5)
 * into *out. On failure *out is NULL, the result is DLOCK_EINVAL (or
 * DLOCK_ENOMEM) and 'err' (may be NULL) names the field and the 1-based
 * column, e.g.
 *   day-of-week: unexpected 'X' at column 15 in "0 0 12 ? * MONX" */
int dlock__cron_parse(const char *expr, unsigned flags, dlock__cron **out, char *err, size_t err_len);

/* NULL is a no-op. */
void dlock__cron_free(dlock__cron *cron);

/* The expression as given to dlock__cron_parse(). */
const char *dlock__cron_text(const dlock__cron *cron);

/* 1 when the expression was read in the 5-field Unix form. */
int dlock__cron_is_unix(const dlock__cron *cron);

/* The first fire time strictly after 'after' (seconds since the epoch),
 * with the fields read as wall time in 'tz' (NULL: UTC). Returns 0 and sets
 * *next, DLOCK__CRON_NO_NEXT, or DLOCK_EINVAL for NULL arguments.
 * DST rule: a wall time skipped by a spring-forward gap fires shifted forward
 * by the gap's length (02:30 -> 03:30 when 02:00 jumps to 03:00); a wall
 * time repeated by a fall-back fires once, at its first occurrence. */
int dlock__cron_next(const dlock__cron *cron, const dlock__tz *tz, int64_t after, int64_t *next);

#endif
