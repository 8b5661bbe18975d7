/*
 * election.c - what leader election needs of ZooKeeper beyond the mutex
 * (core/election.c): proclaim, a setData on the leader's own lock node (its
 * data is the owner info status shows), in the session that created it.
 */
#include <string.h>

#include "zk/zk_int.h"

int dlock__zk_set_owner_info(dlock__zk *z, const dlock__zk_hold *h, const char *value) {
  if (!h || !h->node_path) return dlock__error(DLOCK_ENOTHELD, "not held");
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  if (s->id != h->session) {
    dlock__zk_sess_put(s);
    return dlock__error(DLOCK_ENOTHELD, "'%s' on %s: the session that held it is over (the node went with it); "
                        "the value was not written", h->lock_path, z->server);
  }
  /* Twice-safe: the same data again. */
  for (;;) {
    int zrc = zoo_set(s->zh, h->node_path, value, (int)strlen(value), -1);
    if (zrc == ZOK) {
      rc = 0;
    } else if (zrc == ZNONODE) {
      rc = dlock__error(DLOCK_ENOTHELD, "'%s' on %s: our lock node %s is gone (a forced release?); the value was "
                        "not written", h->lock_path, z->server, h->node_path);
    } else if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
               dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
      continue;
    } else {
      rc = dlock__zk_fail(z, zrc, "set the owner info (setData) of", h->node_path);
    }
    break;
  }
  dlock__zk_sess_put(s);
  return rc;
}
