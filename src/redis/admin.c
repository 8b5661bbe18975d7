/*
 * admin.c - the Redis backend's view from outside: status, listing, forced
 * release, and the fencing guard that downstream writers call (the public
 * calls and their argument checks are in core/admin.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

/* Run one lock-level script for 'name' with optional args. */
static int run_for_name(dlock_client *c, dlock__node *at, const char *name, dlock__script_id id, const char *arg,
                        dlock__reply **out, const char *op) {
  *out = NULL;
  int rc = dlock__check_name("lock name", name);
  if (rc) return rc;
  dlock__lock_keys keys;
  if ((rc = dlock__lock_keys_init(&keys, c, name))) return rc;
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = id;
  call.node = at;
  dlock__script_call_keys(&call, &keys);
  if (arg) {
    call.args[0] = arg;
    call.arglens[0] = strlen(arg);
    call.nargs = 1;
  }
  /* info only reads, so a lost reply is answered by asking again. A force
   * release is not sent twice: between the two sends a new holder may have
   * taken the lock, and the second would delete its key. */
  int reads = id == DLOCK__SCRIPT_INFO || id == DLOCK__SCRIPT_SEM_INFO || id == DLOCK__SCRIPT_HOLDERS;
  if (reads)
    rc = dlock__script_run_twice_safe(c, &call, out);
  else
    rc = dlock__script_run(c, &call, 1, out);
  if (rc && call.maybe_ran && !reads) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    rc = dlock__error(DLOCK_EUNKNOWN,
                      "%s; the command may have run: look with 'dlock status' before "
                      "running it again",
                      saved);
  }
  if (!rc && (*out)->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(*out);
    dlock__error(rc, "%s '%s' on %s: %s", op, keys.key[DLOCK__K_LOCK], c->server, (*out)->str);
    dlock__reply_free(*out);
    *out = NULL;
  } else if (rc) {
    dlock__error_prefix("%s '%s' on %s: ", op, name, c->server);
  }
  dlock__lock_keys_clear(&keys);
  return rc;
}

static int64_t str_i64(const dlock__reply *r) {
  return r->type == DLOCK__REPLY_STRING && r->len ? strtoll(r->str, NULL, 10) : 0;
}

int dlock__redis_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *, void *), void *arg) {
  dlock__reply *r = NULL;
  int rc = run_for_name(c, NULL, name, DLOCK__SCRIPT_HOLDERS, NULL, &r, "holders of");
  if (rc) return rc;
  int n = 0;
  if (r->type == DLOCK__REPLY_ARRAY)
    for (size_t i = 0; i + 3 < r->elements; i += 4) {
      uint64_t fence = 0;
      const dlock__reply *e = r->element[i];
      if (e->type == DLOCK__REPLY_STRING) dlock__parse_fence(e->str, e->len, &fence);
      const char *info = r->element[i + 3]->type == DLOCK__REPLY_STRING ? r->element[i + 3]->str : "";
      dlock_holder h = {fence, str_i64(r->element[i + 1]), str_i64(r->element[i + 2]), info};
      fn(&h, arg);
      n++;
    }
  dlock__reply_free(r);
  return n;
}

int dlock__redis_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  return dlock__redis_info_at(c, NULL, name, out);
}

