/*
 * backend.c - the ZooKeeper backend's table of operations (backend.h): the
 * seam's calls mapped onto the zk module (zk.h). One dlock__zk session per
 * client (c->be), one dlock__zk_hold per handle (m->be). Holds live as long
 * as the session: the watchdog's renew() only reads the session's validity,
 * and a session event pokes the watchdog so that a SUSPENDED or LOST session
 * is looked at at once. See docs/zookeeper.md, "Wiring".
 */
#include <fnmatch.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "zk/zk.h"

/* Per client: the session, and the scheduler's job locks held between a
 * claim and its finish (keyed by the run's token). */
typedef struct zk_run {
  struct zk_run *next;
  char token[DLOCK__TOKEN_HEX + 1];
  dlock__zk_hold hold;
} zk_run;

/* A read-write lock's node held by this client, with how many holds of
 * its handles stand on it: a thread that holds either side takes the read
 * side at once (core/rwlock.c) by sharing that hold's node, which goes when
 * the last of them is released. (A node of its own would queue behind a
 * waiting writer, and a writer queued between the two would get in while
 * the second read hold lasts.) */
typedef struct zk_shared {
  struct zk_shared *next;
  char token[DLOCK__TOKEN_HEX + 1]; /* the token of the hold that created it */
  char *node_path, *lock_path;
  uint64_t fence;
  int refs;
} zk_shared;

/* The job watches set by this client's schedulers (zk/sched.c's handles),
 * freed with the client, once its session's threads ended. */
typedef struct zk_jw {
  struct zk_jw *next;
  void *h;
} zk_jw;

typedef struct zk_client {
  dlock__zk *z;
  pthread_mutex_t mu; /* guards runs, shared and jws */
  zk_run *runs;
  zk_shared *shared;
  zk_jw *jws;
} zk_client;

/* Per handle. */
typedef struct zk_lock {
  dlock__zk_hold hold;
  zk_shared *shared; /* read-write locks: the node's entry */
} zk_lock;

#define ZC(c) ((zk_client *)(c)->be)
#define ZZ(c) (ZC(c)->z)
#define ZL(m) ((zk_lock *)(m)->be)

#define TICKS_KEPT 16

/* ---- Client ---- */

static void on_event(dlock__zk *z, dlock__zk_event ev, dlock_lost_reason reason, void *arg) {
  (void)z, (void)ev, (void)reason;
  dlock_client *c = arg;
  if (!atomic_load(&c->closing)) dlock__watchdog_poke(c);
}

static int zk_open(dlock_client *c, const dlock_client_options *o, const char *url) {
  c->caps = DLOCK__CAP_SESSION | DLOCK__CAP_SEMAPHORE | DLOCK__CAP_RWLOCK;
  if (!url) return dlock__error(DLOCK_EINVAL, "the ZooKeeper backend needs a zk:// URL (redlock_urls are Redis only)");
  char shown[512];
  dlock__zk_url_redact(url, shown, sizeof shown);
  if (c->prefix && *c->prefix)
    return dlock__error(DLOCK_EINVAL,
                        "key_prefix ('%.*s') is not used with ZooKeeper: put the namespace in the "
                        "URL's path instead (zk://host:2181/%.*s), '%s' has its own",
                        (int)(c->prefix_len ? c->prefix_len - 1 : 0), c->prefix,
                        (int)(c->prefix_len ? c->prefix_len - 1 : 0), c->prefix, shown);
  if (o->username || o->password)
    return dlock__error(DLOCK_EINVAL,
                        "username/password given for the ZooKeeper URL '%s': ZooKeeper takes "
                        "digest credentials in the URL (?digest=user:pass)",
                        shown);
  if (o->tls_ca_file || o->tls_cert_file || o->tls_key_file || o->tls_server_name || o->tls_skip_verify)
    return dlock__error(DLOCK_EINVAL,
                        "TLS options given for the ZooKeeper URL '%s': dlock speaks to ZooKeeper "
                        "without TLS only",
                        shown);
  if (o->wait_replicas || o->wait_timeout_ms)
    return dlock__error(DLOCK_EINVAL,
                        "wait_replicas/wait_timeout_ms given for the ZooKeeper URL '%s': they are "
                        "Redis options (ZooKeeper writes are acknowledged by a quorum already)",
                        shown);
  if (o->connect_timeout_ms || o->command_timeout_ms)
    return dlock__error(DLOCK_EINVAL,
                        "connect_timeout_ms/command_timeout_ms given for the ZooKeeper URL '%s': "
                        "give them in the URL (?connect_timeout=5s&session_timeout=10s)",
                        shown);
  dlock__zk_url u;
  int rc = dlock__zk_url_parse(url, &u);
  if (rc) return rc;
  int connect_ms = u.connect_timeout_ms;
  dlock__zk_url_clear(&u);

  zk_client *zc = calloc(1, sizeof *zc);
  if (!zc) return dlock__error(DLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&zc->mu, NULL);
  c->be = zc;
  if ((rc = dlock__zk_connect(url, &zc->z))) return rc;
  snprintf(c->server, sizeof c->server, "%s", dlock__zk_server(zc->z));
  c->command_timeout_ms = connect_ms;
  dlock__zk_on_event(zc->z, on_event, c);
  return 0;
}

