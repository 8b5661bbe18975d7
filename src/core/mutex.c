/*
 * mutex.c - the exclusive lock: acquire with a lease, queue and wait for a
 * hand-off, reentrancy per thread, compare-and-delete release, extend.
 *
 * All Redis work is one script call per step (src/redis/lua/). Waiting is
 * driven by grant messages from waiters.c, with a bounded re-check so that a
 * lost message or a crashed holder never strands a waiter.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

/* A waiter re-checks the lock at least this often, even with no message. */
#define RECHECK_CAP_MS 2000
/* A hand-off gives the next waiter this long (at most) to confirm the grant
 * before the lock frees itself: a waiter that died meanwhile costs no more.
 * Longer than RECHECK_CAP_MS, so that a waiter that missed the message
 * still finds the lock handed to it at its next re-check. */
#define CLAIM_MAX_MS 3000
#define DEFAULT_WATCHDOG_LEASE_MS 30000
#define MIN_WATCHDOG_LEASE_MS 30

/* ---- Keys ---- */

static char *key_with(const char *base, size_t blen, const char *suffix, size_t *len) {
  size_t slen = strlen(suffix);
  char *k = malloc(blen + slen + 3);
  if (!k) return NULL;
  k[0] = '{';
  memcpy(k + 1, base, blen);
  k[blen + 1] = '}';
  memcpy(k + blen + 2, suffix, slen + 1);
  *len = blen + slen + 2;
  return k;
}

int dlock__lock_keys_init(dlock__lock_keys *k, const dlock_client *c, const char *name) {
  static const char *const suffix[DLOCK__K_COUNT] = {NULL, ":fence", ":meta", ":queue", ":waiters"};
  memset(k, 0, sizeof *k);
  size_t nlen = strlen(name);
  size_t blen = c->prefix_len + nlen;
  char *base = malloc(blen + 1);
  if (!base) return dlock__error(DLOCK_ENOMEM, "out of memory");
  memcpy(base, c->prefix, c->prefix_len);
  memcpy(base + c->prefix_len, name, nlen + 1);
  k->key[DLOCK__K_LOCK] = base;
  k->len[DLOCK__K_LOCK] = blen;
  for (int i = 1; i < DLOCK__K_COUNT; i++) {
    if (!(k->key[i] = key_with(base, blen, suffix[i], &k->len[i]))) {
      dlock__lock_keys_clear(k);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
  }
  return 0;
}

void dlock__lock_keys_clear(dlock__lock_keys *k) {
  for (int i = 0; i < DLOCK__K_COUNT; i++) free(k->key[i]);
  memset(k, 0, sizeof *k);
}

void dlock__script_call_keys(dlock__script_call *call, const dlock__lock_keys *k) {
  call->nkeys = DLOCK__K_COUNT;
  for (int i = 0; i < DLOCK__K_COUNT; i++) {
    call->keys[i] = k->key[i];
    call->keylens[i] = k->len[i];
  }
}

static void call_arg(dlock__script_call *call, const char *s, size_t len) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = len;
  call->nargs++;
}

static void call_init(dlock__script_call *call, dlock__script_id id, const dlock_mutex *m) {
  memset(call, 0, sizeof *call);
  call->script = id;
  dlock__script_call_keys(call, &m->keys);
}

/* ---- Errors on the handle ---- */

/* Finish a failing call: put context in front of the detail, keep a copy on
 * the handle, return 'rc'. */
