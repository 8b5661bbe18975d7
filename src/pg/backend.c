/*
 * backend.c - the PostgreSQL backend's table of operations (backend.h): the
 * seam's calls mapped onto the module of pg.h (pg_conn.c, pg_lock.c,
 * pg_sql.c), plus the few statements only the seam needs (the scheduler's
 * job-lock release with lock_at_least_for, its undo).
 *
 * Lease mode (the default): leases in dlock's table, renewed by the core's
 * watchdog in one statement per batch, fenced. Advisory mode
 * (?mode=advisory): a transaction-level advisory lock per hold, in a
 * transaction kept open on a connection of its own, no fence; the watchdog
 * looks at that transaction every ADVISORY_CHECK_MS / 3 and reports the
 * hold lost as soon as it or its session is gone.
 *
 * The client's key prefix (dlock_client_options.key_prefix) is put in front
 * of lock, job and resource names, as Redis puts it in front of keys.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/pg_internal.h"

/* Advisory mode: the "lease" the watchdog uses to pace its look at the
 * session (every third of it). */
#define ADVISORY_CHECK_MS 1500

/* A name with the client's prefix: at most the prefix and a DLOCK_MAX_NAME_LEN name. */
#define FULL_MAX (2 * DLOCK_MAX_NAME_LEN + 2)

typedef struct pg_lock {
  pthread_mutex_t mu;  /* advisory mode: the session connection is used by one thread at a time */
  dlock__pg_hold hold; /* the current hold (name always set) */
} pg_lock;

static dlock__pg *pgc(const dlock_client *c) { return (dlock__pg *)c->be; }
static pg_lock *pgl(const dlock_mutex *m) { return (pg_lock *)m->be; }

/* 'name' with the client's prefix into 'out' (FULL_MAX bytes). */
static void full_name(const dlock_client *c, const char *name, char *out) {
  snprintf(out, FULL_MAX, "%s%s", c->prefix ? c->prefix : "", name);
}

/* ---- Client ---- */

static void pg_redact(const char *url, char *buf, size_t len) { dlock__pg_mask_url(url, buf, len); }

static const dlock__backend_ops pg_advisory_ops; /* below */

static int pg_open(dlock_client *c, const dlock_client_options *o, const char *url) {
  if (!url) return dlock__error(DLOCK_EURL, "PostgreSQL: no URL given");
  /* Credentials and TLS are libpq's: the URL, PGPASSWORD, ~/.pgpass, sslmode...;
   * a password given apart (a password file) overrides them. */
  if (o->username || o->tls_ca_file || o->tls_cert_file || o->tls_key_file || o->tls_server_name || o->tls_skip_verify)
    return dlock__error(DLOCK_EINVAL, "username/TLS options given with a PostgreSQL URL: put them in the "
                                      "URL (user, sslmode, sslrootcert, sslcert, sslkey), as libpq reads them");
  if (o->password && strlen(o->password) >= sizeof((dlock__pg_options *)0)->password)
    return dlock__error(DLOCK_ERANGE, "PostgreSQL: the password is longer than %zu bytes",
                        sizeof((dlock__pg_options *)0)->password - 1);
  if (o->wait_replicas || o->wait_timeout_ms)
    return dlock__error(DLOCK_EINVAL, "wait_replicas/wait_timeout_ms are Redis options; on PostgreSQL use "
                                      "synchronous replication (synchronous_commit) on the server");
  if (o->connect_timeout_ms < 0 || o->connect_timeout_ms > 3600 * 1000 || o->command_timeout_ms < 0 ||
      o->command_timeout_ms > 3600 * 1000)
    return dlock__error(DLOCK_ERANGE,
                        "connect_timeout_ms %d / command_timeout_ms %d: each must be 0 (default) or "
                        "1..3600000",
                        o->connect_timeout_ms, o->command_timeout_ms);
  dlock__pg_options po = {0};
  po.max_connections = o->max_connections;
  po.command_timeout_ms = o->command_timeout_ms;
  po.connect_timeout_ms = o->connect_timeout_ms;
  if (o->password) snprintf(po.password, sizeof po.password, "%s", o->password);
  dlock__pg *pg = NULL;
  int rc = dlock__pg_connect(url, &po, &pg);
  if (rc) return rc;
  c->be = pg;
  snprintf(c->server, sizeof c->server, "%s", dlock__pg_display(pg));
  c->command_timeout_ms = pg->opts.command_timeout_ms;
  /* Advisory mode: holds live with a session and carry no fence; no
   * scheduler, read-write lock or semaphore. */
  c->caps = dlock__pg_is_advisory(pg) ? DLOCK__CAP_SESSION : DLOCK__CAP_SEMAPHORE | DLOCK__CAP_RWLOCK;
  if (dlock__pg_is_advisory(pg)) c->ops = &pg_advisory_ops;
  return 0;
}

