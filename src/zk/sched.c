/*
 * zk/sched.c - the fencing guard and the scheduler's records on ZooKeeper:
 *
 *   <ns>/_dlock_guard/<resource>            data: highest token admitted (decimal)
 *   <ns>/_dlock_sched/<job>/ticks/<tick>    one per claimed tick (20-digit Unix ms)
 *   <ns>/_dlock_sched/<job>/history/r-<scheduled>-<fence>   one per finished run
 *
 * Every write is exact after a lost reply: the guard's conditional setData
 * is re-read, a tick node carries the claimer's run token, a history node's
 * name is unique to its run. Every guard read follows a sync (a follower
 * that lags would show an older token: one equal to it passes unwritten).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zk/zk_int.h"

#define MAX_RETRIES 20

/* dlock__zk_close_path() on the parent of 'path'. */
static int close_parent(dlock__zk *z, dlock__zk_sess *s, const char *path, int *closed_now) {
  *closed_now = 0;
  char *up = strdup(path);
  if (!up) return dlock__error(DLOCK_ENOMEM, "out of memory");
  char *slash = strrchr(up, '/');
  int rc = 0;
  if (slash && slash != up) {
    *slash = '\0';
    rc = dlock__zk_close_path(z, s, up, closed_now);
  }
  free(up);
  return rc;
}

/* Create 'path' and, on NONODE, its parents (containers, so that ZooKeeper
 * removes them once empty), all with our ACL (dlock__zk_acl()). The caller
 * closes the parent once created (close_parent()): one left open by a
 * client without credentials existed before. */
static int create_with_parents(dlock__zk *z, dlock__zk_sess *s, const char *path, const char *data, int len, int mode,
                               struct Stat *st, int *zrc_out) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int zrc = st ? zoo_create2(s->zh, path, data, len, dlock__zk_acl(z), mode, NULL, 0, st)
                 : zoo_create(s->zh, path, data, len, dlock__zk_acl(z), mode, NULL, 0);
    *zrc_out = zrc;
    if (zrc != ZNONODE || attempt) return zrc;
    char *buf = strdup(path);
    if (!buf) return ZSYSTEMERROR;
    char *last = strrchr(buf, '/');
    for (char *p = strchr(buf + 1, '/'); p && p <= last; p = strchr(p + 1, '/')) {
      *p = '\0';
      int prc = zoo_create(s->zh, buf, NULL, -1, dlock__zk_acl(z), ZOO_CONTAINER, NULL, 0);
      *p = '/';
      if (prc != ZOK && prc != ZNODEEXISTS) {
        free(buf);
        *zrc_out = prc;
        return prc;
      }
    }
    free(buf);
  }
  return *zrc_out;
}

/* Retry after a reply that may be lost: wait for the connection (1) or give
 * up (0) at the session's end. */
static int may_retry(dlock__zk_sess *s, int zrc, int *tries) {
  if (!dlock__zk_rc_uncertain(zrc) || zrc == ZSESSIONEXPIRED) return 0;
  if ((*tries)++ >= MAX_RETRIES) return 0;
  return dlock__zk_wait_connected(s, dlock__zk_retry_limit(s));
}

/* ---- Guard ---- */

/* The guard is bound to no session: after ours ended (e.g. a process paused
 * past it), the check goes on in a new one, once; what a lost reply may have
 * written is read again first. 1: go on with '*s'; 0: give up (with '*s'
 * still ours to put, or NULL and '*rc' set). */
static int guard_retry(dlock__zk *z, dlock__zk_sess **s, int zrc, int *tries, int *new_session, int *rc) {
  if (may_retry(*s, zrc, tries)) return 1;
  if (!dlock__zk_rc_uncertain(zrc) || *new_session || !dlock__zk_sess_over(*s)) return 0;
  *new_session = 1;
  dlock__zk_sess_put(*s);
  *s = dlock__zk_sess_get(z, rc);
  return *s != NULL;
}

