/*
 * semaphore.c - the public dlock_semaphore_* calls. A semaphore handle is a
 * lock handle of kind DLOCK__KIND_SEMAPHORE (internal.h): each call is the
 * mutex's (mutex.c), so leases, the watchdog, waits, cancellation, loss and
 * reentrancy are the same code; the backend takes one permit where the
 * mutex would take the key (docs/semaphore.md).
 */
#include "internal.h"

static dlock_mutex *M(const dlock_semaphore *s) { return (dlock_mutex *)s; }

int dlock_semaphore_new(dlock_semaphore **out, dlock_client *c, const char *name, int permits,
                        const dlock_mutex_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "new semaphore: 'out' is NULL");
  *out = NULL;
  if (permits < 1 || permits > DLOCK_SEMAPHORE_MAX_PERMITS)
    return dlock__error(DLOCK_ERANGE, "new semaphore '%s': %d permits; give 1..%d", name ? name : "(null)", permits,
                        DLOCK_SEMAPHORE_MAX_PERMITS);
  dlock_mutex *m;
  int rc = dlock__lock_new(&m, c, name, DLOCK__KIND_SEMAPHORE, permits, opts);
  if (!rc) *out = (dlock_semaphore *)m;
  return rc;
}

void dlock_semaphore_free(dlock_semaphore *s) { dlock_mutex_free(M(s)); }

int dlock_semaphore_acquire(dlock_semaphore *s, int64_t wait_ms) {
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_semaphore_acquire: handle is NULL");
  return dlock_mutex_acquire(M(s), wait_ms);
}

void dlock_semaphore_cancel(dlock_semaphore *s) { dlock_mutex_cancel(M(s)); }

int dlock_semaphore_release(dlock_semaphore *s) {
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_semaphore_release: handle is NULL");
  return dlock_mutex_release(M(s));
}

int dlock_semaphore_extend(dlock_semaphore *s, int64_t lease_ms) {
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_semaphore_extend: handle is NULL");
  return dlock_mutex_extend(M(s), lease_ms);
}

uint64_t dlock_semaphore_fence(const dlock_semaphore *s) { return dlock_mutex_fence(M(s)); }
dlock_lost_reason dlock_semaphore_lost(const dlock_semaphore *s) { return dlock_mutex_lost(M(s)); }

int dlock_semaphore_lost_fd(dlock_semaphore *s) {
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_semaphore_lost_fd: handle is NULL");
  return dlock_mutex_lost_fd(M(s));
}

dlock_mono_ms dlock_semaphore_valid_until(const dlock_semaphore *s) { return dlock_mutex_valid_until(M(s)); }
dlock_mutex *dlock_semaphore_mutex(dlock_semaphore *s) { return M(s); }
int dlock_semaphore_permits(const dlock_semaphore *s) { return s ? M(s)->permits : 0; }
const char *dlock_semaphore_errmsg(const dlock_semaphore *s) { return dlock_mutex_errmsg(M(s)); }