static void zk_close(dlock_client *c) {
  zk_client *zc = ZC(c);
  if (!zc) return;
  if (zc->z) {
    dlock__zk_on_event(zc->z, NULL, NULL);
    /* Job locks still held end with the session. */
    dlock__zk_free(zc->z);
  }
  for (zk_run *r = zc->runs, *next; r; r = next) {
    next = r->next;
    dlock__zk_hold_clear(&r->hold);
    free(r);
  }
  for (zk_shared *e = zc->shared, *next; e; e = next) {
    next = e->next;
    free(e->node_path);
    free(e->lock_path);
    free(e);
  }
  for (zk_jw *w = zc->jws, *next; w; w = next) {
    next = w->next;
    dlock__zk_job_watch_free(w->h);
    free(w);
  }
  pthread_mutex_destroy(&zc->mu);
  free(zc);
  c->be = NULL;
}

static int zk_ping(dlock_client *c) { return dlock__zk_ping(ZZ(c)); }

/* ---- Lock handles ---- */

static int rw_unshare(dlock_client *c, zk_lock *l);

static int zk_lock_new(dlock_mutex *m) {
  int rc = dlock__zk_check_name("lock name", m->name);
  if (rc) return rc;
  if (!(m->be = calloc(1, sizeof(zk_lock)))) return dlock__error(DLOCK_ENOMEM, "out of memory");
  return 0;
}

static void zk_lock_free(dlock_mutex *m) {
  if (!m->be) return;
  rw_unshare(m->client, ZL(m));
  dlock__zk_hold_clear(&ZL(m)->hold);
  free(m->be);
  m->be = NULL;
}

/* Drop this handle's share of a read-write lock's node: 1 when it was the
 * last (the node is to be deleted), 0 when another hold still stands on it. */
static int rw_unshare(dlock_client *c, zk_lock *l) {
  zk_client *zc = ZC(c);
  zk_shared *e = l->shared;
  if (!e) return 1;
  l->shared = NULL;
  pthread_mutex_lock(&zc->mu);
  int last = --e->refs == 0;
  if (last) {
    zk_shared **p = &zc->shared;
    while (*p && *p != e) p = &(*p)->next;
    if (*p) *p = e->next;
  }
  pthread_mutex_unlock(&zc->mu);
  if (last) {
    free(e->node_path);
    free(e->lock_path);
    free(e);
  }
  return last;
}

/* A read hold in the shadow of this thread's other hold 'token' of the same
 * name: share its node. 1 shared, 0 not found (that hold ended meanwhile). */
static int rw_share(dlock_mutex *m, const char *token) {
  zk_client *zc = ZC(m->client);
  zk_lock *l = ZL(m);
  int found = 0;
  pthread_mutex_lock(&zc->mu);
  for (zk_shared *e = zc->shared; e && !found; e = e->next) {
    if (strcmp(e->token, token)) continue;
    l->hold.node_path = strdup(e->node_path);
    l->hold.lock_path = strdup(e->lock_path);
    l->hold.fence = e->fence;
    if (!l->hold.node_path || !l->hold.lock_path) break;
    e->refs++;
    l->shared = e;
    found = 1;
  }
  pthread_mutex_unlock(&zc->mu);
  if (!found) dlock__zk_hold_clear(&l->hold);
  return found;
}

