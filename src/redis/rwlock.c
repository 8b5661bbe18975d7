/*
 * rwlock.c - the Redis backend's read-write lock (handles of kind
 * DLOCK__KIND_READ and _WRITE; the public calls are core/rwlock.c).
 *
 * One script call per step (src/redis/lua/rw_*.lua, docs/rwlock.md): the
 * holders are a ZSET of token -> lease expiry on the server's clock at the
 * lock's name, so every hold has its own lease and a crashed holder's share
 * returns when it ends; the wait queue is the mutex's (arrival order), each
 * entry marked with its side. A release wakes who may go now (the next
 * writer, or the readers ahead of it); the woken waiter's own acquire call
 * takes the lock, so there is no hand-off to confirm. Release, extend and
 * the watchdog's renewal are lock.c's code with the rw_ scripts, which
 * answer with the same codes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

/* A waiter looks again at least this often, even with no message. */
#define RW_RECHECK_CAP_MS 2000

static void call_arg(dlock__script_call *call, const char *s, size_t len) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = len;
  call->nargs++;
}

static void call_init(dlock__script_call *call, dlock__script_id id, const dlock_mutex *m) {
  memset(call, 0, sizeof *call);
  call->script = id;
  dlock__script_call_keys(call, &dlock__rm(m)->keys);
}

/* Run 'call' on the name's node, sending it again after a lost reply (each
 * caller says why that is safe); error replies become statuses that name
 * the key and say what to do. */
static int rw_run(dlock_client *c, const dlock__lock_keys *k, dlock__script_call *call, dlock__reply **out) {
  int rc = dlock__script_run_twice_safe(c, call, out);
  if (rc || (*out)->type != DLOCK__REPLY_ERROR) return rc;
  const char *s = (*out)->str;
  if (!strncmp(s, "EKIND", 5))
    rc = dlock__error(DLOCK_EWRONGTYPE, "%s", s + 6); /* the script's text names the key and the kind */
  else if ((rc = dlock__reply_error_status(*out)) == DLOCK_EWRONGTYPE)
    rc = dlock__error(rc, "%s script: key '%s' or one of '%s', '%s', '%s', '%s' holds a type a read-write lock "
                      "does not use (%s): a mutex's name with its hand-off keys, or another application's key; "
                      "pick another name", dlock__script_name(call->script), k->key[DLOCK__K_LOCK],
                      k->key[DLOCK__K_FENCE], k->key[DLOCK__K_META], k->key[DLOCK__K_QUEUE],
                      k->key[DLOCK__K_WAITERS], s);
  else
    rc = dlock__error(rc, "%s script failed on key '%s': %s%s", dlock__script_name(call->script),
                      k->key[DLOCK__K_LOCK], s,
                      rc == DLOCK_ENOPERM ? " (grant the ACL user the lock's keys and channels, see docs/keys.md)" : "");
  dlock__reply_free(*out);
  *out = NULL;
  return rc;
}

/* Leave the queue and end a hold of our token if one was granted. 0 when
 * that was confirmed. Twice-safe: a second run finds neither and changes
 * nothing but waking waiters again. */
static int withdraw(dlock_mutex *m) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__SCRIPT_RW_WITHDRAW, m);
  call_arg(&call, dlock__rm(m)->waiter_id, strlen(dlock__rm(m)->waiter_id));
  call_arg(&call, m->token, strlen(m->token));
  int rc = rw_run(m->client, &dlock__rm(m)->keys, &call, &r);
  dlock__reply_free(r);
  return rc;
}

void dlock__redis_rw_undo(dlock_mutex *m) { withdraw(m); }

/* Give up with 'status', or DLOCK_EUNKNOWN when the clean-up (which ends a
 * hold that may have been granted) cannot be confirmed. */
static int give_up(dlock_mutex *m, int64_t lease, int status) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  if (withdraw(m) == 0) return dlock__error(status, "%s", saved);
  char cleanup[512];
  snprintf(cleanup, sizeof cleanup, "%s", dlock_last_error());
  return dlock__error(DLOCK_EUNKNOWN, "%s; then the cleanup failed (%s), so our %s hold may stay until its "
                      "lease (%lld ms) ends", saved, cleanup, dlock__kind_name(m->kind), (long long)lease);
}

