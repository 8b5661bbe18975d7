/*
 * election.c - leader election (dlock_election_*, dlock_observer_*),
 * backend-neutral, on the mutex: leadership is a hold of the mutex named
 * for the election, so its lease, watchdog, loss rule and FIFO hand-off are
 * the mutex's on every backend; the epoch is the hold's fence; the leader's
 * value is the hold's owner_info. What the mutex lacks goes through the
 * backend's optional election operations (backend.h): proclaim, which
 * changes the owner_info of a live hold. The observer asks the server who
 * leads at a fixed interval and queues every change it sees.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_LEASE_MS 15000
#define DEFAULT_INTERVAL_MS 100
#define OBSERVER_QUEUE 1024
#define VALUE_MAX 1024

#define ELECTION_OPTIONS_V1 DLOCK__END_OF(dlock_election_options, value)
#define OBSERVER_OPTIONS_V1 DLOCK__END_OF(dlock_observer_options, on_change_arg)
#define LEADER_V1 DLOCK__END_OF(dlock_leader, value)

struct dlock_election {
  dlock_client *client;
  pthread_mutex_t mu; /* guards 'm' while a campaign makes it anew (cancel reads it) */
  dlock_mutex *m;
  dlock_mutex_options mo; /* to make the mutex again with another value */
  char errmsg[512];
};

static int fail(dlock_election *e, int rc, const char *op) {
  const char *server = e->client->server;
  if (strncmp(dlock_last_error(), server, strlen(server)) == 0)
    dlock__error_prefix("%s in election '%s' at ", op, e->m->name);
  else
    dlock__error_prefix("%s in election '%s' on %s: ", op, e->m->name, server);
  snprintf(e->errmsg, sizeof e->errmsg, "%s", dlock_last_error());
  return rc;
}

/* 1 (with the error set) when 'value' is longer than an owner_info may be. */
static int value_too_long(const char *value) {
  size_t n = strlen(value);
  return n > VALUE_MAX && dlock__error(DLOCK_EINVAL, "the value is %zu bytes, more than %d", n, VALUE_MAX);
}

