/*
 * sched.c - the scheduler: cron, fixed-rate and fixed-delay jobs that run
 * once per tick across every node running the same job.
 *
 * A timer thread fires ticks by the local wall clock (the only code besides
 * the cron engine that reads it) and hands them to a pool of workers. Each
 * worker claims its tick through the client's backend (its sched
 * sub-table, backend.h): a tick claimed once is never run again, and the job
 * lock keeps runs from overlapping.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cron.h"
#include "internal.h"

#define DEFAULT_AT_MOST_MS (10 * 60 * 1000)
#define DEFAULT_HISTORY 100
#define MAX_HISTORY 10000
/* A cron or fixed-rate tick later than this is not run (Quartz's default
 * misfire threshold); fixed rate uses its period when that is shorter. */
#define MISFIRE_MS 60000
/* The timer looks at the wall clock at least this often, so that a clock
 * step is noticed. */
#define TIMER_MAX_SLEEP_MS 1000

typedef enum trigger_kind { TRIGGER_CRON, TRIGGER_RATE, TRIGGER_DELAY } trigger_kind;

typedef struct job {
  char *name;
  trigger_kind kind;
  dlock__cron *cron;
  dlock__tz *tz;
  int64_t period_ms; /* rate or delay */
  dlock_job_options opts;
  dlock_job_fn fn;
  void *arg;
  int64_t next_ms; /* next fire (wall ms); INT64_MAX while a delay job is busy */
  struct dlock_sched *s;
  void *watch; /* the backend's job_watch handle, or NULL */
  int poked;   /* a manual trigger may be pending: claim it (under s->mu) */
  struct job *next;
} job;

/* A work item's tick_ms for a manual trigger's claim. */
#define MANUAL_TICK INT64_MIN

typedef struct work {
  job *j;
  int64_t tick_ms;
} work;

