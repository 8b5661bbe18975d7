/*
 * scripts.c - the Lua scripts (src/redis/lua/, embedded at build time) and
 * running them: EVALSHA first; a NOSCRIPT answer (server restarted, SCRIPT
 * FLUSH) is answered by sending the same call as EVAL, which also caches it.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "redis_scripts.h"

extern const char dlock__lua_acquire[], dlock__lua_release[], dlock__lua_extend[], dlock__lua_withdraw[],
    dlock__lua_info[], dlock__lua_force_release[], dlock__lua_guard[], dlock__lua_sched_claim[],
    dlock__lua_sched_delay[], dlock__lua_sched_finish[], dlock__lua_sched_history[], dlock__lua_rl_extend[],
    dlock__lua_rl_fence[], dlock__lua_rl_sched_unclaim[], dlock__lua_rl_marker[], dlock__lua_rw_acquire[],
    dlock__lua_rw_release[], dlock__lua_rw_extend[], dlock__lua_rw_withdraw[], dlock__lua_rw_info[];
extern const char dlock__lua_latch_set[], dlock__lua_latch_down[], dlock__lua_latch_get[];
extern const char dlock__lua_sem_acquire[], dlock__lua_sem_release[], dlock__lua_sem_extend[],
    dlock__lua_sem_withdraw[], dlock__lua_sem_info[];
extern const char dlock__lua_proclaim[], dlock__lua_holders[];
extern const char dlock__lua_job_set[], dlock__lua_job_get[];

/* Each script: its name (messages), its text, and how Redlock folds the
 * nodes' answers to it (dlock__quorum_fold; NULL: it runs on one node). */
static const struct {
  const char *name;
  const char *text;
  dlock__quorum_fold fold;
} scripts[DLOCK__SCRIPT_COUNT] = {
    [DLOCK__SCRIPT_ACQUIRE] = {"acquire", dlock__lua_acquire, dlock__rl_fold_acquire},
    [DLOCK__SCRIPT_RELEASE] = {"release", dlock__lua_release, dlock__rl_fold_delete},
    [DLOCK__SCRIPT_EXTEND] = {"extend", dlock__lua_extend, dlock__rl_fold_extend},
    [DLOCK__SCRIPT_WITHDRAW] = {"withdraw", dlock__lua_withdraw, dlock__rl_fold_delete},
    [DLOCK__SCRIPT_INFO] = {"info", dlock__lua_info, dlock__rl_fold_info},
    [DLOCK__SCRIPT_FORCE_RELEASE] = {"force_release", dlock__lua_force_release, dlock__rl_fold_delete},
    [DLOCK__SCRIPT_GUARD] = {"guard", dlock__lua_guard, dlock__rl_fold_guard},
    [DLOCK__SCRIPT_SCHED_CLAIM] = {"sched_claim", dlock__lua_sched_claim, dlock__rl_fold_sched_claim},
    [DLOCK__SCRIPT_SCHED_DELAY] = {"sched_delay", dlock__lua_sched_delay, dlock__rl_fold_sched_claim},
    [DLOCK__SCRIPT_SCHED_FINISH] = {"sched_finish", dlock__lua_sched_finish, dlock__rl_fold_sched_finish},
    [DLOCK__SCRIPT_SCHED_HISTORY] = {"sched_history", dlock__lua_sched_history, dlock__rl_fold_first},
    [DLOCK__SCRIPT_JOB_SET] = {"job_set", dlock__lua_job_set},
    [DLOCK__SCRIPT_JOB_GET] = {"job_get", dlock__lua_job_get},
    [DLOCK__SCRIPT_RL_EXTEND] = {"rl_extend", dlock__lua_rl_extend},
    [DLOCK__SCRIPT_RL_FENCE] = {"rl_fence", dlock__lua_rl_fence},
    [DLOCK__SCRIPT_RL_SCHED_UNCLAIM] = {"rl_sched_unclaim", dlock__lua_rl_sched_unclaim},
    [DLOCK__SCRIPT_RL_MARKER] = {"rl_marker", dlock__lua_rl_marker},
    [DLOCK__SCRIPT_RW_ACQUIRE] = {"rw_acquire", dlock__lua_rw_acquire},
    [DLOCK__SCRIPT_RW_RELEASE] = {"rw_release", dlock__lua_rw_release},
    [DLOCK__SCRIPT_RW_EXTEND] = {"rw_extend", dlock__lua_rw_extend},
    [DLOCK__SCRIPT_RW_WITHDRAW] = {"rw_withdraw", dlock__lua_rw_withdraw},
    [DLOCK__SCRIPT_RW_INFO] = {"rw_info", dlock__lua_rw_info},
    [DLOCK__SCRIPT_LATCH_SET] = {"latch_set", dlock__lua_latch_set},
    [DLOCK__SCRIPT_LATCH_DOWN] = {"latch_down", dlock__lua_latch_down},
    [DLOCK__SCRIPT_LATCH_GET] = {"latch_get", dlock__lua_latch_get},
    [DLOCK__SCRIPT_SEM_ACQUIRE] = {"sem_acquire", dlock__lua_sem_acquire},
    [DLOCK__SCRIPT_SEM_RELEASE] = {"sem_release", dlock__lua_sem_release},
    [DLOCK__SCRIPT_SEM_EXTEND] = {"sem_extend", dlock__lua_sem_extend},
    [DLOCK__SCRIPT_SEM_WITHDRAW] = {"sem_withdraw", dlock__lua_sem_withdraw},
    [DLOCK__SCRIPT_SEM_INFO] = {"sem_info", dlock__lua_sem_info},
    [DLOCK__SCRIPT_PROCLAIM] = {"proclaim", dlock__lua_proclaim},
    [DLOCK__SCRIPT_HOLDERS] = {"holders", dlock__lua_holders},
};