static int register_shared(dlock_mutex *m) {
  zk_client *zc = ZC(m->client);
  zk_lock *l = ZL(m);
  zk_shared *e = calloc(1, sizeof *e);
  if (!e || !(e->node_path = strdup(l->hold.node_path)) || !(e->lock_path = strdup(l->hold.lock_path))) {
    if (e) free(e->node_path);
    free(e);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  snprintf(e->token, sizeof e->token, "%s", m->token);
  e->fence = l->hold.fence;
  e->refs = 1;
  pthread_mutex_lock(&zc->mu);
  e->next = zc->shared;
  zc->shared = e;
  pthread_mutex_unlock(&zc->mu);
  l->shared = e;
  return 0;
}

static int zk_acquire(dlock_mutex *m, int64_t lease_ms, int64_t wait_ms, dlock_mono_ms deadline, dlock__grant *out) {
  (void)lease_ms; /* the session's timeout is the "lease" */
  dlock__zk *z = ZZ(m->client);
  zk_lock *l = ZL(m);
  dlock__zk_hold_clear(&l->hold);
  dlock_mono_ms start = dlock_mono_now();
  int64_t wait = wait_ms;
  if (wait_ms > 0 && deadline != INT64_MAX) {
    wait = deadline - start;
    if (wait < 1) wait = 1;
  }
  const atomic_int *cancel = dlock__mutex_cancel_flag(m);
  int rc;
  char own[DLOCK__TOKEN_HEX + 1];
  if (m->kind == DLOCK__KIND_SEMAPHORE) {
    rc = dlock__zk_sem_acquire(z, m->name, m->permits, m->owner_info, wait, cancel, &l->hold);
  } else if (m->kind == DLOCK__KIND_MUTEX) {
    rc = dlock__zk_acquire_side(z, m->name, m->election ? DLOCK__ZK_LATCH : DLOCK__ZK_MUTEX, m->owner_info, wait,
                                cancel, &l->hold);
  } else if (dlock__rw_own_token(m, own) && rw_share(m, own)) {
    /* This thread holds the name already: its node is ours too. */
    int64_t session;
    dlock_mono_ms valid_until;
    dlock_lost_reason lost = dlock__zk_session_view(z, &session, &valid_until);
    int held = lost == DLOCK_LOST_NONE
                   ? dlock__zk_is_held(z, &(dlock__zk_hold){.node_path = l->hold.node_path, .session = session})
                   : 0;
    if (held != 1) {
      rw_unshare(m->client, l);
      dlock__zk_hold_clear(&l->hold);
      return held < 0 ? held
                      : dlock__error(DLOCK_ELOST, "read lock '%s' on %s: the hold it would share ended", m->name,
                                     m->client->server);
    }
    l->hold.session = session;
    l->hold.valid_until = valid_until;
    rc = 0;
  } else {
    rc = dlock__zk_acquire_side(z, m->name, m->kind == DLOCK__KIND_READ ? DLOCK__ZK_READ : DLOCK__ZK_WRITE,
                                m->owner_info, wait, cancel, &l->hold);
    if (!rc && (rc = register_shared(m))) {
      (void)dlock__zk_release(z, &l->hold);
      dlock__zk_hold_clear(&l->hold);
    }
  }
  if (rc) return rc;
  dlock__zk_watch_held(z, &l->hold); /* a forced release is seen at once */
  out->fence = l->hold.fence;
  out->lease_ms = dlock__zk_session_timeout_ms(z);
  out->start = start;
  out->valid_until = l->hold.valid_until; /* the deadline of the session that holds it */
  return 0;
}

static void zk_wake(dlock_mutex *m) { dlock__zk_wake(ZZ(m->client)); }

static void zk_undo(dlock_mutex *m) {
  zk_lock *l = ZL(m);
  if (rw_unshare(m->client, l) && l->hold.node_path) (void)dlock__zk_release(ZZ(m->client), &l->hold);
  dlock__zk_hold_clear(&l->hold);
}

static int zk_release(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost) {
  (void)valid_until;
  dlock__zk *z = ZZ(m->client);
  zk_lock *l = ZL(m);
  int rc;
  int last = rw_unshare(m->client, l);
  if (!l->hold.node_path) {
    rc = dlock__error(DLOCK_ENOTHELD, "no lock node is recorded for this hold");
  } else if (!last) {
    /* Another hold of this thread stands on the node: it stays until that
     * one's release. */
    rc = lost == DLOCK_LOST_NONE
             ? 0
             : dlock__error(DLOCK_ENOTHELD, "the hold was lost before (%s)", dlock_lost_reason_str(lost));
  } else if (l->hold.session != dlock__zk_session_id(z)) {
    rc = dlock__error(DLOCK_ENOTHELD,
                      "the ZooKeeper session that held %s has ended (%s); its lock node went "
                      "with it",
                      l->hold.node_path, dlock_lost_reason_str(lost != DLOCK_LOST_NONE ? lost : DLOCK_LOST_EXPIRED));
  } else {
    rc = dlock__zk_release(z, &l->hold);
    /* A hold already reported lost (at its deadline, the session still alive)
     * stays lost: its node is deleted, but the answer is the loss, as on Redis. */
    if (rc == 0 && lost != DLOCK_LOST_NONE)
      rc = dlock__error(DLOCK_ENOTHELD, "the hold was lost before (%s); its lock node %s is deleted now",
                        dlock_lost_reason_str(lost), l->hold.node_path);
    else if (rc == DLOCK_ENOTHELD && lost != DLOCK_LOST_NONE)
      dlock__error_prefix("the hold was lost before (%s): ", dlock_lost_reason_str(lost));
    else if (rc == DLOCK_EUNKNOWN)
      dlock__error_prefix("the lock node may still exist until the session ends (%d ms session timeout): ",
                          dlock__zk_session_timeout_ms(z));
  }
  dlock__zk_hold_clear(&l->hold);
  return rc;
}

static int zk_extend(dlock_mutex *m, const char *token, int64_t lease_ms, dlock_mono_ms *sent,
                     dlock_lost_reason *lost) {
  (void)token, (void)lease_ms, (void)sent, (void)lost; /* the core refuses before calling */
  return dlock__error(DLOCK_EINVAL,
                      "ZooKeeper holds live as long as the session; there is no lease to extend "
                      "(%s)",
                      m->client->server);
}

/* A hold is valid as long as its session, whose validity the zk module
 * keeps moving while the connection lives, and its node exists. */
static void zk_renew(dlock_client *c, dlock__renewal *r, size_t n, dlock_mono_ms limit) {
  dlock__zk *z = ZZ(c);
  dlock_mono_ms now = dlock_mono_now();
  int64_t session;
  dlock_mono_ms valid_until;
  /* One look at the session: its id, its deadline and whether it is over
   * belong together (a reconnect may replace it between separate reads). */
  dlock_lost_reason lost = dlock__zk_session_view(z, &session, &valid_until);
  /* While disconnected a read would wait for the reconnect and hold up the
   * watchdog: the session's deadline, which no longer moves, decides. */
  int uncertain = dlock__zk_uncertain(z);
  for (size_t i = 0; i < n; i++) {
    zk_lock *l = ZL(r[i].m);
    r[i].sent = now;
    if (lost != DLOCK_LOST_NONE) {
      r[i].status = DLOCK_ELOST;
      r[i].lost = lost;
    } else if (l->hold.session != session) { /* a new session replaced the one that held it */
      r[i].status = DLOCK_ELOST;
      r[i].lost = DLOCK_LOST_EXPIRED;
    } else {
      /* One read per hold: the session keeps the node, but a force release
       * (dlock release --force) deletes it, and the holder must learn. */
      int held = !uncertain && dlock_mono_now() < limit ? dlock__zk_is_held_until(z, &l->hold, limit) : 1;
      if (held == 0) {
        r[i].status = DLOCK_ELOST;
        r[i].lost = DLOCK_LOST_DELETED;
      } else if (held < 0) {
        r[i].status = held; /* not known this time: the session's deadline stands */
      } else {
        r[i].status = 0;
        r[i].valid_until = valid_until;
      }
    }
  }
}

static int zk_held(dlock_mutex *m, const char *token, int64_t *ttl_ms) {
  (void)token;
  dlock__zk *z = ZZ(m->client);
  zk_lock *l = ZL(m);
  if (ttl_ms) *ttl_ms = 0;
  if (!l->hold.node_path || l->hold.session != dlock__zk_session_id(z)) return 0;
  int rc = dlock__zk_is_held(z, &l->hold);
  if (rc == 1 && ttl_ms) *ttl_ms = -1;
  return rc;
}

/* ---- Admin ---- */

static int zk_info(dlock_client *c, const char *name, dlock_lock_info *out) {
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  dlock__zk_info zi;
  memset(&zi, 0, sizeof zi);
  if ((rc = dlock__zk_info_get(ZZ(c), name, &zi))) return rc;
  out->held = zi.held;
  out->foreign = 0;
  out->ttl_ms = zi.held ? -1 : 0;
  out->fence = zi.fence;
  out->since_unix_ms = zi.since_unix_ms;
  out->waiters = zi.waiters;
  snprintf(out->owner_info, sizeof out->owner_info, "%s", zi.owner_info);
  if (zi.kind == 2) {
    out->rwlock = 1;
    out->readers = zi.readers;
    out->writer = zi.writer;
    out->waiting_writers = zi.waiting_writers;
  } else if (zi.kind == 3) {
    out->permits = zi.permits ? zi.permits : zi.permits_used; /* a limit Curator set is not stored */
    out->permits_used = zi.permits_used;
  }
  return 0;
}

typedef struct list_ctx {
  const char *pattern;
  void (*fn)(const char *, void *);
  void *arg;
  int n;
} list_ctx;

static void list_one(const char *name, void *arg) {
  list_ctx *x = arg;
  if (x->pattern && fnmatch(x->pattern, name, 0) != 0) return;
  x->n++;
  x->fn(name, x->arg);
}

static int zk_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  list_ctx x = {pattern && *pattern ? pattern : NULL, fn, arg, 0};
  int rc = dlock__zk_list(ZZ(c), list_one, &x);
  return rc < 0 ? rc : x.n;
}