static void pg_close(dlock_client *c) {
  if (!c->be) return;
  dlock__pg_close(pgc(c));
  c->be = NULL;
}

static int pg_ping(dlock_client *c) { return dlock__pg_ping(pgc(c)); }

static int pg_setup(dlock_client *c) { return dlock__pg_init(pgc(c)); }

static int pg_topology_warning(dlock_client *c, char *buf, size_t len) {
  dlock__pg *pg = pgc(c);
  pthread_mutex_lock(&pg->ln_mu);
  snprintf(buf, len, "%s%s%s", pg->warnings, pg->warnings[0] && pg->prune_warning[0] ? "; " : "", pg->prune_warning);
  pthread_mutex_unlock(&pg->ln_mu);
  return buf[0] != '\0';
}

/* dlock__pg_doctor's report, one "ok:/warning:/problem:" line per finding,
 * as dlock_check entries named after what they look at. */
static const char *check_name_of(const char *line) {
  if (strstr(line, " answers, PostgreSQL ")) return "server";
  if (!strncmp(line, "replication: ", 13)) return "replication";
  if (strstr(line, "standby") || strstr(line, "read_only")) return "read-only";
  if (strstr(line, "synchronous_commit")) return "durability";
  if (strstr(line, "clock")) return "clock";
  if (strstr(line, "LISTEN")) return "notifications";
  return "rights";
}

static void add_check(dlock_check *out, int max, int *n, const char *name, dlock_check_level level, const char *found,
                      const char *fix) {
  if (*n >= max) return;
  dlock_check *k = &out[(*n)++];
  memset(k, 0, sizeof *k);
  k->name = name;
  k->level = level;
  snprintf(k->found, sizeof k->found, "%s", found);
  snprintf(k->fix, sizeof k->fix, "%s", fix);
}

static int pg_check(dlock_client *c, dlock_check *out, int max) {
  char report[4096];
  int rc = dlock__pg_doctor(pgc(c), report, sizeof report);
  if (rc < 0) return rc;
  int n = 0, read_only_seen = 0;
  for (char *line = report, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    dlock_check_level level = DLOCK_CHECK_OK;
    const char *text = line;
    if (!strncmp(line, "problem: ", 9)) {
      level = DLOCK_CHECK_FAIL;
      text = line + 9;
    } else if (!strncmp(line, "warning: ", 9)) {
      level = DLOCK_CHECK_WARN;
      text = line + 9;
    } else if (!strncmp(line, "ok: ", 4)) {
      text = line + 4;
    }
    const char *name = check_name_of(text);
    if (!strcmp(name, "read-only")) read_only_seen = 1;
    /* The advice follows the finding after ": " or "; ". */
    char found[512], fix[512] = "";
    snprintf(found, sizeof found, "%s", text);
    if (level != DLOCK_CHECK_OK) {
      static const char *const seps[] = {": run ", ": GRANT ", ": turn ", ": locks need", "; "};
      char *cut = NULL;
      for (size_t i = 0; !cut && i < sizeof seps / sizeof seps[0]; i++) cut = strstr(found, seps[i]);
      if (cut) {
        snprintf(fix, sizeof fix, "%s", cut + 2);
        *cut = '\0';
      } else {
        snprintf(fix, sizeof fix, "see docs/postgres.md");
      }
    }
    add_check(out, max, &n, name, level, found, fix);
    if (!strcmp(name, "clock") && n > 0 && !strcmp(out[n - 1].name, "clock")) {
      const char *by = strstr(text, " by ");
      const char *within = strstr(text, "within ");
      out[n - 1].skew_ms = by ? strtoll(by + 4, NULL, 10) : within ? strtoll(within + 7, NULL, 10) : 0;
    }
  }
  /* The report names a read-only server only when it is one. */
  if (!read_only_seen)
    add_check(out, max, &n, "read-only", DLOCK_CHECK_OK, "the server is a primary and takes writes", "");
  return n;
}

/* ---- Lock handles ---- */