int dlock__zk_guard_check(dlock__zk *z, const char *resource, uint64_t token, uint64_t *highest) {
  if (highest) *highest = 0;
  int rc = dlock__zk_check_name("resource name", resource);
  if (rc) return rc;
  if (token == 0 || token > (uint64_t)INT64_MAX)
    return dlock__error(DLOCK_ERANGE, "guard '%s': token %" PRIu64 " was never issued (1..2^63-1)", resource, token);
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *path = dlock__zk_path(z, "_dlock_guard", resource);
  char want[24];
  snprintf(want, sizeof want, "%" PRIu64, token);
  int tries = 0, new_session = 0;
  if (!path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  /* With a digest, the guard and its parent must be closed to clients
   * without credentials before its token is trusted: one that could write
   * the node, or delete it and create it anew, could lower it. */
  int closed_checked = 0, closed;
  for (int round = 0; round < 1000; round++) {
    char buf[64];
    int len = (int)sizeof buf - 1;
    struct Stat st;
    if (!closed_checked) {
      if ((rc = close_parent(z, s, path, &closed)) || (rc = dlock__zk_close_path(z, s, path, &closed))) goto out;
      closed_checked = 1;
    }
    /* A sync first: our server may be a follower that has not applied a
     * higher token admitted through another server; a token equal to what
     * it shows is admitted with no write, so the read must be current. */
    int zrc = dlock__zk_sync(s);
    if (zrc == ZOK) zrc = zoo_get(s->zh, path, 0, buf, &len, &st);
    if (zrc == ZNONODE) {
      zrc = create_with_parents(z, s, path, want, (int)strlen(want), ZOO_PERSISTENT, NULL, &zrc);
      if (zrc == ZOK) {
        /* A parent closed only now may have let the node be replaced
         * meanwhile: check both again and re-read. */
        if ((rc = close_parent(z, s, path, &closed))) goto out;
        if (closed) {
          closed_checked = 0;
          continue;
        }
        rc = 0;
        goto out;
      }
      if (zrc == ZNODEEXISTS) continue;
      if (guard_retry(z, &s, zrc, &tries, &new_session, &rc)) continue; /* re-read: our create or another's */
      if (s) rc = dlock__zk_fail(z, zrc, "guard: create", path);
      goto out;
    }
    if (zrc != ZOK) {
      if (guard_retry(z, &s, zrc, &tries, &new_session, &rc)) continue;
      if (s) rc = dlock__zk_fail(z, zrc, "guard: read", path);
      goto out;
    }
    uint64_t cur;
    if (len < 0 || len >= (int)sizeof buf - 1 || dlock__parse_fence(buf, (size_t)len, &cur) != 0) {
      rc = dlock__error(DLOCK_EFENCE,
                        "guard '%s' on %s: node %s holds '%.*s', not a token (1..2^63-1); delete it if it is not "
                        "a dlock guard",
                        resource, z->server, path, len > 40 ? 40 : (len < 0 ? 0 : len), buf);
      goto out;
    }
    if (cur > token) {
      if (highest) *highest = cur;
      rc = dlock__error(DLOCK_ESTALE, "guard '%s' on %s: token %" PRIu64 " is stale, %" PRIu64 " was seen", resource,
                        z->server, token, cur);
      goto out;
    }
    if (cur == token) {
      rc = 0;
      goto out;
    }
    /* Write only if nobody wrote since we read (version). */
    zrc = zoo_set(s->zh, path, want, (int)strlen(want), st.version);
    if (zrc == ZOK) {
      rc = 0;
      goto out;
    }
    if (zrc == ZBADVERSION || zrc == ZNONODE) continue;
    if (guard_retry(z, &s, zrc, &tries, &new_session, &rc)) continue; /* re-read decides */
    if (s) rc = dlock__zk_fail(z, zrc, "guard: conditional setData", path);
    goto out;
  }
  rc = dlock__error(DLOCK_ETIMEDOUT, "guard '%s' on %s: too much contention on %s", resource, z->server, path);
out:
  if (rc == 0 && highest) *highest = token;
  free(path);
  if (s) dlock__zk_sess_put(s);
  return rc;
}

/* ---- Scheduler ---- */

static char *job_path(dlock__zk *z, const char *job, const char *sub) {
  size_t n = strlen(job) + strlen(sub) + 2;
  char *rel = malloc(n);
  if (!rel) return NULL;
  snprintf(rel, n, "%s/%s", job, sub);
  char *p = dlock__zk_path(z, "_dlock_sched", rel);
  free(rel);
  return p;
}

static int is_digits(const char *s, size_t n) {
  if (strlen(s) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Delete the oldest children of 'dir' accepted by 'ok' beyond the newest
 * 'keep'. Only such children: nothing else there is touched. Best effort. */
static void trim(dlock__zk_sess *s, const char *dir, int keep, int (*ok)(const char *)) {
  struct String_vector v;
  if (keep <= 0 || zoo_get_children(s->zh, dir, 0, &v) != ZOK) return;
  char **names = calloc((size_t)v.count + 1, sizeof *names);
  int n = 0;
  if (names) {
    for (int i = 0; i < v.count; i++)
      if (ok(v.data[i])) names[n++] = v.data[i];
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i + keep < n; i++) {
      size_t pn = strlen(dir) + strlen(names[i]) + 2;
      char *p = malloc(pn);
      if (!p) break;
      snprintf(p, pn, "%s/%s", dir, names[i]);
      zoo_delete(s->zh, p, -1);
      free(p);
    }
  }
  free(names);
  deallocate_String_vector(&v);
}

static int is_tick_name(const char *c) { return is_digits(c, 20); }

static int is_record_name(const char *c) {
  return strlen(c) == 43 && !strncmp(c, "r-", 2) && c[22] == '-' && is_digits(c + 23, 20);
}

/* "run=<token>\nnode=<node>\n": 1 when it names 'token'; the node into 'by'. */
static int tick_owner(const char *data, int len, const char *token, char *by, size_t bylen) {
  char buf[600];
  snprintf(buf, sizeof buf, "%.*s", len < 0 ? 0 : len, data);
  const char *n = strstr(buf, "node=");
  if (by && bylen) {
    size_t k = n ? strcspn(n + 5, "\n") : 0;
    snprintf(by, bylen, "%.*s", (int)k, n ? n + 5 : "");
  }
  char want[200];
  snprintf(want, sizeof want, "run=%s\n", token);
  return !strncmp(buf, want, strlen(want));
}

/* Claim by creating <job>/<sub>/<leaf> (leaf NULL: the tick, 20 digits,
 * refused ahead of the ensemble's clock) with the run token and node as
 * data, and "paused=<why>" when 'why' (a paused tick: consumed, not run).
 * 1 ours, 2 ours and paused, 0 another's; children beyond the newest 'keep'
 * accepted by 'kept' are deleted. */
static int claim_node(dlock__zk *z, const char *job, const char *sub, const char *leaf, int64_t tick_unix_ms,
                      const char *run_token, const char *node, const char *why, int64_t ahead_ms, int keep,
                      int (*kept)(const char *), uint64_t *fence, char *by, size_t bylen) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  if (tick_unix_ms < 0 || !run_token || !*run_token || strlen(run_token) > 128)
    return dlock__error(DLOCK_EINVAL, "claim '%s': bad tick or run token", job);
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *dir = job_path(z, job, sub);
  char *path = NULL;
  char data[600];
  int tries = 0;
  if (by && bylen) by[0] = '\0';
  if (!dir) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  size_t pn = strlen(dir) + 22 + (leaf ? strlen(leaf) : 0);
  path = malloc(pn);
  if (!path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  if (leaf)
    snprintf(path, pn, "%s/%s", dir, leaf);
  else
    snprintf(path, pn, "%s/%020" PRId64, dir, tick_unix_ms);
  snprintf(data, sizeof data, "run=%s\nnode=%.300s\n%s%.160s%s", run_token, node ? node : "", why ? "paused=" : "",
           why ? why : "", why ? "\n" : "");
  while (1) {
    struct Stat st;
    int zrc;
    create_with_parents(z, s, path, data, (int)strlen(data), ZOO_PERSISTENT, &st, &zrc);
    if (zrc == ZOK) {
      /* The ensemble's clock (the node's ctime) bounds the ticks one may
       * claim: a host whose clock runs ahead would otherwise claim future
       * ticks that correct hosts then find taken. */
      if (!leaf && ahead_ms > 0 && tick_unix_ms > st.ctime + ahead_ms) {
        zoo_delete(s->zh, path, st.version);
        rc = dlock__error(DLOCK_ETIME,
                          "claim of tick %" PRId64 " of job '%s' on %s refused: it is %" PRId64
                          " ms ahead of the ensemble's clock (tolerance %" PRId64 " ms): this host's clock is wrong",
                          tick_unix_ms, job, z->server, tick_unix_ms - st.ctime, ahead_ms);
        goto out;
      }
      /* A parent closed only now may have let our tick node be deleted
       * meanwhile: read it back (ours, or another's claim). One we may not
       * close is withdrawn: a claim anyone could delete claims nothing. */
      int closed;
      if ((rc = close_parent(z, s, path, &closed))) {
        zoo_delete(s->zh, path, st.version);
        goto out;
      }
      if (closed) continue;
      *fence = (uint64_t)st.czxid;
      rc = why ? 2 : 1;
      break;
    }
    if (zrc == ZNODEEXISTS || dlock__zk_rc_uncertain(zrc)) {
      if (zrc != ZNODEEXISTS && !may_retry(s, zrc, &tries)) {
        rc = dlock__error(DLOCK_EUNKNOWN,
                          "claim of tick %" PRId64 " of job '%s' on %s: no answer; whether it was claimed is unknown",
                          tick_unix_ms, job, z->server);
        goto out;
      }
      /* Read it back: our run token (a create whose reply was lost) or not. */
      char buf[600];
      int len = (int)sizeof buf - 1;
      zrc = zoo_get(s->zh, path, 0, buf, &len, &st);
      if (zrc == ZNONODE) continue;
      if (zrc != ZOK) {
        if (may_retry(s, zrc, &tries)) continue;
        rc = dlock__zk_fail(z, zrc, "read the tick node", path);
        goto out;
      }
      if (tick_owner(buf, len, run_token, by, bylen)) {
        *fence = (uint64_t)st.czxid;
        buf[len > 0 ? len : 0] = '\0';
        rc = strstr(buf, "\npaused=") ? 2 : 1;
      } else {
        rc = 0;
      }
      break;
    }
    rc = dlock__zk_fail(z, zrc, "claim (create the tick node)", path);
    goto out;
  }
  trim(s, dir, keep, kept);
out:
  free(dir);
  free(path);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_sched_claim(dlock__zk *z, const char *job, int64_t tick_unix_ms, const char *run_token, const char *node,
                          int64_t ahead_ms, int keep, uint64_t *fence, char *by, size_t bylen) {
  return claim_node(z, job, "ticks", NULL, tick_unix_ms, run_token, node, NULL, ahead_ms, keep, is_tick_name, fence, by,
                    bylen);
}

int dlock__zk_sched_claim_paused(dlock__zk *z, const char *job, int64_t tick_unix_ms, const char *run_token,
                                 const char *node, const char *why, int64_t ahead_ms, int keep, uint64_t *fence,
                                 char *by, size_t bylen) {
  return claim_node(z, job, "ticks", NULL, tick_unix_ms, run_token, node, why, ahead_ms, keep, is_tick_name, fence, by,
                    bylen);
}

static void put_field(char *buf, size_t len, const char *k, const char *v) {
  size_t o = strlen(buf);
  snprintf(buf + o, len - o, "%s=", k);
  o = strlen(buf);
  for (const char *p = v; *p && o + 2 < len; p++) buf[o++] = (*p == '\n') ? ' ' : *p;
  buf[o++] = '\n';
  buf[o] = '\0';
}

int dlock__zk_sched_finish(dlock__zk *z, const char *job, const dlock_run_record *rec, int keep) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *dir = job_path(z, job, "history");
  char *path = NULL;
  int tries = 0;
  if (!dir) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  size_t pn = strlen(dir) + 48;
  path = malloc(pn);
  if (!path) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  snprintf(path, pn, "%s/r-%020" PRId64 "-%020" PRIu64, dir, rec->scheduled_unix_ms, rec->fence);
  char data[1024] = "", num[32];
  put_field(data, sizeof data, "node", rec->node);
  snprintf(num, sizeof num, "%" PRIu64, rec->fence);
  put_field(data, sizeof data, "fence", num);
  snprintf(num, sizeof num, "%" PRId64, rec->scheduled_unix_ms);
  put_field(data, sizeof data, "scheduled", num);
  snprintf(num, sizeof num, "%" PRId64, rec->start_unix_ms);
  put_field(data, sizeof data, "start", num);
  snprintf(num, sizeof num, "%" PRId64, rec->duration_ms);
  put_field(data, sizeof data, "duration", num);
  put_field(data, sizeof data, "outcome", rec->outcome);
  while (1) {
    int zrc;
    create_with_parents(z, s, path, data, (int)strlen(data), ZOO_PERSISTENT, NULL, &zrc);
    /* The name is this run's own: NODEEXISTS is our first create. */
    if (zrc == ZOK || zrc == ZNODEEXISTS) {
      int closed;
      if ((rc = close_parent(z, s, path, &closed))) goto out;
      break;
    }
    if (may_retry(s, zrc, &tries)) continue;
    rc = dlock__zk_fail(z, zrc, "record the run (create)", path);
    goto out;
  }
  trim(s, dir, keep, is_record_name);
  rc = 0;
out:
  free(dir);
  free(path);
  dlock__zk_sess_put(s);
  return rc;
}

static void get_field(const char *data, const char *k, char *out, size_t len) {
  char key[32];
  snprintf(key, sizeof key, "%s=", k);
  out[0] = '\0';
  for (const char *p = data; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (!strncmp(p, key, strlen(key))) {
      const char *v = p + strlen(key);
      size_t n = strcspn(v, "\n");
      snprintf(out, len, "%.*s", (int)n, v);
      return;
    }
  }
}

int dlock__zk_sched_history(dlock__zk *z, const char *job, dlock_run_record *out, int max) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  if (max <= 0) return 0;
  size_t step = out[0].struct_size;
  if (step < DLOCK__RUN_RECORD_V1 || step > sizeof(dlock_run_record))
    return dlock__error(DLOCK_EINVAL, "history: call dlock_run_record_init() on the records first");
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *dir = job_path(z, job, "history");
  struct String_vector v = {0, NULL};
  char **names = NULL;
  int got = 0;
  if (!dir) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  int zrc = zoo_get_children(s->zh, dir, 0, &v);
  if (zrc == ZNONODE) {
    rc = 0;
    goto out;
  }
  if (zrc != ZOK) {
    rc = dlock__zk_fail(z, zrc, "history: list", dir);
    goto out;
  }
  names = calloc((size_t)v.count + 1, sizeof *names);
  if (!names) {
    rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    goto out;
  }
  int n = 0;
  for (int i = 0; i < v.count; i++)
    if (is_record_name(v.data[i])) names[n++] = v.data[i];
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = n - 1; i >= 0 && got < max; i--) {
    size_t pn = strlen(dir) + strlen(names[i]) + 2;
    char path[1400], data[1100], f[600];
    if (pn > sizeof path) continue;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    int len = (int)sizeof data - 1;
    if (zoo_get(s->zh, path, 0, data, &len, NULL) != ZOK) continue; /* trimmed meanwhile */
    data[len > 0 ? len : 0] = '\0';
    dlock_run_record *r = (dlock_run_record *)((char *)out + (size_t)got * step);
    size_t keep_size = r->struct_size ? r->struct_size : step;
    memset(r, 0, step);
    r->struct_size = keep_size;
    get_field(data, "node", r->node, sizeof r->node);
    get_field(data, "fence", f, sizeof f);
    r->fence = strtoull(f, NULL, 10);
    get_field(data, "scheduled", f, sizeof f);
    r->scheduled_unix_ms = strtoll(f, NULL, 10);
    get_field(data, "start", f, sizeof f);
    r->start_unix_ms = strtoll(f, NULL, 10);
    get_field(data, "duration", f, sizeof f);
    r->duration_ms = strtoll(f, NULL, 10);
    get_field(data, "outcome", r->outcome, sizeof r->outcome);
    got++;
  }
  rc = got;
out:
  free(names);
  if (v.data) deallocate_String_vector(&v);
  free(dir);
  dlock__zk_sess_put(s);
  return rc;
}

