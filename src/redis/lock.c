/*
 * lock.c - the Redis backend's lock operations: acquire with a lease, queue
 * and wait for a hand-off, compare-and-delete release, extend, and the
 * watchdog's batched renewal (dlock__redis_ops in backend.c).
 *
 * One machine for every kind of lock (mutex, semaphore, both sides of a
 * read-write lock): a kind is a descriptor (kinds.c) that names its scripts,
 * builds its acquire arguments and words its messages; the loop, the reply
 * decoding and the clean-up are here, once. All Redis work is one script
 * call per step (src/redis/lua/). Waiting is driven by grant messages from
 * waiters.c, with a bounded re-check so that a lost message or a crashed
 * holder never strands a waiter. The handle's reentrancy, loss state and
 * watchdog are the core's (core/mutex.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

/* A waiter re-checks the lock at least this often, even with no message. */
#define RECHECK_CAP_MS 2000
/* A hand-off gives the next waiter this long (at most) to confirm the grant
 * before the lock frees itself: a waiter that died meanwhile costs no more.
 * Longer than RECHECK_CAP_MS, so that a waiter that missed the message
 * still finds the lock handed to it at its next re-check. */
#define CLAIM_MAX_MS 3000

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

/* A call of the handle's kind's script for 'op' on the lock's keys. */
static void call_init(dlock__script_call *call, dlock__lock_op op, const dlock_mutex *m) {
  memset(call, 0, sizeof *call);
  call->script = dlock__redis_kind_of(m)->script[op];
  dlock__script_call_keys(call, &dlock__rm(m)->keys);
  call->node = dlock__rm(m)->node;
}

/* ---- Script calls ---- */

/* Run one script call on the lock's node; map error replies to statuses.
 * Every script called here (acquire, release, extend, withdraw, info) is safe
 * to run twice with the same arguments, each for the reason given where it
 * is called, so a lost reply is answered by sending it once more
 * (dlock__script_run_twice_safe; docs/design.md, "Lost replies"). */
static int run_one(dlock_mutex *m, dlock__script_call *call, dlock__reply **out) {
  return dlock__redis_kind_run(m->client, m->name, &dlock__rm(m)->keys, dlock__redis_kind_of(m), call, out);
}

static int reply_int(const dlock__reply *r, long long *v) {
  if (r->type == DLOCK__REPLY_INTEGER) {
    *v = r->integer;
    return 0;
  }
  return dlock__error(DLOCK_EPROTO, "expected an integer reply");
}

/* A failure that says the server is away for a moment (busy with a
 * script, loading, failing over, restarting), not that the call is wrong. */
static int server_away(int rc) { return rc == DLOCK_ENOTREADY || rc == DLOCK_ECONNECT || rc == DLOCK_EIO; }

/* ---- Handles ---- */

/* The subscriber's wake-up of a waiting handle (waiters.c, under its
 * lock). Redlock: the grant messages of enough nodes (grants_needed) wake
 * it. A message that names the acquire call now answered (its nonce)
 * records its fence: the waiter may then return without a confirming call
 * (take_handoff). An older grant's message wakes it only. */
