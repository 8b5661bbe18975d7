/*
 * metrics.c - what a client's locks, elections and jobs did, backend-neutral
 * (docs/metrics.md): counters, gauges and fixed-bucket histograms, always
 * on, written as Prometheus or OpenMetrics text; and the event hook's queue.
 *
 * The hot path (an acquire and a release) only adds to relaxed atomics: no
 * lock, no allocation. Elections and jobs are rare: their series by name
 * (the client's allow-list) sit in a small table under a mutex. Events go
 * through a bounded queue to one delivery thread that calls the hook with
 * no lock held, so a hook may call dlock again; a full queue drops the
 * event (seq shows the gap) rather than stall a lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* ---- Label values ---- */

#define KINDS 5 /* dlock__kind, then the election's mutex */
#define KIND_ELECTION 4
static const char *const kind_label[KINDS] = {"mutex", "semaphore", "read", "write", "election"};

enum { ACQ_ACQUIRED, ACQ_REENTERED, ACQ_BUSY, ACQ_TIMED_OUT, ACQ_CANCELED, ACQ_ERROR, ACQ_N };
static const char *const acq_label[ACQ_N] = {"acquired", "reentered", "busy", "timed_out", "canceled", "error"};

enum { REL_OK, REL_NOT_HELD, REL_UNKNOWN, REL_ERROR, REL_N };
static const char *const rel_label[REL_N] = {"ok", "not_held", "unknown", "error"};

#define REASONS 8 /* dlock_lost_reason 1..7 */
static const char *const reason_label[REASONS] = {"none",     "expired",  "taken",    "unreachable",
                                                  "max_hold", "deadline", "failover", "deleted"};

enum { OP_ACQUIRE, OP_RELEASE, OP_EXTEND, OP_N };
static const char *const op_label[OP_N] = {"acquire", "release", "extend"};

/* The tick outcomes other than a run (dlock_sched_event_kind 2..7). */
#define SKIPS 9
static const char *const skip_label[SKIPS] = {"",         "", "other_node", "busy",  "pool_full",
                                              "misfired", "", "clock_skew", "paused"};

/* ---- Histograms: fixed buckets in microseconds ---- */

#define BUCKETS_MAX 18
typedef struct hist_shape {
  int n;
  int64_t le_us[BUCKETS_MAX]; /* upper bounds; +Inf after them */
} hist_shape;

static const hist_shape wait_shape = {17,
                                      {500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
                                       2500000, 5000000, 10000000, 30000000, 60000000, 300000000}};
static const hist_shape hold_shape = {13,
                                      {1000, 10000, 100000, 500000, 1000000, 5000000, 10000000, 30000000, 60000000,
                                       300000000, 900000000, 3600000000, 14400000000}};
static const hist_shape rtt_shape = {
    14, {100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000}};

typedef struct hist {
  atomic_ullong bucket[BUCKETS_MAX + 1]; /* per bucket, not cumulative; the last is +Inf */
  atomic_ullong sum_us;
} hist;

static void observe(hist *h, const hist_shape *shape, int64_t us) {
  if (us < 0) us = 0;
  int i = 0;
  while (i < shape->n && us > shape->le_us[i]) i++;
  atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_us, (unsigned long long)us, memory_order_relaxed);
}

/* ---- Elections and jobs, by name ---- */

#define NAMED_MAX 64
enum { NAMED_ELECTION, NAMED_JOB, NAMED_LOCK };

typedef struct named {
  int type;
  char *name; /* "" for every name not in the allow-list */
  /* elections */
  long long leading;
  unsigned long long elected, deposed;
  /* jobs */
  unsigned long long runs_ok, runs_failed, skipped[SKIPS], errors;
  long long running;
  int64_t last_success_unix_ms, last_duration_ms;
  /* locks (only the names allowed: no catch-all) */
  unsigned long long acquired, busy, lost;
  long long held;
} named;

/* ---- The event queue ---- */

#define QUEUE_MAX 4096

typedef struct queued {
  dlock_event ev;
  char *name;
} queued;

typedef struct event_queue {
  pthread_mutex_t mu; /* a leaf: nothing else is locked under it */
  pthread_cond_t cv;
  queued *ring;
  size_t head, n;
  uint64_t seq;
  int started, stop;
  pthread_t thread;
} event_queue;