int dlock__redis_info_at(dlock_client *c, dlock__node *at, const char *name, dlock_lock_info *out) {
  dlock__reply *r;
  /* One script for every kind: info.lua answers a read-write lock's name as
   * rw_info.lua does (12 elements), a semaphore's as sem_info.lua (10). */
  int rc = run_for_name(c, at, name, DLOCK__SCRIPT_INFO, "", &r, "status of");
  if (rc) return rc;
  if (r->type == DLOCK__REPLY_ARRAY && r->elements == 12) {
    rc = dlock__redis_rw_parse(r, out);
    dlock__reply_free(r);
    if (rc) dlock__error_prefix("status of '%s' on %s: ", name, c->server);
    return rc;
  }
  if (r->type != DLOCK__REPLY_ARRAY || (r->elements != 8 && r->elements != 10)) {
    dlock__reply_free(r);
    return dlock__error(DLOCK_EPROTO, "status of '%s': unexpected reply from %s", name, c->server);
  }
  out->held = r->element[0]->integer == 1;
  out->ttl_ms = out->held ? r->element[1]->integer : 0;
  const dlock__reply *fence = r->element[2];
  out->foreign = out->held && !(fence->type == DLOCK__REPLY_STRING && fence->len);
  /* Both fences, exactly: a corrupt one is reported, not shown as a number. */
  uint64_t hold_fence = 0, last_fence = 0;
  for (int i = 2; i <= 5; i += 3) {
    const dlock__reply *f = r->element[i];
    if (f->type != DLOCK__REPLY_STRING || f->len == 0) continue;
    if (dlock__parse_fence(f->str, f->len, i == 2 ? &hold_fence : &last_fence) != 0) {
      dlock__lock_keys keys;
      int krc = dlock__lock_keys_init(&keys, c, name);
      dlock__error(DLOCK_EFENCE,
                   "status of '%s' on %s: %s '%s' holds '%.40s', not a fencing token (an integer in "
                   "0..2^63-1); acquiring this lock fails until it is repaired (see docs/errors.md, DLOCK_EFENCE)",
                   name, c->server, i == 2 ? "the hold's record in" : "the fence counter",
                   krc ? "?" : keys.key[DLOCK__K_FENCE], f->str);
      if (!krc) dlock__lock_keys_clear(&keys);
      dlock__reply_free(r);
      return DLOCK_EFENCE;
    }
  }
  out->fence = out->held && !out->foreign ? hold_fence : last_fence;
  out->since_unix_ms = out->held ? str_i64(r->element[3]) : 0;
  if (out->held && r->element[4]->type == DLOCK__REPLY_STRING)
    snprintf(out->owner_info, sizeof out->owner_info, "%s", r->element[4]->str);
  out->waiters = r->element[6]->integer;
  if (r->elements == 10) { /* a semaphore */
    out->permits_used = r->element[8]->integer;
    out->permits = str_i64(r->element[9]);
    if (out->permits == 0) out->permits = -1; /* permits held, the limit not recorded */
  }
  dlock__reply_free(r);
  return 0;
}

int dlock__redis_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  dlock__reply *r;
  int rc = run_for_name(c, NULL, name, DLOCK__SCRIPT_FORCE_RELEASE, (flags & DLOCK_FORCE_FOREIGN) ? "1" : "0", &r,
                        "force release of");
  /* One script for every kind: force_release.lua ends a read-write lock's
   * holds itself, and refuses a semaphore's ZSET with WRONGTYPE. */
  if (rc == DLOCK_EWRONGTYPE && strstr(dlock_last_error(), "holds a zset")) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    return dlock__error(rc,
                        "%s: it is a semaphore (docs/semaphore.md), which a forced release does not take "
                        "apart; nothing was deleted. Its permits return when their holders release them or "
                        "their leases end",
                        saved);
  }
  if (rc) return rc;
  if (r->type != DLOCK__REPLY_INTEGER) {
    rc = dlock__error(DLOCK_EPROTO, "force release of '%s': unexpected reply from %s", name, c->server);
  } else if (r->integer < 0) {
    rc = dlock__error(DLOCK_EFOREIGN,
                      "force release of '%s' on %s: the key '%s%s' was not set by dlock (no "
                      "dlock metadata): it may be an application's own data; nothing was deleted. If it is "
                      "a lock of redis-py or node-redlock, force it with DLOCK_FORCE_FOREIGN "
                      "(dlock release --force --foreign)",
                      name, c->server, c->prefix, name);
  } else if (was_held) {
    *was_held = r->integer > 0;
  }
  dlock__reply_free(r);
  return rc;
}

