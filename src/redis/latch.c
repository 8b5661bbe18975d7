/*
 * latch.c - countdown latches on Redis (the latch operations of
 * dlock__redis_ops): one hash {K}:latch (count, the setter's token) with
 * the latch's expiry, and a wake-up channel {K}:latch published on when the
 * count reaches zero (docs/keys.md, docs/latch.md).
 *
 * Waiting uses the client's subscriber (waiters.c) with a target of its
 * own: the latch's channel, the waiter id "latch" (the payload of every
 * latch's zero message) and a wake-up that sets 'woken' here. A waiter
 * re-checks the count at least every RECHECK_MS, so a lost message never
 * strands it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

#define RECHECK_MS 2000

typedef struct rlatch {
  char *key; /* {K}:latch; also the channel's name (target.channel) */
  size_t keylen;
  dlock__sub_target target;
  pthread_mutex_t mu; /* guards what follows */
  pthread_cond_t cv;
  int woken;                     /* a zero message (or a reconnect) since the last look */
  unsigned cancel_gen, wait_gen; /* dlock_latch_cancel: a wait ends when they differ */
} rlatch;

static rlatch *rl(const dlock_latch *l) { return (rlatch *)l->be; }

/* The subscriber's wake-up (waiters.c, under its lock). */
static void wake_latch(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all) {
  (void)fence;
  (void)nonce;
  (void)all;
  rlatch *r = t->arg;
  pthread_mutex_lock(&r->mu);
  r->woken = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Sleep until woken, canceled (1) or 'until'. */
static int sleep_until(rlatch *r, dlock_mono_ms until) {
  struct timespec ts;
  dlock__deadline_timespec(until, &ts);
  pthread_mutex_lock(&r->mu);
  while (!r->woken && r->cancel_gen == r->wait_gen && dlock_mono_now() < until)
    if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) break;
  r->woken = 0;
  int canceled = r->cancel_gen != r->wait_gen;
  pthread_mutex_unlock(&r->mu);
  return canceled;
}

int dlock__redis_latch_new(dlock_latch *l) {
  dlock_client *c = l->client;
  if (dlock__topo(c)->quorum_run)
    return dlock__error(DLOCK_EINVAL,
                        "countdown latches are not supported on redlock (%s): independent nodes "
                        "keep no shared count; use one Redis server, Sentinel or Cluster for latches",
                        c->server);
  rlatch *r = calloc(1, sizeof *r);
  if (!r) return dlock__error(DLOCK_ENOMEM, "out of memory");
  size_t nlen = strlen(l->name);
  r->keylen = c->prefix_len + nlen + strlen("{}:latch");
  if (!(r->key = malloc(r->keylen + 1))) {
    free(r);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  snprintf(r->key, r->keylen + 1, "{%s%s}:latch", c->prefix, l->name);
  r->target.channel = r->key;
  r->target.channel_len = r->keylen;
  r->target.waiter_id = "latch";
  r->target.wake = wake_latch;
  r->target.arg = r;
  pthread_mutex_init(&r->mu, NULL);
  dlock__cond_init(&r->cv);
  l->be = r;
  return 0;
}

void dlock__redis_latch_free(dlock_latch *l) {
  rlatch *r = rl(l);
  if (!r) return;
  dlock__subscriber_unwatch(l->client, &r->target);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r->key);
  free(r);
  l->be = NULL;
}

static void latch_call(dlock__script_call *call, dlock__script_id id, const rlatch *r) {
  memset(call, 0, sizeof *call);
  call->script = id;
  call->nkeys = 1;
  call->keys[0] = r->key;
  call->keylens[0] = r->keylen;
}

static void arg(dlock__script_call *call, const char *s) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = strlen(s);
  call->nargs++;
}

/* Map an error reply to a status that names the key. */
static int reply_error(const rlatch *r, dlock__reply *reply) {
  int rc = dlock__reply_error_status(reply);
  if (rc == DLOCK_EWRONGTYPE)
    return dlock__error(rc,
                        "key '%s' holds a type a latch does not use (%s); it belongs to something else and "
                        "was left alone: pick another latch name",
                        r->key, reply->str);
  return dlock__error(rc, "on key '%s': %s%s", r->key, reply->str,
                      rc == DLOCK_ENOPERM ? " (grant the ACL user the latch's key and channel, see docs/keys.md)" : "");
}

static int no_latch(const rlatch *r) {
  return dlock__error(DLOCK_ENOLATCH,
                      "'%s' does not exist: the latch was never set, or its expiry passed; set it "
                      "first (dlock_latch_set, `dlock latch set`)",
                      r->key);
}

