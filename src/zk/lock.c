/*
 * zk/lock.c - locks in Apache Curator's InterProcessMutex layout, so that
 * dlock and Curator exclude each other on the same path:
 *
 *   <namespace>/<name>/_c_<uuid>-lock-<10-digit sequence>
 *
 * created EPHEMERAL_SEQUENTIAL (parents as CONTAINER nodes), ordered by the
 * text after the last "lock-"; the lowest holds; a waiter watches only its
 * predecessor. After a lost reply to the create, our node is found by its
 * "_c_<uuid>-" prefix (Curator's protection mode) instead of creating a
 * second one. The fence is the holder node's czxid. See docs/zookeeper.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/zk_int.h"

#define SEQ_DIGITS 10
/* "_c_" + 36-char uuid + "-": Curator's protected prefix. */
#define PROTECTED_LEN (3 + 36 + 1)
/* The last 8 hex digits of the uuid in every node dlock creates: they tell
 * dlock's nodes from Curator's (whose random uuids match them with a chance
 * of 2^-32). Curator reads and sorts such a node as any other. */
#define DLOCK_UUID_TAG "d10cd10c"
#define TAG_AT (3 + 36 - 8)

/* The text before the sequence number, per side: Curator's lock names
 * (InterProcessMutex "lock-"; InterProcessReadWriteLock "__READ__" and
 * "__WRIT__"; InterProcessSemaphoreV2's leases "lease-"; LeaderLatch's
 * candidates "latch-", an election's, see dlock__zk_side). */
static const char *const MARK[] = {"lock-", "__READ__", "__WRIT__", "lease-", "latch-"};
#define LEASE_MARK 3
#define MARKS 5

void dlock__zk_hold_clear(dlock__zk_hold *h) {
  if (!h) return;
  free(h->lock_path);
  free(h->node_path);
  memset(h, 0, sizeof *h);
}

/* The side (dlock__zk_side, or LEASE_MARK) a child's name ends in: its mark
 * and 10 digits (what Curator's sort key reads); -1 when none. */
static int node_side(const char *child) {
  size_t n = strlen(child);
  if (n < SEQ_DIGITS) return -1;
  const char *d = child + n - SEQ_DIGITS;
  for (int i = 0; i < SEQ_DIGITS; i++)
    if (d[i] < '0' || d[i] > '9') return -1;
  for (int k = 0; k < MARKS; k++) {
    size_t m = strlen(MARK[k]);
    if ((size_t)(d - child) >= m && !memcmp(d - m, MARK[k], m)) return k;
  }
  return -1;
}

/* 1 when 'child' is a node of the lock kind that 'side' belongs to: a
 * mutex's, or either side of a read-write lock's. */
static int is_lock_node(const char *child, dlock__zk_side side) {
  int k = node_side(child);
  if (side == DLOCK__ZK_MUTEX || side == DLOCK__ZK_LATCH) return k == (int)side;
  return k == DLOCK__ZK_READ || k == DLOCK__ZK_WRITE;
}

/* The sort key: the sequence number (Curator strips the lock names). */
static const char *seq_of(const char *child) { return child + strlen(child) - SEQ_DIGITS; }

static int cmp_seq(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  return strcmp(seq_of(x), seq_of(y));
}

static const char *kind_of_side(dlock__zk_side side) {
  return side == DLOCK__ZK_MUTEX ? "a mutex" : side == DLOCK__ZK_LATCH ? "an election" : "a read-write lock";
}

/* What a child of a lock path says the name is, for the error when a
 * caller takes it as another kind. */
static const char *kind_of_child(const char *child) {
  int k = node_side(child);
  if (k == DLOCK__ZK_MUTEX) return "a mutex";
  if (k == DLOCK__ZK_READ || k == DLOCK__ZK_WRITE) return "a read-write lock";
  if (k == DLOCK__ZK_LATCH) return "an election (Curator's LeaderLatch layout)";
  if (!strcmp(child, "locks") || !strcmp(child, "leases")) return "a semaphore";
  return NULL;
}

/* A random UUID (version 4) as Java's UUID.toString() writes it. */
static int make_uuid(char out[37]) {
  char hex[33];
  int rc = dlock__random_hex(hex, 16);
  if (rc) return rc;
  hex[12] = '4';
  static const char variant[] = "89ab";
  hex[16] = variant[(hex[16] >= 'a' ? hex[16] - 'a' + 10 : hex[16] - '0') & 3];
  memcpy(hex + 24, DLOCK_UUID_TAG, 8);
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
  return 0;
}

/* 1 when the node 'child' was created by dlock (make_uuid's tag), 0 when by
 * Curator or anyone else. */
static int is_dlock_node(const char *child) {
  return strlen(child) >= PROTECTED_LEN && !strncmp(child, "_c_", 3) && child[PROTECTED_LEN - 1] == '-' &&
         !memcmp(child + TAG_AT, DLOCK_UUID_TAG, 8);
}

/* The sorted lock nodes among the children of 'lock_path' (which may not
 * exist: then none). DLOCK_EWRONGTYPE when a child belongs to another kind
 * of lock, DLOCK_EFOREIGN when a child is no lock's. */
typedef struct children {
  struct String_vector v;
  char **sorted; /* points into v */
  int n;
  int have_v;
} children;

static void children_free(children *c) {
  if (c->have_v) deallocate_String_vector(&c->v);
  free(c->sorted);
  memset(c, 0, sizeof *c);
}

/* 1 when the child "locks" or "leases" of 'lock_path' is an empty container:
 * what a semaphore leaves behind once its last caller is gone, until the
 * server reaps it (60 s by default). It holds nothing: the name is free for
 * another kind. A semaphore in use has a node below one of them (its lease
 * while it holds, its "locks" node while it queues or adds one), and checks
 * the name's children again after adding them (dlock__zk_sem_acquire). */
static int sem_leftover(dlock__zk_sess *s, const char *lock_path, const char *child) {
  if (strcmp(child, "locks") && strcmp(child, "leases")) return 0;
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", lock_path, child);
  struct Stat st;
  int zrc = zoo_exists(s->zh, path, 0, &st);
  return zrc == ZNONODE || (zrc == ZOK && st.numChildren == 0);
}

