/*
 * multi.c - the multi-lock (dlock_multi_*): several names taken all or
 * nothing, backend-neutral, on top of one mutex handle per name.
 *
 * Deadlock freedom comes from the order: every caller takes the names sorted
 * by bytes, so two callers that list {a,b,c} and {c,b,a} both go a, b, c and
 * the one that gets 'a' first cannot be waiting for the other. A name that
 * cannot be taken rolls back every name taken before it (released in reverse
 * order). Leases, renewal, loss and waiting are each mutex's own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "internal.h"

struct dlock_multi {
  dlock_client *client;
  size_t n;
  dlock_mutex **given;  /* in the caller's order: given[i] is names[i] */
  dlock_mutex **sorted; /* the same handles in the canonical (taking) order */
  int epfd;             /* dlock_multi_lost_fd(), -1 until asked for */

  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;
  unsigned cancel_gen;  /* bumped by dlock_multi_cancel() */
  dlock_mutex *waiting; /* the handle an acquire is in now, NULL between names */
  unsigned step;        /* bumped each time an acquire leaves a handle */
  char errmsg[512];
};

static int multi_fail(dlock_multi *mm, int rc) {
  pthread_mutex_lock(&mm->mu);
  snprintf(mm->errmsg, sizeof mm->errmsg, "%s", dlock_last_error());
  pthread_mutex_unlock(&mm->mu);
  return rc;
}

static int by_name(const void *a, const void *b) {
  const dlock_mutex *x = *(dlock_mutex *const *)a, *y = *(dlock_mutex *const *)b;
  return strcmp(x->name, y->name);
}

int dlock_multi_new(dlock_multi **out, dlock_client *c, const char *const *names, size_t n,
                    const dlock_mutex_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_multi_new: 'out' is NULL");
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_multi_new: client is NULL");
  if (!names || n == 0 || n > DLOCK_MULTI_MAX)
    return dlock__error(DLOCK_EINVAL, "dlock_multi_new: give 1 to %d lock names (got %zu%s)", DLOCK_MULTI_MAX, n,
                        names ? "" : ", names is NULL");
  dlock_multi *mm = calloc(1, sizeof *mm);
  if (!mm) return dlock__error(DLOCK_ENOMEM, "out of memory");
  mm->client = c;
  mm->epfd = -1;
  pthread_mutex_init(&mm->mu, NULL);
  dlock__cond_init(&mm->cv);
  mm->given = calloc(n, sizeof *mm->given);
  mm->sorted = calloc(n, sizeof *mm->sorted);
  int rc = mm->given && mm->sorted ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < n; i++) {
    rc = dlock__lock_new(&mm->given[i], c, names[i], DLOCK__KIND_MUTEX, 1, opts);
    if (rc)
      dlock__error_prefix("multi-lock name %zu of %zu: ", i + 1, n);
    else
      mm->n = i + 1;
  }
  if (!rc) {
    memcpy(mm->sorted, mm->given, n * sizeof *mm->sorted);
    qsort(mm->sorted, n, sizeof *mm->sorted, by_name);
    for (size_t i = 1; i < n && !rc; i++)
      if (!strcmp(mm->sorted[i - 1]->name, mm->sorted[i]->name))
        rc = dlock__error(DLOCK_EINVAL, "multi-lock: the name '%s' is given twice; give each name once",
                          mm->sorted[i]->name);
  }
  if (rc) {
    dlock_multi_free(mm);
    return rc;
  }
  *out = mm;
  return 0;
}

void dlock_multi_free(dlock_multi *mm) {
  if (!mm) return;
  /* dlock_mutex_free() releases a name still held. */
  for (size_t i = 0; mm->given && i < mm->n; i++) dlock_mutex_free(mm->given[i]);
  if (mm->epfd >= 0) close(mm->epfd);
  free(mm->given);
  free(mm->sorted);
  pthread_mutex_destroy(&mm->mu);
  pthread_cond_destroy(&mm->cv);
  free(mm);
}

/* Release sorted[0..k) in reverse order after a failure on sorted[k].
 * Returns DLOCK_EUNKNOWN when some name may still be held by us, else 0;
 * 'what' receives the names given back or kept. */