static int pg_lock_new(dlock_mutex *m) {
  dlock_client *c = m->client;
  char full[FULL_MAX];
  full_name(c, m->name, full);
  size_t len = strlen(full);
  if (len > DLOCK__PG_NAME_MAX)
    return dlock__error(DLOCK_ENAME,
                        "lock name '%.40s...' is %zu bytes%s; the PostgreSQL backend's table holds "
                        "names of at most %d bytes (%s): use a shorter name",
                        full, len, c->prefix_len ? " with the key prefix" : "", DLOCK__PG_NAME_MAX, c->server);
  pg_lock *l = calloc(1, sizeof *l);
  if (!l) return dlock__error(DLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&l->mu, NULL);
  snprintf(l->hold.name, sizeof l->hold.name, "%s", full);
  m->be = l;
  return 0;
}

static void pg_lock_free(dlock_mutex *m) {
  pg_lock *l = pgl(m);
  if (!l) return;
  if (l->hold.session) { /* advisory mode: a hold never released; its session ends here */
    pthread_mutex_lock(&l->mu);
    dlock__pg_release(pgc(m->client), &l->hold);
    pthread_mutex_unlock(&l->mu);
  }
  pthread_mutex_destroy(&l->mu);
  free(l);
  m->be = NULL;
}

/* A notification naming a held name (a forced release): the watchdog
 * checks every hold now and reports that one lost (deleted) at once. */
static void poke_watchdog(void *arg) {
  dlock_client *c = arg;
  if (!atomic_load(&c->closing)) dlock__watchdog_poke(c);
}

static int pg_acquire(dlock_mutex *m, int64_t lease_ms, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out) {
  dlock__pg *pg = pgc(m->client);
  pg_lock *l = pgl(m);
  int64_t wait = 0;
  if (wait_ms != 0) {
    if (deadline == INT64_MAX) {
      wait = -1;
    } else {
      wait = deadline - dlock_mono_now();
      if (wait < 1) wait = 1; /* one more look, then busy */
    }
  }
  char name[DLOCK__PG_NAME_MAX + 1], token[DLOCK__TOKEN_HEX + 1];
  memcpy(name, l->hold.name, sizeof name);
  pthread_mutex_lock(&m->mu);
  memcpy(token, m->token, sizeof token);
  pthread_mutex_unlock(&m->mu);
  dlock__pg_hold h;
  dlock_mono_ms start = dlock_mono_now();
  /* Cancel: the module's waits look at the flag every 50 ms at most (its
   * LISTEN wait slices), so no wake() is needed. */
  const char *side = dlock__pg_kind_side(m->kind);
  /* A read side taken by a thread that holds the name already goes at once
   * (docs/rwlock.md): looked up at every acquire. */
  char own[DLOCK__TOKEN_HEX + 1];
  /* The server checks that hold is still live (a loss the watchdog has not
   * seen yet must not let the read in beside another writer). */
  const char *shadow = dlock__rw_own_token(m, own) ? own : NULL;
  int rc = dlock__pg_acquire_kind(pg, name, token, side, m->permits, shadow, lease_ms, m->owner_info, wait,
                                  dlock__mutex_cancel_flag(m), &h);
  if (rc) return rc;
  pthread_mutex_lock(&l->mu);
  l->hold = h;
  pthread_mutex_unlock(&l->mu);
  out->fence = h.fence;
  if (dlock__pg_is_advisory(pg)) {
    out->lease_ms = ADVISORY_CHECK_MS;
    out->start = start;
    out->valid_until = INT64_MAX; /* held while the session lives: the watchdog looks at it */
  } else {
    out->lease_ms = lease_ms;
    /* The module counts valid_until from the moment its last acquire
     * statement left (dlock__valid_until(sent, lease)): that moment is the start. */
    out->valid_until = h.valid_until;
    out->start = h.valid_until - (lease_ms - (lease_ms / 100 + 2));
    if (out->start < start) out->start = start;
    dlock__pg_watch_add(pg, name, poke_watchdog, m->client, dlock_mono_now() + m->client->command_timeout_ms);
  }
  return 0;
}

static int pg_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost) {
  dlock__pg *pg = pgc(m->client);
  pg_lock *l = pgl(m);
  pthread_mutex_lock(&l->mu);
  int rc;
  if (dlock__pg_is_advisory(pg)) {
    l->hold.lost = (int)lost;
    rc = dlock__pg_release(pg, &l->hold); /* ends the hold's session either way */
    l->hold.lost = DLOCK_LOST_NONE;
  } else {
    dlock__pg_hold h = l->hold;
    pthread_mutex_unlock(&l->mu);
    dlock__pg_watch_remove(pg, h.name); /* before: the release notifies the name too */
    h.valid_until = valid_until;
    h.lost = (int)lost;
    return dlock__pg_release(pg, &h);
  }
  pthread_mutex_unlock(&l->mu);
  return rc;
}