struct dlock__metrics {
  atomic_ullong acq[KINDS][ACQ_N];
  atomic_ullong rel[KINDS][REL_N];
  atomic_ullong lost[KINDS][REASONS];
  atomic_ullong handoffs[KINDS];
  atomic_ullong unknown[OP_N];
  atomic_ullong renew_ok, renew_failed, renew_late;
  atomic_llong held[KINDS], waiting[KINDS];
  atomic_llong batch_size;
  atomic_ullong events_dropped;
  hist wait[KINDS], hold[KINDS], rtt;

  pthread_mutex_t named_mu; /* a leaf, as the queue's */
  named names[NAMED_MAX];
  int nnames;
  char *allow; /* ",a,b," (to find ",name,"), or NULL */
  int allow_all;

  dlock_event_cb on_event;
  void *on_event_arg;
  event_queue q;
};

static const char *const event_names[] = {"unknown",     "acquire.started", "acquire.finished", "released",
                                          "lost",        "renewed.late",    "elected",          "deposed",
                                          "job.started", "job.finished"};

const char *dlock_event_kind_str(dlock_event_kind kind) {
  return kind >= 1 && kind <= DLOCK_EVENT_JOB_FINISHED ? event_names[kind] : event_names[0];
}

int dlock__metrics_new(dlock_client *c, const dlock_client_options *o) {
  dlock__metrics *x = calloc(1, sizeof *x);
  if (!x) return dlock__error(DLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&x->named_mu, NULL);
  pthread_mutex_init(&x->q.mu, NULL);
  dlock__cond_init(&x->q.cv);
  x->on_event = o->on_event;
  x->on_event_arg = o->on_event_arg;
  c->metrics = x;
  const char *allow = o->metrics_names;
  if (allow && strcmp(allow, "*") == 0) {
    x->allow_all = 1;
  } else if (allow && *allow) {
    size_t n = strlen(allow);
    if (!(x->allow = malloc(n + 3))) return dlock__error(DLOCK_ENOMEM, "out of memory");
    snprintf(x->allow, n + 3, ",%s,", allow);
  }
  return 0;
}

static int kind_of(const dlock_mutex *m) { return m->election ? KIND_ELECTION : (int)m->kind; }

static void add(atomic_ullong *v) { atomic_fetch_add_explicit(v, 1, memory_order_relaxed); }
static void gauge(atomic_llong *v, long long d) { atomic_fetch_add_explicit(v, d, memory_order_relaxed); }

/* ---- Events ---- */

