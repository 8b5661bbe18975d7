/*
 * time_api.c - the public face of the cron engine and the zone-aware time
 * helpers (cron.c, tz.c): next fire times, ISO 8601 formatting and parsing.
 */
#include "cron.h"
#include "internal.h"

/* Load 'name' (NULL or "" = UTC) into *tz, with a dlock error on failure. */
static int load_zone(const char *name, dlock__tz **tz) {
  char err[DLOCK__TZ_ERR_MAX];
  *tz = NULL;
  int rc = dlock__tz_load(name && *name ? name : NULL, tz, err, sizeof err);
  if (rc == DLOCK_ENOMEM) return dlock__error(rc, "out of memory");
  if (rc) return dlock__error(DLOCK_ETZ, "%s", err);
  return 0;
}

int dlock_cron_next(const char *expr, const char *tz, unsigned flags, int64_t after_unix_s, int64_t *out, int n) {
  dlock__error_clear();
  if (!expr || !out || n < 0) return dlock__error(DLOCK_EINVAL, "dlock_cron_next: NULL argument or n < 0");
  if (flags & ~DLOCK_CRON_UNIX) return dlock__error(DLOCK_EINVAL, "dlock_cron_next: unknown flags %#x", flags);
  char err[DLOCK__CRON_ERR_MAX];
  dlock__cron *cron = NULL;
  int rc = dlock__cron_parse(expr, flags & DLOCK_CRON_UNIX ? DLOCK__CRON_UNIX5 : 0, &cron, err, sizeof err);
  if (rc == DLOCK_ENOMEM) return dlock__error(rc, "out of memory");
  if (rc) return dlock__error(DLOCK_ECRON, "%s", err);
  dlock__tz *zone = NULL;
  if ((rc = load_zone(tz, &zone))) {
    dlock__cron_free(cron);
    return rc;
  }
  int count = 0;
  int64_t t = after_unix_s;
  while (count < n) {
    int64_t next;
    if (dlock__cron_next(cron, zone, t, &next) != 0) break; /* no more fire times */
    out[count++] = next;
    t = next;
  }
  dlock__cron_free(cron);
  dlock__tz_free(zone);
  return count;
}

int dlock_time_format(int64_t unix_s, const char *tz, char *buf, size_t len) {
  dlock__error_clear();
  if (!buf || len == 0) return dlock__error(DLOCK_EINVAL, "dlock_time_format: no buffer");
  dlock__tz *zone;
  int rc = load_zone(tz, &zone);
  if (rc) return rc;
  rc = dlock__tz_format_iso8601(zone, unix_s, buf, len);
  dlock__tz_free(zone);
  return rc ? dlock__error(DLOCK_ERANGE, "time %lld cannot be written as ISO 8601 (buffer %zu bytes)",
                           (long long)unix_s, len)
            : 0;
}

int dlock_time_parse(const char *text, const char *tz, int64_t *unix_s) {
  dlock__error_clear();
  if (!text || !unix_s) return dlock__error(DLOCK_EINVAL, "dlock_time_parse: NULL argument");
  dlock__tz *zone;
  int rc = load_zone(tz, &zone);
  if (rc) return rc;
  char err[DLOCK__TZ_ERR_MAX];
  rc = dlock__tz_parse_time(text, zone, unix_s, err, sizeof err);
  dlock__tz_free(zone);
  if (rc == DLOCK_ENOMEM) return dlock__error(rc, "out of memory");
  return rc ? dlock__error(DLOCK_ETIME, "%s", err) : 0;
}
