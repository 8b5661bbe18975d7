/*
 * sched.c - the Redis backend's scheduler operations: tick claims, the end
 * of a run, its undo and the run history, each one script (sched_*.lua).
 * The timing (timer, workers, misfires) is the core's (src/sched/sched.c).
 *
 * A job's keys: the job lock is a dlock lock named like the job, plus
 * {K}:tick (the last claimed tick), {K}:history, {K}:lastend and {K}:job
 * (its state: pause, pending trigger; job_set.lua), whose name is also the
 * channel a change is published on.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

enum { JK_TICK, JK_HISTORY, JK_LASTEND, JK_JOB, JK_EXTRA };

typedef struct job_keys {
  dlock__lock_keys lock;
  char *extra[JK_EXTRA];
  size_t extra_len[JK_EXTRA];
} job_keys;

static void job_keys_clear(job_keys *k) {
  dlock__lock_keys_clear(&k->lock);
  for (int i = 0; i < JK_EXTRA; i++) free(k->extra[i]);
  memset(k, 0, sizeof *k);
}

static int job_keys_init(job_keys *k, dlock_client *c, const char *job) {
  memset(k, 0, sizeof *k);
  int rc = dlock__lock_keys_init(&k->lock, c, job);
  if (rc) return rc;
  static const char *const suffix[JK_EXTRA] = {"}:tick", "}:history", "}:lastend", "}:job"};
  for (int i = 0; i < JK_EXTRA; i++) {
    const char *base = k->lock.key[DLOCK__K_LOCK];
    size_t len = strlen(base) + strlen(suffix[i]) + 1;
    if (!(k->extra[i] = malloc(len + 1))) {
      job_keys_clear(k);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    snprintf(k->extra[i], len + 1, "{%s%s", base, suffix[i]);
    k->extra_len[i] = len;
  }
  return 0;
}

static void job_call(dlock__script_call *call, dlock__script_id id, const job_keys *k, int with_extra) {
  memset(call, 0, sizeof *call);
  call->script = id;
  dlock__script_call_keys(call, &k->lock);
  for (int i = 0; i < with_extra; i++) {
    call->keys[call->nkeys] = k->extra[i];
    call->keylens[call->nkeys] = k->extra_len[i];
    call->nkeys++;
  }
}

static void add_key(dlock__script_call *call, const job_keys *k, int which) {
  call->keys[call->nkeys] = k->extra[which];
  call->keylens[call->nkeys] = k->extra_len[which];
  call->nkeys++;
}

static void add_arg(dlock__script_call *call, const char *s) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = strlen(s);
  call->nargs++;
}

/* Run a script; map error replies; check the reply is an array of >= 'min'
 * elements. 'twice_safe': the script gives the same answer when it runs twice
 * with the same arguments, so a lost reply is answered by sending it again. */
