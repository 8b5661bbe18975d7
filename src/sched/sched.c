/*
 * sched.c - the scheduler: cron, fixed-rate and fixed-delay jobs that run
 * once per tick across every node running the same job.
 *
 * A timer thread fires ticks by the local wall clock (the only code besides
 * the cron engine that reads it) and hands them to a pool of workers. Each
 * worker claims its tick in Redis (scripts sched_*.lua): a tick claimed once
 * is never run again, and the job lock keeps runs from overlapping.
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

enum { JK_TICK = DLOCK__K_COUNT, JK_HISTORY, JK_LASTEND, JK_COUNT };

typedef struct job {
  char *name;
  dlock__lock_keys keys;     /* the job lock: a dlock lock named like the job */
  char *extra[3];            /* {K}:tick, {K}:history, {K}:lastend */
  size_t extra_len[3];
  trigger_kind kind;
  dlock__cron *cron;
  dlock__tz *tz;
  int64_t period_ms;         /* rate or delay */
  dlock_job_options opts;
  dlock_job_fn fn;
  void *arg;
  int64_t next_ms;           /* next fire (wall ms); INT64_MAX while a delay job is busy */
  struct job *next;
} job;

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
  work *queue;               /* ring of nworkers entries */
  int qhead, qlen;
  int active;                /* runs in progress */
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

static void emit(dlock_sched *s, dlock_sched_event_kind kind, const job *j, int64_t tick, const char *node,
                 uint64_t fence, int64_t duration, int status, const char *message) {
  if (!s->opts.on_event) return;
  /* A copy: 'message' may be this thread's dlock_last_error(), which any
   * dlock call made by the callback would overwrite. */
  char text[1024];
  snprintf(text, sizeof text, "%s", message ? message : "");
  dlock_sched_event ev = {kind, j->name, tick, node, fence, duration, status, text};
  s->opts.on_event(&ev, s->opts.on_event_arg);
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
  dlock__lock_keys_clear(&j->keys);
  for (int i = 0; i < 3; i++) free(j->extra[i]);
  dlock__cron_free(j->cron);
  dlock__tz_free(j->tz);
  free(j->name);
  free(j);
}

static int add_job(dlock_sched *s, const char *name, trigger_kind kind, const dlock_job_options *opts,
                   dlock_job_fn fn, void *arg, job **out) {
  dlock__error_clear();
  if (!s || !fn) return dlock__error(DLOCK_EINVAL, "add job: NULL scheduler or callback");
  int rc = dlock__check_name("job name", name);
  if (rc) return rc;
  dlock_job_options o;
  dlock_job_options_init(&o);
  if ((rc = dlock__options_in(&o, sizeof o, opts, DLOCK__JOB_OPTIONS_V1, "dlock_job_options")))
    return rc;
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
  j->opts = o;
  j->opts.time_zone = NULL;
  j->fn = fn;
  j->arg = arg;
  if ((rc = dlock__lock_keys_init(&j->keys, s->client, name))) {
    job_free(j);
    return rc;
  }
  static const char *const suffix[3] = {"}:tick", "}:history", "}:lastend"};
  for (int i = 0; i < 3; i++) {
    const char *base = j->keys.key[DLOCK__K_LOCK];
    size_t len = strlen(base) + strlen(suffix[i]) + 1;
    if (!(j->extra[i] = malloc(len + 1))) {
      job_free(j);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    snprintf(j->extra[i], len + 1, "{%s%s", base, suffix[i]);
    j->extra_len[i] = len;
  }
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
  int rc = dlock__check_duration(kind == TRIGGER_RATE ? "period_ms" : "delay_ms", period_ms, 0);
  if (rc) return rc;
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
  return after_ms; /* delay jobs ask Redis when they are due */
}

static int64_t misfire_ms(const job *j) {
  return j->kind == TRIGGER_RATE && j->period_ms < MISFIRE_MS ? j->period_ms : MISFIRE_MS;
}

/* ---- Running one tick (worker threads) ---- */

static void job_call(dlock__script_call *call, dlock__script_id id, const job *j, int with_extra) {
  memset(call, 0, sizeof *call);
  call->script = id;
  dlock__script_call_keys(call, &j->keys);
  for (int i = 0; i < with_extra; i++) {
    call->keys[call->nkeys] = j->extra[i];
    call->keylens[call->nkeys] = j->extra_len[i];
    call->nkeys++;
  }
}

static void add_arg(dlock__script_call *call, const char *s) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = strlen(s);
  call->nargs++;
}