static int roll_back(dlock_multi *mm, size_t k, char *what, size_t len) {
  int unknown = 0;
  size_t used = 0;
  what[0] = '\0';
  for (size_t j = k; j-- > 0;) {
    dlock_mutex *m = mm->sorted[j];
    int rc = dlock_mutex_release(m);
    int w;
    if (rc == DLOCK_EUNKNOWN) {
      unknown = 1;
      w = snprintf(what + used, len - used, "%s'%s' (release outcome unknown: %s)", used ? ", " : "", m->name,
                   dlock_last_error());
    } else {
      /* ENOTHELD: the hold was lost meanwhile; nothing of ours is left either way. */
      w = snprintf(what + used, len - used, "%s'%s'", used ? ", " : "", m->name);
    }
    if (w > 0) used = (size_t)w >= len - used ? len - 1 : used + (size_t)w;
  }
  return unknown ? DLOCK_EUNKNOWN : 0;
}

int dlock_multi_acquire(dlock_multi *mm, int64_t wait_ms) {
  dlock__error_clear();
  if (!mm) return dlock__error(DLOCK_EINVAL, "dlock_multi_acquire: handle is NULL");
  if (wait_ms != DLOCK_WAIT_FOREVER) {
    int rc = dlock__check_duration("wait_ms", wait_ms, 1);
    if (rc) return multi_fail(mm, rc);
  }
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  pthread_mutex_lock(&mm->mu);
  unsigned gen = mm->cancel_gen;
  pthread_mutex_unlock(&mm->mu);
  for (size_t k = 0; k < mm->n; k++) {
    dlock_mutex *m = mm->sorted[k];
    int64_t left = DLOCK_WAIT_FOREVER;
    if (wait_ms >= 0) {
      dlock_mono_ms now = dlock_mono_now();
      left = wait_ms == 0 || now >= deadline ? 0 : deadline - now;
    }
    pthread_mutex_lock(&mm->mu);
    int canceled = mm->cancel_gen != gen;
    if (!canceled) mm->waiting = m;
    pthread_mutex_unlock(&mm->mu);
    int rc = canceled ? dlock__error(DLOCK_ECANCELED, "wait canceled") : dlock_mutex_acquire(m, left);
    pthread_mutex_lock(&mm->mu);
    mm->waiting = NULL;
    mm->step++;
    size_t held = k;                        /* names of ours to give back: sorted[0..held) */
    if (rc == 0 && mm->cancel_gen != gen) { /* canceled as it was granted: give this one back too */
      held = k + 1;
      rc = dlock__error(DLOCK_ECANCELED, "wait canceled");
    }
    pthread_cond_broadcast(&mm->cv);
    pthread_mutex_unlock(&mm->mu);
    if (rc == 0) continue;
    char why[600], back[1024];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    int rb = roll_back(mm, held, back, sizeof back);
    int final = rc == DLOCK_EUNKNOWN || rb == DLOCK_EUNKNOWN ? DLOCK_EUNKNOWN : rc;
    dlock__error(final, "multi-lock: '%s' (%zu of %zu in the taking order) not acquired: %s; %s%s", m->name, k + 1,
                 mm->n, why, held ? "released again: " : "nothing else was held", back);
    return multi_fail(mm, final);
  }
  return 0;
}

void dlock_multi_cancel(dlock_multi *mm) {
  if (!mm) return;
  pthread_mutex_lock(&mm->mu);
  mm->cancel_gen++;
  /* A mutex cancel ends only waits that began before it: repeat it until
   * the acquire has left the handle it was entering (bounded). */
  dlock_mono_ms until = dlock_mono_now() + 2000;
  while (mm->waiting && dlock_mono_now() < until) {
    dlock_mutex *m = mm->waiting;
    unsigned step = mm->step;
    pthread_mutex_unlock(&mm->mu);
    dlock_mutex_cancel(m);
    pthread_mutex_lock(&mm->mu);
    struct timespec ts;
    dlock__deadline_timespec(dlock_mono_now() + 10, &ts);
    if (mm->step == step) pthread_cond_timedwait(&mm->cv, &mm->mu, &ts);
  }
  pthread_mutex_unlock(&mm->mu);
}

