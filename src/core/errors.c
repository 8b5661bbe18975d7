/*
 * errors.c - status names and texts, and the per-thread detail message.
 *
 * The switch over the status has no `default:` so that -Wswitch-enum flags a
 * code added to DLOCK_ERRNO_MAP without text (curl's lesson, done right).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *dlock_strerror(int status) {
  switch ((dlock_status)status) {
  case DLOCK_OK:
    return "success";
#define DLOCK__TEXT(name, code, text) \
  case DLOCK_##name:                  \
    return text;
    DLOCK_ERRNO_MAP(DLOCK__TEXT)
#undef DLOCK__TEXT
  }
  return "unknown dlock status";
}

const char *dlock_err_name(int status) {
  switch ((dlock_status)status) {
  case DLOCK_OK:
    return "OK";
#define DLOCK__NAME(name, code, text) \
  case DLOCK_##name:                  \
    return #name;
    DLOCK_ERRNO_MAP(DLOCK__NAME)
#undef DLOCK__NAME
  }
  return "UNKNOWN";
}

const char *dlock_last_error(void) { return last_error; }

void dlock__error_clear(void) { last_error[0] = '\0'; }

int dlock__error(int status, const char *fmt, ...) {
  /* Formatted apart, then copied: an argument may be dlock_last_error()
   * itself (the error being explained), which must not be overwritten
   * while it is read. */
  char text[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  memcpy(last_error, text, sizeof last_error);
  return status;
}

void dlock__error_prefix(const char *fmt, ...) {
  char prefix[512], old[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_error, sizeof old);
  snprintf(last_error, sizeof last_error, "%s%s", prefix, old);
}

const char *dlock_lost_reason_str(dlock_lost_reason reason) {
  switch (reason) {
  case DLOCK_LOST_NONE:
    return "not lost";
  case DLOCK_LOST_EXPIRED:
    return "the key is gone: its lease expired, or it was deleted without dlock";
  case DLOCK_LOST_TAKEN:
    return "another owner holds the lock now";
  case DLOCK_LOST_UNREACHABLE:
    return "the server could not be reached in time to renew the lease or keep the session";
  case DLOCK_LOST_MAX_HOLD:
    return "the maximum hold time was reached";
  case DLOCK_LOST_DEADLINE:
    return "the lease ran out before a renewal";
  case DLOCK_LOST_DELETED:
    return "another client deleted the key with a forced release";
  case DLOCK_LOST_FAILOVER:
    return "a failover replaced the master, and the new master does not hold this lock";
  }
  return "unknown reason";
}

const char *dlock__lost_reason_on(const dlock_client *c, dlock_lost_reason reason) {
  if (reason == DLOCK_LOST_UNREACHABLE && c && c->ops && c->ops->unreachable) return c->ops->unreachable;
  return dlock_lost_reason_str(reason);
}
