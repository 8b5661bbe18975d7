/*
 * topo_redlock.c - Redlock: the Redis topology of N independent masters
 * (redlock://h1:p1,h2:p2,...). A lock is held when a majority (N/2+1) of
 * them took it within its validity time.
 *
 * It plugs in at dlock__script_run (the quorum_run hook): "run this script
 * on the owning node" becomes "run it on every node at once and count".
 * Every call is sent on all nodes' connections first, then one poll loop
 * reads the replies, each node bounded by its own deadline, so a slow or
 * frozen node costs at most that deadline. The replies are folded into the
 * one reply the lock code expects (docs/redlock.md has the rules):
 *  - acquire: majority and positive validity, then the fence write-back to
 *    a majority (rl_fence.lua); else a release on every node and an error
 *    that says, per node, why (held by another owner, unreachable, restarted
 *    recently, not a master, too slow): DLOCK_EBUSY when others held a
 *    majority, else DLOCK_EQUORUM;
 *  - extend: counted only when a majority confirms (rl_extend.lua re-seeds
 *    a node that lost the key, never overwriting another owner; when too
 *    few confirm, counted nodes without the key whose marker counts are
 *    taken first and count, as in an acquire);
 *    A waiter is queued on every node held by another owner (each node's
 *    release hands over to its first waiter and publishes; waiters.c
 *    listens on every node);
 *  - release, withdraw, force release: every node (a forced release's
 *    tombstone answers -2, DLOCK_LOST_DELETED, as on one node);
 *  - info: the view of the majority;
 *  - tick claims: a majority of "yours", the fence written back, else
 *    given back everywhere (rl_sched_unclaim.lua) and, after a split
 *    between claimers, tried again; run ends on every node; history from
 *    the first node that answers;
 *  - guard: stale when any node knows a higher token, admitted by a majority.
 * Other commands (PING, SCAN) run on the first reachable node.
 *
 * A call completes as soon as its outcome is decided (acquire, renewal,
 * guard, release): the nodes still owing a reply get a short grace, then
 * their connections are closed (issue 22 item 3).
 *
 * Restarts: each node's run_id is read (INFO server) whenever a connection
 * to it is opened, which a restart always forces. A node whose run_id
 * changed and whose uptime is below the longest lease in use does not count
 * toward a quorum until that lease has passed (the Redlock spec's delayed
 * restart, for servers without fsync'd AOF); two nodes with one run_id are
 * one server listed twice (refused at the start, else counted once). For
 * every client, also one that never saw the node before: every acquire runs
 * rl_marker.lua on every node in the same round trip. A node without the restart marker
 * (dlock:redlock:marker, whatever the key prefix) lost its data or is new:
 * it is held out from the first look, on its own clock, for the longest
 * lease, and promoted only then, at an acquire that counts it; every node
 * counts at once only when every node answered and none had a marker older
 * than one look (a held-out one older than the command timeout is a
 * deployment in use; a new deployment; a renewal that re-seeds a node
 * without the marker starts its quarantine there, or adds its record). The fence write-back reaches every node that
 * answered the acquire (issue 22 item 4 and its review; docs/redlock.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_lock.h"

#define SCHEME "redlock://"

typedef struct rl_node {
  dlock__node node;
  /* Guarded by redlock.mu. */
  char run_id[48];
  int64_t uptime_s;
  dlock_mono_ms restarted_until; /* does not count before this */
  int not_master;                /* INFO replication says role:slave */
  char role[24];
  /* The restart marker at the last acquire's look (rl_marker.lua): 1 the
   * node counts, 2 it may count (held out long enough on its own clock, or
   * a new deployment) once promoted, 0 held out, -1 unknown (not read yet,
   * or the read failed: an ACL without the key). */
  int marker;
  char q_since[24];   /* the marker's 'since' (the node's clock, µs) */
  int64_t q_age_ms;   /* the node's clock minus 'since' at the look */
  int64_t q_look_ms;  /* how long the look that wrote it may race ours (its 'look') */
  dlock_mono_ms q_at; /* when the look's reply came */
} rl_node;

typedef struct redlock {
  dlock__topology base;
  pthread_mutex_t mu;
  int n, quorum;
  int command_timeout_ms;
  int64_t max_lease_ms;    /* the longest lease seen in use: the restart rule's wait */
  int64_t marker_lease_ms; /* the longest lease a node's marker records */
  int threads;             /* open_thread()s running; rl_destroy waits for them */
  char marker_key[32];     /* the restart marker: dlock:redlock:marker, whatever the key prefix */
  pthread_cond_t cv;
  rl_node node[DLOCK__REDLOCK_MAX];
} redlock;

/* ---- URLs ---- */

int dlock__url_is_redlock(const char *url) { return url && !strncmp(url, SCHEME, strlen(SCHEME)); }

void dlock__redlock_urls_free(char **urls, int n) {
  if (!urls) return;
  for (int i = 0; i < n; i++) {
    if (urls[i]) memset(urls[i], 0, strlen(urls[i])); /* may hold a password */
    free(urls[i]);
  }
  free(urls);
}

/* 'url' with each node's userinfo password and any password= masked. */
void dlock__redlock_redact(const char *url, char *buf, size_t len) {
  if (!buf || !len) return;
  buf[0] = '\0';
  if (!url) return;
  size_t o = 0;
#define PUT(s, k)                        \
  do {                                   \
    size_t k_ = (k);                     \
    if (o + k_ >= len) k_ = len - 1 - o; \
    memcpy(buf + o, (s), k_);            \
    o += k_;                             \
    buf[o] = '\0';                       \
  } while (0)
  const char *p = url;
  if (dlock__url_is_redlock(url)) {
    PUT(url, strlen(SCHEME));
    p = url + strlen(SCHEME);
  }
  const char *hosts_end = p + strcspn(p, "/?");
  while (p < hosts_end) {
    const char *comma = memchr(p, ',', (size_t)(hosts_end - p));
    const char *end = comma ? comma : hosts_end;
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
      if (*q == '@') at = q;
    if (at) {
      const char *colon = memchr(p, ':', (size_t)(at - p));
      if (colon) {
        PUT(p, (size_t)(colon - p) + 1);
        PUT("***", 3);
        p = at;
      }
    }
    PUT(p, (size_t)(end - p));
    p = end;
    if (comma) {
      PUT(",", 1);
      p++;
    }
  }
  /* The query: the generic redactor masks password=. */
  if (*p) {
    char tmp[1024];
    char q[1100];
    snprintf(q, sizeof q, "redis://x%s", p);
    dlock_url_redact(q, tmp, sizeof tmp);
    PUT(tmp + strlen("redis://x"), strlen(tmp + strlen("redis://x")));
  }
#undef PUT
}

static int bad_redlock(const char *url, const char *why) {
  char shown[512];
  dlock__redlock_redact(url, shown, sizeof shown);
  return dlock__error(DLOCK_EURL,
                      "bad Redlock URL '%s': %s (expected redlock://[user:pass@]host1:port1,"
                      "[user:pass@]host2:port2,[...]host3:port3[/db][?options of redis://]; Redlock needs 3 or "
                      "more independent masters, 5 advised)",
                      shown, why);
}

int dlock__redlock_split(const char *url, char ***out, int *n) {
  *out = NULL;
  *n = 0;
  if (!dlock__url_is_redlock(url)) return bad_redlock(url ? url : "(null)", "not a redlock:// URL");
  const char *rest = url + strlen(SCHEME);
  size_t hlen = strcspn(rest, "/?");
  const char *tail = rest + hlen; /* "/db?query", shared by all nodes */
  char **urls = calloc(DLOCK__REDLOCK_MAX, sizeof *urls);
  if (!urls) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int count = 0;
  for (const char *p = rest; p <= rest + hlen;) {
    const char *comma = memchr(p, ',', (size_t)(rest + hlen - p));
    const char *end = comma ? comma : rest + hlen;
    if (end == p) {
      dlock__redlock_urls_free(urls, count);
      return bad_redlock(url, "an empty node in the list");
    }
    if (count == DLOCK__REDLOCK_MAX) {
      dlock__redlock_urls_free(urls, count);
      return bad_redlock(url, "more than 16 nodes");
    }
    size_t len = strlen("redis://") + (size_t)(end - p) + strlen(tail) + 1;
    if (!(urls[count] = malloc(len))) {
      dlock__redlock_urls_free(urls, count);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    snprintf(urls[count], len, "redis://%.*s%s", (int)(end - p), p, tail);
    count++;
    if (!comma) break;
    p = comma + 1;
  }
  *out = urls;
  *n = count;
  return 0;
}

/* ---- Replies built here ---- */

static dlock__reply *mk_int(long long v) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (r) {
    r->type = DLOCK__REPLY_INTEGER;
    r->integer = v;
  }
  return r;
}

static dlock__reply *mk_str(dlock__reply_type type, const char *s) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = type;
  if (!(r->str = strdup(s))) {
    free(r);
    return NULL;
  }
  r->len = strlen(s);
  return r;
}

static dlock__reply *mk_pair(long long a, dlock__reply *b) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (!r || !b || !(r->element = calloc(2, sizeof *r->element)) || !(r->element[0] = mk_int(a))) {
    if (r) free(r->element);
    free(r);
    dlock__reply_free(b);
    return NULL;
  }
  r->type = DLOCK__REPLY_ARRAY;
  r->elements = 2;
  r->element[1] = b;
  return r;
}

static dlock__reply *copy_reply(const dlock__reply *s) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->type = s->type;
  r->integer = s->integer;
  if (s->str && !(r->str = malloc(s->len + 1))) {
    free(r);
    return NULL;
  }
  if (s->str) {
    memcpy(r->str, s->str, s->len + 1);
    r->len = s->len;
  }
  if (s->elements) {
    if (!(r->element = calloc(s->elements, sizeof *r->element))) {
      dlock__reply_free(r);
      return NULL;
    }
    for (size_t i = 0; i < s->elements; i++) {
      r->elements = i + 1;
      if (!(r->element[i] = copy_reply(s->element[i]))) {
        dlock__reply_free(r);
        return NULL;
      }
    }
  }
  return r;
}

/* ---- Running commands on many nodes at once ---- */

/* Calls per run that a NOSCRIPT answer sends again as EVAL at once (more: in a second round). */
#define RL_RETRY_MAX 64

/* One node's part of a parallel run. */
typedef struct slot {
  int active;                    /* in: run on this node */
  size_t k;                      /* in: commands */
  dlock__cmd *cmds;              /* in */
  const dlock__cmd *alt;         /* in: cmds[j] as EVAL, sent at once when cmds[j] answers NOSCRIPT, or NULL */
  size_t nretry;                 /* EVALs sent again so far */
  size_t retry_of[RL_RETRY_MAX]; /* which command each answers */
  dlock__conn *conn;
  int fresh;
  size_t ninfo; /* a fresh connection's INFO replies, first */
  size_t extra; /* ninfo: replies in front of the commands' */
  size_t got;
  int seen;           /* the INFO replies were noted */
  dlock__reply **rep; /* extra + k */
  int rc;             /* out: 0, or why this node failed */
  int sent;           /* out: the commands may have reached the node */
  char err[300];      /* out: the failure, for messages */
} slot;

static const char *info_field(const char *info, const char *name, char *out, size_t len) {
  out[0] = '\0';
  const char *p = strstr(info, name);
  while (p && p != info && p[-1] != '\n') p = strstr(p + 1, name);
  if (!p) return out;
  p += strlen(name);
  size_t n = strcspn(p, "\r\n");
  if (n >= len) n = len - 1;
  memcpy(out, p, n);
  out[n] = '\0';
  return out;
}

/* The longest lease the restart rule waits for: this client's, or longer
 * when a node's marker records one (r->mu held). */
static int64_t longest_lease(const redlock *r) {
  return r->marker_lease_ms > r->max_lease_ms ? r->marker_lease_ms : r->max_lease_ms;
}