static int list_lock_nodes(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, dlock__zk_side side, children *out,
                           int *zrc_out) {
  memset(out, 0, sizeof *out);
  int zrc = zoo_get_children(s->zh, lock_path, 0, &out->v);
  *zrc_out = zrc;
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the lock nodes of", lock_path);
  out->have_v = 1;
  out->sorted = calloc((size_t)out->v.count + 1, sizeof *out->sorted);
  if (!out->sorted) {
    children_free(out);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  for (int i = 0; i < out->v.count; i++) {
    const char *c = out->v.data[i];
    if (!is_lock_node(c, side) && sem_leftover(s, lock_path, c)) continue;
    if (!is_lock_node(c, side)) {
      const char *other = kind_of_child(c);
      int rc = other ? dlock__error(DLOCK_EWRONGTYPE,
                                    "lock path '%s' on %s is held as %s (child '%.200s'), not as %s: a name is one "
                                    "kind of lock at a time; use that kind's calls, or another name",
                                    lock_path, z->server, other, c, kind_of_side(side))
                     : dlock__error(DLOCK_EFOREIGN,
                                    "lock path '%s' on %s holds the child '%.200s', which is not a lock node "
                                    "(_c_<uuid>-%s<10 digits>): the path belongs to something else; choose another "
                                    "lock name (dlock deletes nothing there)",
                                    lock_path, z->server, c, MARK[side]);
      children_free(out);
      return rc;
    }
    out->sorted[out->n++] = out->v.data[i];
  }
  qsort(out->sorted, (size_t)out->n, sizeof *out->sorted, cmp_seq);
  return 0;
}

/* Create 'path' and every missing parent of it as container nodes. */
static int create_parents(dlock__zk *z, dlock__zk_sess *s, const char *path) {
  char *buf = strdup(path);
  if (!buf) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = 0;
  /* Our ACL (dlock__zk_acl()): open without a digest, as Curator's
   * default; with one, only our identity may change them. An existing
   * parent keeps its ACL: the one our nodes go into is checked once they
   * are there (create_node()). */
  for (char *p = strchr(buf + 1, '/');; p = strchr(p + 1, '/')) {
    if (p) *p = '\0';
    int zrc = zoo_create(s->zh, buf, NULL, -1, dlock__zk_acl(z), ZOO_CONTAINER, NULL, 0);
    if (zrc != ZOK && zrc != ZNODEEXISTS) {
      rc = dlock__zk_fail(z, zrc, "create the parent node", buf);
      break;
    }
    if (!p) break;
    *p = '/';
  }
  free(buf);
  return rc;
}

/* Find our node by its protected prefix after a create whose reply was
 * lost. 1 found (path into 'out'), 0 not there, < 0 error. A node with our
 * prefix but another session's (an earlier session of ours) is deleted, as
 * Curator's ProtectedMode does. */
static int find_protected(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const char *prefix, char *out,
                          size_t outlen, int64_t *czxid) {
  struct String_vector v;
  int zrc = zoo_get_children(s->zh, lock_path, 0, &v);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "look for our lock node in", lock_path);
  int found = 0;
  for (int i = 0; i < v.count && !found; i++) {
    if (strncmp(v.data[i], prefix, strlen(prefix))) continue;
    snprintf(out, outlen, "%s/%s", lock_path, v.data[i]);
    struct Stat st;
    zrc = zoo_exists(s->zh, out, 0, &st);
    if (zrc == ZOK && st.ephemeralOwner != s->id) {
      zoo_delete(s->zh, out, -1);
      continue;
    }
    found = zrc == ZOK;
    if (found) *czxid = st.czxid;
  }
  deallocate_String_vector(&v);
  return found;
}

/* Delete our node, retrying over reconnects until the session's end. 0 gone
 * (deleted now or before), DLOCK_EUNKNOWN when no answer came. */
static int delete_own(dlock__zk *z, dlock__zk_sess *s, const char *node_path) {
  while (1) {
    int zrc = zoo_delete(s->zh, node_path, -1);
    if (zrc == ZOK || zrc == ZNONODE) return 0;
    if (zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) return 0; /* ephemeral: gone with the session */
    if (!dlock__zk_rc_uncertain(zrc)) return dlock__zk_fail(z, zrc, "delete our lock node", node_path);
    if (!dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
      return dlock__error(DLOCK_EUNKNOWN,
                          "delete our lock node '%s' on %s: no answer before the session's end; the node goes "
                          "with the session",
                          node_path, z->server);
  }
}

static int wait_for_wake(dlock__zk *z, unsigned gen, dlock_mono_ms deadline, const atomic_int *cancel) {
  pthread_mutex_lock(&z->mu);
  while (z->wake_gen == gen && !(cancel && atomic_load(cancel)) && !z->stop &&
         (deadline < 0 || dlock_mono_now() < deadline)) {
    struct timespec ts;
    dlock_mono_ms until = dlock_mono_now() + 1000;
    if (deadline >= 0 && deadline < until) until = deadline;
    dlock__deadline_timespec(until, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  pthread_mutex_unlock(&z->mu);
  return 0;
}

/* Create our EPHEMERAL_SEQUENTIAL node "<parent>/_c_<uuid>-<mark><seq>"
 * with 'data', its full path into 'node' and its czxid (the fence, should
 * it hold) into '*czxid': the create returns it (zoo_create2), so no read
 * follows. A create whose reply was lost is resolved by looking for our
 * protected prefix (Curator's protection mode) instead of creating a second
 * node; missing parents are created. */
static int create_node(dlock__zk *z, dlock__zk_sess *s, const char *parent, const char *mark, const char *data,
                       char *node, size_t nodelen, int64_t *czxid) {
  char uuid[37], prefix[PROTECTED_LEN + 1];
  int rc = make_uuid(uuid);
  if (rc) return rc;
  snprintf(prefix, sizeof prefix, "_c_%s-", uuid);
  size_t cpn = strlen(parent) + 1 + strlen(prefix) + strlen(mark) + 1;
  char *create_path = malloc(cpn);
  if (!create_path) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(create_path, cpn, "%s/%s%s", parent, prefix, mark);
  int tries = 0;
  while (1) {
    struct Stat st;
    int zrc = zoo_create2(s->zh, create_path, data, (int)strlen(data), dlock__zk_acl(z), ZOO_EPHEMERAL_SEQUENTIAL, node,
                          (int)nodelen - 1, &st);
    if (zrc == ZOK) {
      *czxid = st.czxid;
      break;
    }
    if (zrc == ZNONODE && tries++ < 8) {
      rc = create_parents(z, s, parent);
      if (rc) break;
      continue;
    }
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED) {
      /* The create may have run: find it by our prefix before creating again. */
      if (!dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
        rc = dlock__error(DLOCK_EUNKNOWN,
                          "create our node in '%s' on %s: no answer, and the session ended; if it was created "
                          "it went with the session",
                          parent, z->server);
        break;
      }
      char found[1200];
      int f, finds = 0;
      do {
        f = find_protected(z, s, parent, prefix, found, sizeof found, czxid);
      } while (f < 0 && ++finds < 8 && dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)));
      if (f < 0) {
        /* A node we cannot find nor rule out would block the lock for
         * everyone until our session ends: say so. */
        char why[512];
        snprintf(why, sizeof why, "%s", dlock_last_error());
        rc = dlock__error(DLOCK_EUNKNOWN,
                          "create our node in '%s' on %s: no answer, and looking for it failed (%s); if it was "
                          "created it holds or queues until this session ends",
                          parent, z->server, why);
        break;
      }
      if (f == 1) {
        /* zoo_create returns the path relative to the chroot: we use none. */
        snprintf(node, nodelen, "%s", found);
        break;
      }
      if (tries++ < 8) continue;
    }
    rc = dlock__zk_fail(z, zrc, "create our node in", parent);
    break;
  }
  free(create_path);
  /* With a digest, the parent our node is in must not let clients without
   * credentials delete it or queue ahead of it: one left open (by a client
   * without a digest) is closed now. Checked after the create, as the
   * parent cannot be replaced while our node is in it. Closed just now:
   * the caller's next look at the children finds our node or its loss. */
  if (!rc && (rc = dlock__zk_close_path(z, s, parent, NULL)) != 0) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    int drc = delete_own(z, s, node);
    if (drc == DLOCK_EUNKNOWN)
      rc = drc;
    else
      dlock__error(rc, "%s", saved);
    node[0] = '\0';
  }
  return rc;
}

/* Fill 'out' for our node 'node' once it holds: its fence ('czxid', from
 * its create; read now if 0) and the deadline of the session that created it. */
