/*
 * mutex.c - the lock handle, backend-neutral: reentrancy per thread, the
 * hold's lease and local deadline, the loss rule, cancellation, and the
 * public dlock_mutex_* calls. Each step that needs a server goes through the
 * client's backend (backend.h): acquire, release, extend, held.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_WATCHDOG_LEASE_MS 30000
#define MIN_WATCHDOG_LEASE_MS 30

/* ---- Errors on the handle ---- */

/* Finish a failing call: put context in front of the detail, keep a copy on
 * the handle, return 'rc'. */
int dlock__mutex_fail(dlock_mutex *m, int rc, const char *op) {
  const char *server = m->client->server;
  if (strncmp(dlock_last_error(), server, strlen(server)) == 0) /* a transport error names it already */
    dlock__error_prefix("%s '%s' at ", op, m->name);
  else
    dlock__error_prefix("%s '%s' on %s: ", op, m->name, server);
  pthread_mutex_lock(&m->mu);
  snprintf(m->errmsg, sizeof m->errmsg, "%s", dlock_last_error());
  pthread_mutex_unlock(&m->mu);
  return rc;
}
#define fail dlock__mutex_fail

static void rel_collect(dlock_mutex *m);

/* ---- Handle lifecycle ---- */

void dlock_mutex_options_init(dlock_mutex_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

static const char *const kind_names[] = {"mutex", "semaphore", "read lock", "write lock"};

const char *dlock__kind_name(dlock__kind kind) { return kind_names[kind]; }

int dlock__lock_new(dlock_mutex **out, dlock_client *c, const char *name, dlock__kind kind, int permits,
                    const dlock_mutex_options *opts) {
  if (!out) return dlock__error(DLOCK_EINVAL, "new %s: 'out' is NULL", kind_names[kind]);
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "new %s: client is NULL", kind_names[kind]);
  int rc = dlock__check_name("lock name", name);
  if (rc) return rc;
  static const unsigned cap_of[] = {0, DLOCK__CAP_SEMAPHORE, DLOCK__CAP_RWLOCK, DLOCK__CAP_RWLOCK};
  if (cap_of[kind] && !(c->caps & cap_of[kind])) {
    char deployment[80];
    return dlock__error(DLOCK_EINVAL,
                        "a %s is not offered on %s (the %s backend%s); use a mutex there, or a "
                        "backend that has it (docs/)",
                        kind_names[kind], c->server, c->ops->name,
                        dlock__deployment_suffix(c, deployment, sizeof deployment));
  }
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  if ((rc = dlock__options_in(&o, sizeof o, opts, DLOCK__MUTEX_OPTIONS_V1, "dlock_mutex_options"))) return rc;
  if ((rc = dlock__check_duration("lease_ms", o.lease_ms, 1)) ||
      (rc = dlock__check_duration("watchdog_lease_ms", o.watchdog_lease_ms, 1)) ||
      (rc = dlock__check_duration("max_hold_ms", o.max_hold_ms, 1)))
    return rc;
  if (o.watchdog_lease_ms == 0) o.watchdog_lease_ms = DEFAULT_WATCHDOG_LEASE_MS;
  if (o.watchdog_lease_ms < MIN_WATCHDOG_LEASE_MS)
    return dlock__error(DLOCK_ERANGE,
                        "watchdog_lease_ms is %lld; it must be at least %d ms so that "
                        "renewal every third of it is possible",
                        (long long)o.watchdog_lease_ms, MIN_WATCHDOG_LEASE_MS);
  if (o.owner_info && strlen(o.owner_info) > 1024)
    return dlock__error(DLOCK_EINVAL, "owner_info is longer than 1024 bytes");

  dlock_mutex *m = calloc(1, sizeof *m);
  if (!m) return dlock__error(DLOCK_ENOMEM, "out of memory");
  m->client = c;
  m->opts = o;
  m->lost_fd = -1;
  m->name = strdup(name);
  m->owner_info = strdup(o.owner_info ? o.owner_info : "");
  m->opts.owner_info = NULL;
  m->kind = kind;
  m->permits = permits;
  pthread_mutex_init(&m->mu, NULL);
  dlock__cond_init(&m->cv);
  rc = m->name && m->owner_info ? c->ops->lock_new(m) : dlock__error(DLOCK_ENOMEM, "out of memory");
  if (!rc) dlock__metrics_lock_new(m);
  if (rc) {
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->name);
    free(m->owner_info);
    free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int dlock_mutex_new(dlock_mutex **out, dlock_client *c, const char *name, const dlock_mutex_options *opts) {
  dlock__error_clear();
  return dlock__lock_new(out, c, name, DLOCK__KIND_MUTEX, 1, opts);
}

void dlock_mutex_free(dlock_mutex *m) {
  if (!m) return;
  if (m->kind == DLOCK__KIND_READ || m->kind == DLOCK__KIND_WRITE) dlock__rw_forget(m); /* rwlock.c */
  pthread_mutex_lock(&m->mu);
  int held = m->busy && m->hold_count > 0;
  if (held) { /* release every hold, as the owner would */
    m->hold_count = 1;
    m->owner = pthread_self();
  }
  pthread_mutex_unlock(&m->mu);
  if (held) dlock_mutex_release(m);
  rel_collect(m); /* the backend forgets 'm' once its reply is read */
  dlock__watchdog_remove(m->client, m);
  m->client->ops->lock_free(m);
  if (m->lost_fd >= 0) close(m->lost_fd);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m->name);
  free(m->owner_info);
  free(m);
}