static void pg_undo(dlock_mutex *m) {
  (void)pg_release(m, 0, DLOCK_LOST_NONE);
  dlock__error_clear();
}

/* A copy of the hold for a statement (lease mode: no shared state). */
static dlock__pg_hold hold_copy(dlock_mutex *m, const char *token) {
  pg_lock *l = pgl(m);
  pthread_mutex_lock(&l->mu);
  dlock__pg_hold h = l->hold;
  pthread_mutex_unlock(&l->mu);
  snprintf(h.token, sizeof h.token, "%s", token);
  return h;
}

static int pg_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                     dlock_lost_reason *lost) {
  dlock__pg *pg = pgc(m->client);
  dlock__pg_hold h = hold_copy(m, token);
  dlock__pg_renewal r = {.h = &h, .lease_ms = lease_ms};
  *sent = dlock_mono_now();
  int rc = dlock__pg_renew(pg, &r, 1, 0);
  if (rc) return rc;
  if (r.status == DLOCK_ELOST) {
    *lost = r.lost;
    return dlock__error(DLOCK_ELOST, "lock '%s' on %s is no longer held by this owner (%s)", h.name, pg->display,
                        r.lost == DLOCK_LOST_TAKEN ? "another owner has it" : "its lease ran out or it was freed");
  }
  return r.status;
}

static void renew_advisory(dlock_client *c, dlock__renewal *r, size_t n) {
  dlock__pg *pg = pgc(c);
  for (size_t i = 0; i < n; i++) {
    pg_lock *l = pgl(r[i].m);
    r[i].sent = dlock_mono_now();
    pthread_mutex_lock(&l->mu);
    dlock__pg_renewal one = {.h = &l->hold, .lease_ms = r[i].lease_ms};
    dlock__pg_renew(pg, &one, 1, 0);
    pthread_mutex_unlock(&l->mu);
    r[i].status = one.status;
    r[i].lost = one.status == DLOCK_ELOST ? one.lost : DLOCK_LOST_NONE; /* the session ended: EXPIRED */
    r[i].valid_until = INT64_MAX;
  }
}

static void pg_renew(dlock_client *c, dlock__renewal *r, size_t n, dlock_mono_ms limit) {
  if (n == 0) return;
  dlock__pg *pg = pgc(c);
  if (dlock__pg_is_advisory(pg)) {
    renew_advisory(c, r, n);
    return;
  }
  dlock__pg_hold *h = malloc(n * sizeof *h);
  dlock__pg_renewal *pr = malloc(n * sizeof *pr);
  dlock_mono_ms sent = dlock_mono_now();
  if (!h || !pr) {
    free(h);
    free(pr);
    for (size_t i = 0; i < n; i++) {
      r[i].status = DLOCK_ENOMEM; /* not renewed this time */
      r[i].sent = sent;
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    h[i] = hold_copy(r[i].m, r[i].token);
    pr[i] = (dlock__pg_renewal){.h = &h[i], .lease_ms = r[i].lease_ms};
  }
  /* One statement for the whole batch. */
  dlock__pg_renew(pg, pr, n, limit);
  for (size_t i = 0; i < n; i++) {
    r[i].sent = sent;
    r[i].status = pr[i].status;
    r[i].lost = pr[i].status == DLOCK_ELOST ? pr[i].lost : DLOCK_LOST_NONE;
    if (pr[i].status == 0) r[i].valid_until = h[i].valid_until;
  }
  free(h);
  free(pr);
}

static int pg_held(dlock_mutex *m, const char *token, int64_t *ttl_ms) {
  dlock__pg *pg = pgc(m->client);
  int64_t remaining = 0;
  dlock_lost_reason lost = DLOCK_LOST_NONE;
  int rc;
  if (dlock__pg_is_advisory(pg)) {
    pg_lock *l = pgl(m);
    pthread_mutex_lock(&l->mu);
    rc = l->hold.session ? dlock__pg_remaining(pg, &l->hold, &remaining, &lost) : DLOCK_ELOST;
    pthread_mutex_unlock(&l->mu);
  } else {
    dlock__pg_hold h = hold_copy(m, token);
    rc = dlock__pg_remaining(pg, &h, &remaining, &lost);
  }
  if (rc == DLOCK_ELOST) {
    dlock__error_clear();
    return 0;
  }
  if (rc) return rc;
  if (ttl_ms) *ttl_ms = remaining;
  return 1;
}

/* ---- Admin ---- */

static int pg_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  char full[FULL_MAX];
  full_name(c, name, full);
  return dlock__pg_info(pgc(c), full, out);
}

