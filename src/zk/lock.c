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

#define LOCK_NAME "lock-"
#define SEQ_DIGITS 10
/* "_c_" + 36-char uuid + "-": Curator's protected prefix. */
#define PROTECTED_LEN (3 + 36 + 1)

void dlock__zk_hold_clear(dlock__zk_hold *h) {
  if (!h) return;
  free(h->lock_path);
  free(h->node_path);
  memset(h, 0, sizeof *h);
}

/* A child name that is a lock node: ends with "lock-" and 10 digits (what
 * Curator's sort key reads). */
static int is_lock_node(const char *child) {
  const char *l = NULL;
  for (const char *p = strstr(child, LOCK_NAME); p; p = strstr(p + 1, LOCK_NAME)) l = p;
  if (!l) return 0;
  const char *d = l + strlen(LOCK_NAME);
  if (strlen(d) != SEQ_DIGITS) return 0;
  for (int i = 0; i < SEQ_DIGITS; i++)
    if (d[i] < '0' || d[i] > '9') return 0;
  return 1;
}

/* The sort key: the text after the last "lock-". */
static const char *seq_of(const char *child) {
  const char *l = NULL;
  for (const char *p = strstr(child, LOCK_NAME); p; p = strstr(p + 1, LOCK_NAME)) l = p;
  return l ? l + strlen(LOCK_NAME) : child;
}

static int cmp_seq(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  return strcmp(seq_of(x), seq_of(y));
}

/* A random UUID (version 4) as Java's UUID.toString() writes it. */
static int make_uuid(char out[37]) {
  char hex[33];
  int rc = dlock__random_hex(hex, 16);
  if (rc) return rc;
  hex[12] = '4';
  static const char variant[] = "89ab";
  hex[16] = variant[(hex[16] >= 'a' ? hex[16] - 'a' + 10 : hex[16] - '0') & 3];
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
  return 0;
}

/* The sorted lock nodes among the children of 'lock_path' (which may not
 * exist: then none). DLOCK_EFOREIGN when a child is not a lock node. */
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

static int list_lock_nodes(dlock__zk *z, dlock__zk_sess *s, const char *lock_path, children *out, int *zrc_out) {
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
    if (!is_lock_node(out->v.data[i])) {
      int rc = dlock__error(DLOCK_EFOREIGN,
                            "lock path '%s' on %s holds the child '%.200s', which is not a lock node "
                            "(_c_<uuid>-lock-<10 digits>): the path belongs to something else; choose another "
                            "lock name (dlock deletes nothing there)",
                            lock_path, z->server, out->v.data[i]);
      children_free(out);
      return rc;
    }
    out->sorted[out->n++] = out->v.data[i];
  }
  qsort(out->sorted, (size_t)out->n, sizeof *out->sorted, cmp_seq);
  return 0;
}

