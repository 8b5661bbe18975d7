/*
 * redis_lock.h - the Redis backend's client and handle state, lock keys, the
 * subscriber (waiters.c) and the operations of dlock__redis_ops (backend.c).
 */
#ifndef DLOCK_REDIS_LOCK_H
#define DLOCK_REDIS_LOCK_H

#include "redis_scripts.h"

/* ---- Server checks (check.c) ---- */

/* At connect: read maxmemory-policy (INFO memory) and note a policy that can
 * evict lock keys in c->warnings. Never fails the connect. */
void dlock__check_at_connect(dlock_client *c);

/* ---- Subscriber (waiters.c) ---- */

/* What the subscriber wakes: a channel (where the wake-ups are published),
 * the waiter id a message names, and a callback. A lock handle's is in its
 * dlock__rmutex (lock.c), a latch's in its state (latch.c). */
typedef struct dlock__sub_target dlock__sub_target;
#define DLOCK__WAKE_RESUBSCRIBED 2 /* 'all' of a wake: subscribed again after a gap */
struct dlock__sub_target {
  char *channel;
  size_t channel_len;
  const char *waiter_id; /* matched whole against a message's first word */
  /* Called on the subscriber's thread, under its lock: a message naming
   * waiter_id, with its fence and nonce (0 when absent); or 'all' set (no
   * message) when every waiter must look again (a reconnect, a channel
   * that moved): DLOCK__WAKE_RESUBSCRIBED when a subscription came back
   * after a gap in which messages may have been missed. It must not call
   * the subscriber. */
  void (*wake)(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all);
  void *arg;
  int watch_tried; /* waiters.c: dlock__subscriber_watch() was called for it */
  int subscribed;  /* ... and it holds a reference on this many entries of the channel (Redlock: one per node) */
  int shard;       /* a sharded channel (SSUBSCRIBE) whatever the topology (the watch's, watch.c) */
};

/* Subscribe this client to 't's channel (once per target); waits up to
 * the command timeout for the confirmation. Failure is not fatal for the
 * caller: waits then fall back to re-checks. */
int dlock__subscriber_watch(dlock_client *c, dlock__sub_target *t);
void dlock__subscriber_unwatch(dlock_client *c, dlock__sub_target *t);
/* Make 't' findable by its waiter id for messages (while it waits). */
void dlock__subscriber_add_waiter(dlock_client *c, dlock__sub_target *t);
void dlock__subscriber_remove_waiter(dlock_client *c, dlock__sub_target *t);
void dlock__subscriber_stop(dlock_client *c);

/* ---- Lock keys and handles (lock.c) ---- */

/* The Redis keys of one lock, see docs/keys.md. */
enum { DLOCK__K_LOCK, DLOCK__K_FENCE, DLOCK__K_META, DLOCK__K_QUEUE, DLOCK__K_WAITERS, DLOCK__K_COUNT };

typedef struct dlock__lock_keys {
  char *key[DLOCK__K_COUNT];
  size_t len[DLOCK__K_COUNT];
} dlock__lock_keys;

int dlock__lock_keys_init(dlock__lock_keys *k, const dlock_client *c, const char *name);
void dlock__lock_keys_clear(dlock__lock_keys *k);
void dlock__script_call_keys(dlock__script_call *call, const dlock__lock_keys *k);

/* A lock handle's Redis state (m->be). */
typedef struct dlock__rmutex {
  dlock__lock_keys keys;
  /* What the subscriber wakes: this client's wake-up channel for this lock
   * (target.channel, owned here), the waiter id of the acquire in progress
   * and wake_handle (lock.c). */
  dlock__sub_target target;
  char waiter_id[48];
  /* While a mutex is held (lock.c): its name's "{K}:f" channel, on which a
   * forced release publishes "forced"; the message makes the watchdog check
   * every hold at once (dlock__watchdog_poke), which finds this one deleted. */
  dlock__sub_target holder;
  uint64_t failovers_at_acquire; /* dlock__failovers() for the lock key when the hold began */
  /* Hand-off without a confirming call (guarded by m->mu): the nonce of the
   * acquire call in flight or last answered, and the fence of a grant
   * message that named it (0: none came). waiters.c fills grant_fence. */
  uint64_t nonce_seq;
  uint64_t grant_nonce;
  uint64_t grant_fence;
  /* Redlock (guarded by m->mu): grant messages since the last acquire call
   * was sent, and how many wake the waiter (0 or 1: the first). A waiter
   * woken by one node's hand-off while the others still hold would fail its
   * quorum try, and giving that node back passes it to the next waiter in
   * its queue: the order of arrival would be lost. */
  int grants;
  int grants_needed;
  /* Set for a per-node probe (dlock_client_check_node): every script call
   * of this handle goes to this node alone, as to a single server. NULL:
   * the topology's routing (and Redlock's folds). */
  dlock__node *node;
} dlock__rmutex;