static int fail(dlock_mutex *m, int rc, const char *op) {
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

/* Run one script call on the lock's node; map error replies to statuses.
 * Every script called here (acquire, release, extend, withdraw, info) is safe
 * to run twice with the same arguments, each for the reason given where it
 * is called, so a lost reply is answered by sending it once more
 * (dlock__script_run_twice_safe; docs/design.md, "Lost replies"). */
static int run_one(dlock_mutex *m, dlock__script_call *call, dlock__reply **out) {
  int rc = dlock__script_run_twice_safe(m->client, call, out);
  if (rc) return rc;
  if ((*out)->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(*out);
    if (rc == DLOCK_EWRONGTYPE)
      rc = dlock__error(rc, "%s script: key '%s' or one of its keys '%s', '%s', '%s', '%s' holds a type dlock "
                        "does not use (%s); it belongs to something else and was left alone: pick another lock "
                        "name", dlock__script_name(call->script), m->keys.key[DLOCK__K_LOCK],
                        m->keys.key[DLOCK__K_FENCE], m->keys.key[DLOCK__K_META], m->keys.key[DLOCK__K_QUEUE],
                        m->keys.key[DLOCK__K_WAITERS], (*out)->str);
    else if (rc == DLOCK_EFOREIGN)
      rc = dlock__error(rc, "key '%s' exists without an expiry and without dlock metadata: it is not a dlock "
                        "lock but another key (an application's?), and waiting for it would never end; pick "
                        "another lock name or a key prefix", m->keys.key[DLOCK__K_LOCK]);
    else
      rc = dlock__error(rc, "%s script failed on key '%s': %s%s", dlock__script_name(call->script),
                        m->keys.key[DLOCK__K_LOCK], (*out)->str,
                        rc == DLOCK_ENOPERM ? " (grant the ACL user the lock's keys and channels, see docs/keys.md)"
                                            : "");
    dlock__reply_free(*out);
    *out = NULL;
  }
  return rc;
}

static int reply_int(const dlock__reply *r, long long *v) {
  if (r->type == DLOCK__REPLY_INTEGER) { *v = r->integer; return 0; }
  return dlock__error(DLOCK_EPROTO, "expected an integer reply");
}

/* ---- Handle lifecycle ---- */

void dlock_mutex_options_init(dlock_mutex_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

int dlock_mutex_new(dlock_mutex **out, dlock_client *c, const char *name, const dlock_mutex_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_mutex_new: 'out' is NULL");
  *out = NULL;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_mutex_new: client is NULL");
  int rc = dlock__check_name("lock name", name);
  if (rc) return rc;
  dlock_mutex_options o;
  dlock_mutex_options_init(&o);
  if ((rc = dlock__options_in(&o, sizeof o, opts, DLOCK__MUTEX_OPTIONS_V1, "dlock_mutex_options")))
    return rc;
  if ((rc = dlock__check_duration("lease_ms", o.lease_ms, 1)) ||
      (rc = dlock__check_duration("watchdog_lease_ms", o.watchdog_lease_ms, 1)) ||
      (rc = dlock__check_duration("max_hold_ms", o.max_hold_ms, 1)))
    return rc;
  if (o.watchdog_lease_ms == 0) o.watchdog_lease_ms = DEFAULT_WATCHDOG_LEASE_MS;
  if (o.watchdog_lease_ms < MIN_WATCHDOG_LEASE_MS)
    return dlock__error(DLOCK_ERANGE, "watchdog_lease_ms is %lld; it must be at least %d ms so that "
                        "renewal every third of it is possible", (long long)o.watchdog_lease_ms,
                        MIN_WATCHDOG_LEASE_MS);
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
  rc = m->name && m->owner_info ? dlock__lock_keys_init(&m->keys, c, name)
                                : dlock__error(DLOCK_ENOMEM, "out of memory");
  if (!rc) {
    const char *suffix = ":w:";
    size_t base = m->keys.len[DLOCK__K_LOCK];
    m->channel_len = base + 2 + strlen(suffix) + strlen(c->id);
    if ((m->channel = malloc(m->channel_len + 1)))
      snprintf(m->channel, m->channel_len + 1, "{%s}%s%s", m->keys.key[DLOCK__K_LOCK], suffix, c->id);
    else
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  if (rc) {
    dlock__lock_keys_clear(&m->keys);
    free(m->name);
    free(m->owner_info);
    free(m);
    return rc;
  }
  pthread_mutex_init(&m->mu, NULL);
  dlock__cond_init(&m->cv);
  *out = m;
  return 0;
}

void dlock_mutex_free(dlock_mutex *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  int held = m->busy && m->hold_count > 0;
  if (held) { /* release every hold, as the owner would */
    m->hold_count = 1;
    m->owner = pthread_self();
  }
  pthread_mutex_unlock(&m->mu);
  if (held) dlock_mutex_release(m);
  dlock__watchdog_remove(m->client, m);
  dlock__subscriber_unwatch(m->client, m);
  if (m->lost_fd >= 0) close(m->lost_fd);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  dlock__lock_keys_clear(&m->keys);
  free(m->channel);
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

int dlock__mutex_renewed(dlock_mutex *m, dlock_mono_ms sent, int64_t lease_ms, dlock_mono_ms now) {
  /* A reply that comes after the deadline is too late: someone may already
   * have been told the hold is lost, and a lost hold stays lost. */
  if (dlock__mutex_check_deadline(m, now) != DLOCK_LOST_NONE) return 0;
  m->valid_until = dlock__valid_until(sent, lease_ms);
  m->renew_tried = 0;
  return 1;
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

/* ---- Acquire ---- */

static void format_i64(char *buf, size_t len, int64_t v) { snprintf(buf, len, "%" PRId64, v); }

/* Best-effort undo of an acquire whose outcome we do not know: leave the
 * queue and delete the key if it holds our token. 0 when that worked. */
static int undo_acquire(dlock_mutex *m) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__SCRIPT_WITHDRAW, m);
  call_arg(&call, m->waiter_id, strlen(m->waiter_id));
  call_arg(&call, m->token, strlen(m->token));
  /* Twice-safe: a second run finds our id gone from the queue and the key
   * not ours (the first deleted it or handed it on), and changes nothing. */
  int rc = run_one(m, &call, &r);
  dlock__reply_free(r);
  return rc;
}

dlock_lost_reason dlock__lost_reason(dlock_mutex *m, long long reply) {
  const dlock__lock_keys *k = &m->keys;
  if (dlock__failovers(m->client->topo, k->key[DLOCK__K_LOCK], k->len[DLOCK__K_LOCK]) != m->failovers_at_acquire)
    return DLOCK_LOST_FAILOVER;
  if (reply == -2) return DLOCK_LOST_DELETED;
  return reply != 0 ? DLOCK_LOST_TAKEN : DLOCK_LOST_EXPIRED;
}

/* 'failovers': dlock__failovers() read before the acquire was sent, so a
 * switch between the send and the reply counts as a failover of this hold. */
static void set_held(dlock_mutex *m, uint64_t fence, int64_t lease, dlock_mono_ms start, uint64_t failovers) {
  pthread_mutex_lock(&m->mu);
  m->fence = fence;
  m->lease_ms = lease;
  m->watchdog_mode = m->opts.lease_ms == 0;
  m->acquired_at = start;
  m->valid_until = dlock__valid_until(start, lease);
  m->renew_tried = 0;
  m->failovers_at_acquire = failovers;
  m->hold_count = 1;
  pthread_mutex_unlock(&m->mu);
}

/* Stop trying: leave the queue and take back a hand-off that may have come.
 * If that cleanup cannot be confirmed, the key may hold our token, so the
 * answer is DLOCK_EUNKNOWN rather than 'status' (which says "not acquired"). */
static int give_up(dlock_mutex *m, int64_t lease, int status) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  if (undo_acquire(m) == 0) return dlock__error(status, "%s", saved);
  char cleanup[512];
  snprintf(cleanup, sizeof cleanup, "%s", dlock_last_error());
  return dlock__error(DLOCK_EUNKNOWN, "%s; then the cleanup failed (%s), so the lock may be held by our "
                      "token until its lease (%lld ms) ends", saved, cleanup, (long long)lease);
}

/* Wait for a grant message, a cancel, or the re-check time. Returns 1 when
 * canceled. */
static int wait_for_wakeup(dlock_mutex *m, dlock_mono_ms until) {
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

/* The extend script with our token: *result 1 extended, 0 key gone, -1
 * another owner, -2 deleted by a forced release. */
static int extend_call(dlock_mutex *m, const char *token, const char *lease_s, long long *result) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__SCRIPT_EXTEND, m);
  call_arg(&call, token, strlen(token));
  call_arg(&call, lease_s, strlen(lease_s));
  /* Twice-safe: compare-and-pexpire. A second run sets the same lease from a
   * later moment (so a lease counted from the first send still holds), and
   * finds the key gone or another owner's only if it was so anyway: the
   * first run never deletes. */
  int rc = run_one(m, &call, &r);
  if (!rc) rc = reply_int(r, result);
  /* Extended on the master, but not acknowledged by the replicas asked for:
   * the new lease would not survive a failover, so it does not count. */
  if (!rc && *result == 1 && dlock__replicas_short(m->client, &call)) rc = DLOCK_EREPLICAS;
  dlock__reply_free(r);
  return rc;
}

static int acquire_loop(dlock_mutex *m, int64_t wait_ms, dlock_mono_ms deadline) {
  dlock_client *c = m->client;
  int64_t lease = m->opts.lease_ms ? m->opts.lease_ms : m->opts.watchdog_lease_ms;
  int queue = wait_ms != 0;
  char lease_s[24], cap_s[24], claim_s[24];
  format_i64(lease_s, sizeof lease_s, lease);
  format_i64(cap_s, sizeof cap_s, RECHECK_CAP_MS);
  format_i64(claim_s, sizeof claim_s, lease < CLAIM_MAX_MS ? lease : CLAIM_MAX_MS);
  m->waiter_id[0] = '\0';
  if (queue)
    snprintf(m->waiter_id, sizeof m->waiter_id, "%s:%s%" PRIu64, c->id, dlock__sharded_pubsub(c) ? "s" : "",
             (uint64_t)atomic_fetch_add(&c->waiter_seq, 1));
  int in_table = 0, queued = 0, rc;

  for (;;) {
    if (queue && !in_table) {
      dlock__subscriber_add_waiter(c, m);
      in_table = 1;
    }
    dlock__script_call call;
    dlock__reply *r = NULL;
    call_init(&call, DLOCK__SCRIPT_ACQUIRE, m);
    call_arg(&call, m->token, strlen(m->token));
    call_arg(&call, lease_s, strlen(lease_s));
    call_arg(&call, m->waiter_id, strlen(m->waiter_id));
    call_arg(&call, cap_s, strlen(cap_s));
    call_arg(&call, claim_s, strlen(claim_s));
    call_arg(&call, m->owner_info, strlen(m->owner_info));
    uint64_t failovers = dlock__failovers(c->topo, m->keys.key[DLOCK__K_LOCK], m->keys.len[DLOCK__K_LOCK]);
    dlock_mono_ms sent = dlock_mono_now();
    /* Twice-safe: the same token finds the key ours on a second run and
     * answers {1, fence of this hold} after refreshing the lease; a queued
     * waiter stays queued once (ZADD NX). The lease is counted from the
     * first send, which is earlier than either run. */
    rc = run_one(m, &call, &r);
    if ((rc == DLOCK_EBUSY || rc == DLOCK_EQUORUM) && c->topo->quorum_run && !call.maybe_ran) {
      /* Redlock (topo_redlock.c) answers for the quorum and has cleaned up
       * every node: independent nodes keep no shared wait queue, so a
       * waiter tries again after a random delay (20..200 ms) within its wait. */
      dlock_mono_ms now = dlock_mono_now();
      if (!queue) break;
      if (now >= deadline) {
        dlock__error_prefix("for the whole wait (%lld ms): ", (long long)wait_ms);
        break;
      }
      char rnd[5];
      int64_t delay = 20;
      if (dlock__random_hex(rnd, 2) == 0) delay += strtol(rnd, NULL, 16) % 181;
      if (wait_for_wakeup(m, now + delay < deadline ? now + delay : deadline)) {
        rc = dlock__error(DLOCK_ECANCELED, "wait canceled");
        break;
      }
      continue;
    }
    if (rc) {
      /* If this call may have run, or an earlier one queued us (a hand-off
       * may have come since), the key may hold our token: clean up before
       * saying "not acquired". */
      if (call.maybe_ran || queued) {
        rc = give_up(m, lease, rc);
        if (rc != DLOCK_EUNKNOWN) dlock__error_prefix("not acquired (cleaned up): ");
      }
      break;
    }
    /* {1, fence as a decimal string} or {0, the holder's pttl} */
    long long got = -1, value = 0;
    uint64_t fence = 0;
    if (r->type == DLOCK__REPLY_ARRAY && r->elements == 2 && r->element[0]->type == DLOCK__REPLY_INTEGER) {
      got = r->element[0]->integer;
      const dlock__reply *v = r->element[1];
      /* 0: the key is ours but no fence is recorded for the hold (its meta
       * hash was deleted): no hold without a fence a guard can order. */
      if (got == 1 && (v->type != DLOCK__REPLY_STRING || dlock__parse_fence(v->str, v->len, &fence) != 0 ||
                       fence == 0))
        got = -2;
      else if (got == 0 && v->type == DLOCK__REPLY_INTEGER)
        value = v->integer;
      else if (got != 1)
        got = -1;
    }
    if (got < 0) {
      if (got == -2)
        dlock__error(DLOCK_EFENCE, "acquire script: the lock is ours, but its fence in '%s' is %.40s, not an "
                     "integer in 1..2^63-1; so it is given back. Delete that key once the lock is free",
                     m->keys.key[DLOCK__K_META], r->element[1]->type == DLOCK__REPLY_STRING ? r->element[1]->str : "?");
      dlock__reply_free(r);
      if (got == -2) {
        rc = give_up(m, lease, DLOCK_EFENCE);
      } else {
        rc = dlock__error(DLOCK_EPROTO, "acquire script gave an unexpected reply");
      }
      break;
    }
    dlock__reply_free(r);
    if (got == 1 && dlock__replicas_short(c, &call)) {
      /* Fail closed: a lock the replicas may not have would not survive a
       * failover. Undo it (or say the outcome is unknown). */
      rc = give_up(m, lease, DLOCK_EREPLICAS);
      if (rc != DLOCK_EUNKNOWN) dlock__error_prefix("acquired on the master but released again: ");
      break;
    }
    if (got == 1) {
      set_held(m, fence, lease, sent, failovers);
      rc = 0;
      break;
    }
    if (!queue) {
      rc = dlock__error(DLOCK_EBUSY, "held by another owner");
      break;
    }
    queued = 1;
    if (!m->watch_tried) {
      /* First wait on this handle: subscribe, then look again at once, since
       * a hand-off sent before the subscription took effect went unheard. */
      dlock__subscriber_watch(c, m);
      continue;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (now >= deadline) {
      dlock__error(DLOCK_EBUSY, "held by another owner for the whole wait (%lld ms)", (long long)wait_ms);
      rc = give_up(m, lease, DLOCK_EBUSY);
      break;
    }
    /* PTTL 0 (about to expire) or -2 (just gone): look again at once. */
    int64_t recheck = value != -1 && value < RECHECK_CAP_MS ? (value > 0 ? value + 1 : 1) : RECHECK_CAP_MS;
    dlock_mono_ms until = now + recheck < deadline ? now + recheck : deadline;
    if (wait_for_wakeup(m, until)) {
      dlock__error(DLOCK_ECANCELED, "wait canceled");
      rc = give_up(m, lease, DLOCK_ECANCELED);
      break;
    }
    /* Woken by a grant message (or the re-check time): a release may have
     * handed the lock to us with a short claim lease. The acquire script
     * confirms it (it finds our token and sets the full lease) and answers
     * the fence Redis recorded for this hold. Not the fence in the message:
     * a waiter handed the lock twice in one acquire (the first claim ran out
     * before it confirmed) may read the older message's fence. If the claim
     * ran out, the same call takes the lock or queues us again. */
  }
  if (in_table) dlock__subscriber_remove_waiter(c, m);
  return rc;
}

int dlock_mutex_acquire(dlock_mutex *m, int64_t wait_ms) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_acquire: handle is NULL");
  if (wait_ms != DLOCK_WAIT_FOREVER) {
    int rc = dlock__check_duration("wait_ms", wait_ms, 1);
    if (rc) return fail(m, rc, "acquire");
  }
  if (atomic_load(&m->client->closing)) return fail(m, dlock__error(DLOCK_ECLOSED, "client is closing"), "acquire");
  pthread_t self = pthread_self();
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;

  pthread_mutex_lock(&m->mu);
  if (m->busy && pthread_equal(m->owner, self)) {
    if (m->hold_count == 0) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_EINVAL, "acquire called again while this thread is acquiring"),
                  "acquire");
    }
    dlock_lost_reason why = dlock__mutex_check_deadline(m, dlock_mono_now());
    if (why != DLOCK_LOST_NONE) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_ELOST, "re-entry refused: the lock was lost (%s); release it and "
                                  "acquire again", dlock_lost_reason_str(why)), "acquire");
    }
    m->hold_count++;
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  /* Another thread of ours holds it through this handle: wait for it locally. */
  unsigned gen = m->cancel_gen;
  while (m->busy) {
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    if (m->cancel_gen != gen) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_ECANCELED, "wait canceled"), "acquire");
    }
    if (wait_ms == 0 ||
        (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT && m->busy)) {
      pthread_mutex_unlock(&m->mu);
      return fail(m, dlock__error(DLOCK_EBUSY, "held by another thread of this process"), "acquire");
    }
  }
  m->busy = 1;
  m->owner = self;
  m->hold_count = 0;
  m->wait_gen = gen;
  m->woken = 0;
  atomic_store(&m->lost, DLOCK_LOST_NONE);
  if (m->lost_fd >= 0) {
    uint64_t drain;
    ssize_t n = read(m->lost_fd, &drain, sizeof drain);
    (void)n; /* EAGAIN when it was not readable */
  }
  pthread_mutex_unlock(&m->mu);

  int rc = dlock__random_hex(m->token, DLOCK__TOKEN_HEX / 2);
  if (!rc) rc = acquire_loop(m, wait_ms, deadline);
  if (!rc) rc = dlock__watchdog_add(m->client, m);
  if (rc) {
    pthread_mutex_lock(&m->mu);
    int was_held = m->hold_count > 0;
    pthread_mutex_unlock(&m->mu);
    if (was_held) { /* the watchdog could not start: do not keep an unguarded lock */
      char saved[1024];
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      undo_acquire(m);
      dlock__error(rc, "%s", saved);
    }
    pthread_mutex_lock(&m->mu);
    m->busy = 0;
    m->hold_count = 0;
    m->fence = 0;
    m->valid_until = 0;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (rc != DLOCK_EBUSY) return fail(m, rc, "acquire");
    pthread_mutex_lock(&m->mu); /* "busy" is an expected answer: no context prefix */
    snprintf(m->errmsg, sizeof m->errmsg, "%s", dlock_last_error());
    pthread_mutex_unlock(&m->mu);
    return rc;
  }
  return 0;
}

