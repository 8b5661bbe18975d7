/*
 * pipeline.c - the pipelined release (dlock_mutex_release_async): the
 * release script is queued on the client's pipeline connection and its
 * reply is read later, so that a thread's next acquire does not wait for it.
 *
 * One pipeline connection per client, opened on its own (not from the pool:
 * kept out of the pool while replies are pending, it would make the next
 * acquire wait for the pool when max_connections is 1), with a bounded FIFO
 * of the handles whose replies are pending.
 *
 * A release is corked: appended to the connection's output, not written.
 * The client's next script call for the same server (the next acquire,
 * typically) is then sent on this connection in the same write, and reads
 * the releases' replies before its own (so does any call made while a
 * written release's reply is unread, and one followed by WAIT: on another
 * connection it could run before the release): a cycle of acquire + pipelined
 * release costs one round trip, one write and one wake-up of Redis, not
 * two (docs/PERFORMANCE.md). When no such call follows, the flusher thread
 * writes the corked releases CORK_MS after the first of them (a release is
 * late by at most about twice that), and anything that waits for a reply
 * (dlock_mutex_release_result(), the next acquire on the same handle, the
 * client's close) writes them first.
 *
 * A handle's outcome is read at the latest by dlock_mutex_release_result(),
 * its next acquire, its free, or the client's close. A reply that cannot be
 * read (connection failed, timeout) makes every pending outcome
 * DLOCK_EUNKNOWN: a release whose reply was lost is never sent again.
 * Cluster and Redlock release synchronously (a slot can move; a quorum).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

#define PIPE_MAX 64
/* How long a corked release may wait for a command to ride with. */
#define CORK_MS 1
/* The flusher sleeps without a timeout after this long without a cork. */
#define FLUSHER_IDLE_MS 200

typedef struct pending {
  dlock_mutex *m;
  dlock_mono_ms valid_until;
  dlock_lost_reason lost;
  uint64_t failovers_at_acquire; /* the hold's, for a loss at a failover */
  /* The token released: another thread may acquire the handle (a new
   * token) before this reply is read. */
  char token[DLOCK__TOKEN_HEX + 1];
} pending;

struct dlock__pipeline {
  pthread_mutex_t mu;
  dlock_client *client;
  dlock__node *node;
  dlock__conn *conn;
  pending q[PIPE_MAX];
  /* Atomic: dlock__pipeline_exec() looks at n without the lock. */
  int head;
  atomic_int n;
  /* The last 'corked' of the n pending releases are appended to conn's
   * output but not written yet; the first of them since 'corked_at'.
   * Atomic: dlock__pipeline_exec() looks without the lock. */
  atomic_int corked;
  dlock_mono_ms corked_at, last_cork;
  /* The flusher thread (started with the first cork). */
  pthread_t flusher;
  pthread_cond_t cv;
  int flusher_started, flusher_asleep, stop;
};

static void *flusher_main(void *arg);

/* The pipeline whose lock this thread holds: a release that must run again
 * (NOSCRIPT) while we read replies goes through the pool, not back here. */
static _Thread_local dlock__pipeline *locked_here;

static void lock(dlock__pipeline *p) {
  pthread_mutex_lock(&p->mu);
  locked_here = p;
}

static void unlock(dlock__pipeline *p) {
  locked_here = NULL;
  pthread_mutex_unlock(&p->mu);
}

/* The client's pipeline, made (with its flusher thread) on first use. NULL
 * when out of memory or no thread could be started: the caller releases
 * synchronously instead. */
static dlock__pipeline *get(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  dlock__pipeline *p = atomic_load(&dlock__rc(c)->pipeline);
  if (!p && (p = calloc(1, sizeof *p))) {
    pthread_mutex_init(&p->mu, NULL);
    p->client = c;
    if (dlock__cond_init(&p->cv) != 0) {
      pthread_mutex_destroy(&p->mu);
      free(p);
      p = NULL;
    } else if (pthread_create(&p->flusher, NULL, flusher_main, p) != 0) {
      pthread_cond_destroy(&p->cv);
      pthread_mutex_destroy(&p->mu);
      free(p);
      p = NULL;
    } else {
      p->flusher_started = 1;
      atomic_store(&dlock__rc(c)->pipeline, p);
    }
  }
  pthread_mutex_unlock(&c->lazy_mu);
  return p;
}