static void wake_handle(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all) {
  dlock_mutex *m = t->arg;
  dlock__rmutex *rm = dlock__rm(m);
  pthread_mutex_lock(&m->mu);
  if (all || ++rm->grants >= rm->grants_needed) {
    if (!all && nonce != 0 && fence != 0 && nonce == rm->grant_nonce) rm->grant_fence = fence;
    m->woken = 1;
    pthread_cond_broadcast(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
}

/* A forced release of a name this handle holds (the holder channel's
 * "forced", waiters.c, under its lock), or the channel subscribed again
 * after a gap (the message may have come in it): the watchdog checks every
 * hold now and reports this one lost (deleted) at once, not at its next
 * renewal. Other wakes (a connection lost or opened) are for waiters. */
static void wake_holder(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all) {
  (void)fence, (void)nonce;
  dlock_mutex *m = t->arg;
  if ((!all || all == DLOCK__WAKE_RESUBSCRIBED) && !atomic_load(&m->client->closing)) dlock__watchdog_poke(m->client);
}

/* "{K}<suffix>": a channel in the lock's slot (malloc'd; NULL: no memory). */
static char *lock_channel(const dlock__rmutex *rm, const char *suffix, size_t *len) {
  *len = rm->keys.len[DLOCK__K_LOCK] + 2 + strlen(suffix);
  char *ch = malloc(*len + 1);
  if (ch) snprintf(ch, *len + 1, "{%s}%s", rm->keys.key[DLOCK__K_LOCK], suffix);
  return ch;
}

int dlock__redis_lock_new(dlock_mutex *m) {
  dlock_client *c = m->client;
  dlock__rmutex *rm = calloc(1, sizeof *rm);
  if (!rm) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__lock_keys_init(&rm->keys, c, m->name);
  if (!rc) {
    const char *suffix = ":w:";
    size_t base = rm->keys.len[DLOCK__K_LOCK];
    dlock__sub_target *t = &rm->target;
    t->channel_len = base + 2 + strlen(suffix) + strlen(c->id);
    t->waiter_id = rm->waiter_id;
    t->wake = wake_handle;
    t->arg = m;
    if ((t->channel = malloc(t->channel_len + 1)))
      snprintf(t->channel, t->channel_len + 1, "{%s}%s%s", rm->keys.key[DLOCK__K_LOCK], suffix, c->id);
    else
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  if (!rc) { /* every kind: force_release.lua tells a read-write lock's holders too */
    dlock__sub_target *h = &rm->holder;
    h->waiter_id = "forced"; /* force_release.lua's message */
    h->wake = wake_holder;
    h->arg = m;
    if (!(h->channel = lock_channel(rm, ":f", &h->channel_len))) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  if (rc) {
    free(rm->target.channel);
    dlock__lock_keys_clear(&rm->keys);
    free(rm);
    return rc;
  }
  m->be = rm;
  return 0;
}

void dlock__redis_lock_free(dlock_mutex *m) {
  dlock__rmutex *rm = dlock__rm(m);
  if (!rm) return;
  dlock__subscriber_unwatch(m->client, &rm->target);
  if (rm->holder.channel) {
    dlock__subscriber_remove_waiter(m->client, &rm->holder);
    dlock__subscriber_unwatch(m->client, &rm->holder);
  }
  dlock__lock_keys_clear(&rm->keys);
  free(rm->target.channel);
  free(rm->holder.channel);
  free(rm);
  m->be = NULL;
}

/* ---- Acquire ---- */

static void format_i64(char *buf, size_t len, int64_t v) { snprintf(buf, len, "%" PRId64, v); }

/* Best-effort undo of an acquire whose outcome we do not know: leave the
 * queue and end a hold of our token if one was granted. 0 when that worked. */
static int undo_acquire(dlock_mutex *m) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__OP_WITHDRAW, m);
  call_arg(&call, dlock__rm(m)->waiter_id, strlen(dlock__rm(m)->waiter_id));
  call_arg(&call, m->token, strlen(m->token));
  /* Twice-safe: a second run finds our id gone from the queue and the key
   * not ours (the first deleted it or handed it on), and changes nothing. */
  int rc = run_one(m, &call, &r);
  dlock__reply_free(r);
  return rc;
}

dlock_lost_reason dlock__lost_reason(dlock_mutex *m, long long reply) {
  const dlock__lock_keys *k = &dlock__rm(m)->keys;
  if (dlock__failovers(dlock__topo(m->client), k->key[DLOCK__K_LOCK], k->len[DLOCK__K_LOCK]) !=
      dlock__rm(m)->failovers_at_acquire)
    return DLOCK_LOST_FAILOVER;
  if (reply == -2) return DLOCK_LOST_DELETED;
  return reply != 0 ? DLOCK_LOST_TAKEN : DLOCK_LOST_EXPIRED;
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
  return dlock__error(DLOCK_EUNKNOWN, "%s; then the cleanup failed (%s), so %s until its lease (%lld ms) ends", saved,
                      cleanup, dlock__redis_kind_of(m)->left_behind, (long long)lease);
}

/* The extend script with our token: *result 1 extended, 0 key gone, -1
 * another owner, -2 deleted by a forced release. */
static int extend_call(dlock_mutex *m, const char *token, const char *lease_s, long long *result) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__OP_EXTEND, m);
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

/* Woken by a grant message that names the acquire call sent at 'sent' (its
 * nonce; waiters.c records the fence only then): the lock is already ours,
 * under the claim lease the release set, so return without a confirming
 * call. The grant ran after that call wrote our queue record, so after
 * 'sent': a deadline counted from 'sent' ends before the claim does. The
 * watchdog sets the full lease at a third of the claim (it renews a claim
 * even of a fixed lease once). 1 when taken; 0: confirm with a call (no
 * such message; replicas must acknowledge the hold; a failover since the
 * call; or too little of the claim left to be of use). See docs/design.md,
 * "Hand-off without a confirming call". */
static int take_handoff(dlock_mutex *m, int64_t lease, dlock_mono_ms sent, uint64_t failovers, dlock__grant *grant) {
  dlock_client *c = m->client;
  dlock__rmutex *rm = dlock__rm(m);
  pthread_mutex_lock(&m->mu);
  uint64_t fence = rm->grant_fence;
  pthread_mutex_unlock(&m->mu);
  if (!fence || dlock__topo(c)->wait_replicas > 0 || dlock__topo(c)->quorum_run ||
      dlock__failovers(dlock__topo(c), rm->keys.key[DLOCK__K_LOCK], rm->keys.len[DLOCK__K_LOCK]) != failovers)
    return 0;
  int64_t claim = lease < CLAIM_MAX_MS ? lease : CLAIM_MAX_MS;
  dlock_mono_ms valid_until = dlock__valid_until(sent, claim);
  if (valid_until - dlock_mono_now() < claim / 3) return 0;
  rm->failovers_at_acquire = failovers;
  grant->fence = fence;
  grant->lease_ms = lease;
  grant->start = sent;
  grant->valid_until = valid_until;
  grant->claim_ms = claim < lease ? claim : 0;
  return 1;
}

/* The acquire script's answer for 'kind' (dlock__grant_decode): 1 with
 * '*fence', 0 with the holder's '*pttl', or an error (the answer freed). */
static int decode_acquire(dlock_mutex *m, int64_t lease, dlock__reply *r, uint64_t *fence, long long *pttl) {
  const dlock__redis_kind *kind = dlock__redis_kind_of(m);
  int got = dlock__grant_decode(r, fence, pttl);
  /* Fence 0: the key is ours but no fence is recorded for the hold (its
   * record in the counter was overwritten or deleted): no hold without a
   * fence a guard can order. */
  if (got == DLOCK__GRANT_OK && *fence == 0) got = DLOCK__GRANT_NOFENCE;
  if (got == DLOCK__GRANT_NOFENCE)
    dlock__error(DLOCK_EFENCE,
                 "%s script: the hold is ours, but no fence is recorded for it in '%s' (the answer "
                 "was '%.40s', not an integer in 1..2^63-1), so it is given back. Acquire it again: a new hold "
                 "records its fence",
                 dlock__script_name(kind->script[DLOCK__OP_ACQUIRE]), dlock__rm(m)->keys.key[kind->fence_key],
                 r->element[1]->type == DLOCK__REPLY_STRING ? r->element[1]->str : "?");
  dlock__reply_free(r);
  if (got == DLOCK__GRANT_NOFENCE) return give_up(m, lease, DLOCK_EFENCE);
  if (got == DLOCK__GRANT_BAD)
    return dlock__error(DLOCK_EPROTO, "%s script gave an unexpected reply",
                        dlock__script_name(kind->script[DLOCK__OP_ACQUIRE]));
  return got;
}

int dlock__redis_acquire(dlock_mutex *m, int64_t lease, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *grant) {
  dlock_client *c = m->client;
  dlock__rmutex *rm = dlock__rm(m);
  const dlock__redis_kind *kind = dlock__redis_kind_of(m);
  dlock__acquire_try t;
  memset(&t, 0, sizeof t);
  t.queue = wait_ms != 0;
  char lease_s[24], cap_s[24], claim_s[24], nonce_s[24];
  format_i64(lease_s, sizeof lease_s, lease);
  format_i64(cap_s, sizeof cap_s, RECHECK_CAP_MS);
  format_i64(claim_s, sizeof claim_s, lease < CLAIM_MAX_MS ? lease : CLAIM_MAX_MS);
  t.lease_s = lease_s;
  t.cap_s = cap_s;
  t.claim_s = claim_s;
  t.nonce_s = nonce_s;
  rm->waiter_id[0] = '\0';
  if (t.queue)
    snprintf(rm->waiter_id, sizeof rm->waiter_id, "%s:%s%" PRIu64, c->id, dlock__sharded_pubsub(c) ? "s" : "",
             (uint64_t)atomic_fetch_add(&dlock__rc(c)->waiter_seq, 1));
  int in_table = 0, queued = 0, rc;

  for (;;) {
    if (t.queue && !in_table) {
      dlock__subscriber_add_waiter(c, &rm->target);
      in_table = 1;
    }
    dlock__script_call call;
    dlock__reply *r = NULL;
    nonce_s[0] = '\0';
    if (t.queue) {
      /* A new nonce per call: a grant message that names it answers this
       * call and no earlier one (take_handoff). */
      pthread_mutex_lock(&m->mu);
      rm->grant_nonce = ++rm->nonce_seq;
      rm->grant_fence = 0;
      rm->grants = 0;
      format_i64(nonce_s, sizeof nonce_s, (int64_t)rm->grant_nonce);
      pthread_mutex_unlock(&m->mu);
    }
    call_init(&call, DLOCK__OP_ACQUIRE, m);
    kind->acquire_args(m, &call, &t);
    uint64_t failovers = dlock__failovers(dlock__topo(c), rm->keys.key[DLOCK__K_LOCK], rm->keys.len[DLOCK__K_LOCK]);
    dlock_mono_ms sent = dlock_mono_now();
    /* Twice-safe: the same token finds the key ours (or among the holders)
     * on a second run and answers {1, fence of this hold} after refreshing
     * the lease; a queued waiter stays queued once (ZADD NX). The lease is
     * counted from the first send, which is earlier than either run. */
    rc = run_one(m, &call, &r);
    if ((rc == DLOCK_EBUSY || rc == DLOCK_EQUORUM) && dlock__topo(c)->quorum_run && !call.maybe_ran) {
      /* Redlock (topo_redlock.c) answers for the quorum, has taken our
       * token back everywhere and queued a waiter on the nodes held by
       * others; their releases hand over and publish there. Wait for the
       * messages of enough nodes to make a majority (call.rl_need), or the
       * re-check; after a split between contenders no release is coming:
       * retry after a random delay (20..200 ms) to break the tie. */
      if (!t.queue) break;
      queued = 1;
      pthread_mutex_lock(&m->mu);
      rm->grants_needed = call.rl_need;
      if (call.rl_need > 0 && rm->grants >= call.rl_need) m->woken = 1; /* they came during the call */
      pthread_mutex_unlock(&m->mu);
      if (!rm->target.watch_tried) {
        dlock__subscriber_watch(c, &rm->target);
        continue;
      }
      dlock_mono_ms now = dlock_mono_now();
      if (now >= deadline) {
        dlock__error_prefix("for the whole wait (%lld ms): ", (long long)wait_ms);
        rc = give_up(m, lease, rc);
        break;
      }
      int64_t delay = call.rl_pttl >= 0 && call.rl_pttl < RECHECK_CAP_MS ? call.rl_pttl + 1 : RECHECK_CAP_MS;
      char rnd[5];
      if (call.rl_tie) delay = 20 + (dlock__random_hex(rnd, 2) == 0 ? strtol(rnd, NULL, 16) % 181 : 0);
      if (dlock__mutex_wait(m, now + delay < deadline ? now + delay : deadline)) {
        dlock__error(DLOCK_ECANCELED, "wait canceled");
        rc = give_up(m, lease, DLOCK_ECANCELED);
        break;
      }
      continue;
    }
    if (rc && !call.maybe_ran && (queued ? server_away(rc) : t.queue && rc == DLOCK_ENOTREADY)) {
      /* A re-check in the wait that surely did not run (BUSY, LOADING, a
       * restart: no connection): the server is away for a moment, not the
       * lock for good. Go on waiting and look again (a hand-off published
       * meanwhile is found then); at the deadline, clean up as below.
       * Giving up now could not clean up either (the same server is away),
       * and would end a wait that has time left as "outcome unknown".
       * The first look of a wait, too, when the server said "not now"
       * (TRYAGAIN while a slot migrates, LOADING, BUSY): it did not run. */
      dlock_mono_ms now = dlock_mono_now();
      if (now < deadline) {
        dlock__error_clear();
        dlock_mono_ms until = now + RECHECK_CAP_MS < deadline ? now + RECHECK_CAP_MS : deadline;
        if (dlock__mutex_wait(m, until)) {
          dlock__error(DLOCK_ECANCELED, "wait canceled");
          rc = give_up(m, lease, DLOCK_ECANCELED);
          break;
        }
        continue;
      }
      dlock__error_prefix("for the whole wait (%lld ms), the last look failed: ", (long long)wait_ms);
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
    uint64_t fence = 0;
    long long pttl = -1;
    int got = decode_acquire(m, lease, r, &fence, &pttl);
    if (got < 0) {
      rc = got;
      break;
    }
    if (got == 1 && dlock__replicas_short(c, &call)) {
      /* Fail closed: a lock the replicas may not have would not survive a
       * failover. Undo it (or say the outcome is unknown). */
      rc = give_up(m, lease, DLOCK_EREPLICAS);
      if (rc != DLOCK_EUNKNOWN) dlock__error_prefix("acquired on the master but released again: ");
      break;
    }
    if (got == 1) {
      /* 'failovers' was read before the acquire was sent, so a switch
       * between the send and the reply counts as a failover of this hold. */
      rm->failovers_at_acquire = failovers;
      grant->fence = fence;
      grant->lease_ms = lease;
      grant->start = sent;
      grant->valid_until = dlock__valid_until(sent, lease);
      rc = 0;
      break;
    }
    if (!t.queue) {
      rc = dlock__error(DLOCK_EBUSY, "%s", kind->busy);
      break;
    }
    queued = 1;
    if (!rm->target.watch_tried) {
      /* First wait on this handle: subscribe, then look again at once, since
       * a hand-off sent before the subscription took effect went unheard. */
      dlock__subscriber_watch(c, &rm->target);
      continue;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (now >= deadline) {
      dlock__error(DLOCK_EBUSY, "%s for the whole wait (%lld ms)", kind->busy_wait, (long long)wait_ms);
      rc = give_up(m, lease, DLOCK_EBUSY);
      break;
    }
    /* Look again when the holder's lease (the earliest, for shared holds)
     * ends, at the latest after the cap; PTTL 0 (about to expire) or -2
     * (just gone): at once. */
    int64_t recheck = pttl != -1 && pttl < RECHECK_CAP_MS ? (pttl > 0 ? pttl + 1 : 1) : RECHECK_CAP_MS;
    dlock_mono_ms until = now + recheck < deadline ? now + recheck : deadline;
    if (dlock__mutex_wait(m, until)) {
      dlock__error(DLOCK_ECANCELED, "wait canceled");
      rc = give_up(m, lease, DLOCK_ECANCELED);
      break;
    }
    /* Woken by a grant message (or the re-check time): a release may have
     * handed the lock to us with a short claim lease. A message that names
     * this call (its nonce) completes the acquire at once. Otherwise the
     * acquire script confirms (it finds our token and sets the full lease)
     * and answers the fence Redis recorded for this hold, never an older
     * message's: a waiter handed the lock twice in one acquire (the first
     * claim ran out before it confirmed) may read that one. If the claim
     * ran out, the same call takes the lock or queues us again. A kind
     * whose wake-ups carry no fence (read-write) always confirms. */
    if (take_handoff(m, lease, sent, failovers, grant)) {
      rc = 0;
      break;
    }
  }
  if (in_table) dlock__subscriber_remove_waiter(c, &rm->target);
  if (rc == 0 && rm->holder.channel && m->opts.lease_ms == 0) {
    /* Listen for a forced release while held. Only once the hold is
     * granted: an acquire's calls (a lost reply's resend, its cleanup) have
     * the link to themselves, and a try that fails opens no pub/sub
     * connection. Only in watchdog mode: a fixed lease is watched at its
     * deadline alone, the message would have nothing to act on. The handle
     * is in the table until released; its first hold waits (up to the
     * command timeout) for the subscription, which then lasts as long as
     * the handle. A failure only leaves the news to the next renewal. */
    dlock__subscriber_add_waiter(c, &rm->holder);
    if (!rm->holder.watch_tried && dlock__subscriber_watch(c, &rm->holder)) dlock__error_clear(); /* acquired */
  }
  return rc;
}

void dlock__redis_undo(dlock_mutex *m) { undo_acquire(m); }

/* ---- Release, extend, renew, queries ---- */

int dlock__redis_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost) {
  if (dlock__rm(m)->holder.channel) dlock__subscriber_remove_waiter(m->client, &dlock__rm(m)->holder);
  dlock_lost_reason found = DLOCK_LOST_NONE;
  int rc = dlock__redis_release_token(m, m->token, valid_until, lost, dlock__rm(m)->failovers_at_acquire, &found);
  if (found != DLOCK_LOST_NONE) { /* the hold is still this handle's: keep the loss (dlock_mutex_lost) */
    pthread_mutex_lock(&m->mu);
    dlock__mutex_mark_lost(m, found);
    pthread_mutex_unlock(&m->mu);
  }
  return rc;
}

const char *dlock__release_failover_msg(long long v) {
  return v == 0 ? "the Redis master failed over since the lock was acquired, and the new master does not hold "
                  "it (the key is gone): the hold was lost at the failover (lost: failover), and another "
                  "holder may have overlapped it; nothing was deleted"
                : "the Redis master failed over since the lock was acquired, and the new master does not hold "
                  "it (another owner holds it now): the hold was lost at the failover (lost: failover), and "
                  "that holder may have overlapped it; their key was left untouched";
}

int dlock__redis_release_token(dlock_mutex *m, const char *token, dlock_mono_ms valid_until, dlock_lost_reason lost,
                               uint64_t failovers_at_acquire, dlock_lost_reason *found) {
  dlock__script_call call;
  dlock__reply *r = NULL;
  call_init(&call, DLOCK__OP_RELEASE, m);
  call_arg(&call, token, strlen(token));
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
    if (lost == DLOCK_LOST_NONE && valid_until != 0 && dlock_mono_now() < valid_until)
      v = 1;
    else
      rc = dlock__error(DLOCK_EUNKNOWN,
                        "the reply to the release was lost, and when it was sent again the "
                        "key %s and our lease had run out: whether our release or the lease ended the hold "
                        "is unknown; nothing of another owner was touched",
                        v == 0 ? "was gone" : "belonged to another owner");
  }
  if (rc && rc != DLOCK_EUNKNOWN && call.maybe_ran) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    rc = dlock__error(DLOCK_EUNKNOWN,
                      "release sent twice and no reply came (%s): it may have run; if it did "
                      "not, the key expires with its lease",
                      saved);
  } else if (!rc && v == -2)
    rc = dlock__error(DLOCK_ENOTHELD, "another client had deleted the key with a forced release; nothing was "
                                      "deleted");
  else if (!rc && (v == 0 || v == -1) && lost == DLOCK_LOST_NONE &&
           dlock__failovers(dlock__topo(m->client), dlock__rm(m)->keys.key[DLOCK__K_LOCK],
                            dlock__rm(m)->keys.len[DLOCK__K_LOCK]) != failovers_at_acquire) {
    /* Not the lease: the master changed since the acquire (issue 22 item 6,
     * a frozen old master whose hold the promoted replica never had), said
     * as the deployments' table says (docs/topologies.md). */
    rc = dlock__error(DLOCK_ENOTHELD, "%s", dlock__release_failover_msg(v));
    if (found) *found = DLOCK_LOST_FAILOVER;
  } else if (!rc && v == 0)
    rc = dlock__error(DLOCK_ENOTHELD, "%s", dlock__redis_kind_of(m)->release_gone);
  else if (!rc && v < 0)
    rc = dlock__error(DLOCK_ENOTHELD, "another owner holds it now (our lease had expired); their key was "
                                      "left untouched");
  else if (!rc && lost != DLOCK_LOST_NONE)
    rc = dlock__error(DLOCK_ENOTHELD,
                      "the hold had been lost before this release (%s); the key still held "
                      "our token and was deleted",
                      dlock_lost_reason_str(lost));
  else if (rc)
    dlock__error_prefix("release not confirmed, the key expires with its lease: ");
  return rc;
}