/* ---- Lost state ---- */

dlock_mono_ms dlock__valid_until(dlock_mono_ms start, int64_t lease_ms) {
  /* Clocks of client and server may run at slightly different rates. */
  return start + lease_ms - (lease_ms / 100 + 2);
}

void dlock__mutex_mark_lost(dlock_mutex *m, dlock_lost_reason reason) {
  if (atomic_load(&m->lost) != DLOCK_LOST_NONE) return;
  atomic_store(&m->lost, (int)reason);
  dlock__metrics_hold_end(m, reason);
  if (m->lost_fd >= 0) {
    uint64_t one = 1;
    ssize_t n = write(m->lost_fd, &one, sizeof one);
    (void)n; /* an eventfd write only fails on overflow, which means already readable */
  }
  pthread_cond_broadcast(&m->cv);
}

/* Why a hold whose deadline passed is lost: the cap ended renewal, renewals
 * were tried and none succeeded in time, or nothing renewed it (a fixed
 * lease, or a watchdog that never got to it). */
static dlock_lost_reason deadline_reason(const dlock_mutex *m, dlock_mono_ms now) {
  if (m->watchdog_mode && m->opts.max_hold_ms && now >= m->acquired_at + m->opts.max_hold_ms)
    return DLOCK_LOST_MAX_HOLD;
  if (m->watchdog_mode && m->renew_tried) return DLOCK_LOST_UNREACHABLE;
  return DLOCK_LOST_DEADLINE;
}

dlock_lost_reason dlock__mutex_check_deadline(dlock_mutex *m, dlock_mono_ms now) {
  dlock_lost_reason lost = (dlock_lost_reason)atomic_load(&m->lost);
  if (lost != DLOCK_LOST_NONE) return lost;
  if (m->hold_count == 0 || m->valid_until == 0 || now < m->valid_until) return DLOCK_LOST_NONE;
  /* Marked here and not only by the watchdog, so that the answer, the fd
   * and the callback agree whoever looks first (the callback then reports
   * the reason stored here). */
  dlock__mutex_mark_lost(m, deadline_reason(m, now));
  return (dlock_lost_reason)atomic_load(&m->lost);
}

int dlock__mutex_renewed(dlock_mutex *m, dlock_mono_ms valid_until, dlock_mono_ms now) {
  /* A reply that comes after the deadline is too late: someone may already
   * have been told the hold is lost, and a lost hold stays lost. */
  if (dlock__mutex_check_deadline(m, now) != DLOCK_LOST_NONE) return 0;
  m->valid_until = valid_until;
  m->renew_tried = 0;
  return 1;
}

int dlock__lease_op_begin(dlock_mutex *m, dlock__lease_op *op, dlock_mono_ms until) {
  /* It may run at any moment from now on, before its answer comes (if one
   * comes): the key may then end at 'until'. */
  int lowered = m->valid_until != 0 && until < m->valid_until;
  if (lowered) m->valid_until = until;
  op->until = until;
  op->others = INT64_MAX;
  for (dlock__lease_op *o = m->lease_ops; o; o = o->next) {
    if (o->until < op->others) op->others = o->until;
    if (until < o->others) o->others = until;
  }
  op->next = m->lease_ops;
  m->lease_ops = op;
  return lowered;
}