int dlock_multi_release(dlock_multi *mm) {
  dlock__error_clear();
  if (!mm) return dlock__error(DLOCK_EINVAL, "dlock_multi_release: handle is NULL");
  int first = 0;
  char saved[600] = "";
  for (size_t j = mm->n; j-- > 0;) {
    int rc = dlock_mutex_release(mm->sorted[j]);
    if (rc && !first) {
      first = rc;
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
    }
  }
  if (!first) return 0;
  dlock__error(first, "multi-lock release: %s (every other name was released too)", saved);
  return multi_fail(mm, first);
}

int dlock_multi_extend(dlock_multi *mm, int64_t lease_ms) {
  dlock__error_clear();
  if (!mm) return dlock__error(DLOCK_EINVAL, "dlock_multi_extend: handle is NULL");
  int first = 0;
  char saved[600] = "";
  for (size_t j = 0; j < mm->n; j++) {
    int rc = dlock_mutex_extend(mm->sorted[j], lease_ms);
    if (rc && !first) {
      first = rc;
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
    }
  }
  if (!first) return 0;
  dlock__error(first, "multi-lock extend: %s (every other name was tried too)", saved);
  return multi_fail(mm, first);
}

size_t dlock_multi_count(const dlock_multi *mm) { return mm ? mm->n : 0; }

const char *dlock_multi_name(const dlock_multi *mm, size_t i) { return mm && i < mm->n ? mm->given[i]->name : ""; }

uint64_t dlock_multi_fence(const dlock_multi *mm, size_t i) {
  return mm && i < mm->n ? dlock_mutex_fence(mm->given[i]) : 0;
}

dlock_lost_reason dlock_multi_lost(const dlock_multi *mm) {
  if (!mm) return DLOCK_LOST_NONE;
  for (size_t i = 0; i < mm->n; i++) {
    dlock_lost_reason r = dlock_mutex_lost(mm->sorted[i]);
    if (r != DLOCK_LOST_NONE) return r;
  }
  return DLOCK_LOST_NONE;
}

int dlock_multi_lost_fd(dlock_multi *mm) {
  if (!mm) return dlock__error(DLOCK_EINVAL, "dlock_multi_lost_fd: handle is NULL");
  pthread_mutex_lock(&mm->mu);
  int fd = mm->epfd;
  pthread_mutex_unlock(&mm->mu);
  if (fd >= 0) return fd;
  /* An epoll fd is readable while any fd in it is: one fd for the set,
   * following each name's own loss rule (and its reset on acquire). */
  fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return multi_fail(mm, dlock__error(DLOCK_ESYS, "epoll_create1: %s", strerror(errno)));
  for (size_t i = 0; i < mm->n; i++) {
    int lfd = dlock_mutex_lost_fd(mm->given[i]);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
    if (lfd < 0 || epoll_ctl(fd, EPOLL_CTL_ADD, lfd, &ev) != 0) {
      int rc = lfd < 0 ? lfd : dlock__error(DLOCK_ESYS, "epoll_ctl: %s", strerror(errno));
      close(fd);
      return multi_fail(mm, rc);
    }
  }
  pthread_mutex_lock(&mm->mu);
  if (mm->epfd < 0) {
    mm->epfd = fd;
  } else { /* another thread was first */
    close(fd);
    fd = mm->epfd;
  }
  pthread_mutex_unlock(&mm->mu);
  return fd;
}

dlock_mono_ms dlock_multi_valid_until(const dlock_multi *mm) {
  if (!mm) return 0;
  dlock_mono_ms earliest = 0;
  for (size_t i = 0; i < mm->n; i++) {
    dlock_mono_ms v = dlock_mutex_valid_until(mm->given[i]);
    if (v == 0) return 0; /* not all held */
    if (earliest == 0 || v < earliest) earliest = v;
  }
  return earliest;
}

const char *dlock_multi_errmsg(const dlock_multi *mm) { return mm ? mm->errmsg : ""; }