/* The message for a hold Redis no longer has ('v' as the extend script
 * answers), as DLOCK_ELOST with the reason in '*lost'. */
static int gone(dlock_mutex *m, long long v, dlock_lost_reason *lost) {
  *lost = dlock__lost_reason(m, v);
  return dlock__error(DLOCK_ELOST, "%s",
                      *lost == DLOCK_LOST_FAILOVER ? "the Redis master failed over and the new "
                                                     "one does not hold this lock"
                      : v == 0                     ? "the key is gone"
                      : v == -2                    ? "another client deleted the key with a forced release"
                                                   : "another owner holds it now");
}

int dlock__redis_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                        dlock_lost_reason *lost) {
  char lease_s[24];
  format_i64(lease_s, sizeof lease_s, lease_ms);
  *sent = dlock_mono_now();
  long long v = 0;
  int rc = extend_call(m, token, lease_s, &v);
  if (!rc && v != 1) rc = gone(m, v, lost);
  return rc;
}

/* The watchdog's batch: one pipeline of extend scripts (compare-and-pexpire:
 * an expired or re-taken lock is never revived) that gives up at 'limit'. */
void dlock__redis_renew(dlock_client *c, dlock__renewal *rn, size_t n, dlock_mono_ms limit) {
  dlock__script_call *calls = malloc(n * sizeof *calls);
  dlock__reply **replies = malloc(n * sizeof *replies);
  char(*lease_s)[24] = malloc(n * sizeof *lease_s);
  if (!calls || !replies || !lease_s) {
    for (size_t i = 0; i < n; i++) rn[i].status = DLOCK_ENOMEM;
    free(calls);
    free(replies);
    free(lease_s);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    format_i64(lease_s[i], sizeof lease_s[i], rn[i].lease_ms);
    call_init(&calls[i], DLOCK__OP_EXTEND, rn[i].m);
    call_arg(&calls[i], rn[i].token, strlen(rn[i].token));
    call_arg(&calls[i], lease_s[i], strlen(lease_s[i]));
  }
  dlock_mono_ms sent = dlock_mono_now();
  int rc = dlock__script_run_until(c, calls, n, replies, limit);
  for (size_t i = 0; i < n; i++) {
    dlock__renewal *r = &rn[i];
    r->sent = sent;
    const dlock__reply *rep = rc ? NULL : replies[i];
    if (!rep || rep->type != DLOCK__REPLY_INTEGER) {
      r->status = rc ? rc : DLOCK_EPROTO; /* unreachable or refused: tried again soon */
    } else if (rep->integer == 1) {
      /* A renewal the required replicas did not acknowledge does not count:
       * it is retried like an unreachable server (see docs/topologies.md). */
      r->status = dlock__replicas_short(c, &calls[i]) ? DLOCK_EREPLICAS : 0;
      r->valid_until = dlock__valid_until(sent, r->lease_ms);
    } else {
      r->status = DLOCK_ELOST;
      r->lost = dlock__lost_reason(r->m, rep->integer);
    }
    if (!rc) dlock__reply_free(replies[i]);
  }
  free(calls);
  free(replies);
  free(lease_s);
}