void dlock_mutex_cancel(dlock_mutex *m) {
  if (!m) return;
  pthread_mutex_lock(&m->mu);
  /* Every wait that began before this call ends; later ones are unaffected. */
  m->cancel_gen++;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
}

/* ---- Release, extend, queries ---- */

int dlock_mutex_release(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_release: handle is NULL");
  pthread_mutex_lock(&m->mu);
  if (!m->busy || m->hold_count == 0 || !pthread_equal(m->owner, pthread_self())) {
    pthread_mutex_unlock(&m->mu);
    return fail(m, dlock__error(DLOCK_ENOTHELD, "this thread does not hold it"), "release");
  }
  /* A hold lost at its deadline stays lost, even if Redis still had our key. */
  dlock_lost_reason lost = dlock__mutex_check_deadline(m, dlock_mono_now());
  if (--m->hold_count > 0) {
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  pthread_mutex_unlock(&m->mu);

  /* Stop renewal first, so that no renewal is in flight past the delete. */
  dlock__watchdog_remove(m->client, m);
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__SCRIPT_RELEASE, m);
  call_arg(&call, m->token, strlen(m->token));
  pthread_mutex_lock(&m->mu);
  dlock_mono_ms valid_until = m->valid_until;
  pthread_mutex_unlock(&m->mu);
  /* Twice-safe with one question: if the first run's reply was lost, a second
   * run that finds the key gone (0) or handed on (-1) cannot tell whether our
   * first run deleted it or the lease ran out. Answered without any extra
   * Redis call on the normal path: if the second answer arrived before our
   * local deadline, the lease had not run out when the second run looked, so
   * the key went by our first release (docs/design.md, "Lost replies"). */
  int rc = run_one(m, &call, &r);
  long long v = 0;
  if (!rc) rc = reply_int(r, &v);
  dlock__reply_free(r);
  if (!rc && v != 1 && v != -2 && call.resent) { /* -2: a tombstone, never ours */
    if (atomic_load(&m->lost) == DLOCK_LOST_NONE && valid_until != 0 && dlock_mono_now() < valid_until)
      v = 1;
    else
      rc = dlock__error(DLOCK_EUNKNOWN, "the reply to the release was lost, and when it was sent again the "
                        "key %s and our lease had run out: whether our release or the lease ended the hold "
                        "is unknown; nothing of another owner was touched",
                        v == 0 ? "was gone" : "belonged to another owner");
  }
  if (rc && rc != DLOCK_EUNKNOWN && call.maybe_ran) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    rc = dlock__error(DLOCK_EUNKNOWN, "release sent twice and no reply came (%s): it may have run; if it did "
                      "not, the key expires with its lease", saved);
  } else if (!rc && v == -2)
    rc = dlock__error(DLOCK_ENOTHELD, "another client had deleted the key with a forced release; nothing was "
                      "deleted");
  else if (!rc && v == 0)
    rc = dlock__error(DLOCK_ENOTHELD, "the key was gone (the lease had expired); nothing was deleted");
  else if (!rc && v < 0)
    rc = dlock__error(DLOCK_ENOTHELD, "another owner holds it now (our lease had expired); their key was "
                      "left untouched");
  else if (!rc && lost != DLOCK_LOST_NONE)
    rc = dlock__error(DLOCK_ENOTHELD, "the hold had been lost before this release (%s); the key still held "
                      "our token and was deleted", dlock_lost_reason_str(lost));
  else if (rc)
    dlock__error_prefix("release not confirmed, the key expires with its lease: ");

  pthread_mutex_lock(&m->mu);
  m->busy = 0;
  m->fence = 0;
  m->valid_until = 0;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
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
    return fail(m, dlock__error(DLOCK_ENOTHELD, "the hold was lost (%s) and a lost hold stays lost; not "
                                "extended: release it and acquire again", dlock_lost_reason_str(lost)), "extend");
  char lease_s[24];
  format_i64(lease_s, sizeof lease_s, lease_ms);
  dlock_mono_ms sent = dlock_mono_now();
  long long v = 0;
  rc = extend_call(m, token, lease_s, &v);
  if (rc) {
    /* The extend may have run (a lost reply, replicas short): Redis may then
     * expire the key 'lease_ms' after it, sooner than our deadline if the
     * lease was shortened. Count the hold as ending at the earlier of both. */
    pthread_mutex_lock(&m->mu);
    dlock_mono_ms until = dlock__valid_until(sent, lease_ms);
    int moved = m->valid_until != 0 && until < m->valid_until;
    if (moved) m->valid_until = until;
    pthread_mutex_unlock(&m->mu);
    if (moved) dlock__watchdog_rearm(m->client, m, sent, lease_ms);
    return fail(m, rc, "extend");
  }
  if (v != 1) {
    pthread_mutex_lock(&m->mu);
    dlock_lost_reason why = dlock__lost_reason(m, v);
    dlock__mutex_mark_lost(m, why);
    pthread_mutex_unlock(&m->mu);
    return fail(m, dlock__error(DLOCK_ENOTHELD, "%s; not extended (an expired lock is never re-created)",
                                why == DLOCK_LOST_FAILOVER ? "the Redis master failed over and the new one does "
                                "not hold this lock"
                                : v == 0  ? "the key is gone"
                                : v == -2 ? "another client deleted the key with a forced release"
                                          : "another owner holds it now"),
                "extend");
  }
  pthread_mutex_lock(&m->mu);
  int counts = dlock__mutex_renewed(m, sent, lease_ms, dlock_mono_now());
  if (counts && !m->watchdog_mode) m->lease_ms = lease_ms;
  lost = (dlock_lost_reason)atomic_load(&m->lost);
  pthread_mutex_unlock(&m->mu);
  if (!counts)
    return fail(m, dlock__error(DLOCK_ENOTHELD, "the hold was lost (%s) before the extend's reply came; "
                                "release it and acquire again", dlock_lost_reason_str(lost)), "extend");
  dlock__watchdog_rearm(m->client, m, sent, lease_ms);
  return 0;
}