static int zk_force_release(dlock_client *c, const char *name, unsigned flags, int *was_held) {
  (void)flags; /* nothing but a lock node is ever deleted: "foreign" has no meaning here */
  int rc = dlock__zk_check_name("lock name", name);
  if (rc) return rc;
  rc = dlock__zk_force_release(ZZ(c), name);
  if (rc < 0) return rc;
  if (was_held) *was_held = rc;
  return 0;
}

static int zk_guard_check(dlock_client *c, const char *resource, uint64_t token, uint64_t *highest) {
  int rc = dlock__zk_check_name("resource name", resource);
  if (rc) return rc;
  return dlock__zk_guard_check(ZZ(c), resource, token, highest);
}

/* ---- Scheduler ---- */

static int job_lock(dlock_client *c, dlock__claim *cl);
static int release_run(dlock_client *c, const char *token);

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int zk_sched_claim(dlock_client *c, dlock__claim *cl) {
  zk_client *zc = ZC(c);
  int rc = dlock__zk_check_name("job name", cl->job);
  if (rc) return rc;
  if (cl->delay_ms)
    return dlock__error(DLOCK_EINVAL,
                        "job '%s': fixed-delay jobs (dlock_sched_every_delay, 'dlock every "
                        "--delay') are not offered by the ZooKeeper backend (%s); use a fixed rate or a cron "
                        "expression",
                        cl->job, c->server);
  uint64_t fence = 0;
  char by[128] = "";
  if (cl->manual) {
    /* The trigger's claim comes after the job lock's: a run that holds it
     * leaves the trigger pending (BUSY). */
    if (!cl->allow_overlap && (rc = job_lock(c, cl)) != 0) return rc < 0 ? rc : 0;
    rc = dlock__zk_job_claim_manual(zc->z, cl->job, cl->token, cl->node, TICKS_KEPT, &fence, &cl->claimed_tick_ms, by,
                                    sizeof by);
    if (rc <= 0) {
      if (!cl->allow_overlap) release_run(c, cl->token);
      cl->outcome = DLOCK__CLAIM_NONE;
      return rc;
    }
    cl->outcome = DLOCK__CLAIM_YOURS;
    cl->fence = fence;
    cl->start_ms = wall_ms();
    return 0;
  }
  /* The job's state: a pause consumes the tick, recorded once as skipped. */
  if ((rc = dlock__zk_job_peek(zc->z, cl->job, cl->why, sizeof cl->why, &cl->trigger_pending))) return rc;
  rc = dlock__zk_sched_claim_paused(zc->z, cl->job, cl->tick_ms, cl->token, cl->node, cl->why[0] ? cl->why : NULL,
                                    cl->ahead_ms, TICKS_KEPT, &fence, by, sizeof by);
  if (rc < 0) return rc;
  if (rc == 0) {
    cl->outcome = DLOCK__CLAIM_TAKEN;
    snprintf(cl->by, sizeof cl->by, "%s", by);
    return 0;
  }
  if (rc == 2) {
    cl->outcome = DLOCK__CLAIM_PAUSED;
    dlock_run_record rec;
    dlock_run_record_init(&rec);
    snprintf(rec.node, sizeof rec.node, "%s", cl->node ? cl->node : "");
    rec.scheduled_unix_ms = cl->tick_ms;
    rec.start_unix_ms = wall_ms();
    rec.duration_ms = -1;
    snprintf(rec.outcome, sizeof rec.outcome, "%.63s", cl->why);
    /* fence 0: the record's name is the tick's own (consumed once). */
    return dlock__zk_sched_finish(zc->z, cl->job, &rec, cl->history_len > 0 ? cl->history_len : 100);
  }
  cl->fence = fence;
  cl->start_ms = wall_ms();
  if (!cl->allow_overlap && (rc = job_lock(c, cl)) != 0) return rc < 0 ? rc : 0;
  cl->outcome = DLOCK__CLAIM_YOURS;
  return 0;
}