/* ---- A job's state (dlock_job_*: pause, resume, trigger) ----
 *
 *   <job>/state                   while paused: "by=<who>\nreason=<why>\n" (its ctime: when)
 *   <job>/trigger                 while a manual trigger waits: "by=<who>\nid=<id>\n" (its ctime: when)
 *   <job>/manual/<ctime>-<id>     the claim of trigger <id>, as a tick's (czxid: the fence)
 *
 * A running scheduler watches <job>/trigger (backend.c); a pause is read by
 * every tick's claim (one getChildren of <job>, and the state's data only
 * while paused). */

static int is_manual_name(const char *c) {
  if (strlen(c) < 22 || c[20] != '-') return 0;
  for (int i = 0; i < 20; i++)
    if (c[i] < '0' || c[i] > '9') return 0;
  return 1;
}

/* 1 when trigger 'id' was claimed already (a <job>/manual child names it). */
static int manual_claimed(dlock__zk *z, dlock__zk_sess *s, const char *job, const char *id) {
  char *dir = job_path(z, job, "manual");
  struct String_vector v = {0, NULL};
  int found = 0;
  if (dir && zoo_get_children(s->zh, dir, 0, &v) == ZOK) {
    for (int i = 0; i < v.count && !found; i++) found = is_manual_name(v.data[i]) && !strcmp(v.data[i] + 21, id);
    deallocate_String_vector(&v);
  }
  free(dir);
  return found;
}