dlock_mono_ms dlock__lease_op_end(dlock_mutex *m, dlock__lease_op *op, dlock_mono_ms until) {
  for (dlock__lease_op **p = &m->lease_ops; *p; p = &(*p)->next)
    if (*p == op) {
      *p = op->next;
      break;
    }
  return until < op->others ? until : op->others;
}

dlock_lost_reason dlock_mutex_lost(const dlock_mutex *m) {
  if (!m) return DLOCK_LOST_NONE;
  /* The handle is never const underneath (dlock_mutex_new allocates it);
   * answering may mark the loss, under the handle's lock. */
  dlock_mutex *mm = (dlock_mutex *)m;
  dlock_lost_reason lost = (dlock_lost_reason)atomic_load(&mm->lost);
  if (lost != DLOCK_LOST_NONE) return lost;
  pthread_mutex_lock(&mm->mu);
  lost = dlock__mutex_check_deadline(mm, dlock_mono_now());
  pthread_mutex_unlock(&mm->mu);
  return lost;
}

int dlock_mutex_lost_fd(dlock_mutex *m) {
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_lost_fd: handle is NULL");
  pthread_mutex_lock(&m->mu);
  if (m->lost_fd < 0) {
    m->lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->lost_fd < 0) {
      int e = errno;
      pthread_mutex_unlock(&m->mu);
      return dlock__error(DLOCK_ESYS, "eventfd: %s", strerror(e));
    }
    if (dlock__mutex_check_deadline(m, dlock_mono_now()) != DLOCK_LOST_NONE) {
      uint64_t one = 1;
      ssize_t n = write(m->lost_fd, &one, sizeof one);
      (void)n;
    }
  }
  int fd = m->lost_fd;
  pthread_mutex_unlock(&m->mu);
  return fd;
}

/* ---- Waits (for the backends) ---- */

int dlock__mutex_wait(dlock_mutex *m, dlock_mono_ms until) {
  struct timespec ts;
  dlock__deadline_timespec(until, &ts);
  pthread_mutex_lock(&m->mu);
  while (!m->woken && m->cancel_gen == m->wait_gen && dlock_mono_now() < until)
    if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT) break;
  m->woken = 0;
  int canceled = m->cancel_gen != m->wait_gen;
  pthread_mutex_unlock(&m->mu);
  return canceled;
}