static void *deliver_main(void *arg) {
  dlock__metrics *x = arg;
  event_queue *q = &x->q;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->n == 0 && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
    if (q->n == 0) break; /* stopping, and everything was delivered */
    queued item = q->ring[q->head];
    q->head = (q->head + 1) % QUEUE_MAX;
    q->n--;
    pthread_mutex_unlock(&q->mu);
    item.ev.name = item.name ? item.name : "";
    x->on_event(&item.ev, x->on_event_arg); /* no lock of ours is held here */
    free(item.name);
    pthread_mutex_lock(&q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* Queue 'ev' (its name copied) for the hook; seq and time are set here, in
 * queue order. Dropped (counted) when the queue is full or memory is short. */
static void emit(dlock_client *c, dlock_event ev) {
  dlock__metrics *x = c->metrics;
  if (!x || !x->on_event) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  event_queue *q = &x->q;
  pthread_mutex_lock(&q->mu);
  ev.seq = ++q->seq;
  ev.unix_us = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
  if (!q->ring) q->ring = calloc(QUEUE_MAX, sizeof *q->ring);
  if (q->ring && !q->started && !q->stop) {
    if (pthread_create(&q->thread, NULL, deliver_main, x) == 0) q->started = 1;
  }
  /* After dlock__metrics_stop() (a backend's thread during the close) the
   * delivery thread is gone: dropped, as with a full queue. */
  char *name = q->ring && q->started && !q->stop && q->n < QUEUE_MAX ? strdup(ev.name ? ev.name : "") : NULL;
  if (!name) {
    pthread_mutex_unlock(&q->mu);
    add(&x->events_dropped);
    return;
  }
  queued *slot = &q->ring[(q->head + q->n) % QUEUE_MAX];
  slot->ev = ev;
  slot->ev.name = NULL;
  slot->name = name;
  q->n++;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

static dlock_event event_of(dlock_event_kind kind, const char *name, const char *lock_kind) {
  dlock_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = kind;
  ev.name = name;
  ev.lock_kind = lock_kind;
  ev.duration_us = -1;
  return ev;
}

void dlock__metrics_stop(dlock_client *c) {
  dlock__metrics *x = c->metrics;
  if (!x) return;
  event_queue *q = &x->q;
  pthread_mutex_lock(&q->mu);
  q->stop = 1;
  int started = q->started;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (started) pthread_join(q->thread, NULL);
}

void dlock__metrics_free(dlock_client *c) {
  dlock__metrics *x = c->metrics;
  if (!x) return;
  dlock__metrics_stop(c);
  for (size_t i = 0; x->q.ring && i < x->q.n; i++) free(x->q.ring[(x->q.head + i) % QUEUE_MAX].name);
  free(x->q.ring);
  for (int i = 0; i < x->nnames; i++) free(x->names[i].name);
  free(x->allow);
  pthread_mutex_destroy(&x->named_mu);
  pthread_mutex_destroy(&x->q.mu);
  pthread_cond_destroy(&x->q.cv);
  free(x);
  c->metrics = NULL;
}

/* ---- Series by name ---- */

static int allowed(const dlock__metrics *x, const char *name) {
  if (x->allow_all) return 1;
  if (!x->allow) return 0;
  size_t n = strlen(name);
  if (!n) return 0;
  for (const char *p = x->allow; (p = strstr(p, name)); p++)
    if (p[-1] == ',' && p[n] == ',') return 1;
  return 0;
}

/* The entry of 'name' (or of every name not allowed), with named_mu held;
 * NULL when the table is full and no entry fits (nothing is counted). */
static named *named_get(dlock__metrics *x, int type, const char *name) {
  if (!allowed(x, name)) name = "";
  if (type == NAMED_LOCK && !*name) return NULL; /* locks: by name or not at all */
  for (int i = 0; i < x->nnames; i++)
    if (x->names[i].type == type && strcmp(x->names[i].name, name) == 0) return &x->names[i];
  /* The last slots are kept for the two catch-alls. */
  if (x->nnames >= NAMED_MAX - (*name ? 2 : 0)) return *name ? named_get(x, type, "") : NULL;
  named *e = &x->names[x->nnames];
  memset(e, 0, sizeof *e);
  if (!(e->name = strdup(name))) return NULL;
  e->type = type;
  x->nnames++;
  return e;
}

/* ---- Locks ---- */

/* A lock's series by name, for the names allowed only (the lock families
 * have no catch-all: the kind series count every lock). The entry is made
 * at the first count, when an election's handle is known as one (its name
 * is counted by the election families instead). */
static char named_pending;

void dlock__metrics_lock_new(dlock_mutex *m) {
  dlock__metrics *x = m->client->metrics;
  if ((x->allow || x->allow_all) && allowed(x, m->name)) atomic_store(&m->mx_named, (void *)&named_pending);
}

/* Add to the named series of 'm' (if any): acquired, busy, held, lost. */
static void lock_count(dlock_mutex *m, int acquired, int busy, int held, int lost) {
  if (m->election) return;
  dlock__metrics *x = m->client->metrics;
  pthread_mutex_lock(&x->named_mu);
  named *e = atomic_load(&m->mx_named);
  if (e == (void *)&named_pending) {
    e = named_get(x, NAMED_LOCK, m->name);
    atomic_store(&m->mx_named, e);
  }
  if (!e) {
    pthread_mutex_unlock(&x->named_mu);
    return;
  }
  e->acquired += (unsigned)acquired;
  e->busy += (unsigned)busy;
  e->held += held;
  e->lost += (unsigned)lost;
  pthread_mutex_unlock(&x->named_mu);
}

int64_t dlock__metrics_acquire_begin(dlock_mutex *m) {
  dlock__metrics *x = m->client->metrics;
  gauge(&x->waiting[kind_of(m)], 1);
  if (x->on_event) emit(m->client, event_of(DLOCK_EVENT_ACQUIRE_STARTED, m->name, kind_label[kind_of(m)]));
  return dlock__mono_ns();
}

void dlock__metrics_acquire_end(dlock_mutex *m, int64_t began, int64_t wait_ms, int rc, int how) {
  dlock__metrics *x = m->client->metrics;
  int k = kind_of(m);
  int64_t us = (dlock__mono_ns() - began) / 1000;
  gauge(&x->waiting[k], -1);
  int outcome = rc == 0                 ? (how == 1 ? ACQ_REENTERED : ACQ_ACQUIRED)
                : rc == DLOCK_EBUSY     ? (wait_ms == 0 ? ACQ_BUSY : ACQ_TIMED_OUT)
                : rc == DLOCK_ECANCELED ? ACQ_CANCELED
                                        : ACQ_ERROR;
  add(&x->acq[k][outcome]);
  if (outcome == ACQ_ACQUIRED) observe(&x->wait[k], &wait_shape, us);
  if (atomic_load_explicit(&m->mx_named, memory_order_relaxed))
    lock_count(m, outcome == ACQ_ACQUIRED, outcome == ACQ_BUSY || outcome == ACQ_TIMED_OUT, 0, 0);
  if (rc == 0 && how == 2) add(&x->handoffs[k]);
  if (rc == DLOCK_EUNKNOWN) add(&x->unknown[OP_ACQUIRE]);
  if (x->on_event) {
    dlock_event ev = event_of(DLOCK_EVENT_ACQUIRE_FINISHED, m->name, kind_label[k]);
    ev.status = rc;
    ev.fence = rc == 0 ? dlock_mutex_fence(m) : 0;
    ev.duration_us = us;
    emit(m->client, ev);
  }
}

void dlock__metrics_hold_begin(dlock_mutex *m) {
  dlock__metrics *x = m->client->metrics;
  int k = kind_of(m);
  m->mx_since_ns = dlock__mono_ns();
  atomic_store_explicit(&m->mx_held, 1, memory_order_release);
  gauge(&x->held[k], 1);
  if (atomic_load_explicit(&m->mx_named, memory_order_relaxed)) lock_count(m, 0, 0, 1, 0);
  if (!m->election) return;
  pthread_mutex_lock(&x->named_mu);
  named *e = named_get(x, NAMED_ELECTION, m->name);
  if (e) {
    e->leading++;
    e->elected++;
  }
  pthread_mutex_unlock(&x->named_mu);
  dlock_event ev = event_of(DLOCK_EVENT_ELECTED, m->name, kind_label[k]);
  ev.fence = m->fence;
  emit(m->client, ev);
}

void dlock__metrics_hold_end(dlock_mutex *m, dlock_lost_reason reason) {
  if (!atomic_exchange(&m->mx_held, 0)) return; /* ended already (lost, then released) */
  dlock__metrics *x = m->client->metrics;
  int k = kind_of(m);
  int64_t us = (dlock__mono_ns() - m->mx_since_ns) / 1000;
  gauge(&x->held[k], -1);
  observe(&x->hold[k], &hold_shape, us);
  if (atomic_load_explicit(&m->mx_named, memory_order_relaxed)) lock_count(m, 0, 0, -1, reason != DLOCK_LOST_NONE);
  if (reason != DLOCK_LOST_NONE) {
    add(&x->lost[k][(unsigned)reason < REASONS ? (int)reason : 0]);
    dlock_event ev = event_of(DLOCK_EVENT_LOST, m->name, kind_label[k]);
    ev.reason = reason;
    ev.fence = m->fence;
    ev.duration_us = us;
    emit(m->client, ev);
  }
  if (!m->election) return;
  pthread_mutex_lock(&x->named_mu);
  named *e = named_get(x, NAMED_ELECTION, m->name);
  if (e) {
    e->leading--;
    e->deposed++;
  }
  pthread_mutex_unlock(&x->named_mu);
  dlock_event ev = event_of(DLOCK_EVENT_DEPOSED, m->name, kind_label[k]);
  ev.reason = reason;
  ev.fence = m->fence;
  ev.duration_us = us;
  emit(m->client, ev);
}

void dlock__metrics_release_outcome(dlock_mutex *m, int rc) {
  dlock__metrics *x = m->client->metrics;
  int outcome = rc == 0 ? REL_OK : rc == DLOCK_ENOTHELD ? REL_NOT_HELD : rc == DLOCK_EUNKNOWN ? REL_UNKNOWN : REL_ERROR;
  add(&x->rel[kind_of(m)][outcome]);
  if (rc == DLOCK_EUNKNOWN) add(&x->unknown[OP_RELEASE]);
}

void dlock__metrics_released(dlock_mutex *m, int rc) {
  dlock__metrics *x = m->client->metrics;
  if (!x->on_event) return;
  dlock_event ev = event_of(DLOCK_EVENT_RELEASED, m->name, kind_label[kind_of(m)]);
  ev.status = rc;
  ev.duration_us = (dlock__mono_ns() - m->mx_since_ns) / 1000;
  emit(m->client, ev);
}

void dlock__metrics_unknown(dlock_client *c, const char *op) {
  for (int i = 0; i < OP_N; i++)
    if (strcmp(op, op_label[i]) == 0) add(&c->metrics->unknown[i]);
}

void dlock__metrics_renew_batch(dlock_client *c, size_t n, int64_t ns) {
  dlock__metrics *x = c->metrics;
  atomic_store_explicit(&x->batch_size, (long long)n, memory_order_relaxed);
  observe(&x->rtt, &rtt_shape, ns / 1000);
}

void dlock__metrics_renewed(dlock_mutex *m, int status, int64_t left_ms, int64_t lease_ms) {
  dlock__metrics *x = m->client->metrics;
  if (status == DLOCK_ELOST) return; /* a loss, counted as one */
  if (status != 0) {
    add(&x->renew_failed);
    return;
  }
  add(&x->renew_ok);
  if (left_ms >= lease_ms / 3) return;
  add(&x->renew_late);
  dlock_event ev = event_of(DLOCK_EVENT_RENEWED_LATE, m->name, kind_label[kind_of(m)]);
  ev.fence = m->fence;
  ev.duration_us = left_ms * 1000;
  emit(m->client, ev);
}

/* ---- Jobs ---- */

void dlock__metrics_job_started(dlock_client *c, const char *job, int64_t tick, uint64_t fence) {
  dlock__metrics *x = c->metrics;
  pthread_mutex_lock(&x->named_mu);
  named *e = named_get(x, NAMED_JOB, job);
  if (e) e->running++;
  pthread_mutex_unlock(&x->named_mu);
  dlock_event ev = event_of(DLOCK_EVENT_JOB_STARTED, job, "job");
  ev.fence = fence;
  ev.scheduled_unix_ms = tick;
  emit(c, ev);
}

void dlock__metrics_job_finished(dlock_client *c, const char *job, int64_t tick, uint64_t fence, int status,
                                 int64_t duration_ms) {
  dlock__metrics *x = c->metrics;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  pthread_mutex_lock(&x->named_mu);
  named *e = named_get(x, NAMED_JOB, job);
  if (e) {
    e->running--;
    e->last_duration_ms = duration_ms;
    if (status == 0) {
      e->runs_ok++;
      e->last_success_unix_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    } else {
      e->runs_failed++;
    }
  }
  pthread_mutex_unlock(&x->named_mu);
  dlock_event ev = event_of(DLOCK_EVENT_JOB_FINISHED, job, "job");
  ev.fence = fence;
  ev.scheduled_unix_ms = tick;
  ev.status = status;
  ev.duration_us = duration_ms * 1000;
  emit(c, ev);
}

void dlock__metrics_job_other(dlock_client *c, const char *job, int kind) {
  if (kind < 2 || kind >= SKIPS) return;
  dlock__metrics *x = c->metrics;
  pthread_mutex_lock(&x->named_mu);
  named *e = named_get(x, NAMED_JOB, job);
  if (e && kind == DLOCK_SCHED_ERROR)
    e->errors++;
  else if (e)
    e->skipped[kind]++;
  pthread_mutex_unlock(&x->named_mu);
}

/* ---- Exposition ---- */

typedef struct out {
  FILE *f;
  int om; /* OpenMetrics */
} out;

static unsigned long long get(atomic_ullong *v) { return atomic_load_explicit(v, memory_order_relaxed); }
static long long getg(atomic_llong *v) { return atomic_load_explicit(v, memory_order_relaxed); }

/* "# HELP" and "# TYPE": OpenMetrics names a counter's family without
 * "_total". */
static void family(out *o, const char *name, const char *type, const char *help) {
  size_t n = strlen(name);
  int total = o->om && strcmp(type, "counter") == 0 && n > 6 && strcmp(name + n - 6, "_total") == 0;
  int len = (int)(total ? n - 6 : n);
  fprintf(o->f, "# HELP %.*s %s\n# TYPE %.*s %s\n", len, name, help, len, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label_value(FILE *f, const char *v) {
  for (; *v; v++) {
    if (*v == '\\')
      fputs("\\\\", f);
    else if (*v == '"')
      fputs("\\\"", f);
    else if (*v == '\n')
      fputs("\\n", f);
    else
      fputc(*v, f);
  }
}

static void seconds(FILE *f, int64_t us) {
  fprintf(f, "%lld.%06lld", (long long)(us / 1000000), (long long)(us % 1000000));
}

static void write_hist(out *o, const char *name, const char *label, hist *h, const hist_shape *shape) {
  unsigned long long cum = 0;
  const char *sep = *label ? "," : "";
  for (int i = 0; i <= shape->n; i++) {
    cum += get(&h->bucket[i]);
    fprintf(o->f, "%s_bucket{%s%sle=\"", name, label, sep);
    if (i < shape->n)
      seconds(o->f, shape->le_us[i]);
    else
      fputs("+Inf", o->f);
    fprintf(o->f, "\"} %llu\n", cum);
  }
  fprintf(o->f, "%s_sum%s%s%s ", name, *label ? "{" : "", label, *label ? "}" : "");
  seconds(o->f, (int64_t)get(&h->sum_us));
  fprintf(o->f, "\n%s_count%s%s%s %llu\n", name, *label ? "{" : "", label, *label ? "}" : "", cum);
}

/* The 'name' label of an entry, with its comma, or "". */
static void name_label(FILE *f, const named *e, const char *rest) {
  if (*e->name) {
    fputs("{name=\"", f);
    label_value(f, e->name);
    fprintf(f, "\"%s%s}", *rest ? "," : "", rest);
  } else if (*rest) {
    fprintf(f, "{%s}", rest);
  }
}

enum {
  F_LEADER,
  F_TRANSITIONS,
  F_RUNS,
  F_SKIPPED,
  F_ERRORS,
  F_RUNNING,
  F_LAST_SUCCESS,
  F_LAST_DURATION,
  F_LOCK_ACQUIRED,
  F_LOCK_HELD,
  F_LOCK_LOST
};

static void ms_as_seconds(FILE *f, int64_t ms) {
  fprintf(f, " %lld.%03lld\n", (long long)(ms / 1000), (long long)(ms % 1000));
}

/* One family of the series by name: its header, then a sample (or a few,
 * one per value of its second label) of every entry of 'type'. */
static void named_family(out *o, dlock__metrics *x, int type, int field, const char *name, const char *mtype,
                         const char *help) {
  FILE *f = o->f;
  family(o, name, mtype, help);
  for (int i = 0; i < x->nnames; i++) {
    named *e = &x->names[i];
    if (e->type != type) continue;
    if (field == F_TRANSITIONS || field == F_RUNS || field == F_LOCK_ACQUIRED) {
      const char *what[2] = {field == F_RUNS            ? "outcome=\"ok\""
                             : field == F_LOCK_ACQUIRED ? "outcome=\"acquired\""
                                                        : "to=\"leader\"",
                             field == F_RUNS            ? "outcome=\"failed\""
                             : field == F_LOCK_ACQUIRED ? "outcome=\"busy\""
                                                        : "to=\"follower\""};
      unsigned long long v[2] = {field == F_RUNS            ? e->runs_ok
                                 : field == F_LOCK_ACQUIRED ? e->acquired
                                                            : e->elected,
                                 field == F_RUNS            ? e->runs_failed
                                 : field == F_LOCK_ACQUIRED ? e->busy
                                                            : e->deposed};
      for (int j = 0; j < 2; j++) {
        fputs(name, f);
        name_label(f, e, what[j]);
        fprintf(f, " %llu\n", v[j]);
      }
      continue;
    }
    if (field == F_SKIPPED) {
      for (int r = 2; r < SKIPS; r++) {
        if (!*skip_label[r]) continue;
        char rest[64];
        snprintf(rest, sizeof rest, "reason=\"%s\"", skip_label[r]);
        fputs(name, f);
        name_label(f, e, rest);
        fprintf(f, " %llu\n", e->skipped[r]);
      }
      continue;
    }
    fputs(name, f);
    name_label(f, e, "");
    if (field == F_LEADER)
      fprintf(f, " %lld\n", e->leading);
    else if (field == F_ERRORS)
      fprintf(f, " %llu\n", e->errors);
    else if (field == F_RUNNING)
      fprintf(f, " %lld\n", e->running);
    else if (field == F_LAST_SUCCESS)
      ms_as_seconds(f, e->last_success_unix_ms);
    else if (field == F_LAST_DURATION)
      ms_as_seconds(f, e->last_duration_ms);
    else if (field == F_LOCK_HELD)
      fprintf(f, " %lld\n", e->held);
    else
      fprintf(f, " %llu\n", e->lost);
  }
}

static void write_named(out *o, dlock__metrics *x) {
  named_family(o, x, NAMED_ELECTION, F_LEADER, "dlock_election_leader", "gauge",
               "1 while this client leads the election (by name when allowed; else how many it leads)");
  named_family(o, x, NAMED_ELECTION, F_TRANSITIONS, "dlock_election_transitions_total", "counter",
               "Terms begun (to=leader) and ended (to=follower)");
  named_family(o, x, NAMED_JOB, F_RUNS, "dlock_job_runs_total", "counter",
               "Runs of a job on this node by outcome (ok: the job returned 0)");
  named_family(o, x, NAMED_JOB, F_SKIPPED, "dlock_job_skipped_total", "counter", "Ticks not run here, by reason");
  named_family(o, x, NAMED_JOB, F_ERRORS, "dlock_job_errors_total", "counter",
               "Ticks the server failed on (claim or record)");
  named_family(o, x, NAMED_JOB, F_RUNNING, "dlock_job_running", "gauge", "Runs of the job going on on this node now");
  named_family(o, x, NAMED_JOB, F_LAST_SUCCESS, "dlock_job_last_success_timestamp_seconds", "gauge",
               "When the last run that succeeded here ended (Unix time; 0: none yet)");
  named_family(o, x, NAMED_JOB, F_LAST_DURATION, "dlock_job_last_duration_seconds", "gauge",
               "How long the last run here took");
  named_family(o, x, NAMED_LOCK, F_LOCK_ACQUIRED, "dlock_lock_acquisitions_total", "counter",
               "Acquire calls on a lock named in metrics_names: acquired, busy (a try or a wait that ended)");
  named_family(o, x, NAMED_LOCK, F_LOCK_HELD, "dlock_lock_held", "gauge", "Holds now of a lock named in metrics_names");
  named_family(o, x, NAMED_LOCK, F_LOCK_LOST, "dlock_lock_losses_total", "counter",
               "Holds lost of a lock named in metrics_names");
}

/* A counter by kind and one more label ('key': its values from 'from' on),
 * from the array [KINDS][n] at 'base'. */
static void by_kind(FILE *f, const char *name, const char *key, const char *const *values, int from, int n,
                    atomic_ullong *base) {
  for (int k = 0; k < KINDS; k++)
    for (int i = from; i < n; i++)
      fprintf(f, "%s{kind=\"%s\",%s=\"%s\"} %llu\n", name, kind_label[k], key, values[i], get(&base[k * n + i]));
}

static void write_all(out *o, dlock_client *c) {
  dlock__metrics *x = c->metrics;
  FILE *f = o->f;
  family(o, "dlock_client_info", "gauge", "Always 1: the library's version and the client's backend");
  fprintf(f, "dlock_client_info{version=\"%s\",backend=\"", dlock_version());
  label_value(f, c->ops->name);
  fputs("\"} 1\n", f);

  family(o, "dlock_acquisitions_total", "counter", "Acquire calls by kind and outcome");
  by_kind(f, "dlock_acquisitions_total", "outcome", acq_label, 0, ACQ_N, &x->acq[0][0]);
  family(o, "dlock_releases_total", "counter", "Releases of a last hold by kind and outcome");
  by_kind(f, "dlock_releases_total", "outcome", rel_label, 0, REL_N, &x->rel[0][0]);
  family(o, "dlock_losses_total", "counter", "Holds lost before their release, by kind and reason");
  by_kind(f, "dlock_losses_total", "reason", reason_label, 1, REASONS, &x->lost[0][0]);
  family(o, "dlock_handoffs_total", "counter", "Holds handed over by a release to a waiting acquire");
  for (int k = 0; k < KINDS; k++)
    fprintf(f, "dlock_handoffs_total{kind=\"%s\"} %llu\n", kind_label[k], get(&x->handoffs[k]));
  family(o, "dlock_unknown_outcomes_total", "counter", "Calls whose outcome could not be learned (EUNKNOWN)");
  for (int i = 0; i < OP_N; i++)
    fprintf(f, "dlock_unknown_outcomes_total{op=\"%s\"} %llu\n", op_label[i], get(&x->unknown[i]));
  family(o, "dlock_renewals_total", "counter",
         "Watchdog renewals by outcome (late: with under a third of the "
         "lease left; counted in ok too)");
  fprintf(f, "dlock_renewals_total{outcome=\"ok\"} %llu\n", get(&x->renew_ok));
  fprintf(f, "dlock_renewals_total{outcome=\"failed\"} %llu\n", get(&x->renew_failed));
  fprintf(f, "dlock_renewals_total{outcome=\"late\"} %llu\n", get(&x->renew_late));
  family(o, "dlock_events_dropped_total", "counter", "Events not delivered to the hook: its queue was full");
  fprintf(f, "dlock_events_dropped_total %llu\n", get(&x->events_dropped));

  family(o, "dlock_held", "gauge", "Holds now (acquired, not released nor lost), by kind");
  for (int k = 0; k < KINDS; k++) fprintf(f, "dlock_held{kind=\"%s\"} %lld\n", kind_label[k], getg(&x->held[k]));
  family(o, "dlock_waiting", "gauge", "Acquire calls in progress now, by kind");
  for (int k = 0; k < KINDS; k++) fprintf(f, "dlock_waiting{kind=\"%s\"} %lld\n", kind_label[k], getg(&x->waiting[k]));
  family(o, "dlock_watchdog_batch_size", "gauge", "Holds renewed in the watchdog's last batch");
  fprintf(f, "dlock_watchdog_batch_size %lld\n", getg(&x->batch_size));

  family(o, "dlock_acquire_wait_seconds", "histogram", "Time from an acquire call to the hold, for acquisitions");
  for (int k = 0; k < KINDS; k++) {
    char label[32];
    snprintf(label, sizeof label, "kind=\"%s\"", kind_label[k]);
    write_hist(o, "dlock_acquire_wait_seconds", label, &x->wait[k], &wait_shape);
  }
  family(o, "dlock_hold_seconds", "histogram", "Time from a hold's acquisition to its release or loss");
  for (int k = 0; k < KINDS; k++) {
    char label[32];
    snprintf(label, sizeof label, "kind=\"%s\"", kind_label[k]);
    write_hist(o, "dlock_hold_seconds", label, &x->hold[k], &hold_shape);
  }
  family(o, "dlock_watchdog_round_trip_seconds", "histogram", "Round trip of a watchdog's renewal batch");
  write_hist(o, "dlock_watchdog_round_trip_seconds", "", &x->rtt, &rtt_shape);

  pthread_mutex_lock(&x->named_mu);
  write_named(o, x);
  pthread_mutex_unlock(&x->named_mu);
  if (o->om) fputs("# EOF\n", f);
}

int dlock_client_metrics_write(dlock_client *c, FILE *f, dlock_metrics_format format) {
  dlock__error_clear();
  if (!c || !f) return dlock__error(DLOCK_EINVAL, "dlock_client_metrics_write: NULL argument");
  if (format != DLOCK_METRICS_PROMETHEUS && format != DLOCK_METRICS_OPENMETRICS)
    return dlock__error(DLOCK_EINVAL,
                        "dlock_client_metrics_write: format %d is neither "
                        "DLOCK_METRICS_PROMETHEUS nor DLOCK_METRICS_OPENMETRICS",
                        (int)format);
  out o = {f, format == DLOCK_METRICS_OPENMETRICS};
  write_all(&o, c);
  if (ferror(f)) return dlock__error(DLOCK_ESYS, "writing the metrics failed: %s", strerror(errno));
  return 0;
}

int dlock_client_metrics_snprint(dlock_client *c, char *buf, size_t len, dlock_metrics_format format) {
  dlock__error_clear();
  if (!c || (!buf && len)) return dlock__error(DLOCK_EINVAL, "dlock_client_metrics_snprint: NULL argument");
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  if (!f) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock_client_metrics_write(c, f, format);
  if (fclose(f) != 0 && !rc) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  if (!rc && len) snprintf(buf, len, "%s", text);
  free(text);
  if (rc) return rc;
  return n > INT32_MAX ? dlock__error(DLOCK_ERANGE, "the metrics text is over 2 GB") : (int)n;
}
