/*
 * redis_scripts.h - the Redis backend's Lua scripts (scripts.c, lua/): ids, calls,
 * EVALSHA with NOSCRIPT fallback, the epoch record.
 */
#ifndef DLOCK_REDIS_SCRIPTS_H
#define DLOCK_REDIS_SCRIPTS_H

#include "redis_topo.h"

/* ---- Scripts (scripts.c) ---- */

typedef enum dlock__script_id {
  DLOCK__SCRIPT_ACQUIRE,
  DLOCK__SCRIPT_RELEASE,
  DLOCK__SCRIPT_EXTEND,
  DLOCK__SCRIPT_WITHDRAW,
  DLOCK__SCRIPT_INFO,
  DLOCK__SCRIPT_FORCE_RELEASE,
  DLOCK__SCRIPT_GUARD,
  DLOCK__SCRIPT_SCHED_CLAIM,
  DLOCK__SCRIPT_SCHED_DELAY,
  DLOCK__SCRIPT_SCHED_FINISH,
  DLOCK__SCRIPT_SCHED_HISTORY,
  DLOCK__SCRIPT_JOB_SET, /* a job's state (sched.c, lua/job_*.lua) */
  DLOCK__SCRIPT_JOB_GET,
  DLOCK__SCRIPT_RL_EXTEND, /* Redlock (topo_redlock.c) */
  DLOCK__SCRIPT_RL_FENCE,
  DLOCK__SCRIPT_RL_SCHED_UNCLAIM,
  DLOCK__SCRIPT_RL_MARKER,
  DLOCK__SCRIPT_RW_ACQUIRE, /* read-write locks (rwlock.c) */
  DLOCK__SCRIPT_RW_RELEASE,
  DLOCK__SCRIPT_RW_EXTEND,
  DLOCK__SCRIPT_RW_WITHDRAW,
  DLOCK__SCRIPT_RW_INFO,
  DLOCK__SCRIPT_LATCH_SET, /* countdown latches (latch.c) */
  DLOCK__SCRIPT_LATCH_DOWN,
  DLOCK__SCRIPT_LATCH_GET,
  DLOCK__SCRIPT_SEM_ACQUIRE, /* semaphores (semaphore.c, lua/sem_*.lua) */
  DLOCK__SCRIPT_SEM_RELEASE,
  DLOCK__SCRIPT_SEM_EXTEND,
  DLOCK__SCRIPT_SEM_WITHDRAW,
  DLOCK__SCRIPT_SEM_INFO,
  DLOCK__SCRIPT_PROCLAIM, /* leader election (election.c) */
  DLOCK__SCRIPT_HOLDERS,  /* every hold of a semaphore or read-write lock (admin.c) */
  DLOCK__SCRIPT_COUNT
} dlock__script_id;

/* Up to this many KEYS and ARGV entries per script call. */
#define DLOCK__SCRIPT_MAX_ARGS 16

struct dlock__script_call {
  dlock__script_id script;
  int nkeys;
  const char *keys[DLOCK__SCRIPT_MAX_ARGS];
  size_t keylens[DLOCK__SCRIPT_MAX_ARGS];
  int nargs;
  const char *args[DLOCK__SCRIPT_MAX_ARGS];
  size_t arglens[DLOCK__SCRIPT_MAX_ARGS];
  int maybe_ran; /* out: the call failed after it may have reached the server */
  int resent;    /* out: dlock__script_run_twice_safe sent it a second time */
  /* out: replicas that acknowledged the pipeline's writes (WAIT after an
   * acquire or extend, when the topology asks for it); -1 when not asked. */
  int replicas;
  /* out, Redlock acquire that failed: 1 when no other owner held a majority
   * (a split between contenders, or too slow): the waiter retries after a
   * random delay, not at a wake-up; and the shortest lease left (ms) on a
   * node held by another owner, -1 when none (when to look again); and
   * how many nodes' grant messages wake the waiter (rl_need, below). */
  int rl_tie;
  long long rl_pttl;
  int rl_need;
  /* in: run on this node alone, as on a single server (Redlock's per-node
   * views: dlock_lock_info_get_node); NULL: the topology routes (or
   * folds). Set on calls[0] of a pipeline, it holds for all of it. */
  dlock__node *node;
};

