/*
 * kinds.c - the Redis backend's lock kinds as descriptors: mutex, semaphore
 * and the two sides of a read-write lock. lock.c is the one machine
 * (acquire, wait, give up, release, extend, renew, held) that runs every
 * kind; a kind says which scripts it sends, which arguments its acquire
 * script takes, how long its status answer is and what its messages say.
 * Adding a kind: its scripts (lua/), a descriptor here, its public
 * constructor (core/), and nothing in lock.c (docs/design.md, "A lock kind
 * in the Redis backend").
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "redis_lock.h"

static void arg(dlock__script_call *call, const char *s) {
  call->args[call->nargs] = s;
  call->arglens[call->nargs] = strlen(s);
  call->nargs++;
}

/* ARGV 1..6 of acquire.lua and sem_acquire.lua: token, lease, waiter id
 * ('' = a try), re-check cap, claim lease, owner info. */
static void common_args(const dlock_mutex *m, dlock__script_call *call, const dlock__acquire_try *t) {
  arg(call, m->token);
  arg(call, t->lease_s);
  arg(call, dlock__rm(m)->waiter_id);
  arg(call, t->cap_s);
  arg(call, t->claim_s);
  arg(call, m->owner_info);
}

static void mutex_args(const dlock_mutex *m, dlock__script_call *call, dlock__acquire_try *t) {
  common_args(m, call, t);
  if (!t->queue && !dlock__topo(m->client)->quorum_run) {
    /* A try never reads the queue keys or the nonce: each argument less
     * is work less for Redis on every uncontended acquire. (Redlock
     * derives its give-back calls from this one: it keeps them all.) */
    call->nkeys = DLOCK__K_QUEUE;
  } else {
    arg(call, t->nonce_s); /* ARGV 7: the nonce a grant message names */
  }
}

static void semaphore_args(const dlock_mutex *m, dlock__script_call *call, dlock__acquire_try *t) {
  common_args(m, call, t);
  snprintf(t->scratch, sizeof t->scratch, "%d", m->permits); /* ARGV 7: the limit */
  arg(call, t->scratch);
}

/* rw_acquire.lua: token, lease, side, waiter id, cap, owner info, and the
 * token of this thread's other hold of the same lock (looked up at every
 * try: that hold may end meanwhile). */
static void rw_args(const dlock_mutex *m, dlock__script_call *call, dlock__acquire_try *t) {
  arg(call, m->token);
  arg(call, t->lease_s);
  arg(call, m->kind == DLOCK__KIND_READ ? "r" : "w");
  arg(call, dlock__rm(m)->waiter_id);
  arg(call, t->cap_s);
  arg(call, m->owner_info);
  dlock__rw_own_token(m, t->scratch);
  arg(call, t->scratch);
}

static int mutex_wrongtype(dlock_client *c, const char *name, const dlock__lock_keys *k, const dlock__redis_kind *kind,
                           const dlock__script_call *call, const char *err) {
  dlock_lock_info rw; /* a read-write lock's name (rwlock.c): say so */
  dlock_lock_info_init(&rw);
  if (dlock__redis_rw_info(c, name, &rw) == 0 && rw.rwlock)
    return dlock__error(DLOCK_EWRONGTYPE,
                        "'%s' is in use as a read-write lock (%lld readers, %s writer), not a %s: "
                        "the same name cannot be both; take a side of it (a read or write hold: 'dlock run -s/-x') or "
                        "pick another name",
                        name, (long long)rw.readers, rw.writer ? "a" : "no", kind->name);
  return dlock__error(DLOCK_EWRONGTYPE,
                      "%s script: key '%s' or one of its keys '%s', '%s', '%s', '%s' holds a "
                      "type dlock does not use (%s); it belongs to something else and was left alone: pick "
                      "another lock name",
                      dlock__script_name(call->script), k->key[DLOCK__K_LOCK], k->key[DLOCK__K_FENCE],
                      k->key[DLOCK__K_META], k->key[DLOCK__K_QUEUE], k->key[DLOCK__K_WAITERS], err);
}

static int rw_wrongtype(dlock_client *c, const char *name, const dlock__lock_keys *k, const dlock__redis_kind *kind,
                        const dlock__script_call *call, const char *err) {
  (void)c;
  (void)name;
  (void)kind;
  return dlock__error(DLOCK_EWRONGTYPE,
                      "%s script: key '%s' or one of '%s', '%s', '%s', '%s' holds a type a "
                      "read-write lock does not use (%s): a mutex's name with its hand-off keys, or another "
                      "application's key; pick another name",
                      dlock__script_name(call->script), k->key[DLOCK__K_LOCK], k->key[DLOCK__K_FENCE],
                      k->key[DLOCK__K_META], k->key[DLOCK__K_QUEUE], k->key[DLOCK__K_WAITERS], err);
}

/* The mutex and the semaphore (lua/sem_*.lua): the same arguments and
 * answers, but for the semaphore's limit. */
