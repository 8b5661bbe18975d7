/*
 * rwlock.c - the public dlock_rwlock_* calls. A dlock_rwlock is a
 * dlock_mutex of kind DLOCK__KIND_READ or DLOCK__KIND_WRITE (one side of the
 * lock per handle), so leases, the watchdog, waits, cancellation, loss and
 * per-handle reentrancy are the mutex's code (mutex.c); the backend's
 * operations look at m->kind.
 *
 * What the mutex cannot know is kept here: which thread holds which side of
 * a name through which handle, for the two rules across handles of one
 * client (docs/rwlock.md): a thread holding either side may take the read
 * side at once (dlock__rw_own_token), and a thread holding the read side is
 * refused the write side (dlock__rw_check_upgrade), since it would wait for
 * itself. Every live rwlock handle is listed; the hold state is read under
 * each handle's own lock (lock order: the list, then a handle's mu).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static dlock_mutex **handles;
static size_t nhandles, caphandles;

static int handles_add(dlock_mutex *m) {
  pthread_mutex_lock(&handles_mu);
  if (nhandles == caphandles) {
    size_t cap = caphandles ? 2 * caphandles : 16;
    dlock_mutex **n = realloc(handles, cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&handles_mu);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    handles = n;
    caphandles = cap;
  }
  handles[nhandles++] = m;
  pthread_mutex_unlock(&handles_mu);
  return 0;
}

void dlock__rw_forget(dlock_mutex *m) {
  pthread_mutex_lock(&handles_mu);
  for (size_t i = 0; i < nhandles; i++)
    if (handles[i] == m) {
      handles[i] = handles[--nhandles];
      break;
    }
  if (nhandles == 0) {
    free(handles);
    handles = NULL;
    caphandles = 0;
  }
  pthread_mutex_unlock(&handles_mu);
}

/* 1 when this thread holds 'm' (a hold not yet released; lost or not). */
static int held_by_me(dlock_mutex *m) {
  pthread_mutex_lock(&m->mu);
  int mine = m->busy && m->hold_count > 0 && pthread_equal(m->owner, pthread_self());
  pthread_mutex_unlock(&m->mu);
  return mine;
}

/* Find a handle other than 'm' on the same client and name, of kind 'kind'
 * (or either side when 'kind' is DLOCK__KIND_MUTEX), held by this thread:
 * copy its token into 'token' (may be NULL). 1 found, 0 not. */
static int find_mine(const dlock_mutex *m, dlock__kind kind, char *token) {
  int found = 0;
  pthread_mutex_lock(&handles_mu);
  for (size_t i = 0; i < nhandles && !found; i++) {
    dlock_mutex *o = handles[i];
    if (o == m || o->client != m->client || strcmp(o->name, m->name) != 0) continue;
    if (kind != DLOCK__KIND_MUTEX && o->kind != kind) continue;
    pthread_mutex_lock(&o->mu);
    if (o->busy && o->hold_count > 0 && pthread_equal(o->owner, pthread_self()) &&
        atomic_load(&o->lost) == DLOCK_LOST_NONE) {
      found = 1;
      if (token) memcpy(token, o->token, sizeof o->token);
    }
    pthread_mutex_unlock(&o->mu);
  }
  pthread_mutex_unlock(&handles_mu);
  return found;
}

int dlock__rw_own_token(const dlock_mutex *m, char *token) {
  token[0] = '\0';
  if (m->kind != DLOCK__KIND_READ) return 0;
  /* The write hold first: a reader in its shadow is what the rule is for. */
  return find_mine(m, DLOCK__KIND_WRITE, token) || find_mine(m, DLOCK__KIND_READ, token);
}

int dlock__rw_check_upgrade(dlock_mutex *m) {
  if (m->kind != DLOCK__KIND_WRITE || held_by_me(m) || !find_mine(m, DLOCK__KIND_READ, NULL)) return 0;
  return dlock__error(DLOCK_EUPGRADE,
                      "this thread holds the read side of this read-write lock, and taking the "
                      "write side would wait for that read hold forever (a read -> write upgrade deadlocks): "
                      "release the read side first, then acquire the write side");
}

/* ---- Public calls ---- */

static dlock_mutex *M(const dlock_rwlock *rw) { return (dlock_mutex *)rw; }

int dlock_rwlock_new(dlock_rwlock **out, dlock_client *c, const char *name, int side, const dlock_mutex_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "new read-write lock: 'out' is NULL");
  *out = NULL;
  if (side != DLOCK_RW_READ && side != DLOCK_RW_WRITE)
    return dlock__error(DLOCK_EINVAL,
                        "new read-write lock: side is %d; it must be DLOCK_RW_READ (%d) or "
                        "DLOCK_RW_WRITE (%d)",
                        side, DLOCK_RW_READ, DLOCK_RW_WRITE);
  dlock_mutex *m;
  int rc = dlock__lock_new(&m, c, name, side == DLOCK_RW_READ ? DLOCK__KIND_READ : DLOCK__KIND_WRITE, 1, opts);
  if (rc) return rc;
  if ((rc = handles_add(m))) {
    dlock_mutex_free(m);
    return rc;
  }
  *out = (dlock_rwlock *)m;
  return 0;
}

void dlock_rwlock_free(dlock_rwlock *rw) {
  if (!rw) return;
  dlock_mutex_free(M(rw)); /* takes it off the list first (dlock__rw_forget) */
}

int dlock_rwlock_acquire(dlock_rwlock *rw, int64_t wait_ms) {
  if (!rw) {
    dlock__error_clear();
    return dlock__error(DLOCK_EINVAL, "dlock_rwlock_acquire: handle is NULL");
  }
  return dlock_mutex_acquire(M(rw), wait_ms);
}

void dlock_rwlock_cancel(dlock_rwlock *rw) { dlock_mutex_cancel(M(rw)); }
int dlock_rwlock_release(dlock_rwlock *rw) { return dlock_mutex_release(M(rw)); }
int dlock_rwlock_extend(dlock_rwlock *rw, int64_t lease_ms) { return dlock_mutex_extend(M(rw), lease_ms); }
uint64_t dlock_rwlock_fence(const dlock_rwlock *rw) { return dlock_mutex_fence(M(rw)); }
dlock_lost_reason dlock_rwlock_lost(const dlock_rwlock *rw) { return dlock_mutex_lost(M(rw)); }
int dlock_rwlock_lost_fd(dlock_rwlock *rw) { return dlock_mutex_lost_fd(M(rw)); }
dlock_mono_ms dlock_rwlock_valid_until(const dlock_rwlock *rw) { return dlock_mutex_valid_until(M(rw)); }
const char *dlock_rwlock_errmsg(const dlock_rwlock *rw) { return dlock_mutex_errmsg(M(rw)); }
dlock_mutex *dlock_rwlock_mutex(dlock_rwlock *rw) { return M(rw); }

int dlock_rwlock_side(const dlock_rwlock *rw) {
  if (!rw) return 0;
  return M(rw)->kind == DLOCK__KIND_READ ? DLOCK_RW_READ : DLOCK_RW_WRITE;
}
