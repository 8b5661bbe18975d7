/*
 * node.c - one Redis server as a pool of command connections, and the
 * standalone topology (every key lives on that one node).
 *
 * Threads borrow a connection for one pipeline and give it back, so many
 * threads can lock through one client at once. A connection that failed is
 * closed, never reused (hiredis' rule: an error makes a context dead).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* Borrow a connection: an idle one, a new one, or wait for one to come back.
 * '*reused' tells whether it came from the pool (and so may be stale). */
static int borrow(dlock__node *n, dlock__conn **out, int *reused, dlock_mono_ms deadline) {
  pthread_mutex_lock(&n->mu);
  while (n->nidle == 0 && n->nopen >= n->max_conns) {
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    if (pthread_cond_timedwait(&n->cv, &n->mu, &ts) != 0 && dlock_mono_now() >= deadline) {
      pthread_mutex_unlock(&n->mu);
      return dlock__error(DLOCK_ETIMEDOUT, "%s: all %d connections busy for the whole command timeout",
                          n->ep.display, n->max_conns);
    }
  }
  if (n->nidle > 0) {
    *out = n->idle[--n->nidle];
    *reused = 1;
    pthread_mutex_unlock(&n->mu);
    return 0;
  }
  n->nopen++;
  pthread_mutex_unlock(&n->mu);
  *reused = 0;
  int rc = dlock__conn_open(&n->ep, n->ssl_ctx, out);
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

/* After the server dropped one pooled connection, the others are most likely
 * dead too (restart, failover): close them rather than fail on each. */
static void drop_idle(dlock__node *n) {
  pthread_mutex_lock(&n->mu);
  for (int i = 0; i < n->nidle; i++) {
    dlock__conn_close(n->idle[i]);
    n->nopen--;
  }
  n->nidle = 0;
  pthread_mutex_unlock(&n->mu);
}

static int exec_on(dlock__conn *conn, const dlock__cmd *cmds, size_t n, dlock__reply **replies,
                   dlock_mono_ms deadline, size_t *nread, int *sent) {
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

int dlock__node_exec(dlock__node *node, const dlock__cmd *cmds, size_t n, dlock__reply **replies, int *sent) {
  int sent_here = 0;
  if (!sent) sent = &sent_here;
  *sent = 0;
  for (size_t i = 0; i < n; i++) replies[i] = NULL;
  for (int attempt = 0;; attempt++) {
    dlock_mono_ms deadline = dlock_mono_now() + node->ep.command_timeout_ms;
    dlock__conn *conn;
    int reused = 0;
    *sent = 0; /* a retry happens only when the first try reached no one */
    int rc = borrow(node, &conn, &reused, deadline);
    if (rc) return rc;
    size_t nread;
    rc = exec_on(conn, cmds, n, replies, deadline, &nread, sent);
    give_back(node, conn);
    if (!rc) return 0;
    for (size_t i = 0; i < n; i++) {
      dlock__reply_free(replies[i]);
      replies[i] = NULL;
    }
    /* A pooled connection that the server closed while it sat idle fails
     * before any reply: the server never read the commands, so sending them
     * again on a fresh connection is safe (and every dlock script is
     * idempotent for its token anyway). A timeout is not retried: the
     * server may still run the commands. */
    if (rc == DLOCK_EIO && reused && nread == 0 && attempt == 0) {
      drop_idle(node);
      continue;
    }
    return rc;
  }
}

int dlock__topology_exec(dlock__topology *t, const char *key, size_t keylen, const dlock__cmd *cmds, size_t n,
                         dlock__reply **replies, int *sent) {
  if (t->exec) {
    const char *keys[1] = {key};
    size_t keylens[1] = {keylen};
    if (n == 1) return t->exec(t, cmds, keys, keylens, 1, replies, sent);
    /* Several commands for one key: the same key for each. */
    const char **k = malloc(n * sizeof *k);
    size_t *kl = malloc(n * sizeof *kl);
    int rc;
    if (!k || !kl) {
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else {
      for (size_t i = 0; i < n; i++) k[i] = key, kl[i] = keylen;
      rc = t->exec(t, cmds, k, kl, n, replies, sent);
    }
    free(k);
    free(kl);
    return rc;
  }
  return dlock__node_exec(t->route(t, key, keylen), cmds, n, replies, sent);
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
  if (rc) { free(s); return rc; }
  s->base.kind = "standalone";
  s->base.route = standalone_route;
  s->base.destroy = standalone_destroy;
  *out = &s->base;
  return 0;
}