#define ONE_KEY_KIND(kname, prefix, args, len, gone)                                                             \
  {                                                                                                              \
    .name = kname,                                                                                               \
    .script = {DLOCK__SCRIPT_##prefix##ACQUIRE, DLOCK__SCRIPT_##prefix##RELEASE, DLOCK__SCRIPT_##prefix##EXTEND, \
               DLOCK__SCRIPT_##prefix##WITHDRAW, DLOCK__SCRIPT_##prefix##INFO},                                  \
    .acquire_args = args, .wrongtype = mutex_wrongtype, .info_len = len, .info_mine = 7, .info_ttl = 1,          \
    .busy = "held by another owner", .busy_wait = "held by another owner",                                       \
    .left_behind = "the lock may be held by our token", .release_gone = gone, .fence_key = DLOCK__K_FENCE,       \
  }

static const dlock__redis_kind kind_mutex =
    ONE_KEY_KIND("mutex", , mutex_args, 8, "the key was gone (the lease had expired); nothing was deleted");
static const dlock__redis_kind kind_semaphore = ONE_KEY_KIND(
    "semaphore", SEM_, semaphore_args, 10, "our permit was gone or its lease had run out; no permit was touched");

/* lua/rw_*.lua (docs/rwlock.md): the holders are a ZSET of token -> lease
 * expiry at the lock's name; the queue is the mutex's, each entry marked
 * with its side. A release wakes who may go now; the woken waiter's own
 * acquire call takes the lock (no hand-off to confirm: the wake-up message
 * carries fence 0). rw_release and rw_extend answer as release and extend
 * do (1, 0, -2; never -1). */
#define RW_KIND(side_busy, side_busy_wait, side_left)                                                                  \
  {                                                                                                                    \
    .name = "read-write lock",                                                                                         \
    .script = {DLOCK__SCRIPT_RW_ACQUIRE, DLOCK__SCRIPT_RW_RELEASE, DLOCK__SCRIPT_RW_EXTEND, DLOCK__SCRIPT_RW_WITHDRAW, \
               DLOCK__SCRIPT_RW_INFO},                                                                                 \
    .acquire_args = rw_args, .wrongtype = rw_wrongtype, .info_len = 12, .info_mine = 10, .info_ttl = 11,               \
    .busy = side_busy, .busy_wait = side_busy_wait, .left_behind = side_left,                                          \
    .release_gone = "the key was gone (the lease had expired); nothing was deleted", .fence_key = DLOCK__K_META,       \
  }

const dlock__redis_kind dlock__redis_kind_rw =
    RW_KIND("the write side is held, or a writer waits ahead of us",
            "the write side was held or a writer waited ahead of us", "our read hold may stay");
static const dlock__redis_kind kind_write =
    RW_KIND("held by readers or a writer, or others wait ahead of us", "held by others", "our write hold may stay");

const dlock__redis_kind *dlock__redis_kind_of(const dlock_mutex *m) {
  switch (m->kind) {
  case DLOCK__KIND_MUTEX:
    break;
  case DLOCK__KIND_SEMAPHORE:
    return &kind_semaphore;
  case DLOCK__KIND_READ:
    return &dlock__redis_kind_rw;
  case DLOCK__KIND_WRITE:
    return &kind_write;
  }
  return &kind_mutex;
}

int dlock__grant_decode(const dlock__reply *r, uint64_t *fence, long long *pttl) {
  *fence = 0;
  if (r->type != DLOCK__REPLY_ARRAY || r->elements != 2 || r->element[0]->type != DLOCK__REPLY_INTEGER)
    return DLOCK__GRANT_BAD;
  const dlock__reply *v = r->element[1];
  if (r->element[0]->integer == 1)
    return v->type == DLOCK__REPLY_STRING && dlock__parse_fence(v->str, v->len, fence) == 0 ? DLOCK__GRANT_OK
                                                                                            : DLOCK__GRANT_NOFENCE;
  if (r->element[0]->integer == 0 && v->type == DLOCK__REPLY_INTEGER) {
    *pttl = v->integer;
    return DLOCK__GRANT_WAIT;
  }
  return DLOCK__GRANT_BAD;
}

int dlock__redis_kind_run(dlock_client *c, const char *name, const dlock__lock_keys *k, const dlock__redis_kind *kind,
                          dlock__script_call *call, dlock__reply **out) {
  int rc = dlock__script_run_twice_safe(c, call, out);
  if (rc || (*out)->type != DLOCK__REPLY_ERROR) return rc;
  const char *s = (*out)->str;
  if (!strncmp(s, "EKIND ", 6)) {
    rc = dlock__error(DLOCK_EWRONGTYPE, "%s", s + 6); /* the script's text names the key and the kind */
  } else if (((rc = dlock__reply_error_status(*out)) == DLOCK_EWRONGTYPE && !strncmp(s, "WRONGTYPE dlock lock ", 21)) ||
             (rc == DLOCK_ELIMIT && strchr(s, ' '))) {
    /* A name taken as another kind of lock, a semaphore's limit: the
     * script's own words say both sides. */
    rc = dlock__error(rc, "%s", strchr(s, ' ') + 1);
  } else if (rc == DLOCK_EWRONGTYPE) {
    rc = kind->wrongtype(c, name, k, kind, call, s);
  } else if (rc == DLOCK_EFOREIGN) {
    rc = dlock__error(rc,
                      "key '%s' exists without an expiry and without dlock metadata: it is not a dlock "
                      "lock but another key (an application's?), and waiting for it would never end; pick "
                      "another lock name or a key prefix",
                      k->key[DLOCK__K_LOCK]);
  } else {
    rc = dlock__error(
        rc, "%s script failed on key '%s': %s%s", dlock__script_name(call->script), k->key[DLOCK__K_LOCK], s,
        rc == DLOCK_ENOPERM ? " (grant the ACL user the lock's keys and channels, see docs/keys.md)" : "");
  }
  dlock__reply_free(*out);
  *out = NULL;
  return rc;
}