static int pg_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *, void *), void *arg) {
  char full[FULL_MAX];
  full_name(c, name, full);
  return dlock__pg_holders(pgc(c), full, fn, arg);
}

typedef struct list_arg {
  size_t skip; /* the prefix */
  void (*fn)(const char *name, void *arg);
  void *arg;
} list_arg;

static void list_one(const char *name, void *arg) {
  list_arg *a = arg;
  if (strlen(name) >= a->skip) a->fn(name + a->skip, a->arg);
}

/* 'list' (of pg.h) with the client's prefix put in front of 'pattern' and
 * taken off the names. */
static int list_prefixed(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg,
                         int (*list)(dlock__pg *, const char *, void (*)(const char *, void *), void *)) {
  char full[FULL_MAX];
  full_name(c, pattern ? pattern : "*", full);
  list_arg a = {c->prefix_len, fn, arg};
  return list(pgc(c), full, list_one, &a);
}

static int pg_list(dlock_client *c, const char *pattern, void (*fn)(const char *name, void *arg), void *arg) {
  return list_prefixed(c, pattern, fn, arg, dlock__pg_list);
}

static int pg_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  /* DLOCK_FORCE_FOREIGN has no meaning here: only dlock's own table rows are
   * ever touched, never a table of the user's. */
  (void)flags;
  char full[FULL_MAX];
  full_name(c, name, full);
  return dlock__pg_force_release(pgc(c), full, was_held);
}

/* dlock_watch_*: the LISTEN connection's notifications (pg_lock.c, the
 * observers). While it is down (or never comes up: a transaction-mode
 * pooler) the watch is bounded: the core wakes it every
 * DLOCK__WATCH_BOUND_MS. */
static void pg_watch_wake(void *arg, unsigned what) {
  dlock_watch *w = arg;
  if (what & DLOCK__PG_OBS_DOWN) atomic_store(&w->bounded, 1);
  if (what & DLOCK__PG_OBS_UP) atomic_store(&w->bounded, 0);
  dlock__watch_wake(w, what & DLOCK__PG_OBS_FORCED ? DLOCK_WATCH_FORCED : 0);
}

static int pg_watch_open(dlock_watch *w) {
  dlock__pg_obs *o = NULL;
  int rc = dlock__pg_obs_open(pgc(w->client), pg_watch_wake, w, &o);
  w->be = o;
  return rc;
}

static int pg_watch_add(dlock_watch *w, const char *name) {
  char full[FULL_MAX];
  full_name(w->client, name ? name : "", full); /* NULL: every name of the prefix */
  return dlock__pg_obs_add(w->be, full, name == NULL);
}

static void pg_watch_close(dlock_watch *w) {
  dlock__pg_obs_close(w->be);
  w->be = NULL;
}

static int no_fence(dlock_client *c, const char *what) {
  return dlock__error(DLOCK_EINVAL,
                      "%s needs fences, and advisory mode (%s) has none: drop mode=advisory from "
                      "the URL to use dlock's lease table",
                      what, c->server);
}

static int pg_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest) {
  if (dlock__pg_is_advisory(pgc(c))) return no_fence(c, "the fencing guard");
  char full[FULL_MAX];
  full_name(c, resource, full);
  return dlock__pg_guard_check_highest(pgc(c), full, token, highest);
}

/* ---- Scheduler ---- */

/* A fixed-delay job: the backend names the tick (sched_claim_delay() in
 * pg_sql.c); not due is WAIT with how long. */