/* The job lock keeps runs of one job from overlapping: held by this
 * session from the claim to the finish (or the session's end). 0 taken,
 * 1 BUSY (cl->outcome set), < 0. */
static int job_lock(dlock_client *c, dlock__claim *cl) {
  zk_client *zc = ZC(c);
  zk_run *run = calloc(1, sizeof *run);
  if (!run) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__zk_job_lock_try(zc->z, cl->job, cl->node, &run->hold);
  if (rc == DLOCK_EBUSY) {
    free(run);
    cl->outcome = DLOCK__CLAIM_BUSY;
    snprintf(cl->by, sizeof cl->by, "%s", "a previous run");
    return 1;
  }
  if (rc) {
    free(run);
    return rc; /* EUNKNOWN: a node that may exist ends with the session */
  }
  snprintf(run->token, sizeof run->token, "%s", cl->token);
  pthread_mutex_lock(&zc->mu);
  run->next = zc->runs;
  zc->runs = run;
  pthread_mutex_unlock(&zc->mu);
  return 0;
}

static zk_run *take_run(zk_client *zc, const char *token) {
  pthread_mutex_lock(&zc->mu);
  zk_run **p = &zc->runs;
  while (*p && strcmp((*p)->token, token)) p = &(*p)->next;
  zk_run *r = *p;
  if (r) *p = r->next;
  pthread_mutex_unlock(&zc->mu);
  return r;
}