/* Match 'name' against a glob with * ? and [...] (as Redis' MATCH does). */
static int glob_match(const char *p, const char *s) {
  for (; *p; p++, s++) {
    if (*p == '*') {
      while (p[1] == '*') p++;
      if (!p[1]) return 1;
      for (; *s; s++)
        if (glob_match(p + 1, s)) return 1;
      return 0;
    }
    if (!*s) return 0;
    if (*p == '?') continue;
    if (*p == '[') {
      const char *q = p + 1;
      int neg = *q == '^', hit = 0;
      if (neg) q++;
      for (; *q && *q != ']'; q++) {
        if (q[1] == '-' && q[2] && q[2] != ']') {
          if (*s >= q[0] && *s <= q[2]) hit = 1;
          q += 2;
        } else if (*q == '\\' && q[1]) {
          if (*s == *++q) hit = 1;
        } else if (*q == *s) {
          hit = 1;
        }
      }
      if (!*q || hit == neg) return 0;
      p = q;
      continue;
    }
    if (*p == '\\' && p[1]) p++;
    if (*p != *s) return 0;
  }
  return !*s;
}

/* Of the names[0..n) found on 'node' (lock keys "<prefix><name>"), keep in
 * place those whose key exists, and return how many: one pipelined EXISTS
 * each, on the node that holds the name's slot (its counter's). */
static int keep_held(dlock_client *c, dlock__node *node, char (*names)[DLOCK_MAX_NAME_LEN + 1], size_t n) {
  if (n == 0) return 0;
  dlock__cmd *cmds = calloc(n, sizeof *cmds);
  dlock__reply **replies = calloc(n, sizeof *replies);
  const char **argv = calloc(2 * n, sizeof *argv);
  size_t *lens = calloc(2 * n, sizeof *lens);
  char *keys = malloc(n * (c->prefix_len + DLOCK_MAX_NAME_LEN + 1));
  int rc = 0;
  if (!cmds || !replies || !argv || !lens || !keys) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    char *k = keys + i * (c->prefix_len + DLOCK_MAX_NAME_LEN + 1);
    lens[2 * i + 1] = (size_t)sprintf(k, "%s%s", c->prefix, names[i]);
    argv[2 * i] = "EXISTS";
    lens[2 * i] = 6;
    argv[2 * i + 1] = k;
    cmds[i] = (dlock__cmd){2, argv + 2 * i, lens + 2 * i};
  }
  if ((rc = dlock__node_exec(node, cmds, n, replies, NULL)) != 0) {
    dlock__error_prefix("list on %s: ", node->ep.display);
    goto out;
  }
  /* An error reply (NOPERM, LOADING, ...) is the list's error, not "not
   * held": a list that leaves out a held lock must not look complete. A
   * redirection (-ASK, -MOVED, -TRYAGAIN: the slot migrates) says the key is
   * not on this node, as a SCAN snapshot may miss a lock anyway. */
  for (size_t i = 0; i < n; i++) {
    const dlock__reply *e = replies[i];
    if (e->type == DLOCK__REPLY_ERROR &&
        (!strncmp(e->str, "ASK ", 4) || !strncmp(e->str, "MOVED ", 6) || !strncmp(e->str, "TRYAGAIN", 8)))
      continue;
    if (replies[i]->type == DLOCK__REPLY_ERROR) {
      rc = dlock__error(dlock__reply_error_status(replies[i]), "list on %s: EXISTS %s%s failed: %s", node->ep.display,
                        c->prefix, names[i], replies[i]->str);
      goto out;
    }
    if (replies[i]->type != DLOCK__REPLY_INTEGER) {
      rc = dlock__error(DLOCK_EPROTO, "list on %s: unexpected EXISTS reply", node->ep.display);
      goto out;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; i++)
    if (replies[i]->type == DLOCK__REPLY_INTEGER && replies[i]->integer == 1 && kept++ != i)
      memcpy(names[kept - 1], names[i], sizeof names[i]);
  rc = (int)kept;
out:
  if (replies)
    for (size_t i = 0; i < n; i++) dlock__reply_free(replies[i]);
  free(cmds);
  free(replies);
  free(argv);
  free(lens);
  free(keys);
  return rc;
}

/* Call 'fn' with the name of each key "{<prefix><name>}<suffix>" on every
 * master that matches 'pattern' ('held': only those whose lock key
 * "<prefix><name>" exists). */