/* Run a script; map error replies; check the reply is an array of >= 'min'
 * elements. 'twice_safe': the script gives the same answer when it runs twice
 * with the same arguments, so a lost reply is answered by sending it again. */
static int run_script(dlock_sched *s, const job *j, dlock__script_call *call, size_t min, dlock__reply **out,
                      int twice_safe) {
  int rc = twice_safe ? dlock__script_run_twice_safe(s->client, call, out)
                      : dlock__script_run(s->client, call, 1, out);
  if (rc) {
    dlock__error_prefix("job '%s': ", j->name); /* transport errors name the server already */
    return rc;
  }
  if ((*out)->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(*out);
    dlock__error(rc, "job '%s' on %s: %s script: %s", j->name, s->client->server,
                 dlock__script_name(call->script), (*out)->str);
  } else if ((*out)->type != DLOCK__REPLY_ARRAY || (*out)->elements < min) {
    rc = dlock__error(DLOCK_EPROTO, "job '%s': unexpected reply from the %s script", j->name,
                      dlock__script_name(call->script));
  }
  if (rc) {
    dlock__reply_free(*out);
    *out = NULL;
  }
  return rc;
}

static const char *el_str(const dlock__reply *r, size_t i) {
  return i < r->elements && r->element[i]->type == DLOCK__REPLY_STRING ? r->element[i]->str : "";
}

/* Element 'i' of a claim's reply as a fencing token; -1 with an error. */
static int el_fence(const dlock__reply *r, size_t i, const job *j, uint64_t *fence) {
  const char *s = el_str(r, i);
  if (dlock__parse_fence(s, strlen(s), fence) == 0 && *fence > 0) return 0;
  return dlock__error(DLOCK_EFENCE, "job '%s': the claim gave fence '%.40s', not an integer in 1..2^63-1", j->name, s);
}

/* A claim refused because 'tick' lies ahead of the server's clock: this
 * node's clock is wrong. The skew is measured at the middle of the call. */
static void report_skew(dlock_sched *s, const job *j, int64_t tick, int64_t sent, int64_t received,
                        const char *server_now_s) {
  int64_t server_now = strtoll(server_now_s, NULL, 10);
  int64_t skew = sent + (received - sent) / 2 - server_now;
  char text[1024];
  snprintf(text, sizeof text, "this node's clock is %.1f s ahead of the clock of the Redis server %s (measured "
           "over a %lld ms round trip); the tick is %.1f s in the server's future, beyond the %.1f s tolerance, "
           "so it was not claimed: claiming it would make every node skip the ticks before it. Fix this node's "
           "clock (NTP)", (double)skew / 1000, s->client->server, (long long)(received - sent),
           (double)(tick - server_now) / 1000, DLOCK_SCHED_CLOCK_TOLERANCE_MS / 1000.0);
  if (!s->opts.on_event) return;
  dlock_sched_event ev = {DLOCK_SCHED_CLOCK_SKEW, j->name, tick, s->node, 0, -1, 0, text, skew};
  s->opts.on_event(&ev, s->opts.on_event_arg);
}

/* After a claim or finish whose reply was lost: the job lock may hold our
 * token for lock_at_most_for. Delete it if so (withdraw.lua does exactly
 * delete-if-token), so that the next tick is not blocked. */
