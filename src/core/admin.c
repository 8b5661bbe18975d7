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

void dlock_lock_info_init(dlock_lock_info *info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

/* The latch of the same name, if there is one (a failure to read it leaves
 * the lock's answer as it is: the latch fields stay 0). */
static void latch_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  dlock_latch *l = NULL;
  if (!c->ops->latch_new || !c->ops->latch_get || dlock_latch_new(&l, c, name) != 0) {
    dlock__error_clear();
    return;
  }
  int64_t n = 0, ttl = 0;
  if (c->ops->latch_get(l, &n, &ttl) == 0) {
    out->latch = 1;
    out->latch_count = n;
    out->latch_ttl_ms = ttl;
  }
  dlock_latch_free(l);
  dlock__error_clear();
}

/* The caller's struct may be an older, smaller layout: fill the full one,
 * hand back the part the caller has. 'node' < 0: the backend's own answer. */
static int info_get(dlock_client *c, const char *name, int node, dlock_lock_info *out) {
  dlock__error_clear();
  if (!c || !out) return dlock__error(DLOCK_EINVAL, "dlock_lock_info_get: NULL argument");
  int rc = dlock__struct_check(out, DLOCK__LOCK_INFO_V1, sizeof *out, "dlock_lock_info");
  if (rc) return rc;
  if ((rc = dlock__check_name("lock name", name))) return rc;
  size_t size;
  memcpy(&size, out, sizeof size);
  dlock_lock_info full;
  dlock_lock_info_init(&full);
  rc = node < 0 ? c->ops->info(c, name, &full) : c->ops->info_node(c, name, node, &full);
  if (!rc && node < 0 && size > offsetof(dlock_lock_info, latch)) latch_info(c, name, &full);
  full.struct_size = size;
  memcpy(out, &full, size);
  return rc;
}

int dlock_lock_info_get(dlock_client *c, const char *name, dlock_lock_info *out) {
  return info_get(c, name, -1, out);
}

int dlock_client_node_count(const dlock_client *c) {
  return c && c->ops->node_count ? c->ops->node_count(c) : 0;
}

const char *dlock_client_node_name(const dlock_client *c, int i) {
  return c && c->ops->node_name ? c->ops->node_name(c, i) : "";
}

int dlock_lock_info_get_node(dlock_client *c, const char *name, int i, dlock_lock_info *out) {
  if (c && !c->ops->info_node) {
    dlock__error_clear();
    return unsupported(c, "dlock_lock_info_get_node (one node's view; Redlock only)");
  }
  return info_get(c, name, i, out);
}

int dlock_lock_force_release_flags(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  dlock__error_clear();
  if (was_held) *was_held = 0;
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_lock_force_release: client is NULL");
  if (flags & ~DLOCK_FORCE_FOREIGN)
    return dlock__error(DLOCK_EINVAL, "force release of '%s': unknown flags 0x%x", name ? name : "", flags);
  int rc = dlock__check_name("lock name", name);
  if (rc) return rc;
  return c->ops->force_release(c, name, flags, was_held);
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
  if (!c->ops->prune)
    return dlock__error(DLOCK_EINVAL,
                        "nothing to prune on %s (the %s backend): its locks leave nothing behind (what a "
                        "hold keeps on the server goes with its lease or its session)",
                        c->server, c->ops->name);
  int64_t n = 0;
  int rc = c->ops->prune(c, older_than_ms, &n);
  if (pruned) *pruned = n;
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
  if (!(s->names[s->n] = strdup(name))) s->oom = 1;
  else s->n++;
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
  if (!c->ops->latch_list) return c->ops->list(c, pattern, fn, arg);
  /* The held locks, then the latches whose name is not among them. */
  list_seen s = {NULL, 0, 0, 0, 0, fn, arg};
  int rc = c->ops->list(c, pattern, seen_add, &s);
  if (rc >= 0 && !s.oom) {
    if (s.n) qsort(s.names, s.n, sizeof *s.names, cmp_names); /* NULL with none: qsort's base must not be */
    rc = c->ops->latch_list(c, pattern, latch_one, &s);
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
    return dlock__error(DLOCK_ERANGE, "guard on '%s': token %" PRIu64 " is above 2^63-1, the largest fence dlock "
                        "issues: it is no dlock fence (a wrapped or corrupted value?), so it is not admitted",
                        resource, token);
  if (!c->ops->guard_check) return unsupported(c, "the fencing guard");
  return c->ops->guard_check(c, resource, token, highest);
}

int dlock_client_check(dlock_client *c, dlock_check *out, int max) {
  dlock__error_clear();
  if (!c || !out || max < 0) return dlock__error(DLOCK_EINVAL, "dlock_client_check: NULL argument");
  if (!c->ops->check) { /* at least: does it answer */
    int rc = dlock_client_ping(c);
    if (rc) return rc;
    if (max < 1) return 0;
    memset(out, 0, sizeof *out);
    out->name = "reachable";
    out->level = DLOCK_CHECK_OK;
    snprintf(out->found, sizeof out->found, "%s answers", c->server);
    return 1;
  }
  return c->ops->check(c, out, max);
}

int dlock_client_check_node(dlock_client *c, int i, dlock_check *out, int max) {
  if (c && !c->ops->check_node) {
    dlock__error_clear();
    return unsupported(c, "dlock_client_check_node (one node's checks; Redlock only)");
  }
  dlock__error_clear();
  if (!c || !out || max < 0) return dlock__error(DLOCK_EINVAL, "dlock_client_check_node: NULL argument");
  return c->ops->check_node(c, i, out, max);
}