/* A fresh connection's INFO server / INFO replication: the restart rule. */
static void note_info(redlock *r, int i, const dlock__reply *server, const dlock__reply *repl) {
  rl_node *nd = &r->node[i];
  char run_id[48] = "", up[32] = "", role[24] = "";
  if (server && server->type == DLOCK__REPLY_STRING) {
    info_field(server->str, "run_id:", run_id, sizeof run_id);
    info_field(server->str, "uptime_in_seconds:", up, sizeof up);
  }
  if (repl && repl->type == DLOCK__REPLY_STRING) info_field(repl->str, "role:", role, sizeof role);
  pthread_mutex_lock(&r->mu);
  if (run_id[0]) {
    int64_t uptime = strtoll(up, NULL, 10);
    int64_t longest = longest_lease(r);
    if (nd->run_id[0] && strcmp(nd->run_id, run_id) != 0 && uptime * 1000 < longest)
      nd->restarted_until = dlock_mono_now() + (longest - uptime * 1000);
    if (nd->run_id[0] && strcmp(nd->run_id, run_id) != 0) nd->marker = -1; /* not seen since the restart */
    snprintf(nd->run_id, sizeof nd->run_id, "%s", run_id);
    nd->uptime_s = uptime;
  }
  if (role[0]) {
    snprintf(nd->role, sizeof nd->role, "%s", role);
    nd->not_master = strcmp(role, "master") != 0;
  }
  pthread_mutex_unlock(&r->mu);
}

/* A held-out marker written without a 'look' (by an older client) races
 * ours for at most this (ms): the default command timeout. */
#define RL_OLD_LOOK_MS 2000

/* Is 'v' rl_marker.lua's read reply, {counts, since, now, lease, look}? Any other
 * reply (an error: -BUSY, -LOADING, NOPERM, ...) says nothing about the
 * marker: the node did not answer the look. */
static int marker_reply_ok(const dlock__reply *v) {
  return v && v->type == DLOCK__REPLY_ARRAY && v->elements == 5 && v->element[0]->type == DLOCK__REPLY_INTEGER &&
         v->element[1]->type == DLOCK__REPLY_STRING && v->element[2]->type == DLOCK__REPLY_STRING &&
         v->element[3]->type == DLOCK__REPLY_STRING && v->element[4]->type == DLOCK__REPLY_STRING;
}

/* An ACL without the marker's key: that node gets no marker rule. */
static int marker_noperm(const dlock__reply *v) { return dlock__reply_error_status(v) == DLOCK_ENOPERM; }

/* The reply to rl_marker.lua's read, {counts, since, now, lease, look}: noted
 * as counting (1), held out (0) or unknown (-1: NOPERM, an ACL without the
 * key); the longest lease it records. Any other error (-BUSY: a long
 * script; -LOADING) keeps what we knew, as no reply would. Whether a node
 * held out has been out for long enough is decided once every reply is in
 * (rl_acquire: a later reply may record a longer lease). */
static void note_marker(redlock *r, int i, const dlock__reply *v) {
  rl_node *nd = &r->node[i];
  pthread_mutex_lock(&r->mu);
  if (!marker_reply_ok(v)) {
    if (marker_noperm(v)) nd->marker = -1;
  } else {
    nd->marker = v->element[0]->integer == 1 ? 1 : 0;
    snprintf(nd->q_since, sizeof nd->q_since, "%s", v->element[1]->str);
    nd->q_age_ms = (strtoll(v->element[2]->str, NULL, 10) - strtoll(nd->q_since, NULL, 10)) / 1000;
    nd->q_at = dlock_mono_now();
    int64_t ms = strtoll(v->element[3]->str, NULL, 10);
    if (ms > r->marker_lease_ms) r->marker_lease_ms = ms;
    int64_t look = strtoll(v->element[4]->str, NULL, 10);
    nd->q_look_ms = look > 0 ? look : RL_OLD_LOOK_MS;
  }
  pthread_mutex_unlock(&r->mu);
}

static void slot_fail(slot *s, int rc, const char *what) {
  s->rc = rc;
  snprintf(s->err, sizeof s->err, "%s", what);
}

/* Make sure the node's message names it. */
static void slot_name(slot *s, const char *display) {
  if (s->rc && strncmp(s->err, display, strlen(display)) != 0) {
    char tmp[sizeof s->err];
    snprintf(tmp, sizeof tmp, "%s: %s", display, s->err);
    memcpy(s->err, tmp, sizeof tmp);
  }
}

static void slots_free(slot *s, int n) {
  for (int i = 0; i < n; i++) {
    if (s[i].rep)
      for (size_t j = 0; j < s[i].extra + s[i].k; j++) dlock__reply_free(s[i].rep[j]); /* retries replaced theirs */
    free(s[i].rep);
    s[i].rep = NULL;
  }
}

/* Still owes replies (or a connection). */
static int slot_pending(const slot *x) { return x->active && !x->rc && x->got < x->extra + x->k + x->nretry; }

/* A new connection to one node, opened in a thread of its own so that a
 * node that accepts but never answers (frozen) holds up no other node. The
 * call that started it may complete first (its outcome decided without this
 * node): the thread then closes what it opened. Shared fields under r->mu. */
typedef struct opener {
  redlock *r;
  int i;
  dlock_mono_ms deadline;
  int wfd;  /* the call's wake-up pipe; -1 once the call stopped waiting */
  int refs; /* the call's and the thread's */
  int done, taken;
  dlock__conn *conn;
  int fresh, rc;
  char err[300];
} opener;

static void *open_thread(void *arg) {
  opener *o = arg;
  redlock *r = o->r;
  dlock__node *node = &r->node[o->i].node;
  dlock__conn *conn = NULL;
  int fresh = 0;
  int rc = dlock__node_borrow(node, o->deadline, &conn, &fresh);
  if (!rc && fresh) {
    /* The restart rule's INFO, here: a connection the call no longer waits
     * for goes to the pool checked, for the next call to use. */
    dlock__reply *info[2] = {NULL, NULL};
    static const char *a1[2] = {"INFO", "server"}, *a2[2] = {"INFO", "replication"};
    static const size_t l1[2] = {4, 6}, l2[2] = {4, 11};
    const dlock__cmd infos[2] = {{2, a1, l1}, {2, a2, l2}};
    rc = dlock__conn_append(conn, &infos[0]);
    if (!rc) rc = dlock__conn_append(conn, &infos[1]);
    if (!rc) rc = dlock__conn_flush(conn, o->deadline);
    for (int k = 0; !rc && k < 2; k++) rc = dlock__conn_read(conn, o->deadline, &info[k]);
    if (!rc) note_info(r, o->i, info[0], info[1]);
    dlock__reply_free(info[0]);
    dlock__reply_free(info[1]);
    if (rc) {
      dlock__node_return(node, conn, 1);
      conn = NULL;
    }
    fresh = 0;
  }
  pthread_mutex_lock(&r->mu);
  o->conn = conn;
  o->fresh = fresh;
  o->rc = rc;
  if (rc) snprintf(o->err, sizeof o->err, "%s", dlock_last_error()); /* this thread's error text */
  o->done = 1;
  if (o->wfd >= 0) {
    char b = 1;
    if (write(o->wfd, &b, 1) < 0) { /* full: the call is awake anyway */
    }
  }
  int last = --o->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (last) {
    if (o->conn) dlock__node_return(node, o->conn, 0); /* checked, nothing sent: pooled */
    free(o);
  }
  pthread_mutex_lock(&r->mu);
  r->threads--;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* The call stops waiting for an opener: a connection it opened and the call
 * did not take (nothing was sent on it) goes to the pool. */
static void opener_release(redlock *r, opener *o) {
  pthread_mutex_lock(&r->mu);
  o->wfd = -1;
  dlock__conn *conn = NULL;
  if (o->done) {
    conn = o->conn;
    o->conn = NULL;
  }
  int last = --o->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (conn) dlock__node_return(&r->node[o->i].node, conn, 0);
  if (last) free(o);
}

static int opener_start(redlock *r, opener *o) {
  pthread_attr_t at;
  if (pthread_attr_init(&at) != 0) return -1;
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&r->mu);
  r->threads++;
  o->refs = 2;
  pthread_mutex_unlock(&r->mu);
  pthread_t t;
  int rc = pthread_create(&t, &at, open_thread, o);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    pthread_mutex_lock(&r->mu);
    r->threads--;
    o->refs = 1;
    pthread_mutex_unlock(&r->mu);
    return -1;
  }
  return 0;
}

/* Queue (a fresh connection's INFO checks and) the slot's commands and send them. */
static void send_slot(slot *x, const dlock__cmd *infos, dlock_mono_ms deadline) {
  int rc = 0;
  x->ninfo = x->fresh ? 2 : 0;
  x->extra = x->ninfo;
  for (size_t j = 0; !rc && j < x->ninfo; j++) rc = dlock__conn_append(x->conn, &infos[j]);
  for (size_t j = 0; !rc && j < x->k; j++) rc = dlock__conn_append(x->conn, &x->cmds[j]);
  if (!rc) {
    x->sent = 1;
    rc = dlock__conn_flush(x->conn, deadline);
  }
  if (rc) slot_fail(x, rc, dlock_last_error());
}

/* Decides, from the replies so far (slots not pending), whether the call's
 * outcome is known: par_exec then stops waiting for the other nodes. */
typedef int (*decide_fn)(redlock *r, const slot *s, void *ctx);

/* Send each active slot's commands, then read all replies in one poll loop;
 * node i gives up at 'deadline', and every node once 'decided' says the
 * outcome is known (issue 22 item 3: a frozen node costs a quorum call
 * nothing once a majority answered). Replies land in s[i].rep[s[i].extra +
 * j]. A node still owing replies then fails (ETIMEDOUT; 'sent': its
 * commands may run) and its connection is closed, never reused: a late
 * reply is never read as the answer to a later command. */