static void undo_claim(dlock_sched *s, const job *j, const char *token) {
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_WITHDRAW, j, 0);
  add_arg(&call, "");
  add_arg(&call, token);
  dlock__reply *r = NULL;
  if (dlock__script_run_twice_safe(s->client, &call, &r) == 0) dlock__reply_free(r); /* delete-if-token */
}

/* Run the callback for a claimed tick and record its end. */
static void run_claimed(dlock_sched *s, job *j, int64_t tick, const char *token, uint64_t fence,
                        const char *start_ms) {
  dlock_tick t = {j->name, tick, fence, s->node};
  int status = j->fn(&t, j->arg);
  char tick_s[24], fence_s[24], atleast_s[24], atmost_s[24], hist_s[16], outcome[64];
  snprintf(tick_s, sizeof tick_s, "%" PRId64, tick);
  snprintf(fence_s, sizeof fence_s, "%" PRIu64, fence);
  snprintf(atleast_s, sizeof atleast_s, "%" PRId64, j->opts.lock_at_least_for_ms);
  snprintf(atmost_s, sizeof atmost_s, "%" PRId64, j->opts.lock_at_most_for_ms);
  snprintf(hist_s, sizeof hist_s, "%d", j->opts.history_len);
  if (status == 0) snprintf(outcome, sizeof outcome, "ok");
  else snprintf(outcome, sizeof outcome, "failed: %d", status);
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_SCHED_FINISH, j, 3);
  add_arg(&call, token);
  add_arg(&call, tick_s);
  add_arg(&call, start_ms);
  add_arg(&call, atleast_s);
  add_arg(&call, s->node);
  add_arg(&call, fence_s);
  add_arg(&call, outcome);
  add_arg(&call, hist_s);
  add_arg(&call, j->opts.allow_overlap && j->kind != TRIGGER_DELAY ? "1" : "0");
  add_arg(&call, atmost_s);
  add_arg(&call, "0");
  dlock__reply *r = NULL;
  int rc = run_script(s, j, &call, 2, &r, 0);
  if (rc && call.maybe_ran) {
    /* The reply was lost: send it again marked as a second send, which finds
     * the first one's history entry if it ran and then writes nothing again. */
    call.args[call.nargs - 1] = "1";
    call.arglens[call.nargs - 1] = 1;
    rc = run_script(s, j, &call, 2, &r, 0);
    call.maybe_ran = 1;
  }
  int64_t duration = r ? strtoll(el_str(r, 0), NULL, 10) : -1;
  int lock_was_ours = r && r->element[1]->type == DLOCK__REPLY_INTEGER && r->element[1]->integer == 1;
  dlock__reply_free(r);
  emit(s, DLOCK_SCHED_RAN, j, tick, s->node, fence, duration, status, NULL);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    undo_claim(s, j, token); /* the lock holds our token unless the finish ran */
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, fence, -1, rc, msg);
  } else if (!lock_was_ours && !(j->opts.allow_overlap && j->kind != TRIGGER_DELAY)) {
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, fence, duration, DLOCK_ELOST,
         "the run outlived its job lock (lock_at_most_for): a later tick may have overlapped it");
  }
}