void dlock_election_options_init(dlock_election_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

void dlock_leader_init(dlock_leader *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
}

void dlock_observer_options_init(dlock_observer_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

int dlock_election_new(dlock_election **out, dlock_client *c, const char *name, const dlock_election_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_election_new: 'out' is NULL");
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_election_new: client is NULL");
  dlock_election_options o;
  dlock_election_options_init(&o);
  int rc = dlock__options_in(&o, sizeof o, opts, ELECTION_OPTIONS_V1, "dlock_election_options");
  if (rc) return rc;
  if ((rc = dlock__check_duration("lease_ms", o.lease_ms, 1))) return rc;
  if (!c->ops->election)
    return dlock__error(DLOCK_EINVAL,
                        "leader election is not offered on %s (the %s backend in a mode without "
                        "fences): a term's epoch is its lock's fence; use the backend's lease mode "
                        "(docs/election.md)",
                        c->server, c->ops->name);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = o.lease_ms ? o.lease_ms : DEFAULT_LEASE_MS;
  mo.on_lost = o.on_lost;
  mo.on_lost_arg = o.on_lost_arg;
  if (o.value && value_too_long(o.value)) return DLOCK_EINVAL;
  mo.owner_info = o.value;
  dlock_election *e = calloc(1, sizeof *e);
  if (!e) return dlock__error(DLOCK_ENOMEM, "out of memory");
  e->client = c;
  pthread_mutex_init(&e->mu, NULL);
  e->mo = mo;
  e->mo.owner_info = NULL; /* the caller's: each campaign gives its own */
  if ((rc = dlock__lock_new(&e->m, c, name, DLOCK__KIND_MUTEX, 1, &mo))) {
    dlock__error_prefix("election '%s': ", name ? name : "");
    pthread_mutex_destroy(&e->mu);
    free(e);
    return rc;
  }
  e->m->election = 1;
  *out = e;
  return 0;
}

void dlock_election_free(dlock_election *e) {
  if (!e) return;
  dlock_mutex_free(e->m); /* releases a hold still there: a resign */
  pthread_mutex_destroy(&e->mu);
  free(e);
}

/* 1 when this handle holds the mutex (lost or not), with m->mu locked. */
static int holding_locked(dlock_mutex *m) { return m->busy && m->hold_count > 0; }

int dlock_election_campaign(dlock_election *e, const char *value, int64_t wait_ms) {
  dlock__error_clear();
  if (!e) return dlock__error(DLOCK_EINVAL, "dlock_election_campaign: handle is NULL");
  if (!value) value = "";
  if (value_too_long(value)) return fail(e, DLOCK_EINVAL, "campaign");
  dlock_mutex *m = e->m;
  pthread_mutex_lock(&m->mu);
  int held = holding_locked(m);
  dlock_lost_reason lost = held ? dlock__mutex_check_deadline(m, dlock_mono_now()) : DLOCK_LOST_NONE;
  if (held && lost == DLOCK_LOST_NONE) {
    pthread_mutex_unlock(&m->mu);
    return fail(e,
                dlock__error(DLOCK_EINVAL,
                             "this candidate leads already (epoch %llu): resign first, or "
                             "use dlock_election_proclaim() to change its value",
                             (unsigned long long)m->fence),
                "campaign");
  }
  if (held) { /* a lost term: let it go before standing again */
    m->hold_count = 1;
    m->owner = pthread_self();
  }
  pthread_mutex_unlock(&m->mu);
  if (held) dlock_mutex_release(m); /* ENOTHELD expected: the term was lost */
  if (strcmp(m->owner_info, value) != 0) {
    /* The value is the hold's owner_info, which a backend may take in when
     * the handle is made: a handle made with this value. */
    dlock_mutex *fresh = NULL;
    dlock_mutex_options mo = e->mo;
    mo.owner_info = value;
    int rc = dlock__lock_new(&fresh, e->client, m->name, DLOCK__KIND_MUTEX, 1, &mo);
    if (rc) return fail(e, rc, "campaign");
    fresh->election = 1;
    pthread_mutex_lock(&e->mu);
    dlock_mutex *old = m;
    e->m = m = fresh;
    pthread_mutex_unlock(&e->mu);
    dlock_mutex_free(old);
  }
  int rc = dlock_mutex_acquire(m, wait_ms);
  if (rc) {
    snprintf(e->errmsg, sizeof e->errmsg, "%s", dlock_mutex_errmsg(m));
    return rc;
  }
  return 0;
}

void dlock_election_cancel(dlock_election *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  dlock_mutex_cancel(e->m);
  pthread_mutex_unlock(&e->mu);
}

int dlock_election_proclaim(dlock_election *e, const char *value) {
  dlock__error_clear();
  if (!e) return dlock__error(DLOCK_EINVAL, "dlock_election_proclaim: handle is NULL");
  if (!value) value = "";
  if (value_too_long(value)) return fail(e, DLOCK_EINVAL, "proclaim");
  dlock_mutex *m = e->m;
  char token[DLOCK__TOKEN_HEX + 1];
  pthread_mutex_lock(&m->mu);
  int held = holding_locked(m);
  dlock_lost_reason lost = held ? dlock__mutex_check_deadline(m, dlock_mono_now()) : DLOCK_LOST_NONE;
  snprintf(token, sizeof token, "%s", m->token);
  pthread_mutex_unlock(&m->mu);
  if (!held) return fail(e, dlock__error(DLOCK_ENOTHELD, "this candidate does not lead: campaign first"), "proclaim");
  if (lost != DLOCK_LOST_NONE)
    return fail(e,
                dlock__error(DLOCK_ENOTHELD, "this candidate's term was lost (%s); the value was not written",
                             dlock__lost_reason_on(e->client, lost)),
                "proclaim");
  const dlock__backend_ops *ops = e->client->ops;
  char deployment[80];
  if (!ops->election || !ops->election->proclaim)
    return fail(e,
                dlock__error(DLOCK_EINVAL,
                             "changing a leader's value is not offered on %s (the %s backend%s); "
                             "resign and campaign again with the new value (docs/election.md)",
                             e->client->server, ops->name,
                             dlock__deployment_suffix(e->client, deployment, sizeof deployment)),
                "proclaim");
  int rc = ops->election->proclaim(m, token, value);
  if (rc) return fail(e, rc, "proclaim");
  char *v = strdup(value);
  pthread_mutex_lock(&m->mu);
  if (v) {
    free(m->owner_info);
    m->owner_info = v;
  }
  pthread_mutex_unlock(&m->mu);
  return 0;
}

int dlock_election_resign(dlock_election *e) {
  dlock__error_clear();
  if (!e) return dlock__error(DLOCK_EINVAL, "dlock_election_resign: handle is NULL");
  dlock_mutex *m = e->m;
  pthread_mutex_lock(&m->mu);
  int held = holding_locked(m);
  if (held) { /* the whole term, from whichever thread: as dlock_mutex_free() does */
    m->hold_count = 1;
    m->owner = pthread_self();
  }
  pthread_mutex_unlock(&m->mu);
  if (!held) return fail(e, dlock__error(DLOCK_ENOTHELD, "this candidate does not lead"), "resign");
  int rc = dlock_mutex_release(m);
  if (rc) snprintf(e->errmsg, sizeof e->errmsg, "%s", dlock_mutex_errmsg(m));
  return rc;
}

uint64_t dlock_election_epoch(const dlock_election *e) { return e ? dlock_mutex_fence(e->m) : 0; }
dlock_lost_reason dlock_election_lost(const dlock_election *e) { return e ? dlock_mutex_lost(e->m) : DLOCK_LOST_NONE; }
int dlock_election_lost_fd(dlock_election *e) { return e ? dlock_mutex_lost_fd(e->m) : -1; }
dlock_mono_ms dlock_election_valid_until(const dlock_election *e) { return e ? dlock_mutex_valid_until(e->m) : 0; }
dlock_mutex *dlock_election_mutex(dlock_election *e) { return e ? e->m : NULL; }
const char *dlock_election_name(const dlock_election *e) { return e ? e->m->name : ""; }
const char *dlock_election_errmsg(const dlock_election *e) { return e ? e->errmsg : ""; }

/* ---- Who leads ---- */

int dlock_election_leader(dlock_client *c, const char *name, dlock_leader *out) {
  dlock__error_clear();
  if (!c || !out) return dlock__error(DLOCK_EINVAL, "dlock_election_leader: NULL argument");
  int rc = dlock__struct_check(out, LEADER_V1, sizeof *out, "dlock_leader");
  if (rc) return rc;
  size_t size = out->struct_size;
  dlock_leader l;
  dlock_leader_init(&l);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if ((rc = dlock_lock_info_get(c, name, &info))) {
    dlock__error_prefix("who leads election '%s': ", name ? name : "");
    return rc;
  }
  if (info.held && !info.foreign && !info.rwlock && !info.permits) {
    l.has_leader = 1;
    l.epoch = info.fence;
    l.since_unix_ms = info.since_unix_ms;
    l.lease_left_ms = info.ttl_ms;
    snprintf(l.value, sizeof l.value, "%s", info.owner_info);
  } else if (info.held) {
    return dlock__error(DLOCK_EWRONGTYPE,
                        "who leads election '%s' on %s: the name is held as %s, not as an "
                        "election's mutex; pick another election name",
                        name, c->server,
                        info.foreign  ? "a key dlock did not write"
                        : info.rwlock ? "a read-write lock"
                                      : "a semaphore");
  }
  l.struct_size = size;
  memcpy(out, &l, size);
  return 0;
}

int dlock_election_evict(dlock_client *c, const char *name, uint64_t epoch, int *evicted) {
  dlock__error_clear();
  if (evicted) *evicted = 0;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_election_evict: client is NULL");
  int rc = dlock__check_name("election name", name);
  if (rc) return rc;
  if (epoch == 0) return dlock__error(DLOCK_EINVAL, "evict the leader of '%s': epoch 0 is no term's", name);
  const dlock__backend_ops *ops = c->ops;
  char deployment[80];
  if (!ops->election || !ops->election->evict)
    return dlock__error(DLOCK_EINVAL,
                        "evicting a leader by its epoch is not offered on %s (the %s backend%s); "
                        "'dlock release --force NAME' ends whichever term holds (docs/election.md)",
                        c->server, ops->name, dlock__deployment_suffix(c, deployment, sizeof deployment));
  int out = 0;
  if ((rc = ops->election->evict(c, name, epoch, &out))) {
    dlock__error_prefix("evict the leader of election '%s' (epoch %llu): ", name, (unsigned long long)epoch);
    return rc;
  }
  if (evicted) *evicted = out;
  return 0;
}

/* ---- Observers ---- */

struct dlock_observer {
  dlock_client *client;
  char *name;
  dlock_observer_options opts;
  pthread_t thread;
  int efd;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  dlock_leader queue[OBSERVER_QUEUE];
  size_t head, count;
  char errmsg[512];
};

static int same_leader(const dlock_leader *a, const dlock_leader *b) {
  return a->has_leader == b->has_leader && a->epoch == b->epoch && strcmp(a->value, b->value) == 0;
}

static void *observe_main(void *arg) {
  dlock_observer *o = arg;
  dlock_leader last;
  int have = 0;
  pthread_mutex_lock(&o->mu);
  while (!o->stop) {
    pthread_mutex_unlock(&o->mu);
    dlock_leader now;
    dlock_leader_init(&now);
    int rc = dlock_election_leader(o->client, o->name, &now);
    pthread_mutex_lock(&o->mu);
    if (rc) {
      snprintf(o->errmsg, sizeof o->errmsg, "%s", dlock_last_error());
    } else {
      o->errmsg[0] = '\0';
      if (!have || !same_leader(&last, &now)) {
        last = now;
        have = 1;
        if (o->count == OBSERVER_QUEUE) { /* full: drop the oldest */
          o->head = (o->head + 1) % OBSERVER_QUEUE;
          o->count--;
        }
        o->queue[(o->head + o->count) % OBSERVER_QUEUE] = now;
        o->count++;
        uint64_t one = 1;
        if (o->count == 1 && write(o->efd, &one, sizeof one) < 0) { /* cannot fail below 2^64-1 */
        }
        if (o->opts.on_change) {
          pthread_mutex_unlock(&o->mu);
          o->opts.on_change(o->name, &now, o->opts.on_change_arg);
          pthread_mutex_lock(&o->mu);
        }
      }
    }
    if (o->stop) break;
    struct timespec ts;
    dlock__deadline_timespec(dlock_mono_now() + o->opts.interval_ms, &ts);
    pthread_cond_timedwait(&o->cv, &o->mu, &ts);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

int dlock_observer_new(dlock_observer **out, dlock_client *c, const char *name, const dlock_observer_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_observer_new: 'out' is NULL");
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_observer_new: client is NULL");
  int rc = dlock__check_name("election name", name);
  if (rc) return rc;
  dlock_observer *o = calloc(1, sizeof *o);
  if (!o) return dlock__error(DLOCK_ENOMEM, "out of memory");
  dlock_observer_options_init(&o->opts);
  if ((rc = dlock__options_in(&o->opts, sizeof o->opts, opts, OBSERVER_OPTIONS_V1, "dlock_observer_options")) ||
      (rc = dlock__check_duration("interval_ms", o->opts.interval_ms, 1))) {
    free(o);
    return rc;
  }
  if (!o->opts.interval_ms) o->opts.interval_ms = DEFAULT_INTERVAL_MS;
  o->client = c;
  o->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!(o->name = strdup(name)) || o->efd < 0) {
    rc = o->efd < 0 ? dlock__error(DLOCK_ESYS, "observer of election '%s': eventfd: %s", name, strerror(errno))
                    : dlock__error(DLOCK_ENOMEM, "out of memory");
    if (o->efd >= 0) close(o->efd);
    free(o->name);
    free(o);
    return rc;
  }
  pthread_mutex_init(&o->mu, NULL);
  dlock__cond_init(&o->cv);
  if ((errno = pthread_create(&o->thread, NULL, observe_main, o))) {
    rc = dlock__error(DLOCK_ESYS, "observer of election '%s': cannot start its thread: %s", name, strerror(errno));
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    close(o->efd);
    free(o->name);
    free(o);
    return rc;
  }
  *out = o;
  return 0;
}

void dlock_observer_free(dlock_observer *o) {
  if (!o) return;
  pthread_mutex_lock(&o->mu);
  o->stop = 1;
  pthread_cond_signal(&o->cv);
  pthread_mutex_unlock(&o->mu);
  pthread_join(o->thread, NULL);
  pthread_mutex_destroy(&o->mu);
  pthread_cond_destroy(&o->cv);
  close(o->efd);
  free(o->name);
  free(o);
}

int dlock_observer_fd(dlock_observer *o) { return o ? o->efd : -1; }

int dlock_observer_next(dlock_observer *o, dlock_leader *out) {
  dlock__error_clear();
  if (!o || !out) return dlock__error(DLOCK_EINVAL, "dlock_observer_next: NULL argument");
  int rc = dlock__struct_check(out, LEADER_V1, sizeof *out, "dlock_leader");
  if (rc) return rc;
  size_t size = out->struct_size;
  pthread_mutex_lock(&o->mu);
  if (o->count == 0) {
    pthread_mutex_unlock(&o->mu);
    return DLOCK_EBUSY;
  }
  dlock_leader l = o->queue[o->head];
  o->head = (o->head + 1) % OBSERVER_QUEUE;
  if (--o->count == 0) { /* not readable any more */
    uint64_t n;
    if (read(o->efd, &n, sizeof n) < 0) { /* EAGAIN: already drained */
    }
  }
  pthread_mutex_unlock(&o->mu);
  l.struct_size = size;
  memcpy(out, &l, size);
  return 0;
}

const char *dlock_observer_errmsg(dlock_observer *o) { return o ? o->errmsg : ""; }