/* Release the job lock of the run 'token': 1 it was ours and is released, 0 not. */
static int release_run(dlock_client *c, const char *token) {
  zk_client *zc = ZC(c);
  zk_run *r = take_run(zc, token);
  if (!r) return 0;
  int ours = r->hold.session == dlock__zk_session_id(zc->z) && dlock__zk_release(zc->z, &r->hold) == 0;
  dlock__zk_hold_clear(&r->hold);
  free(r);
  return ours;
}

static int zk_sched_finish(dlock_client *c, const dlock__claim *cl, dlock_run_record *rec, int *lock_was_ours) {
  *lock_was_ours = cl->allow_overlap ? 1 : release_run(c, cl->token);
  return dlock__zk_sched_finish(ZZ(c), cl->job, rec, cl->history_len > 0 ? cl->history_len : 100);
}

static void zk_sched_undo(dlock_client *c, const dlock__claim *cl) { (void)release_run(c, cl->token); }

static int zk_sched_history(dlock_client *c, const char *job, dlock_run_record *out, int max) {
  int rc = dlock__zk_check_name("job name", job);
  if (rc) return rc;
  /* The seam hands over full records; the module steps by struct_size. */
  for (int i = 0; i < max; i++) dlock_run_record_init(&out[i]);
  return dlock__zk_sched_history(ZZ(c), job, out, max);
}

static int zk_holders(dlock_client *c, const char *name, void (*fn)(const dlock_holder *, void *), void *arg) {
  return dlock__zk_holders(ZZ(c), name, fn, arg);
}
static int zk_watch_open(dlock_watch *w) { return dlock__zk_watch_open(ZZ(w->client), w); }
static int zk_watch_add(dlock_watch *w, const char *name) { return dlock__zk_watch_add(ZZ(w->client), w, name); }
static void zk_watch_rearm(dlock_watch *w) { dlock__zk_watch_rearm(ZZ(w->client), w); }
static void zk_watch_close(dlock_watch *w) { dlock__zk_watch_close(ZZ(w->client), w); }