int dlock__redis_rw_acquire(dlock_mutex *m, int64_t lease, int64_t wait_ms, dlock_mono_ms deadline,
                            dlock__grant *grant) {
  dlock_client *c = m->client;
  dlock__rmutex *rm = dlock__rm(m);
  int queue = wait_ms != 0;
  char lease_s[24], cap_s[24], own[DLOCK__TOKEN_HEX + 1];
  snprintf(lease_s, sizeof lease_s, "%" PRId64, lease);
  snprintf(cap_s, sizeof cap_s, "%d", RW_RECHECK_CAP_MS);
  const char *side = m->kind == DLOCK__KIND_READ ? "r" : "w";
  rm->waiter_id[0] = '\0';
  if (queue)
    snprintf(rm->waiter_id, sizeof rm->waiter_id, "%s:%s%" PRIu64, c->id, dlock__sharded_pubsub(c) ? "s" : "",
             (uint64_t)atomic_fetch_add(&dlock__rc(c)->waiter_seq, 1));
  int in_table = 0, queued = 0, rc;
  for (;;) {
    if (queue && !in_table) {
      dlock__subscriber_add_waiter(c, m);
      in_table = 1;
    }
    /* Looked up at every try: this thread's other hold may end meanwhile. */
    dlock__rw_own_token(m, own);
    dlock__script_call call;
    dlock__reply *r = NULL;
    call_init(&call, DLOCK__SCRIPT_RW_ACQUIRE, m);
    call_arg(&call, m->token, strlen(m->token));
    call_arg(&call, lease_s, strlen(lease_s));
    call_arg(&call, side, 1);
    call_arg(&call, rm->waiter_id, strlen(rm->waiter_id));
    call_arg(&call, cap_s, strlen(cap_s));
    call_arg(&call, m->owner_info, strlen(m->owner_info));
    call_arg(&call, own, strlen(own));
    uint64_t failovers = dlock__failovers(dlock__topo(c), rm->keys.key[DLOCK__K_LOCK], rm->keys.len[DLOCK__K_LOCK]);
    dlock_mono_ms sent = dlock_mono_now();
    /* Twice-safe: a second run finds our token among the holders and
     * answers the fence of that hold after refreshing its lease (counted
     * from the first send, earlier than either run); a waiter is queued
     * once (ZADD NX). */
    rc = rw_run(c, &rm->keys, &call, &r);
    if (rc) {
      if (call.maybe_ran || queued) {
        rc = give_up(m, lease, rc);
        if (rc != DLOCK_EUNKNOWN) dlock__error_prefix("not acquired (cleaned up): ");
      }
      break;
    }
    long long got = -1, left = -1;
    uint64_t fence = 0;
    if (r->type == DLOCK__REPLY_ARRAY && r->elements == 2 && r->element[0]->type == DLOCK__REPLY_INTEGER) {
      got = r->element[0]->integer;
      const dlock__reply *v = r->element[1];
      if (got == 1 && (v->type != DLOCK__REPLY_STRING || dlock__parse_fence(v->str, v->len, &fence) != 0 || fence == 0))
        got = -2;
      else if (got == 0 && v->type == DLOCK__REPLY_INTEGER)
        left = v->integer;
      else if (got != 1)
        got = -1;
    }
    dlock__reply_free(r);
    if (got < 0) {
      rc = got == -2 ? give_up(m, lease, dlock__error(DLOCK_EFENCE, "rw_acquire script: the hold is ours but its "
                                                      "fence in '%s' is not an integer in 1..2^63-1; given back",
                                                      rm->keys.key[DLOCK__K_META]))
                     : dlock__error(DLOCK_EPROTO, "rw_acquire script gave an unexpected reply");
      break;
    }
    if (got == 1 && dlock__replicas_short(c, &call)) {
      rc = give_up(m, lease, DLOCK_EREPLICAS);
      if (rc != DLOCK_EUNKNOWN) dlock__error_prefix("acquired on the master but released again: ");
      break;
    }
    if (got == 1) {
      rm->failovers_at_acquire = failovers;
      grant->fence = fence;
      grant->lease_ms = lease;
      grant->start = sent;
      grant->valid_until = dlock__valid_until(sent, lease);
      rc = 0;
      break;
    }
    if (!queue) {
      rc = dlock__error(DLOCK_EBUSY, "%s", m->kind == DLOCK__KIND_READ
                                               ? "the write side is held, or a writer waits ahead of us"
                                               : "held by readers or a writer, or others wait ahead of us");
      break;
    }
    queued = 1;
    if (!rm->watch_tried) {
      /* Subscribe, then look again at once: a wake-up sent before the
       * subscription took effect went unheard. */
      dlock__subscriber_watch(c, m);
      continue;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (now >= deadline) {
      dlock__error(DLOCK_EBUSY, "%s for the whole wait (%lld ms)", m->kind == DLOCK__KIND_READ
                   ? "the write side was held or a writer waited ahead of us" : "held by others",
                   (long long)wait_ms);
      rc = give_up(m, lease, DLOCK_EBUSY);
      break;
    }
    /* Look again when the earliest lease ends (a crashed holder's share
     * returns then), at the latest after the cap. */
    int64_t recheck = left >= 0 && left < RW_RECHECK_CAP_MS ? left + 1 : RW_RECHECK_CAP_MS;
    if (dlock__mutex_wait(m, now + recheck < deadline ? now + recheck : deadline)) {
      dlock__error(DLOCK_ECANCELED, "wait canceled");
      rc = give_up(m, lease, DLOCK_ECANCELED);
      break;
    }
  }
  if (in_table) dlock__subscriber_remove_waiter(c, m);
  return rc;
}

int dlock__redis_rw_held(dlock_mutex *m, const char *token, int64_t *ttl_ms) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__SCRIPT_RW_INFO, m);
  call_arg(&call, token, strlen(token));
  int rc = rw_run(m->client, &dlock__rm(m)->keys, &call, &r); /* read only: asking again is safe */
  if (rc) return rc;
  if (r->type != DLOCK__REPLY_ARRAY || r->elements != 12) {
    dlock__reply_free(r);
    return dlock__error(DLOCK_EPROTO, "rw_info script gave an unexpected reply");
  }
  int mine = r->element[10]->integer == 1;
  if (ttl_ms) *ttl_ms = r->element[11]->integer;
  dlock__reply_free(r);
  return mine;
}