int dlock__zk_job_set(dlock__zk *z, const char *job, int op, const char *by, const char *reason, const char *id) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *path = job_path(z, job, op == DLOCK__JOB_TRIGGER ? "trigger" : "state");
  char data[700] = "";
  put_field(data, sizeof data, "by", by);
  put_field(data, sizeof data, op == DLOCK__JOB_TRIGGER ? "id" : "reason", op == DLOCK__JOB_TRIGGER ? id : reason);
  int tries = 0, zrc = ZOK;
  rc = path ? DLOCK_ETIMEDOUT : dlock__error(DLOCK_ENOMEM, "out of memory");
  for (int round = 0; path && round < 100; round++) {
    if (op == DLOCK__JOB_RESUME) {
      /* Sent again after a lost reply, the delete finds nothing: 0. */
      zrc = zoo_delete(s->zh, path, -1);
      if (zrc == ZOK || zrc == ZNONODE) {
        rc = zrc == ZOK;
        break;
      }
    } else {
      if (op == DLOCK__JOB_TRIGGER && manual_claimed(z, s, job, id)) {
        rc = 1; /* a second send: the first one's trigger ran already */
        break;
      }
      create_with_parents(z, s, path, data, (int)strlen(data), ZOO_PERSISTENT, NULL, &zrc);
      if (zrc == ZOK) {
        int closed;
        rc = close_parent(z, s, path, &closed);
        if (!rc) rc = 1;
        break;
      }
      if (zrc == ZNODEEXISTS) {
        /* Ours (a create whose reply was lost: the same data, a trigger's
         * id is fresh) or another's: nothing to do. */
        char buf[700];
        int len = (int)sizeof buf - 1;
        zrc = zoo_get(s->zh, path, 0, buf, &len, NULL);
        if (zrc == ZNONODE) continue;
        if (zrc == ZOK) {
          buf[len > 0 ? len : 0] = '\0';
          rc = !strcmp(buf, data);
          break;
        }
      }
    }
    if (may_retry(s, zrc, &tries)) continue;
    rc = dlock__zk_fail(z, zrc, "job state", path);
    break;
  }
  if (rc == DLOCK_ETIMEDOUT) rc = dlock__error(rc, "job '%s' on %s: too much contention on %s", job, z->server, path);
  free(path);
  dlock__zk_sess_put(s);
  return rc;
}