static char shas[DLOCK__SCRIPT_COUNT][41];
static pthread_once_t shas_once = PTHREAD_ONCE_INIT;

static void compute_shas(void) {
  for (int i = 0; i < DLOCK__SCRIPT_COUNT; i++) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(scripts[i].text, strlen(scripts[i].text), md, &mdlen, EVP_sha1(), NULL);
    for (unsigned j = 0; j < mdlen && j < 20; j++) snprintf(&shas[i][2 * j], 3, "%02x", md[j]);
  }
}

const char *dlock__script_name(dlock__script_id id) { return scripts[id].name; }

dlock__quorum_fold dlock__script_fold(dlock__script_id id) { return scripts[id].fold; }

const char *dlock__script_text(dlock__script_id id) { return scripts[id].text; }

const char *dlock__script_sha(dlock__script_id id) {
  pthread_once(&shas_once, compute_shas);
  return shas[id];
}

void dlock__script_build_eval(dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call, int by_sha) {
  int n = 0;
  e->argv[n] = by_sha ? "EVALSHA" : "EVAL";
  e->lens[n] = strlen(e->argv[n]);
  n++;
  e->argv[n] = by_sha ? shas[call->script] : scripts[call->script].text;
  e->lens[n] = strlen(e->argv[n]);
  n++;
  snprintf(e->numkeys, sizeof e->numkeys, "%d", call->nkeys);
  e->argv[n] = e->numkeys;
  e->lens[n] = strlen(e->numkeys);
  n++;
  for (int i = 0; i < call->nkeys; i++, n++) {
    e->argv[n] = call->keys[i];
    e->lens[n] = call->keylens[i];
  }
  for (int i = 0; i < call->nargs; i++, n++) {
    e->argv[n] = call->args[i];
    e->lens[n] = call->arglens[i];
  }
  cmd->argc = n;
  cmd->argv = e->argv;
  cmd->lens = e->lens;
}

/* The record of the master's epoch, "<run id> <floor>" (prelude.lua,
 * DLOCK_EPOCH): one per server under Sentinel ("<prefix>dlock-epoch"), one
 * per hash slot on a cluster ("<prefix>{<tag>}:dlock-epoch", <tag> the
 * smallest number whose slot is that of the script's keys: a script touches
 * one slot). Without WAIT only: with it, admissions are acknowledged by the
 * replicas and no floor is kept. */