int dlock__redis_latch_set(dlock_latch *l, int64_t count, int64_t expire_ms) {
  rlatch *r = rl(l);
  char count_s[24], exp_s[24], token[DLOCK__TOKEN_HEX + 1];
  snprintf(count_s, sizeof count_s, "%" PRId64, count);
  snprintf(exp_s, sizeof exp_s, "%" PRId64, expire_ms);
  int rc = dlock__random_hex(token, DLOCK__TOKEN_HEX / 2);
  if (rc) return rc;
  dlock__script_call call;
  latch_call(&call, DLOCK__SCRIPT_LATCH_SET, r);
  arg(&call, count_s);
  arg(&call, exp_s);
  arg(&call, token);
  dlock__reply *reply = NULL;
  /* Twice-safe: a second run with the same token finds the latch set by it
   * and answers "set" again (even when counted down meanwhile). */
  if ((rc = dlock__script_run_twice_safe(l->client, &call, &reply))) return rc;
  if (reply->type == DLOCK__REPLY_ERROR) {
    rc = reply_error(r, reply);
  } else if (reply->type == DLOCK__REPLY_ARRAY && reply->elements == 2 &&
             reply->element[0]->type == DLOCK__REPLY_INTEGER && reply->element[1]->type == DLOCK__REPLY_INTEGER) {
    if (reply->element[0]->integer != 1)
      rc = dlock__error(DLOCK_EBUSY,
                        "'%s' is already counting (%lld left); a latch is set again only once it "
                        "reached zero (or expired)",
                        r->key, reply->element[1]->integer);
  } else {
    rc = dlock__error(DLOCK_EPROTO, "latch_set script on '%s' gave an unexpected reply", r->key);
  }
  dlock__reply_free(reply);
  return rc;
}

int dlock__redis_latch_count_down(dlock_latch *l, int64_t *left) {
  rlatch *r = rl(l);
  dlock__script_call call;
  latch_call(&call, DLOCK__SCRIPT_LATCH_DOWN, r);
  arg(&call, r->key);
  arg(&call, dlock__sharded_pubsub(l->client) ? "SPUBLISH" : "PUBLISH");
  dlock__reply *reply = NULL;
  /* Not twice-safe (each run counts once more): a lost reply is reported,
   * never resent. */
  int rc = dlock__script_run(l->client, &call, 1, &reply);
  if (rc) {
    if (!call.maybe_ran) return rc;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    return dlock__error(DLOCK_EUNKNOWN,
                        "%s; the count-down may have counted or not (it is not sent again): read "
                        "the count (dlock_latch_count) before counting down again",
                        saved);
  }
  if (reply->type == DLOCK__REPLY_ERROR)
    rc = reply_error(r, reply);
  else if (reply->type != DLOCK__REPLY_INTEGER)
    rc = dlock__error(DLOCK_EPROTO, "latch_down script on '%s' gave an unexpected reply", r->key);
  else if (reply->integer < 0)
    rc = no_latch(r);
  else
    *left = reply->integer;
  dlock__reply_free(reply);
  return rc;
}

int dlock__redis_latch_get(dlock_latch *l, int64_t *count, int64_t *ttl_ms) {
  rlatch *r = rl(l);
  dlock__script_call call;
  latch_call(&call, DLOCK__SCRIPT_LATCH_GET, r);
  dlock__reply *reply = NULL;
  int rc = dlock__script_run_twice_safe(l->client, &call, &reply); /* read-only */
  if (rc) return rc;
  if (reply->type == DLOCK__REPLY_ERROR)
    rc = reply_error(r, reply);
  else if (reply->type == DLOCK__REPLY_INTEGER && reply->integer < 0)
    rc = no_latch(r);
  else if (reply->type != DLOCK__REPLY_ARRAY || reply->elements != 2 ||
           reply->element[0]->type != DLOCK__REPLY_INTEGER || reply->element[1]->type != DLOCK__REPLY_INTEGER)
    rc = dlock__error(DLOCK_EPROTO, "latch_get script on '%s' gave an unexpected reply", r->key);
  else {
    *count = reply->element[0]->integer;
    if (ttl_ms) *ttl_ms = reply->element[1]->integer;
  }
  dlock__reply_free(reply);
  return rc;
}

int dlock__redis_latch_wait(dlock_latch *l, int64_t wait_ms, dlock_mono_ms deadline) {
  rlatch *r = rl(l);
  dlock_client *c = l->client;
  /* The wait begins now: a cancel from here on ends it, also one made while
   * the subscription below waits for the server. */
  pthread_mutex_lock(&r->mu);
  unsigned gen = r->cancel_gen;
  pthread_mutex_unlock(&r->mu);
  if (wait_ms != 0) {
    /* Subscribe before the first look, so that a zero reached between the
     * look and the wait still wakes us ('woken' keeps it). A failed
     * subscription leaves the re-checks. */
    if (!r->target.watch_tried) dlock__subscriber_watch(c, &r->target);
    dlock__subscriber_add_waiter(c, &r->target);
  }
  pthread_mutex_lock(&r->mu);
  r->wait_gen = gen;
  r->woken = 0;
  pthread_mutex_unlock(&r->mu);
  int rc;
  for (;;) {
    int64_t n = 0;
    if ((rc = dlock__redis_latch_get(l, &n, NULL))) {
      if (rc == DLOCK_ENOLATCH && wait_ms != 0) dlock__error_prefix("while waiting: ");
      break;
    }
    if (n == 0) break;
    dlock_mono_ms now = dlock_mono_now();
    if (now >= deadline) {
      rc = dlock__error(DLOCK_EBUSY, "'%s' still counts %lld after the whole wait (%lld ms)", r->key, (long long)n,
                        (long long)wait_ms);
      break;
    }
    if (sleep_until(r, now + RECHECK_MS < deadline ? now + RECHECK_MS : deadline)) {
      rc = dlock__error(DLOCK_ECANCELED, "wait canceled");
      break;
    }
  }
  if (wait_ms != 0) dlock__subscriber_remove_waiter(c, &r->target);
  return rc;
}

void dlock__redis_latch_cancel(dlock_latch *l) {
  rlatch *r = rl(l);
  pthread_mutex_lock(&r->mu);
  r->cancel_gen++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}