static int run_script(dlock_client *c, const char *job, dlock__script_call *call, size_t min, dlock__reply **out,
                      int twice_safe) {
  int rc = twice_safe ? dlock__script_run_twice_safe(c, call, out) : dlock__script_run(c, call, 1, out);
  if (rc) {
    dlock__error_prefix("job '%s': ", job); /* transport errors name the server already */
    return rc;
  }
  if ((*out)->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(*out);
    dlock__error(rc, "job '%s' on %s: %s script: %s", job, c->server, dlock__script_name(call->script), (*out)->str);
  } else if ((*out)->type != DLOCK__REPLY_ARRAY || (*out)->elements < min) {
    rc = dlock__error(DLOCK_EPROTO, "job '%s': unexpected reply from the %s script", job,
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

/* Element 'i' of a claim's reply as a fencing token; an error otherwise. */
static int el_fence(const dlock__reply *r, size_t i, const char *job, uint64_t *fence) {
  const char *s = el_str(r, i);
  if (dlock__parse_fence(s, strlen(s), fence) == 0 && *fence > 0) return 0;
  return dlock__error(DLOCK_EFENCE, "job '%s': the claim gave fence '%.40s', not an integer in 1..2^63-1", job, s);
}

int dlock__redis_sched_claim(dlock_client *c, dlock__claim *cl) {
  job_keys k;
  int rc = job_keys_init(&k, c, cl->job);
  if (rc) return rc;
  char tick_s[24], atmost_s[24], hist_s[16], ahead_s[24], delay_s[24];
  snprintf(atmost_s, sizeof atmost_s, "%" PRId64, cl->at_most_ms);
  dlock__script_call call;
  if (cl->delay_ms) {
    snprintf(delay_s, sizeof delay_s, "%" PRId64, cl->delay_ms);
    snprintf(hist_s, sizeof hist_s, "%d", cl->history_len);
    job_call(&call, DLOCK__SCRIPT_SCHED_DELAY, &k, 3);
    add_key(&call, &k, JK_JOB);
    add_arg(&call, delay_s);
    add_arg(&call, cl->token);
    add_arg(&call, atmost_s);
    add_arg(&call, cl->node);
    add_arg(&call, hist_s);
  } else {
    snprintf(tick_s, sizeof tick_s, "%" PRId64, cl->tick_ms);
    snprintf(hist_s, sizeof hist_s, "%d", cl->history_len);
    snprintf(ahead_s, sizeof ahead_s, "%" PRId64, cl->ahead_ms);
    job_call(&call, DLOCK__SCRIPT_SCHED_CLAIM, &k, 2);
    add_key(&call, &k, JK_JOB);
    add_arg(&call, tick_s);
    add_arg(&call, cl->token);
    add_arg(&call, atmost_s);
    add_arg(&call, cl->node);
    add_arg(&call, cl->allow_overlap ? "1" : "0");
    add_arg(&call, hist_s);
    add_arg(&call, ahead_s);
    add_arg(&call, cl->manual ? "1" : "0");
  }
  dlock__reply *r = NULL;
  /* Twice-safe: a claim records the run token, and a second run that finds
   * the tick claimed by that token answers "yours" (docs/design.md). */
  rc = run_script(c, cl->job, &call, 3, &r, 1);
  cl->maybe_ran = rc && call.maybe_ran;
  job_keys_clear(&k);
  if (rc) return rc;
  long long claimed = r->element[0]->type == DLOCK__REPLY_INTEGER ? r->element[0]->integer : 0;
  if (!cl->delay_ms && !cl->manual && r->elements >= 4) cl->trigger_pending = !strcmp(el_str(r, 3), "1");
  if (claimed == 1 && (!(cl->delay_ms || cl->manual) || r->elements >= 4)) {
    if ((rc = el_fence(r, 1, cl->job, &cl->fence)) != 0) { /* never run without a valid fence */
      cl->maybe_ran = 1;                                   /* the job lock holds our token: undo it */
    } else {
      cl->outcome = DLOCK__CLAIM_YOURS;
      cl->start_ms = strtoll(el_str(r, 2), NULL, 10);
      cl->claimed_tick_ms = cl->delay_ms || cl->manual ? strtoll(el_str(r, 3), NULL, 10) : cl->tick_ms;
    }
  } else if (!strcmp(el_str(r, 1), "ahead")) {
    cl->outcome = DLOCK__CLAIM_AHEAD;
    cl->server_now_ms = strtoll(el_str(r, 2), NULL, 10);
  } else if (!strcmp(el_str(r, 1), "paused")) {
    cl->outcome = DLOCK__CLAIM_PAUSED;
    snprintf(cl->why, sizeof cl->why, "%s", el_str(r, 2));
  } else if (cl->manual && !strcmp(el_str(r, 1), "none")) {
    cl->outcome = DLOCK__CLAIM_NONE;
  } else if (cl->delay_ms) {
    cl->outcome = DLOCK__CLAIM_WAIT;
    cl->wait_ms = !strcmp(el_str(r, 1), "wait") ? strtoll(el_str(r, 2), NULL, 10) : -1;
  } else {
    cl->outcome = !strcmp(el_str(r, 1), "busy") ? DLOCK__CLAIM_BUSY : DLOCK__CLAIM_TAKEN;
    snprintf(cl->by, sizeof cl->by, "%s", el_str(r, 2));
  }
  dlock__reply_free(r);
  return rc;
}

int dlock__redis_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours) {
  *lock_was_ours = 0;
  job_keys k;
  int rc = job_keys_init(&k, c, cl->job);
  if (rc) return rc;
  char tick_s[24], fence_s[24], atleast_s[24], atmost_s[24], hist_s[16], start_s[24];
  snprintf(tick_s, sizeof tick_s, "%" PRId64, rec->scheduled_unix_ms);
  snprintf(fence_s, sizeof fence_s, "%" PRIu64, rec->fence);
  snprintf(atleast_s, sizeof atleast_s, "%" PRId64, cl->at_least_ms);
  snprintf(atmost_s, sizeof atmost_s, "%" PRId64, cl->at_most_ms);
  snprintf(hist_s, sizeof hist_s, "%d", cl->history_len);
  snprintf(start_s, sizeof start_s, "%" PRId64, rec->start_unix_ms);
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_SCHED_FINISH, &k, 3);
  add_arg(&call, cl->token);
  add_arg(&call, tick_s);
  add_arg(&call, start_s);
  add_arg(&call, atleast_s);
  add_arg(&call, rec->node);
  add_arg(&call, fence_s);
  add_arg(&call, rec->outcome);
  add_arg(&call, hist_s);
  add_arg(&call, cl->allow_overlap && !cl->delay_ms ? "1" : "0");
  add_arg(&call, atmost_s);
  add_arg(&call, "0");
  dlock__reply *r = NULL;
  rc = run_script(c, cl->job, &call, 2, &r, 0);
  if (rc && call.maybe_ran) {
    /* The reply was lost: send it again marked as a second send, which finds
     * the first one's history entry if it ran and then writes nothing again. */
    call.args[call.nargs - 1] = "1";
    call.arglens[call.nargs - 1] = 1;
    rc = run_script(c, cl->job, &call, 2, &r, 0);
  }
  job_keys_clear(&k);
  if (r) {
    rec->duration_ms = strtoll(el_str(r, 0), NULL, 10);
    *lock_was_ours = r->element[1]->type == DLOCK__REPLY_INTEGER && r->element[1]->integer == 1;
  }
  dlock__reply_free(r);
  return rc;
}

/* The job lock may hold our token for lock_at_most_for: delete it if so
 * (withdraw.lua does exactly delete-if-token, and is twice-safe). */
void dlock__redis_sched_undo(dlock_client *c, const dlock__claim *cl) {
  job_keys k;
  if (job_keys_init(&k, c, cl->job) != 0) return;
  dlock__script_call call;
  job_call(&call, DLOCK__SCRIPT_WITHDRAW, &k, 0);
  add_arg(&call, "");
  add_arg(&call, cl->token);
  dlock__reply *r = NULL;
  if (dlock__script_run_twice_safe(c, &call, &r) == 0) dlock__reply_free(r);
  job_keys_clear(&k);
}

int dlock__redis_sched_history(dlock_client *c, const char *name, dlock_run_record *out, int max) {
  job_keys k;
  int rc = job_keys_init(&k, c, name);
  if (rc) return rc;
  char max_s[16];
  snprintf(max_s, sizeof max_s, "%d", max);
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_SCHED_HISTORY;
  call.nkeys = 1;
  call.keys[0] = k.extra[JK_HISTORY];
  call.keylens[0] = k.extra_len[JK_HISTORY];
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
    dlock_run_record *rec = &out[n];
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
    n++;
  }
  dlock__reply_free(r);
  job_keys_clear(&k);
  return rc ? rc : n;
}