/* Read <job>/<leaf>: 1 with its data (NUL-terminated) and stat, 0 absent. */
static int read_leaf(dlock__zk *z, dlock__zk_sess *s, const char *job, const char *leaf, char *buf, int size,
                     struct Stat *st) {
  char *path = job_path(z, job, leaf);
  if (!path) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int len = size - 1, tries = 0, zrc;
  while ((zrc = zoo_get(s->zh, path, 0, buf, &len, st)) != ZOK && zrc != ZNONODE && may_retry(s, zrc, &tries))
    len = size - 1;
  int rc = zrc == ZOK ? 1 : zrc == ZNONODE ? 0 : dlock__zk_fail(z, zrc, "read the job state", path);
  if (rc == 1) buf[len > 0 ? len : 0] = '\0';
  free(path);
  return rc;
}

/* "skipped: paused by WHO: REASON" (as the history records it) from the state's data. */
static void paused_why(const char *data, char *why, size_t len) {
  char by[200], reason[300];
  get_field(data, "by", by, sizeof by);
  get_field(data, "reason", reason, sizeof reason);
  snprintf(why, len, "skipped: paused by %s%s%s", by, *reason ? ": " : "", reason);
}

int dlock__zk_job_get(dlock__zk *z, const char *job, dlock_job_state *out) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char buf[700];
  struct Stat st;
  if ((rc = read_leaf(z, s, job, "state", buf, sizeof buf, &st)) == 1) {
    out->paused = 1;
    get_field(buf, "by", out->paused_by, sizeof out->paused_by);
    get_field(buf, "reason", out->paused_reason, sizeof out->paused_reason);
    out->paused_unix_ms = st.ctime;
  }
  if (rc >= 0 && (rc = read_leaf(z, s, job, "trigger", buf, sizeof buf, &st)) == 1) {
    out->trigger_pending = 1;
    get_field(buf, "by", out->trigger_by, sizeof out->trigger_by);
    out->trigger_unix_ms = st.ctime;
  }
  dlock__zk_sess_put(s);
  return rc < 0 ? rc : 0;
}