static int info_call(dlock_mutex *m, const char *token, dlock__reply **out) {
  dlock__script_call call;
  call_init(&call, DLOCK__SCRIPT_INFO, m);
  call_arg(&call, token, strlen(token));
  int rc = run_one(m, &call, out); /* read only: asking again is safe */
  if (!rc && ((*out)->type != DLOCK__REPLY_ARRAY || (*out)->elements != 8)) {
    dlock__reply_free(*out);
    *out = NULL;
    rc = dlock__error(DLOCK_EPROTO, "info script gave an unexpected reply");
  }
  return rc;
}

int dlock_mutex_is_held(dlock_mutex *m) {
  dlock__error_clear();
  if (!m) return dlock__error(DLOCK_EINVAL, "dlock_mutex_is_held: handle is NULL");
  char token[sizeof m->token];
  if (held_token(m, token) != 0) return 0;
  dlock__reply *r;
  int rc = info_call(m, token, &r);
  if (rc) return fail(m, rc, "is_held");
  int mine = r->element[7]->integer == 1;
  dlock__reply_free(r);
  return mine;
}

int dlock_mutex_remaining(dlock_mutex *m, int64_t *ttl_ms) {
  dlock__error_clear();
  if (!m || !ttl_ms) return dlock__error(DLOCK_EINVAL, "dlock_mutex_remaining: NULL argument");
  char token[sizeof m->token];
  int rc = held_token(m, token);
  if (rc) return fail(m, rc, "remaining");
  dlock__reply *r;
  if ((rc = info_call(m, token, &r))) return fail(m, rc, "remaining");
  int mine = r->element[7]->integer == 1;
  *ttl_ms = r->element[1]->integer;
  dlock__reply_free(r);
  if (!mine) return fail(m, dlock__error(DLOCK_ENOTHELD, "Redis no longer holds our token"), "remaining");
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
                        dlock_lost_reason_str(lost));
  if (rel == DLOCK_ENOTHELD)
    return dlock__error(DLOCK_ELOST, "lock '%s' was no longer held at release: its lease ran out while "
                        "the function ran", name);
  return result;
}