/* Create every missing parent of 'path' (exclusive) as a container node. */
static int create_parents(dlock__zk *z, dlock__zk_sess *s, const char *path) {
  char *buf = strdup(path);
  if (!buf) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = 0;
  /* Open ACLs, as Curator's default: a namespace protected by ACLs is set
   * up by its owner, and our digest then gives the rights it grants. */
  for (char *p = strchr(buf + 1, '/');; p = strchr(p + 1, '/')) {
    if (p) *p = '\0';
    int zrc = zoo_create(s->zh, buf, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, NULL, 0);
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
                          size_t outlen) {
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

static int acquire(dlock__zk *z, const char *name, const char *owner_info, int64_t wait_ms,
                   const atomic_int *cancel, dlock__zk_hold *out);

int dlock__zk_acquire(dlock__zk *z, const char *name, const char *owner_info, int64_t wait_ms,
                      const atomic_int *cancel, dlock__zk_hold *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  return acquire(z, name, owner_info, wait_ms, cancel, out);
}

int dlock__zk_job_lock_try(dlock__zk *z, const char *job, const char *owner_info, dlock__zk_hold *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  size_t n = strlen(job) + sizeof "_dlock_sched//run";
  char *name = malloc(n);
  if (!name) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(name, n, "_dlock_sched/%s/run", job);
  rc = acquire(z, name, owner_info, 0, NULL, out);
  free(name);
  return rc;
}

static int acquire(dlock__zk *z, const char *name, const char *owner_info, int64_t wait_ms,
                   const atomic_int *cancel, dlock__zk_hold *out) {
  int rc;
  if (wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER)
    return dlock__error(DLOCK_EINVAL, "acquire '%s': wait must be >= 0 or DLOCK_WAIT_FOREVER", name);
  dlock_mono_ms start = dlock_mono_now();
  dlock_mono_ms deadline = wait_ms == DLOCK_WAIT_FOREVER ? -1 : start + wait_ms;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *lock_path = dlock__zk_path(z, name, NULL);
  char uuid[37], prefix[PROTECTED_LEN + 1];
  char *create_path = NULL;
  char node[1200] = "";
  children ch = {0};
  if (!lock_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  rc = make_uuid(uuid);
  if (rc) goto out;
  snprintf(prefix, sizeof prefix, "_c_%s-", uuid);
  size_t cpn = strlen(lock_path) + 1 + strlen(prefix) + strlen(LOCK_NAME) + 1;
  create_path = malloc(cpn);
  if (!create_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  snprintf(create_path, cpn, "%s/%s%s", lock_path, prefix, LOCK_NAME);

  /* A lock path that already holds foreign children is refused before we
   * add a node to it. */
  int zrc;
  rc = list_lock_nodes(z, s, lock_path, &ch, &zrc);
  children_free(&ch);
  if (rc) goto out;

  /* Create our node (protection mode on a lost reply). */
  const char *data = owner_info ? owner_info : "";
  int tries = 0;
  while (1) {
    zrc = zoo_create(s->zh, create_path, data, (int)strlen(data), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                     node, (int)sizeof node - 1);
    if (zrc == ZOK) break;
    if (zrc == ZNONODE && tries++ < 8) {
      rc = create_parents(z, s, lock_path);
      if (rc) goto out;
      continue;
    }
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED) {
      /* The create may have run: find it by our prefix before creating again. */
      if (!dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
        rc = dlock__error(DLOCK_EUNKNOWN,
                          "acquire '%s' on %s: the create of our lock node got no answer and the session ended; "
                          "if it was created it went with the session",
                          lock_path, z->server);
        goto out;
      }
      char found[1200];
      int f, finds = 0;
      do {
        f = find_protected(z, s, lock_path, prefix, found, sizeof found);
      } while (f < 0 && ++finds < 8 && dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)));
      if (f < 0) {
        /* A node we cannot find nor rule out would block the lock for
         * everyone until our session ends: say so. */
        char why[512];
        snprintf(why, sizeof why, "%s", dlock_last_error());
        rc = dlock__error(DLOCK_EUNKNOWN,
                          "acquire '%s' on %s: the create of our lock node got no answer, and looking for it "
                          "failed (%s); if it was created it holds or queues for the lock until this session ends",
                          lock_path, z->server, why);
        goto out;
      }
      if (f == 1) {
        /* zoo_create returns the path relative to the chroot: we use none. */
        snprintf(node, sizeof node, "%s", found);
        break;
      }
      if (tries++ < 8) continue;
    }
    rc = dlock__zk_fail(z, zrc, "create our lock node in", lock_path);
    goto out;
  }
  const char *own = strrchr(node, '/') + 1;

  /* Wait our turn. */
  while (1) {
    unsigned gen;
    pthread_mutex_lock(&z->mu);
    gen = z->wake_gen;
    dlock_lost_reason lost = s->lost;
    pthread_mutex_unlock(&z->mu);
    if (lost) {
      /* The session may be over: a hold taken now could already be
       * another's. Our node, if it still exists, goes with the session. */
      rc = dlock__error(DLOCK_ELOST, "acquire '%s' on %s: the ZooKeeper session was lost (%s) while waiting",
                        lock_path, z->server, dlock_lost_reason_str(lost));
      delete_own(z, s, node);
      goto out;
    }
    rc = list_lock_nodes(z, s, lock_path, &ch, &zrc);
    if (rc == DLOCK_EFOREIGN) {
      delete_own(z, s, node);
      goto out;
    }
    if (rc) {
      if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
          dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
        continue;
      goto fail_delete;
    }
    int idx = -1;
    for (int i = 0; i < ch.n; i++)
      if (!strcmp(ch.sorted[i], own)) idx = i;
    if (idx < 0) {
      children_free(&ch);
      rc = dlock__error(DLOCK_ELOST,
                        "acquire '%s' on %s: our lock node %s disappeared while waiting (session expired, or a "
                        "force-release)",
                        lock_path, z->server, own);
      goto out;
    }
    if (idx == 0) {
      children_free(&ch);
      struct Stat st;
      zrc = zoo_exists(s->zh, node, 0, &st);
      if (zrc != ZOK) {
        rc = dlock__zk_fail(z, zrc, "read the fence (czxid) of", node);
        goto fail_delete;
      }
      /* The hold is valid as long as the session that created our node:
       * its own deadline, read now (not the client's current session, which
       * a reconnect may have replaced). */
      pthread_mutex_lock(&z->mu);
      dlock_mono_ms valid_until = s->valid_until;
      dlock_lost_reason gone = s->lost;
      pthread_mutex_unlock(&z->mu);
      if (gone != DLOCK_LOST_NONE || dlock_mono_now() >= valid_until) {
        rc = dlock__error(DLOCK_ELOST, "acquire '%s' on %s: the session that holds our lock node %s ended (or may "
                          "have) before the lock came to us; its node goes with it: try again", lock_path,
                          z->server, node);
        goto out;
      }
      out->lock_path = lock_path;
      out->node_path = strdup(node);
      out->fence = (uint64_t)st.czxid;
      out->session = s->id;
      out->valid_until = valid_until;
      lock_path = NULL;
      if (!out->node_path) {
        rc = dlock__error(DLOCK_ENOMEM, "out of memory");
        delete_own(z, s, node);
        dlock__zk_hold_clear(out);
        goto out;
      }
      rc = 0;
      goto out;
    }
    if (deadline >= 0 && dlock_mono_now() >= deadline) {
      rc = dlock__error(DLOCK_EBUSY, "lock '%s' on %s is held (holder node %s)", lock_path, z->server,
                        ch.sorted[0]);
      children_free(&ch);
      goto give_up;
    }
    if (cancel && atomic_load(cancel)) {
      children_free(&ch);
      rc = dlock__error(DLOCK_ECANCELED, "acquire '%s' on %s: canceled", lock_path, z->server);
      goto give_up;
    }
    /* Watch only the predecessor: no herd when the holder leaves. */
    char pred[1200];
    snprintf(pred, sizeof pred, "%s/%s", lock_path, ch.sorted[idx - 1]);
    children_free(&ch);
    char buf[1];
    int blen = (int)sizeof buf;
    zrc = zoo_wget(s->zh, pred, dlock__zk_node_watcher, z, buf, &blen, NULL);
    if (zrc == ZNONODE) continue;
    if (zrc != ZOK) {
      if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
          dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
        continue;
      rc = dlock__zk_fail(z, zrc, "watch the predecessor", pred);
      goto fail_delete;
    }
    wait_for_wake(z, gen, deadline, cancel);
  }

give_up: {
  /* A waiter that gives up deletes its node (the lock may even have just
   * come to it: deleting it passes the lock on). */
  int drc = delete_own(z, s, node);
  if (drc) rc = drc;
  goto out;
}
fail_delete: {
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int drc = delete_own(z, s, node);
  if (drc == DLOCK_EUNKNOWN) rc = drc;
  else dlock__error(rc, "%s", saved);
}
out:
  children_free(&ch);
  free(lock_path);
  free(create_path);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_release(dlock__zk *z, dlock__zk_hold *h) {
  if (!h || !h->node_path) return dlock__error(DLOCK_ENOTHELD, "release: not held");
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  if (s->id != h->session) {
    dlock__zk_sess_put(s);
    return dlock__error(DLOCK_ENOTHELD,
                        "release '%s' on %s: the session that held it is over (the node went with it)",
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
                  : dlock__error(DLOCK_ENOTHELD, "release '%s' on %s: our lock node %s was already gone",
                                 h->lock_path, z->server, h->node_path);
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

int dlock__zk_is_held(dlock__zk *z, const dlock__zk_hold *h) {
  if (!h || !h->node_path) return 0;
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  struct Stat st;
  int zrc = zoo_exists(s->zh, h->node_path, 0, &st);
  if (zrc == ZOK)
    rc = st.ephemeralOwner == h->session && s->id == h->session;
  else if (zrc == ZNONODE)
    rc = 0;
  else
    rc = dlock__zk_fail(z, zrc, "check our lock node", h->node_path);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_info_get(dlock__zk *z, const char *name, dlock__zk_info *out) {
  memset(out, 0, sizeof *out);
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *lock_path = dlock__zk_path(z, name, NULL);
  children ch = {0};
  if (!lock_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    int zrc;
    rc = list_lock_nodes(z, s, lock_path, &ch, &zrc);
    if (rc) goto out;
    if (ch.n == 0) goto out;
    char holder[1200];
    snprintf(holder, sizeof holder, "%s/%s", lock_path, ch.sorted[0]);
    struct Stat st;
    int len = (int)sizeof out->owner_info - 1;
    zrc = zoo_get(s->zh, holder, 0, out->owner_info, &len, &st);
    if (zrc == ZNONODE) {
      children_free(&ch);
      continue; /* released meanwhile: look again */
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
    out->waiters = ch.n - 1;
    snprintf(out->holder, sizeof out->holder, "%s", ch.sorted[0]);
    goto out;
  }
out:
  children_free(&ch);
  free(lock_path);
  dlock__zk_sess_put(s);
  return rc;
}

static int list_rec(dlock__zk *z, dlock__zk_sess *s, const char *path, const char *rel, int depth,
                    void (*fn)(const char *, void *), void *arg) {
  struct String_vector v;
  int zrc = zoo_get_children(s->zh, path[0] ? path : "/", 0, &v);
  if (zrc == ZNONODE) return 0;
  if (zrc != ZOK) return dlock__zk_fail(z, zrc, "list the children of", path[0] ? path : "/");
  int count = 0, locks = 0;
  for (int i = 0; i < v.count; i++)
    if (is_lock_node(v.data[i])) locks++;
  if (locks && rel[0]) {
    if (fn) fn(rel, arg);
    count++;
  }
  for (int i = 0; i < v.count && depth < 16; i++) {
    const char *c = v.data[i];
    if (is_lock_node(c)) continue;
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

int dlock__zk_force_release(dlock__zk *z, const char *name) {
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *lock_path = dlock__zk_path(z, name, NULL);
  children ch = {0};
  if (!lock_path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  int zrc;
  rc = list_lock_nodes(z, s, lock_path, &ch, &zrc);
  if (rc) goto out;
  if (ch.n == 0) goto out;
  char holder[1200];
  snprintf(holder, sizeof holder, "%s/%s", lock_path, ch.sorted[0]);
  int resent = 0;
  while (1) {
    /* A sequential node's name is never reused, so resending this delete
     * after a lost reply can only delete this holder's node. */
    zrc = zoo_delete(s->zh, holder, -1);
    if (zrc == ZOK) {
      rc = 1;
      break;
    }
    if (zrc == ZNONODE) {
      rc = resent ? 1 : 0;
      break;
    }
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED && !resent &&
        dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
      resent = 1;
      continue;
    }
    rc = dlock__zk_fail(z, zrc, "force-release (delete the holder node)", holder);
    break;
  }
out:
  children_free(&ch);
  free(lock_path);
  dlock__zk_sess_put(s);
  return rc;
}