static uint32_t slot_tags[16384]; /* the tag + 1; 0: none found */
static pthread_once_t tags_once = PTHREAD_ONCE_INIT;
#define TAG_SEARCH_MAX 1000000u /* every slot has one below 110000 (test_cluster_slots.c) */

/* One sweep over 0, 1, 2, ... fills every slot (about 110000 CRCs, once). */
static void compute_tags(void) {
  char buf[16];
  int left = 16384;
  for (uint32_t n = 0; n < TAG_SEARCH_MAX && left > 0; n++) {
    int len = snprintf(buf, sizeof buf, "%u", n);
    unsigned slot = dlock__crc16(buf, (size_t)len) & 16383;
    if (!slot_tags[slot]) {
      slot_tags[slot] = n + 1;
      left--;
    }
  }
}

int dlock__epoch_slot_tag(int slot, uint32_t *tag) {
  pthread_once(&tags_once, compute_tags);
  if (slot < 0 || slot > 16383 || !slot_tags[slot]) return -1;
  *tag = slot_tags[slot] - 1;
  return 0;
}

size_t dlock__epoch_key(dlock_client *c, const char *key0, size_t len0, char *buf, size_t cap) {
  const dlock__topology *t = dlock__topo(c);
  if (t->wait_replicas > 0) return 0;
  int n = -1;
  if (!strcmp(t->kind, "sentinel")) {
    n = snprintf(buf, cap, "%sdlock-epoch", c->prefix);
  } else if (!strcmp(t->kind, "cluster")) {
    uint32_t tag;
    if (dlock__epoch_slot_tag(dlock__cluster_slot(key0, len0), &tag) == 0)
      n = snprintf(buf, cap, "%s{%u}:dlock-epoch", c->prefix, tag);
  }
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

void dlock__script_add_epoch(dlock_client *c, dlock__eval_argv *e, dlock__cmd *cmd, const dlock__script_call *call) {
  if (call->nkeys < 1 || call->nkeys >= DLOCK__SCRIPT_MAX_ARGS) return;
  size_t len = dlock__epoch_key(c, call->keys[0], call->keylens[0], e->epoch, sizeof e->epoch);
  if (!len) return;
  /* argv: command, sha, numkeys, keys, args: the key goes after the keys. */
  size_t at = 3 + (size_t)call->nkeys;
  memmove(&e->argv[at + 1], &e->argv[at], (size_t)call->nargs * sizeof e->argv[0]);
  memmove(&e->lens[at + 1], &e->lens[at], (size_t)call->nargs * sizeof e->lens[0]);
  e->argv[at] = e->epoch;
  e->lens[at] = len;
  snprintf(e->numkeys, sizeof e->numkeys, "%d", call->nkeys + 1);
  e->lens[2] = strlen(e->numkeys);
  cmd->argc++;
}

int dlock__reply_is_noscript(const dlock__reply *r) {
  return r && r->type == DLOCK__REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8);
}

/* Send cmds[0..n) (for calls[idx[i]], or calls[i] when idx is NULL) on
 * 'node', or through the topology's router when it has one (cluster), all
 * waits ending at 'limit' too. */
static int exec_calls(dlock_client *c, dlock__node *node, const dlock__cmd *cmds, const dlock__script_call *calls,
                      const size_t *idx, size_t n, dlock__reply **replies, int *sent, dlock_mono_ms limit) {
  if (!dlock__topo(c)->exec) {
    int rc;
    /* Pipelined releases waiting for a command to ride with: this one. */
    if (dlock__pipeline_exec(c, node, cmds, n, replies, sent, limit, &rc)) return rc;
    return dlock__node_exec_until(node, cmds, n, replies, sent, limit);
  }
  const char *stack_k[4] = {0};
  size_t stack_kl[4] = {0};
  const char **k = n <= 4 ? stack_k : malloc(n * sizeof *k);
  size_t *kl = n <= 4 ? stack_kl : malloc(n * sizeof *kl);
  int rc;
  if (!k || !kl) {
    *sent = 0;
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  } else {
    for (size_t i = 0; i < n; i++) {
      const dlock__script_call *call = &calls[idx ? idx[i] : i];
      k[i] = call->keys[0];
      kl[i] = call->keylens[0];
    }
    rc = dlock__topo(c)->exec(dlock__topo(c), cmds, k, kl, n, replies, sent, limit);
  }
  if (n > 4) {
    free(k);
    free(kl);
  }
  return rc;
}