static inline dlock__rmutex *dlock__rm(const dlock_mutex *m) { return (dlock__rmutex *)m->be; }

/* Why a hold is gone when Redis says the key is gone (taken 0) or another
 * token's (taken 1), or the forced release's tombstone says it was deleted
 * (-2): FAILOVER when the topology saw a failover that may have moved the
 * lock key (Sentinel: the master; Cluster: the key's slot) since the hold
 * began. 'reply' is the extend/release script's answer. */
dlock_lost_reason dlock__lost_reason(dlock_mutex *m, long long reply);

/* ---- The operations of dlock__redis_ops (backend.c) ---- */

int dlock__redis_lock_new(dlock_mutex *m); /* lock.c */
void dlock__redis_lock_free(dlock_mutex *m);
int dlock__redis_acquire(dlock_mutex *m, int64_t lease, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *grant);
void dlock__redis_undo(dlock_mutex *m);
int dlock__redis_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost);
/* The same for the hold of 'token' (a pipelined release resent after
 * NOSCRIPT: the handle may have been acquired again since, by another thread),
 * acquired when dlock__failovers() was 'failovers_at_acquire': a hold the
 * master no longer has after a failover since then is reported as lost at
 * the failover, and '*found' (may be NULL) set to DLOCK_LOST_FAILOVER. */
int dlock__redis_release_token(dlock_mutex *m, const char *token, dlock_mono_ms valid_until, dlock_lost_reason lost,
                               uint64_t failovers_at_acquire, dlock_lost_reason *found);
/* The release's message for a hold lost at a failover; 'v' as release.lua answers (0 or -1). */
const char *dlock__release_failover_msg(long long v);
int dlock__redis_release_async(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost); /* pipeline.c */
void dlock__redis_release_collect(dlock_mutex *m);
/* At close: read every pending reply (outcomes to their handles), free. */
void dlock__pipeline_free(dlock_client *c);
int dlock__redis_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                        dlock_lost_reason *lost);
void dlock__redis_renew(dlock_client *c, dlock__renewal *rn, size_t n, dlock_mono_ms limit);
int dlock__redis_held(dlock_mutex *m, const char *token, int64_t *ttl_ms);
int dlock__redis_info(dlock_client *c, const char *name, dlock_lock_info *out); /* admin.c */
int dlock__redis_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
int dlock__redis_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *, void *), void *arg);
int dlock__redis_watch_open(dlock_watch *w); /* watch.c */
int dlock__redis_watch_add(dlock_watch *w, const char *name);
void dlock__redis_watch_close(dlock_watch *w);
int dlock__redis_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held);
int dlock__redis_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest);
int dlock__redis_check(dlock_client *c, dlock_check *out, int max); /* check.c */
/* The same for one node alone (NULL: the topology's), passed explicitly:
 * Redlock's per-node views (dlock_client_check_node, dlock_lock_info_get_node). */
int dlock__redis_check_at(dlock_client *c, dlock__node *at, dlock_check *out, int max);
int dlock__redis_info_at(dlock_client *c, dlock__node *at, const char *name, dlock_lock_info *out);
int dlock__redis_node_count(const dlock_client *c); /* topo_redlock.c */
const char *dlock__redis_node_name(const dlock_client *c, int i);
dlock__node *dlock__redlock_node(dlock_client *c, int i); /* the subscriber's homes (waiters.c) */
int dlock__redis_info_node(dlock_client *c, const char *name, int i, dlock_lock_info *out);
int dlock__redis_check_node(dlock_client *c, int i, dlock_check *out, int max);
int dlock__redis_sched_claim(dlock_client *c, dlock__claim *cl); /* sched.c */
int dlock__redis_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours);
void dlock__redis_sched_undo(dlock_client *c, const dlock__claim *cl);
int dlock__redis_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max);
int dlock__redis_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason,
                         const char *id); /* sched.c */
int dlock__redis_job_get(dlock_client *c, const char *job, dlock_job_state *out);
int dlock__redis_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle);
void dlock__redis_job_unwatch(dlock_client *c, void *handle);
int dlock__redis_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *),
                          void *arg); /* admin.c */

/* ---- Lock kinds (kinds.c): what a kind adds to the lock machine (lock.c) ---- */