int dlock__zk_job_peek(dlock__zk *z, const char *job, char *why, size_t whylen, int *pending) {
  *pending = 0;
  why[0] = '\0';
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *dir = dlock__zk_path(z, "_dlock_sched", job);
  struct String_vector v = {0, NULL};
  int tries = 0, zrc = ZNONODE, paused = 0;
  while (dir && (zrc = zoo_get_children(s->zh, dir, 0, &v)) != ZOK && zrc != ZNONODE && may_retry(s, zrc, &tries)) {
  }
  rc = !dir                           ? dlock__error(DLOCK_ENOMEM, "out of memory")
       : zrc == ZOK || zrc == ZNONODE ? 0
                                      : dlock__zk_fail(z, zrc, "read the job state", dir);
  for (int i = 0; zrc == ZOK && i < v.count; i++) {
    if (!strcmp(v.data[i], "trigger")) *pending = 1;
    if (!strcmp(v.data[i], "state")) paused = 1;
  }
  if (zrc == ZOK) deallocate_String_vector(&v);
  char buf[700];
  struct Stat st;
  if (!rc && paused && (rc = read_leaf(z, s, job, "state", buf, sizeof buf, &st)) == 1) {
    paused_why(buf, why, whylen);
    rc = 0;
  }
  free(dir);
  dlock__zk_sess_put(s);
  return rc;
}