static int claim_delay(dlock_client *c, dlock__claim *cl, const char *full) {
  dlock__pg *pg = pgc(c);
  if (strlen(full) > DLOCK__PG_NAME_MAX)
    return dlock__error(DLOCK_ENAME,
                        "job name '%.40s...' is %zu bytes; the PostgreSQL backend's tables hold at "
                        "most %d (%s)",
                        full, strlen(full), DLOCK__PG_NAME_MAX, c->server);
  char sql[400], delay[24], lock[24], keep[24];
  /* set_config(..., true): this transaction commits synchronously, so a
   * crash cannot lose a fence already handed out (works through poolers).
   * The _job function obeys a pause (pg_sql.c). */
  snprintf(sql, sizeof sql,
           "SELECT outcome, fence, start_ms, claimed, wait_ms, why, pending, set_config('synchronous_commit', 'on', "
           "true) FROM \"%s\".sched_claim_delay_job($1, $2::bigint, $3, $4, $5::bigint, $6::int)",
           pg->schema);
  snprintf(delay, sizeof delay, "%" PRId64, cl->delay_ms);
  snprintf(lock, sizeof lock, "%" PRId64, cl->at_most_ms);
  snprintf(keep, sizeof keep, "%d", cl->history_len > 0 ? cl->history_len : 100);
  const char *vals[6] = {full, delay, cl->token, cl->node ? cl->node : "", lock, keep};
  PGresult *r = NULL;
  /* Twice-safe: the run token makes a second call answer as the first. */
  int rc = dlock__pg_run(pg, sql, 6, vals, 0, 1, &r, NULL, NULL);
  if (rc) {
    cl->maybe_ran = 1;
    dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  int outcome = atoi(PQgetvalue(r, 0, 0));
  cl->trigger_pending = PQgetvalue(r, 0, 6)[0] == 't';
  if (outcome == 3) {
    cl->outcome = DLOCK__CLAIM_PAUSED;
    snprintf(cl->why, sizeof cl->why, "%s", PQgetvalue(r, 0, 5));
  } else if (outcome == 1) {
    uint64_t fence = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    if (fence == 0 || fence > (uint64_t)INT64_MAX) {
      PQclear(r);
      cl->maybe_ran = 1;
      return dlock__error(DLOCK_EFENCE, "job '%s' on %s: the claim gave no valid fence", cl->job, c->server);
    }
    cl->outcome = DLOCK__CLAIM_YOURS;
    cl->fence = fence;
    cl->start_ms = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    cl->claimed_tick_ms = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
  } else {
    cl->outcome = DLOCK__CLAIM_WAIT;
    cl->wait_ms = PQgetisnull(r, 0, 4) ? -1 : strtoll(PQgetvalue(r, 0, 4), NULL, 10);
  }
  PQclear(r);
  return 0;
}

/* A skipped tick names the node that has the job (best effort: a read after
 * the claim; left empty if it fails). */
static void claimed_by(dlock_client *c, const char *full, dlock__claim *cl) {
  dlock__pg *pg = pgc(c);
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT node FROM \"%s\".sched_ticks WHERE job = $1", dlock__pg_schema(pg));
  const char *vals[1] = {full};
  PGresult *r = NULL;
  if (dlock__pg_run(pg, sql, 1, vals, 0, 1, &r, NULL, NULL) == 0 && PQntuples(r) == 1)
    snprintf(cl->by, sizeof cl->by, "%s", PQgetvalue(r, 0, 0));
  else
    dlock__error_clear();
  PQclear(r);
}