int dlock__redis_rw_parse(const dlock__reply *r, dlock_lock_info *out) {
  if (r->type != DLOCK__REPLY_ARRAY || r->elements != 12)
    return dlock__error(DLOCK_EPROTO, "rw_info script gave an unexpected reply");
  const dlock__reply *const *e = (const dlock__reply *const *)r->element;
  for (int i = 0; i < 12; i++)
    if (e[i]->type != ((i >= 3 && i <= 5) || i == 8 ? DLOCK__REPLY_STRING : DLOCK__REPLY_INTEGER))
      return dlock__error(DLOCK_EPROTO, "rw_info script gave an unexpected reply (element %d)", i);
  uint64_t wf = 0, last = 0;
  if (e[3]->len) dlock__parse_fence(e[3]->str, e[3]->len, &wf);
  if (e[8]->len) dlock__parse_fence(e[8]->str, e[8]->len, &last);
  out->rwlock = e[0]->integer == 1;
  out->readers = e[1]->integer;
  out->writer = e[2]->integer == 1;
  out->held = out->readers > 0 || out->writer;
  out->ttl_ms = out->held ? e[9]->integer : 0;
  out->fence = out->writer ? wf : last;
  out->since_unix_ms = out->writer && e[4]->len ? strtoll(e[4]->str, NULL, 10) : 0;
  if (out->writer) snprintf(out->owner_info, sizeof out->owner_info, "%s", e[5]->str);
  out->waiting_writers = e[6]->integer;
  out->waiters = e[6]->integer + e[7]->integer;
  return 0;
}

int dlock__redis_rw_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  dlock__lock_keys keys;
  int rc = dlock__lock_keys_init(&keys, c, name);
  if (rc) return rc;
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_RW_INFO;
  dlock__script_call_keys(&call, &keys);
  call_arg(&call, "", 0);
  dlock__reply *r = NULL;
  rc = rw_run(c, &keys, &call, &r); /* read only */
  if (!rc) rc = dlock__redis_rw_parse(r, out);
  if (rc) dlock__error_prefix("status of '%s' on %s: ", name, c->server);
  dlock__reply_free(r);
  dlock__lock_keys_clear(&keys);
  return rc;
}