void dlock__mutex_wake(dlock_mutex *m) {
  pthread_mutex_lock(&m->mu);
  m->woken = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

int dlock__mutex_canceled(dlock_mutex *m) { return atomic_load(&m->canceled); }
const atomic_int *dlock__mutex_cancel_flag(dlock_mutex *m) { return &m->canceled; }

/* ---- Pipelined release (dlock_mutex_release_async) ---- */

void dlock__mutex_release_done(dlock_mutex *m, int rc, const char *msg) {
  dlock__metrics_release_outcome(m, rc);
  pthread_mutex_lock(&m->mu);
  m->rel_rc = rc;
  snprintf(m->rel_msg, sizeof m->rel_msg, "%s", msg ? msg : "");
  m->rel_state = DLOCK__REL_DONE;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

/* Read the reply of a pipelined release pending on 'm', if any. */
static void rel_collect(dlock_mutex *m) {
  pthread_mutex_lock(&m->mu);
  int pending = m->rel_state == DLOCK__REL_PENDING;
  pthread_mutex_unlock(&m->mu);
  if (pending && m->client->ops->pipeline) m->client->ops->pipeline->release_collect(m);
}

/* Take the outcome of the pipelined release on 'm' (its reply read first):
 * 1 and '*rc' (the error recorded) when there was one, 0 when none. */
static int rel_take(dlock_mutex *m, int *rc) {
  rel_collect(m);
  char msg[sizeof m->rel_msg];
  pthread_mutex_lock(&m->mu);
  int had = m->rel_state != DLOCK__REL_NONE;
  if (m->rel_state == DLOCK__REL_PENDING) { /* not read: the backend could not */
    dlock__metrics_release_outcome(m, DLOCK_EUNKNOWN);
    m->rel_rc = DLOCK_EUNKNOWN;
    snprintf(m->rel_msg, sizeof m->rel_msg,
             "the release was sent, but its reply could not be read; it is not "
             "sent again: if it did not run, the key expires with its lease");
  }
  *rc = m->rel_rc;
  memcpy(msg, m->rel_msg, sizeof msg);
  m->rel_state = DLOCK__REL_NONE;
  pthread_mutex_unlock(&m->mu);
  if (had && *rc) dlock__error(*rc, "%s", msg);
  return had;
}

/* ---- Acquire ---- */

static void set_held(dlock_mutex *m, const dlock__grant *g) {
  pthread_mutex_lock(&m->mu);
  m->fence = g->fence;
  m->lease_ms = g->lease_ms;
  /* A session holds the lock for as long as it lives: the watchdog watches
   * the session's validity in place of a lease. */
  m->watchdog_mode = m->opts.lease_ms == 0 || (m->client->caps & DLOCK__CAP_SESSION);
  m->acquired_at = g->start;
  m->valid_until = g->valid_until;
  m->claim_ms = g->claim_ms;
  m->renew_tried = 0;
  m->hold_count = 1;
  dlock__metrics_hold_begin(m);
  pthread_mutex_unlock(&m->mu);
}

/* dlock_mutex_acquire() without its metrics: '*how' 1 for a reentrant
 * hold, 2 for a hand-off. */
static int acquire(dlock_mutex *m, int64_t wait_ms, int *how) {
  if (wait_ms != DLOCK_WAIT_FOREVER) {
    int rc = dlock__check_duration("wait_ms", wait_ms, 1);
    if (rc) return fail(m, rc, "acquire");
  }
  if (atomic_load(&m->client->closing)) return fail(m, dlock__error(DLOCK_ECLOSED, "client is closing"), "acquire");
  pthread_t self = pthread_self();
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  int have_gen = 0;
  unsigned gen = 0;
again:;
  int prev = 0;
  if (rel_take(m, &prev) && prev) { /* an outcome is never dropped */
    dlock__error_prefix("not acquired: the previous pipelined release (dlock_mutex_release_async): ");
    return fail(m, prev, "acquire");
  }
  if (m->kind == DLOCK__KIND_WRITE) { /* read-write lock: refuse an upgrade (rwlock.c) */
    int rc = dlock__rw_check_upgrade(m);
    if (rc) return fail(m, rc, "acquire the write side of");
  }

  pthread_mutex_lock(&m->mu);
  if (m->busy && pthread_equal(m->owner, self)) {
    if (m->hold_count == 0) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_EINVAL, "acquire called again while this thread is acquiring"), "acquire");
    }
    dlock_lost_reason why = dlock__mutex_check_deadline(m, dlock_mono_now());
    if (why != DLOCK_LOST_NONE) {
      pthread_mutex_unlock(&m->mu);
      return fail(m,
                  dlock__error(DLOCK_ELOST,
                               "re-entry refused: the lock was lost (%s); release it and "
                               "acquire again",
                               dlock__lost_reason_on(m->client, why)),
                  "acquire");
    }
    m->hold_count++;
    pthread_mutex_unlock(&m->mu);
    *how = 1;
    return 0;
  }
  /* Another thread of ours holds it through this handle: wait for it locally. */
  if (!have_gen) { /* once: a cancel from here on ends this acquire */
    gen = m->cancel_gen;
    have_gen = 1;
  }
  while (m->busy) {
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    if (m->cancel_gen != gen) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_ECANCELED, "wait canceled"), "acquire");
    }
    if (wait_ms == 0 || (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT && m->busy)) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_EBUSY, "held by another thread of this process"), "acquire");
    }
  }
  if (m->rel_state != DLOCK__REL_NONE) {
    /* Another thread released through this handle with
     * dlock_mutex_release_async since rel_take() above (while we waited for
     * it): its outcome is read (and a failure returned) before this acquire,
     * as by that thread's own next acquire, so that it is never dropped nor
     * taken for the outcome of a later release. */
    pthread_mutex_unlock(&m->mu);
    goto again;
  }
  m->busy = 1;
  m->owner = self;
  m->hold_count = 0;
  m->wait_gen = gen;
  m->woken = 0;
  atomic_store(&m->canceled, m->cancel_gen != gen);
  atomic_store(&m->lost, DLOCK_LOST_NONE);
  if (m->lost_fd >= 0) {
    uint64_t drain;
    ssize_t n = read(m->lost_fd, &drain, sizeof drain);
    (void)n; /* EAGAIN when it was not readable */
  }
  pthread_mutex_unlock(&m->mu);

  const dlock__backend_ops *ops = m->client->ops;
  int64_t lease = m->opts.lease_ms ? m->opts.lease_ms : m->opts.watchdog_lease_ms;
  dlock__grant g;
  memset(&g, 0, sizeof g);
  int rc = dlock__random_hex(m->token, DLOCK__TOKEN_HEX / 2);
  if (!rc) rc = ops->acquire(m, lease, wait_ms, deadline, &g);
  if (!rc) {
    set_held(m, &g);
    if (g.claim_ms) *how = 2;
    rc = dlock__watchdog_add(m->client, m);
    if (rc) { /* the watchdog could not start: do not keep an unguarded lock */
      char saved[1024];
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      ops->undo(m);
      dlock__error(rc, "%s", saved);
    }
  }
  if (rc) {
    pthread_mutex_lock(&m->mu);
    dlock__metrics_hold_end(m, DLOCK_LOST_NONE); /* the watchdog could not start: undone */
    m->busy = 0;
    m->hold_count = 0;
    m->fence = 0;
    m->valid_until = 0;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    /* "busy" too names the lock and the server, unless the backend's message does already */
    if (rc != DLOCK_EBUSY || !strstr(dlock_last_error(), m->client->server)) return fail(m, rc, "acquire");
    pthread_mutex_lock(&m->mu);
    snprintf(m->errmsg, sizeof m->errmsg, "%s", dlock_last_error());
    pthread_mutex_unlock(&m->mu);
    return rc;
  }
  return 0;
}