static const dlock__admin_ops zk_admin = {
    .info = zk_info,
    .list = zk_list,
    .force_release = zk_force_release,
    .holders = zk_holders,
    .watch_open = zk_watch_open,
    .watch_add = zk_watch_add,
    .watch_close = zk_watch_close,
    .watch_rearm = zk_watch_rearm,
};

static const dlock__guard_ops zk_guard = {.check = zk_guard_check};

/* ---- A job's state (zk/sched.c) ---- */

static int zk_job_set(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *id) {
  return dlock__zk_job_set(ZZ(c), job, op, by, reason, id);
}

static int zk_job_get(dlock_client *c, const char *job, dlock_job_state *out) {
  return dlock__zk_job_get(ZZ(c), job, out);
}

static int zk_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *, void *), void *arg) {
  list_ctx x = {pattern && *pattern ? pattern : NULL, fn, arg, 0};
  int rc = dlock__zk_job_list(ZZ(c), list_one, &x);
  return rc < 0 ? rc : x.n;
}

static int zk_job_watch(dlock_client *c, const char *job, void (*wake)(void *), void *arg, void **handle) {
  zk_client *zc = ZC(c);
  *handle = NULL;
  zk_jw *ref = calloc(1, sizeof *ref);
  if (!ref) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__zk_job_watch(zc->z, job, wake, arg, &ref->h);
  if (rc) {
    free(ref);
    return rc;
  }
  pthread_mutex_lock(&zc->mu);
  ref->next = zc->jws;
  zc->jws = ref;
  pthread_mutex_unlock(&zc->mu);
  *handle = ref->h;
  return 0;
}

static void zk_job_unwatch(dlock_client *c, void *handle) {
  (void)c;
  dlock__zk_job_unwatch(handle);
}

static const dlock__sched_ops zk_sched = {
    .claim = zk_sched_claim,
    .finish = zk_sched_finish,
    .undo = zk_sched_undo,
    .history = zk_sched_history,
    .job_set = zk_job_set,
    .job_get = zk_job_get,
    .job_list = zk_job_list,
    .job_watch = zk_job_watch,
    .job_unwatch = zk_job_unwatch,
};

/* Not offered: an election is in Curator's LeaderLatch layout (lock.c), and
 * a LeaderLatch candidate watches the node ahead of it for its deletion
 * only: a data change there ends its watch (ZooKeeper's watches fire once)
 * and it would miss the leader's end, never to lead. */
static int zk_proclaim(dlock_mutex *m, const char *token, const char *value) {
  (void)token;
  (void)value;
  return dlock__error(DLOCK_EINVAL,
                      "changing a leader's value is not offered on %s: Curator's LeaderLatch "
                      "candidates watch the leader's node and would miss its end after a change to it; resign "
                      "and campaign again with the new value (docs/election.md)",
                      m->client->server);
}

static int zk_evict(dlock_client *c, const char *name, uint64_t epoch, int *evicted) {
  int rc = dlock__zk_check_name("election name", name);
  if (rc) return rc;
  rc = dlock__zk_force_release_fence(ZZ(c), name, epoch);
  if (rc < 0) return rc;
  *evicted = rc;
  return 0;
}

static const struct dlock__election_ops zk_election_ops = {.proclaim = zk_proclaim, .evict = zk_evict};

const dlock__backend_ops dlock__zk_ops = {
    .name = "zookeeper",
    .unreachable = "ZooKeeper could not be reached before the session timeout ran out, so the session (and the "
                   "hold with it) may be gone",
    .redact = dlock__zk_url_redact,
    .open = zk_open,
    .close = zk_close,
    .ping = zk_ping,
    .query = dlock__query_none,
    .lock_new = zk_lock_new,
    .lock_free = zk_lock_free,
    .acquire = zk_acquire,
    .wake = zk_wake,
    .undo = zk_undo,
    .release = zk_release,
    .extend = zk_extend,
    .renew = zk_renew,
    .held = zk_held,
    .admin = &zk_admin,
    .guard = &zk_guard,
    .sched = &zk_sched,
    .election = &zk_election_ops,
};