static int take_hold(dlock__zk *z, dlock__zk_sess *s, char **lock_path, const char *node, int64_t czxid,
                     dlock__zk_hold *out) {
  if (czxid <= 0) {
    struct Stat st;
    int zrc = zoo_exists(s->zh, node, 0, &st);
    if (zrc != ZOK) return dlock__zk_fail(z, zrc, "read the fence (czxid) of", node);
    czxid = st.czxid;
  }
  /* The hold is valid as long as the session that created our node: its
   * own deadline, read now (not the client's current session, which a
   * reconnect may have replaced). */
  pthread_mutex_lock(&z->mu);
  dlock_mono_ms valid_until = s->valid_until;
  dlock_lost_reason gone = s->lost;
  pthread_mutex_unlock(&z->mu);
  if (gone != DLOCK_LOST_NONE || dlock_mono_now() >= valid_until)
    return dlock__error(DLOCK_ELOST,
                        "the session that holds our node %s ended (or may have) before the lock "
                        "came to us; its node goes with it: try again",
                        node);
  out->node_path = strdup(node);
  if (!out->node_path) return dlock__error(DLOCK_ENOMEM, "out of memory");
  out->lock_path = *lock_path;
  *lock_path = NULL;
  out->fence = (uint64_t)czxid;
  out->session = s->id;
  out->valid_until = valid_until;
  return 0;
}

/* ---- The lock machine: one acquire, wait and give-up for every kind ----
 *
 * Every kind queues the same way: our EPHEMERAL_SEQUENTIAL node goes into
 * the kind's parent node, and we wait, watching one node, until the kind
 * says the node holds. What differs is a descriptor (zk_kind, below the
 * machine): the checks before our node is created and what the kind holds
 * meanwhile (enter, created, leave), the one look that says whether our
 * node holds or what to watch (look), and its messages. */

typedef struct zk_kind zk_kind;

/* One acquire in progress. */
typedef struct zk_turn {
  dlock__zk *z;
  dlock__zk_sess *s;
  const zk_kind *kind;
  const char *name;       /* as the caller gave it */
  char *lock_path;        /* "/ns/name": the hold's lock_path, and the path in messages */
  const char *parent;     /* where our node goes (set by enter) */
  char node[1200];        /* our node, once created */
  int64_t czxid;          /* its czxid, from the create */
  const char *own;        /* its name below the parent */
  const char *owner_info; /* our node's data */
  int64_t wait_ms;
  const atomic_int *cancel;
  int permits;         /* a semaphore's limit */
  int planted_dropped; /* persistent nodes ahead deleted (a mutex's or read-write lock's queue) */
  char ahead[600];     /* the node ahead, for the busy message */
  /* A semaphore's: its "leases" and "locks" paths, and the "locks" mutex
   * held while our lease is added and waits. */
  char *leases, *locks;
  dlock__zk_hold mx;
} zk_turn;

/* look(): our node holds, we wait (a watch is set), or look again at once. */
enum { LOOK_WAIT = 0, LOOK_HOLDS = 1, LOOK_AGAIN = 2 };

struct zk_kind {
  int side; /* its nodes' dlock__zk_side (a semaphore: its "locks" queue's, DLOCK__ZK_MUTEX) */
  int mark; /* the mark of our node: MARK[mark] */
  /* Before our node is created: check the name's path and set t->parent. */
  int (*enter)(zk_turn *t);
  /* Once it is created (may be NULL): checks that need our node there. */
  int (*created)(zk_turn *t);
  /* One look at the queue: LOOK_HOLDS, LOOK_WAIT (a watch is set and
   * t->ahead says on what), LOOK_AGAIN, or a DLOCK_E* status with '*zrc'
   * the ZooKeeper code behind it (looked at again after a reconnect when it
   * may not have run). */
  int (*look)(zk_turn *t, int *zrc);
  /* The message of a wait that ran out (DLOCK_EBUSY). */
  int (*busy)(const zk_turn *t);
  /* After the acquire (may be NULL): let go of what enter took. */
  void (*leave)(zk_turn *t, int rc);
  /* Status (dlock__zk_info_get): 0, or LOOK_AGAIN when the holder went
   * while it was read. */
  int (*info)(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, dlock__zk_info *out);
  /* Force release (dlock__zk_force_release): delete the holders' nodes; 1
   * deleted, 0 none held, or < 0. */
  int (*force)(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, uint64_t fence);
};

static int queue_info(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, dlock__zk_info *out);
static int queue_force(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, uint64_t fence);
static int sem_info(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, dlock__zk_info *out);
static int sem_force(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, uint64_t fence);

/* Our node is to go: a waiter that gave up, or an acquire that failed.
 * Deleting it passes the lock on if it had just come to us. A wait that
 * ran out or was canceled reports a delete that failed instead (the node
 * would stay ahead of others); a lost session keeps its status (the node
 * goes with it); any other failure gives way only to DLOCK_EUNKNOWN. */
static int give_back(zk_turn *t, int rc) {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int drc = delete_own(t->z, t->s, t->node);
  if ((rc == DLOCK_EBUSY || rc == DLOCK_ECANCELED) && drc) return drc;
  if (drc == DLOCK_EUNKNOWN && rc != DLOCK_ELOST) return drc;
  return dlock__error(rc, "%s", saved);
}

/* Wait our turn: look, watch, wake, until our node holds (0, '*out'), the
 * wait runs out, is canceled, or fails. */