/* The topology's WAIT, when one of 'calls' takes or renews a lock, or is
 * the guard's admission. */
static int wants_wait(const dlock_client *c, const dlock__script_call *calls, size_t n) {
  if (dlock__topo(c)->wait_replicas <= 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (calls[i].script == DLOCK__SCRIPT_ACQUIRE || calls[i].script == DLOCK__SCRIPT_EXTEND ||
        calls[i].script == DLOCK__SCRIPT_GUARD) /* an admission is a write a failover could forget */
      return 1;
  return 0;
}

/* exec_calls() of 'k' commands, followed in the same pipeline (so on the
 * same connection, whose writes WAIT counts) by WAIT when 'wait' is set:
 * '*acked' receives its answer (-1 when not asked or not an integer). A
 * cluster never asks for WAIT (dlock_client_new refuses it there). */
static int exec_with_wait(dlock_client *c, dlock__node *node, dlock__cmd *cmds, const dlock__script_call *calls,
                          const size_t *idx, size_t k, dlock__reply **replies, int *sent, int wait, int *acked,
                          dlock_mono_ms limit) {
  *acked = -1;
  if (!wait || dlock__topo(c)->exec) return exec_calls(c, node, cmds, calls, idx, k, replies, sent, limit);
  char nrep[16], tmo[16];
  snprintf(nrep, sizeof nrep, "%d", dlock__topo(c)->wait_replicas);
  snprintf(tmo, sizeof tmo, "%d", dlock__topo(c)->wait_timeout_ms);
  const char *argv[3] = {"WAIT", nrep, tmo};
  size_t lens[3] = {4, strlen(nrep), strlen(tmo)};
  dlock__cmd *all = malloc((k + 1) * sizeof *all);
  dlock__reply **rall = calloc(k + 1, sizeof *rall);
  if (!all || !rall) {
    free(all);
    free(rall);
    *sent = 0;
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  memcpy(all, cmds, k * sizeof *all);
  all[k] = (dlock__cmd){3, argv, lens};
  /* Behind the pending pipelined releases, as exec_calls() sends. */
  int rc;
  if (!dlock__pipeline_exec(c, node, all, k + 1, rall, sent, limit, &rc))
    rc = dlock__node_exec_until(node, all, k + 1, rall, sent, limit);
  if (!rc) {
    memcpy(replies, rall, k * sizeof *replies);
    if (rall[k]->type == DLOCK__REPLY_INTEGER) *acked = (int)rall[k]->integer;
    dlock__reply_free(rall[k]);
  }
  free(all);
  free(rall);
  return rc;
}

int dlock__script_run(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies) {
  return dlock__script_run_until(c, calls, n, replies, INT64_MAX);
}

int dlock__script_run_until(dlock_client *c, dlock__script_call *calls, size_t n, dlock__reply **replies,
                            dlock_mono_ms limit) {
  pthread_once(&shas_once, compute_shas);
  if (dlock__topo(c)->quorum_run && !calls[0].node) { /* Redlock: every node, counted (topo_redlock.c) */
    int qrc = dlock__topo(c)->quorum_run(dlock__topo(c), c, calls, n, replies, limit);
    if (qrc != DLOCK__QUORUM_PASS) return qrc;
  }
  int route_rc;
  dlock__node *node =
      calls[0].node ? calls[0].node : dlock__route(c, calls[0].keys[0], calls[0].keylens[0], limit, &route_rc);
  if (!node) {
    for (size_t i = 0; i < n; i++) calls[i].maybe_ran = 0, calls[i].replicas = -1;
    return route_rc;
  }
  /* Small pipelines live on the stack; the watchdog's large ones on the heap. */
  dlock__eval_argv stack_e[4];
  dlock__cmd stack_cmds[4];
  dlock__eval_argv *e = n <= 4 ? stack_e : malloc(n * sizeof *e);
  dlock__cmd *cmds = n <= 4 ? stack_cmds : malloc(n * sizeof *cmds);
  size_t *retry = n <= 4 ? NULL : malloc(n * sizeof *retry);
  size_t stack_retry[4];
  if (n <= 4) retry = stack_retry;
  int rc = 0;
  if (!e || !cmds || !retry) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    dlock__script_build_eval(&e[i], &cmds[i], &calls[i], 1);
    dlock__script_add_epoch(c, &e[i], &cmds[i], &calls[i]);
  }
  int sent = 0, wait = wants_wait(c, calls, n), acked = -1;
  for (size_t i = 0; i < n; i++) calls[i].replicas = -1;
  rc = exec_with_wait(c, node, cmds, calls, NULL, n, replies, &sent, wait, &acked, limit);
  for (size_t i = 0; i < n; i++) calls[i].replicas = acked;
  for (size_t i = 0; i < n; i++) calls[i].maybe_ran = rc && sent;
  if (rc) goto done;
  size_t nretry = 0;
  for (size_t i = 0; i < n; i++)
    if (dlock__reply_is_noscript(replies[i])) retry[nretry++] = i;
  if (nretry) {
    for (size_t j = 0; j < nretry; j++) {
      dlock__script_build_eval(&e[j], &cmds[j], &calls[retry[j]], 0);
      dlock__script_add_epoch(c, &e[j], &cmds[j], &calls[retry[j]]);
    }
    dlock__reply **again = n <= 4 ? (dlock__reply *[4]){0} : calloc(nretry, sizeof *again);
    if (!again) {
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else {
      rc = exec_with_wait(c, node, cmds, calls, retry, nretry, again, &sent, wait, &acked, limit);
      for (size_t j = 0; j < nretry; j++) calls[retry[j]].replicas = acked;
      for (size_t j = 0; j < nretry; j++) calls[retry[j]].maybe_ran = rc && sent;
      for (size_t j = 0; j < nretry; j++) {
        if (rc) break;
        dlock__reply_free(replies[retry[j]]);
        replies[retry[j]] = again[j];
      }
      if (n > 4) free(again);
    }
    if (rc) {
      for (size_t i = 0; i < n; i++) {
        dlock__reply_free(replies[i]);
        replies[i] = NULL;
      }
    }
  }
done:
  if (n > 4) {
    free(e);
    free(cmds);
    free(retry);
  }
  return rc;
}

/* The rule (docs/design.md, "Lost replies"): a call that may have run is sent
 * again only by a caller that knows its script gives the same outcome when it
 * runs twice; the second answer is then read as "the state after one or two
 * runs". One resend, no loop: if that fails as well, the caller reports the
 * outcome as unknown. */
int dlock__script_run_twice_safe(dlock_client *c, dlock__script_call *call, dlock__reply **reply) {
  call->resent = 0;
  int rc = dlock__script_run(c, call, 1, reply);
  if (rc && call->maybe_ran && !atomic_load(&c->closing)) {
    call->resent = 1;
    rc = dlock__script_run(c, call, 1, reply);
    call->maybe_ran = 1;           /* the first try may have run whatever the second did */
    if (!rc) dlock__error_clear(); /* the first try's error is answered */
  }
  return rc;
}

int dlock__replicas_short(dlock_client *c, const dlock__script_call *call) {
  int want = dlock__topo(c)->wait_replicas;
  if (want <= 0 || call->replicas >= want) return 0;
  dlock__error(DLOCK_EREPLICAS,
               "only %d of the %d replicas required acknowledged the write within %d ms "
               "(WAIT); check the replicas (INFO replication)",
               call->replicas < 0 ? 0 : call->replicas, want, dlock__topo(c)->wait_timeout_ms);
  return 1;
}
