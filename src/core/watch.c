/*
 * watch.c - dlock_watch_*: sleep until a watched lock may have changed. The
 * backend wakes the watch from its notifications (dlock__watch_wake); what
 * it cannot be told of is bounded here by waking every DLOCK__WATCH_BOUND_MS.
 * A wake-up is a byte in a self-pipe, so that callers can poll(2) on it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static const dlock__admin_ops *watch_ops(const dlock_client *c) {
  const dlock__admin_ops *a = c->ops->admin;
  return a && a->watch_open ? a : NULL;
}

int dlock_watch_new(dlock_watch **out, dlock_client *c) {
  dlock__error_clear();
  if (!out || !c) return dlock__error(DLOCK_EINVAL, "dlock_watch_new: NULL argument");
  *out = NULL;
  dlock_watch *w = calloc(1, sizeof *w);
  if (!w) return dlock__error(DLOCK_ENOMEM, "out of memory");
  w->client = c;
  if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    free(w);
    return dlock__error(DLOCK_ESYS, "pipe: %s", strerror(errno));
  }
  const dlock__admin_ops *a = watch_ops(c);
  int rc = a ? a->watch_open(w) : 0;
  if (!a) atomic_store(&w->bounded, 1);
  if (rc) {
    close(w->wake[0]);
    close(w->wake[1]);
    free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int dlock_watch_add(dlock_watch *w, const char *name) {
  dlock__error_clear();
  if (!w) return dlock__error(DLOCK_EINVAL, "dlock_watch_add: the watch is NULL");
  int rc = name ? dlock__check_name("lock name", name) : 0;
  if (rc) return rc;
  const dlock__admin_ops *a = watch_ops(w->client);
  if (!a) return 0;
  rc = a->watch_add(w, name);
  if (rc == 1) {
    atomic_store(&w->bounded, 1);
    rc = 0;
  }
  return rc;
}

void dlock__watch_wake(dlock_watch *w, unsigned what) {
  char b = (char)(what | 1);
  ssize_t n = write(w->wake[1], &b, 1);
  (void)n; /* a full pipe already says "wake up" */
}

int dlock_watch_wait(dlock_watch *w, int64_t wait_ms) {
  if (!w) return dlock__error(DLOCK_EINVAL, "dlock_watch_wait: the watch is NULL");
  const dlock__admin_ops *a = watch_ops(w->client);
  if (a && a->watch_rearm) a->watch_rearm(w);
  int64_t bound = dlock_watch_bound_ms(w);
  if (wait_ms < 0 || (bound > 0 && wait_ms > bound)) wait_ms = bound > 0 ? bound : -1;
  dlock_mono_ms until = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  for (int i = 0; i < 1000000; i++) {
    char buf[64];
    ssize_t n = read(w->wake[0], buf, sizeof buf);
    if (n > 0) {
      int what = 1;
      do {
        for (ssize_t j = 0; j < n; j++) what |= buf[j];
      } while ((n = read(w->wake[0], buf, sizeof buf)) > 0);
      return what;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (now >= until) return bound > 0 && wait_ms == bound ? 1 : 0;
    int64_t left = until == INT64_MAX ? 60000 : until - now;
    struct pollfd p = {w->wake[0], POLLIN, 0};
    poll(&p, 1, left > 60000 ? 60000 : (int)left);
  }
  return 0;
}

int64_t dlock_watch_bound_ms(const dlock_watch *w) { return w && atomic_load(&w->bounded) ? DLOCK__WATCH_BOUND_MS : 0; }

int dlock_watch_fd(const dlock_watch *w) { return w ? w->wake[0] : -1; }

void dlock_watch_free(dlock_watch *w) {
  if (!w) return;
  const dlock__admin_ops *a = watch_ops(w->client);
  if (a) a->watch_close(w);
  close(w->wake[0]);
  close(w->wake[1]);
  free(w);
}