static void par_exec(redlock *r, slot *s, dlock_mono_ms deadline, decide_fn decided, void *ctx) {
  static const char *info_server[2] = {"INFO", "server"}, *info_repl[2] = {"INFO", "replication"};
  static const size_t info_server_len[2] = {4, 6}, info_repl_len[2] = {4, 11};
  const dlock__cmd infos[2] = {{2, info_server, info_server_len}, {2, info_repl, info_repl_len}};
  dlock_mono_ms start = dlock_mono_now();
  /* Pooled connections first: their commands leave at once. Nodes that
   * need a new connection are connected in parallel, one thread each. */
  opener *op[DLOCK__REDLOCK_MAX];
  int nopen = 0;
  for (int i = 0; i < r->n; i++) {
    slot *x = &s[i];
    op[i] = NULL;
    x->rc = 0;
    x->sent = 0;
    x->got = 0;
    x->conn = NULL;
    x->fresh = 0;
    x->seen = 0;
    x->nretry = 0;
    x->ninfo = 0;
    x->extra = 0;
    x->err[0] = '\0';
    if (!x->active) continue;
    if (!(x->rep = calloc(2 * x->k + 3, sizeof *x->rep))) {
      slot_fail(x, DLOCK_ENOMEM, "out of memory");
      continue;
    }
    if (dlock__node_borrow_idle(&r->node[i].node, &x->conn)) {
      send_slot(x, infos, deadline);
    } else if ((op[i] = calloc(1, sizeof *op[i]))) {
      *op[i] = (opener){.r = r, .i = i, .deadline = deadline, .wfd = -1};
      nopen++;
    } else {
      slot_fail(x, DLOCK_ENOMEM, "out of memory");
    }
  }
  int wake[2] = {-1, -1};
  if (nopen && pipe(wake) == 0) {
    for (int k = 0; k < 2; k++) {
      int fl = fcntl(wake[k], F_GETFL);
      if (fl >= 0) fcntl(wake[k], F_SETFL, fl | O_NONBLOCK);
      fcntl(wake[k], F_SETFD, FD_CLOEXEC);
    }
  }
  for (int i = 0; i < r->n; i++) {
    if (!op[i]) continue;
    op[i]->wfd = wake[1];
    if (opener_start(r, op[i]) != 0) { /* no thread: connect here */
      dlock__conn *conn = NULL;
      int fresh = 0;
      int rc = dlock__node_borrow(&r->node[i].node, deadline, &conn, &fresh);
      op[i]->conn = conn;
      op[i]->fresh = fresh;
      op[i]->rc = rc;
      if (rc) snprintf(op[i]->err, sizeof op[i]->err, "%s", dlock_last_error());
      op[i]->done = 1;
    }
  }
  int early = 0;
  dlock_mono_ms end = deadline;
  for (;;) {
    /* Connections opened since: send on them. */
    int waiting = 0;
    for (int i = 0; i < r->n; i++) {
      opener *o = op[i];
      if (!o || o->taken) continue;
      pthread_mutex_lock(&r->mu);
      int done = o->done;
      dlock__conn *conn = o->conn;
      if (done) {
        o->taken = 1;
        o->conn = NULL;
      }
      pthread_mutex_unlock(&r->mu);
      if (!done) {
        waiting++;
        continue;
      }
      slot *x = &s[i];
      if (o->rc) {
        slot_fail(x, o->rc, o->err);
        continue;
      }
      x->conn = conn;
      x->fresh = o->fresh;
      send_slot(x, infos, deadline);
    }
    if (wake[0] >= 0) {
      char buf[64];
      while (read(wake[0], buf, sizeof buf) > 0) {
      }
    }
    /* Replies so far. */
    for (int i = 0; i < r->n; i++) {
      slot *x = &s[i];
      if (!slot_pending(x) || !x->conn) continue;
      while (slot_pending(x)) {
        dlock__reply *rep = NULL;
        int rc = dlock__conn_try_read(x->conn, &rep);
        if (rc) {
          slot_fail(x, rc, dlock_last_error());
          break;
        }
        if (!rep) break;
        size_t at = x->got++;
        if (at >= x->extra + x->k) { /* the EVAL sent again for a NOSCRIPT */
          size_t j = x->extra + x->retry_of[at - x->extra - x->k];
          dlock__reply_free(x->rep[j]);
          x->rep[j] = rep;
          continue;
        }
        x->rep[at] = rep;
        /* NOSCRIPT: that command did not run; send it as EVAL on this
         * connection now, so that this node's answer comes within the call. */
        if (at >= x->extra && x->alt && x->nretry < x->k && x->k <= RL_RETRY_MAX && dlock__reply_is_noscript(rep)) {
          rc = dlock__conn_append(x->conn, &x->alt[at - x->extra]);
          if (!rc) rc = dlock__conn_flush(x->conn, deadline);
          if (rc) {
            slot_fail(x, rc, dlock_last_error());
            break;
          }
          x->retry_of[x->nretry++] = at - x->extra;
        }
      }
      if (!x->rc && !x->seen && x->got >= x->extra) {
        x->seen = 1;
        if (x->ninfo) note_info(r, i, x->rep[0], x->rep[1]);
      }
    }
    if (!early && decided && decided(r, s, ctx)) {
      /* Known. A node about as fast as the rest still gets its answer in
       * (and keeps its connection): as long again as the call took so far,
       * and 20 ms more (a busy machine). A frozen node costs that. */
      early = 1;
      dlock_mono_ms now = dlock_mono_now();
      dlock_mono_ms grace = now + (now - start) + 20;
      if (grace < end) end = grace;
    }
    struct pollfd pfd[DLOCK__REDLOCK_MAX + 1];
    int idx[DLOCK__REDLOCK_MAX];
    int np = 0;
    for (int i = 0; i < r->n; i++)
      if (slot_pending(&s[i]) && s[i].conn) {
        pfd[np] = (struct pollfd){.fd = dlock__conn_fd(s[i].conn), .events = POLLIN};
        idx[np++] = i;
      }
    if (np == 0 && !waiting) break;
    dlock_mono_ms now = dlock_mono_now();
    if (now >= end) break;
    int64_t wait = end - now;
    if (wait > 1000) wait = 1000;
    int nfd = np;
    if (waiting && wake[0] >= 0)
      pfd[nfd++] = (struct pollfd){.fd = wake[0], .events = POLLIN};
    else if (waiting && wait > 5)
      wait = 5; /* no pipe: look again soon */
    int pr = poll(pfd, (nfds_t)nfd, (int)wait);
    if (pr < 0 && errno != EINTR) {
      for (int j = 0; j < np; j++) slot_fail(&s[idx[j]], DLOCK_ESYS, "poll failed");
      break;
    }
  }
  /* What is still owed is not waited for: the deadline passed, or the
   * outcome is known without it. */
  for (int i = 0; i < r->n; i++) {
    slot *x = &s[i];
    if (!slot_pending(x)) continue;
    char why[200];
    if (!x->conn)
      snprintf(why, sizeof why, "%s: not connected %s (nothing was sent to it)", r->node[i].node.ep.display,
               early ? "when the other nodes had decided the outcome" : "within the per-node deadline");
    else
      snprintf(why, sizeof why,
               "%s: no reply %s (its connection is closed, not reused; the command may still run "
               "there)",
               r->node[i].node.ep.display,
               early ? "yet when the other nodes had decided the outcome" : "within the per-node deadline");
    slot_fail(x, DLOCK_ETIMEDOUT, why);
  }
  for (int i = 0; i < r->n; i++)
    if (op[i]) opener_release(r, op[i]);
  if (wake[0] >= 0) close(wake[0]);
  if (wake[1] >= 0) close(wake[1]);
  for (int i = 0; i < r->n; i++) {
    slot *x = &s[i];
    if (!x->active) continue;
    if (x->conn) dlock__node_return(&r->node[i].node, x->conn, x->rc != 0 || x->got < x->extra + x->k + x->nretry);
    x->conn = NULL;
    slot_name(x, r->node[i].node.ep.display);
    if (!x->rc) atomic_store(&r->node[i].node.suspect, 0);
  }
}

/* The per-node result of running 'n' calls: res[i*n + j] is node i's reply
 * to call j (NULL when node i failed: s[i].rc, s[i].err). */
typedef struct run {
  slot s[DLOCK__REDLOCK_MAX];
  dlock__reply **res;
  size_t n;
} run;

static void run_free(redlock *r, run *x) {
  if (x->res)
    for (size_t i = 0; i < (size_t)r->n * x->n; i++) dlock__reply_free(x->res[i]);
  free(x->res);
  x->res = NULL;
}

/* Run 'calls' on the nodes in 'mask' (bit i: node i), EVALSHA first and
 * EVAL for the calls a node answered NOSCRIPT (those did not run there). */