static int info_call(dlock_mutex *m, const char *token, dlock__reply **out) {
  const dlock__redis_kind *kind = dlock__redis_kind_of(m);
  dlock__script_call call;
  call_init(&call, DLOCK__OP_INFO, m);
  call_arg(&call, token, strlen(token));
  int rc = run_one(m, &call, out); /* read only: asking again is safe */
  /* A mutex's answer has 8 elements, a semaphore's 10, a read-write lock's
   * 12; the other kind's answer (info.lua answers for every kind) means
   * the name is no longer this handle's kind. */
  size_t want = kind->info_len;
  if (!rc && (*out)->type == DLOCK__REPLY_ARRAY && ((*out)->elements == 10 || (*out)->elements == 12) &&
      (*out)->elements != want) {
    rc = dlock__error(DLOCK_EWRONGTYPE,
                      "'%s' on %s is held as a %s now, not as a %s: a name is one kind of lock "
                      "at a time",
                      m->name, m->client->server, (*out)->elements == 10 ? "semaphore" : "read-write lock", kind->name);
  } else if (!rc && ((*out)->type != DLOCK__REPLY_ARRAY || (*out)->elements != want)) {
    rc = dlock__error(DLOCK_EPROTO, "%s script gave an unexpected reply", dlock__script_name(call.script));
  }
  if (rc && *out) {
    dlock__reply_free(*out);
    *out = NULL;
  }
  return rc;
}

int dlock__redis_held(dlock_mutex *m, const char *token, int64_t *ttl_ms) {
  const dlock__redis_kind *kind = dlock__redis_kind_of(m);
  dlock__reply *r;
  int rc = info_call(m, token, &r);
  if (rc) return rc;
  int mine = r->element[kind->info_mine]->integer == 1;
  if (ttl_ms) *ttl_ms = r->element[kind->info_ttl]->integer;
  dlock__reply_free(r);
  return mine;
}