int dlock_mutex_acquire(dlock_mutex *m, int64_t wait_ms) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_acquire: handle is NULL");
  int64_t began = dlock__metrics_acquire_begin(m);
  int how = 0;
  int rc = acquire(m, wait_ms, &how);
  dlock__metrics_acquire_end(m, began, wait_ms, rc, how);
  return rc;
}

void dlock_mutex_cancel(dlock_mutex *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  /* Every wait that began before this call ends; later ones are unaffected. */
  m->cancel_gen++;
  int acquiring = m->busy && m->hold_count == 0;
  if (acquiring) atomic_store(&m->canceled, 1);
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (acquiring && m->client->ops->wake) m->client->ops->wake(m);
}

/* ---- Release, extend, queries ---- */

/* The first half of a release, shared by the synchronous and the pipelined
 * one: the owner check, one hold count less, and for the last hold the
 * watchdog stopped (so that no renewal is in flight past the delete) and
 * what the backend's release needs. 1: the last hold, go on; 0: an inner
 * hold of a reentrant acquire, done; < 0: not this thread's. */
static int release_begin(dlock_mutex *m, dlock_mono_ms *valid_until, dlock_lost_reason *lost) {
  pthread_mutex_lock(&m->mu);
  if (!m->busy || m->hold_count == 0 || !pthread_equal(m->owner, pthread_self())) {
    pthread_mutex_unlock(&m->mu);
    return fail(m, dlock__error(DLOCK_ENOTHELD, "this thread does not hold it"), "release");
  }
  /* A hold lost at its deadline stays lost, even if the server still had it. */
  dlock__mutex_check_deadline(m, dlock_mono_now());
  if (--m->hold_count > 0) {
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  dlock__metrics_hold_end(m, DLOCK_LOST_NONE); /* a lost hold ended at its loss */
  pthread_mutex_unlock(&m->mu);
  dlock__watchdog_remove(m->client, m);
  pthread_mutex_lock(&m->mu);
  *valid_until = m->valid_until;
  *lost = (dlock_lost_reason)atomic_load(&m->lost);
  return 1; /* with m->mu held */
}

/* The end of a release: the handle is free for its next acquire. */
static int release_end(dlock_mutex *m, int rc) {
  pthread_mutex_lock(&m->mu);
  m->busy = 0;
  m->fence = 0;
  m->valid_until = 0;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return rc ? fail(m, rc, "release") : 0;
}

int dlock_mutex_release(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_release: handle is NULL");
  dlock_mono_ms valid_until;
  dlock_lost_reason lost;
  int last = release_begin(m, &valid_until, &lost);
  if (last <= 0) return last;
  pthread_mutex_unlock(&m->mu);
  int rc = m->client->ops->release(m, valid_until, lost);
  dlock__metrics_release_outcome(m, rc);
  dlock__metrics_released(m, rc);
  return release_end(m, rc);
}

int dlock_mutex_release_async(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_release_async: handle is NULL");
  dlock_mono_ms valid_until;
  dlock_lost_reason lost;
  int last = release_begin(m, &valid_until, &lost);
  if (last <= 0) return last;
  m->rel_state = DLOCK__REL_PENDING;
  pthread_mutex_unlock(&m->mu);
  const dlock__backend_ops *ops = m->client->ops;
  int rc;
  if (ops->pipeline) {
    rc = ops->pipeline->release_async(m, valid_until, lost);
    if (rc) { /* not sent: the answer is now, nothing is pending */
      pthread_mutex_lock(&m->mu);
      m->rel_state = DLOCK__REL_NONE;
      pthread_mutex_unlock(&m->mu);
      dlock__metrics_release_outcome(m, rc);
    }
  } else { /* a backend without pipelining: the outcome waits all the same */
    int out = ops->release(m, valid_until, lost);
    dlock__mutex_release_done(m, out, out ? dlock_last_error() : "");
    rc = 0;
  }
  dlock__metrics_released(m, rc);
  return release_end(m, rc);
}

int dlock_mutex_release_result(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_release_result: handle is NULL");
  int rc = 0;
  if (!rel_take(m, &rc))
    return fail(m, dlock__error(DLOCK_EINVAL, "no pipelined release (dlock_mutex_release_async) to report"),
                "release_result");
  return rc ? fail(m, rc, "release") : 0;
}

/* Snapshot the token if held; ENOTHELD otherwise. */
static int held_token(dlock_mutex *m, char *token) {
  pthread_mutex_lock(&m->mu);
  int held = m->busy && m->hold_count > 0;
  if (held) memcpy(token, m->token, sizeof m->token);
  pthread_mutex_unlock(&m->mu);
  return held ? 0 : dlock__error(DLOCK_ENOTHELD, "not held through this handle");
}

int dlock_mutex_extend(dlock_mutex *m, int64_t lease_ms) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_extend: handle is NULL");
  char token[sizeof m->token];
  int rc = dlock__check_duration("lease_ms", lease_ms, 0);
  if (!rc) rc = held_token(m, token);
  if (rc) return fail(m, rc, "extend");
  pthread_mutex_lock(&m->mu);
  dlock_lost_reason lost = dlock__mutex_check_deadline(m, dlock_mono_now());
  pthread_mutex_unlock(&m->mu);
  if (lost != DLOCK_LOST_NONE)
    return fail(m,
                dlock__error(DLOCK_ENOTHELD,
                             "the hold was lost (%s) and a lost hold stays lost; not "
                             "extended: release it and acquire again",
                             dlock__lost_reason_on(m->client, lost)),
                "extend");
  if (m->client->caps & DLOCK__CAP_SESSION)
    return fail(m,
                dlock__error(DLOCK_EINVAL,
                             "this backend (%s) holds locks for as long as the session lives; "
                             "there is no lease to extend",
                             m->client->ops->name),
                "extend");
  dlock_mono_ms sent = dlock_mono_now();
  dlock_lost_reason why = DLOCK_LOST_NONE;
  dlock__lease_op op;
  pthread_mutex_lock(&m->mu);
  int lowered = dlock__lease_op_begin(m, &op, dlock__valid_until(sent, lease_ms));
  pthread_mutex_unlock(&m->mu);
  if (lowered) dlock__watchdog_rearm(m->client, m, sent, lease_ms); /* a shortening extend: watch the new deadline */
  rc = m->client->ops->extend(m, token, lease_ms, &sent, &why);
  pthread_mutex_lock(&m->mu);
  dlock_mono_ms safe_until = dlock__lease_op_end(m, &op, dlock__valid_until(sent, lease_ms));
  pthread_mutex_unlock(&m->mu);
  if (rc == DLOCK_ELOST) {
    pthread_mutex_lock(&m->mu);
    dlock__mutex_mark_lost(m, why);
    pthread_mutex_unlock(&m->mu);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    return fail(m, dlock__error(DLOCK_ENOTHELD, "%s; not extended (an expired lock is never re-created)", saved),
                "extend");
  }
  if (rc) {
    if (rc == DLOCK_EUNKNOWN) dlock__metrics_unknown(m->client, "extend");
    /* The extend may have run (a lost reply, replicas short): the server may
     * then end the hold 'lease_ms' after it, sooner than our deadline if the
     * lease was shortened. Count the hold as ending at the earlier of both. */
    pthread_mutex_lock(&m->mu);
    dlock_mono_ms until = dlock__valid_until(sent, lease_ms);
    int moved = m->valid_until != 0 && until < m->valid_until;
    if (moved) m->valid_until = until;
    pthread_mutex_unlock(&m->mu);
    if (moved) dlock__watchdog_rearm(m->client, m, sent, lease_ms);
    return fail(m, rc, "extend");
  }
  pthread_mutex_lock(&m->mu);
  int counts = dlock__mutex_renewed(m, safe_until, dlock_mono_now());
  if (counts && !m->watchdog_mode) m->lease_ms = lease_ms;
  if (counts) m->claim_ms = 0; /* the hold's lease is set now */
  lost = (dlock_lost_reason)atomic_load(&m->lost);
  pthread_mutex_unlock(&m->mu);
  if (!counts)
    return fail(m,
                dlock__error(DLOCK_ENOTHELD,
                             "the hold was lost (%s) before the extend's reply came; "
                             "release it and acquire again",
                             dlock__lost_reason_on(m->client, lost)),
                "extend");
  dlock__watchdog_rearm(m->client, m, sent, lease_ms);
  return 0;
}

