/*
 * zk/zk_int.h - what the files of src/zk/ share: the session structs (these
 * include <zookeeper/zookeeper.h>, so nothing outside src/zk/ includes this
 * header), error mapping, and the retry helpers.
 */
#ifndef DLOCK_ZK_INT_H
#define DLOCK_ZK_INT_H

#include <pthread.h>
/* The synchronous API exists only in the multi-threaded library, and the
 * header declares it only under THREADED. */
#ifndef THREADED
#define THREADED 1
#endif
#include <zookeeper/zookeeper.h>

#include "internal.h"
#include "zk/zk.h"

/* One ZooKeeper session (one zhandle). Replaced by a new one once lost;
 * threads using it hold a reference, and the last one closes it. */
typedef struct dlock__zk_sess {
  dlock__zk *z;
  zhandle_t *zh;
  int refs;     /* under z->mu */
  int detached; /* no longer z->cur */
  int state;    /* last session state the watcher saw */
  int connected_once;
  int auth_failed;
  int64_t id;                 /* session id, 0 until connected */
  int timeout_ms;             /* negotiated */
  dlock_mono_ms last_contact; /* send time of the last answered sync (through the leader) */
  int contacted;              /* a sync was answered since the connect */
  dlock_mono_ms valid_until;  /* see the loss rule in session.c */
  dlock_mono_ms next_ping;
  int pings_out; /* syncs sent and not yet answered */
  int uncertain;
  dlock_lost_reason lost;
  int ev_pending; /* bit (1 << dlock__zk_event) to deliver */
  int lost_reported;
} dlock__zk_sess;

struct dlock__zk {
  dlock__zk_url url;
  char server[600]; /* "zk 127.0.0.1:2181/ns" (digest masked), for messages */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* session state changes, node watches, wake-ups */
  dlock__zk_sess *cur;
  int reconnecting;
  unsigned wake_gen;
  dlock__zk_event_fn fn;
  void *fn_arg;
  int in_callback;
  pthread_t monitor;
  int monitor_started;
  int stop;
};

/* The current session with a reference, reconnecting first if it was lost.
 * NULL with '*rc' and the error set. */
dlock__zk_sess *dlock__zk_sess_get(dlock__zk *z, int *rc);
void dlock__zk_sess_put(dlock__zk_sess *s);
/* 1 once 's' is lost (expired, or past its deadline). */
int dlock__zk_sess_over(dlock__zk_sess *s);
/* Wait until 's' is connected, lost, or 'deadline'. 1 when connected. */
int dlock__zk_wait_connected(dlock__zk_sess *s, dlock_mono_ms deadline);
/* The moment after which retrying a call on 's' makes no sense: its
 * session would have expired. */
dlock_mono_ms dlock__zk_retry_limit(dlock__zk_sess *s);
void dlock__zk_node_gone(dlock__zk *z); /* session.c: deliver DLOCK__ZK_NODE_GONE */
/* The watcher that node watches use: wakes waiters of 's'->z. */
void dlock__zk_node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);
/* A ZooKeeper return code as a DLOCK_E* status with a message naming the
 * operation, the server and the path. */
int dlock__zk_fail(dlock__zk *z, int zrc, const char *op, const char *path);
/* 1 for return codes after which the request may or may not have run. */
int dlock__zk_rc_uncertain(int zrc);
/* The ACL of every node we create. Without a digest: open (world:anyone
 * all rights), as Curator's default. With one: all rights for the identity
 * that creates it (ZooKeeper's "auth" scheme, i.e. our digest) and read for
 * everyone (docs/zookeeper.md, "ACLs"). */
const struct ACL_vector *dlock__zk_acl(const dlock__zk *z);
/* With a digest: make sure that world:anyone may at most read 'path' (a
 * node we put a node into, or the guard): a path left open by a client
 * without credentials is given our ACL (dlock__zk_acl()), if its ACL lets
 * us. 0 (also without a digest, or when 'path' does not exist), with
 * '*closed_now' (may be NULL) 1 when we closed it just now (what was read
 * or created there before may have been touched: read it again);
 * DLOCK_EAUTH when it is open and we may not change that; other errors. */
/* Send a sync (the validity ping: its answer also moves valid_until) on
 * 's'. The session answers in order, so a read sent after it returns what
 * the leader had committed when the sync reached it, not an older state of
 * a lagging follower. ZOK once sent, else the client's error. */
int dlock__zk_sync(dlock__zk_sess *s);

int dlock__zk_close_path(dlock__zk *z, dlock__zk_sess *s, const char *path, int *closed_now);
/* "/ns" + "/" + name. */
char *dlock__zk_path(dlock__zk *z, const char *a, const char *b);

#endif /* DLOCK_ZK_INT_H */