struct dlock_sched {
  dlock_client *client;
  dlock_sched_options opts;
  char node[128];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job *jobs;
  int started, stopping;
  pthread_t timer;
  pthread_t *workers;
  int nworkers;
  work *queue; /* ring of nworkers entries */
  int qhead, qlen;
  int active; /* runs in progress */
};

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dlock_sched_options_init(dlock_sched_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

void dlock_job_options_init(dlock_job_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

void dlock_run_record_init(dlock_run_record *rec) {
  if (!rec) return;
  memset(rec, 0, sizeof *rec);
  rec->struct_size = sizeof *rec;
}

static void emit_as(dlock_sched *s, const char *trigger, dlock_sched_event_kind kind, const job *j, int64_t tick,
                    const char *node, uint64_t fence, int64_t duration, int status, const char *message) {
  dlock__metrics_job_other(s->client, j->name, kind); /* skips and errors (a run counts in run_claimed) */
  if (!s->opts.on_event) return;
  /* A copy: 'message' may be this thread's dlock_last_error(), which any
   * dlock call made by the callback would overwrite. */
  char text[1024];
  snprintf(text, sizeof text, "%s", message ? message : "");
  dlock_sched_event ev = {kind, j->name, tick, node, fence, duration, status, text, 0, trigger};
  s->opts.on_event(&ev, s->opts.on_event_arg);
}

static void emit(dlock_sched *s, dlock_sched_event_kind kind, const job *j, int64_t tick, const char *node,
                 uint64_t fence, int64_t duration, int status, const char *message) {
  emit_as(s, "tick", kind, j, tick, node, fence, duration, status, message);
}

/* ---- A run's trigger kind in a history entry (every backend) ----
 * Kept in the outcome text as a prefix, so that the entry's layout (and
 * older readers) stay as they were: run_claimed() records "[manual] ok",
 * the history answers outcome "ok" and trigger "manual". */
#define MANUAL_PREFIX "[manual] "

void dlock__outcome_decode(dlock_run_record *rec) {
  size_t n = strlen(MANUAL_PREFIX);
  if (strncmp(rec->outcome, MANUAL_PREFIX, n) == 0) {
    memmove(rec->outcome, rec->outcome + n, strlen(rec->outcome + n) + 1);
    snprintf(rec->trigger, sizeof rec->trigger, "manual");
  } else {
    snprintf(rec->trigger, sizeof rec->trigger, "tick");
  }
}

/* ---- Creating ---- */

int dlock_sched_new(dlock_sched **out, dlock_client *c, const dlock_sched_options *opts) {
  dlock__error_clear();
  if (!out || !c) return dlock__error(DLOCK_EINVAL, "dlock_sched_new: NULL argument");
  *out = NULL;
  dlock_sched_options o;
  dlock_sched_options_init(&o);
  int rc = dlock__options_in(&o, sizeof o, opts, DLOCK__SCHED_OPTIONS_V1, "dlock_sched_options");
  if (rc) return rc;
  if (!c->ops->sched)
    return dlock__error(DLOCK_EINVAL, "the scheduler is not offered by the %s backend (%s)", c->ops->name, c->server);
  if (o.pool_size < 0 || o.pool_size > 256)
    return dlock__error(DLOCK_ERANGE, "pool_size is %d; it must be 0 (default 1) or 1..256", o.pool_size);
  dlock_sched *s = calloc(1, sizeof *s);
  if (!s) return dlock__error(DLOCK_ENOMEM, "out of memory");
  s->client = c;
  s->opts = o;
  s->nworkers = o.pool_size ? o.pool_size : 1;
  if (o.node_name) {
    snprintf(s->node, sizeof s->node, "%s", o.node_name);
  } else {
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(s->node, sizeof s->node, "%s:%d", host, (int)getpid());
  }
  s->opts.node_name = NULL;
  if (strpbrk(s->node, "|\r\n") || !s->node[0]) {
    dlock__error(DLOCK_ENAME, "node name '%s' is empty or contains '|', CR or LF", s->node);
    free(s);
    return DLOCK_ENAME;
  }
  pthread_mutex_init(&s->mu, NULL);
  dlock__cond_init(&s->cv);
  *out = s;
  return 0;
}

static void job_free(job *j) {
  dlock__cron_free(j->cron);
  dlock__tz_free(j->tz);
  free(j->name);
  free(j);
}

static int add_job(dlock_sched *s, const char *name, trigger_kind kind, const dlock_job_options *opts, dlock_job_fn fn,
                   void *arg, job **out) {
  dlock__error_clear();
  if (!s || !fn) return dlock__error(DLOCK_EINVAL, "add job: NULL scheduler or callback");
  int rc = dlock__check_name("job name", name);
  if (rc) return rc;
  dlock_job_options o;
  dlock_job_options_init(&o);
  if ((rc = dlock__options_in(&o, sizeof o, opts, DLOCK__JOB_OPTIONS_V1, "dlock_job_options"))) return rc;
  if ((rc = dlock__check_duration("lock_at_most_for_ms", o.lock_at_most_for_ms, 1)) ||
      (rc = dlock__check_duration("lock_at_least_for_ms", o.lock_at_least_for_ms, 1)))
    return rc;
  if (o.history_len < 0 || o.history_len > MAX_HISTORY)
    return dlock__error(DLOCK_ERANGE, "history_len is %d; it must be 0 (default %d) or 1..%d", o.history_len,
                        DEFAULT_HISTORY, MAX_HISTORY);
  if (!o.lock_at_most_for_ms) o.lock_at_most_for_ms = DEFAULT_AT_MOST_MS;
  if (!o.history_len) o.history_len = DEFAULT_HISTORY;
  if (o.lock_at_least_for_ms > o.lock_at_most_for_ms)
    return dlock__error(DLOCK_ERANGE, "lock_at_least_for_ms (%lld) exceeds lock_at_most_for_ms (%lld)",
                        (long long)o.lock_at_least_for_ms, (long long)o.lock_at_most_for_ms);
  pthread_mutex_lock(&s->mu);
  int dup = 0, started = s->started;
  for (job *j = s->jobs; j; j = j->next) dup |= !strcmp(j->name, name);
  pthread_mutex_unlock(&s->mu);
  if (started) return dlock__error(DLOCK_EINVAL, "add job '%s': the scheduler is already started", name);
  if (dup) return dlock__error(DLOCK_EINVAL, "add job '%s': a job of that name exists", name);

  job *j = calloc(1, sizeof *j);
  if (!j || !(j->name = strdup(name))) {
    free(j);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  j->kind = kind;
  j->s = s;
  j->opts = o;
  j->opts.time_zone = NULL;
  j->fn = fn;
  j->arg = arg;
  *out = j;
  return 0;
}

static void link_job(dlock_sched *s, job *j) {
  pthread_mutex_lock(&s->mu);
  j->next = s->jobs;
  s->jobs = j;
  pthread_mutex_unlock(&s->mu);
}

int dlock_sched_add_cron(dlock_sched *s, const char *name, const char *expr, const dlock_job_options *opts,
                         dlock_job_fn fn, void *arg) {
  if (!expr) return dlock__error(DLOCK_EINVAL, "add cron job: expression is NULL");
  job *j;
  int rc = add_job(s, name, TRIGGER_CRON, opts, fn, arg, &j);
  if (rc) return rc;
  char err[DLOCK__CRON_ERR_MAX > DLOCK__TZ_ERR_MAX ? DLOCK__CRON_ERR_MAX : DLOCK__TZ_ERR_MAX];
  unsigned flags = opts && (opts->cron_flags & DLOCK_CRON_UNIX) ? DLOCK__CRON_UNIX5 : 0;
  rc = dlock__cron_parse(expr, flags, &j->cron, err, sizeof err);
  if (rc) {
    job_free(j);
    return rc == DLOCK_ENOMEM ? dlock__error(rc, "out of memory")
                              : dlock__error(DLOCK_ECRON, "job '%s': %s", name, err);
  }
  const char *zone = opts && opts->time_zone && *opts->time_zone ? opts->time_zone : NULL;
  rc = dlock__tz_load(zone, &j->tz, err, sizeof err);
  if (rc) {
    job_free(j);
    return rc == DLOCK_ENOMEM ? dlock__error(rc, "out of memory") : dlock__error(DLOCK_ETZ, "job '%s': %s", name, err);
  }
  link_job(s, j);
  return 0;
}

static int add_periodic(dlock_sched *s, const char *name, trigger_kind kind, int64_t period_ms,
                        const dlock_job_options *opts, dlock_job_fn fn, void *arg) {
  const char *what = kind == TRIGGER_RATE ? "period_ms" : "delay_ms";
  int rc = dlock__check_duration(what, period_ms, 0);
  if (rc) return rc;
  if (period_ms < DLOCK_SCHED_MIN_PERIOD_MS)
    return dlock__error(DLOCK_ERANGE,
                        "job '%s': %s is %lld ms; it must be at least %d ms, since every tick "
                        "is claimed on the server",
                        name ? name : "(null)", what, (long long)period_ms, DLOCK_SCHED_MIN_PERIOD_MS);
  job *j;
  if ((rc = add_job(s, name, kind, opts, fn, arg, &j))) return rc;
  j->period_ms = period_ms;
  link_job(s, j);
  return 0;
}

int dlock_sched_add_fixed_rate(dlock_sched *s, const char *name, int64_t period_ms, const dlock_job_options *opts,
                               dlock_job_fn fn, void *arg) {
  return add_periodic(s, name, TRIGGER_RATE, period_ms, opts, fn, arg);
}

int dlock_sched_add_fixed_delay(dlock_sched *s, const char *name, int64_t delay_ms, const dlock_job_options *opts,
                                dlock_job_fn fn, void *arg) {
  return add_periodic(s, name, TRIGGER_DELAY, delay_ms, opts, fn, arg);
}

/* ---- Fire times ---- */

/* The first tick strictly after 'after_ms', or INT64_MAX when there is none. */
static int64_t next_tick(const job *j, int64_t after_ms) {
  if (j->kind == TRIGGER_RATE) return (after_ms / j->period_ms + 1) * j->period_ms;
  if (j->kind == TRIGGER_CRON) {
    int64_t next_s;
    int64_t after_s = after_ms >= 0 ? after_ms / 1000 : -((-after_ms + 999) / 1000);
    if (dlock__cron_next(j->cron, j->tz, after_s, &next_s) != 0) return INT64_MAX;
    return next_s * 1000;
  }
  return after_ms; /* delay jobs ask the server when they are due */
}

static int64_t misfire_ms(const job *j) {
  return j->kind == TRIGGER_RATE && j->period_ms < MISFIRE_MS ? j->period_ms : MISFIRE_MS;
}

/* ---- Running one tick (worker threads) ---- */

/* A claim for 'j' with a fresh run token in 'token'. */
static int claim_init(dlock__claim *cl, const dlock_sched *s, const job *j, int64_t tick, char *token) {
  memset(cl, 0, sizeof *cl);
  int rc = dlock__random_hex(token, DLOCK__TOKEN_HEX / 2);
  cl->job = j->name;
  cl->tick_ms = tick;
  cl->delay_ms = j->kind == TRIGGER_DELAY ? j->period_ms : 0;
  cl->token = token;
  cl->node = s->node;
  cl->at_most_ms = j->opts.lock_at_most_for_ms;
  cl->at_least_ms = j->opts.lock_at_least_for_ms;
  cl->allow_overlap = j->opts.allow_overlap;
  cl->history_len = j->opts.history_len;
  cl->ahead_ms = DLOCK_SCHED_CLOCK_TOLERANCE_MS;
  return rc;
}

/* A claim refused because 'tick' lies ahead of the server's clock: this
 * node's clock is wrong. The skew is measured at the middle of the call. */
static void report_skew(dlock_sched *s, const job *j, int64_t tick, int64_t sent, int64_t received,
                        int64_t server_now) {
  int64_t skew = sent + (received - sent) / 2 - server_now;
  char text[1024];
  snprintf(text, sizeof text,
           "this node's clock is %.1f s ahead of the clock of the %s server %s (measured "
           "over a %lld ms round trip); the tick is %.1f s in the server's future, beyond the %.1f s tolerance, "
           "so it was not claimed: claiming it would make every node skip the ticks before it. Fix this node's "
           "clock (NTP)",
           (double)skew / 1000, s->client->ops->name, s->client->server, (long long)(received - sent),
           (double)(tick - server_now) / 1000, DLOCK_SCHED_CLOCK_TOLERANCE_MS / 1000.0);
  dlock__metrics_job_other(s->client, j->name, DLOCK_SCHED_CLOCK_SKEW);
  if (!s->opts.on_event) return;
  dlock_sched_event ev = {DLOCK_SCHED_CLOCK_SKEW, j->name, tick, s->node, 0, -1, 0, text, skew};
  s->opts.on_event(&ev, s->opts.on_event_arg);
}

/* A claim failed: report it, and free the job lock if the claim may hold it. */
static void claim_failed(dlock_sched *s, const job *j, const dlock__claim *cl, int64_t tick, int rc) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  if (cl->maybe_ran) s->client->ops->sched->undo(s->client, cl);
  emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, rc, msg);
}

/* Run the callback for a claimed tick and record its end. */
static void run_claimed(dlock_sched *s, job *j, const dlock__claim *cl) {
  int64_t tick = cl->delay_ms || cl->manual ? cl->claimed_tick_ms : cl->tick_ms;
  const char *trigger = cl->manual ? "manual" : "tick";
  dlock_tick t = {j->name, tick, cl->fence, s->node, trigger};
  dlock_mono_ms began = dlock_mono_now();
  dlock__metrics_job_started(s->client, j->name, tick, cl->fence);
  int status = j->fn(&t, j->arg);
  dlock_run_record rec;
  dlock_run_record_init(&rec);
  snprintf(rec.node, sizeof rec.node, "%s", s->node);
  rec.fence = cl->fence;
  rec.scheduled_unix_ms = tick;
  rec.start_unix_ms = cl->start_ms;
  rec.duration_ms = dlock_mono_now() - began;
  snprintf(rec.trigger, sizeof rec.trigger, "%s", trigger);
  dlock__metrics_job_finished(s->client, j->name, tick, cl->fence, status, rec.duration_ms);
  const char *prefix = cl->manual ? MANUAL_PREFIX : "";
  if (status == 0)
    snprintf(rec.outcome, sizeof rec.outcome, "%sok", prefix);
  else
    snprintf(rec.outcome, sizeof rec.outcome, "%sfailed: %d", prefix, status);
  int lock_was_ours = 0;
  int rc = s->client->ops->sched->finish(s->client, cl, &rec, &lock_was_ours);
  emit_as(s, trigger, DLOCK_SCHED_RAN, j, tick, s->node, cl->fence, rc ? -1 : rec.duration_ms, status, NULL);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    s->client->ops->sched->undo(s->client, cl); /* the lock holds our token unless the finish ran */
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, cl->fence, -1, rc, msg);
  } else if (!lock_was_ours && !(j->opts.allow_overlap && j->kind != TRIGGER_DELAY)) {
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, cl->fence, rec.duration_ms, DLOCK_ELOST,
         "the run outlived its job lock (lock_at_most_for): a later tick may have overlapped it");
  }
}

