/*
 * election.c - what leader election needs of Redis beyond the mutex
 * (core/election.c): proclaim, a compare-and-set of the owner info in the
 * hold's record (lua/proclaim.lua). Redlock has no single record to change
 * (each node keeps its own): not offered there.
 */
#include <stdio.h>
#include <string.h>

#include "redis.h"

static int redis_proclaim(dlock_mutex *m, const char *token, const char *value) {
  dlock_client *c = m->client;
  if (dlock__redis_node_count(c) > 0)
    return dlock__error(DLOCK_EINVAL, "changing a leader's value is not offered on Redlock (each node keeps its "
                                      "own record); resign and campaign again with the new value (docs/election.md)");
  dlock__lock_keys keys;
  int rc = dlock__lock_keys_init(&keys, c, m->name);
  if (rc) return rc;
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_PROCLAIM;
  dlock__script_call_keys(&call, &keys);
  call.args[0] = token;
  call.arglens[0] = strlen(token);
  call.args[1] = value;
  call.arglens[1] = strlen(value);
  call.nargs = 2;
  dlock__reply *r = NULL;
  /* Twice-safe: writing the same value for the same token again. */
  rc = dlock__script_run_twice_safe(c, &call, &r);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "proclaim on key '%s': %s", keys.key[DLOCK__K_LOCK], r->str);
  } else if (!rc && r->type != DLOCK__REPLY_INTEGER) {
    rc = dlock__error(DLOCK_EPROTO, "proclaim on key '%s': unexpected reply", keys.key[DLOCK__K_LOCK]);
  } else if (!rc && r->integer != 1) {
    rc = dlock__error(DLOCK_ENOTHELD,
                      "the server no longer has this candidate as the leader of key '%s' (its "
                      "lease ran out, or it was evicted); the value was not written",
                      keys.key[DLOCK__K_LOCK]);
  }
  if (r) dlock__reply_free(r);
  dlock__lock_keys_clear(&keys);
  return rc;
}

/* force_release.lua with the epoch: the key goes only while its hold's
 * fence is still 'epoch'. Twice-safe for that reason: a resend after a lost
 * reply cannot end a later term. */
static int redis_evict(dlock_client *c, const char *name, uint64_t epoch, int *evicted) {
  if (dlock__redis_node_count(c) > 0)
    return dlock__error(DLOCK_EINVAL,
                        "an eviction checked against the epoch is not offered on Redlock (each "
                        "node keeps its own record); 'dlock release --force NAME' ends whichever term holds");
  dlock__lock_keys keys;
  int rc = dlock__lock_keys_init(&keys, c, name);
  if (rc) return rc;
  char ep[24];
  snprintf(ep, sizeof ep, "%llu", (unsigned long long)epoch);
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_FORCE_RELEASE;
  dlock__script_call_keys(&call, &keys);
  call.args[0] = "0";
  call.arglens[0] = 1;
  call.args[1] = ep;
  call.arglens[1] = strlen(ep);
  call.nargs = 2;
  dlock__reply *r = NULL;
  rc = dlock__script_run_twice_safe(c, &call, &r);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "evict the leader of key '%s': %s", keys.key[DLOCK__K_LOCK], r->str);
  } else if (!rc && r->type != DLOCK__REPLY_INTEGER) {
    rc = dlock__error(DLOCK_EPROTO, "evict the leader of key '%s': unexpected reply", keys.key[DLOCK__K_LOCK]);
  } else if (!rc && r->integer == -1) {
    rc = dlock__error(DLOCK_EFOREIGN,
                      "key '%s' was not set by dlock (no dlock metadata): no election's; nothing "
                      "was deleted",
                      keys.key[DLOCK__K_LOCK]);
  } else if (!rc) {
    *evicted = r->integer == 1;
  }
  if (r) dlock__reply_free(r);
  dlock__lock_keys_clear(&keys);
  return rc;
}

const struct dlock__election_ops dlock__redis_election_ops = {
    .proclaim = redis_proclaim,
    .evict = redis_evict,
};