static int scan_names(dlock_client *c, const char *pattern, const char *suffix, int held,
                      void (*fn)(const char *, void *), void *arg) {
  char match[DLOCK_MAX_NAME_LEN * 2 + 32];
  size_t m = 0;
  match[m++] = '{';
  for (const char *p = c->prefix; *p; p++) { /* the prefix is literal, not a glob */
    if (strchr("*?[]\\", *p)) match[m++] = '\\';
    match[m++] = *p;
  }
  snprintf(match + m, sizeof match - m, "*}%s", suffix);
  /* A cluster keeps each lock on its slot's master: scan every master.
   * Elsewhere one node holds them all (Sentinel: the master it follows). */
  dlock__node *one = NULL, **nodes = &one;
  int nnodes = 0;
  if (dlock__topo(c)->masters) {
    if (!(nodes = malloc(1024 * sizeof *nodes))) return dlock__error(DLOCK_ENOMEM, "out of memory");
    nnodes = dlock__topo(c)->masters(dlock__topo(c), nodes, 1024);
  }
  if (nnodes == 0) {
    int route_rc;
    if (!(nodes[nnodes++] = dlock__route(c, "", 0, INT64_MAX, &route_rc))) {
      if (nodes != &one) free(nodes);
      dlock__error_prefix("list on %s: ", c->server);
      return route_rc;
    }
  }
  int count = 0;
  for (int ni = 0; ni < nnodes; ni++) {
    dlock__node *node = nodes[ni];
    char cursor[32] = "0";
    do {
      const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
      size_t lens[6];
      for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
      dlock__cmd cmd = {6, argv, lens};
      dlock__reply *r = NULL;
      int rc = dlock__node_exec(node, &cmd, 1, &r, NULL);
      if (!rc && r->type == DLOCK__REPLY_ERROR) {
        rc = dlock__reply_error_status(r);
        dlock__error(rc, "list on %s: SCAN failed: %s", node->ep.display, r->str);
      } else if (!rc && (r->type != DLOCK__REPLY_ARRAY || r->elements != 2 ||
                         r->element[0]->type != DLOCK__REPLY_STRING || r->element[1]->type != DLOCK__REPLY_ARRAY)) {
        rc = dlock__error(DLOCK_EPROTO, "list on %s: unexpected SCAN reply", node->ep.display);
      } else if (rc) {
        dlock__error_prefix("list on %s: ", node->ep.display);
      }
      if (rc) {
        dlock__reply_free(r);
        if (nodes != &one) free(nodes);
        return rc;
      }
      snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
      const dlock__reply *keys = r->element[1];
      char(*names)[DLOCK_MAX_NAME_LEN + 1] = keys->elements ? malloc(keys->elements * sizeof *names) : NULL;
      size_t n = 0;
      if (keys->elements && !names) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
      for (size_t i = 0; !rc && i < keys->elements; i++) {
        const dlock__reply *k = keys->element[i];
        size_t skip = 1 + c->prefix_len, tail = 1 + strlen(suffix);
        if (k->type != DLOCK__REPLY_STRING || k->len < skip + tail + 1) continue;
        size_t nlen = k->len - skip - tail;
        if (nlen > DLOCK_MAX_NAME_LEN) continue;
        memcpy(names[n], k->str + skip, nlen);
        names[n][nlen] = '\0';
        if (pattern && !glob_match(pattern, names[n])) continue;
        n++;
      }
      dlock__reply_free(r);
      int kept = rc ? rc : held ? keep_held(c, node, names, n) : (int)n;
      if (kept < 0) {
        free(names);
        if (nodes != &one) free(nodes);
        return kept;
      }
      for (int i = 0; i < kept; i++) fn(names[i], arg);
      count += kept;
      free(names);
    } while (strcmp(cursor, "0") != 0);
  }
  if (nodes != &one) free(nodes);
  return count;
}

int dlock__redis_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  /* Every lock dlock takes, of every kind, has a fence counter
   * "{<prefix><name>}:fence" (for 30 days after its last acquisition): scan
   * for those, and keep the names whose lock key exists. No other
   * application's key is read, and only counters are matched. */
  return scan_names(c, pattern, ":fence", 1, fn, arg);
}