int dlock__zk_job_claim_manual(dlock__zk *z, const char *job, const char *run_token, const char *node, int keep,
                               uint64_t *fence, int64_t *trigger_unix_ms, char *by, size_t bylen) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char buf[700], id[200], leaf[240];
  struct Stat st;
  rc = read_leaf(z, s, job, "trigger", buf, sizeof buf, &st);
  dlock__zk_sess_put(s);
  if (rc <= 0) return rc; /* none pending */
  get_field(buf, "id", id, sizeof id);
  *trigger_unix_ms = st.ctime;
  snprintf(leaf, sizeof leaf, "%020" PRId64 "-%s", (int64_t)st.ctime, id);
  rc = claim_node(z, job, "manual", leaf, 0, run_token, node, NULL, 0, keep, is_manual_name, fence, by, bylen);
  if (rc < 0) return rc;
  /* Claimed (by us or another): the trigger goes, if it is still this one. */
  char *path = job_path(z, job, "trigger");
  if ((s = dlock__zk_sess_get(z, &rc)) != NULL && path) {
    zoo_delete(s->zh, path, st.version);
    dlock__zk_sess_put(s);
  }
  free(path);
  dlock__error_clear();
  return rc == 1 ? 1 : 0;
}

int dlock__zk_job_list(dlock__zk *z, void (*fn)(const char *, void *), void *arg) {
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  char *dir = dlock__zk_path(z, "_dlock_sched", NULL);
  struct String_vector v = {0, NULL};
  int zrc = dir ? zoo_get_children(s->zh, dir, 0, &v) : ZSYSTEMERROR;
  rc = !dir ? dlock__error(DLOCK_ENOMEM, "out of memory") : zrc == ZNONODE ? 0 : zrc == ZOK ? v.count : 0;
  if (dir && zrc != ZOK && zrc != ZNONODE) rc = dlock__zk_fail(z, zrc, "list the jobs", dir);
  for (int i = 0; zrc == ZOK && i < v.count; i++) fn(v.data[i], arg);
  if (zrc == ZOK) deallocate_String_vector(&v);
  free(dir);
  dlock__zk_sess_put(s);
  return rc;
}

