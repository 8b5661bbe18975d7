/*
 * test_cron.c - the Quartz cron engine (src/sched/cron.c) and time zones (src/sched/tz.c).
 *
 * Expected fire times were worked out by hand from the calendar and checked
 * against an independent brute-force evaluator (Python zoneinfo, fold=0), not
 * taken from this code's output. Epochs come from `date -d ... +%s`.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cron.h"
#include "dlock.h"
#include "harness.h"
#include "test.h"
#include "tz.h"

#define MAX_EXPECT 6

/* One row: expression, zone, start, and the fire times that follow it in
 * order. "none" means dlock__cron_next() must say DLOCK__CRON_NO_NEXT. */
typedef struct next_case {
  unsigned flags;
  const char *expr;
  const char *zone;
  const char *from;
  const char *expect[MAX_EXPECT];
} next_case;

static const next_case next_cases[] = {
    /* Leap day: 2025 has none, 2028 is the next leap year. */
    {0, "0 0 0 29 2 ?", "UTC", "2025-01-01T00:00:00Z", {"2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"}},
    /* '31' is skipped in short months. */
    {0,
     "0 0 12 31 * ?",
     "UTC",
     "2026-01-31T12:00:00Z",
     {"2026-03-31T12:00:00+00:00", "2026-05-31T12:00:00+00:00", "2026-07-31T12:00:00+00:00",
      "2026-08-31T12:00:00+00:00"}},
    {0, "0 0 0 30 * ?", "UTC", "2026-01-30T00:00:00Z", {"2026-03-30T00:00:00+00:00", "2026-04-30T00:00:00+00:00"}},
    /* 31W: no fire in 30-day months and February; Sunday May 31 (the last
     * day) goes back to Friday the 29th; Saturday Oct 31 to Friday the 30th. */
    {0,
     "0 0 12 31W * ?",
     "UTC",
     "2026-01-31T12:00:00Z",
     {"2026-03-31T12:00:00+00:00", "2026-05-29T12:00:00+00:00", "2026-07-31T12:00:00+00:00",
      "2026-08-31T12:00:00+00:00", "2026-10-30T12:00:00+00:00"}},
    /* 1W: Saturday Aug 1 -> Monday Aug 3 (never back into July); Sunday
     * Nov 1 -> Monday Nov 2. */
    {0,
     "0 0 9 1W * ?",
     "UTC",
     "2026-07-15T00:00:00Z",
     {"2026-08-03T09:00:00+00:00", "2026-09-01T09:00:00+00:00", "2026-10-01T09:00:00+00:00",
      "2026-11-02T09:00:00+00:00"}},
    /* 15W: Saturday Aug 15 -> Friday 14th; Sunday Nov 15 -> Monday 16th. */
    {0,
     "0 0 9 15W * ?",
     "UTC",
     "2026-07-20T00:00:00Z",
     {"2026-08-14T09:00:00+00:00", "2026-09-15T09:00:00+00:00", "2026-10-15T09:00:00+00:00",
      "2026-11-16T09:00:00+00:00"}},
    /* 28W in February: Saturday 2026-02-28 -> 27th; Sunday 2027-02-28 is
     * the last day -> Friday 26th; 2028-02-28 is a Monday. */
    {0,
     "0 0 9 28W 2 ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-02-27T09:00:00+00:00", "2027-02-26T09:00:00+00:00", "2028-02-28T09:00:00+00:00"}},
    /* LW: last weekday of the month. */
    {0,
     "0 0 18 LW * ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-30T18:00:00+00:00", "2026-02-27T18:00:00+00:00", "2026-03-31T18:00:00+00:00",
      "2026-04-30T18:00:00+00:00", "2026-05-29T18:00:00+00:00"}},
    /* L: last day, including a leap February. */
    {0,
     "0 0 0 L * ?",
     "UTC",
     "2027-12-31T00:00:00Z",
     {"2028-01-31T00:00:00+00:00", "2028-02-29T00:00:00+00:00", "2028-03-31T00:00:00+00:00",
      "2028-04-30T00:00:00+00:00"}},
    /* L-3: third day before the last. */
    {0,
     "0 0 0 L-3 * ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-28T00:00:00+00:00", "2026-02-25T00:00:00+00:00", "2026-03-28T00:00:00+00:00",
      "2026-04-27T00:00:00+00:00"}},
    /* L-30 exists only in 31-day months. */
    {0,
     "0 0 0 L-30 * ?",
     "UTC",
     "2026-01-02T00:00:00Z",
     {"2026-03-01T00:00:00+00:00", "2026-05-01T00:00:00+00:00", "2026-07-01T00:00:00+00:00",
      "2026-08-01T00:00:00+00:00"}},
    /* 5#5: fifth Thursday; February, March, May and June 2026 have none. */
    {0,
     "0 0 10 ? * 5#5",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-29T10:00:00+00:00", "2026-04-30T10:00:00+00:00", "2026-07-30T10:00:00+00:00",
      "2026-10-29T10:00:00+00:00"}},
    /* nL: last Friday of the month. */
    {0,
     "0 15 10 ? * 6L",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-30T10:15:00+00:00", "2026-02-27T10:15:00+00:00", "2026-03-27T10:15:00+00:00",
      "2026-04-24T10:15:00+00:00"}},
    {0, "0 15 10 ? * friL", "UTC", "2026-01-01T00:00:00Z", {"2026-01-30T10:15:00+00:00"}},
    /* First Monday, by name. */
    {0,
     "0 0 8 ? * MON#1",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-05T08:00:00+00:00", "2026-02-02T08:00:00+00:00", "2026-03-02T08:00:00+00:00",
      "2026-04-06T08:00:00+00:00"}},
    /* 'L' alone in day-of-week is Saturday. */
    {0, "0 0 0 ? * L", "UTC", "2026-01-01T00:00:00Z", {"2026-01-03T00:00:00+00:00", "2026-01-10T00:00:00+00:00"}},
    /* Year lists and ranges, then nothing. */
    {0,
     "0 0 0 1 1 ? 2030,2035-2036",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2030-01-01T00:00:00+00:00", "2035-01-01T00:00:00+00:00", "2036-01-01T00:00:00+00:00", "none"}},
    {0, "0 0 0 1 1 ? 2001", "UTC", "2000-06-01T00:00:00Z", {"2001-01-01T00:00:00+00:00", "none"}},
    {0, "0 0 0 1 1 ? 2001", "UTC", "2026-01-01T00:00:00Z", {"none"}},
    {0, "0 0 0 30 2 ?", "UTC", "2026-01-01T00:00:00Z", {"none"}},
    {0, "0 0 12 31 12 ? 2099", "UTC", "2099-12-31T11:59:59Z", {"2099-12-31T12:00:00+00:00", "none"}},
    /* Steps on every field. */
    {0,
     "0/15 * * ? * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T00:00:15+00:00", "2026-01-01T00:00:30+00:00", "2026-01-01T00:00:45+00:00",
      "2026-01-01T00:01:00+00:00"}},
    {0,
     "5/20 3-59/7 * ? * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T00:03:05+00:00", "2026-01-01T00:03:25+00:00", "2026-01-01T00:03:45+00:00",
      "2026-01-01T00:10:05+00:00"}},
    {0,
     "0 0 */6 ? * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T06:00:00+00:00", "2026-01-01T12:00:00+00:00", "2026-01-01T18:00:00+00:00",
      "2026-01-02T00:00:00+00:00"}},
    {0,
     "0 0 0 1/10 * ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-11T00:00:00+00:00", "2026-01-21T00:00:00+00:00", "2026-01-31T00:00:00+00:00",
      "2026-02-01T00:00:00+00:00"}},
    {0,
     "0 0 0 1 2/3 ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-02-01T00:00:00+00:00", "2026-05-01T00:00:00+00:00", "2026-08-01T00:00:00+00:00",
      "2026-11-01T00:00:00+00:00", "2027-02-01T00:00:00+00:00"}},
    /* SUN(1), WED(4), SAT(7); 2026-01-01 is a Thursday. */
    {0,
     "0 0 0 ? * 1/3",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-03T00:00:00+00:00", "2026-01-04T00:00:00+00:00", "2026-01-07T00:00:00+00:00",
      "2026-01-10T00:00:00+00:00"}},
    {0, "0 0 0 ? * */3", "UTC", "2026-01-01T00:00:00Z", {"2026-01-03T00:00:00+00:00"}},
    /* Years 1970, 2010, 2050, 2090. */
    {0,
     "0 0 0 1 1 ? */40",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2050-01-01T00:00:00+00:00", "2090-01-01T00:00:00+00:00", "none"}},
    {0,
     "0 0 0 1 1 ? 2030/5",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2030-01-01T00:00:00+00:00", "2035-01-01T00:00:00+00:00", "2040-01-01T00:00:00+00:00"}},
    /* Wrapping ranges. */
    {0,
     "0 0 12 ? * FRI-MON",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-02T12:00:00+00:00", "2026-01-03T12:00:00+00:00", "2026-01-04T12:00:00+00:00",
      "2026-01-05T12:00:00+00:00", "2026-01-09T12:00:00+00:00"}},
    {0,
     "0 0 12 ? * FRI-MON/2",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-02T12:00:00+00:00", "2026-01-04T12:00:00+00:00", "2026-01-09T12:00:00+00:00"}},
    {0,
     "0 0 22-2 * * ?",
     "UTC",
     "2026-01-01T12:00:00Z",
     {"2026-01-01T22:00:00+00:00", "2026-01-01T23:00:00+00:00", "2026-01-02T00:00:00+00:00",
      "2026-01-02T01:00:00+00:00", "2026-01-02T02:00:00+00:00", "2026-01-02T22:00:00+00:00"}},
    {0,
     "0 0 22-2/2 * * ?",
     "UTC",
     "2026-01-01T12:00:00Z",
     {"2026-01-01T22:00:00+00:00", "2026-01-02T00:00:00+00:00", "2026-01-02T02:00:00+00:00",
      "2026-01-02T22:00:00+00:00"}},
    {0,
     "0 0 0 28-2 * ?",
     "UTC",
     "2026-02-01T00:00:00Z",
     {"2026-02-02T00:00:00+00:00", "2026-02-28T00:00:00+00:00", "2026-03-01T00:00:00+00:00",
      "2026-03-02T00:00:00+00:00", "2026-03-28T00:00:00+00:00"}},
    {0,
     "0 0 0 1 NOV-FEB ?",
     "UTC",
     "2026-03-01T00:00:00Z",
     {"2026-11-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00",
      "2027-02-01T00:00:00+00:00", "2027-11-01T00:00:00+00:00"}},
    /* Names are case-insensitive; fields may be separated by tabs. */
    {0,
     " 0\t0 0 ? jan-Mar mOn ",
     "UTC",
     "2026-03-25T00:00:00Z",
     {"2026-03-30T00:00:00+00:00", "2027-01-04T00:00:00+00:00"}},
    /* Strictly after: a start on a fire time gives the next one. */
    {0, "0 0 12 * * ?", "UTC", "2026-06-01T12:00:00Z", {"2026-06-02T12:00:00+00:00"}},
    {0, "0 0 12 * * ?", "UTC", "2026-06-01T11:59:59Z", {"2026-06-01T12:00:00+00:00"}},
    {0, "0 0 0 1 1 ?", "UTC", "@-86400", {"1970-01-01T00:00:00+00:00"}},

    /* Europe/Berlin, spring forward 2026-03-29 02:00 CET -> 03:00 CEST:
     * 02:30 does not exist and fires shifted by the gap, at 03:30 CEST. */
    {0,
     "0 30 2 * * ?",
     "Europe/Berlin",
     "2026-03-28T12:00:00+01:00",
     {"2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"}},
    {0,
     "0 0/30 * * * ?",
     "Europe/Berlin",
     "2026-03-29T01:00:00+01:00",
     {"2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"}},
    /* Fall back 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 fires once, at
     * its first occurrence (CEST). */
    {0,
     "0 30 2 * * ?",
     "Europe/Berlin",
     "2026-10-24T12:00:00+02:00",
     {"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
    {0,
     "0 0/30 * * * ?",
     "Europe/Berlin",
     "2026-10-25T01:45:00+02:00",
     {"2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T03:00:00+01:00",
      "2026-10-25T03:30:00+01:00"}},
    /* Starting inside the second pass of the repeated hour. */
    {0, "0 0/30 * * * ?", "Europe/Berlin", "2026-10-25T02:10:00+01:00", {"2026-10-25T03:00:00+01:00"}},
    /* After the last stored transition (2037) the TZ footer rule applies:
     * the last Sunday of March 2090 is the 26th. */
    {0,
     "0 30 2 * * ?",
     "Europe/Berlin",
     "2090-03-25T12:00:00+01:00",
     {"2090-03-26T03:30:00+02:00", "2090-03-27T02:30:00+02:00"}},
    {0,
     "0 30 2 ? * SUN",
     "Europe/Berlin",
     "2090-10-28T12:00:00+02:00",
     {"2090-10-29T02:30:00+02:00", "2090-11-05T02:30:00+01:00"}},

    /* America/New_York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT. */
    {0,
     "0 30 2 * * ?",
     "America/New_York",
     "2026-03-07T12:00:00-05:00",
     {"2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00"}},
    {0,
     "0 0 * * * ?",
     "America/New_York",
     "2026-03-08T00:30:00-05:00",
     {"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
    /* Fall back 2026-11-01 02:00 EDT -> 01:00 EST. */
    {0,
     "0 30 1 * * ?",
     "America/New_York",
     "2026-10-31T12:00:00-04:00",
     {"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
    {0,
     "0 0 * * * ?",
     "America/New_York",
     "2026-11-01T00:30:00-04:00",
     {"2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
    /* A 2 h gap (Troll, 01:00 UTC -> 03:00 +02): skipped 01:30 and 02:30
     * fire at 03:30 and 04:30, also when asked from 03:45. */
    {0,
     "0 30 1,2 * * ?",
     "Antarctica/Troll",
     "2026-03-29T00:00:00+00:00",
     {"2026-03-29T03:30:00+02:00", "2026-03-29T04:30:00+02:00", "2026-03-30T01:30:00+02:00"}},
    {0, "0 30 1,2 * * ?", "Antarctica/Troll", "2026-03-29T03:45:00+02:00", {"2026-03-29T04:30:00+02:00"}},
    /* A 30 min gap (Lord Howe, 02:00 +10:30 -> 02:30 +11:00). */
    {0,
     "0 15 2 * * ?",
     "Australia/Lord_Howe",
     "2026-10-03T12:00:00+10:30",
     {"2026-10-04T02:45:00+11:00", "2026-10-05T02:15:00+11:00"}},

    /* 5-field Unix form. Both day fields restricted: either one matches
     * (the 1st, the 15th and every Friday; 2026-05-01 is a Friday). */
    {DLOCK__CRON_UNIX5,
     "30 4 1,15 * 5",
     "UTC",
     "2026-05-01T00:00:00Z",
     {"2026-05-01T04:30:00+00:00", "2026-05-08T04:30:00+00:00", "2026-05-15T04:30:00+00:00",
      "2026-05-22T04:30:00+00:00", "2026-05-29T04:30:00+00:00", "2026-06-01T04:30:00+00:00"}},
    /* A field starting with '*' makes both need to match (Vixie cron). */
    {DLOCK__CRON_UNIX5,
     "0 12 */2 * 1",
     "UTC",
     "2026-06-01T00:00:00Z",
     {"2026-06-01T12:00:00+00:00", "2026-06-15T12:00:00+00:00", "2026-06-29T12:00:00+00:00",
      "2026-07-13T12:00:00+00:00"}},
    {DLOCK__CRON_UNIX5,
     "0 0 * * 7",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"}},
    {DLOCK__CRON_UNIX5, "0 0 * * 0", "UTC", "2026-01-01T00:00:00Z", {"2026-01-04T00:00:00+00:00"}},
    {DLOCK__CRON_UNIX5,
     "0 0 * * 5-1",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00", "2026-01-04T00:00:00+00:00",
      "2026-01-05T00:00:00+00:00", "2026-01-09T00:00:00+00:00"}},
    {DLOCK__CRON_UNIX5,
     "*/15 9-17 * * MON-FRI",
     "UTC",
     "2026-01-02T17:40:00Z",
     {"2026-01-02T17:45:00+00:00", "2026-01-05T09:00:00+00:00", "2026-01-05T09:15:00+00:00"}},
    {DLOCK__CRON_UNIX5,
     "30 2 * * *",
     "Europe/Berlin",
     "2026-03-28T12:00:00+01:00",
     {"2026-03-29T03:30:00+02:00", "2026-03-30T02:30:00+02:00"}},
    /* The flag keeps 6 and 7 fields as Quartz. */
    {DLOCK__CRON_UNIX5, "0 0 0 ? * 1", "UTC", "2026-01-01T00:00:00Z", {"2026-01-04T00:00:00+00:00"}},
    /* ---- Quartz agreement (issue 14): expected times from Quartz's documented
     * rules and the calendar (python3 datetime/zoneinfo), not from this code. */
    /* No year field: no end. 2099 is not the last year. */
    {0,
     "0 0 12 31 12 ?",
     "UTC",
     "2099-12-31T11:59:59Z",
     {"2099-12-31T12:00:00+00:00", "2100-12-31T12:00:00+00:00", "2101-12-31T12:00:00+00:00"}},
    /* 2100 is not a leap year (Gregorian rule): 2096 -> 2104. */
    {0, "0 0 0 29 2 ?", "UTC", "2096-03-01T00:00:00Z", {"2104-02-29T00:00:00+00:00", "2108-02-29T00:00:00+00:00"}},
    /* Last Sunday of March 02:30 in Berlin, past 2099: skipped by the
     * spring-forward change, so 03:30 CEST (the POSIX rule of the zone). */
    {0,
     "0 30 2 ? 3 1L",
     "Europe/Berlin",
     "2099-06-01T00:00:00Z",
     {"2100-03-28T03:30:00+02:00", "2101-03-27T03:30:00+02:00"}},
    /* A fifth Monday in February needs Feb 29 on a Monday: 2044, 2072,
     * then 2112 (2100 has no Feb 29), found far past any 2099 limit. */
    {0,
     "0 0 0 ? 2 MON#5",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2044-02-29T00:00:00+00:00", "2072-02-29T00:00:00+00:00", "2112-02-29T00:00:00+00:00"}},
    /* An explicit year field keeps its end. */
    {0, "0 0 12 31 12 ? 2098-2099", "UTC", "2098-12-31T12:00:00Z", {"2099-12-31T12:00:00+00:00", "none"}},
    {0, "0 0 0 ? 2 MON#5 2030", "UTC", "2026-01-01T00:00:00Z", {"none"}},
    /* Issue 22 item 10: a year field '*' is every year, with no last one,
     * like no year field; '@yearly' is "0 0 0 1 1 ? *". */
    {0, "0 0 0 1 1 ? *", "UTC", "2099-06-01T00:00:00Z", {"2100-01-01T00:00:00+00:00", "2101-01-01T00:00:00+00:00"}},
    {0, "@yearly", "UTC", "2099-06-01T00:00:00Z", {"2100-01-01T00:00:00+00:00", "2101-01-01T00:00:00+00:00"}},
    {0, "0 0 12 31 12 ? 2099,*", "UTC", "2099-12-31T12:00:00Z", {"none"}},
    {0, "0 0 0 31 4 ?", "UTC", "2026-01-01T00:00:00Z", {"none"}},
    /* L-3W: the weekday nearest the third-to-last day. Mar 28 and Jun 27
     * 2026 are Saturdays (-> Friday), Sep 27 a Sunday (-> Monday 28th). */
    {0,
     "0 0 12 L-3W * ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-28T12:00:00+00:00", "2026-02-25T12:00:00+00:00", "2026-03-27T12:00:00+00:00",
      "2026-04-27T12:00:00+00:00", "2026-05-28T12:00:00+00:00", "2026-06-26T12:00:00+00:00"}},
    {0, "0 0 12 l-3w * ?", "UTC", "2026-09-01T00:00:00Z", {"2026-09-28T12:00:00+00:00", "2026-10-28T12:00:00+00:00"}},
    /* L-30W: day 1 of 31-day months only; Saturday Aug 1 2026 -> Monday
     * the 3rd, never back into July. */
    {0,
     "0 0 0 L-30W * ?",
     "UTC",
     "2026-07-02T00:00:00Z",
     {"2026-08-03T00:00:00+00:00", "2026-10-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00",
      "2027-01-01T00:00:00+00:00"}},
    /* L-0 is L; L-0W is LW. */
    {0, "0 0 0 L-0 * ?", "UTC", "2027-12-31T00:00:00Z", {"2028-01-31T00:00:00+00:00", "2028-02-29T00:00:00+00:00"}},
    {0,
     "0 0 18 L-0W * ?",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-30T18:00:00+00:00", "2026-02-27T18:00:00+00:00", "2026-03-31T18:00:00+00:00",
      "2026-04-30T18:00:00+00:00", "2026-05-29T18:00:00+00:00"}},
    /* L-3W on a DST day: Israel springs forward on a Friday (2026-03-27,
     * 02:00 -> 03:00), and L-3W of March 2026 is that Friday: 02:30 is
     * skipped and fires at 03:30 IDT. In 2027 Mar 28 is a Sunday -> 29th. */
    {0,
     "0 30 2 L-3W 3 ?",
     "Asia/Jerusalem",
     "2026-01-01T00:00:00Z",
     {"2026-03-27T03:30:00+03:00", "2027-03-29T02:30:00+03:00"}},
    /* The largest steps Quartz accepts: 59 s, 23 h, 31 days, 12 months, 7 days. */
    {0,
     "0/59 0 0 ? * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T00:00:59+00:00", "2026-01-02T00:00:00+00:00", "2026-01-02T00:00:59+00:00"}},
    {0,
     "0 0 */23 ? * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T23:00:00+00:00", "2026-01-02T00:00:00+00:00", "2026-01-02T23:00:00+00:00"}},
    {0, "0 0 0 1/31 */12 ?", "UTC", "2026-01-01T00:00:00Z", {"2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"}},
    {0, "0 0 0 ? * */7", "UTC", "2026-01-01T00:00:00Z", {"2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"}},
};

static void check_case(const next_case *tc) {
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron = NULL;
  dlock__tz *tz = NULL;
  int rc = dlock__cron_parse(tc->expr, tc->flags, &cron, err, sizeof(err));
  if (rc != 0) TEST_FAIL("\"%s\": %s", tc->expr, err);
  rc = dlock__tz_load(tc->zone, &tz, err, sizeof(err));
  if (rc != 0) {
    dlock__cron_free(cron);
    TEST_FAIL("%s: %s", tc->zone, err);
  }
  int64_t t;
  rc = dlock__tz_parse_time(tc->from, tz, &t, err, sizeof(err));
  char got[DLOCK__TZ_ISO_MAX] = "";
  int bad = rc != 0 ? -2 : -1;
  for (int i = 0; bad == -1 && i < MAX_EXPECT && tc->expect[i]; i++) {
    int64_t next = 0;
    rc = dlock__cron_next(cron, tz, t, &next);
    if (rc == DLOCK__CRON_NO_NEXT)
      snprintf(got, sizeof(got), "none");
    else if (rc != 0)
      snprintf(got, sizeof(got), "error %d", rc);
    else
      dlock__tz_format_iso8601(tz, next, got, sizeof(got));
    if (strcmp(got, tc->expect[i]) != 0) bad = i;
    t = next;
    if (rc != 0) break;
  }
  dlock__cron_free(cron);
  dlock__tz_free(tz);
  if (bad == -2) TEST_FAIL("from \"%s\": %s", tc->from, err);
  if (bad >= 0)
    TEST_FAIL("\"%s\" in %s from %s: fire #%d is %s, want %s", tc->expr, tc->zone, tc->from, bad + 1, got,
              tc->expect[bad]);
}

TEST(next_fire_times_match_the_table) {
  for (size_t i = 0; i < sizeof(next_cases) / sizeof(next_cases[0]); i++) check_case(&next_cases[i]);
}

/* ---- Invalid expressions ---- */

typedef struct bad_case {
  unsigned flags;
  const char *expr;
  const char *message; /* must appear in the error */
} bad_case;

static const bad_case bad_cases[] = {
    {0, "0 0 12 ? * MONX", "day-of-week: unexpected 'X' at column 15 in \"0 0 12 ? * MONX\""},
    {0, "60 * * ? * *", "seconds: value 60 out of range 0-59 at column 1"},
    {0, "0 60 * ? * *", "minutes: value 60 out of range 0-59 at column 3"},
    {0, "0 0 24 * * ?", "hours: value 24 out of range 0-23 at column 5"},
    {0, "0 0 0 0 * ?", "day-of-month: value 0 out of range 1-31 at column 7"},
    {0, "0 0 0 32 * ?", "day-of-month: value 32 out of range 1-31"},
    {0, "0 0 0 1 13 ?", "month: value 13 out of range 1-12 at column 9"},
    {0, "0 0 0 1 0 ?", "month: value 0 out of range 1-12"},
    {0, "0 0 0 ? * 8", "day-of-week: value 8 out of range 1-7 at column 11"},
    {0, "0 0 0 ? * 0", "day-of-week: value 0 out of range 1-7"},
    {0, "0 0 0 1 * ? 1969", "year: value 1969 out of range 1970-2099 at column 13"},
    {0, "0 0 0 1 * ? 2100", "year: value 2100 out of range 1970-2099"},
    {0, "0 99999999999999 0 ? * *", "minutes: value 99999999999999 out of range 0-59"},
    /* Trailing junk after a number or a name. */
    {0, "5x * * ? * *", "seconds: unexpected 'x' at column 2"},
    {0, "0 0 12x ? * *", "hours: unexpected 'x' at column 7"},
    {0, "0 0 0 ? * MONDAY", "day-of-week: unexpected 'D' at column 14"},
    {0, "0 0 0 1W * ?x", "day-of-week: unexpected 'x' at column 13"},
    {0, "0 0 0 1 JANUARY ?", "month: unexpected 'U' at column 12"},
    /* Steps. */
    {0, "0/0 * * ? * *", "seconds: step 0 out of range 1-59 at column 3"},
    {0, "*/61 * * ? * *", "seconds: step 61 out of range 1-59"},
    {0, "0 0 */25 ? * *", "hours: step 25 out of range 1-23"},
    /* Quartz's CronExpression rejects a step that is not below the number
     * of values in seconds, minutes and hours (checkIncrementRange). */
    {0, "0/60 * * ? * *",
     "seconds: step 60 out of range 1-59 (Quartz rejects larger steps; for one fire per cycle write the value alone, "
     "e.g. 0) at column 3"},
    {0, "0 */60 * ? * *", "minutes: step 60 out of range 1-59"},
    {0, "0 0 */24 ? * *", "hours: step 24 out of range 1-23"},
    {0, "0 0 5/24 ? * *", "e.g. 5) at column 7"},
    {0, "0 0 0-10/24 ? * *", "hours: step 24 out of range 1-23"},
    {0, "0 0 0 */32 * ?", "day-of-month: step 32 out of range 1-31"},
    {0, "0 0 0 1 */13 ?", "month: step 13 out of range 1-12"},
    {0, "0 0 0 ? * */8", "day-of-week: step 8 out of range 1-7"},
    {DLOCK__CRON_UNIX5, "*/60 * * * *", "minutes: step 60 out of range 1-59"},
    /* Quartz reads a range as two names or two numbers, not one of each. */
    {0, "0 0 0 ? * MON-5", "day-of-week: range MON-5 mixes a name and a number (write MON-THU or 2-5) at column 11"},
    {0, "0 0 0 ? * 2-FRI", "day-of-week: range 2-FRI mixes a name and a number (write MON-FRI or 2-6)"},
    {0, "0 0 0 1 1-MAR ?", "month: range 1-MAR mixes a name and a number (write JAN-MAR or 1-3) at column 9"},
    {0, "0 0 0 1 JAN-3 ?", "month: range JAN-3 mixes a name and a number"},
    {0, "0 0 0 1 1,FEB-3/2 ?", "month: range FEB-3 mixes a name and a number (write FEB-MAR or 2-3) at column 11"},
    {DLOCK__CRON_UNIX5, "0 0 * * MON-5", "day-of-week: range MON-5 mixes a name and a number (write MON-FRI or 1-5)"},
    {0, "0 0 0 ? * 1/8", "day-of-week: step 8 out of range 1-7"},
    {0, "0 0 0 1 1/0 ?", "month: step 0 out of range 1-12"},
    {0, "* * * ? * * 2030/", "year: expected a step after '/' at column 18"},
    {0, "0 0 0 1/x * ?", "day-of-month: unexpected 'x' at column 9"},
    /* Field count. */
    {0, "1 2 3 4 5 6 7 8", "got 8"},
    {0, "1 2 3 4 5", "got 5"},
    {0, "0 0 12 ? *", "got 5"},
    {0, "", "empty cron expression"},
    {0, "   ", "empty cron expression"},
    /* '?' rules. */
    {0, "0 0 0 ? * ?", "day-of-week: '?' may be used in only one of day-of-month and day-of-week"},
    {0, "0 0 0 1 * MON", "day-of-week: one of day-of-month and day-of-week must be '?'"},
    {0, "0 0 0 * * *", "day-of-week: one of day-of-month and day-of-week must be '?'"},
    {0, "0 0 ? * * ?", "hours: unexpected '?' ('?' is only allowed in day-of-month and day-of-week)"},
    {0, "0 0 0 ?,1 * ?", "day-of-month: unexpected ','"},
    /* Special characters out of place. */
    {0, "0 L * ? * *", "minutes: unexpected 'L' ('L' is only allowed in day-of-month and day-of-week)"},
    {0, "0 0 0 1 2W ?", "month: unexpected 'W' ('W' is only allowed in day-of-month)"},
    {0, "0 0 # ? * *", "hours: unexpected '#' ('#' is only allowed in day-of-week)"},
    {0, "0 0 0 ? * 2W", "day-of-week: unexpected 'W'"},
    {0, "0 0 0 W * ?", "day-of-month: unexpected 'W' at column 7"},
    {0, "0 0 0 1-5W * ?", "day-of-month: unexpected 'W' ('W' needs a single day, not a range)"},
    {0, "0 0 0 ? * 1-3L", "day-of-week: unexpected 'L' ('L' needs a single day, not a range)"},
    {0, "0 0 0 L,5 * ?", "day-of-month: 'L' must be the only value in day-of-month at column 7"},
    {0, "0 0 0 5,L * ?", "day-of-month: 'L' must be the only value in day-of-month at column 9"},
    {0, "0 0 0 15W,20 * ?", "day-of-month: 'nW' must be the only value in day-of-month"},
    {0, "0 0 0 LW,1 * ?", "day-of-month: 'LW' must be the only value"},
    {0, "0 0 0 ? * 2L,3", "day-of-week: 'nL' must be the only value in day-of-week"},
    {0, "0 0 0 ? * 2#1,3#1", "day-of-week: 'n#k' must be the only value in day-of-week"},
    {0, "0 0 0 ? * 6#6", "day-of-week: occurrence 6 out of range 1-5 at column 13"},
    {0, "0 0 0 ? * 6#0", "day-of-week: occurrence 0 out of range 1-5"},
    {0, "0 0 0 ? * 2#", "day-of-week: expected an occurrence 1-5 after '#'"},
    {0, "0 0 0 ? * #2", "day-of-week: unexpected '#' at column 11"},
    {0, "0 0 0 L-31 * ?", "day-of-month: offset 31 out of range 0-30 in 'L-n'"},
    {0, "0 0 0 L-31W * ?",
     "day-of-month: offset 31 out of range 0-30 in 'L-n' (no month has more than 31 days) at column 9"},
    {0, "0 0 0 L-3W,5 * ?", "day-of-month: 'L-nW' must be the only value in day-of-month at column 7"},
    {0, "0 0 0 L-3WW * ?", "day-of-month: unexpected 'W' at column 11"},
    {0, "0 0 0 L-3-W * ?", "day-of-month: unexpected '-' at column 10"},
    {0, "0 0 0 L- * ?", "day-of-month: expected a number of days after 'L-'"},
    {0, "0 0 0 LW-1 * ?", "day-of-month: unexpected '-' at column 9"},
    {0, "0 0 0 ? * L-2", "day-of-week: unexpected '-'"},
    /* Lists and ranges. */
    {0, "0 0 0 ? * MON-", "day-of-week: expected a value after '-' at column 15"},
    {0, "0 0 0 ? * ,MON", "day-of-week: unexpected ',' at column 11"},
    {0, "0 0 0 ? * MON,", "day-of-week: expected a value after ','"},
    {0, "0 0 0 ? * MON,,TUE", "day-of-week: unexpected ',' at column 15"},
    {0, "0 0 0 ? * MON--TUE", "day-of-week: unexpected '-'"},
    {0, "0 0 0-5-9 ? * *", "hours: unexpected '-' at column 8"},
    {0, "0 0 0 ? * MO", "day-of-week: unknown name 'MO' (expected SUN-SAT)"},
    {0, "0 0 0 ? FOO ?", "month: unknown name 'FOO' (expected JAN-DEC) at column 9"},
    {0, "0 0 0 ? * JAN", "day-of-week: unknown name 'JAN'"},
    {0, "0 0 0 1 MON ?", "month: unknown name 'MON'"},
    {0, "0 0 JAN ? * *", "hours: unexpected 'J'"},
    {0, "0 0 0 1 * ? 2030-2020", "year: range 2030-2020 goes backwards (years do not wrap)"},
    {0, "0 0 0 1 * ? 20x0", "year: unexpected 'x'"},
    {0, "0 0 0 ? * -1", "day-of-week: unexpected '-'"},
    {0, "0 0 0 ? * \xc3\xa9", "day-of-week: unexpected byte 0xc3"},
    /* The 5-field form: only with the flag, and only its own syntax. */
    {DLOCK__CRON_UNIX5, "0 0 * * 8", "day-of-week: value 8 out of range 0-7 at column 9"},
    {DLOCK__CRON_UNIX5, "0 0 * * ?", "day-of-week: unexpected '?' ('?' is not supported in 5-field Unix cron)"},
    {DLOCK__CRON_UNIX5, "0 0 L * *", "day-of-month: unexpected 'L' ('L' is not supported in 5-field Unix cron)"},
    {DLOCK__CRON_UNIX5, "0 0 1W * *", "day-of-month: unexpected 'W'"},
    {DLOCK__CRON_UNIX5, "0 0 * * 5#2", "day-of-week: unexpected '#'"},
    {DLOCK__CRON_UNIX5, "60 0 * * *", "minutes: value 60 out of range 0-59 at column 1"},
    {DLOCK__CRON_UNIX5, "0 0 * *", "expected 5, 6 or 7 fields"},
    {DLOCK__CRON_UNIX5, "1 2 3 4 5 6 7 8", "expected 5, 6 or 7 fields"},
};

TEST(invalid_expressions_are_rejected_with_the_field_and_column) {
  for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
    char err[DLOCK__CRON_ERR_MAX] = "";
    dlock__cron *cron = (dlock__cron *)&err; /* must be reset to NULL */
    int rc = dlock__cron_parse(bad_cases[i].expr, bad_cases[i].flags, &cron, err, sizeof(err));
    if (rc != DLOCK_EINVAL) {
      dlock__cron_free(rc == 0 ? cron : NULL);
      TEST_FAIL("\"%s\" was accepted (rc %d)", bad_cases[i].expr, rc);
    }
    ASSERT(cron == NULL);
    ASSERT_CONTAINS(err, bad_cases[i].message);
  }
}

TEST(a_five_field_expression_needs_the_unix_flag) {
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron;
  ASSERT_EQ(dlock__cron_parse("*/5 * * * *", 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_CONTAINS(err, "5-field Unix expression needs Unix mode");
  ASSERT_EQ(dlock__cron_parse("*/5 * * * *", DLOCK__CRON_UNIX5, &cron, err, sizeof(err)), 0);
  ASSERT_EQ(dlock__cron_is_unix(cron), 1);
  ASSERT_STR_EQ(dlock__cron_text(cron), "*/5 * * * *");
  dlock__cron_free(cron);
  ASSERT_EQ(dlock__cron_parse("0 */5 * * * ?", DLOCK__CRON_UNIX5, &cron, err, sizeof(err)), 0);
  ASSERT_EQ(dlock__cron_is_unix(cron), 0);
  dlock__cron_free(cron);
}

/* dlock's extension: the Vixie cron macros (Quartz has none). */
TEST(macros_expand_to_their_unix_meaning) {
  static const struct {
    const char *expr;
    int64_t next; /* after 2026-03-18T10:20:30Z, a Wednesday */
  } rows[] = {
      {"@hourly", 1773831600},                              /* 2026-03-18T11:00:00Z */
      {"@daily", 1773878400},                               /* 2026-03-19T00:00:00Z */
      {"@midnight", 1773878400}, {" @weekly ", 1774137600}, /* 2026-03-22T00:00:00Z, Sunday */
      {"@monthly", 1775001600},                             /* 2026-04-01T00:00:00Z */
      {"@yearly", 1798761600},                              /* 2027-01-01T00:00:00Z */
      {"@ANNUALLY", 1798761600},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int64_t next[2];
    ASSERT_EQ(dlock_cron_next(rows[i].expr, NULL, 0, 1773829230, next, 2), 2);
    ASSERT_EQ(next[0], rows[i].next);
    ASSERT_EQ(dlock_cron_next(rows[i].expr, NULL, DLOCK_CRON_UNIX, 1773829230, next, 1), 1);
    ASSERT_EQ(next[0], rows[i].next);
  }
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron;
  ASSERT_EQ(dlock__cron_parse("@reboot", 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_CONTAINS(err, "unknown cron macro");
  ASSERT_CONTAINS(err, "@hourly");
  ASSERT_EQ(dlock__cron_parse("@daily 0", 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_CONTAINS(err, "unknown cron macro");
  ASSERT_EQ(dlock__cron_parse("*/5 * * * *", 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_CONTAINS(err, "--unix");
}

/* Found by fuzz/fuzz_cron.c: a macro's text was its expansion, not what the
 * caller wrote, so messages and the run history showed "0 0 0 1 1 ? *". */
TEST(a_macro_keeps_the_text_the_caller_wrote) {
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron;
  ASSERT_EQ(dlock__cron_parse("@annually", 0, &cron, err, sizeof(err)), 0);
  ASSERT_STR_EQ(dlock__cron_text(cron), "@annually");
  dlock__cron_free(cron);
  ASSERT_EQ(dlock__cron_parse(" @Daily ", DLOCK__CRON_UNIX5, &cron, err, sizeof(err)), 0);
  ASSERT_STR_EQ(dlock__cron_text(cron), " @Daily ");
  dlock__cron_free(cron);
}

TEST(bad_arguments_are_errors_not_crashes) {
  char err[8]; /* messages are cut to fit */
  dlock__cron *cron;
  ASSERT_EQ(dlock__cron_parse(NULL, 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_EQ(dlock__cron_parse("0 0 12 ? * MONX", 0, &cron, err, sizeof(err)), DLOCK_EINVAL);
  ASSERT_EQ(strlen(err), 7);
  ASSERT_EQ(dlock__cron_parse("0 0 12 ? * MONX", 0, &cron, NULL, 0), DLOCK_EINVAL);
  int64_t next;
  ASSERT_EQ(dlock__cron_next(NULL, NULL, 0, &next), DLOCK_EINVAL);
  ASSERT_EQ(dlock__cron_parse("* * * ? * *", 0, &cron, NULL, 0), 0);
  ASSERT_EQ(dlock__cron_next(cron, NULL, 0, NULL), DLOCK_EINVAL);
  /* Extreme instants: far past starts in 1970, far future has no next. */
  ASSERT_EQ(dlock__cron_next(cron, NULL, INT64_MIN, &next), 0);
  ASSERT_EQ(next, 0);
  ASSERT_EQ(dlock__cron_next(cron, NULL, INT64_MAX, &next), DLOCK__CRON_NO_NEXT);
  /* No year field: fire times go on past 2099, to 9999-12-31T23:59:59Z. */
  ASSERT_EQ(dlock__cron_next(cron, NULL, 4102444799, &next), 0); /* 2099-12-31T23:59:59Z */
  ASSERT_EQ(next, 4102444800);
  ASSERT_EQ(dlock__cron_next(cron, NULL, 253402300799 - 1, &next), 0);
  ASSERT_EQ(next, 253402300799);
  ASSERT_EQ(dlock__cron_next(cron, NULL, 253402300799, &next), DLOCK__CRON_NO_NEXT);
  dlock__cron_free(cron);
  /* West of Greenwich, 21:00 on 31 December 9999 is already 10000 in UTC:
   * no fire time (found by fuzz_cron; it could not be formatted). */
  dlock__tz *stj = NULL;
  char tzerr[DLOCK__TZ_ERR_MAX];
  if (dlock__tz_load("America/St_Johns", &stj, tzerr, sizeof tzerr) == 0) {
    ASSERT_EQ(dlock__cron_parse("0 0 21 ? * *", 0, &cron, NULL, 0), 0);
    ASSERT_EQ(dlock__cron_next(cron, stj, 253402294719, &next), DLOCK__CRON_NO_NEXT);
    ASSERT_EQ(dlock__cron_next(cron, stj, 253402294719 - 86400, &next), 0); /* the day before still fires */
    char iso[DLOCK__TZ_ISO_MAX];
    ASSERT_EQ(dlock__tz_format_iso8601(stj, next, iso, sizeof iso), 0);
    dlock__cron_free(cron);
    dlock__tz_free(stj);
  }
  /* A year field ends where its years end. */
  ASSERT_EQ(dlock__cron_parse("* * * ? * * 2099", 0, &cron, NULL, 0), 0);
  ASSERT_EQ(dlock__cron_next(cron, NULL, 4102444799 - 1, &next), 0);
  ASSERT_EQ(next, 4102444799);
  ASSERT_EQ(dlock__cron_next(cron, NULL, 4102444799, &next), DLOCK__CRON_NO_NEXT);
  ASSERT_EQ(dlock__cron_next(cron, NULL, INT64_MAX, &next), DLOCK__CRON_NO_NEXT);
  dlock__cron_free(cron);
  dlock__cron_free(NULL);
}

/* ---- Time zones, ISO 8601 ---- */

TEST(iso8601_formats_and_parses_against_date_epochs) {
  /* date -d '2026-03-29T03:00:00+02:00' +%s etc. */
  static const struct {
    const char *zone;
    int64_t epoch;
    const char *iso;
  } rows[] = {
      {"UTC", 0, "1970-01-01T00:00:00+00:00"},
      {"UTC", 951782400, "2000-02-29T00:00:00+00:00"},
      {"Europe/Berlin", 1774746000, "2026-03-29T03:00:00+02:00"},
      {"Europe/Berlin", 1774745999, "2026-03-29T01:59:59+01:00"},
      {"Europe/Berlin", 1792886400, "2026-10-25T02:00:00+02:00"},
      {"Europe/Berlin", 1792890000, "2026-10-25T02:00:00+01:00"},
      {"America/New_York", 1772953200, "2026-03-08T03:00:00-04:00"},
      {"America/New_York", 1793512800, "2026-11-01T01:00:00-05:00"},
      {"Asia/Kolkata", 1700000000, "2023-11-15T03:43:20+05:30"},
      {"America/St_Johns", 1700000000, "2023-11-14T18:43:20-03:30"},
      {"Europe/Amsterdam", -2000000000, "1906-08-16T20:46:12+00:19:32"}, /* local mean time */
      {"Australia/Sydney", 3786912000, "2090-01-01T11:00:00+11:00"},
      {"Australia/Sydney", 3802550400, "2090-07-01T10:00:00+10:00"},
      {"Europe/Dublin", 3786912000, "2090-01-01T00:00:00+00:00"},
      {"Europe/Dublin", 3802550400, "2090-07-01T01:00:00+01:00"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char err[DLOCK__TZ_ERR_MAX], buf[DLOCK__TZ_ISO_MAX];
    dlock__tz *tz;
    ASSERT_EQ(dlock__tz_load(rows[i].zone, &tz, err, sizeof(err)), 0);
    int rc = dlock__tz_format_iso8601(tz, rows[i].epoch, buf, sizeof(buf));
    int64_t back = 0;
    int prc = dlock__tz_parse_time(rows[i].iso, NULL, &back, err, sizeof(err));
    dlock__tz_free(tz);
    ASSERT_EQ(rc, 0);
    ASSERT_STR_EQ(buf, rows[i].iso);
    /* The Amsterdam LMT offset has seconds, which ISO input cannot carry. */
    if (strcmp(rows[i].zone, "Europe/Amsterdam") != 0) {
      ASSERT_EQ(prc, 0);
      ASSERT_EQ(back, rows[i].epoch);
    }
  }
}

TEST(time_input_forms) {
  static const struct {
    const char *text;
    const char *zone;
    int64_t epoch;
  } rows[] = {
      {"@1774746000", NULL, 1774746000},
      {"@-1", NULL, -1},
      {"2026-03-29T01:00:00Z", NULL, 1774746000},
      {"2026-03-29t01:00:00z", NULL, 1774746000},
      {"2026-03-29T03:00:00+02:00", NULL, 1774746000},
      {"2026-03-29T03:00:00+0200", NULL, 1774746000},
      {"2026-03-29T03:00:00+02", NULL, 1774746000},
      {"2026-03-29T03:00:00.999+02:00", NULL, 1774746000},
      {"2026-03-29T06:30:00+05:30", NULL, 1774746000},
      {"2026-03-28T22:00:00-03:00", NULL, 1774746000},
      /* Wall time in a zone. */
      {"2026-03-29T03:00:00", "Europe/Berlin", 1774746000},
      {"2026-03-29 03:00", "Europe/Berlin", 1774746000},
      {"2026-03-29", "Europe/Berlin", 1774738800},
      {"2026-03-29T01:00:00", NULL, 1774746000},
      /* Skipped: shifted forward by the gap (02:30 -> 03:30 CEST). */
      {"2026-03-29T02:30:00", "Europe/Berlin", 1774747800},
      /* Repeated: the first occurrence (CEST). */
      {"2026-10-25T02:30:00", "Europe/Berlin", 1792888200},
      {"2026-11-01T01:30:00", "America/New_York", 1793511000},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char err[DLOCK__TZ_ERR_MAX] = "";
    dlock__tz *tz = NULL;
    if (rows[i].zone) ASSERT_EQ(dlock__tz_load(rows[i].zone, &tz, err, sizeof(err)), 0);
    int64_t t = 0;
    int rc = dlock__tz_parse_time(rows[i].text, tz, &t, err, sizeof(err));
    dlock__tz_free(tz);
    if (rc != 0) TEST_FAIL("\"%s\": %s", rows[i].text, err);
    if (t != rows[i].epoch)
      TEST_FAIL("\"%s\" gave %lld, want %lld", rows[i].text, (long long)t, (long long)rows[i].epoch);
  }
}

TEST(bad_time_input_is_rejected) {
  static const struct {
    const char *text;
    const char *message;
  } rows[] = {
      {"", "empty time"},
      {"x", "expected a 4-digit year at column 1"},
      {"@", "expected @ followed by seconds"},
      {"@12a", "expected @ followed by seconds"},
      {"@99999999999999999999", "out of range"},
      {"2026-02-29T00:00:00", "day out of range for the month at column 9"},
      {"2026-13-01", "month out of range 01-12 at column 6"},
      {"2026-03-29T24:00:00", "hour out of range 00-23"},
      {"2026-03-29T23:60:00", "minutes out of range 00-59"},
      {"2026-03-29T23:00:60", "seconds out of range 00-59"},
      {"2026-03-29T03:00:00+2", "expected a 2-digit offset hour"},
      {"2026-03-29T03:00:00Zx", "unexpected character at column 20"},
      {"2026-03-29T03:00:00+02:00x", "unexpected character"},
      {"2026-03-29T03", "expected ':'"},
      {"26-03-29", "expected a 4-digit year"},
      {"2026-3-29", "expected a 2-digit month"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char err[DLOCK__TZ_ERR_MAX] = "";
    int64_t t;
    ASSERT_EQ(dlock__tz_parse_time(rows[i].text, NULL, &t, err, sizeof(err)), DLOCK_EINVAL);
    ASSERT_CONTAINS(err, rows[i].message);
  }
}

TEST(time_zone_errors_are_clear) {
  static const struct {
    const char *name;
    const char *message;
  } rows[] = {
      {"Mars/Olympus_Mons", "unknown time zone \"Mars/Olympus_Mons\""},
      {"../etc/passwd", "\"..\" is not allowed"},
      {"Europe/../../etc/passwd", "\"..\" is not allowed"},
      {"/etc/localtime", "must be a relative name"},
      {"Europe/", "must be a relative name"},
      {"Europe", "is a directory"},
      {"Europe//Berlin", "invalid time zone name"},
      {"Europe/Ber lin", "unexpected character at position 11"},
      {"", "empty time zone name"},
      {"right/Europe/Berlin", "leap seconds"},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char err[DLOCK__TZ_ERR_MAX] = "";
    dlock__tz *tz = (dlock__tz *)&err;
    int rc = dlock__tz_load(rows[i].name, &tz, err, sizeof(err));
    if (rc == 0) {
      dlock__tz_free(tz);
      /* right/ zones are optional in tzdata packages. */
      if (strcmp(rows[i].name, "right/Europe/Berlin") == 0) continue;
      TEST_FAIL("\"%s\" was accepted", rows[i].name);
    }
    if (strstr(rows[i].name, "right/") && strstr(err, "unknown time zone")) continue;
    ASSERT_EQ(rc, DLOCK_EINVAL);
    ASSERT(tz == NULL);
    ASSERT_CONTAINS(err, rows[i].message);
  }
  dlock__tz *utc;
  char err[DLOCK__TZ_ERR_MAX];
  ASSERT_EQ(dlock__tz_load(NULL, &utc, err, sizeof(err)), 0);
  ASSERT_STR_EQ(dlock__tz_name(utc), "UTC");
  ASSERT_EQ(dlock__tz_offset_at(utc, 1700000000), 0);
  dlock__tz_free(utc);
  dlock__tz_free(NULL);
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(data, 1, len, f);
    fclose(f);
  }
}

TEST(corrupt_zone_files_are_rejected) {
  char dir[] = "/tmp/dlock_tz_XXXXXX";
  ASSERT(mkdtemp(dir) != NULL);
  char path[256];
  /* Garbage, a truncated real file, and a real file with its counts broken. */
  snprintf(path, sizeof(path), "%s/Garbage", dir);
  write_file(path, "TZif2 this is not a zone", 24);
  unsigned char real[8192];
  size_t real_len = 0;
  FILE *f = fopen("/usr/share/zoneinfo/Europe/Berlin", "rb");
  ASSERT(f != NULL);
  real_len = fread(real, 1, sizeof(real), f);
  fclose(f);
  ASSERT(real_len > 100);
  snprintf(path, sizeof(path), "%s/Truncated", dir);
  write_file(path, real, real_len - 40);
  real[35] = 0xff; /* timecnt of the v1 header */
  snprintf(path, sizeof(path), "%s/BadCount", dir);
  write_file(path, real, real_len);

  const char *old = getenv("TZDIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("TZDIR", dir, 1);
  static const char *const names[] = {"Garbage", "Truncated", "BadCount"};
  int failures = 0;
  for (size_t i = 0; i < 3; i++) {
    char err[DLOCK__TZ_ERR_MAX] = "";
    dlock__tz *tz = NULL;
    int rc = dlock__tz_load(names[i], &tz, err, sizeof(err));
    if (rc != DLOCK_EINVAL || !strstr(err, "is not a valid TZif file")) failures++;
    dlock__tz_free(rc == 0 ? tz : NULL);
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    unlink(path);
  }
  if (saved)
    setenv("TZDIR", saved, 1);
  else
    unsetenv("TZDIR");
  free(saved);
  rmdir(dir);
  ASSERT_EQ(failures, 0);
}

TEST(wall_times_resolve_with_the_documented_rule) {
  char err[DLOCK__TZ_ERR_MAX];
  dlock__tz *tz;
  ASSERT_EQ(dlock__tz_load("Europe/Berlin", &tz, err, sizeof(err)), 0);
  dlock__tz_local r;
  int64_t day = dlock__tz_days_from_civil(2026, 3, 29) * 86400;
  dlock__tz_resolve(tz, day + 2 * 3600 + 1800, &r); /* 02:30, skipped */
  int kind = r.kind, ok = r.first == 1774747800 && r.after_gap == 1774746000 && r.wall_after == day + 3 * 3600;
  day = dlock__tz_days_from_civil(2026, 10, 25) * 86400;
  dlock__tz_resolve(tz, day + 2 * 3600 + 1800, &r); /* 02:30, repeated */
  int kind2 = r.kind, ok2 = r.first == 1792888200 && r.second == 1792891800 && r.wall_after == day + 3 * 3600;
  dlock__tz_resolve(tz, day + 12 * 3600, &r);
  int kind3 = r.kind;
  dlock__tz_free(tz);
  ASSERT_EQ(kind, DLOCK__TZ_LOCAL_SKIPPED);
  ASSERT(ok);
  ASSERT_EQ(kind2, DLOCK__TZ_LOCAL_REPEATED);
  ASSERT(ok2);
  ASSERT_EQ(kind3, DLOCK__TZ_LOCAL_UNIQUE);
}

/* ---- The DST rule, against an oracle that does not use tz.c ----
 *
 * Issue 22 item 10: docs/cron.md states dlock's own rule for wall times that
 * a DST change skips or repeats. It is not Quartz 2.3.2's (which skips a
 * time in the spring gap and fires a repeated one in the second pass) nor
 * Spring's CronExpression's (which also skips a time in the gap). Here each
 * wall time is resolved by that rule with glibc's localtime_r() as the only
 * source of offsets: a wall time that exists once is that instant; one that
 * exists twice is its first occurrence; one that is skipped is read with the
 * offset in force before the change (shifted forward by the gap). The fire
 * times are those instants, once each, and next(after) must be the least of
 * them after 'after', for every minute of two days around each change. */

static int oracle_gmtoff(int64_t t, long *off) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (localtime_r(&tt, &tm) == NULL) return -1;
  *off = tm.tm_gmtoff;
  return 0;
}

/* The instant of wall time 'wall' (seconds of a UTC-like calendar) by the rule. */
static int64_t oracle_resolve(int64_t wall) {
  long before = 0, after = 0, o1 = 0, o2 = 0;
  /* The offsets a day before and after: one change per day in these zones. */
  oracle_gmtoff(wall - 86400, &before);
  oracle_gmtoff(wall + 86400, &after);
  int64_t c1 = wall - before, c2 = wall - after;
  int ok1 = oracle_gmtoff(c1, &o1) == 0 && o1 == before;
  int ok2 = oracle_gmtoff(c2, &o2) == 0 && o2 == after;
  if (ok1 && ok2) return c1 < c2 ? c1 : c2; /* repeated: the first occurrence */
  if (ok1) return c1;
  if (ok2) return c2;
  return wall - before; /* skipped: the offset before the change */
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

TEST(dst_rule_matches_an_independent_oracle) {
  static const struct {
    const char *zone;
    int y, m, d; /* the day of a change, wall time */
  } days[] = {
      {"Europe/Berlin", 2026, 3, 29},    {"Europe/Berlin", 2026, 10, 25},      {"America/New_York", 2026, 3, 8},
      {"America/New_York", 2026, 11, 1}, {"Australia/Lord_Howe", 2026, 10, 4}, {"Australia/Lord_Howe", 2026, 4, 5},
      {"Antarctica/Troll", 2026, 3, 29}, {"Antarctica/Troll", 2026, 10, 25},
  };
  /* Minute-level expressions (seconds 0), so minutes of wall time suffice. */
  static const char *const exprs[] = {"0 30 2 * * ?",   "0 0/30 * * * ?", "0 0 * * * ?",
                                      "0 15 1,2 * * ?", "0 */7 * * * ?",  "0 59 1 * * ?"};
  enum { WINDOW_MIN = 3 * 1440 }; /* from the day before to the day after */
  static int64_t fires[WINDOW_MIN];
  const char *old_tz = getenv("TZ");
  char saved[256] = "";
  if (old_tz) snprintf(saved, sizeof saved, "%s", old_tz);
  int failures = 0;
  for (size_t z = 0; z < sizeof(days) / sizeof(days[0]) && failures < 5; z++) {
    char tzenv[128];
    snprintf(tzenv, sizeof tzenv, ":%s", days[z].zone);
    setenv("TZ", tzenv, 1);
    tzset();
    char err[DLOCK__CRON_ERR_MAX];
    dlock__tz *tz;
    ASSERT_EQ(dlock__tz_load(days[z].zone, &tz, err, sizeof(err)), 0);
    int64_t day0 = (dlock__tz_days_from_civil(days[z].y, days[z].m, days[z].d) - 1) * 86400;
    for (size_t e = 0; e < sizeof(exprs) / sizeof(exprs[0]); e++) {
      dlock__cron *cron;
      ASSERT_EQ(dlock__cron_parse(exprs[e], 0, &cron, err, sizeof(err)), 0);
      /* The fire instants of the window by the rule (matching is plain wall
       * arithmetic: these expressions name only minutes and hours). */
      int n = 0;
      for (int i = 0; i < WINDOW_MIN; i++) {
        int64_t wall = day0 + (int64_t)i * 60;
        int hh = (int)((wall / 3600) % 24), mm = (int)((wall / 60) % 60), hit;
        switch (e) {
        case 0:
          hit = hh == 2 && mm == 30;
          break;
        case 1:
          hit = mm % 30 == 0;
          break;
        case 2:
          hit = mm == 0;
          break;
        case 3:
          hit = (hh == 1 || hh == 2) && mm == 15;
          break;
        case 4:
          hit = mm % 7 == 0;
          break;
        default:
          hit = hh == 1 && mm == 59;
          break;
        }
        if (hit) fires[n++] = oracle_resolve(wall);
      }
      qsort(fires, (size_t)n, sizeof fires[0], cmp_i64);
      /* Ask from every minute (and the second before each fire) of the
       * window, up to the last fire: the answer is the least fire after it. */
      int64_t first = fires[0], last = fires[n - 1];
      for (int64_t after = first; after < last && failures < 5; after += 60) {
        for (int k = 0; k < 2; k++) {
          int64_t a = after - k; /* also one second earlier */
          int64_t want = 0, got = 0;
          for (int i = 0; i < n; i++)
            if (fires[i] > a) {
              want = fires[i];
              break;
            }
          if (want == 0) continue;
          int rc = dlock__cron_next(cron, tz, a, &got);
          if (rc != 0 || got != want) {
            char wa[DLOCK__TZ_ISO_MAX], wg[DLOCK__TZ_ISO_MAX], wf[DLOCK__TZ_ISO_MAX];
            dlock__tz_format_iso8601(tz, a, wf, sizeof wf);
            dlock__tz_format_iso8601(tz, want, wa, sizeof wa);
            dlock__tz_format_iso8601(tz, got, wg, sizeof wg);
            printf("  \"%s\" in %s after %s: got %s (rc %d), the rule says %s\n", exprs[e], days[z].zone, wf, wg, rc,
                   wa);
            failures++;
          }
        }
      }
      dlock__cron_free(cron);
    }
    dlock__tz_free(tz);
  }
  if (old_tz)
    setenv("TZ", saved, 1);
  else
    unsetenv("TZ");
  tzset();
  ASSERT_EQ(failures, 0);
}

TEST(offsets_match_zoneinfo_in_both_hemispheres_and_past_2037) {
  /* python3: datetime.fromtimestamp(t, ZoneInfo(zone)).utcoffset() */
  static const struct {
    const char *zone;
    int64_t t;
    int32_t off;
  } rows[] = {
      {"Europe/Berlin", 3794173199, 3600}, /* 2090-03-26T00:59:59Z */
      {"Europe/Berlin", 3794173200, 7200},
      {"Europe/Berlin", 3812921999, 7200}, /* 2090-10-29T00:59:59Z */
      {"Europe/Berlin", 3812922000, 3600},
      {"Australia/Sydney", 3794745599, 39600}, /* 2090-04-01T15:59:59Z */
      {"Australia/Sydney", 3794745600, 36000},
      {"Australia/Sydney", 3810470399, 36000}, /* 2090-09-30T15:59:59Z */
      {"Australia/Sydney", 3810470400, 39600},
      {"Australia/Lord_Howe", 1791041399, 37800}, /* 2026-10-03T15:29:59Z */
      {"Australia/Lord_Howe", 1791041400, 39600},
      {"Australia/Lord_Howe", 1791043200, 39600},
      {"Europe/Dublin", 3794173199, 0}, /* negative DST in the data */
      {"Europe/Dublin", 3794173200, 3600},
      {"Europe/Dublin", 3812921999, 3600},
      {"Europe/Dublin", 3812922000, 0},
      {"America/New_York", 4102444799, -18000},
      {"America/Sao_Paulo", 1700000000, -10800},
      {"Pacific/Apia", 1325239199, -36000}, /* before the skipped 2011-12-30 */
      {"Pacific/Apia", 1325239200, 50400},
      {"Asia/Kolkata", -1000000000, 19800},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    char err[DLOCK__TZ_ERR_MAX];
    dlock__tz *tz;
    ASSERT_EQ(dlock__tz_load(rows[i].zone, &tz, err, sizeof(err)), 0);
    int32_t off = dlock__tz_offset_at(tz, rows[i].t);
    dlock__tz_free(tz);
    if (off != rows[i].off)
      TEST_FAIL("%s at %lld: offset %d, want %d", rows[i].zone, (long long)rows[i].t, (int)off, (int)rows[i].off);
  }
}

TEST(civil_calendar_round_trips) {
  for (int64_t days = -800000; days < 800000; days += 97) {
    int64_t y;
    int m, d;
    dlock__tz_civil_from_days(days, &y, &m, &d);
    ASSERT_EQ(dlock__tz_days_from_civil(y, m, d), days);
    ASSERT(d >= 1 && d <= dlock__tz_days_in_month(y, m));
  }
  ASSERT_EQ(dlock__tz_days_from_civil(2000, 3, 1), 11017);
  ASSERT_EQ(dlock__tz_weekday(dlock__tz_days_from_civil(2026, 8, 1)), 6); /* Saturday */
  ASSERT_EQ(dlock__tz_days_in_month(1900, 2), 28);
  ASSERT_EQ(dlock__tz_days_in_month(2000, 2), 29);
}

/* ---- Threads and speed ---- */

typedef struct shared_work {
  const dlock__cron *cron;
  const dlock__tz *tz;
  int64_t last;
} shared_work;

static void *walk_fire_times(void *arg) {
  shared_work *w = arg;
  int64_t t = 1767225600; /* 2026-01-01 */
  for (int i = 0; i < 2000; i++)
    if (dlock__cron_next(w->cron, w->tz, t, &t) != 0) break;
  w->last = t;
  return NULL;
}

TEST(one_expression_and_zone_serve_many_threads) {
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron;
  dlock__tz *tz;
  ASSERT_EQ(dlock__cron_parse("0 0/30 * * * ?", 0, &cron, err, sizeof(err)), 0);
  ASSERT_EQ(dlock__tz_load("Europe/Berlin", &tz, err, sizeof(err)), 0);
  pthread_t th[4];
  shared_work w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (shared_work){cron, tz, 0};
    pthread_create(&th[i], NULL, walk_fire_times, &w[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  dlock__cron_free(cron);
  dlock__tz_free(tz);
  for (int i = 1; i < 4; i++) ASSERT_EQ(w[i].last, w[0].last);
  ASSERT(w[0].last > 1767225600);
}

/* Without a year field the search has no 2099 end any more; an expression
 * that never fires must still answer at once, in every zone. */
TEST(never_fires_answers_quickly) {
  static const char *const exprs[] = {
      "0 0 0 30 2 ?",    "0 0 0 31 4 ?",  "0 0 0 ? 2 MON#5 2030",
      "0 0 0 L-30W 2 ?", "0 0 0 31W 6 ?", "0 0 0 ? 2 2#5 2027-2043",
  };
  static const char *const zones[] = {"UTC", "Europe/Berlin", "Australia/Lord_Howe"};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  int calls = 0;
  for (size_t z = 0; z < 3; z++) {
    char err[DLOCK__CRON_ERR_MAX];
    dlock__tz *tz;
    ASSERT_EQ(dlock__tz_load(zones[z], &tz, err, sizeof(err)), 0);
    for (size_t e = 0; e < sizeof(exprs) / sizeof(exprs[0]); e++) {
      dlock__cron *cron;
      ASSERT_EQ(dlock__cron_parse(exprs[e], 0, &cron, err, sizeof(err)), 0);
      int64_t next = 0;
      for (int i = 0; i < 100; i++, calls++) {
        int rc = dlock__cron_next(cron, tz, 1767225600 + (int64_t)i * 86400 * 37, &next);
        if (rc != DLOCK__CRON_NO_NEXT) {
          dlock__cron_free(cron);
          dlock__tz_free(tz);
          TEST_FAIL("\"%s\" in %s fired (rc %d, next %lld)", exprs[e], zones[z], rc, (long long)next);
        }
      }
      dlock__cron_free(cron);
    }
    dlock__tz_free(tz);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  printf("  %d never-fires answers in %.3f s\n", calls, secs);
  /* About 0.1 ms each in a plain build; 10 s leaves room for sanitizers and load. */
  ASSERT(secs < 10.0);
}

TEST(next_fire_time_is_not_pathologically_slow) {
  static const char *const exprs[] = {
      "0 */15 * * * ?", "0 0 12 ? * MON-FRI",       "0 0 0 L-3 * ?", "0 30 2 * * ?", "*/5 * * * * ?", "0 0 10 ? * 5#5",
      "0 0 0 29 2 ?",   "0 15 10 ? * 6L 2030-2040", "0 0 9 1W * ?",  "0 0 0 30 2 ?",
  };
  static const char *const zones[] = {"UTC", "Europe/Berlin", "America/New_York"};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  long done = 0;
  for (size_t z = 0; z < 3; z++) {
    char err[DLOCK__CRON_ERR_MAX];
    dlock__tz *tz;
    ASSERT_EQ(dlock__tz_load(zones[z], &tz, err, sizeof(err)), 0);
    for (size_t e = 0; e < sizeof(exprs) / sizeof(exprs[0]); e++) {
      dlock__cron *cron;
      ASSERT_EQ(dlock__cron_parse(exprs[e], 0, &cron, err, sizeof(err)), 0);
      int64_t t = 1700000000;
      for (int i = 0; i < 3400; i++, done++)
        if (dlock__cron_next(cron, tz, t, &t) != 0) t = 1700000000 + i;
      dlock__cron_free(cron);
    }
    dlock__tz_free(tz);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  printf("  %ld next-fire computations in %.3f s\n", done, secs);
  ASSERT(done >= 100000);
  ASSERT(secs < 30.0 * th_time_factor()); /* a loose bound: valgrind runs set the factor */
}

TEST_MAIN()
