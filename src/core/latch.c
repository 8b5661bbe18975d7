/*
 * latch.c - the countdown latch (dlock_latch_*), backend-neutral: argument
 * checks, errors on the handle, and the calls through the backend's latch
 * operations (backend.h). A backend without them answers a clear error.
 *
 * A latch has no fence, lease or loss: it grants nothing exclusive that a
 * stale holder could misuse, it only counts. Its one timer is the expiry
 * given to _set(), after which the latch is gone (DLOCK_ENOLATCH) and never
 * opens: an abandoned latch must not let its waiters through.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int latch_fail(dlock_latch *l, int rc, const char *op) {
  const char *server = l->client->server;
  if (strncmp(dlock_last_error(), server, strlen(server)) == 0)
    dlock__error_prefix("latch %s '%s' at ", op, l->name);
  else
    dlock__error_prefix("latch %s '%s' on %s: ", op, l->name, server);
  pthread_mutex_lock(&l->mu);
  snprintf(l->errmsg, sizeof l->errmsg, "%s", dlock_last_error());
  pthread_mutex_unlock(&l->mu);
  return rc;
}

int dlock_latch_new(dlock_latch **out, dlock_client *c, const char *name) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_latch_new: 'out' is NULL");
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_latch_new: client is NULL");
  int rc = dlock__check_name("latch name", name);
  if (rc) return rc;
  if (!c->ops->latch)
    return dlock__error(DLOCK_EINVAL,
                        "countdown latches are not offered on %s (the %s backend); use a backend "
                        "that offers them (docs/latch.md)",
                        c->server, c->ops->name);
  dlock_latch *l = calloc(1, sizeof *l);
  if (!l || !(l->name = strdup(name))) {
    free(l);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  l->client = c;
  pthread_mutex_init(&l->mu, NULL);
  if ((rc = c->ops->latch->create(l))) {
    pthread_mutex_destroy(&l->mu);
    free(l->name);
    free(l);
    return rc;
  }
  *out = l;
  return 0;
}

void dlock_latch_free(dlock_latch *l) {
  if (!l) return;
  l->client->ops->latch->destroy(l);
  pthread_mutex_destroy(&l->mu);
  free(l->name);
  free(l);
}

int dlock_latch_set(dlock_latch *l, int64_t count, int64_t expire_ms) {
  dlock__error_clear();
  if (!l) return dlock__error(DLOCK_EINVAL, "dlock_latch_set: handle is NULL");
  if (count < 1 || count > DLOCK_LATCH_MAX_COUNT)
    return latch_fail(
        l, dlock__error(DLOCK_ERANGE, "count is %lld; it must be 1..%d", (long long)count, DLOCK_LATCH_MAX_COUNT),
        "set");
  int rc = dlock__check_duration("expire_ms", expire_ms, 0);
  if (!rc) rc = l->client->ops->latch->set(l, count, expire_ms);
  return rc ? latch_fail(l, rc, "set") : 0;
}

int dlock_latch_count_down(dlock_latch *l, int64_t *left) {
  dlock__error_clear();
  if (!l) return dlock__error(DLOCK_EINVAL, "dlock_latch_count_down: handle is NULL");
  int64_t n = 0;
  int rc = l->client->ops->latch->count_down(l, &n);
  if (rc) return latch_fail(l, rc, "count down");
  if (left) *left = n;
  return 0;
}

int dlock_latch_count(dlock_latch *l, int64_t *count) {
  dlock__error_clear();
  if (!l || !count) return dlock__error(DLOCK_EINVAL, "dlock_latch_count: NULL argument");
  int rc = l->client->ops->latch->get(l, count, NULL);
  return rc ? latch_fail(l, rc, "count") : 0;
}

int dlock_latch_wait(dlock_latch *l, int64_t wait_ms) {
  dlock__error_clear();
  if (!l) return dlock__error(DLOCK_EINVAL, "dlock_latch_wait: handle is NULL");
  if (wait_ms != DLOCK_WAIT_FOREVER) {
    int rc = dlock__check_duration("wait_ms", wait_ms, 1);
    if (rc) return latch_fail(l, rc, "wait");
  }
  if (atomic_load(&l->client->closing)) return latch_fail(l, dlock__error(DLOCK_ECLOSED, "client is closing"), "wait");
  pthread_mutex_lock(&l->mu);
  int busy = l->waiting;
  l->waiting = 1;
  pthread_mutex_unlock(&l->mu);
  if (busy)
    return latch_fail(l,
                      dlock__error(DLOCK_EINVAL, "another thread waits through this handle; give each "
                                                 "waiting thread its own dlock_latch"),
                      "wait");
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  int rc = l->client->ops->latch->wait(l, wait_ms, deadline);
  pthread_mutex_lock(&l->mu);
  l->waiting = 0;
  pthread_mutex_unlock(&l->mu);
  return rc ? latch_fail(l, rc, "wait") : 0;
}

void dlock_latch_cancel(dlock_latch *l) {
  if (l) l->client->ops->latch->cancel(l);
}

const char *dlock_latch_name(const dlock_latch *l) { return l ? l->name : ""; }
const char *dlock_latch_errmsg(const dlock_latch *l) { return l ? l->errmsg : ""; }