static void run_tick(dlock_sched *s, job *j, int64_t tick) {
  char token[DLOCK__TOKEN_HEX + 1], tick_s[24], atmost_s[24], hist_s[16], ahead_s[24];
  int rc = dlock__random_hex(token, DLOCK__TOKEN_HEX / 2);
  if (rc) {
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, rc, dlock_last_error());
    return;
  }
  snprintf(tick_s, sizeof tick_s, "%" PRId64, tick);
  snprintf(atmost_s, sizeof atmost_s, "%" PRId64, j->opts.lock_at_most_for_ms);
  snprintf(hist_s, sizeof hist_s, "%d", j->opts.history_len);
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_SCHED_CLAIM, j, 2);
  add_arg(&call, tick_s);
  add_arg(&call, token);
  add_arg(&call, atmost_s);
  add_arg(&call, s->node);
  add_arg(&call, j->opts.allow_overlap ? "1" : "0");
  add_arg(&call, hist_s);
  snprintf(ahead_s, sizeof ahead_s, "%d", DLOCK_SCHED_CLOCK_TOLERANCE_MS);
  add_arg(&call, ahead_s);
  dlock__reply *r = NULL;
  int64_t sent = wall_ms();
  if ((rc = run_script(s, j, &call, 3, &r, 1))) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    if (call.maybe_ran) undo_claim(s, j, token);
    emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, rc, msg);
    return;
  }
  long long claimed = r->element[0]->type == DLOCK__REPLY_INTEGER ? r->element[0]->integer : 0;
  if (claimed == 1) {
    uint64_t fence;
    if (el_fence(r, 1, j, &fence) != 0) { /* never run without a valid fence */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", dlock_last_error());
      dlock__reply_free(r);
      undo_claim(s, j, token);
      emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, DLOCK_EFENCE, msg);
      return;
    }
    char start[24];
    snprintf(start, sizeof start, "%s", el_str(r, 2));
    dlock__reply_free(r);
    run_claimed(s, j, tick, token, fence, start);
    return;
  }
  if (!strcmp(el_str(r, 1), "ahead")) {
    report_skew(s, j, tick, sent, wall_ms(), el_str(r, 2));
    dlock__reply_free(r);
    return;
  }
  int busy = !strcmp(el_str(r, 1), "busy");
  emit(s, busy ? DLOCK_SCHED_SKIPPED_BUSY : DLOCK_SCHED_SKIPPED, j, tick, el_str(r, 2), 0, -1, 0, NULL);
  dlock__reply_free(r);
}