/* A scheduler's watch of a job's pending trigger: an exists watch on
 * <job>/trigger, set again by its watcher. Freed with the client, after
 * its session's threads ended (dlock__zk_job_watch_free): a watch set
 * again asynchronously may still fire after the unwatch, into an entry
 * marked dead. A new session (the old one expired) has no watch: the
 * scheduler then learns of a trigger from its next tick's claim. */
typedef struct job_watch {
  char *path;
  void (*wake)(void *);
  void *arg;
  atomic_int dead;
} job_watch;

static void watch_set(int rc, const struct Stat *st, const void *data) {
  (void)rc;
  (void)st;
  (void)data;
}

/* On the session's completion thread: no synchronous call here. Any event
 * (the trigger made or claimed, a reconnect) wakes the scheduler, which
 * reads the state. */
static void job_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  (void)state;
  (void)path;
  job_watch *w = ctx;
  if (atomic_load(&w->dead)) return;
  w->wake(w->arg);
  if (type != ZOO_SESSION_EVENT) zoo_awexists(zh, w->path, job_watcher, w, watch_set, NULL);
}

int dlock__zk_job_watch(dlock__zk *z, const char *job, void (*wake)(void *), void *arg, void **handle) {
  *handle = NULL;
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  job_watch *w = calloc(1, sizeof *w);
  if (!w || !(w->path = job_path(z, job, "trigger"))) {
    free(w);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  w->wake = wake;
  w->arg = arg;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  int zrc = ZOK;
  if (s) {
    struct Stat st;
    zrc = zoo_wexists(s->zh, w->path, job_watcher, w, &st);
    dlock__zk_sess_put(s);
    if (zrc != ZOK && zrc != ZNONODE) rc = dlock__zk_fail(z, zrc, "watch the job's trigger", w->path);
  }
  if (!s || rc) { /* no watch was set: nothing can fire into it */
    free(w->path);
    free(w);
    return rc;
  }
  *handle = w;
  return 0;
}

void dlock__zk_job_unwatch(void *handle) {
  job_watch *w = handle;
  if (w) atomic_store(&w->dead, 1);
}

void dlock__zk_job_watch_free(void *handle) {
  job_watch *w = handle;
  if (!w) return;
  free(w->path);
  free(w);
}
