/*
 * node.c - one Redis server as a pool of command connections, and the
 * standalone topology (every key lives on that one node).
 *
 * Threads borrow a connection for one pipeline and give it back, so many
 * threads can lock through one client at once. A connection that failed is
 * closed, never reused (hiredis' rule: an error makes a context dead). A
 * pipeline is never sent twice from here: see dlock__node_exec.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_topo.h"

int dlock__node_init(dlock__node *n, const dlock__endpoint *ep, int max_conns) {
  memset(n, 0, sizeof *n);
  n->ep = *ep; /* the node takes over the endpoint's strings */
  n->max_conns = max_conns;
  n->idle = calloc((size_t)max_conns, sizeof *n->idle);
  if (!n->idle) return dlock__error(DLOCK_ENOMEM, "out of memory");
  if (ep->tls) {
    int rc = dlock__tls_ctx_new(ep, &n->ssl_ctx);
    if (rc) {
      free(n->idle);
      n->idle = NULL;
      dlock__endpoint_clear(&n->ep);
      return rc;
    }
  }
  pthread_mutex_init(&n->mu, NULL);
  dlock__cond_init(&n->cv);
  return 0;
}

void dlock__node_destroy(dlock__node *n) {
  if (!n->idle) return;
  for (int i = 0; i < n->nidle; i++) dlock__conn_close(n->idle[i]);
  free(n->idle);
  dlock__tls_ctx_free(n->ssl_ctx);
  pthread_mutex_destroy(&n->mu);
  pthread_cond_destroy(&n->cv);
  dlock__endpoint_clear(&n->ep);
}

/* Borrow a connection: an idle one that is still open, a new one, or wait
 * for one to come back. A new connection is opened before 'limit'. */
static int borrow(dlock__node *n, dlock__conn **out, dlock_mono_ms deadline, dlock_mono_ms limit, int *fresh) {
  *fresh = 0;
  pthread_mutex_lock(&n->mu);
  for (;;) {
    while (n->nidle > 0) {
      dlock__conn *conn = n->idle[--n->nidle];
      /* An idle command connection has nothing to read: readable means the
       * server closed it (idle timeout, restart, CLIENT KILL). Noticed here,
       * before use, at the cost of one poll(2) and no round trip. */
      if (!dlock__conn_idle_closed(conn)) {
        pthread_mutex_unlock(&n->mu);
        *out = conn;
        return 0;
      }
      n->nopen--;
      dlock__conn_close(conn);
      atomic_store(&n->suspect, 1); /* Sentinel: the master may have moved; resolve again */
    }
    if (n->nopen < n->max_conns) break;
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    if (pthread_cond_timedwait(&n->cv, &n->mu, &ts) != 0 && dlock_mono_now() >= deadline && n->nidle == 0 &&
        n->nopen >= n->max_conns) {
      pthread_mutex_unlock(&n->mu);
      return dlock__error(DLOCK_ETIMEDOUT, "%s: all %d connections busy for the whole command timeout", n->ep.display,
                          n->max_conns);
    }
  }
  n->nopen++;
  pthread_mutex_unlock(&n->mu);
  *fresh = 1;
  int rc = dlock__conn_open_until(&n->ep, n->ssl_ctx, limit, out);
  if (rc) {
    pthread_mutex_lock(&n->mu);
    n->nopen--;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
  }
  return rc;
}

static void give_back(dlock__node *n, dlock__conn *conn) {
  pthread_mutex_lock(&n->mu);
  if (dlock__conn_broken(conn)) {
    n->nopen--;
    dlock__conn_close(conn);
  } else {
    n->idle[n->nidle++] = conn;
  }
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

static int exec_on(dlock__conn *conn, const dlock__cmd *cmds, size_t n, dlock__reply **replies, dlock_mono_ms deadline,
                   size_t *nread, int *sent) {
  *nread = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = dlock__conn_append(conn, &cmds[i]);
    if (rc) return rc;
  }
  *sent = 1;
  int rc = dlock__conn_flush(conn, deadline);
  if (rc) return rc;
  for (size_t i = 0; i < n; i++) {
    rc = dlock__conn_read(conn, deadline, &replies[i]);
    if (rc) return rc;
    (*nread)++;
  }
  return 0;
}

/* Remember on the node what a failover looks like from here (see 'suspect'). */
int dlock__node_note_outcome(dlock__node *node, int rc, dlock__reply **replies, size_t n) {
  if (rc == DLOCK_EIO || rc == DLOCK_ECONNECT || rc == DLOCK_ETIMEDOUT) atomic_store(&node->suspect, 1);
  for (size_t i = 0; !rc && i < n; i++)
    if (replies[i] && replies[i]->type == DLOCK__REPLY_ERROR &&
        (!strncmp(replies[i]->str, "READONLY", 8) || !strncmp(replies[i]->str, "MASTERDOWN", 10) ||
         strstr(replies[i]->str, "READONLY You can't write")))
      atomic_store(&node->suspect, 1);
  return rc;
}

int dlock__node_exec(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent) {
  return dlock__node_exec_until(node, cmds, n, replies, sent, INT64_MAX);
}