/* ---- A job's state (job_set.lua, job_get.lua) ---- */

static int no_quorum_state(dlock_client *c, const char *what) {
  if (!dlock__topo(c)->quorum_run) return 0;
  return dlock__error(DLOCK_EINVAL,
                      "%s is not offered on Redlock (%s): independent nodes keep no shared job "
                      "state; pause and trigger jobs on one Redis server, Sentinel or Cluster",
                      what, c->server);
}

int dlock__redis_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id) {
  int rc = no_quorum_state(c, "pausing and triggering jobs");
  if (rc) return rc;
  job_keys k;
  if ((rc = job_keys_init(&k, c, job))) return rc;
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_JOB_SET;
  add_key(&call, &k, JK_JOB);
  add_arg(&call, op == DLOCK__JOB_PAUSE ? "pause" : op == DLOCK__JOB_RESUME ? "resume" : "trigger");
  add_arg(&call, by);
  add_arg(&call, reason);
  add_arg(&call, id);
  add_arg(&call, k.extra[JK_JOB]); /* the channel: the state key's name */
  add_arg(&call, dlock__sharded_pubsub(c) ? "SPUBLISH" : "PUBLISH");
  dlock__reply *r = NULL;
  /* Twice-safe: a pause or resume sent again changes nothing more; a trigger
   * names its id, which a second send finds pending or claimed. */
  rc = dlock__script_run_twice_safe(c, &call, &r);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "on %s, key '%s': %s", c->server, k.extra[JK_JOB], r->str);
  } else if (!rc && r->type != DLOCK__REPLY_INTEGER) {
    rc = dlock__error(DLOCK_EPROTO, "unexpected reply from %s to the job_set script", c->server);
  } else if (!rc) {
    rc = (int)r->integer;
  } else {
    dlock__error_prefix("on %s: ", c->server);
  }
  dlock__reply_free(r);
  job_keys_clear(&k);
  return rc;
}