int dlock_mutex_is_held(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_is_held: handle is NULL");
  char token[sizeof m->token];
  if (held_token(m, token) != 0) return 0;
  int rc = m->client->ops->held(m, token, NULL);
  return rc < 0 ? fail(m, rc, "is_held") : rc;
}

int dlock_mutex_remaining(dlock_mutex *m, int64_t *ttl_ms) {
  dlock__error_clear();
  if (!m || !ttl_ms) return dlock__error(DLOCK_EINVAL, "dlock_mutex_remaining: NULL argument");
  char token[sizeof m->token];
  int rc = held_token(m, token);
  if (rc) return fail(m, rc, "remaining");
  rc = m->client->ops->held(m, token, ttl_ms);
  if (rc < 0) return fail(m, rc, "remaining");
  if (rc == 0)
    return fail(m, dlock__error(DLOCK_ENOTHELD, "%s no longer holds our token", m->client->server), "remaining");
  return 0;
}

uint64_t dlock_mutex_fence(const dlock_mutex *m) {
  if (!m) return 0;
  dlock_mutex *mm = (dlock_mutex *)m;
  pthread_mutex_lock(&mm->mu);
  uint64_t f = mm->hold_count > 0 ? mm->fence : 0;
  pthread_mutex_unlock(&mm->mu);
  return f;
}

