/*
 * rwlock.c - the Redis backend's read-write lock: its status. Its handles
 * (kinds DLOCK__KIND_READ and _WRITE; the public calls are core/rwlock.c)
 * run on lock.c's machine with the descriptors in kinds.c and the scripts
 * src/redis/lua/rw_*.lua (docs/rwlock.md): the holders are a ZSET of
 * token -> lease expiry on the server's clock at the lock's name, so every
 * hold has its own lease and a crashed holder's share returns when it ends;
 * the wait queue is the mutex's (arrival order), each entry marked with its
 * side.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

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
  call.args[0] = "";
  call.arglens[0] = 0;
  call.nargs = 1;
  dlock__reply *r = NULL;
  rc = dlock__redis_kind_run(c, name, &keys, &dlock__redis_kind_rw, &call, &r); /* read only */
  if (!rc) rc = dlock__redis_rw_parse(r, out);
  if (rc) dlock__error_prefix("status of '%s' on %s: ", name, c->server);
  dlock__reply_free(r);
  dlock__lock_keys_clear(&keys);
  return rc;
}