/* The release script of the handle's kind, as dlock__redis_release sends it:
 * a semaphore's permit or a read-write lock's hold is not a mutex's key. */
static dlock__script_id release_script(const dlock_mutex *m) {
  return dlock__redis_kind_of(m)->script[DLOCK__OP_RELEASE];
}

/* The release script's answer 'r' for 'e', as dlock__redis_release says it
 * (no resend here: the reply came). */
static void deliver(const pending *e, const dlock__reply *r) {
  dlock_mutex *m = e->m;
  const char *key = dlock__rm(m)->keys.key[DLOCK__K_LOCK];
  char msg[512];
  int rc = 0;
  msg[0] = '\0';
  if (r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    snprintf(msg, sizeof msg,
             "release script failed on key '%s': %s; release not confirmed, the key expires "
             "with its lease",
             key, r->str);
  } else if (r->type != DLOCK__REPLY_INTEGER) {
    rc = DLOCK_EPROTO;
    snprintf(msg, sizeof msg, "release script gave an unexpected reply for key '%s'", key);
  } else if (r->integer == -2) {
    rc = DLOCK_ENOTHELD;
    snprintf(msg, sizeof msg, "another client had deleted the key with a forced release; nothing was deleted");
  } else if ((r->integer == 0 || r->integer == -1) && e->lost == DLOCK_LOST_NONE &&
             dlock__failovers(dlock__topo(m->client), key, dlock__rm(m)->keys.len[DLOCK__K_LOCK]) !=
                 e->failovers_at_acquire) {
    rc = DLOCK_ENOTHELD; /* issue 22 item 6: as dlock__redis_release_token says it */
    snprintf(msg, sizeof msg, "%s", dlock__release_failover_msg(r->integer));
  } else if (r->integer == 0 && m->kind == DLOCK__KIND_SEMAPHORE) {
    rc = DLOCK_ENOTHELD;
    snprintf(msg, sizeof msg, "our permit was gone or its lease had run out; no permit was touched");
  } else if (r->integer == 0) {
    rc = DLOCK_ENOTHELD;
    snprintf(msg, sizeof msg, "the key was gone (the lease had expired); nothing was deleted");
  } else if (r->integer < 0) {
    rc = DLOCK_ENOTHELD;
    snprintf(msg, sizeof msg, "another owner holds it now (our lease had expired); their key was left untouched");
  } else if (e->lost != DLOCK_LOST_NONE) {
    rc = DLOCK_ENOTHELD;
    snprintf(msg, sizeof msg,
             "the hold had been lost before this release (%s); the key still held our token "
             "and was deleted",
             dlock_lost_reason_str(e->lost));
  }
  dlock__mutex_release_done(m, rc, msg);
}

/* The connection failed: every pending outcome is unknown, except that of
 * corked releases when 'unsent' says none of them left (DLOCK_EIO: not
 * sent); close it. */
static void fail_all(dlock__pipeline *p, const char *why, int unsent) {
  char msg[512], never[512];
  snprintf(msg, sizeof msg,
           "the release was sent, but its reply was lost (%s); it is not sent again: if it did "
           "not run, the key expires with its lease",
           why);
  snprintf(never, sizeof never, "the release was never sent (%s); the key expires with its lease", why);
  int written = p->n - (unsent ? atomic_load(&p->corked) : 0);
  for (; p->n > 0; atomic_fetch_sub(&p->n, 1), p->head = (p->head + 1) % PIPE_MAX, written--)
    dlock__mutex_release_done(p->q[p->head].m, written > 0 ? DLOCK_EUNKNOWN : DLOCK_EIO, written > 0 ? msg : never);
  if (p->conn) {
    atomic_store(&p->node->suspect, 1); /* Sentinel: resolve the master again */
    dlock__conn_close(p->conn);
  }
  p->conn = NULL;
  p->node = NULL;
  atomic_store(&p->corked, 0);
}

