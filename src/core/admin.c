/*
 * admin.c - the public calls that look at locks from outside (status, list,
 * forced release, the fencing guard, the server checks): the argument
 * checks and the ABI rule here, the work in the client's backend.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A backend without an optional operation says so, naming itself. */
static int unsupported(const dlock_client *c, const char *what) {
  return dlock__error(DLOCK_EINVAL, "%s is not offered by the %s backend (%s)", what, c->ops->name, c->server);
}

/* The admin sub-table, or NULL with the error set. */
static const dlock__admin_ops *admin_of(const dlock_client *c, const char *what) {
  if (!c->ops->admin) unsupported(c, what);
  return c->ops->admin;
}

void dlock_lock_info_init(dlock_lock_info *info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

/* The latch of the same name, if there is one (a failure to read it leaves
 * the lock's answer as it is: the latch fields stay 0). */
static void latch_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  dlock_latch *l = NULL;
  if (!c->ops->latch || dlock_latch_new(&l, c, name) != 0) {
    dlock__error_clear();
    return;
  }
  int64_t n = 0, ttl = 0;
  if (c->ops->latch->get(l, &n, &ttl) == 0) {
    out->latch = 1;
    out->latch_count = n;
    out->latch_ttl_ms = ttl;
  }
  dlock_latch_free(l);
  dlock__error_clear();
}

#define NODE_INFO "dlock_lock_info_get_node (one node's view, where the client votes over independent nodes)"
#define NODE_CHECK "dlock_client_check_node (one node's checks, where the client votes over independent nodes)"

/* The caller's struct may be an older, smaller layout: fill the full one,
 * hand back the part the caller has. 'per_node': node 'node's view (the
 * query hook), else the backend's own answer. */
static int info_get(dlock_client *c, const char *name, int per_node, int node, dlock_lock_info *out) {
  dlock__error_clear();
  if (!c || !out) return dlock__error(DLOCK_EINVAL, "dlock_lock_info_get: NULL argument");
  int rc = dlock__struct_check(out, DLOCK__LOCK_INFO_V1, sizeof *out, "dlock_lock_info");
  if (rc) return rc;
  if ((rc = dlock__check_name("lock name", name))) return rc;
  size_t size;
  memcpy(&size, out, sizeof size);
  dlock_lock_info full;
  dlock_lock_info_init(&full);
  if (per_node) {
    dlock__node_info q = {name, &full};
    rc = dlock__query(c, DLOCK__Q_NODE_INFO, node, &q, sizeof q);
    if (rc == DLOCK__QUERY_NOT_OFFERED) rc = unsupported(c, NODE_INFO);
  } else {
    const dlock__admin_ops *a = admin_of(c, "the lock status");
    rc = a ? a->info(c, name, &full) : DLOCK_EINVAL;
  }
  if (!rc && !per_node && size > offsetof(dlock_lock_info, latch)) latch_info(c, name, &full);
  full.struct_size = size;
  memcpy(out, &full, size);
  return rc;
}

int dlock_lock_info_get(dlock_client *c, const char *name, dlock_lock_info *out) {
  return info_get(c, name, 0, 0, out);
}

/* The query hook takes a non-const client; these public calls read only. */
int dlock_client_node_count(const dlock_client *c) {
  int n = c ? dlock__query((dlock_client *)c, DLOCK__Q_NODE_COUNT, 0, NULL, 0) : 0;
  return n > 0 ? n : 0;
}

const char *dlock_client_node_name(const dlock_client *c, int i) {
  const char *name = "";
  if (c && dlock__query((dlock_client *)c, DLOCK__Q_NODE_NAME, i, &name, sizeof name) != 0) name = "";
  return name ? name : "";
}

int dlock_lock_info_get_node(dlock_client *c, const char *name, int i, dlock_lock_info *out) {
  return info_get(c, name, 1, i, out);
}

int dlock_lock_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *h, void *arg), void *arg) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (!fn) return dlock__error(DLOCK_EINVAL, "dlock_lock_holders: NULL callback");
  int rc = info_get(c, name, 0, 0, &info);
  if (rc) return rc;
  if ((info.permits != 0 || info.rwlock) && c->ops->admin->holders) return c->ops->admin->holders(c, name, fn, arg);
  if (!info.held || info.foreign) return 0;
  dlock_holder h = {info.fence, info.ttl_ms, info.since_unix_ms, info.owner_info};
  fn(&h, arg);
  return 1;
}

int dlock_lock_force_release_flags(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  dlock__error_clear();
  if (was_held) *was_held = 0;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_lock_force_release: client is NULL");
  if (flags & ~DLOCK_FORCE_FOREIGN)
    return dlock__error(DLOCK_EINVAL, "force release of '%s': unknown flags 0x%x", name ? name : "", flags);
  int rc = dlock__check_name("lock name", name);
  if (rc) return rc;
  const dlock__admin_ops *a = admin_of(c, "a forced release");
  return a ? a->force_release(c, name, flags, was_held) : DLOCK_EINVAL;
}

int dlock_lock_force_release(dlock_client *c, const char *name, int *was_held) {
  return dlock_lock_force_release_flags(c, name, 0, was_held);
}