/* One step of a fixed-delay job: run it if due, else say when to look again. */
static int64_t run_delay(dlock_sched *s, job *j) {
  char token[DLOCK__TOKEN_HEX + 1], delay_s[24], atmost_s[24];
  int64_t poll = j->period_ms / 2 < 500 ? j->period_ms / 2 : 500;
  if (poll < 10) poll = 10;
  int rc = dlock__random_hex(token, DLOCK__TOKEN_HEX / 2);
  if (rc) return wall_ms() + poll;
  snprintf(delay_s, sizeof delay_s, "%" PRId64, j->period_ms);
  snprintf(atmost_s, sizeof atmost_s, "%" PRId64, j->opts.lock_at_most_for_ms);
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_SCHED_DELAY, j, 3);
  add_arg(&call, delay_s);
  add_arg(&call, token);
  add_arg(&call, atmost_s);
  add_arg(&call, s->node);
  dlock__reply *r = NULL;
  if ((rc = run_script(s, j, &call, 3, &r, 1))) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    if (call.maybe_ran) undo_claim(s, j, token);
    emit(s, DLOCK_SCHED_ERROR, j, wall_ms(), s->node, 0, -1, rc, msg);
    return wall_ms() + poll;
  }
  long long claimed = r->element[0]->type == DLOCK__REPLY_INTEGER ? r->element[0]->integer : 0;
  if (claimed == 1 && r->elements >= 4) {
    uint64_t fence;
    int64_t tick = strtoll(el_str(r, 3), NULL, 10);
    if (el_fence(r, 1, j, &fence) != 0) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", dlock_last_error());
      dlock__reply_free(r);
      undo_claim(s, j, token);
      emit(s, DLOCK_SCHED_ERROR, j, tick, s->node, 0, -1, DLOCK_EFENCE, msg);
      return wall_ms() + poll;
    }
    char start[24];
    snprintf(start, sizeof start, "%s", el_str(r, 2));
    dlock__reply_free(r);
    run_claimed(s, j, tick, token, fence, start);
    return wall_ms(); /* ask again at once: Redis answers how long to wait */
  }
  int64_t next = wall_ms() + poll;
  if (!strcmp(el_str(r, 1), "wait")) {
    int64_t wait = strtoll(el_str(r, 2), NULL, 10);
    next = wall_ms() + (wait > 0 ? wait : 1);
  }
  dlock__reply_free(r);
  return next;
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
    if (w.j->kind == TRIGGER_DELAY) {
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
      if (j->next_ms <= now) {
        int64_t tick = j->next_ms;
        if (j->kind == TRIGGER_DELAY) {
          if (dispatch(s, j, 0)) j->next_ms = INT64_MAX; /* the worker sets it */
          else j->next_ms = now + 100;
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
  if (!rc && pthread_create(&s->timer, NULL, timer_main, s) != 0) rc = dlock__error(DLOCK_ESYS, "cannot start the timer thread");
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
    return dlock__error(DLOCK_ETIMEDOUT, "%d job run%s still going after %lld ms; they finish in the background",
                        still, still == 1 ? "" : "s", (long long)timeout_ms);
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
  if ((rc = dlock__struct_check(out, DLOCK__RUN_RECORD_V1, sizeof *out, "dlock_run_record"))) return rc;
  /* The caller's element size: a program built against an older dlock.h
   * has smaller records, of which only the known part is written. */
  size_t stride;
  memcpy(&stride, out, sizeof stride);
  dlock__lock_keys keys;
  if ((rc = dlock__lock_keys_init(&keys, c, name))) return rc;
  size_t len = keys.len[DLOCK__K_LOCK] + strlen("{}:history");
  char *key = malloc(len + 1);
  if (!key) {
    dlock__lock_keys_clear(&keys);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  snprintf(key, len + 1, "{%s}:history", keys.key[DLOCK__K_LOCK]);
  dlock__lock_keys_clear(&keys);
  char max_s[16];
  snprintf(max_s, sizeof max_s, "%d", max);
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_SCHED_HISTORY;
  call.nkeys = 1;
  call.keys[0] = key;
  call.keylens[0] = len;
  add_arg(&call, max_s);
  dlock__reply *r = NULL;
  rc = dlock__script_run_twice_safe(c, &call, &r); /* read-only */
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "history of job '%s' on %s: %s", name, c->server, r->str);
  } else if (!rc && r->type != DLOCK__REPLY_ARRAY) {
    rc = dlock__error(DLOCK_EPROTO, "history of job '%s': unexpected reply", name);
  } else if (rc) {
    dlock__error_prefix("history of job '%s' on %s: ", name, c->server);
  }
  int n = 0;
  for (size_t i = 0; !rc && i < r->elements && n < max; i++) {
    const dlock__reply *e = r->element[i];
    if (e->type != DLOCK__REPLY_STRING) continue;
    /* node|fence|tick|start|duration|outcome; the outcome may hold '|' */
    dlock_run_record full, *rec = &full;
    dlock_run_record_init(rec);
    const char *p = e->str;
    const char *bar = strchr(p, '|');
    if (!bar) continue;
    snprintf(rec->node, sizeof rec->node, "%.*s", (int)(bar - p), p);
    char *end = strchr(bar + 1, '|');
    if (!end || dlock__parse_fence(bar + 1, (size_t)(end - bar - 1), &rec->fence) != 0) continue;
    rec->scheduled_unix_ms = strtoll(end + 1, &end, 10);
    if (*end != '|') continue;
    rec->start_unix_ms = strtoll(end + 1, &end, 10);
    if (*end != '|') continue;
    rec->duration_ms = strtoll(end + 1, &end, 10);
    if (*end != '|') continue;
    snprintf(rec->outcome, sizeof rec->outcome, "%s", end + 1);
    rec->struct_size = stride;
    memcpy((char *)out + (size_t)n * stride, rec, stride);
    n++;
  }
  dlock__reply_free(r);
  free(key);
  return rc ? rc : n;
}