/* A claim said a manual trigger waits: have the timer claim it. */
static void poke(job *j) {
  dlock_sched *s = j->s;
  pthread_mutex_lock(&s->mu);
  j->poked = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void wake_job(void *arg) { poke(arg); }

/* Claim the job's pending manual trigger, if any, and run it. A wake-up
 * comes with every change of the job's state (and every reconnect of the
 * notification): a read first, so that only a pending trigger is claimed. */
static void run_manual(dlock_sched *s, job *j) {
  dlock_job_state st;
  dlock_job_state_init(&st);
  if (s->client->ops->sched->job_get(s->client, j->name, &st) == 0 && !st.trigger_pending) return;
  char token[DLOCK__TOKEN_HEX + 1];
  dlock__claim cl;
  int rc = claim_init(&cl, s, j, 0, token);
  cl.delay_ms = 0;
  cl.manual = 1;
  if (j->kind == TRIGGER_DELAY) cl.allow_overlap = 0; /* a fixed delay's runs never overlap */
  if (!rc) rc = s->client->ops->sched->claim(s->client, &cl);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "manual trigger: %s", dlock_last_error());
    if (cl.maybe_ran) s->client->ops->sched->undo(s->client, &cl);
    emit_as(s, "manual", DLOCK_SCHED_ERROR, j, wall_ms(), s->node, 0, -1, rc, msg);
  } else if (cl.outcome == DLOCK__CLAIM_YOURS) {
    run_claimed(s, j, &cl);
  } /* NONE: another node has it; BUSY: it stays pending, and a later tick's claim says so */
}