static int pg_sched_claim(dlock_client *c, dlock__claim *cl) {
  cl->maybe_ran = 0;
  dlock__pg *pg = pgc(c);
  char full[FULL_MAX];
  full_name(c, cl->job, full);
  if (cl->delay_ms) return claim_delay(c, cl, full);
  /* With allow_overlap no job lock keeps the next tick out: a 1 ms lock. */
  int64_t lock_ms = cl->allow_overlap ? 1 : cl->at_most_ms;
  int outcome = 0;
  uint64_t fence = 0;
  int64_t start = 0, skew = 0;
  int rc = dlock__pg_job_claim(pg, full, cl, lock_ms, &outcome, &fence, &start, &skew);
  if (rc) {
    cl->maybe_ran = 1; /* the claim may have run: undo frees the job lock if it holds our token */
    dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  switch (outcome) {
  case 1:
    if (fence == 0 || fence > (uint64_t)INT64_MAX) {
      cl->maybe_ran = 1;
      return dlock__error(DLOCK_EFENCE, "job '%s' on %s: the claim gave fence %" PRIu64 ", not 1..2^63-1", cl->job,
                          c->server, fence);
    }
    cl->outcome = DLOCK__CLAIM_YOURS;
    cl->fence = fence;
    cl->start_ms = start;
    if (!cl->manual) cl->claimed_tick_ms = cl->tick_ms;
    break;
  case 3:
    cl->outcome = DLOCK__CLAIM_PAUSED;
    break;
  case 4:
    cl->outcome = DLOCK__CLAIM_NONE;
    break;
  case 0:
    cl->outcome = DLOCK__CLAIM_TAKEN;
    claimed_by(c, full, cl);
    break;
  case 2:
    cl->outcome = DLOCK__CLAIM_BUSY;
    claimed_by(c, full, cl);
    break;
  case -1:
    cl->outcome = DLOCK__CLAIM_AHEAD;
    cl->server_now_ms = cl->tick_ms - skew;
    break;
  default:
    return dlock__error(DLOCK_EPROTO, "job '%s' on %s: the claim answered outcome %d", cl->job, c->server, outcome);
  }
  return 0;
}

static int pg_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours) {
  *lock_was_ours = 0;
  dlock__pg *pg = pgc(c);
  char full[FULL_MAX];
  full_name(c, cl->job, full);
  if (strlen(full) > DLOCK__PG_NAME_MAX) return dlock__pg_sched_finish(pg, full, cl->token, rec, cl->history_len);
  /* The job lock: kept until lock_at_least_for after the start, ended
   * otherwise; ours only while it has not run out. Twice-safe: a second run
   * sets the same end (or finds it past, answering "not ours" below). */
  /* A fixed-delay job's row keeps the end of its last run (the database
   * clock) in 'tick': the next run is due 'delay' after it. */
  char sql[900], atleast[24];
  snprintf(atleast, sizeof atleast, "%" PRId64, cl->at_least_ms);
  snprintf(sql, sizeof sql,
           "UPDATE \"%s\".sched_ticks s SET lock_expires = CASE WHEN o.live THEN least(s.lock_expires, "
           "greatest(clock_timestamp(), to_timestamp((s.start_ms + $3::bigint) / 1000.0))) ELSE s.lock_expires END, "
           "tick = CASE WHEN $4::boolean THEN floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint "
           "ELSE s.tick END "
           "FROM (SELECT lock_expires > clock_timestamp() AS live FROM \"%s\".sched_ticks WHERE job = $1) o "
           "WHERE s.job = $1 AND s.run_token = $2 RETURNING o.live",
           pg->schema, pg->schema);
  const char *vals[4] = {full, cl->token, atleast, cl->delay_ms ? "true" : "false"};
  PGresult *r = NULL;
  int resent = 0;
  int rc = dlock__pg_run(pg, sql, 4, vals, 0, 1, &r, &resent, NULL);
  if (rc) {
    dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  /* A resent statement may find the lock ended by its first run. */
  *lock_was_ours = (PQntuples(r) > 0 && PQgetvalue(r, 0, 0)[0] == 't') || resent;
  PQclear(r);
  /* The history (its function also ends a job lock it still finds ours:
   * after the update above that is only one kept for lock_at_least_for, so
   * the lock is shortened only when at_least is 0). */
  if (cl->at_least_ms > 0) {
    /* Record without touching the lock: the function ends it, so write the
     * history row ourselves. */
    char hs[900], f[24], s[24], st[24], d[24], keep[24];
    snprintf(f, sizeof f, "%" PRIu64, rec->fence);
    snprintf(s, sizeof s, "%" PRId64, rec->scheduled_unix_ms);
    snprintf(st, sizeof st, "%" PRId64, rec->start_unix_ms);
    snprintf(d, sizeof d, "%" PRId64, rec->duration_ms);
    snprintf(keep, sizeof keep, "%d", cl->history_len > 0 ? cl->history_len : 100);
    snprintf(hs, sizeof hs,
             "WITH ins AS (INSERT INTO \"%s\".sched_runs (job, run_token, node, fence, scheduled_ms, start_ms, "
             "duration_ms, outcome) VALUES ($1, $2, $3, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8) "
             "ON CONFLICT (job, run_token) DO NOTHING RETURNING id) "
             "DELETE FROM \"%s\".sched_runs x WHERE x.job = $1 AND x.id <= (SELECT y.id FROM \"%s\".sched_runs y "
             "WHERE y.job = $1 ORDER BY y.id DESC OFFSET greatest($9::int - 1, 0) LIMIT 1)",
             pg->schema, pg->schema, pg->schema);
    const char *hv[9] = {full, cl->token, rec->node, f, s, st, d, rec->outcome, keep};
    r = NULL;
    rc = dlock__pg_run(pg, hs, 9, hv, 0, 1, &r, NULL, NULL);
    PQclear(r);
    if (rc) dlock__error_prefix("job '%s': ", cl->job);
    return rc;
  }
  rc = dlock__pg_sched_finish(pg, full, cl->token, rec, cl->history_len);
  if (rc) dlock__error_prefix("job '%s': ", cl->job);
  return rc;
}

static void pg_sched_undo(dlock_client *c, const dlock__claim *cl) {
  dlock__pg *pg = pgc(c);
  char full[FULL_MAX];
  full_name(c, cl->job, full);
  char sql[300];
  snprintf(sql, sizeof sql,
           "UPDATE \"%s\".sched_ticks SET lock_expires = least(lock_expires, clock_timestamp()) "
           "WHERE job = $1 AND run_token = $2",
           pg->schema);
  const char *vals[2] = {full, cl->token};
  PGresult *r = NULL;
  if (dlock__pg_run(pg, sql, 2, vals, 0, 1, &r, NULL, NULL) == 0) PQclear(r);
  dlock__error_clear();
}

static int pg_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max) {
  char full[FULL_MAX];
  full_name(c, job, full);
  /* The core hands zeroed full records; the module reads their size. */
  for (int i = 0; i < max; i++) dlock_run_record_init(&out[i]);
  return dlock__pg_sched_history(pgc(c), full, out, max);
}

