/*
 * fuzz_cron.c - the cron parser and next-fire search (src/sched/cron.c, src/sched/tz.c).
 *
 * Input: byte 0 picks a zone from a small fixed list, byte 1 the flags,
 * bytes 2-9 the instant to search from (any int64), the rest the expression.
 * A parsed expression's fire times are strictly increasing, each strictly
 * after the instant asked about, and asking again from any instant before a
 * fire time gives the same one; parsing errors are DLOCK_EINVAL with a
 * message.
 */
#include "cron.h"
#include "dlock.h"
#include "fuzz.h"
#include "tz.h"

static const char *const zones[] = {"UTC",          "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                    "Asia/Kolkata", "Pacific/Apia",  "Asia/Jerusalem",   "America/St_Johns"};
#define NZONES (sizeof zones / sizeof zones[0])

static dlock__tz *zone(size_t i) {
  static dlock__tz *loaded[NZONES];
  static int tried[NZONES];
  if (!tried[i]) {
    char err[DLOCK__TZ_ERR_MAX];
    tried[i] = 1;
    if (dlock__tz_load(zones[i], &loaded[i], err, sizeof err) != 0) loaded[i] = NULL;
  }
  return loaded[i]; /* NULL (UTC) if tzdata lacks it; kept for the process */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 10) return 0;
  dlock__tz *tz = zone(data[0] % NZONES);
  unsigned flags = (data[1] & 1) ? DLOCK__CRON_UNIX5 : 0;
  int64_t after;
  memcpy(&after, data + 2, sizeof after);
  /* Mostly near now, sometimes anywhere: both find bugs. */
  if (data[1] & 2) after = 1700000000 + after % (INT64_C(400) * 366 * 86400);
  char *expr = fuzz_string(data + 10, size - 10);
  if (!expr) return 0;

  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron = NULL;
  int rc = dlock__cron_parse(expr, flags, &cron, err, sizeof err);
  if (rc != 0) {
    FUZZ_CHECK(cron == NULL);
    FUZZ_CHECK(rc == DLOCK_EINVAL || rc == DLOCK_ENOMEM);
    FUZZ_CHECK(err[0] != '\0');
    free(expr);
    return 0;
  }
  FUZZ_CHECK(strcmp(dlock__cron_text(cron), expr) == 0);
  int64_t t = after;
  for (int i = 0; i < 4; i++) {
    int64_t next = 0;
    rc = dlock__cron_next(cron, tz, t, &next);
    if (rc == DLOCK__CRON_NO_NEXT) break;
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(next > t);
    /* No fire time lies between: asking from any instant in [t, next)
     * gives the same answer. */
    int64_t again = 0;
    FUZZ_CHECK(dlock__cron_next(cron, tz, next - 1, &again) == 0 && again == next);
    int64_t mid = t + (int64_t)(((uint64_t)next - (uint64_t)t) / 2);
    FUZZ_CHECK(dlock__cron_next(cron, tz, mid, &again) == 0 && again == next);
    /* What is formatted can be read back as the same instant. */
    char iso[DLOCK__TZ_ISO_MAX];
    FUZZ_CHECK(dlock__tz_format_iso8601(tz, next, iso, sizeof iso) == 0);
    t = next;
  }
  dlock__cron_free(cron);
  free(expr);
  return 0;
}