static void run_tick(dlock_sched *s, job *j, int64_t tick) {
  if (tick == MANUAL_TICK) {
    run_manual(s, j);
    return;
  }
  char token[DLOCK__TOKEN_HEX + 1];
  dlock__claim cl;
  int rc = claim_init(&cl, s, j, tick, token);
  if (rc) {
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, rc, dlock_last_error());
    return;
  }
  int64_t sent = wall_ms();
  if ((rc = s->client->ops->sched->claim(s->client, &cl))) {
    claim_failed(s, j, &cl, tick, rc);
    return;
  }
  if (cl.trigger_pending) poke(j);
  switch (cl.outcome) {
  case DLOCK__CLAIM_YOURS:
    run_claimed(s, j, &cl);
    break;
  case DLOCK__CLAIM_AHEAD:
    report_skew(s, j, tick, sent, wall_ms(), cl.server_now_ms);
    break;
  case DLOCK__CLAIM_PAUSED:
    emit(s, DLOCK_SCHED_SKIPPED_PAUSED, j, tick, s->node, 0, -1, 0, cl.why);
    break;
  default:
    emit(s, cl.outcome == DLOCK__CLAIM_BUSY ? DLOCK_SCHED_SKIPPED_BUSY : DLOCK_SCHED_SKIPPED, j, tick, cl.by, 0, -1, 0,
         NULL);
  }
}