/* How Redlock (topo_redlock.c) answers for a quorum of its nodes to 'n'
 * calls of one script: one synthesized reply per call, or
 * DLOCK__QUORUM_PASS to leave them to one node (route()). Each script
 * names its fold in scripts.c's table, next to its text; NULL: one node. */
typedef int (*dlock__quorum_fold)(dlock__topology *t, dlock__script_call *calls, size_t n, dlock__reply **replies,
                                  dlock_mono_ms limit);
dlock__quorum_fold dlock__script_fold(dlock__script_id id);
/* The folds (topo_redlock.c). */
#define DLOCK__QUORUM_FOLD(name) \
  int name(dlock__topology *t, dlock__script_call *calls, size_t n, dlock__reply **replies, dlock_mono_ms limit)
DLOCK__QUORUM_FOLD(dlock__rl_fold_acquire);
DLOCK__QUORUM_FOLD(dlock__rl_fold_extend);
DLOCK__QUORUM_FOLD(dlock__rl_fold_delete);
DLOCK__QUORUM_FOLD(dlock__rl_fold_info);
DLOCK__QUORUM_FOLD(dlock__rl_fold_sched_claim);
DLOCK__QUORUM_FOLD(dlock__rl_fold_sched_finish);
DLOCK__QUORUM_FOLD(dlock__rl_fold_first);
DLOCK__QUORUM_FOLD(dlock__rl_fold_guard);

const char *dlock__script_name(dlock__script_id id);
/* Run 'n' calls (all routed by the first key of calls[0]) as one pipeline
 * of EVALSHA; those answered NOSCRIPT are sent again as EVAL. */
int dlock__script_run(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies);
/* The SHA1 of a script as EVALSHA names it, and its text (with the prelude):
 * tests and the fault proxy match on the one and preload the other. */
const char *dlock__script_sha(dlock__script_id id);
const char *dlock__script_text(dlock__script_id id);
/* The argv of EVALSHA ('by_sha') or EVAL for one call, in 'e' (which must
 * outlive 'cmd'): command, sha or text, numkeys, keys, args. */
typedef struct dlock__eval_argv {
  const char *argv[3 + 2 * DLOCK__SCRIPT_MAX_ARGS];
  size_t lens[3 + 2 * DLOCK__SCRIPT_MAX_ARGS];
  char numkeys[8];
  char epoch[DLOCK_MAX_NAME_LEN + 32]; /* dlock__script_add_epoch's key */
} dlock__eval_argv;
void dlock__script_build_eval(dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call, int by_sha);
/* Sentinel and Cluster without WAIT: append to a built call, as its last
 * key, the record of the master's epoch (prelude.lua's DLOCK_EPOCH; docs/
 * topologies.md, "The guard across a failover"); nothing elsewhere. */
void dlock__script_add_epoch(dlock_client *c, dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call);
/* That key for a script whose first key is 'key0' into 'buf': its length, 0
 * when the topology keeps no such record. */
size_t dlock__epoch_key(dlock_client *c, const char *key0, size_t len0, char *buf, size_t cap);
/* The smallest number whose decimal string hashes to cluster slot 'slot'
 * (the tag of that slot's record): 0, or -1 when none was found. */
int dlock__epoch_slot_tag(int slot, uint32_t *tag);
/* 1 when 'r' is a NOSCRIPT error reply (send the call again as EVAL). */
int dlock__reply_is_noscript(const dlock__reply *r);
/* One call of a script that is safe to run twice with the same arguments:
 * when its reply was lost after it may have run, it is sent once more and
 * call->resent is set (the answer then describes the state after both runs;
 * each caller says what that means for its script). */
int dlock__script_run_twice_safe(dlock_client *c, dlock__script_call *call, dlock__reply **reply);
/* The same, giving up at 'limit' when that comes before the command timeout. */
int dlock__script_run_until(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies,
                            dlock_mono_ms limit);
/* 1 when 'call' (an acquire or extend) needed WAIT and too few replicas
 * acknowledged; the error detail says how many. */
int dlock__replicas_short(dlock_client *c, const dlock__script_call *call);

#endif /* DLOCK_REDIS_SCRIPTS_H */