/* The script calls the machine makes on a handle, each sent as the kind's script. */
typedef enum dlock__lock_op {
  DLOCK__OP_ACQUIRE,  /* {1, fence} or {0, pttl}: dlock__grant_decode */
  DLOCK__OP_RELEASE,  /* 1, 0 gone, -1 another owner's, -2 deleted (forced) */
  DLOCK__OP_EXTEND,   /* the same codes */
  DLOCK__OP_WITHDRAW, /* leave the queue; end a hold of our token */
  DLOCK__OP_INFO,     /* read only: the kind's status array */
  DLOCK__OP_COUNT
} dlock__lock_op;

/* One acquire try as the machine prepared it: the common arguments, and
 * room for the kind's own (which must live until the call is sent). */
typedef struct dlock__acquire_try {
  int queue; /* 1: the caller waits (a waiter id is set) */
  const char *lease_s, *cap_s, *claim_s, *nonce_s;
  char scratch[DLOCK__TOKEN_HEX + 24];
} dlock__acquire_try;

typedef struct dlock__redis_kind {
  const char *name; /* in messages: "mutex", "semaphore", "read-write lock" */
  dlock__script_id script[DLOCK__OP_COUNT];
  /* Append the acquire script's ARGV for one try (its KEYS are set); may
   * trim call->nkeys when the script reads fewer keys. */
  void (*acquire_args)(const dlock_mutex *m, dlock__script_call *call, dlock__acquire_try *t);
  /* A WRONGTYPE error not in the script's own words: the message, as
   * dlock__error(DLOCK_EWRONGTYPE, ...) returns it. 'name' is the lock's. */
  int (*wrongtype)(dlock_client *c, const char *name, const dlock__lock_keys *k, const struct dlock__redis_kind *kind,
                   const dlock__script_call *call, const char *err);
  /* The info script's answer: its length, and where 'ours' (1) and the TTL are. */
  size_t info_len;
  int info_mine, info_ttl;
  /* Messages: a try that found it taken; a whole wait that did ('for the
   * whole wait (N ms)' follows); what may be left when a clean-up failed;
   * a release that found our hold gone; the key whose fence a hold records. */
  const char *busy, *busy_wait, *left_behind, *release_gone;
  int fence_key;
} dlock__redis_kind;

/* The descriptor of a handle's kind (m->kind). */
const dlock__redis_kind *dlock__redis_kind_of(const dlock_mutex *m);
extern const dlock__redis_kind dlock__redis_kind_rw; /* the read side's: for status (admin.c) */

/* The acquire scripts' answer, for every kind and topology: {1, fence as a
 * decimal string} (DLOCK__GRANT_OK, '*fence' set, possibly 0: each caller
 * says whether that counts) or {0, the holder's pttl} (DLOCK__GRANT_WAIT,
 * '*pttl' set); DLOCK__GRANT_NOFENCE for {1, x} with x no fence;
 * DLOCK__GRANT_BAD for any other reply. */
enum { DLOCK__GRANT_BAD = -1, DLOCK__GRANT_WAIT = 0, DLOCK__GRANT_OK = 1, DLOCK__GRANT_NOFENCE = 2 };
int dlock__grant_decode(const dlock__reply *r, uint64_t *fence, long long *pttl);

/* Run 'call' (a script of 'kind' on the keys 'k' of the lock 'name'),
 * sending it again after a lost reply (dlock__script_run_twice_safe: each
 * caller says why that is safe); an error reply becomes a status whose
 * message names the key and says what to do. */
int dlock__redis_kind_run(dlock_client *c, const char *name, const dlock__lock_keys *k, const dlock__redis_kind *kind,
                          dlock__script_call *call, dlock__reply **out);

/* ---- Read-write locks (rwlock.c): their status ---- */

/* An rw_info.lua reply (12 elements; info.lua gives it for a read-write
 * lock's name) into 'out'. DLOCK_EPROTO when it is not one. */
int dlock__redis_rw_parse(const dlock__reply *r, dlock_lock_info *out);
/* dlock_lock_info for a name whose holders key is a read-write lock's. */
int dlock__redis_rw_info(dlock_client *c, const char *name, dlock_lock_info *out);
/* Countdown latches (latch.c). */
int dlock__redis_latch_new(dlock_latch *l);
void dlock__redis_latch_free(dlock_latch *l);
int dlock__redis_latch_set(dlock_latch *l, int64_t count, int64_t expire_ms);
int dlock__redis_latch_count_down(dlock_latch *l, int64_t *left);
int dlock__redis_latch_get(dlock_latch *l, int64_t *count, int64_t *ttl_ms);
int dlock__redis_latch_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg);
int dlock__redis_latch_wait(dlock_latch *l, int64_t wait_ms, dlock_mono_ms deadline);
void dlock__redis_latch_cancel(dlock_latch *l);

/* This backend's table of operations (core/backend.c's scheme registry points to it). */
extern const dlock__backend_ops dlock__redis_ops;

#endif /* DLOCK_REDIS_LOCK_H */