int dlock_client_prune(dlock_client *c, int64_t older_than_ms, int64_t *pruned) {
  dlock__error_clear();
  if (pruned) *pruned = 0;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_client_prune: client is NULL");
  if (older_than_ms < 0 || older_than_ms > DLOCK_MAX_DURATION_MS)
    return dlock__error(DLOCK_EINVAL, "prune: the age %lld ms is out of range (0 to 30 days)",
                        (long long)older_than_ms);
  if (!c->ops->admin || !c->ops->admin->prune) {
    /* Success, and dlock_last_error() says why nothing was deleted. */
    dlock__error(0,
                 "nothing to prune on %s (the %s backend): its locks leave nothing behind (what a hold keeps "
                 "on the server goes with its lease or its session)",
                 c->server, c->ops->name);
    return 0;
  }
  int64_t n = 0;
  int rc = c->ops->admin->prune(c, older_than_ms, &n);
  if (pruned) *pruned = n;
  if (!rc) dlock__error_clear();
  return rc;
}

/* dlock_lock_list's two passes: the names seen in the first, to list a
 * latch's name only once. */
typedef struct list_seen {
  char **names;
  size_t n, cap;
  int oom, count;
  void (*fn)(const char *, void *);
  void *arg;
} list_seen;

static void seen_add(const char *name, void *arg) {
  list_seen *s = arg;
  s->fn(name, s->arg);
  s->count++;
  if (s->oom) return;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    char **p = realloc(s->names, cap * sizeof *p);
    if (!p) {
      s->oom = 1;
      return;
    }
    s->names = p;
    s->cap = cap;
  }
  if (!(s->names[s->n] = strdup(name)))
    s->oom = 1;
  else
    s->n++;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void latch_one(const char *name, void *arg) {
  list_seen *s = arg;
  if (s->n && bsearch(&name, s->names, s->n, sizeof *s->names, cmp_names)) return;
  s->fn(name, s->arg);
  s->count++;
}

int dlock_lock_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  dlock__error_clear();
  if (!c || !fn) return dlock__error(DLOCK_EINVAL, "dlock_lock_list: NULL argument");
  if (pattern && strlen(pattern) > DLOCK_MAX_NAME_LEN)
    return dlock__error(DLOCK_ENAME, "pattern is longer than %d bytes", DLOCK_MAX_NAME_LEN);
  const dlock__admin_ops *a = admin_of(c, "listing the locks");
  if (!a) return DLOCK_EINVAL;
  if (!c->ops->latch) return a->list(c, pattern, fn, arg);
  /* The held locks, then the latches whose name is not among them. */
  list_seen s = {NULL, 0, 0, 0, 0, fn, arg};
  int rc = a->list(c, pattern, seen_add, &s);
  if (rc >= 0 && !s.oom) {
    if (s.n) qsort(s.names, s.n, sizeof *s.names, cmp_names); /* NULL with none: qsort's base must not be */
    rc = c->ops->latch->list(c, pattern, latch_one, &s);
  }
  if (rc >= 0) rc = s.oom ? dlock__error(DLOCK_ENOMEM, "out of memory while listing") : s.count;
  for (size_t i = 0; i < s.n; i++) free(s.names[i]);
  free(s.names);
  return rc;
}

int dlock_guard_check(dlock_client *c, const char *resource, uint64_t token) {
  return dlock_guard_check_highest(c, resource, token, NULL);
}

int dlock_guard_check_highest(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest) {
  dlock__error_clear();
  if (highest) *highest = 0;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_guard_check: client is NULL");
  int rc = dlock__check_name("resource name", resource);
  if (rc) return rc;
  if (token == 0) return dlock__error(DLOCK_ERANGE, "guard on '%s': token 0 is never issued", resource);
  if (token > (uint64_t)INT64_MAX)
    return dlock__error(DLOCK_ERANGE,
                        "guard on '%s': token %" PRIu64 " is above 2^63-1, the largest fence dlock "
                        "issues: it is no dlock fence (a wrapped or corrupted value?), so it is not admitted",
                        resource, token);
  if (!c->ops->guard) return unsupported(c, "the fencing guard");
  return c->ops->guard->check(c, resource, token, highest);
}

int dlock_client_check(dlock_client *c, dlock_check *out, int max) {
  dlock__error_clear();
  if (!c || !out || max < 0) return dlock__error(DLOCK_EINVAL, "dlock_client_check: NULL argument");
  if (!c->ops->admin || !c->ops->admin->check) { /* at least: does it answer */
    int rc = dlock_client_ping(c);
    if (rc) return rc;
    if (max < 1) return 0;
    memset(out, 0, sizeof *out);
    out->name = "reachable";
    out->level = DLOCK_CHECK_OK;
    snprintf(out->found, sizeof out->found, "%s answers", c->server);
    return 1;
  }
  return c->ops->admin->check(c, out, max);
}

int dlock_client_check_node(dlock_client *c, int i, dlock_check *out, int max) {
  dlock__error_clear();
  if (!c || !out || max < 0) return dlock__error(DLOCK_EINVAL, "dlock_client_check_node: NULL argument");
  int rc = dlock__query(c, DLOCK__Q_NODE_CHECK, i, out, (size_t)max * sizeof *out);
  return rc == DLOCK__QUERY_NOT_OFFERED ? unsupported(c, NODE_CHECK) : rc;
}