int dlock__redis_job_get(dlock_client *c, const char *job, dlock_job_state *out) {
  int rc = no_quorum_state(c, "a job's state");
  if (rc) return rc;
  job_keys k;
  if ((rc = job_keys_init(&k, c, job))) return rc;
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_JOB_GET;
  add_key(&call, &k, JK_JOB);
  add_key(&call, &k, JK_TICK);
  dlock__reply *r = NULL;
  rc = run_script(c, job, &call, 5, &r, 1); /* read-only */
  job_keys_clear(&k);
  if (rc) return rc;
  const char *by = el_str(r, 0);
  if (*by) {
    out->paused = 1;
    snprintf(out->paused_by, sizeof out->paused_by, "%s", by);
    snprintf(out->paused_reason, sizeof out->paused_reason, "%s", el_str(r, 1));
    out->paused_unix_ms = strtoll(el_str(r, 2), NULL, 10);
  }
  const char *trig = el_str(r, 3); /* "at|by|id" */
  if (*trig) {
    char *end;
    out->trigger_pending = 1;
    out->trigger_unix_ms = strtoll(trig, &end, 10);
    const char *last = strrchr(trig, '|');
    if (*end == '|' && last > end)
      snprintf(out->trigger_by, sizeof out->trigger_by, "%.*s", (int)(last - end - 1), end + 1);
  }
  dlock__reply_free(r);
  return 0;
}

/* A scheduler's subscription to a job's channel: any message on it (or a
 * reconnect, when messages may have been missed) wakes the scheduler. */
typedef struct job_watch {
  dlock__sub_target target;
  char *channel;
  void (*wake)(void *);
  void *arg;
} job_watch;

static void wake_watch(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all) {
  (void)fence;
  (void)nonce;
  (void)all;
  job_watch *w = t->arg;
  w->wake(w->arg);
}

int dlock__redis_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle) {
  *handle = NULL;
  if (dlock__topo(c)->quorum_run) return DLOCK_EINVAL; /* no job state there: nothing to watch */
  job_keys k;
  int rc = job_keys_init(&k, c, job);
  if (rc) return rc;
  job_watch *w = calloc(1, sizeof *w);
  if (!w) {
    job_keys_clear(&k);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  w->channel = k.extra[JK_JOB];
  k.extra[JK_JOB] = NULL; /* kept */
  w->target.channel = w->channel;
  w->target.channel_len = strlen(w->channel);
  w->target.waiter_id = "job";
  w->target.wake = wake_watch;
  w->target.arg = w;
  w->wake = wake;
  w->arg = arg;
  job_keys_clear(&k);
  dlock__subscriber_watch(c, &w->target);
  dlock__subscriber_add_waiter(c, &w->target);
  *handle = w;
  return 0;
}

void dlock__redis_job_unwatch(dlock_client *c, void *handle) {
  job_watch *w = handle;
  if (!w) return;
  dlock__subscriber_remove_waiter(c, &w->target);
  dlock__subscriber_unwatch(c, &w->target);
  free(w->channel);
  free(w);
}