static int pg_prune(dlock_client *c, int64_t older_than_ms, int64_t *pruned) {
  return dlock__pg_prune(pgc(c), older_than_ms, DLOCK_PRUNE_BATCH, pruned);
}

static int pg_query(dlock_client *c, int what, int node, void *out, size_t len) {
  (void)node;
  return what == DLOCK__Q_TOPOLOGY_WARNING ? pg_topology_warning(c, out, len) : DLOCK__QUERY_NOT_OFFERED;
}

static const dlock__admin_ops pg_admin = {
    .info = pg_info,
    .holders = pg_holders,
    .list = pg_list,
    .force_release = pg_force_release,
    .check = pg_check,
    .setup = pg_setup,
    .prune = pg_prune,
    .watch_open = pg_watch_open,
    .watch_add = pg_watch_add,
    .watch_close = pg_watch_close,
};

static const dlock__guard_ops pg_guard = {.check = pg_guard_check};

/* A job's state (pg_jobs.c). */
static int pg_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id) {
  char full[FULL_MAX];
  full_name(c, job, full);
  int rc = dlock__pg_job_set(pgc(c), full, op, by, reason, id);
  if (rc < 0) dlock__error_prefix("on %s: ", c->server);
  return rc;
}

static int pg_job_get(dlock_client *c, const char *job, dlock_job_state *out) {
  char full[FULL_MAX];
  full_name(c, job, full);
  return dlock__pg_job_get(pgc(c), full, out);
}

static int pg_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  return list_prefixed(c, pattern, fn, arg, dlock__pg_job_list);
}

static int pg_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle) {
  char full[FULL_MAX];
  full_name(c, job, full);
  return dlock__pg_job_watch_add(pgc(c), full, wake, arg, dlock_mono_now() + c->command_timeout_ms, handle);
}

static void pg_job_unwatch(dlock_client *c, void *handle) { dlock__pg_job_watch_remove(pgc(c), handle); }

static const dlock__sched_ops pg_sched = {
    .claim = pg_sched_claim,
    .finish = pg_sched_finish,
    .undo = pg_sched_undo,
    .history = pg_sched_history,
    .job_set = pg_job_set,
    .job_get = pg_job_get,
    .job_list = pg_job_list,
    .job_watch = pg_job_watch,
    .job_unwatch = pg_job_unwatch,
};

/* Both modes' required table; advisory mode has no scheduler. */
#define PG_REQUIRED_OPS                                                                                              \
  .name = "postgres",                                                                                                \
  .unreachable = "PostgreSQL could not be reached in time to renew the lease or check the session",                  \
  .redact = pg_redact, .open = pg_open, .close = pg_close, .ping = pg_ping, .query = pg_query,                       \
  .lock_new = pg_lock_new, .lock_free = pg_lock_free, .acquire = pg_acquire, .undo = pg_undo, .release = pg_release, \
  .extend = pg_extend, .renew = pg_renew, .held = pg_held, .admin = &pg_admin, .guard = &pg_guard

extern const struct dlock__election_ops dlock__pg_election_ops; /* election.c */

const dlock__backend_ops dlock__pg_ops = {PG_REQUIRED_OPS, .sched = &pg_sched, .election = &dlock__pg_election_ops};
static const dlock__backend_ops pg_advisory_ops = {PG_REQUIRED_OPS};