static int run_calls_ex(redlock *r, const dlock__script_call *calls, size_t n, unsigned mask, dlock_mono_ms deadline,
                        run *x, decide_fn decided, void *ctx) {
  memset(x->s, 0, sizeof x->s);
  x->n = n;
  x->res = calloc((size_t)r->n * n, sizeof *x->res);
  dlock__eval_argv *e = calloc(n, sizeof *e);
  dlock__cmd *cmds = calloc(n, sizeof *cmds);
  if (!x->res || !e || !cmds) {
    free(e);
    free(cmds);
    free(x->res);
    x->res = NULL;
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  dlock__eval_argv *ea = calloc(n, sizeof *ea);
  dlock__cmd *alt = calloc(n, sizeof *alt);
  if (!ea || !alt) {
    free(ea);
    free(alt);
    free(e);
    free(cmds);
    free(x->res);
    x->res = NULL;
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  for (size_t j = 0; j < n; j++) {
    dlock__script_build_eval(&e[j], &cmds[j], &calls[j], 1);
    dlock__script_build_eval(&ea[j], &alt[j], &calls[j], 0);
  }
  for (int i = 0; i < r->n; i++) {
    x->s[i].active = (mask >> i) & 1;
    x->s[i].k = n;
    x->s[i].cmds = cmds;
    x->s[i].alt = n <= RL_RETRY_MAX ? alt : NULL;
  }
  par_exec(r, x->s, deadline, decided, ctx);
  unsigned again = 0;
  for (int i = 0; i < r->n; i++) {
    slot *sl = &x->s[i];
    if (!sl->active || sl->rc) continue;
    for (size_t j = 0; j < n; j++) {
      x->res[(size_t)i * n + j] = sl->rep[sl->extra + j];
      sl->rep[sl->extra + j] = NULL;
      if (dlock__reply_is_noscript(x->res[(size_t)i * n + j])) again |= 1u << i;
    }
  }
  slots_free(x->s, r->n);
  if (again) {
    /* Per node, only the calls it answered NOSCRIPT, as EVAL. */
    slot s2[DLOCK__REDLOCK_MAX];
    memset(s2, 0, sizeof s2);
    dlock__cmd *c2 = calloc((size_t)r->n * n, sizeof *c2);
    dlock__eval_argv *e2 = calloc(n, sizeof *e2);
    size_t *which = calloc((size_t)r->n * n, sizeof *which);
    if (!c2 || !e2 || !which) {
      free(c2);
      free(e2);
      free(which);
      free(e);
      free(cmds);
      free(ea);
      free(alt);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < n; j++) dlock__script_build_eval(&e2[j], &cmds[j], &calls[j], 0);
    for (int i = 0; i < r->n; i++) {
      if (!((again >> i) & 1)) continue;
      s2[i].active = 1;
      s2[i].cmds = &c2[(size_t)i * n];
      for (size_t j = 0; j < n; j++)
        if (dlock__reply_is_noscript(x->res[(size_t)i * n + j])) {
          which[(size_t)i * n + s2[i].k] = j;
          s2[i].cmds[s2[i].k++] = cmds[j];
        }
    }
    par_exec(r, s2, deadline, NULL, NULL);
    for (int i = 0; i < r->n; i++) {
      if (!s2[i].active) continue;
      if (s2[i].rc) { /* the EVAL may have run: the node failed */
        x->s[i].rc = s2[i].rc;
        x->s[i].sent = 1;
        snprintf(x->s[i].err, sizeof x->s[i].err, "%s", s2[i].err);
        for (size_t j = 0; j < n; j++) {
          dlock__reply_free(x->res[(size_t)i * n + j]);
          x->res[(size_t)i * n + j] = NULL;
        }
        continue;
      }
      for (size_t t = 0; t < s2[i].k; t++) {
        size_t j = which[(size_t)i * n + t];
        dlock__reply_free(x->res[(size_t)i * n + j]);
        x->res[(size_t)i * n + j] = s2[i].rep[s2[i].extra + t];
        s2[i].rep[s2[i].extra + t] = NULL;
      }
    }
    slots_free(s2, r->n);
    free(c2);
    free(e2);
    free(which);
  }
  free(e);
  free(cmds);
  free(ea);
  free(alt);
  return 0;
}

static int run_calls(redlock *r, const dlock__script_call *calls, size_t n, unsigned mask, dlock_mono_ms deadline,
                     run *x) {
  return run_calls_ex(r, calls, n, mask, deadline, x, NULL, NULL);
}

/* ---- Counting ---- */

/* An earlier node whose INFO reported the same run_id as node i: one
 * server listed under two names (an IPv4-mapped address, a proxy, a second
 * DNS name), or -1 (r->mu held). */
static int same_server_as(const redlock *r, int i) {
  if (!r->node[i].run_id[0]) return -1;
  for (int j = 0; j < i; j++)
    if (!strcmp(r->node[j].run_id, r->node[i].run_id)) return j;
  return -1;
}

/* Does node i count toward a quorum now? If not, why (for messages). */
static int counts_ex(redlock *r, int i, char *why, size_t len, int marker_rule) {
  rl_node *nd = &r->node[i];
  pthread_mutex_lock(&r->mu);
  dlock_mono_ms now = dlock_mono_now();
  int ok = 1;
  int dup = same_server_as(r, i);
  if (dup >= 0) {
    /* Met at a connection opened after the client started (the check at
     * the start refuses the client): one server counts once. */
    snprintf(why, len,
             "%s is the same server as %s (one run_id in INFO server): it counts once; list each "
             "independent master once",
             nd->node.ep.display, r->node[dup].node.ep.display);
    ok = 0;
  } else if (nd->not_master) {
    snprintf(why, len, "%s is not a master (role:%s)", nd->node.ep.display, nd->role);
    ok = 0;
  } else if (nd->restarted_until > now) {
    snprintf(why, len,
             "%s restarted recently (run_id changed, up %" PRId64 " s; counts again in %" PRId64
             " ms, when the longest lease in use, %" PRId64 " ms, has passed)",
             nd->node.ep.display, nd->uptime_s, (int64_t)(nd->restarted_until - now), r->max_lease_ms);
    ok = 0;
  } else if (marker_rule && nd->marker == 0) {
    /* The restart rule for every client, also one that never saw the node
     * before (issue 22 item 4): the node had no restart marker, so it lost
     * its data (or is new) and may have forgotten a lock still held on the
     * others; it is held out, on its own clock, for the longest lease since
     * a client first found it so (rl_acquire decides when that passed). */
    int64_t longest = longest_lease(r);
    int64_t left = longest + longest / 100 + 2 - nd->q_age_ms - (int64_t)(now - nd->q_at);
    snprintf(why, len,
             "%s restarted without its data, was flushed or is new (the restart marker '%s' is missing "
             "there); held out for the longest lease, %" PRId64 " ms, on its own clock: counts again in about %" PRId64
             " ms",
             nd->node.ep.display, r->marker_key, longest, left > 0 ? left : 0);
    ok = 0;
  }
  pthread_mutex_unlock(&r->mu);
  return ok;
}

static int counts(redlock *r, int i, char *why, size_t len) { return counts_ex(r, i, why, len, 1); }

/* ---- When a quorum call's outcome is known (par_exec's 'decided') ---- */

/* The reply of a node that answered, or NULL (pending, failed, or NOSCRIPT:
 * it is sent again as EVAL, so still to come). */
static const dlock__reply *answer(const slot *x, size_t j, int *pending) {
  *pending = 0;
  if (!x->active) return NULL;
  if (slot_pending(x)) {
    *pending = 1;
    return NULL;
  }
  if (x->rc) return NULL;
  const dlock__reply *v = x->rep[x->extra + j];
  if (dlock__reply_is_noscript(v)) {
    *pending = 1;
    return NULL;
  }
  return v;
}

/* Acquire (calls: the marker's read, then the acquire): a majority of
 * counted nodes took it, or a majority no longer can. Only a node whose
 * marker says it counts decides early: whether a node without one has been
 * held out long enough, or the deployment is new, is known only once every
 * reply is in (a later one may record a longer lease, or have a marker). */
static int acquire_decided(redlock *r, const slot *s, void *ctx) {
  (void)ctx;
  int yes = 0, no = 0;
  for (int i = 0; i < r->n; i++) {
    int pending, mpending;
    const dlock__reply *v = answer(&s[i], 1, &pending);
    if (pending) continue;
    if (!s[i].active) {
      no++;
      continue;
    }
    const dlock__reply *mk = answer(&s[i], 0, &mpending);
    if (mpending) continue;
    int got = v && v->type == DLOCK__REPLY_ARRAY && v->elements == 2 && v->element[0]->type == DLOCK__REPLY_INTEGER
                  ? (int)v->element[0]->integer
                  : -1;
    char why[300];
    /* Counts early: a marker that counts, or none readable (NOPERM: no
     * marker rule). Another error (-BUSY) is no answer: not early. */
    int marked = marker_reply_ok(mk) ? mk->element[0]->integer == 1 : marker_noperm(mk);
    if (got != 1 || !counts_ex(r, i, why, sizeof why, 0))
      no++;
    else if (marked)
      yes++;
  }
  return yes >= r->quorum || r->n - no < r->quorum;
}

/* Renewals: for every call, a majority of counted nodes confirmed, or
 * would with the counted nodes that answered "key gone" (rl_extend takes
 * them at once, within the validity: waiting for a frozen node would spend
 * it; review 3, finding 2), or a majority no longer can. */
static int extend_decided(redlock *r, const slot *s, void *ctx) {
  size_t n = *(const size_t *)ctx;
  for (size_t j = 0; j < n; j++) {
    int conf = 0, pend = 0, takeable = 0;
    for (int i = 0; i < r->n; i++) {
      int pending;
      const dlock__reply *v = answer(&s[i], j, &pending);
      char why[300];
      if (pending)
        pend++;
      else if (v && v->type == DLOCK__REPLY_INTEGER && (v->integer == 1 || v->integer == 0) &&
               counts(r, i, why, sizeof why)) {
        if (v->integer == 1)
          conf++;
        else
          takeable++;
      }
    }
    if (conf < r->quorum && conf + pend >= r->quorum && conf + takeable < r->quorum) return 0;
  }
  return 1;
}

/* The guard: a node knows a higher token (stale), or a majority of counted
 * nodes admitted it (any higher token was admitted by a majority, which
 * shares a node with this one, and that node would have said stale). */
static int guard_decided(redlock *r, const slot *s, void *ctx) {
  (void)ctx;
  int admitted = 0;
  for (int i = 0; i < r->n; i++) {
    int pending;
    const dlock__reply *v = answer(&s[i], 0, &pending);
    if (!v || v->type != DLOCK__REPLY_ARRAY || v->elements != 2 || v->element[0]->type != DLOCK__REPLY_INTEGER)
      continue;
    char why[300];
    if (v->element[0]->integer != 1) return 1;
    if (counts(r, i, why, sizeof why)) admitted++;
  }
  return admitted >= r->quorum;
}

/* Release, withdraw, force release: for every call, a node deleted our key
 * and the nodes that say another owner holds it, with those still to
 * answer, can no longer make a majority (the answer is then 1 whatever they
 * say). A node still owing a reply keeps the command it was sent: it runs
 * there when the node answers again. */
static int delete_decided(redlock *r, const slot *s, void *ctx) {
  size_t n = *(const size_t *)ctx;
  for (size_t j = 0; j < n; j++) {
    int one = 0, other = 0;
    for (int i = 0; i < r->n; i++) {
      int pending;
      const dlock__reply *v = answer(&s[i], j, &pending);
      if (pending)
        other++;
      else if (v && v->type == DLOCK__REPLY_INTEGER && v->integer == 1)
        one++;
      else if (v && v->type == DLOCK__REPLY_INTEGER && v->integer < 0)
        other++;
    }
    if (!one || other >= r->quorum) return 0;
  }
  return 1;
}

static void note_lease(redlock *r, const dlock__script_call *call, int argi) {
  if (call->nargs <= argi) return;
  int64_t lease = strtoll(call->args[argi], NULL, 10);
  pthread_mutex_lock(&r->mu);
  if (lease > r->max_lease_ms) r->max_lease_ms = lease;
  pthread_mutex_unlock(&r->mu);
}

/* A growing message buffer. */
typedef struct msg {
  char buf[2048];
  size_t o;
} msg;

static void add(msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(msg *m, const char *fmt, ...) {
  if (m->o >= sizeof m->buf - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(m->buf + m->o, sizeof m->buf - m->o, fmt, ap);
  va_end(ap);
  if (k > 0) m->o += (size_t)k;
  if (m->o > sizeof m->buf - 1) m->o = sizeof m->buf - 1;
}

static unsigned all_nodes(const redlock *r) { return r->n >= 32 ? ~0u : (1u << r->n) - 1; }

static int64_t pernode_ms(const redlock *r, int64_t lease) {
  int64_t d = lease / 10;
  if (d > r->command_timeout_ms) d = r->command_timeout_ms;
  return d < 1 ? 1 : d;
}

/* Delete our token on the nodes in 'mask' (withdraw.lua with no waiter id):
 * the bits of the nodes where that could not be confirmed go to '*failed'. */
static void release_all(redlock *r, const dlock__script_call *acq, unsigned mask, dlock_mono_ms deadline,
                        unsigned *failed) {
  dlock__script_call w;
  memset(&w, 0, sizeof w);
  w.script = DLOCK__SCRIPT_WITHDRAW;
  w.nkeys = acq->nkeys;
  memcpy(w.keys, acq->keys, sizeof w.keys);
  memcpy(w.keylens, acq->keylens, sizeof w.keylens);
  w.args[0] = "";
  w.arglens[0] = 0;
  w.args[1] = acq->args[0];
  w.arglens[1] = acq->arglens[0];
  w.nargs = 2;
  run x;
  *failed = 0;
  if (run_calls(r, &w, 1, mask, deadline, &x) != 0) {
    *failed = mask;
    return;
  }
  for (int i = 0; i < r->n; i++)
    if (((mask >> i) & 1) && (x.s[i].rc || !x.res[i] || x.res[i]->type == DLOCK__REPLY_ERROR)) *failed |= 1u << i;
  run_free(r, &x);
}

static int popcount(unsigned mask) {
  int n = 0;
  for (; mask; mask &= mask - 1) n++;
  return n;
}

/* After a waiter's acquire succeeded: leave the wait queues of the nodes
 * in 'mask' (held by others when we asked, so the acquire queued us
 * there), so that their next release does not hand the lock to a waiter
 * that is gone. withdraw.lua with our id and no token: it takes nothing
 * back. Best effort: a registration left behind expires within seconds. */
static void leave_queues(redlock *r, const dlock__script_call *acq, unsigned mask, dlock_mono_ms deadline) {
  dlock__script_call w;
  memset(&w, 0, sizeof w);
  w.script = DLOCK__SCRIPT_WITHDRAW;
  w.nkeys = acq->nkeys;
  memcpy(w.keys, acq->keys, sizeof w.keys);
  memcpy(w.keylens, acq->keylens, sizeof w.keylens);
  w.args[0] = acq->args[2];
  w.arglens[0] = acq->arglens[2];
  w.args[1] = "";
  w.arglens[1] = 0;
  w.nargs = 2;
  run x;
  if (run_calls(r, &w, 1, mask, deadline, &x) == 0) run_free(r, &x);
}

/* A call of rl_marker.lua: 'mode' "r" (read, 'list' our look window in ms:
 * how long a marker it writes may race another client's look) or "p"
 * (promote the nodes whose marker's 'since' is in 'list'), with the longest
 * lease we know. */
static void marker_call(redlock *r, dlock__script_call *m, const char *mode, const char *lease, const char *list) {
  memset(m, 0, sizeof *m);
  m->script = DLOCK__SCRIPT_RL_MARKER;
  m->nkeys = 1;
  m->keys[0] = r->marker_key;
  m->keylens[0] = strlen(r->marker_key);
  m->args[0] = mode;
  m->arglens[0] = 1;
  m->args[1] = lease;
  m->arglens[1] = strlen(lease);
  m->nargs = 2;
  if (list) {
    m->args[2] = list;
    m->arglens[2] = strlen(list);
    m->nargs = 3;
  }
}

/* The restart rule, from every node's marker (x.res[2i]): a node without
 * one (held out) may count once its own clock has passed the longest lease
 * recorded on any node, plus the drift, since a client first found it so;
 * and every node may count only when every node answered and no node had a
 * marker older than one look (rl_marker.lua answers -1 where it wrote it
 * now; a held-out marker younger than the look window its writer recorded
 * (the writer's command timeout, not ours: review 5, finding 2), on its
 * node's clock, is another client's look racing ours at a new deployment;
 * one from the node's future, its clock stepped back since, is not: review
 * 5, finding 1): a new
 * deployment (or one where every node lost its data, which nothing can tell
 * apart). A marker that counts, a renewal's or a lock-taking acquire's
 * record (2), or a held-out one
 * older than that is evidence of a deployment in use: a lock may be held on
 * nodes that lost their data since, taken while the held-out nodes did not
 * count (review 4, finding 1: nodes emptied a lease apart), so the held-out
 * node's quarantine must run out before it counts. A node that answered
 * nothing keeps what we knew. 'promote' gets the 'since' of the nodes to
 * promote (comma-separated). */
static void judge_markers(redlock *r, const run *x, char *promote, size_t len) {
  int all = 1, any = 0;
  for (int i = 0; i < r->n; i++) {
    const dlock__reply *v = x->s[i].rc ? NULL : x->res[(size_t)i * 2];
    /* An error reply (-BUSY, -LOADING, NOPERM) is not an answer about the
     * marker: that node may be the one that kept it (review 3, finding 1). */
    if (!marker_reply_ok(v)) all = 0;
    if (v) note_marker(r, i, v);
  }
  pthread_mutex_lock(&r->mu);
  int64_t longest = longest_lease(r);
  for (int i = 0; i < r->n && all; i++) {
    const dlock__reply *v = x->res[(size_t)i * 2];
    long long c = v->element[0]->integer; /* -1 written now, 0 held out, 1 counts, 2 a renewal's record */
    const rl_node *nd = &r->node[i];
    int64_t look = nd->q_look_ms < longest ? nd->q_look_ms : longest;
    int racing = nd->q_age_ms >= 0 && nd->q_age_ms < look;
    if (c > 0 || (c == 0 && !racing)) any = 1; /* a marker from before this look */
  }
  size_t o = 0;
  promote[0] = '\0';
  for (int i = 0; i < r->n; i++) {
    rl_node *nd = &r->node[i];
    if (x->s[i].rc || !marker_reply_ok(x->res[(size_t)i * 2]) || nd->marker != 0) continue;
    if ((all && !any) || nd->q_age_ms >= longest + longest / 100 + 2) {
      nd->marker = 2;
      int k = snprintf(promote + o, len - o, "%s%s", o ? "," : "", nd->q_since);
      if (k > 0 && (size_t)k < len - o) o += (size_t)k;
    }
  }
  pthread_mutex_unlock(&r->mu);
}

static int rl_acquire(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  *reply = NULL;
  call->maybe_ran = 0;
  call->replicas = -1;
  note_lease(r, call, 1);
  int64_t lease = call->nargs > 1 ? strtoll(call->args[1], NULL, 10) : 0;
  int64_t per = pernode_ms(r, lease);
  call->rl_tie = 0;
  call->rl_pttl = -1;
  call->rl_need = 1;
  /* A waiter (ARGV[3], its id, not empty) joins the wait queue of every
   * node where the lock is held: each node's release hands the lock to its
   * own first waiter and publishes to it, so where the nodes agree on the
   * order, they all hand it to the same waiter (docs/redlock.md, "Waiting"). */
  /* In front of the acquire, in the same round trip, each node's restart
   * marker (the restart rule), which announces the longest lease we know. */
  char ls[24], lw[24];
  pthread_mutex_lock(&r->mu);
  int64_t longest = longest_lease(r);
  snprintf(ls, sizeof ls, "%" PRId64, longest);
  snprintf(lw, sizeof lw, "%" PRId64, r->command_timeout_ms < longest ? (int64_t)r->command_timeout_ms : longest);
  pthread_mutex_unlock(&r->mu);
  dlock__script_call a[2];
  marker_call(r, &a[0], "r", ls, lw);
  a[1] = *call;
  dlock_mono_ms t0 = dlock_mono_now();
  run x;
  int rc = run_calls_ex(r, a, 2, all_nodes(r), t0 + per, &x, acquire_decided, NULL);
  if (rc) return rc;
  char promote[DLOCK__REDLOCK_MAX * 25] = "";
  judge_markers(r, &x, promote, sizeof promote);
  int ok = 0, busy = 0, down = 0, out = 0;
  unsigned okmask = 0, maybe = 0, busymask = 0, answered = 0;
  uint64_t fmax = 0;
  msg held, unreach, excl;
  memset(&held, 0, sizeof held);
  memset(&unreach, 0, sizeof unreach);
  memset(&excl, 0, sizeof excl);
  const dlock__reply *errrep = NULL;
  for (int i = 0; i < r->n; i++) {
    const char *name = r->node[i].node.ep.display;
    const dlock__reply *v = x.res[(size_t)i * 2 + 1];
    if (x.s[i].rc || !v) {
      down++;
      if (x.s[i].sent) maybe |= 1u << i;
      add(&unreach, "%s%s", unreach.o ? "; " : "", x.s[i].err);
      continue;
    }
    if (v->type == DLOCK__REPLY_ERROR) {
      down++;
      if (!errrep) errrep = v;
      add(&unreach, "%s%s: %s", unreach.o ? "; " : "", name, v->str);
      continue;
    }
    /* {1, fence} (a fence 0 counts here: the write-back raises it) or
     * {0, pttl}, as every kind's acquire answers (lock.c decodes the same). */
    uint64_t f = 0;
    long long pttl = -1;
    int got = dlock__grant_decode(v, &f, &pttl);
    if (got != DLOCK__GRANT_OK && got != DLOCK__GRANT_WAIT) got = -1;
    if (got == 0 || got == 1) answered |= 1u << i;
    if (got == 1) {
      okmask |= 1u << i;
      if (f > fmax) fmax = f;
      char why[300];
      if (counts(r, i, why, sizeof why)) {
        ok++;
      } else {
        out++;
        add(&excl, "%s%s", excl.o ? "; " : "", why);
      }
    } else if (got == 0) {
      busy++;
      busymask |= 1u << i;
      if (pttl >= 0 && (call->rl_pttl < 0 || pttl < call->rl_pttl)) call->rl_pttl = pttl;
      add(&held, "%s%s", held.o ? ", " : "", name);
    } else {
      down++;
      add(&unreach, "%s%s: unexpected reply", unreach.o ? "; " : "", name);
    }
  }
  /* A script error (WRONGTYPE, NOPERM, EFENCE) everywhere is the caller's to
   * map, as on one node; mixed with answers it is reported per node. */
  if (errrep && ok == 0 && busy == 0 && down == r->n && !maybe) {
    *reply = copy_reply(errrep);
    run_free(r, &x);
    return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  run_free(r, &x);
  char slow[200] = "", fencemsg[600] = "";
  if (ok >= r->quorum) {
    /* The fence write-back: raise a majority's counters to the highest
     * fence the acquiring nodes issued, before the acquire counts. */
    char fs[24];
    snprintf(fs, sizeof fs, "%" PRIu64, fmax);
    /* The write-back goes to every node that answered, also those held by
     * another owner, so that a later majority finds F even when some node
     * of ours lost its data; with it, the promotion of the nodes found fit
     * to count (rl_marker.lua 'p'). Confirmed: by a majority of the counted
     * nodes that took it, each with its promotion where it needed one. */
    dlock__script_call fc[2];
    memset(&fc[0], 0, sizeof fc[0]);
    fc[0].script = DLOCK__SCRIPT_RL_FENCE;
    fc[0].nkeys = call->nkeys;
    memcpy(fc[0].keys, call->keys, sizeof fc[0].keys);
    memcpy(fc[0].keylens, call->keylens, sizeof fc[0].keylens);
    fc[0].args[0] = fs;
    fc[0].arglens[0] = strlen(fs);
    fc[0].args[1] = call->args[0];
    fc[0].arglens[1] = call->arglens[0];
    fc[0].nargs = 2;
    /* Also where no node is promoted but some are held out: their markers
     * get the record of a lock taken while they were out (rl_marker.lua). */
    int held_out = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
      if (((answered >> i) & 1) && r->node[i].marker == 0) held_out = 1;
    pthread_mutex_unlock(&r->mu);
    size_t nfc = promote[0] || held_out ? 2 : 1;
    if (nfc == 2) marker_call(r, &fc[1], "p", ls, promote);
    int confirmed = 0;
    msg fm;
    memset(&fm, 0, sizeof fm);
    dlock_mono_ms fdl = dlock_mono_now() + per;
    if (fdl > t0 + lease) fdl = t0 + lease;
    if (run_calls(r, fc, nfc, answered, fdl, &x) == 0) {
      for (int i = 0; i < r->n; i++) {
        if (!((answered >> i) & 1)) continue;
        const dlock__reply *v = x.res[(size_t)i * nfc];
        const dlock__reply *p = nfc == 2 ? x.res[(size_t)i * nfc + 1] : NULL;
        int promoted = p && p->type == DLOCK__REPLY_INTEGER && p->integer == 1;
        pthread_mutex_lock(&r->mu);
        int need = r->node[i].marker == 2;
        if (need && promoted)
          r->node[i].marker = 1;
        else if (need && p && p->type == DLOCK__REPLY_INTEGER)
          r->node[i].marker = 0; /* emptied since the look */
        pthread_mutex_unlock(&r->mu);
        if (!((okmask >> i) & 1)) continue;
        char why[300];
        if (v && v->type == DLOCK__REPLY_INTEGER && v->integer == 1 && (!need || promoted)) {
          if (counts(r, i, why, sizeof why)) confirmed++;
        } else {
          if (x.s[i].rc)
            add(&fm, "%s%s", fm.o ? "; " : "", x.s[i].err);
          else if (need && !promoted && v && v->type == DLOCK__REPLY_INTEGER)
            add(&fm, "%s%s: its restart marker changed since the acquire (emptied?)", fm.o ? "; " : "",
                r->node[i].node.ep.display);
          else
            add(&fm, "%s%s: %s", fm.o ? "; " : "", r->node[i].node.ep.display,
                v && v->type == DLOCK__REPLY_ERROR ? v->str : "unexpected reply");
        }
      }
      run_free(r, &x);
    }
    dlock_mono_ms t1 = dlock_mono_now();
    int64_t validity = lease - (t1 - t0) - (lease / 100 + 2);
    if (confirmed >= r->quorum && validity > 0) {
      if (busymask && call->arglens[2]) leave_queues(r, call, busymask, dlock_mono_now() + per);
      *reply = mk_pair(1, mk_str(DLOCK__REPLY_STRING, fs));
      return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    if (confirmed < r->quorum)
      snprintf(fencemsg, sizeof fencemsg, " the fence write-back was confirmed by only %d (%s)", confirmed,
               fm.o ? fm.buf : "nodes not counted");
    else
      snprintf(slow, sizeof slow,
               " too slow: the validity was spent (%" PRId64 " ms elapsed of a %" PRId64 " ms lease, less %" PRId64
               " ms drift)",
               (int64_t)(t1 - t0), lease, lease / 100 + 2);
  }
  /* Not acquired: delete our token everywhere, also where no reply came. */
  unsigned failed = 0;
  release_all(r, call, all_nodes(r), dlock_mono_now() + per, &failed);
  failed &= okmask | maybe;
  msg m;
  memset(&m, 0, sizeof m);
  int status = busy >= r->quorum ? DLOCK_EBUSY : DLOCK_EQUORUM;
  /* Our token may remain on a majority (it took, or may have, and the
   * release was not confirmed there): nobody else can take the lock before
   * the lease ends, and it may be ours. Not "not acquired": unknown (issue
   * 22 item 10). */
  int unknown = popcount(failed) >= r->quorum;
  if (unknown) status = DLOCK_EUNKNOWN;
  /* Nobody else holds a majority: contenders split the nodes (or we were
   * too slow). No release is coming to wake us; try again soon. */
  call->rl_tie = busy < r->quorum && okmask != 0;
  /* Wake at the hand-offs of a majority, not at the first: the nodes that
   * were free for us and count toward a quorum count without one (a node
   * that took the try but does not count, restarted recently, does not:
   * waking without a majority is the early try this avoids); no more than
   * the nodes we queued on. */
  int need = r->quorum - ok, queued_on = popcount(busymask);
  if (need > queued_on) need = queued_on;
  call->rl_need = need < 1 ? 1 : need;
  if (unknown)
    add(&m,
        "outcome unknown: our token may remain on a majority of the Redlock nodes until its lease (%" PRId64
        " ms) ends, so the lock may be held by it: wait for the lease to end before trying again, or, when no "
        "other holder can exist, force-release it (dlock release --force NAME). %d of %d nodes took it (%d "
        "needed)%s%s%s",
        lease, ok, r->n, r->quorum, ok >= r->quorum ? ", but" : "", slow, fencemsg);
  else if (ok >= r->quorum)
    add(&m, "not acquired: %d of %d Redlock nodes took it (%d needed), but%s%s", ok, r->n, r->quorum, slow, fencemsg);
  else
    add(&m, "%s: %d of %d Redlock nodes confirmed, %d needed",
        status == DLOCK_EBUSY ? "held by another owner" : "no quorum", ok, r->n, r->quorum);
  if (busy) add(&m, "; held by another owner on %d (%s)", busy, held.buf);
  if (down) add(&m, "; unreachable or failing on %d (%s)", down, unreach.buf);
  if (out) add(&m, "; not counted on %d (%s)", out, excl.buf);
  if (failed) {
    int k = 0;
    for (int i = 0; i < r->n; i++) k += (failed >> i) & 1;
    add(&m, "; the release could not be confirmed on %d (", k);
    for (int i = 0, first = 1; i < r->n; i++)
      if ((failed >> i) & 1) {
        add(&m, "%s%s", first ? "" : ", ", r->node[i].node.ep.display);
        first = 0;
      }
    add(&m, "): our token may remain there until its lease (%" PRId64 " ms) ends", lease);
  } else {
    add(&m, "; released again on every node");
  }
  return dlock__error(status, "%s", m.buf);
}

/* Re-seed our key on the nodes in 'mask' where it is absent (rl_extend.lua:
 * SET NX, and the restart marker's quarantine where the marker is gone).
 * Returns how many of them now hold our key with a marker that counts
 * (rl_extend.lua answers 1 or 3); '*other' (if not NULL) gets the nodes
 * where another owner's key is (-1). */
static int seed_absent(redlock *r, const dlock__script_call *call, unsigned mask, dlock_mono_ms limit,
                       unsigned *other) {
  dlock__script_call seed = *call;
  seed.script = DLOCK__SCRIPT_RL_EXTEND;
  if (seed.nkeys < DLOCK__SCRIPT_MAX_ARGS) { /* the restart marker: the quarantine's start where it is gone */
    seed.keys[seed.nkeys] = r->marker_key;
    seed.keylens[seed.nkeys++] = strlen(r->marker_key);
  }
  dlock_mono_ms deadline = dlock_mono_now() + r->command_timeout_ms;
  if (limit < deadline) deadline = limit;
  run y;
  int took = 0;
  if (other) *other = 0;
  if (run_calls(r, &seed, 1, mask, deadline, &y) != 0) return 0;
  for (int i = 0; i < r->n; i++) {
    const dlock__reply *v = (mask >> i & 1u) ? y.res[i] : NULL;
    if (v && v->type == DLOCK__REPLY_INTEGER && (v->integer == 1 || v->integer == 3)) took++;
    if (other && v && v->type == DLOCK__REPLY_INTEGER && v->integer == -1) *other |= 1u << i;
  }
  run_free(r, &y);
  return took;
}

/* Renewals: per call, 1 when a majority confirmed (extend.lua: our token
 * still there, lease set), -1, -2 or 0 when the hold is gone for good,
 * else an EQUORUM error reply (the watchdog retries it; dlock_mutex_extend
 * reports it). Only once a majority confirmed are the nodes that lost the
 * key (restarted empty) re-seeded with our token (rl_extend.lua: only where
 * the key is absent; where the restart marker is gone too, its quarantine
 * starts there): a lock released or expired on a majority is never
 * brought back this way. Before that, when too few confirmed but the
 * counted nodes without the key would make a majority, those are taken
 * (SET NX, while the hold is valid locally, so it cannot have expired
 * there) and count where their restart marker counts (rl_extend.lua: 3).
 * Before the deadline the hold is gone for good only when another owner's
 * key (or the tombstone of a forced release of our token) is on a
 * majority of counted nodes (a node that is not counted may carry a crashed
 * contender's key: no evidence; review 4, finding 2): another owner's key on a minority (a contender's failed
 * attempt, given back at once or at its lease's end) and a key gone on a
 * node that is not counted (restarted, held out) or could not be taken now
 * may still turn into a majority before the deadline: the renewal is tried
 * again (review 3, finding 3). After the deadline, as before: lost when the
 * nodes that may still confirm cannot make a majority. */
static int rl_extend(redlock *r, dlock__script_call *calls, size_t n, dlock__reply **replies, dlock_mono_ms limit) {
  for (size_t j = 0; j < n; j++) {
    note_lease(r, &calls[j], 1);
    calls[j].maybe_ran = 0;
    calls[j].replicas = -1;
  }
  dlock_mono_ms deadline = dlock_mono_now() + r->command_timeout_ms;
  if (limit < deadline) deadline = limit;
  run x;
  int rc = run_calls_ex(r, calls, n, all_nodes(r), deadline, &x, extend_decided, &n);
  if (rc) return rc;
  char why[DLOCK__REDLOCK_MAX][300];
  int counted[DLOCK__REDLOCK_MAX];
  for (int i = 0; i < r->n; i++) counted[i] = counts(r, i, why[i], sizeof why[i]);
  for (size_t j = 0; j < n; j++) {
    int conf = 0, neg = 0, others = 0, failed = 0, tomb = 0;
    unsigned absent = 0;
    msg m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < r->n; i++) {
      const dlock__reply *v = x.res[(size_t)i * n + j];
      if (!v || v->type != DLOCK__REPLY_INTEGER) {
        failed++;
        if (x.s[i].rc)
          add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
        else
          add(&m, "%s%s: %s", m.o ? "; " : "", r->node[i].node.ep.display, v ? v->str : "no reply");
      } else if (v->integer == 1) {
        if (counted[i]) {
          conf++;
        } else {
          failed++;
          add(&m, "%s%s", m.o ? "; " : "", why[i]);
        }
      } else if (v->integer == 0) {
        absent |= 1u << i;
        add(&m, "%s%s: the key is gone%s%s", m.o ? "; " : "", r->node[i].node.ep.display, counted[i] ? "" : ", and ",
            counted[i] ? "" : why[i]);
      } else {
        /* Another owner's key (or a forced release's tombstone) decides
         * "taken" only on a counted node: a node that restarted empty or
         * is held out may carry a crashed contender's key, which is no
         * majority of the counted nodes (review 4, finding 2). */
        if (counted[i])
          neg++;
        else
          others++;
        if (v->integer == -2) tomb++;
        add(&m, "%s%s: %s%s%s", m.o ? "; " : "", r->node[i].node.ep.display,
            v->integer == -2 ? "deleted by a forced release" : "held by another owner", counted[i] ? "" : ", and ",
            counted[i] ? "" : why[i]);
      }
    }
    /* Too few confirmed, but counted nodes without the key could make a
     * majority (the acquire did not take them, or the key was given back
     * there; a node that restarted since is held out): while the hold is
     * valid no one else holds a majority, so take them as an acquire would
     * (SET NX), counting only those whose restart marker counts. */
    unsigned takeable = 0;
    int ntake = 0;
    for (int i = 0; i < r->n; i++)
      if ((absent >> i & 1u) && counted[i]) {
        takeable |= 1u << i;
        ntake++;
      }
    if (conf < r->quorum && conf + ntake >= r->quorum && dlock_mono_now() < limit) {
      unsigned other = 0;
      int took = seed_absent(r, &calls[j], takeable, limit, &other);
      conf += took;
      neg += popcount(other); /* taken by another owner meanwhile */
      if (took) add(&m, "; taken again on %d node%s without the key", took, took == 1 ? "" : "s");
      if (other) add(&m, "; another owner took %d of them meanwhile", popcount(other));
      absent &= ~takeable;
    }
    int in_time = dlock_mono_now() < limit;
    if (conf >= r->quorum && in_time) {
      replies[j] = mk_int(1);
      if (absent) (void)seed_absent(r, &calls[j], absent, limit, NULL); /* best effort */
    } else if (in_time ? neg >= r->quorum : conf + failed < r->quorum) {
      /* -2: a forced release deleted our hold (its tombstone names our
       * token), as extend.lua says on one node: DLOCK_LOST_DELETED. */
      replies[j] = mk_int(tomb ? -2 : neg || others ? -1 : 0);
    } else {
      char text[2200];
      snprintf(text, sizeof text, "EQUORUM renewal confirmed by %d of %d Redlock nodes, %d needed: %s", conf, r->n,
               r->quorum, m.buf);
      replies[j] = mk_str(DLOCK__REPLY_ERROR, text);
    }
  }
  run_free(r, &x);
  for (size_t j = 0; j < n; j++)
    if (!replies[j]) {
      for (size_t k = 0; k < n; k++) {
        dlock__reply_free(replies[k]);
        replies[k] = NULL;
      }
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
  return 0;
}

/* Release, withdraw, force release: every node. Per call: 1 when a node
 * deleted our key (the rest expire with the lease) unless others hold a
 * majority (-1, or -2 when a node holds the tombstone of a forced release
 * of our token); when no node answered 1 and one may have run it without
 * answering, the outcome is unknown (an error with maybe_ran). */
static int rl_delete(redlock *r, dlock__script_call *calls, size_t n, dlock__reply **replies) {
  for (size_t j = 0; j < n; j++) calls[j].maybe_ran = 0, calls[j].replicas = -1;
  run x;
  /* Every node, each until the command timeout or until the outcome is
   * decided (delete_decided): a node still owing a reply then gets the
   * grace, and the command sent there runs when it answers again. */
  int rc = run_calls_ex(r, calls, n, all_nodes(r), dlock_mono_now() + r->command_timeout_ms, &x, delete_decided, &n);
  if (rc) return rc;
  for (size_t j = 0; j < n && !rc; j++) {
    int one = 0, neg = 0, zero = 0, maybe = 0, answered = 0, tomb = 0;
    const dlock__reply *errrep = NULL;
    msg m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < r->n; i++) {
      const dlock__reply *v = x.res[(size_t)i * n + j];
      if (!v) {
        if (x.s[i].sent) maybe++;
        add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
      } else if (v->type != DLOCK__REPLY_INTEGER) {
        if (!errrep) errrep = v;
        add(&m, "%s%s: %s", m.o ? "; " : "", r->node[i].node.ep.display,
            v->type == DLOCK__REPLY_ERROR ? v->str : "unexpected reply");
      } else {
        answered++;
        if (v->integer == 1)
          one++;
        else if (v->integer < 0)
          neg++, tomb += v->integer == -2;
        else
          zero++;
      }
    }
    if (neg >= r->quorum)
      replies[j] = mk_int(tomb ? -2 : -1);
    else if (one)
      replies[j] = mk_int(1);
    else if (maybe || (!answered && !errrep)) {
      calls[j].maybe_ran = maybe > 0;
      rc = dlock__error(maybe ? DLOCK_ETIMEDOUT : DLOCK_ECONNECT, "%s on no Redlock node confirmed (%s)",
                        dlock__script_name(calls[j].script), m.buf);
    } else if (!answered)
      replies[j] = copy_reply(errrep);
    else
      replies[j] = mk_int(tomb ? -2 : neg ? -1 : 0);
    if (!rc && !replies[j]) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  run_free(r, &x);
  if (rc)
    for (size_t j = 0; j < n; j++) {
      dlock__reply_free(replies[j]);
      replies[j] = NULL;
    }
  return rc;
}

/* info: the majority's view. {exists, pttl, fence, since, info, last fence,
 * waiters, mine}: held (and mine) only when a majority says so. The hold's
 * fence is the one a majority of the holding nodes recorded (the acquire's
 * write-back): a node that answered the acquire after the majority decided
 * keeps its own, later proposal, which the holder never had. Without such a
 * majority (a write-back under way), and for the last fence issued, the
 * highest any node reports. */
static int rl_info(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  call->maybe_ran = 0;
  call->replicas = -1;
  run x;
  int rc = run_calls(r, call, 1, all_nodes(r), dlock_mono_now() + r->command_timeout_ms, &x);
  if (rc) return rc;
  int exists = 0, mine = 0, best = -1, any = -1;
  const dlock__reply *errrep = NULL;
  uint64_t fmax = 0, lmax = 0, holding[DLOCK__REDLOCK_MAX];
  int nholding = 0;
  msg m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < r->n; i++) {
    const dlock__reply *v = x.res[i];
    if (!v) {
      add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
      continue;
    }
    if (v->type != DLOCK__REPLY_ARRAY || v->elements < 8) {
      if (!errrep) errrep = v;
      continue;
    }
    if (any < 0) any = i;
    uint64_t f;
    if (v->element[2]->type == DLOCK__REPLY_STRING && !dlock__parse_fence(v->element[2]->str, v->element[2]->len, &f)) {
      if (f > fmax) fmax = f;
      if (v->element[0]->integer == 1) holding[nholding++] = f;
    }
    if (v->element[5]->type == DLOCK__REPLY_STRING && !dlock__parse_fence(v->element[5]->str, v->element[5]->len, &f) &&
        f > lmax)
      lmax = f;
    if (v->element[0]->integer == 1) {
      exists++;
      if (best < 0) best = i;
      if (v->element[7]->integer == 1) mine++;
    }
  }
  if (any < 0) {
    if (errrep) *reply = copy_reply(errrep);
    run_free(r, &x);
    if (errrep) return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
    return dlock__error(DLOCK_ECONNECT, "no Redlock node answered (%s)", m.buf);
  }
  int held = exists >= r->quorum;
  for (int i = 0; held && i < nholding; i++) {
    int same = 0;
    for (int j = 0; j < nholding; j++) same += holding[j] == holding[i];
    if (same >= r->quorum) {
      fmax = holding[i];
      break;
    }
  }
  dlock__reply *out = copy_reply(x.res[held ? best : any]);
  run_free(r, &x);
  if (!out) return dlock__error(DLOCK_ENOMEM, "out of memory");
  out->element[0]->integer = held;
  out->element[7]->integer = mine >= r->quorum;
  char fs[24];
  if (held && fmax) {
    snprintf(fs, sizeof fs, "%" PRIu64, fmax);
    dlock__reply_free(out->element[2]);
    out->element[2] = mk_str(DLOCK__REPLY_STRING, fs);
  }
  if (lmax) {
    snprintf(fs, sizeof fs, "%" PRIu64, lmax);
    dlock__reply_free(out->element[5]);
    out->element[5] = mk_str(DLOCK__REPLY_STRING, fs);
  }
  if (!out->element[2] || !out->element[5]) {
    dlock__reply_free(out);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  *reply = out;
  return 0;
}

/* ---- Scheduler and guard ---- */

/* Raise the fence counters of the nodes in 'mask' to 'fs' (rl_fence.lua,
 * the acquire's write-back); how many counted nodes confirmed. */
static int fence_back(redlock *r, const dlock__script_call *call, const char *fs, unsigned mask, dlock_mono_ms deadline,
                      msg *why) {
  dlock__script_call fc;
  memset(&fc, 0, sizeof fc);
  fc.script = DLOCK__SCRIPT_RL_FENCE;
  fc.nkeys = DLOCK__K_COUNT;
  memcpy(fc.keys, call->keys, sizeof fc.keys);
  memcpy(fc.keylens, call->keylens, sizeof fc.keylens);
  fc.args[0] = fs;
  fc.arglens[0] = strlen(fs);
  fc.args[1] = call->args[1]; /* the run token (claim and delay scripts) */
  fc.arglens[1] = call->arglens[1];
  fc.nargs = 2;
  run x;
  int confirmed = 0;
  if (run_calls(r, &fc, 1, mask, deadline, &x) != 0) {
    add(why, "%s%s", why->o ? "; " : "", dlock_last_error());
    return 0;
  }
  for (int i = 0; i < r->n; i++) {
    if (!((mask >> i) & 1)) continue;
    const dlock__reply *v = x.res[i];
    char no[300];
    if (v && v->type == DLOCK__REPLY_INTEGER && v->integer == 1 && counts(r, i, no, sizeof no))
      confirmed++;
    else if (x.s[i].rc)
      add(why, "%s%s", why->o ? "; " : "", x.s[i].err);
    else
      add(why, "%s%s: fence write-back %s", why->o ? "; " : "", r->node[i].node.ep.display,
          v && v->type == DLOCK__REPLY_ERROR ? v->str : "not counted");
  }
  run_free(r, &x);
  return confirmed;
}

/* Give back our part of a claim on every node (rl_sched_unclaim.lua): the
 * job lock, and unless 'keep_tick' the tick record too. */
static void unclaim_all(redlock *r, const dlock__script_call *call, int keep_tick, dlock_mono_ms deadline) {
  dlock__script_call u;
  memset(&u, 0, sizeof u);
  u.script = DLOCK__SCRIPT_RL_SCHED_UNCLAIM;
  u.nkeys = DLOCK__K_COUNT + 1;
  memcpy(u.keys, call->keys, sizeof u.keys);
  memcpy(u.keylens, call->keylens, sizeof u.keylens);
  u.args[0] = call->args[1];
  u.arglens[0] = call->arglens[1];
  u.args[1] = call->script == DLOCK__SCRIPT_SCHED_DELAY ? "1" : "0";
  u.arglens[1] = 1;
  u.args[2] = keep_tick ? "1" : "0";
  u.arglens[2] = 1;
  u.nargs = 3;
  run x;
  if (run_calls(r, &u, 1, all_nodes(r), deadline, &x) == 0) run_free(r, &x);
}

static const char *el_s(const dlock__reply *v, size_t i) {
  return v && v->type == DLOCK__REPLY_ARRAY && i < v->elements && v->element[i]->type == DLOCK__REPLY_STRING
             ? v->element[i]->str
             : "";
}

/* A tick claim (sched_claim.lua, sched_delay.lua) counts only when a
 * majority of the counted nodes answered "yours" for our run token, and the
 * highest of their fences was written back to a majority (as for an
 * acquire). Otherwise our part is given back on every node; when no other
 * claimer holds a majority either (claimers split the nodes), the claim is
 * tried again after a random delay, at most 3 times. The answer is then the
 * majority's: ahead, wait, busy (running), or claimed by another node. */
static int rl_sched_claim(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  *reply = NULL;
  call->maybe_ran = 0;
  call->replicas = -1;
  note_lease(r, call, 2); /* lock_at_most_for is the job lock's lease */
  for (int attempt = 0;; attempt++) {
    dlock_mono_ms t0 = dlock_mono_now();
    run x;
    int rc = run_calls(r, call, 1, all_nodes(r), t0 + r->command_timeout_ms, &x);
    if (rc) return rc;
    int yours = 0, claimed = 0, busy = 0, ahead = 0, wait = 0, down = 0, failed = 0;
    unsigned yoursmask = 0;
    int first_yours = -1, first_claimed = -1, first_busy = -1, first_ahead = -1, first_wait = -1;
    uint64_t fmax = 0;
    const dlock__reply *errrep = NULL;
    msg m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < r->n; i++) {
      const char *name = r->node[i].node.ep.display;
      const dlock__reply *v = x.res[i];
      if (x.s[i].rc || !v) {
        down++;
        add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
        continue;
      }
      if (v->type == DLOCK__REPLY_ERROR) {
        failed++;
        if (!errrep) errrep = v;
        add(&m, "%s%s: %s", m.o ? "; " : "", name, v->str);
        continue;
      }
      if (v->type != DLOCK__REPLY_ARRAY || v->elements < 3 || v->element[0]->type != DLOCK__REPLY_INTEGER) {
        failed++;
        add(&m, "%s%s: unexpected reply", m.o ? "; " : "", name);
        continue;
      }
      const char *what = el_s(v, 1);
      uint64_t f = 0;
      char why[300];
      if (v->element[0]->integer == 1) {
        if (dlock__parse_fence(what, strlen(what), &f) != 0 || f == 0) {
          failed++;
          add(&m, "%s%s: the claim gave fence '%.40s'", m.o ? "; " : "", name, what);
        } else if (!counts(r, i, why, sizeof why)) {
          failed++;
          yoursmask |= 1u << i; /* given back below if the claim fails */
          add(&m, "%s%s", m.o ? "; " : "", why);
        } else {
          yours++;
          yoursmask |= 1u << i;
          if (f > fmax) fmax = f;
          if (first_yours < 0) first_yours = i;
        }
      } else if (!strcmp(what, "ahead")) {
        ahead++;
        if (first_ahead < 0) first_ahead = i;
      } else if (!strcmp(what, "wait")) {
        wait++;
        if (first_wait < 0) first_wait = i;
      } else if (!strcmp(what, "busy") || !strcmp(what, "running")) {
        busy++;
        if (first_busy < 0) first_busy = i;
        add(&m, "%s%s: the previous run still holds the job lock", m.o ? "; " : "", name);
      } else {
        claimed++;
        if (first_claimed < 0) first_claimed = i;
        add(&m, "%s%s: claimed by %s", m.o ? "; " : "", name, el_s(v, 2));
      }
    }
    if (yours >= r->quorum) {
      char fs[24];
      snprintf(fs, sizeof fs, "%" PRIu64, fmax);
      msg fm;
      memset(&fm, 0, sizeof fm);
      int confirmed = fence_back(r, call, fs, yoursmask, dlock_mono_now() + r->command_timeout_ms, &fm);
      if (confirmed >= r->quorum) {
        dlock__reply *out = copy_reply(x.res[first_yours]);
        run_free(r, &x);
        if (out) {
          dlock__reply_free(out->element[1]);
          out->element[1] = mk_str(DLOCK__REPLY_STRING, fs);
        }
        if (!out || !out->element[1]) {
          dlock__reply_free(out);
          unclaim_all(r, call, 0, dlock_mono_now() + r->command_timeout_ms);
          return dlock__error(DLOCK_ENOMEM, "out of memory");
        }
        *reply = out;
        return 0;
      }
      add(&m, "%sthe fence write-back was confirmed by only %d (%s)", m.o ? "; " : "", confirmed,
          fm.o ? fm.buf : "nodes not counted");
      yours = 0; /* not counted: give it back */
    }
    /* Not ours: give back what we claimed, everywhere (also where no reply
     * came). When the previous run still holds the job lock on a majority,
     * the tick stays consumed (skipped, as on one node): only the job lock
     * is given back where we took it. */
    unclaim_all(r, call, busy >= r->quorum, dlock_mono_now() + r->command_timeout_ms);
    int others = claimed + busy;
    /* Claimers split the nodes and none has a majority, though enough
     * nodes answer for one: try again (each claimer gave its part back). */
    int tie =
        yoursmask && others < r->quorum && ahead < r->quorum && wait < r->quorum && r->n - down - failed >= r->quorum;
    if (tie && attempt < 3) {
      run_free(r, &x);
      char rnd[5];
      int64_t delay = 20 + (dlock__random_hex(rnd, 2) == 0 ? strtol(rnd, NULL, 16) % 181 : 0);
      struct timespec ts = {0, (long)delay * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    int pick = ahead >= r->quorum    ? first_ahead
               : wait >= r->quorum   ? first_wait
               : busy >= r->quorum   ? first_busy
               : others >= r->quorum ? (first_claimed >= 0 ? first_claimed : first_busy)
                                     : -1;
    if (pick < 0 && errrep && failed == r->n) pick = -2; /* the same script error everywhere: the caller's to map */
    if (pick != -1) {
      *reply = copy_reply(pick >= 0 ? x.res[pick] : errrep);
      run_free(r, &x);
      return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    run_free(r, &x);
    return dlock__error(DLOCK_EQUORUM,
                        "tick claim: no majority of the %d Redlock nodes (%d needed) answered "
                        "for one claimer: ours on %d, another node's or the previous run's on %d, unreachable or "
                        "failing on %d (%s); our part was given back",
                        r->n, r->quorum, yours, others, down + failed, m.buf);
  }
}

/* The end of a run (sched_finish.lua) on every node: the job lock was ours
 * when a majority says so; the duration is the first answer's. When no node
 * answered and one may have run it, the outcome is unknown (maybe_ran: the
 * caller sends it again marked as a second send). */
static int rl_sched_finish(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  *reply = NULL;
  call->maybe_ran = 0;
  call->replicas = -1;
  run x;
  int rc = run_calls(r, call, 1, all_nodes(r), dlock_mono_now() + r->command_timeout_ms, &x);
  if (rc) return rc;
  int first = -1, ours = 0, maybe = 0;
  const dlock__reply *errrep = NULL;
  msg m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < r->n; i++) {
    const dlock__reply *v = x.res[i];
    if (!v) {
      maybe += x.s[i].sent;
      add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
    } else if (v->type == DLOCK__REPLY_ARRAY && v->elements >= 2) {
      if (first < 0) first = i;
      ours += v->element[1]->type == DLOCK__REPLY_INTEGER && v->element[1]->integer == 1;
    } else if (!errrep) {
      errrep = v;
    }
  }
  if (first >= 0) {
    dlock__reply *out = copy_reply(x.res[first]);
    run_free(r, &x);
    if (!out) return dlock__error(DLOCK_ENOMEM, "out of memory");
    if (out->element[1]->type == DLOCK__REPLY_INTEGER) out->element[1]->integer = ours >= r->quorum;
    *reply = out;
    return 0;
  }
  if (errrep && !maybe) {
    *reply = copy_reply(errrep);
    run_free(r, &x);
    return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  call->maybe_ran = maybe > 0;
  run_free(r, &x);
  return dlock__error(maybe ? DLOCK_ETIMEDOUT : DLOCK_ECONNECT,
                      "the end of the run was confirmed by no Redlock "
                      "node (%s)",
                      m.buf);
}

/* Read-only scripts (the run history): the first node, in the order of the
 * URL, that answers. */
static int rl_first(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  *reply = NULL;
  call->maybe_ran = 0;
  call->replicas = -1;
  run x;
  int rc = run_calls(r, call, 1, all_nodes(r), dlock_mono_now() + r->command_timeout_ms, &x);
  if (rc) return rc;
  const dlock__reply *pick = NULL;
  msg m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < r->n; i++) {
    const dlock__reply *v = x.res[i];
    if (!v)
      add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
    else if (!pick || (pick->type == DLOCK__REPLY_ERROR && v->type != DLOCK__REPLY_ERROR))
      pick = v;
  }
  if (!pick) {
    run_free(r, &x);
    return dlock__error(DLOCK_ECONNECT, "no Redlock node answered (%s)", m.buf);
  }
  *reply = copy_reply(pick);
  run_free(r, &x);
  return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
}

/* The guard (guard.lua) on every node: stale when any node knows a higher
 * token; admitted only when a majority of the counted nodes admitted (each
 * of them recorded the token); otherwise a quorum error. Since two
 * majorities share a node, once a token was admitted no lower one is, for
 * as long as one node that recorded it keeps its data and answers
 * (docs/redlock.md, "The guard"). */
static int rl_guard(redlock *r, dlock__script_call *call, dlock__reply **reply) {
  *reply = NULL;
  call->maybe_ran = 0;
  call->replicas = -1;
  run x;
  int rc = run_calls_ex(r, call, 1, all_nodes(r), dlock_mono_now() + r->command_timeout_ms, &x, guard_decided, NULL);
  if (rc) return rc;
  int admitted = 0, stale = -1, answered = 0, maybe = 0;
  uint64_t high = 0, prev = 0;
  const dlock__reply *errrep = NULL;
  msg m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < r->n; i++) {
    const char *name = r->node[i].node.ep.display;
    const dlock__reply *v = x.res[i];
    if (!v) {
      maybe += x.s[i].sent;
      add(&m, "%s%s", m.o ? "; " : "", x.s[i].err);
      continue;
    }
    if (v->type != DLOCK__REPLY_ARRAY || v->elements != 2 || v->element[0]->type != DLOCK__REPLY_INTEGER) {
      if (!errrep) errrep = v;
      add(&m, "%s%s: %s", m.o ? "; " : "", name, v->type == DLOCK__REPLY_ERROR ? v->str : "unexpected reply");
      continue;
    }
    answered++;
    const char *t = el_s(v, 1);
    uint64_t f = 0;
    int parsed = *t && dlock__parse_fence(t, strlen(t), &f) == 0;
    char why[300];
    if (v->element[0]->integer == 1) {
      if (parsed && f > prev) prev = f;
      if (counts(r, i, why, sizeof why))
        admitted++;
      else
        add(&m, "%s%s", m.o ? "; " : "", why);
    } else {
      if (stale < 0 || (parsed && f > high)) stale = i;
      if (parsed && f > high) high = f;
    }
  }
  char fs[24];
  if (stale >= 0 || admitted >= r->quorum) {
    run_free(r, &x);
    if (stale >= 0)
      snprintf(fs, sizeof fs, "%" PRIu64, high);
    else if (prev)
      snprintf(fs, sizeof fs, "%" PRIu64, prev);
    else
      fs[0] = '\0';
    *reply = mk_pair(stale >= 0 ? 0 : 1, mk_str(DLOCK__REPLY_STRING, fs));
    return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  if (errrep && !answered && !maybe) {
    *reply = copy_reply(errrep);
    run_free(r, &x);
    return *reply ? 0 : dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  /* Twice-safe (an equal token is admitted again): with no answer at all,
   * the caller may send it once more. */
  call->maybe_ran = !answered && maybe;
  run_free(r, &x);
  return dlock__error(DLOCK_EQUORUM,
                      "admitted by %d of %d Redlock nodes, %d needed, and none knows a higher "
                      "token (%s); the write must not proceed",
                      admitted, r->n, r->quorum, m.buf);
}

/* ---- The folds: how the nodes' answers to each script make one ----
 * Named by the script in scripts.c's table (dlock__script_fold); a script
 * without one (semaphore, read-write lock and latch scripts: not offered
 * here) runs on one node through rl_route(). */

DLOCK__QUORUM_FOLD(dlock__rl_fold_acquire) {
  (void)limit;
  if (n != 1) return dlock__error(DLOCK_EINVAL, "Redlock acquires one lock per call");
  return rl_acquire((redlock *)t, &calls[0], &replies[0]);
}

DLOCK__QUORUM_FOLD(dlock__rl_fold_extend) { return rl_extend((redlock *)t, calls, n, replies, limit); }

DLOCK__QUORUM_FOLD(dlock__rl_fold_delete) {
  (void)limit;
  return rl_delete((redlock *)t, calls, n, replies);
}

/* Folds of one call at a time (a pipeline of them goes to one node). */
#define ONE_CALL_FOLD(name, fn)                                                    \
  DLOCK__QUORUM_FOLD(name) {                                                       \
    (void)limit;                                                                   \
    return n == 1 ? fn((redlock *)t, &calls[0], &replies[0]) : DLOCK__QUORUM_PASS; \
  }
ONE_CALL_FOLD(dlock__rl_fold_info, rl_info)
ONE_CALL_FOLD(dlock__rl_fold_sched_claim, rl_sched_claim)
ONE_CALL_FOLD(dlock__rl_fold_sched_finish, rl_sched_finish)
ONE_CALL_FOLD(dlock__rl_fold_first, rl_first)
ONE_CALL_FOLD(dlock__rl_fold_guard, rl_guard)

static int rl_quorum_run(dlock__topology *t, dlock_client *c, dlock__script_call *calls, size_t n,
                         dlock__reply **replies, dlock_mono_ms limit) {
  (void)c;
  for (size_t j = 0; j < n; j++) replies[j] = NULL;
  dlock__quorum_fold fold = dlock__script_fold(calls[0].script);
  return fold ? fold(t, calls, n, replies, limit) : DLOCK__QUORUM_PASS;
}

/* ---- The topology ---- */

/* Scripts of other kinds (guard, scheduler), PING, SCAN: the first node
 * that did not fail last time. */
static dlock__node *rl_route(dlock__topology *t, const char *key, size_t keylen) {
  (void)key;
  (void)keylen;
  redlock *r = (redlock *)t;
  for (int i = 0; i < r->n; i++)
    if (!atomic_load(&r->node[i].node.suspect)) return &r->node[i].node;
  return &r->node[0].node;
}

static void rl_destroy(dlock__topology *t) {
  redlock *r = (redlock *)t;
  pthread_mutex_lock(&r->mu);
  while (r->threads > 0) pthread_cond_wait(&r->cv, &r->mu); /* each ends by its connect deadline */
  pthread_mutex_unlock(&r->mu);
  for (int i = 0; i < r->n; i++) dlock__node_destroy(&r->node[i].node);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Does a TCP entry name one of the addresses in 'ra' (another entry's, with
 * the same port: 127.0.0.1:P and localhost:P)? */
/* An address as 16 bytes: an IPv4 one as its IPv4-mapped IPv6 form
 * (::ffff:a.b.c.d), which a connect reaches the same listener with. */
static int addr16(const struct addrinfo *x, unsigned char out[16]) {
  if (x->ai_family == AF_INET) {
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)(const void *)x->ai_addr)->sin_addr, 4);
    return 1;
  }
  if (x->ai_family == AF_INET6) {
    memcpy(out, &((const struct sockaddr_in6 *)(const void *)x->ai_addr)->sin6_addr, 16);
    return 1;
  }
  return 0;
}

static int shares_address(const struct addrinfo *ra, const struct addrinfo *rb) {
  unsigned char a[16], b[16];
  for (const struct addrinfo *x = ra; x; x = x->ai_next)
    for (const struct addrinfo *y = rb; y; y = y->ai_next)
      if (addr16(x, a) && addr16(y, b) && !memcmp(a, b, sizeof a)) return 1;
  return 0;
}

/* The index of an earlier entry that names the same server as entry i (the
 * same socket path, or the same port and a common address: each name is
 * resolved once, 'ai'), or -1. A name that does not resolve is left to the
 * connect, which says so. */
static int listed_before(dlock__endpoint *eps, struct addrinfo **ai, int i) {
  for (int j = 0; j < i; j++) {
    if (eps[i].is_unix != eps[j].is_unix) continue;
    if (eps[i].is_unix
            ? !strcmp(eps[i].path, eps[j].path)
            : eps[i].port == eps[j].port && (!strcmp(eps[i].host, eps[j].host) || shares_address(ai[i], ai[j])))
      return j;
  }
  return -1;
}

int dlock__topology_redlock_new(dlock__endpoint *eps, int n, int max_conns, dlock__topology **out, char *display,
                                size_t displaylen) {
  *out = NULL;
  if (n < 3 || n > DLOCK__REDLOCK_MAX) {
    for (int i = 0; i < n; i++) dlock__endpoint_clear(&eps[i]);
    return dlock__error(DLOCK_EURL,
                        "Redlock needs 3 or more independent masters (5 advised), at most %d; %d %s "
                        "given",
                        DLOCK__REDLOCK_MAX, n, n == 1 ? "was" : "were");
  }
  struct addrinfo *ai[DLOCK__REDLOCK_MAX] = {0};
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  for (int i = 0; i < n; i++)
    if (!eps[i].is_unix && getaddrinfo(eps[i].host, NULL, &hints, &ai[i]) != 0) ai[i] = NULL;
  int dup = -1, first = -1;
  for (int i = 0; i < n && dup < 0; i++)
    if ((first = listed_before(eps, ai, i)) >= 0) dup = i;
  for (int i = 0; i < n; i++)
    if (ai[i]) freeaddrinfo(ai[i]);
  if (dup >= 0) {
    int rc = !strcmp(eps[dup].display, eps[first].display)
                 ? dlock__error(DLOCK_EURL,
                                "Redlock node %s is listed twice; each node must be a separate, "
                                "independent master",
                                eps[dup].display)
                 : dlock__error(DLOCK_EURL,
                                "Redlock nodes %s and %s are one server listed twice (the same "
                                "address and port); each node must be a separate, independent master: list it "
                                "once",
                                eps[first].display, eps[dup].display);
    for (int k = 0; k < n; k++) dlock__endpoint_clear(&eps[k]);
    return rc;
  }
  redlock *r = calloc(1, sizeof *r);
  if (!r) {
    for (int i = 0; i < n; i++) dlock__endpoint_clear(&eps[i]);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&r->mu, NULL);
  dlock__cond_init(&r->cv);
  for (int i = 0; i < n; i++) r->node[i].marker = -1;
  snprintf(r->marker_key, sizeof r->marker_key, "dlock:redlock:marker");
  r->quorum = n / 2 + 1;
  r->command_timeout_ms = eps[0].command_timeout_ms;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (!rc) {
      rc = dlock__node_init(&r->node[i].node, &eps[i], max_conns);
      if (!rc) r->n = i + 1;
    } else {
      dlock__endpoint_clear(&eps[i]);
    }
  }
  r->base.kind = "redlock";
  r->base.route = rl_route;
  r->base.destroy = rl_destroy;
  r->base.quorum_run = rl_quorum_run;
  if (rc) {
    rl_destroy(&r->base);
    return rc;
  }
  size_t o = (size_t)snprintf(display, displaylen, "redlock %d nodes (", n);
  for (int i = 0; i < n && o < displaylen; i++)
    o += (size_t)snprintf(display + o, displaylen - o, "%s%s", i ? "," : "", r->node[i].node.ep.display);
  if (o < displaylen) snprintf(display + o, displaylen - o, ")");
  /* Meet every node once (PING, and INFO through the fresh connections):
   * the client starts when at least one answers, so that a deployment with
   * nodes down still starts; acquires count per node. */
  static const char *ping[1] = {"PING"};
  static const size_t ping_len[1] = {4};
  dlock__cmd cmd = {1, ping, ping_len};
  slot s[DLOCK__REDLOCK_MAX];
  memset(s, 0, sizeof s);
  for (int i = 0; i < n; i++) s[i] = (slot){.active = 1, .k = 1, .cmds = &cmd};
  par_exec(r, s, dlock_mono_now() + r->command_timeout_ms, NULL, NULL);
  int answered = 0;
  msg m;
  memset(&m, 0, sizeof m);
  for (int i = 0; i < n; i++) {
    if (!s[i].rc)
      answered++;
    else
      add(&m, "%s%s", m.o ? "; " : "", s[i].err);
  }
  slots_free(s, n);
  if (!answered) {
    rc = dlock__error(DLOCK_ECONNECT, "no Redlock node answered: %s", m.buf);
    rl_destroy(&r->base);
    return rc;
  }
  /* One server under two names that resolve to different addresses (a
   * proxy, an IPv4-mapped IPv6 address, ...): its run_id is the same. */
  dup = -1;
  first = -1;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < n && dup < 0; i++)
    if ((first = same_server_as(r, i)) >= 0) dup = i;
  pthread_mutex_unlock(&r->mu);
  if (dup >= 0) {
    rc = dlock__error(DLOCK_EURL,
                      "Redlock nodes %s and %s are one server listed twice (both report run_id %s in "
                      "INFO server); each node must be a separate, independent master: list it once",
                      r->node[first].node.ep.display, r->node[dup].node.ep.display, r->node[dup].run_id);
    rl_destroy(&r->base);
    return rc;
  }
  *out = &r->base;
  return 0;
}

/* ---- Public: each node's view ---- */

int dlock__redis_node_count(const dlock_client *c) {
  if (!c || !dlock__rc(c) || !dlock__topo(c) || dlock__topo(c)->quorum_run != rl_quorum_run) return 0;
  return ((const redlock *)dlock__topo(c))->n;
}

dlock__node *dlock__redlock_node(dlock_client *c, int i) {
  if (i < 0 || i >= dlock__redis_node_count(c)) return NULL;
  return &((redlock *)dlock__topo(c))->node[i].node;
}

const char *dlock__redis_node_name(const dlock_client *c, int i) {
  if (i < 0 || i >= dlock__redis_node_count(c)) return "";
  return ((const redlock *)dlock__topo(c))->node[i].node.ep.display;
}

int dlock__redis_info_node(dlock_client *c, const char *name, int i, dlock_lock_info *out) {
  dlock__error_clear();
  if (i < 0 || i >= dlock__redis_node_count(c))
    return dlock__error(DLOCK_EINVAL, "dlock_lock_info_get_node: node %d of %d (a Redlock client has 3 or more)", i,
                        dlock__redis_node_count(c));
  return dlock__redis_info_at(c, &((redlock *)dlock__topo(c))->node[i].node, name, out);
}

int dlock__redis_check_node(dlock_client *c, int i, dlock_check *out, int max) {
  dlock__error_clear();
  if (i < 0 || i >= dlock__redis_node_count(c))
    return dlock__error(DLOCK_EINVAL, "dlock_client_check_node: node %d of %d (a Redlock client has 3 or more)", i,
                        dlock__redis_node_count(c));
  return dlock__redis_check_at(c, &((redlock *)dlock__topo(c))->node[i].node, out, max);
}