int dlock__node_exec_until(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent,
                           dlock_mono_ms limit) {
  int sent_here = 0;
  if (!sent) sent = &sent_here;
  *sent = 0;
  for (size_t i = 0; i < n; i++) replies[i] = NULL;
  dlock_mono_ms deadline = dlock_mono_now() + node->ep.command_timeout_ms;
  if (limit < deadline) deadline = limit;
  dlock__conn *conn;
  int fresh;
  int rc = borrow(node, &conn, deadline, limit, &fresh);
  if (rc) return dlock__node_note_outcome(node, rc, replies, n);
  size_t nread;
  rc = exec_on(conn, cmds, n, replies, deadline, &nread, sent);
  give_back(node, conn);
  if (!rc) return dlock__node_note_outcome(node, 0, replies, n);
  for (size_t i = 0; i < n; i++) {
    dlock__reply_free(replies[i]);
    replies[i] = NULL;
  }
  /* Never sent again from here: once the bytes may have left, the server may
   * have run the commands even if the connection then failed before any
   * reply (a proxy, a failover, CLIENT KILL). Whether a resend is safe is
   * the caller's decision, per script (docs/design.md, "Lost replies"). */
  return dlock__node_note_outcome(node, rc, replies, n);
}

int dlock__node_borrow(dlock__node *n, dlock_mono_ms limit, dlock__conn **out, int *fresh) {
  dlock_mono_ms deadline = dlock_mono_now() + n->ep.command_timeout_ms;
  if (limit < deadline) deadline = limit;
  int rc = borrow(n, out, deadline, limit, fresh);
  if (rc) atomic_store(&n->suspect, 1);
  return rc;
}

int dlock__node_borrow_idle(dlock__node *n, dlock__conn **out) {
  *out = NULL;
  pthread_mutex_lock(&n->mu);
  while (n->nidle > 0 && !*out) {
    dlock__conn *conn = n->idle[--n->nidle];
    if (!dlock__conn_idle_closed(conn)) {
      *out = conn;
    } else {
      n->nopen--;
      dlock__conn_close(conn);
    }
  }
  pthread_mutex_unlock(&n->mu);
  return *out != NULL;
}

void dlock__node_return(dlock__node *n, dlock__conn *conn, int failed) {
  if (!failed) {
    give_back(n, conn);
    return;
  }
  atomic_store(&n->suspect, 1);
  pthread_mutex_lock(&n->mu);
  n->nopen--;
  dlock__conn_close(conn);
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

dlock__node *dlock__route(dlock_client *c, const char *key, size_t keylen, dlock_mono_ms limit, int *rc) {
  *rc = 0;
  if (dlock__topo(c)->route_rc) return dlock__topo(c)->route_rc(dlock__topo(c), key, keylen, limit, rc);
  return dlock__topo(c)->route(dlock__topo(c), key, keylen);
}

int dlock__topology_exec(dlock_client *c, const char *key, size_t keylen, const dlock__cmd *cmds, size_t n,
                         dlock__reply **replies, int *sent, dlock_mono_ms limit) {
  dlock__topology *t = dlock__topo(c);
  if (t->exec) {
    const char *keys[1] = {key};
    size_t keylens[1] = {keylen};
    if (n == 1) return t->exec(t, cmds, keys, keylens, 1, replies, sent, limit);
    /* Several commands for one key: the same key for each. */
    const char **k = malloc(n * sizeof *k);
    size_t *kl = malloc(n * sizeof *kl);
    int rc;
    if (!k || !kl) {
      if (sent) *sent = 0;
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else {
      for (size_t i = 0; i < n; i++) k[i] = key, kl[i] = keylen;
      rc = t->exec(t, cmds, k, kl, n, replies, sent, limit);
    }
    free(k);
    free(kl);
    return rc;
  }
  int rc;
  dlock__node *node = dlock__route(c, key, keylen, limit, &rc);
  if (!node) {
    if (sent) *sent = 0;
    return rc;
  }
  return dlock__node_exec_until(node, cmds, n, replies, sent, limit);
}

uint64_t dlock__failovers(dlock__topology *t, const char *key, size_t keylen) {
  return t->failovers ? t->failovers(t, key, keylen) : 0;
}

/* ---- Standalone topology ---- */

typedef struct standalone {
  dlock__topology base;
  dlock__node node;
} standalone;

static dlock__node *standalone_route(dlock__topology *t, const char *key, size_t keylen) {
  (void)key;
  (void)keylen;
  return &((standalone *)t)->node;
}

static void standalone_destroy(dlock__topology *t) {
  standalone *s = (standalone *)t;
  dlock__node_destroy(&s->node);
  free(s);
}

int dlock__topology_standalone_new(const dlock__endpoint *ep, int max_conns, dlock__topology **out) {
  standalone *s = calloc(1, sizeof *s);
  if (!s) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__node_init(&s->node, ep, max_conns);
  if (rc) {
    free(s);
    return rc;
  }
  s->base.kind = "standalone";
  s->base.route = standalone_route;
  s->base.destroy = standalone_destroy;
  *out = &s->base;
  return 0;
}