int dlock__redis_latch_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  return scan_names(c, pattern, ":latch", 0, fn, arg);
}

/* The core checked the arguments (core/admin.c). Where a failover may
 * promote a replica that missed the last admissions (issue 22 item 5): with
 * WAIT, an admission the replicas did not acknowledge is refused
 * (DLOCK_EREPLICAS); without (Sentinel, Cluster), no token below the floor of
 * the master's epoch record is admitted: the clock at the first fence or
 * guard check of the server process that serves the data now (scripts.c
 * passes the record, prelude.lua keeps it; docs/topologies.md). */
int dlock__redis_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest) {
  int rc;
  size_t klen = c->prefix_len + strlen(resource) + strlen("{}:guard");
  char *key = malloc(klen + 1);
  if (!key) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(key, klen + 1, "{%s%s}:guard", c->prefix, resource);
  char tok[24];
  snprintf(tok, sizeof tok, "%" PRIu64, token);
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = DLOCK__SCRIPT_GUARD;
  call.nkeys = 1;
  call.keys[0] = key;
  call.keylens[0] = klen;
  call.nargs = 1;
  call.args[0] = tok;
  call.arglens[0] = strlen(tok);
  dlock__reply *r = NULL;
  /* Twice-safe: the guard admits a token equal to the highest seen, so a
   * second run of an admitted check admits again; if a newer token came in
   * between, "stale" is the true answer by then. The floor is set once per
   * change of master, so a second run meets the same one. */
  rc = dlock__script_run_twice_safe(c, &call, &r);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "guard on '%s' (key '%s') at %s: %s", resource, key, c->server, r->str);
  } else if (!rc && (r->type != DLOCK__REPLY_ARRAY || r->elements < 2 || r->elements > 3)) {
    rc = dlock__error(DLOCK_EPROTO, "guard on '%s': unexpected reply from %s", resource, c->server);
  } else if (!rc && r->element[0]->integer != 1) {
    if (highest && r->element[1]->type == DLOCK__REPLY_STRING)
      dlock__parse_fence(r->element[1]->str, r->element[1]->len, highest);
    if (r->elements == 3)
      rc =
          dlock__error(DLOCK_ESTALE,
                       "guard on '%s' at %s: token %s is stale: it was issued before the Redis "
                       "master changed (a failover or a restart), and admissions made on the old master may "
                       "have been lost, so only tokens issued since (at least %s) are admitted. Reject this "
                       "write; acquire the lock again for a new token",
                       resource, c->server, tok, r->element[1]->type == DLOCK__REPLY_STRING ? r->element[1]->str : "?");
    else
      rc = dlock__error(DLOCK_ESTALE,
                        "guard on '%s': token %s is stale; a newer holder wrote with %s. "
                        "Reject this write: the lock was lost",
                        resource, tok, r->element[1]->type == DLOCK__REPLY_STRING ? r->element[1]->str : "?");
  } else if (rc) {
    dlock__error_prefix("guard on '%s' at %s: ", resource, c->server);
  } else if (dlock__replicas_short(c, &call)) {
    /* Admitted on the master only: a failover to a replica could forget it
     * and admit a lower token. Not a clean admission. */
    char why[512];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    rc = dlock__error(DLOCK_EREPLICAS,
                      "guard on '%s' at %s: token %s was recorded on the master, but %s: do "
                      "not write (a failover could forget this admission and admit a lower token); check the "
                      "replicas, then check the token again",
                      resource, c->server, tok, why);
  } else if (highest) {
    *highest = token; /* admitted: recorded, and no higher one was */
  }
  dlock__reply_free(r);
  free(key);
  return rc;
}

int dlock__redis_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  /* A job that ran has "{<prefix><name>}:tick"; one operated before it ran
   * has "{<prefix><name>}:job". The core drops the names seen twice. */
  int n = scan_names(c, pattern, ":tick", 0, fn, arg);
  if (n < 0) return n;
  int m = scan_names(c, pattern, ":job", 0, fn, arg);
  return m < 0 ? m : n + m;
}