static int wait_turn(zk_turn *t, dlock_mono_ms deadline, dlock__zk_hold *out) {
  dlock__zk *z = t->z;
  dlock__zk_sess *s = t->s;
  while (1) {
    pthread_mutex_lock(&z->mu);
    unsigned gen = z->wake_gen;
    dlock_lost_reason lost = s->lost;
    pthread_mutex_unlock(&z->mu);
    if (lost)
      /* The session may be over: a hold taken now could already be
       * another's. Our node, if it still exists, goes with the session. */
      return dlock__error(DLOCK_ELOST, "the ZooKeeper session was lost (%s) while waiting at %s",
                          dlock_lost_reason_str(lost), t->lock_path);
    int zrc = ZOK;
    int rc = t->kind->look(t, &zrc);
    if (rc == LOOK_AGAIN) continue;
    if (rc == LOOK_HOLDS) return take_hold(z, s, &t->lock_path, t->node, t->czxid, out);
    if (rc < 0) {
      if (zrc != ZOK && dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
          dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
        continue;
      return rc;
    }
    /* Checked once the node watched is known to be a real one. */
    if (deadline >= 0 && dlock_mono_now() >= deadline) return t->kind->busy(t);
    if (t->cancel && atomic_load(t->cancel))
      return dlock__error(DLOCK_ECANCELED, "canceled while waiting at %s", t->lock_path);
    wait_for_wake(z, gen, deadline, t->cancel);
  }
}

/* Take the lock 'name' of kind 'k': check its path, create our node, wait
 * our turn. 'name' has been checked by the caller. */
static int acquire(dlock__zk *z, const char *name, const zk_kind *k, int permits, const char *owner_info,
                   int64_t wait_ms, const atomic_int *cancel, dlock__zk_hold *out) {
  int rc;
  if (wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER)
    return dlock__error(DLOCK_EINVAL, "acquire '%s': wait must be >= 0 or DLOCK_WAIT_FOREVER", name);
  dlock_mono_ms deadline = wait_ms == DLOCK_WAIT_FOREVER ? -1 : dlock_mono_now() + wait_ms;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  zk_turn t = {.z = z,
               .s = s,
               .kind = k,
               .name = name,
               .owner_info = owner_info ? owner_info : "",
               .wait_ms = wait_ms,
               .cancel = cancel,
               .permits = permits};
  t.lock_path = dlock__zk_path(z, name, NULL);
  if (!t.lock_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  /* A path that holds foreign children, or another kind's, is refused
   * before we add a node to it. */
  if ((rc = k->enter(&t))) goto out;
  if ((rc = create_node(z, s, t.parent, MARK[k->mark], t.owner_info, t.node, sizeof t.node, &t.czxid))) goto out;
  t.own = strrchr(t.node, '/') + 1;
  if (k->created) rc = k->created(&t);
  if (!rc) rc = wait_turn(&t, deadline, out);
  if (rc) rc = give_back(&t, rc);
out:
  if (k->leave) k->leave(&t, rc);
  free(t.lock_path);
  dlock__zk_sess_put(s);
  return rc;
}

/* ---- Mutexes and read-write locks: Curator's InterProcessMutex and
 * InterProcessReadWriteLock, our node in the lock path itself ---- */

/* Refuse a path that holds another kind's or foreign children. */
static int queue_enter(zk_turn *t) {
  children ch;
  int zrc;
  int rc = list_lock_nodes(t->z, t->s, t->lock_path, (dlock__zk_side)t->kind->side, &ch, &zrc);
  children_free(&ch);
  t->parent = t->lock_path;
  return rc;
}

/* Curator's rules: a mutex's or a writer's node holds when it is the first
 * of all and watches its predecessor; a reader's holds when no writer's node
 * comes before it and watches the first that does (so a waiting writer
 * keeps later readers out). */
static int queue_look(zk_turn *t, int *zrc) {
  dlock__zk *z = t->z;
  dlock__zk_sess *s = t->s;
  dlock__zk_side side = (dlock__zk_side)t->kind->side;
  children ch;
  int rc = list_lock_nodes(z, s, t->lock_path, side, &ch, zrc);
  if (rc) return rc;
  int idx = -1;
  for (int i = 0; i < ch.n; i++)
    if (!strcmp(ch.sorted[i], t->own)) idx = i;
  if (idx < 0) {
    children_free(&ch);
    return dlock__error(DLOCK_ELOST,
                        "our lock node %s/%s disappeared while waiting (session expired, or a force-release)",
                        t->lock_path, t->own);
  }
  int watch = idx - 1;
  if (side == DLOCK__ZK_READ) {
    watch = -1;
    for (int i = 0; i < idx && watch < 0; i++)
      if (node_side(ch.sorted[i]) == DLOCK__ZK_WRITE) watch = i;
  }
  if (watch < 0) {
    children_free(&ch);
    return LOOK_HOLDS;
  }
  /* Watch one node only: no herd when the holder leaves. */
  char pred[1200];
  snprintf(pred, sizeof pred, "%s/%s", t->lock_path, ch.sorted[watch]);
  /* For the message: the writer ahead, or the holder. */
  snprintf(t->ahead, sizeof t->ahead, "%s", ch.sorted[side == DLOCK__ZK_READ ? watch : 0]);
  children_free(&ch);
  char buf[1];
  int blen = (int)sizeof buf;
  struct Stat pst;
  int wrc = zoo_wget(s->zh, pred, dlock__zk_node_watcher, z, buf, &blen, &pst);
  if (wrc == ZNONODE) return LOOK_AGAIN;
  if (wrc != ZOK) {
    *zrc = wrc;
    return dlock__zk_fail(z, wrc, "watch the node ahead", pred);
  }
  /* With a digest, a persistent node ahead (no session owns it) is no
   * holder nor waiter: every lock node is ephemeral. One is planted by a
   * client without credentials while the path was open (create_node()
   * closed it since); it would stay ahead of every waiter for good.
   * Deleted (only that version of it), then we look again. Bounded: the
   * path is closed, so no new one can be planted. */
  if (z->url.digest && pst.ephemeralOwner == 0 && t->planted_dropped < 64) {
    t->planted_dropped++;
    int drc = zoo_delete(s->zh, pred, pst.version);
    if (drc == ZOK || drc == ZNONODE || drc == ZBADVERSION) return LOOK_AGAIN;
    if (dlock__zk_rc_uncertain(drc) && drc != ZSESSIONEXPIRED && dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
      return LOOK_AGAIN;
    return dlock__error(drc == ZNOAUTH ? DLOCK_EAUTH : DLOCK_EBUSY,
                        "lock '%s' on %s: the node ahead %s is persistent (no session owns it, so it is no lock "
                        "holder) and could not be deleted (%s); delete it (zkCli: delete %s) and close the path's "
                        "ACL",
                        t->lock_path, z->server, pred, zerror(drc), pred);
  }
  return LOOK_WAIT;
}

static int mutex_busy(const zk_turn *t) {
  return dlock__error(DLOCK_EBUSY, "lock '%s' on %s is held (holder node %s)", t->lock_path, t->z->server, t->ahead);
}

static int read_busy(const zk_turn *t) {
  return dlock__error(DLOCK_EBUSY, "lock '%s' on %s is held for writing or a writer waits ahead (node %s)",
                      t->lock_path, t->z->server, t->ahead);
}

/* Indexed by dlock__zk_side. */
static const zk_kind QUEUE_KINDS[] = {
    [DLOCK__ZK_MUTEX] = {DLOCK__ZK_MUTEX, DLOCK__ZK_MUTEX, queue_enter, NULL, queue_look, mutex_busy, NULL, queue_info,
                         queue_force},
    [DLOCK__ZK_READ] = {DLOCK__ZK_READ, DLOCK__ZK_READ, queue_enter, NULL, queue_look, read_busy, NULL, queue_info,
                        queue_force},
    [DLOCK__ZK_WRITE] = {DLOCK__ZK_WRITE, DLOCK__ZK_WRITE, queue_enter, NULL, queue_look, mutex_busy, NULL, queue_info,
                         queue_force},
    /* An election: a mutex in Curator's LeaderLatch layout. */
    [DLOCK__ZK_LATCH] = {DLOCK__ZK_LATCH, DLOCK__ZK_LATCH, queue_enter, NULL, queue_look, mutex_busy, NULL, queue_info,
                         queue_force},
};

/* ---- Semaphores: Curator's InterProcessSemaphoreV2 ----
 *
 *   <name>/locks/_c_<uuid>-lock-<seq>    a mutex: one caller at a time adds
 *                                        a lease and waits for it to count
 *   <name>/leases/_c_<uuid>-lease-<seq>  one per permit held (ephemeral)
 *
 * A lease holds while the leases number at most the limit; the caller
 * holding "locks" is the only one adding a lease, so the others queue on
 * that mutex in order (FIFO). The limit is dlock's addition, kept as the
 * data of "leases" ("dlock-limit=N"), which Curator never reads; the
 * container goes (with the limit) once its last lease is gone. */

#define LIMIT_TAG "dlock-limit="

/* Parse "dlock-limit=N": N, or 0 when the data is not ours (Curator's
 * default data is the client's address). */
static int64_t parse_limit(const char *data, int len) {
  size_t tl = strlen(LIMIT_TAG);
  if (len <= (int)tl || memcmp(data, LIMIT_TAG, tl)) return 0;
  int64_t v = 0;
  for (int i = (int)tl; i < len; i++) {
    if (data[i] < '0' || data[i] > '9' || v > 100000000) return 0;
    v = v * 10 + (data[i] - '0');
  }
  return v;
}

/* The error for a caller whose limit is not the stored one. */
static int limit_mismatch(dlock__zk *z, const char *name, int64_t have, int permits) {
  return dlock__error(DLOCK_ELIMIT,
                      "semaphore '%s' on %s has %lld permits (stored by its holders), but this caller asks for %d: "
                      "all callers must give the same number; the stored limit goes with the last permit",
                      name, z->server, (long long)have, permits);
}

/* Record or check the limit on "leases" (called holding "locks"). */
static int sem_limit(dlock__zk *z, dlock__zk_sess *s, const char *name, const char *leases, int permits) {
  char want[64];
  snprintf(want, sizeof want, LIMIT_TAG "%d", permits);
  for (int attempt = 0; attempt < 8; attempt++) {
    char data[64];
    int len = (int)sizeof data - 1;
    struct Stat st;
    int zrc = zoo_get(s->zh, leases, 0, data, &len, &st);
    if (zrc == ZNONODE) {
      char *up = strdup(leases);
      if (!up) return dlock__error(DLOCK_ENOMEM, "out of memory");
      *strrchr(up, '/') = '\0';
      int rc = create_parents(z, s, up);
      free(up);
      if (rc) return rc;
      zrc = zoo_create(s->zh, leases, want, (int)strlen(want), dlock__zk_acl(z), ZOO_CONTAINER, NULL, 0);
      if (zrc == ZOK || zrc == ZNODEEXISTS) continue; /* read it back */
      return dlock__zk_fail(z, zrc, "create the leases node", leases);
    }
    if (zrc != ZOK) return dlock__zk_fail(z, zrc, "read the limit of", leases);
    int64_t have = parse_limit(data, len < 0 ? 0 : len);
    if (have == permits) return 0;
    if (have != 0 && st.numChildren > 0) return limit_mismatch(z, name, have, permits);
    /* Not ours yet (Curator made it), or left by holders all gone: ours. */
    zrc = zoo_set(s->zh, leases, want, (int)strlen(want), st.version);
    if (zrc == ZOK) return 0;
    if (zrc != ZBADVERSION && zrc != ZNONODE) return dlock__zk_fail(z, zrc, "record the limit on", leases);
  }
  return dlock__error(DLOCK_EUNKNOWN, "semaphore '%s' on %s: the limit on %s kept changing; try again", name, z->server,
                      leases);
}

/* The children of the semaphore's path must be "locks" and "leases" only. */
static int sem_check_path(dlock__zk *z, dlock__zk_sess *s, const char *path) {
  struct String_vector v;
  int zrc = zoo_get_children(s->zh, path, 0, &v);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the children of", path);
  int rc = 0;
  for (int i = 0; i < v.count && !rc; i++) {
    const char *c = v.data[i];
    if (!strcmp(c, "locks") || !strcmp(c, "leases")) continue;
    const char *other = kind_of_child(c);
    rc = other ? dlock__error(DLOCK_EWRONGTYPE,
                              "lock path '%s' on %s is held as %s (child '%.200s'), not as a semaphore: a name is "
                              "one kind of lock at a time; use that kind's calls, or another name",
                              path, z->server, other, c)
               : dlock__error(DLOCK_EFOREIGN,
                              "lock path '%s' on %s holds the child '%.200s', which is not a semaphore's (locks, "
                              "leases): the path belongs to something else; choose another name",
                              path, z->server, c);
  }
  deallocate_String_vector(&v);
  return rc;
}

/* Check the path, then take "locks" (our turn to add a lease) within the
 * caller's wait; our lease goes into "leases". */
static int sem_enter(zk_turn *t) {
  dlock__zk *z = t->z;
  dlock__zk_sess *s = t->s;
  t->leases = dlock__zk_path(z, t->name, "leases");
  size_t ln = strlen(t->name) + sizeof "/locks";
  t->locks = malloc(ln);
  if (!t->leases || !t->locks) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(t->locks, ln, "%s/locks", t->name);
  t->parent = t->leases;
  int rc = sem_check_path(z, s, t->lock_path);
  if (rc) return rc;
  /* A try (wait 0) with a permit free waits a moment for "locks": its
   * holder may just be adding a lease of its own; with none free it is busy. */
  int64_t mx_wait = t->wait_ms;
  if (t->wait_ms == 0) {
    struct Stat st;
    char data[64];
    int len = (int)sizeof data - 1;
    int zrc = zoo_get(s->zh, t->leases, 0, data, &len, &st);
    if (zrc != ZOK && zrc != ZNONODE) return dlock__zk_fail(z, zrc, "count the leases of", t->leases);
    /* Another limit than the stored one is an error, not "busy" (as
     * sem_limit answers it under "locks"). */
    int64_t have = zrc == ZOK ? parse_limit(data, len < 0 ? 0 : len) : 0;
    if (zrc == ZOK && have != 0 && have != t->permits && st.numChildren > 0)
      return limit_mismatch(z, t->name, have, t->permits);
    if (zrc == ZOK && st.numChildren >= t->permits)
      return dlock__error(DLOCK_EBUSY, "semaphore '%s' on %s: all %d permits are taken", t->lock_path, z->server,
                          t->permits);
    mx_wait = 2000;
  }
  rc = acquire(z, t->locks, &QUEUE_KINDS[DLOCK__ZK_MUTEX], 0, t->owner_info, mx_wait, t->cancel, &t->mx);
  if (rc == DLOCK_EBUSY)
    return dlock__error(DLOCK_EBUSY, "semaphore '%s' on %s: all permits are taken and others wait ahead", t->lock_path,
                        z->server);
  if (rc) return rc;
  return sem_limit(z, s, t->name, t->leases, t->permits);
}

static int sem_created(zk_turn *t) {
  /* Once more: had the server reaped the empty "leases" container in the
   * meantime, the create made it again, without the limit. */
  int rc = sem_limit(t->z, t->s, t->name, t->leases, t->permits);
  if (rc) return rc;
  /* And the name's children once more, now that "locks" and our lease
   * exist: a mutex or read-write lock node created after our first look
   * (its acquire listed the children before "locks" was there) would hold
   * alongside us. Either its look sees "locks", or this one sees its node. */
  return sem_check_path(t->z, t->s, t->lock_path);
}

/* Our lease holds while the leases number at most the limit; we watch
 * them all (only the holder of "locks" waits here). */
static int sem_look(zk_turn *t, int *zrc) {
  struct String_vector v;
  int wrc = zoo_wget_children(t->s->zh, t->leases, dlock__zk_node_watcher, t->z, &v);
  if (wrc != ZOK) {
    *zrc = wrc;
    return dlock__zk_fail(t->z, wrc, "list the leases of", t->leases);
  }
  int mine = 0, count = v.count;
  for (int i = 0; i < v.count; i++)
    if (!strcmp(v.data[i], t->own)) mine = 1;
  deallocate_String_vector(&v);
  if (!mine)
    return dlock__error(DLOCK_ELOST,
                        "our lease node %s disappeared while waiting at %s (session expired, or a "
                        "force-release)",
                        t->own, t->lock_path);
  return count <= t->permits ? LOOK_HOLDS : LOOK_WAIT;
}

static int sem_busy(const zk_turn *t) {
  return dlock__error(DLOCK_EBUSY, "semaphore '%s' on %s: all %d permits stayed taken", t->lock_path, t->z->server,
                      t->permits);
}

/* Let the next caller add its lease; keep our outcome's message. */
static void sem_leave(zk_turn *t, int rc) {
  if (t->mx.node_path) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    (void)dlock__zk_release(t->z, &t->mx);
    if (rc) dlock__error(rc, "%s", saved);
  }
  dlock__zk_hold_clear(&t->mx);
  free(t->leases);
  free(t->locks);
}

static const zk_kind SEM_KIND = {DLOCK__ZK_MUTEX, LEASE_MARK, sem_enter, sem_created, sem_look,
                                 sem_busy,        sem_leave,  sem_info,  sem_force};

/* ---- The kinds' entry points ---- */

int dlock__zk_acquire(dlock__zk *z, const char *name, const char *owner_info, int64_t wait_ms, const atomic_int *cancel,
                      dlock__zk_hold *out) {
  return dlock__zk_acquire_side(z, name, DLOCK__ZK_MUTEX, owner_info, wait_ms, cancel, out);
}

int dlock__zk_acquire_side(dlock__zk *z, const char *name, dlock__zk_side side, const char *owner_info, int64_t wait_ms,
                           const atomic_int *cancel, dlock__zk_hold *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  return acquire(z, name, &QUEUE_KINDS[side], 0, owner_info, wait_ms, cancel, out);
}

int dlock__zk_sem_acquire(dlock__zk *z, const char *name, int permits, const char *owner_info, int64_t wait_ms,
                          const atomic_int *cancel, dlock__zk_hold *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("semaphore name", name);
  if (rc) return rc;
  return acquire(z, name, &SEM_KIND, permits, owner_info, wait_ms, cancel, out);
}

int dlock__zk_job_lock_try(dlock__zk *z, const char *job, const char *owner_info, dlock__zk_hold *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  size_t n = strlen(job) + sizeof "_dlock_sched//run";
  char *name = malloc(n);
  if (!name) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(name, n, "_dlock_sched/%s/run", job);
  rc = acquire(z, name, &QUEUE_KINDS[DLOCK__ZK_MUTEX], 0, owner_info, 0, NULL, out);
  free(name);
  return rc;
}

int dlock__zk_release(dlock__zk *z, dlock__zk_hold *h) {
  if (!h || !h->node_path) return dlock__error(DLOCK_ENOTHELD, "release: not held");
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  if (s->id != h->session) {
    dlock__zk_sess_put(s);
    return dlock__error(DLOCK_ENOTHELD, "release '%s' on %s: the session that held it is over (the node went with it)",
                        h->lock_path, z->server);
  }
  int resent = 0;
  while (1) {
    int zrc = zoo_delete(s->zh, h->node_path, -1);
    if (zrc == ZOK) {
      rc = 0;
      break;
    }
    if (zrc == ZNONODE) {
      /* After a lost reply in the same session, only our first delete (or
       * a force-release) can have removed it: released. */
      rc = resent ? 0
                  : dlock__error(DLOCK_ENOTHELD, "release '%s' on %s: our lock node %s was already gone", h->lock_path,
                                 z->server, h->node_path);
      break;
    }
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED) {
      resent = 1;
      if (dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) continue;
      rc = dlock__error(DLOCK_EUNKNOWN,
                        "release '%s' on %s: no answer before the session's end; the node goes with the session",
                        h->lock_path, z->server);
      break;
    }
    rc = dlock__zk_fail(z, zrc, "release (delete)", h->node_path);
    break;
  }
  dlock__zk_sess_put(s);
  return rc;
}

/* An exists whose caller may stop waiting: the last of the two (caller,
 * completion) frees it. */
typedef struct held_call {
  dlock__zk *z;
  int done, abandoned, zrc;
  int64_t owner;
} held_call;

static void held_done(int rc, const struct Stat *st, const void *data) {
  held_call *c = (held_call *)data;
  dlock__zk *z = c->z;
  pthread_mutex_lock(&z->mu);
  c->zrc = rc;
  if (rc == ZOK && st) c->owner = st->ephemeralOwner;
  c->done = 1;
  int mine = c->abandoned;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (mine) free(c);
}

int dlock__zk_is_held_until(dlock__zk *z, const dlock__zk_hold *h, dlock_mono_ms deadline) {
  if (!h || !h->node_path) return 0;
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  /* No answer matters after the session's deadline, and a server cut off
   * from its leader answers only when the connection ends (our read queues
   * behind the validity ping's sync): wait no longer than that. */
  dlock_mono_ms limit = dlock__zk_retry_limit(s);
  if (deadline < limit) limit = deadline;
  held_call *c = calloc(1, sizeof *c);
  if (!c) {
    dlock__zk_sess_put(s);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  c->z = z;
  int zrc = zoo_aexists(s->zh, h->node_path, 0, held_done, c);
  if (zrc != ZOK) {
    free(c);
    rc = dlock__zk_fail(z, zrc, "check our lock node", h->node_path);
    dlock__zk_sess_put(s);
    return rc;
  }
  pthread_mutex_lock(&z->mu);
  while (!c->done && dlock_mono_now() < limit) {
    struct timespec ts;
    dlock__deadline_timespec(limit, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  int done = c->done;
  zrc = c->zrc;
  int64_t owner = c->owner;
  if (!done) c->abandoned = 1;
  pthread_mutex_unlock(&z->mu);
  if (!done) {
    rc = dlock__error(DLOCK_ETIMEDOUT,
                      "check our lock node '%s' on %s: no answer before the session's deadline "
                      "(is the server cut off from the ensemble's leader?)",
                      h->node_path, z->server);
  } else {
    free(c);
    if (zrc == ZOK)
      rc = owner == h->session && s->id == h->session;
    else if (zrc == ZNONODE)
      rc = 0;
    else
      rc = dlock__zk_fail(z, zrc, "check our lock node", h->node_path);
  }
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_is_held(dlock__zk *z, const dlock__zk_hold *h) { return dlock__zk_is_held_until(z, h, INT64_MAX); }

/* ---- The holder's watch ---- */

static void held_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh, (void)state, (void)path;
  if (type == ZOO_DELETED_EVENT) dlock__zk_node_gone(ctx);
}

/* The exists that sets the watch: the node may be gone already (a forced
 * release before it arrived). */
static void held_exists_done(int rc, const struct Stat *st, const void *data) {
  (void)st;
  if (rc == ZNONODE) dlock__zk_node_gone((dlock__zk *)data);
}

void dlock__zk_watch_held(dlock__zk *z, const dlock__zk_hold *h) {
  int rc;
  if (!h->node_path) return;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) {
    dlock__error_clear(); /* the watchdog's next look finds out */
    return;
  }
  (void)zoo_awexists(s->zh, h->node_path, held_watcher, z, held_exists_done, z);
  dlock__zk_sess_put(s);
}

/* What kind of lock the children of 'lock_path' say it is, into '*k': a
 * mutex's, a read-write lock's (its read side lists both sides), a
 * semaphore's ("locks"/"leases"), an election's; NULL when the path does
 * not exist or has no child (but a semaphore's empty leftovers): nothing is
 * held, whatever kind the name is about to be (a candidate standing just
 * then is not a wrong type). 0 or the error. */
static int path_kind(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind **k) {
  struct String_vector v;
  int zrc = zoo_get_children(s->zh, lock_path, 0, &v);
  *k = NULL;
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the lock nodes of", lock_path);
  int any = 0; /* a child that is no semaphore's leftover: a mutex's unless another kind's */
  for (int i = 0; i < v.count && *k != &SEM_KIND; i++) {
    const char *c = v.data[i];
    int side = node_side(c);
    if (!strcmp(c, "leases") || !strcmp(c, "locks")) {
      if (!sem_leftover(s, lock_path, c)) *k = &SEM_KIND;
      continue;
    }
    any = 1;
    if (side == DLOCK__ZK_READ || side == DLOCK__ZK_WRITE)
      *k = &QUEUE_KINDS[DLOCK__ZK_READ];
    else if (side == DLOCK__ZK_LATCH)
      *k = &QUEUE_KINDS[DLOCK__ZK_LATCH];
  }
  if (!*k && any) *k = &QUEUE_KINDS[DLOCK__ZK_MUTEX];
  deallocate_String_vector(&v);
  return 0;
}

/* A semaphore's state: the leases (permits used), the limit on "leases",
 * the newest lease's data, and the callers queued on "locks". */
static int sem_info(dlock__zk *z, dlock__zk_sess *s, const char *path, const zk_kind *k, dlock__zk_info *out) {
  (void)k;
  char *leases = malloc(strlen(path) + sizeof "/leases"), *locks = malloc(strlen(path) + sizeof "/locks");
  struct String_vector v = {0};
  int rc = 0, have_v = 0;
  if (!leases || !locks) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  sprintf(leases, "%s/leases", path);
  sprintf(locks, "%s/locks", path);
  out->kind = 3;
  char data[64];
  int len = (int)sizeof data - 1;
  struct Stat st;
  int zrc = zoo_get(s->zh, leases, 0, data, &len, &st);
  if (zrc == ZNONODE) goto queue;
  if (zrc != ZOK) {
    rc = dlock__zk_fail(z, zrc, "read the limit of", leases);
    goto out;
  }
  out->permits = parse_limit(data, len < 0 ? 0 : len);
  zrc = zoo_get_children(s->zh, leases, 0, &v);
  if (zrc == ZNONODE) goto queue;
  if (zrc != ZOK) {
    rc = dlock__zk_fail(z, zrc, "list the leases of", leases);
    goto out;
  }
  have_v = 1;
  /* The newest two leases: with more leases than the limit the newest is
   * the caller holding "locks" and waiting for a permit (only it adds a
   * lease), neither a permit used nor the holder to show. */
  const char *newest = NULL, *second = NULL;
  for (int i = 0; i < v.count; i++) {
    if (node_side(v.data[i]) != LEASE_MARK) continue;
    out->permits_used++;
    if (!newest || strcmp(seq_of(v.data[i]), seq_of(newest)) > 0) {
      second = newest;
      newest = v.data[i];
    } else if (!second || strcmp(seq_of(v.data[i]), seq_of(second)) > 0) {
      second = v.data[i];
    }
  }
  if (out->permits > 0 && out->permits_used > out->permits) {
    out->permits_used--;
    newest = second;
  }
  if (newest) {
    char node[1200];
    snprintf(node, sizeof node, "%s/%s", leases, newest);
    len = (int)sizeof out->owner_info - 1;
    zrc = zoo_get(s->zh, node, 0, out->owner_info, &len, &st);
    if (zrc == ZOK) {
      out->owner_info[len > 0 ? len : 0] = '\0';
      out->held = 1;
      out->fence = (uint64_t)st.czxid;
      out->since_unix_ms = st.ctime;
      out->owner_session = st.ephemeralOwner;
      snprintf(out->holder, sizeof out->holder, "%s", newest);
    } else if (zrc != ZNONODE) {
      rc = dlock__zk_fail(z, zrc, "read the lease node", node);
      goto out;
    }
    out->held = out->permits_used > 0;
  }
queue:
  /* Each caller queued for a permit has a node under "locks" (the first
   * of them is adding its lease, or waiting for one to end). */
  if (zoo_exists(s->zh, locks, 0, &st) == ZOK) out->waiters = st.numChildren;
out:
  if (have_v) deallocate_String_vector(&v);
  free(leases);
  free(locks);
  return rc;
}

/* A mutex's or read-write lock's state: the holder is the first node; for
 * a read-write lock the writer, or the newest of the readers ahead of the
 * first writer. */
static int queue_info(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, dlock__zk_info *out) {
  children ch;
  int zrc;
  int rc = list_lock_nodes(z, s, lock_path, (dlock__zk_side)k->side, &ch, &zrc);
  if (rc || ch.n == 0) goto out;
  int holding = 1;
  if (k->side == DLOCK__ZK_READ) {
    out->kind = 2;
    if (node_side(ch.sorted[0]) == DLOCK__ZK_WRITE) {
      out->writer = 1;
    } else {
      holding = 0;
      while (holding < ch.n && node_side(ch.sorted[holding]) == DLOCK__ZK_READ) holding++;
      out->readers = holding;
    }
    for (int i = holding; i < ch.n; i++)
      if (node_side(ch.sorted[i]) == DLOCK__ZK_WRITE) out->waiting_writers++;
  } else {
    out->kind = 1;
  }
  char holder[1200];
  snprintf(holder, sizeof holder, "%s/%s", lock_path, ch.sorted[holding - 1]);
  struct Stat st;
  int len = (int)sizeof out->owner_info - 1;
  zrc = zoo_get(s->zh, holder, 0, out->owner_info, &len, &st);
  if (zrc == ZNONODE) {
    rc = LOOK_AGAIN; /* released meanwhile: look again */
    goto out;
  }
  if (zrc != ZOK) {
    rc = dlock__zk_fail(z, zrc, "read the holder node", holder);
    goto out;
  }
  out->owner_info[len > 0 ? len : 0] = '\0';
  out->held = 1;
  out->fence = (uint64_t)st.czxid;
  out->since_unix_ms = st.ctime;
  out->owner_session = st.ephemeralOwner;
  out->waiters = ch.n - holding;
  snprintf(out->holder, sizeof out->holder, "%s", ch.sorted[holding - 1]);
out:
  children_free(&ch);
  return rc;
}

int dlock__zk_info_get(dlock__zk *z, const char *name, dlock__zk_info *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *lock_path = dlock__zk_path(z, name, NULL);
  if (!lock_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    const zk_kind *k;
    if ((rc = path_kind(z, s, lock_path, &k)) || !k) goto out;
    if ((rc = k->info(z, s, lock_path, k, out)) != LOOK_AGAIN) goto out;
    memset(out, 0, sizeof *out);
  }
  rc = 0;
out:
  free(lock_path);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_holders(dlock__zk *z, const char *name, void (*fn)(const dlock_holder *, void *), void *arg) {
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *leases = dlock__zk_path(z, name, "leases");
  struct String_vector v = {0};
  int n = 0, zrc = leases ? zoo_get_children(s->zh, leases, 0, &v) : ZSYSTEMERROR;
  if (!leases) {
    n = dlock__error(DLOCK_ENOMEM, "out of memory");
  } else if (zrc != ZOK && zrc != ZNONODE) {
    n = dlock__zk_fail(z, zrc, "list the leases of", leases);
  } else if (zrc == ZOK) {
    /* The leases oldest first; with more than the limit the newest is a
     * caller still waiting for its permit (sem_info). */
    char data[64];
    int len = (int)sizeof data - 1;
    struct Stat st;
    int64_t limit = zoo_get(s->zh, leases, 0, data, &len, &st) == ZOK ? parse_limit(data, len < 0 ? 0 : len) : 0;
    char **l = calloc((size_t)v.count + 1, sizeof *l);
    int nl = 0;
    for (int i = 0; l && i < v.count; i++)
      if (node_side(v.data[i]) == LEASE_MARK) l[nl++] = v.data[i];
    if (l) qsort(l, (size_t)nl, sizeof *l, cmp_seq);
    if (limit > 0 && nl > limit) nl--;
    for (int i = 0; l && i < nl; i++) {
      char node[1200], info[1025];
      snprintf(node, sizeof node, "%s/%s", leases, l[i]);
      len = (int)sizeof info - 1;
      if (zoo_get(s->zh, node, 0, info, &len, &st) != ZOK) continue; /* gone meanwhile */
      info[len > 0 ? len : 0] = '\0';
      dlock_holder h = {(uint64_t)st.czxid, -1, st.ctime, info};
      fn(&h, arg);
      n++;
    }
    free(l);
    deallocate_String_vector(&v);
  }
  free(leases);
  dlock__zk_sess_put(s);
  return n;
}

static int list_rec(dlock__zk *z, dlock__zk_sess *s, const char *path, const char *rel, int depth,
                    void (*fn)(const char *, void *), void *arg) {
  struct String_vector v;
  int zrc = zoo_get_children(s->zh, path[0] ? path : "/", 0, &v);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the children of", path[0] ? path : "/");
  int count = 0, locks = 0, semaphore = 0;
  for (int i = 0; i < v.count; i++) {
    if (node_side(v.data[i]) >= 0 && node_side(v.data[i]) != LEASE_MARK) locks++;
    if (!strcmp(v.data[i], "leases")) semaphore = 1;
  }
  if ((locks || semaphore) && rel[0]) {
    if (fn) fn(rel, arg);
    count++;
  }
  for (int i = 0; i < v.count && depth < 16 && !semaphore; i++) {
    const char *c = v.data[i];
    if (node_side(c) >= 0) continue;
    if (!rel[0] && (!strncmp(c, "_dlock_", 7) || (!path[0] && !strcmp(c, "zookeeper")))) continue;
    size_t pn = strlen(path) + strlen(c) + 2, rn = strlen(rel) + strlen(c) + 2;
    char *cp = malloc(pn), *cr = malloc(rn);
    if (!cp || !cr) {
      free(cp);
      free(cr);
      deallocate_String_vector(&v);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    snprintf(cp, pn, "%s/%s", path, c);
    snprintf(cr, rn, "%s%s%s", rel, rel[0] ? "/" : "", c);
    int r = list_rec(z, s, cp, cr, depth + 1, fn, arg);
    free(cp);
    free(cr);
    if (r < 0) {
      deallocate_String_vector(&v);
      return r;
    }
    count += r;
  }
  deallocate_String_vector(&v);
  return count;
}

int dlock__zk_list(dlock__zk *z, void (*fn)(const char *name, void *arg), void *arg) {
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  rc = list_rec(z, s, z->url.ns, "", 0, fn, arg);
  dlock__zk_sess_put(s);
  return rc;
}

/* Delete one holder's node. 1 deleted, 0 already gone, or < 0. A node name
 * is never reused, so a resend after a lost reply can delete only it. */
static int force_delete(dlock__zk *z, dlock__zk_sess *s, const char *node) {
  int resent = 0;
  while (1) {
    int zrc = zoo_delete(s->zh, node, -1);
    if (zrc == ZOK) return 1;
    if (zrc == ZNONODE) return resent ? 1 : 0;
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED && !resent &&
        dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
      resent = 1;
      continue;
    }
    return dlock__zk_fail(z, zrc, "force-release (delete the holder node)", node);
  }
}

/* Delete the first 'n' of 'names' below 'parent' (only those whose side
 * is 'mark' when it is not -1, 'skip' left). 1 any deleted, 0 none, or < 0. */
static int force_delete_each(dlock__zk *z, dlock__zk_sess *s, const char *parent, char **names, int n, int mark,
                             const char *skip) {
  int any = 0, rc = 0;
  for (int i = 0; i < n && rc >= 0; i++) {
    if ((mark >= 0 && node_side(names[i]) != mark) || names[i] == skip) continue;
    char node[1400];
    snprintf(node, sizeof node, "%s/%s", parent, names[i]);
    rc = force_delete(z, s, node);
    if (rc > 0) any = 1;
  }
  return rc >= 0 ? any : rc;
}

/* A semaphore's holders: every permit (lease node); the queue stays. */
static int sem_force(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, uint64_t fence) {
  (void)k;
  if (fence) return 0; /* a term's holder is a mutex's or an election's */
  struct String_vector v;
  char node[1200];
  snprintf(node, sizeof node, "%s/leases", lock_path);
  char data[64];
  int len = (int)sizeof data - 1;
  struct Stat st;
  int zrc = zoo_get(s->zh, node, 0, data, &len, &st);
  if (zrc == ZOK) zrc = zoo_get_children(s->zh, node, 0, &v);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the leases of", node);
  /* More leases than the stored limit: the newest is the caller that
   * holds "locks" and waits for a permit (only it adds a lease), not a
   * holder. It stays, and gets a permit now. */
  int64_t limit = parse_limit(data, len < 0 ? 0 : len);
  const char *waiting = NULL;
  int leases = 0;
  for (int i = 0; i < v.count; i++) {
    if (node_side(v.data[i]) != LEASE_MARK) continue;
    leases++;
    if (!waiting || strcmp(seq_of(v.data[i]), seq_of(waiting)) > 0) waiting = v.data[i];
  }
  if (limit == 0 || leases <= limit) waiting = NULL;
  int rc = force_delete_each(z, s, node, v.data, v.count, LEASE_MARK, waiting);
  deallocate_String_vector(&v);
  return rc;
}

/* A mutex's or read-write lock's holders: the first node, or every reader
 * ahead of the first writer. 'fence' 0: them; else only a mutex's or an
 * election's holder whose node has that czxid. */
static int queue_force(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, const zk_kind *k, uint64_t fence) {
  children ch;
  int zrc;
  if (fence && k->side != DLOCK__ZK_MUTEX && k->side != DLOCK__ZK_LATCH) return 0; /* no such holder */
  int rc = list_lock_nodes(z, s, lock_path, (dlock__zk_side)k->side, &ch, &zrc);
  if (rc || ch.n == 0) {
    children_free(&ch);
    return rc;
  }
  int holding = 1;
  if (k->side == DLOCK__ZK_READ && node_side(ch.sorted[0]) == DLOCK__ZK_READ)
    while (holding < ch.n && node_side(ch.sorted[holding]) == DLOCK__ZK_READ) holding++;
  if (fence) {
    /* The holder of that term, or none: a node's name is never reused, so
     * the one deleted below is the one whose czxid was read. */
    char node[1400];
    struct Stat st;
    snprintf(node, sizeof node, "%s/%s", lock_path, ch.sorted[0]);
    zrc = zoo_exists(s->zh, node, 0, &st);
    if (zrc != ZOK || (uint64_t)st.czxid != fence) {
      rc = zrc == ZOK || zrc == ZNONODE ? 0 : dlock__zk_fail(z, zrc, "read the fence (czxid) of", node);
      children_free(&ch);
      return rc;
    }
  }
  if (k->side == DLOCK__ZK_LATCH && !is_dlock_node(ch.sorted[0])) {
    /* Curator's LeaderLatch leader watches nothing once it leads: it would
     * never learn that its node went, and would lead beside the next. */
    const char *name = lock_path + strlen(z->url.ns) + (lock_path[strlen(z->url.ns)] == '/');
    rc = dlock__error(DLOCK_EFOREIGN,
                      "the leader of '%s' on %s is a Curator LeaderLatch participant (node %s), which would not "
                      "notice an eviction and would go on leading; stop that process instead (nothing deleted)",
                      name, z->server, ch.sorted[0]);
    children_free(&ch);
    return rc;
  }
  rc = force_delete_each(z, s, lock_path, ch.sorted, holding, -1, NULL);
  children_free(&ch);
  return rc;
}

/* 'fence' 0: every holder; else only a mutex's or an election's holder
 * whose node has that czxid (dlock__zk_force_release_fence()). */
static int force_release(dlock__zk *z, const char *name, uint64_t fence) {
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *lock_path = dlock__zk_path(z, name, NULL);
  const zk_kind *k;
  if (!lock_path)
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  else if (!(rc = path_kind(z, s, lock_path, &k)) && k)
    rc = k->force(z, s, lock_path, k, fence);
  free(lock_path);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_force_release(dlock__zk *z, const char *name) { return force_release(z, name, 0); }

int dlock__zk_force_release_fence(dlock__zk *z, const char *name, uint64_t fence) {
  return fence ? force_release(z, name, fence) : 0;
}