/* Write the output (the corked releases, and what rides behind them). 0,
 * or -1 when the connection failed (every pending outcome is then unknown:
 * part of the output may have left).
 * Caller holds p->mu. */
static int write_out(dlock_client *c, dlock__pipeline *p) {
  if (dlock__conn_flush(p->conn, dlock_mono_now() + c->command_timeout_ms) != 0) {
    fail_all(p, dlock_last_error(), 0);
    return -1;
  }
  atomic_store(&p->corked, 0);
  return 0;
}

static int uncork(dlock_client *c, dlock__pipeline *p) { return atomic_load(&p->corked) ? write_out(c, p) : 0; }

/* Writes corked releases that waited CORK_MS for a command to ride with. */
static void *flusher_main(void *arg) {
  dlock__pipeline *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    dlock_mono_ms now = dlock_mono_now(), until;
    if (atomic_load(&p->corked)) {
      until = p->corked_at + CORK_MS;
      if (now >= until) {
        uncork(p->client, p);
        continue;
      }
    } else if (now < p->last_cork + FLUSHER_IDLE_MS) {
      /* Back-to-back cycles: a cork is likely soon; look again then rather
       * than make every cork wake us. */
      until = now + CORK_MS;
    } else {
      p->flusher_asleep = 1;
      pthread_cond_wait(&p->cv, &p->mu);
      p->flusher_asleep = 0;
      continue;
    }
    struct timespec ts;
    dlock__deadline_timespec(until, &ts);
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Read the oldest pending reply: waiting up to the command timeout
 * ('wait'), or only if it has arrived. 1 read, 0 not there yet, -1 failed
 * (fail_all done). Caller holds p->mu. */
static int read_one(dlock_client *c, dlock__pipeline *p, int wait) {
  dlock__reply *r = NULL;
  if (wait && uncork(c, p) < 0) return -1;
  int rc = wait ? dlock__conn_read(p->conn, dlock_mono_now() + c->command_timeout_ms, &r)
                : dlock__conn_try_read(p->conn, &r);
  if (rc) {
    fail_all(p, dlock_last_error(), 1);
    return -1;
  }
  if (!r) return 0;
  const pending *e = &p->q[p->head];
  if (dlock__reply_is_noscript(r)) {
    /* It did not run (the script cache was flushed): run it now, at once. */
    dlock__reply_free(r);
    int out = dlock__redis_release_token(e->m, e->token, e->valid_until, e->lost, e->failovers_at_acquire, NULL);
    dlock__mutex_release_done(e->m, out, out ? dlock_last_error() : "");
  } else {
    deliver(e, r);
    dlock__reply_free(r);
  }
  p->head = (p->head + 1) % PIPE_MAX;
  p->n--;
  return 1;
}

static int drain(dlock_client *c, dlock__pipeline *p) {
  while (p->n > 0)
    if (read_one(c, p, 1) < 0) return -1;
  return 0;
}

/* The release scripts into the server's cache, on a new pipeline
 * connection: a corked EVALSHA that answered NOSCRIPT would run again only
 * after the calls that rode behind it (a fresh or restarted server, a
 * failover). A refusal (ACL without SCRIPT) is ignored: EVALSHA's NOSCRIPT
 * path remains. 0, or a status when the connection failed. */
static int load_release_scripts(dlock_client *c, dlock__conn *conn) {
  static const dlock__script_id ids[] = {DLOCK__SCRIPT_RELEASE, DLOCK__SCRIPT_SEM_RELEASE, DLOCK__SCRIPT_RW_RELEASE};
  enum { N = sizeof ids / sizeof ids[0] };
  const char *argv[N][3];
  size_t lens[N][3];
  int rc = 0;
  for (int i = 0; i < N && !rc; i++) {
    argv[i][0] = "SCRIPT";
    argv[i][1] = "LOAD";
    argv[i][2] = dlock__script_text(ids[i]);
    lens[i][0] = 6;
    lens[i][1] = 4;
    lens[i][2] = strlen(argv[i][2]);
    dlock__cmd cmd = {3, argv[i], lens[i]};
    rc = dlock__conn_append(conn, &cmd);
  }
  dlock_mono_ms deadline = dlock_mono_now() + c->command_timeout_ms;
  if (!rc) rc = dlock__conn_flush(conn, deadline);
  for (int i = 0; i < N && !rc; i++) {
    dlock__reply *r = NULL;
    rc = dlock__conn_read(conn, deadline, &r);
    dlock__reply_free(r);
  }
  return rc;
}

int dlock__redis_release_async(dlock_mutex *m, dlock_mono_ms valid_until, dlock_lost_reason lost) {
  dlock_client *c = m->client;
  dlock__topology *t = dlock__topo(c);
  dlock__pipeline *p = t->exec || t->quorum_run ? NULL : get(c);
  if (!p) { /* synchronous; the outcome waits for _result all the same */
    int out = dlock__redis_release(m, valid_until, lost);
    dlock__mutex_release_done(m, out, out ? dlock_last_error() : "");
    return 0;
  }
  const dlock__lock_keys *k = &dlock__rm(m)->keys;
  int rc = 0;
  dlock__node *node =
      dlock__route(c, k->key[DLOCK__K_LOCK], k->len[DLOCK__K_LOCK], dlock_mono_now() + c->command_timeout_ms, &rc);
  if (!node) return rc;
  lock(p);
  if (p->conn && !p->n && dlock_mono_now() >= p->last_cork + FLUSHER_IDLE_MS && dlock__conn_idle_closed(p->conn)) {
    /* Idle, nothing pending, yet readable: the server closed it (its idle
     * timeout, a restart, CLIENT KILL), as the pool checks its idle ones.
     * Corked onto it, this release would never run. */
    dlock__conn_close(p->conn);
    p->conn = NULL;
  }
  if (p->conn && (p->node != node || dlock__conn_broken(p->conn))) {
    /* The master moved (Sentinel): read what is pending there first. */
    if (drain(c, p) == 0) {
      dlock__conn_close(p->conn);
      p->conn = NULL;
    }
  }
  if (!p->conn) {
    if ((rc = dlock__conn_open(&node->ep, node->ssl_ctx, &p->conn)) != 0) {
      p->conn = NULL;
    } else if ((rc = load_release_scripts(c, p->conn)) != 0) {
      dlock__conn_close(p->conn);
      p->conn = NULL;
    }
    if (rc) {
      unlock(p);
      return dlock__error(rc, "%s; not sent, the key expires with its lease", dlock_last_error());
    }
    p->node = node;
  }
  if (p->n == PIPE_MAX && read_one(c, p, 1) < 0) {
    unlock(p);
    return dlock__error(DLOCK_EIO, "the pipeline connection failed; not sent, the key expires with its lease");
  }
  dlock__script_call call;
  memset(&call, 0, sizeof call);
  call.script = release_script(m);
  dlock__script_call_keys(&call, k);
  call.args[0] = m->token;
  call.arglens[0] = strlen(m->token);
  call.nargs = 1;
  dlock__eval_argv e;
  dlock__cmd cmd;
  dlock__script_build_eval(&e, &cmd, &call, 1);
  dlock__script_add_epoch(c, &e, &cmd, &call);
  rc = dlock__conn_append(p->conn, &cmd);
  if (rc) {
    /* Nothing of it left, but the output may hold part of it: the
     * connection goes, and with it the corked releases before it. */
    char why[256];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    fail_all(p, why, 1);
    unlock(p);
    return dlock__error(rc, "%s; not sent, the key expires with its lease", why);
  }
  pending *slot = &p->q[(p->head + p->n) % PIPE_MAX];
  *slot = (pending){m, valid_until, lost, dlock__rm(m)->failovers_at_acquire, ""};
  snprintf(slot->token, sizeof slot->token, "%s", m->token);
  p->n++;
  dlock_mono_ms now = dlock_mono_now();
  if (atomic_fetch_add(&p->corked, 1) == 0) p->corked_at = now;
  p->last_cork = now;
  if (p->flusher_asleep) pthread_cond_signal(&p->cv);
  /* Replies of releases written earlier (not through a later command, or
   * the flusher's) may be here: read those, without waiting. */
  while (p->n > atomic_load(&p->corked) && read_one(c, p, 0) > 0) {
  }
  unlock(p);
  return 0;
}

int dlock__pipeline_exec(dlock_client *c, dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies,
                         int *sent, dlock_mono_ms limit, int *out) {
  dlock__pipeline *p = atomic_load(&dlock__rc(c)->pipeline);
  /* Any pending release, corked or written with its reply not read yet:
   * sent on another connection, this call could run before it. */
  if (!p || !atomic_load(&p->n) || locked_here == p) return 0;
  lock(p);
  if (!p->n || p->node != node || !p->conn) {
    unlock(p);
    return 0;
  }
  if (dlock__conn_broken(p->conn)) { /* the corked releases cannot leave; ours go the usual way */
    fail_all(p, "the pipeline connection had failed before it was written", 1);
    unlock(p);
    return 0;
  }
  *sent = 0;
  for (size_t i = 0; i < n; i++) replies[i] = NULL;
  dlock_mono_ms deadline = dlock_mono_now() + c->command_timeout_ms;
  if (limit < deadline) deadline = limit;
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) rc = dlock__conn_append(p->conn, &cmds[i]);
  char why[256];
  if (rc) { /* none of ours left; the connection goes (the output may hold part of one) */
    snprintf(why, sizeof why, "%s", dlock_last_error());
    fail_all(p, why, 1);
    unlock(p);
    *out = dlock__node_note_outcome(node, dlock__error(rc, "%s", why), NULL, 0);
    return 1;
  }
  *sent = 1;
  /* The releases ahead of ours, in the same write, and their replies
   * first; then ours. */
  if (write_out(c, p) < 0 || drain(c, p) < 0) {
    unlock(p);
    *out = dlock__node_note_outcome(node,
                                    dlock__error(DLOCK_EIO,
                                                 "%s: the connection failed before the reply "
                                                 "came",
                                                 node->ep.display),
                                    NULL, 0);
    return 1;
  }
  for (size_t i = 0; i < n && !rc; i++) rc = dlock__conn_read(p->conn, deadline, &replies[i]);
  if (rc) {
    snprintf(why, sizeof why, "%s", dlock_last_error());
    for (size_t i = 0; i < n; i++) {
      dlock__reply_free(replies[i]);
      replies[i] = NULL;
    }
    fail_all(p, why, 0);
    rc = dlock__error(rc, "%s", why);
  }
  unlock(p);
  *out = dlock__node_note_outcome(node, rc, replies, n);
  return 1;
}

void dlock__redis_release_collect(dlock_mutex *m) {
  dlock_client *c = m->client;
  dlock__pipeline *p = atomic_load(&dlock__rc(c)->pipeline);
  if (!p) return;
  lock(p);
  for (;;) {
    int found = 0;
    for (int i = 0; i < p->n && !found; i++) found = p->q[(p->head + i) % PIPE_MAX].m == m;
    if (!found || read_one(c, p, 1) < 0) break;
  }
  unlock(p);
}

void dlock__pipeline_free(dlock_client *c) {
  dlock__pipeline *p = atomic_load(&dlock__rc(c)->pipeline);
  if (!p) return;
  lock(p);
  p->stop = 1;
  pthread_cond_signal(&p->cv);
  unlock(p);
  if (p->flusher_started) pthread_join(p->flusher, NULL);
  lock(p);
  if (p->conn) drain(c, p);
  if (p->conn) dlock__conn_close(p->conn);
  unlock(p);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
  atomic_store(&dlock__rc(c)->pipeline, NULL);
}
