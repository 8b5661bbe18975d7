/*
 * zk/watch.c - dlock_watch_* on ZooKeeper: a child watch on each watched
 * lock's node (a contender, a waiter or a holder's node come or gone), and
 * on its "leases" and "locks" children (a semaphore's permits and queue); a
 * node that does not exist yet gets an exists watch, which fires when it is
 * made. ZooKeeper's watches fire once: the watcher (on the client's
 * completion thread, where no synchronous call may be made) only marks the
 * entry and wakes the watch, and the next dlock_watch_wait() sets the
 * watch again (rearm) before the caller reads the lock, so a change
 * between the two is not missed. A new session (the old one expired) loses
 * every watch: all are set again on it. Watching every lock of a prefix is
 * not offered (the core's timer bounds it).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/zk_int.h"

typedef struct zw_entry {
  char *path;
  dlock_watch *w;
  atomic_int fired; /* set again at the next rearm */
} zw_entry;

typedef struct zwatch {
  dlock__zk *z;
  zw_entry **e;
  size_t n, cap;
  const void *armed_zh; /* the session the watches were set on (compared, never used) */
} zwatch;

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)zh;
  (void)state;
  (void)path;
  zw_entry *e = ctx;
  if (type == ZOO_SESSION_EVENT) return; /* session.c follows the session; a new one rearms all */
  atomic_store(&e->fired, 1);
  dlock__watch_wake(e->w, 1);
}

/* Set the watch of 'e' on 's': children if the node exists, else exists. */
static int arm(dlock__zk *z, dlock__zk_sess *s, zw_entry *e) {
  struct String_vector v;
  atomic_store(&e->fired, 0);
  int zrc = zoo_wget_children(s->zh, e->path, watcher, e, &v);
  if (zrc == ZOK) {
    deallocate_String_vector(&v);
    return 0;
  }
  if (zrc == ZNONODE) {
    struct Stat st;
    zrc = zoo_wexists(s->zh, e->path, watcher, e, &st);
    if (zrc == ZOK || zrc == ZNONODE) return 0;
  }
  atomic_store(&e->fired, 1); /* try again at the next rearm */
  return dlock__zk_fail(z, zrc, "watch", e->path);
}

int dlock__zk_watch_open(dlock__zk *z, dlock_watch *w) {
  zwatch *zw = calloc(1, sizeof *zw);
  if (!zw) return dlock__error(DLOCK_ENOMEM, "out of memory");
  zw->z = z;
  w->be = zw;
  return 0;
}

static int add_path(zwatch *zw, dlock_watch *w, dlock__zk_sess *s, char *path) {
  if (!path) return dlock__error(DLOCK_ENOMEM, "out of memory");
  if (zw->n == zw->cap) {
    size_t cap = zw->cap ? zw->cap * 2 : 8;
    zw_entry **g = realloc(zw->e, cap * sizeof *g);
    if (!g) {
      free(path);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    zw->e = g;
    zw->cap = cap;
  }
  zw_entry *e = calloc(1, sizeof *e);
  if (!e) {
    free(path);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  e->path = path;
  e->w = w;
  zw->e[zw->n++] = e;
  return arm(zw->z, s, e);
}

int dlock__zk_watch_add(dlock__zk *z, dlock_watch *w, const char *name) {
  zwatch *zw = w->be;
  if (!name) return 1;
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  if (zw->n == 0) zw->armed_zh = s->zh;
  char *lock_path = dlock__zk_path(z, name, NULL);
  rc = add_path(zw, w, s, lock_path ? strdup(lock_path) : NULL);
  /* A semaphore's permits and queue are the children of these two. */
  if (!rc) rc = add_path(zw, w, s, lock_path ? dlock__zk_path(z, name, "leases") : NULL);
  if (!rc) rc = add_path(zw, w, s, lock_path ? dlock__zk_path(z, name, "locks") : NULL);
  free(lock_path);
  dlock__zk_sess_put(s);
  return rc;
}

void dlock__zk_watch_rearm(dlock__zk *z, dlock_watch *w) {
  zwatch *zw = w->be;
  if (!zw || zw->n == 0) return;
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) {
    dlock__error_clear(); /* the caller's reading says what failed */
    return;
  }
  int all = s->zh != zw->armed_zh;
  zw->armed_zh = s->zh;
  for (size_t i = 0; i < zw->n; i++)
    if (all || atomic_load(&zw->e[i]->fired)) arm(z, s, zw->e[i]);
  dlock__error_clear();
  dlock__zk_sess_put(s);
}

void dlock__zk_watch_close(dlock__zk *z, dlock_watch *w) {
  zwatch *zw = w->be;
  if (!zw) return;
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  for (size_t i = 0; i < zw->n; i++) {
    /* Our watcher must not run on a freed entry: take it off the session
     * (locally: the server's side fires into nothing). */
    if (s && s->zh == zw->armed_zh) zoo_remove_watches(s->zh, zw->e[i]->path, ZWATCHTYPE_ANY, watcher, zw->e[i], 1);
    free(zw->e[i]->path);
    free(zw->e[i]);
  }
  if (s) dlock__zk_sess_put(s);
  dlock__error_clear();
  free(zw->e);
  free(zw);
  w->be = NULL;
}