/* One step of a fixed-delay job: run it if due, else say when to look again. */
static int64_t run_delay(dlock_sched *s, job *j) {
  int64_t poll = j->period_ms / 2 < 500 ? j->period_ms / 2 : 500;
  if (poll < 10) poll = 10;
  char token[DLOCK__TOKEN_HEX + 1];
  dlock__claim cl;
  if (claim_init(&cl, s, j, 0, token) != 0) return wall_ms() + poll;
  int rc = s->client->ops->sched->claim(s->client, &cl);
  if (rc) {
    claim_failed(s, j, &cl, wall_ms(), rc);
    return wall_ms() + poll;
  }
  if (cl.trigger_pending) poke(j);
  if (cl.outcome == DLOCK__CLAIM_YOURS) {
    run_claimed(s, j, &cl);
    return wall_ms(); /* ask again at once: the server answers how long to wait */
  }
  if (cl.outcome == DLOCK__CLAIM_WAIT && cl.wait_ms >= 0) return wall_ms() + (cl.wait_ms > 0 ? cl.wait_ms : 1);
  return wall_ms() + poll;
}

static void *worker_main(void *arg) {
  dlock_sched *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stopping && s->qlen == 0) pthread_cond_wait(&s->cv, &s->mu);
    if (s->qlen == 0) break; /* stopping, nothing left */
    work w = s->queue[s->qhead];
    s->qhead = (s->qhead + 1) % s->nworkers;
    s->qlen--;
    s->active++;
    pthread_mutex_unlock(&s->mu);
    if (w.j->kind == TRIGGER_DELAY && w.tick_ms != MANUAL_TICK) {
      int64_t next = run_delay(s, w.j);
      pthread_mutex_lock(&s->mu);
      w.j->next_ms = next;
    } else {
      run_tick(s, w.j, w.tick_ms);
      pthread_mutex_lock(&s->mu);
    }
    s->active--;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- The timer ---- */