dlock_mono_ms dlock_mutex_valid_until(const dlock_mutex *m) {
  if (!m) return 0;
  dlock_mutex *mm = (dlock_mutex *)m;
  pthread_mutex_lock(&mm->mu);
  dlock_mono_ms v = mm->hold_count > 0 ? mm->valid_until : 0;
  pthread_mutex_unlock(&mm->mu);
  return v;
}

const char *dlock_mutex_name(const dlock_mutex *m) { return m ? m->name : ""; }
const char *dlock_mutex_errmsg(const dlock_mutex *m) { return m ? m->errmsg : ""; }

/* ---- One-call tier ---- */

int dlock_with_lock(dlock_client *c, const char *name, int64_t wait_ms, int (*fn)(uint64_t, void *), void *arg) {
  if (!fn) return dlock__error(DLOCK_EINVAL, "dlock_with_lock: fn is NULL");
  dlock_mutex *m;
  int rc = dlock_mutex_new(&m, c, name, NULL);
  if (rc) return rc;
  rc = dlock_mutex_acquire(m, wait_ms);
  if (rc) {
    dlock_mutex_free(m);
    return rc;
  }
  int result = fn(dlock_mutex_fence(m), arg);
  dlock_lost_reason lost = dlock_mutex_lost(m);
  int rel = dlock_mutex_release(m);
  dlock_mutex_free(m);
  if (lost != DLOCK_LOST_NONE)
    return dlock__error(DLOCK_ELOST, "lock '%s' was lost while the function ran: %s", name,
                        dlock__lost_reason_on(c, lost));
  if (rel == DLOCK_ENOTHELD)
    return dlock__error(DLOCK_ELOST,
                        "lock '%s' was no longer held at release: its lease ran out while "
                        "the function ran",
                        name);
  return result;
}