/* Queue a tick for a worker; 0 if every worker is busy. Caller holds s->mu. */
static int dispatch(dlock_sched *s, job *j, int64_t tick) {
  if (s->qlen + s->active >= s->nworkers) return 0;
  s->queue[(s->qhead + s->qlen) % s->nworkers] = (work){j, tick};
  s->qlen++;
  pthread_cond_broadcast(&s->cv);
  return 1;
}

static void *timer_main(void *arg) {
  dlock_sched *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->stopping) {
    int64_t now = wall_ms(), earliest = INT64_MAX;
    for (job *j = s->jobs; j; j = j->next) {
      if (j->poked) {
        if (dispatch(s, j, MANUAL_TICK))
          j->poked = 0;
        else if (now + 100 < earliest)
          earliest = now + 100; /* every worker busy: look again soon */
      }
      if (j->next_ms <= now) {
        int64_t tick = j->next_ms;
        if (j->kind == TRIGGER_DELAY) {
          if (dispatch(s, j, 0))
            j->next_ms = INT64_MAX; /* the worker sets it */
          else
            j->next_ms = now + 100;
        } else if (now - tick > misfire_ms(j)) {
          j->next_ms = next_tick(j, now);
          pthread_mutex_unlock(&s->mu);
          emit(s, DLOCK_SCHED_MISFIRED, j, tick, s->node, 0, -1, 0, NULL);
          pthread_mutex_lock(&s->mu);
        } else {
          int queued = dispatch(s, j, tick);
          j->next_ms = next_tick(j, tick);
          if (!queued) {
            pthread_mutex_unlock(&s->mu);
            emit(s, DLOCK_SCHED_SKIPPED_POOL, j, tick, s->node, 0, -1, 0, NULL);
            pthread_mutex_lock(&s->mu);
          }
        }
      }
      if (j->next_ms < earliest) earliest = j->next_ms;
    }
    now = wall_ms();
    int64_t sleep = earliest == INT64_MAX ? TIMER_MAX_SLEEP_MS : earliest - now;
    if (sleep <= 0) continue;
    if (sleep > TIMER_MAX_SLEEP_MS) sleep = TIMER_MAX_SLEEP_MS;
    struct timespec ts;
    dlock__deadline_timespec(dlock_mono_now() + sleep, &ts);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int dlock_sched_start(dlock_sched *s) {
  dlock__error_clear();
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_sched_start: scheduler is NULL");
  pthread_mutex_lock(&s->mu);
  if (s->started) {
    pthread_mutex_unlock(&s->mu);
    return dlock__error(DLOCK_EINVAL, "the scheduler is already started");
  }
  if (!s->jobs) {
    pthread_mutex_unlock(&s->mu);
    return dlock__error(DLOCK_EINVAL, "the scheduler has no job");
  }
  /* Triggers wake the scheduler through the backend's notification (set up
   * before the threads start, so that a wake-up finds them); without one
   * (it failed), the next tick's claim tells of a pending trigger. One made
   * before this node started is claimed at once. */
  const dlock__sched_ops *ops = s->client->ops->sched;
  pthread_mutex_unlock(&s->mu);
  for (job *j = s->jobs; ops->job_watch && j; j = j->next) {
    if (!j->watch && ops->job_watch(s->client, j->name, wake_job, j, &j->watch) != 0) j->watch = NULL;
    dlock_job_state st;
    dlock_job_state_init(&st);
    if (ops->job_get(s->client, j->name, &st) == 0 && st.trigger_pending) poke(j);
  }
  dlock__error_clear();
  pthread_mutex_lock(&s->mu);
  int64_t now = wall_ms();
  for (job *j = s->jobs; j; j = j->next) j->next_ms = j->kind == TRIGGER_DELAY ? now : next_tick(j, now);
  s->queue = calloc((size_t)s->nworkers, sizeof *s->queue);
  s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
  int rc = 0;
  if (!s->queue || !s->workers) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  int made = 0;
  for (; !rc && made < s->nworkers; made++) {
    if (pthread_create(&s->workers[made], NULL, worker_main, s) != 0) {
      rc = dlock__error(DLOCK_ESYS, "cannot start a worker thread");
      break;
    }
  }
  if (!rc && pthread_create(&s->timer, NULL, timer_main, s) != 0)
    rc = dlock__error(DLOCK_ESYS, "cannot start the timer thread");
  if (rc) {
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < made; i++) pthread_join(s->workers[i], NULL);
    pthread_mutex_lock(&s->mu);
    s->nworkers = 0;
  } else {
    s->started = 1;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int dlock_sched_stop(dlock_sched *s, int64_t timeout_ms) {
  dlock__error_clear();
  if (!s) return dlock__error(DLOCK_EINVAL, "dlock_sched_stop: scheduler is NULL");
  int rc = dlock__check_duration("timeout_ms", timeout_ms, 1);
  if (rc) return rc;
  pthread_mutex_lock(&s->mu);
  int join_timer = s->started && !s->stopping;
  s->stopping = 1;
  s->qlen = 0; /* ticks not yet started are dropped */
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (join_timer) pthread_join(s->timer, NULL);
  dlock_mono_ms deadline = dlock_mono_now() + timeout_ms;
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  pthread_mutex_lock(&s->mu);
  while (s->active > 0)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) break;
  int still = s->active;
  pthread_mutex_unlock(&s->mu);
  if (still)
    return dlock__error(DLOCK_ETIMEDOUT, "%d job run%s still going after %lld ms; they finish in the background", still,
                        still == 1 ? "" : "s", (long long)timeout_ms);
  return 0;
}

void dlock_sched_free(dlock_sched *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  int join_timer = s->started && !s->stopping;
  s->stopping = 1;
  s->qlen = 0;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (join_timer) pthread_join(s->timer, NULL);
  for (int i = 0; i < s->nworkers && s->workers; i++) pthread_join(s->workers[i], NULL);
  for (job *j = s->jobs; j; j = j->next)
    if (j->watch) s->client->ops->sched->job_unwatch(s->client, j->watch);
  for (job *j = s->jobs, *next; j; j = next) {
    next = j->next;
    job_free(j);
  }
  free(s->workers);
  free(s->queue);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- History ---- */

int dlock_sched_history(dlock_client *c, const char *name, dlock_run_record *out, int max) {
  dlock__error_clear();
  if (!c || (!out && max > 0) || max < 0) return dlock__error(DLOCK_EINVAL, "dlock_sched_history: bad argument");
  int rc = dlock__check_name("job name", name);
  if (rc) return rc;
  if (max == 0) return 0;
  if (!c->ops->sched)
    return dlock__error(DLOCK_EINVAL, "the scheduler is not offered by the %s backend (%s)", c->ops->name, c->server);
  if ((rc = dlock__struct_check(out, DLOCK__RUN_RECORD_V1, sizeof *out, "dlock_run_record"))) return rc;
  /* The caller's element size: a program built against an older dlock.h
   * has smaller records, of which only the known part is written. */
  size_t stride;
  memcpy(&stride, out, sizeof stride);
  dlock_run_record *full = calloc((size_t)max, sizeof *full);
  if (!full) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int n = c->ops->sched->history(c, name, full, max);
  for (int i = 0; i < n; i++) {
    dlock__outcome_decode(&full[i]);
    full[i].struct_size = stride;
    memcpy((char *)out + (size_t)i * stride, &full[i], stride);
  }
  free(full);
  return n;
}
