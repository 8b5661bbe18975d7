/*
 * waiters.c - the client's subscriber: one pub/sub connection and thread
 * that delivers hand-off messages to the waiting handle they name.
 *
 * A release hands the lock to the first live waiter in Redis and publishes
 * "<waiter id> <fence> <nonce>" on that waiter's client channel for the lock,
 * so one release wakes one waiter (the nonce names the waiter's acquire call
 * the grant answers; see deliver()). After a reconnect every waiter is woken to look
 * again, since messages may have been missed meanwhile.
 *
 * Every channel has a home, the server its hand-offs are published on, and
 * the subscriber keeps one pub/sub connection per home in use:
 *  - a single server: that server, one connection;
 *  - Sentinel: the master of the moment, asked again (dlock__route) on every
 *    pass; when it changes (failover) every channel moves to the new master
 *    and the old connection is closed;
 *  - Cluster: the master of the channel's slot, which is the lock's slot,
 *    with sharded pub/sub (SSUBSCRIBE; the scripts SPUBLISH there): one
 *    connection per master. A slot that moves (reshard, failover) ends in a
 *    server-sent sunsubscribe, a MOVED answer, a dropped connection or a new
 *    owner in the router's map; the channel is then subscribed again where
 *    the router finds the slot now.
 *  - Redlock: every node is a home. A handle's channel has one entry per
 *    node, pinned there ('fixed'), since each node's release publishes its
 *    own hand-off: the messages of a majority wake the waiter (rl_need), which
 *    then tries the quorum acquire (docs/redlock.md, "Waiting").
 * A channel that moves wakes every waiter, as a reconnect does.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_lock.h"

typedef struct channel {
  char *name;
  size_t len;
  int refs;
  int sent;              /* SUBSCRIBE written on the current connection */
  int confirmed;         /* 1 subscribed, -1 refused by the server */
  int ever;              /* confirmed once: a later confirmation ends a gap */
  dlock_mono_ms sent_at; /* when 'sent' was set: unconfirmed for long, the link is dead */
  dlock__node *node;     /* where it was sent (valid while 'sent') */
  int reroute;           /* cluster: the slot moved or its node failed; ask the router again */
  dlock__node *fixed;    /* Redlock: this entry's home, one of the nodes; NULL: routed */
  int shard;             /* SSUBSCRIBE also off a cluster (dlock__sub_target.shard) */
} channel;

/* One pub/sub connection per node: on a cluster each channel lives on the
 * master of its slot (sharded pub/sub), otherwise all on the one server. */
#define MAX_SUB_CONNS 64
typedef struct sub_conn {
  dlock__node *node;
  dlock__conn *conn;
} sub_conn;

struct dlock__subscriber {
  dlock_client *client;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int wake[2]; /* self-pipe: new subscriptions, stop */
  channel *channels;
  size_t nchannels, capchannels;
  dlock__sub_target **waiters;
  size_t nwaiters, capwaiters;
  int sharded; /* SSUBSCRIBE on the slot's master (cluster) */
  sub_conn conns[MAX_SUB_CONNS];
  int nconns; /* guarded by the subscriber thread alone */
  /* Redlock nodes whose connect failed: not tried again before 'at', so
   * that a node that is down or frozen seldom holds up this thread (and the
   * other nodes' messages). Subscriber thread alone. */
  struct {
    dlock__node *node;
    dlock_mono_ms at;
  } retry[DLOCK__REDLOCK_MAX];
  int nretry;
  char last_error[256];
};

static void poke(dlock__subscriber *s) {
  char b = 1;
  ssize_t n = write(s->wake[1], &b, 1);
  (void)n; /* a full pipe already means "wake up" */
}

static void wake_all(dlock__subscriber *s, int how) {
  for (size_t i = 0; i < s->nwaiters; i++) s->waiters[i]->wake(s->waiters[i], 0, 0, how);
}

static void wake_all_waiters(dlock__subscriber *s) { wake_all(s, 1); }

/* "<id> <fence> <nonce>" ("<id> <fence>" from scripts before the nonce):
 * the fence and the nonce as numbers, 0 when absent or malformed. */
static void parse_grant(const char *rest, uint64_t *fence, uint64_t *nonce) {
  *fence = *nonce = 0;
  const char *sp = rest ? strchr(rest, ' ') : NULL;
  if (!rest || !sp) return;
  uint64_t f = 0, n = 0;
  if (dlock__parse_fence(rest, (size_t)(sp - rest), &f) != 0 || dlock__parse_fence(sp + 1, strlen(sp + 1), &n) != 0)
    return;
  *fence = f;
  *nonce = n;
}

/* A grant message on a channel: wake that waiter if it is ours and still
 * waiting, with the message's fence and nonce (the target decides: a lock
 * handle records the fence when the nonce names its acquire call now
 * answered, lock.c's wake_handle). */
static void deliver(dlock__subscriber *s, const char *payload) {
  const char *space = strchr(payload, ' ');
  size_t idlen = space ? (size_t)(space - payload) : strlen(payload);
  uint64_t fence, nonce;
  parse_grant(space ? space + 1 : NULL, &fence, &nonce);
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->nwaiters; i++) {
    dlock__sub_target *t = s->waiters[i];
    if (strlen(t->waiter_id) == idlen && !memcmp(t->waiter_id, payload, idlen)) {
      t->wake(t, fence, nonce, 0);
      /* No break: a mutex waiter's id is unique, but every latch waiter of
       * this client answers to "latch" (latch.c). */
    }
  }
  pthread_mutex_unlock(&s->mu);
}

static channel *find_sent(dlock__subscriber *s, const char *name, size_t len, dlock__node *node);

/* Forget that the channels sent on 'node' are subscribed (connection lost,
 * or the server moved them away): they are sent again. Caller holds s->mu. */
static void unsend_on(dlock__subscriber *s, dlock__node *node, int reroute) {
  for (size_t i = 0; i < s->nchannels; i++)
    if (s->channels[i].sent && s->channels[i].node == node) {
      s->channels[i].sent = s->channels[i].confirmed = 0;
      s->channels[i].reroute |= reroute;
    }
}

static void handle_reply(dlock__subscriber *s, dlock__node *node, const dlock__reply *r) {
  if (r->type == DLOCK__REPLY_ERROR) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->last_error, sizeof s->last_error, "%s", r->str);
    int ask, slot;
    dlock__hostport to;
    if (s->sharded && dlock__cluster_parse_redirect(r->str, node->ep.host, &ask, &slot, &to) == 0) {
      /* SSUBSCRIBE reached a node that does not own the slot: route again. */
      for (size_t i = 0; i < s->nchannels; i++) {
        channel *ch = &s->channels[i];
        if (ch->sent && !ch->confirmed && ch->node == node && dlock__cluster_slot(ch->name, ch->len) == slot) {
          ch->sent = 0;
          ch->reroute = 1;
        }
      }
    } else {
      /* e.g. NOPERM for a channel outside the ACL: those waiters fall back to re-checks. */
      for (size_t i = 0; i < s->nchannels; i++)
        if (s->channels[i].sent && !s->channels[i].confirmed && s->channels[i].node == node)
          s->channels[i].confirmed = -1;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (r->type != DLOCK__REPLY_ARRAY || r->elements < 3 || r->element[0]->type != DLOCK__REPLY_STRING ||
      r->element[1]->type != DLOCK__REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  if ((!strcmp(kind, "message") || !strcmp(kind, "smessage")) && r->element[2]->type == DLOCK__REPLY_STRING) {
    deliver(s, r->element[2]->str);
  } else if (!strcmp(kind, "subscribe") || !strcmp(kind, "ssubscribe")) {
    pthread_mutex_lock(&s->mu);
    channel *ch = find_sent(s, r->element[1]->str, r->element[1]->len, node);
    if (ch) {
      ch->confirmed = 1;
      /* Subscribed again after a reconnect or a move: a message published
       * in the gap went unheard. Waiters were woken at the reconnect; a
       * holder checks its hold now (a forced release in the gap), which
       * only this moment makes sure of. */
      if (ch->ever) wake_all(s, DLOCK__WAKE_RESUBSCRIBED);
      ch->ever = 1;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  } else if (!strcmp(kind, "sunsubscribe")) {
    /* Unasked for: the slot moved to another master (reshard, failover).
     * Subscribe again where the router says it lives now, and let the
     * waiters look, since a hand-off may have been missed meanwhile. */
    pthread_mutex_lock(&s->mu);
    channel *ch = find_sent(s, r->element[1]->str, r->element[1]->len, node);
    if (ch && ch->refs > 0) {
      ch->sent = ch->confirmed = 0;
      ch->reroute = 1;
      wake_all_waiters(s);
    }
    pthread_mutex_unlock(&s->mu);
  }
}

/* A Redlock node's connect: bounded by FIXED_CONNECT_MS, then spaced by
 * FIXED_RETRY_MS after a failure (other nodes' messages wake the waiters
 * meanwhile, and the re-check is the fallback). */
#define FIXED_CONNECT_MS 500
#define FIXED_RETRY_MS 2000

static dlock_mono_ms *retry_at(dlock__subscriber *s, dlock__node *node) {
  for (int i = 0; i < s->nretry; i++)
    if (s->retry[i].node == node) return &s->retry[i].at;
  if (s->nretry == DLOCK__REDLOCK_MAX) return NULL;
  s->retry[s->nretry].node = node;
  s->retry[s->nretry].at = 0;
  return &s->retry[s->nretry++].at;
}

static sub_conn *conn_for(dlock__subscriber *s, dlock__node *node) {
  for (int i = 0; i < s->nconns; i++)
    if (s->conns[i].node == node) return &s->conns[i];
  return NULL;
}

/* Drop a connection that failed; its channels are sent again, and every
 * waiter looks, since a hand-off may have been missed. */
static void drop_conn(dlock__subscriber *s, sub_conn *sc) {
  atomic_store(&sc->node->suspect, 1); /* Sentinel: resolve the master again */
  pthread_mutex_lock(&s->mu);
  snprintf(s->last_error, sizeof s->last_error, "%s", dlock_last_error());
  unsend_on(s, sc->node, 1);
  wake_all_waiters(s);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  dlock__conn_close(sc->conn);
  *sc = s->conns[--s->nconns];
}

/* Let the router learn where a channel's slot lives now: a routed command
 * on the channel's own name follows MOVED and refreshes the map after a
 * connection failure. */
static void reroute(dlock__subscriber *s, const char *name, size_t len) {
  const char *argv[2] = {"EXISTS", name};
  size_t lens[2] = {6, len};
  dlock__cmd cmd = {2, argv, lens};
  dlock__reply *r = NULL;
  if (dlock__topology_exec(s->client, name, len, &cmd, 1, &r, NULL, INT64_MAX) == 0) dlock__reply_free(r);
}

/* The home of a channel (see the top): the master 'master' (single server,
 * Sentinel) or the router's owner of its slot (cluster). */
static dlock__node *home_of(dlock__subscriber *s, const channel *ch, dlock__node *master) {
  if (ch->fixed) return ch->fixed;
  if (!s->sharded) return master;
  dlock__topology *t = dlock__topo(s->client);
  return t->route(t, ch->name, ch->len);
}

static void append_cmd(dlock__subscriber *s, dlock__node *node, const char *verb, const channel *ch) {
  sub_conn *sc = conn_for(s, node);
  const char *argv[2] = {verb, ch->name};
  size_t lens[2] = {strlen(verb), ch->len};
  dlock__cmd cmd = {2, argv, lens};
  if (sc) dlock__conn_append(sc->conn, &cmd); /* a failure shows at the flush */
}

/* Open connections, move channels whose home changed, queue SUBSCRIBE for
 * new channels and UNSUBSCRIBE for unused ones, close connections no home
 * needs, and flush. Returns 1 when some channel could not be sent (its home
 * unknown or unreachable): the caller retries soon. */
static int sync_subscriptions(dlock__subscriber *s) {
  dlock_client *c = s->client;
  const char *sub = s->sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  const char *unsub = s->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
  int pending = 0;
  /* Outside the lock, as these may do I/O: the master of the moment
   * (Sentinel resolves it again after a failover), and for a cluster
   * channel whose slot moved or whose node failed, one routed command that
   * updates the router's map (MOVED, or a reload after a refused
   * connection) for all of them. */
  dlock__node *master = NULL;
  if (!s->sharded) {
    int rc;
    master = dlock__route(c, "", 0, INT64_MAX, &rc);
    if (!master) {
      pthread_mutex_lock(&s->mu);
      snprintf(s->last_error, sizeof s->last_error, "%s", dlock_last_error());
      pthread_mutex_unlock(&s->mu);
    }
  }
  dlock__node *failed[MAX_SUB_CONNS];
  int nfailed = 0;
  pthread_mutex_lock(&s->mu);
  char name[512];
  size_t len = 0;
  for (size_t i = 0; i < s->nchannels; i++) {
    channel *ch = &s->channels[i];
    if (ch->reroute && ch->refs > 0 && s->sharded && !len) {
      len = ch->len < sizeof name ? ch->len : sizeof name - 1;
      memcpy(name, ch->name, len);
    }
    ch->reroute = 0;
  }
  if (len) {
    pthread_mutex_unlock(&s->mu);
    reroute(s, name, len);
    pthread_mutex_lock(&s->mu);
  }
  for (size_t i = 0; i < s->nchannels;) {
    channel *ch = &s->channels[i];
    if (ch->refs == 0) {
      if (ch->sent) append_cmd(s, ch->node, ch->shard ? "SUNSUBSCRIBE" : unsub, ch);
      free(ch->name);
      s->channels[i] = s->channels[--s->nchannels];
      continue;
    }
    i++;
    dlock__node *home = home_of(s, ch, master);
    if (!home) { /* no master known now: keep what is subscribed, retry soon */
      pending = 1;
      continue;
    }
    if (ch->sent && ch->node != home) {
      /* Its home moved (failover, reshard): hand-offs are published on the
       * new one, maybe already. */
      append_cmd(s, ch->node, ch->shard ? "SUNSUBSCRIBE" : unsub, ch);
      ch->sent = ch->confirmed = 0;
      wake_all_waiters(s);
    }
    if (ch->sent) continue;
    sub_conn *sc = conn_for(s, home);
    int failed_now = 0; /* one connect attempt per node and pass */
    for (int j = 0; j < nfailed && !failed_now; j++) failed_now = failed[j] == home;
    dlock_mono_ms *next_try = ch->fixed ? retry_at(s, home) : NULL;
    if (next_try && *next_try > dlock_mono_now()) failed_now = 1;
    if (!sc && failed_now) {
      if (ch->fixed && !ch->confirmed) ch->confirmed = -1;
      pending = 1;
      continue;
    }
    if (!sc && s->nconns < MAX_SUB_CONNS) {
      char *keep = ch->name; /* 'ch' may move while the lock is let go */
      pthread_mutex_unlock(&s->mu);
      dlock__conn *conn = NULL;
      int rc = next_try ? dlock__conn_open_until(&home->ep, home->ssl_ctx, dlock_mono_now() + FIXED_CONNECT_MS, &conn)
                        : dlock__conn_open(&home->ep, home->ssl_ctx, &conn);
      if (rc) atomic_store(&home->suspect, 1); /* Sentinel: ask the sentinels again */
      if (next_try) *next_try = rc ? dlock_mono_now() + FIXED_RETRY_MS : 0;
      pthread_mutex_lock(&s->mu);
      ch = NULL; /* the same entry ('keep' is its own allocation) */
      for (size_t j = 0; j < s->nchannels && !ch; j++)
        if (s->channels[j].name == keep) ch = &s->channels[j];
      if (rc) {
        snprintf(s->last_error, sizeof s->last_error, "%s", dlock_last_error());
        if (nfailed < MAX_SUB_CONNS) failed[nfailed++] = home;
        if (ch && s->sharded) ch->reroute = 1;
        /* A Redlock node that is down: its entry is settled as failed, so
         * that a watch does not wait for it (the other nodes wake us). */
        if (ch && ch->fixed && !ch->confirmed) ch->confirmed = -1;
        pending = 1;
        continue;
      }
      sc = &s->conns[s->nconns++];
      sc->node = home;
      sc->conn = conn;
      /* A new connection: messages may have been missed while there was none. */
      wake_all_waiters(s);
    }
    if (!sc || !ch) {
      pending = 1;
      continue;
    }
    const char *verb = ch->shard ? "SSUBSCRIBE" : sub;
    const char *argv[2] = {verb, ch->name};
    size_t lens[2] = {strlen(verb), ch->len};
    dlock__cmd cmd = {2, argv, lens};
    if (dlock__conn_append(sc->conn, &cmd) == 0) {
      ch->sent = 1;
      ch->node = home;
      ch->sent_at = dlock_mono_now();
    }
  }
  /* Close the connections no channel lives on, except the single server's
   * (or current master's) own: the next wait would open it again. */
  for (int i = 0; i < s->nconns;) {
    int used = !s->sharded && s->conns[i].node == master;
    for (size_t j = 0; j < s->nchannels && !used; j++)
      used = s->channels[j].sent && s->channels[j].node == s->conns[i].node;
    if (used) {
      i++;
      continue;
    }
    dlock__conn_close(s->conns[i].conn);
    s->conns[i] = s->conns[--s->nconns];
  }
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < s->nconns;) {
    if (dlock__conn_flush(s->conns[i].conn, dlock_mono_now() + c->command_timeout_ms) != 0) {
      drop_conn(s, &s->conns[i]);
      pending = 1;
      continue;
    }
    i++;
  }
  return pending;
}

/* A SUBSCRIBE unanswered for longer than the command timeout: the
 * connection carries nothing (a link that swallowed it), so drop it; the
 * channels are sent again on a new one (and, confirmed, wake their holders
 * to check). Subscriber thread alone. */
static void drop_unconfirmed(dlock__subscriber *s) {
  dlock_mono_ms now = dlock_mono_now();
  for (int i = s->nconns - 1; i >= 0; i--) {
    int stale = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t j = 0; j < s->nchannels && !stale; j++) {
      const channel *ch = &s->channels[j];
      stale = ch->sent && !ch->confirmed && ch->node == s->conns[i].node &&
              now - ch->sent_at > s->client->command_timeout_ms;
    }
    pthread_mutex_unlock(&s->mu);
    if (stale) {
      dlock__error(DLOCK_ETIMEDOUT, "%s: no answer to SUBSCRIBE within %lld ms", s->conns[i].node->ep.host,
                   (long long)s->client->command_timeout_ms);
      drop_conn(s, &s->conns[i]);
    }
  }
}

static void *subscriber_main(void *arg) {
  dlock__subscriber *s = arg;
  dlock_client *c = s->client;
  int64_t backoff = 50;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    pthread_mutex_unlock(&s->mu);
    int pending = sync_subscriptions(s);
    struct pollfd p[MAX_SUB_CONNS + 1];
    int buffered = 0;
    for (int i = 0; i < s->nconns; i++) {
      p[i] = (struct pollfd){dlock__conn_fd(s->conns[i].conn), POLLIN, 0};
      buffered |= dlock__conn_has_buffered(s->conns[i].conn);
    }
    p[s->nconns] = (struct pollfd){s->wake[0], POLLIN, 0};
    /* At most a second between passes: under Sentinel a pass is also how a
     * failover is noticed (the master asked again). */
    int n = buffered ? 1 : poll(p, (nfds_t)s->nconns + 1, pending ? (int)backoff : 1000);
    if (!buffered && n > 0 && (p[s->nconns].revents & POLLIN)) {
      char buf[64];
      while (read(s->wake[0], buf, sizeof buf) > 0) {
      }
    }
    backoff = pending ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 50;
    for (int i = s->nconns - 1; n > 0 && i >= 0; i--) {
      sub_conn *sc = &s->conns[i];
      if (!dlock__conn_has_buffered(sc->conn) && (buffered || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))) continue;
      dlock__reply *r = NULL;
      int rc = dlock__conn_read(sc->conn, dlock_mono_now() + c->command_timeout_ms, &r);
      if (rc) {
        drop_conn(s, sc);
        continue;
      }
      handle_reply(s, sc->node, r);
      dlock__reply_free(r);
    }
    drop_unconfirmed(s);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  for (int i = 0; i < s->nconns; i++) dlock__conn_close(s->conns[i].conn);
  s->nconns = 0;
  return NULL;
}

static int start(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  int rc = 0;
  if (!dlock__rc(c)->subscriber) {
    dlock__subscriber *s = calloc(1, sizeof *s);
    if (!s) {
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
      free(s);
      rc = dlock__error(DLOCK_ESYS, "pipe: %s", strerror(errno));
    } else {
      s->client = c;
      s->sharded = dlock__sharded_pubsub(c);
      pthread_mutex_init(&s->mu, NULL);
      dlock__cond_init(&s->cv);
      if (pthread_create(&s->thread, NULL, subscriber_main, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        rc = dlock__error(DLOCK_ESYS, "cannot start the subscriber thread");
      } else {
        dlock__rc(c)->subscriber = s;
      }
    }
  }
  pthread_mutex_unlock(&c->lazy_mu);
  return rc;
}

static dlock__subscriber *get(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  dlock__subscriber *s = dlock__rc(c)->subscriber;
  pthread_mutex_unlock(&c->lazy_mu);
  return s;
}

/* The entry of channel 'name' pinned to 'fixed' (NULL: the routed one). */
static channel *find_entry(dlock__subscriber *s, const char *name, size_t len, dlock__node *fixed) {
  for (size_t i = 0; i < s->nchannels; i++)
    if (s->channels[i].fixed == fixed && s->channels[i].len == len && !memcmp(s->channels[i].name, name, len))
      return &s->channels[i];
  return NULL;
}

/* The entry of 'name' subscribed (or being subscribed) on 'node'. */
static channel *find_sent(dlock__subscriber *s, const char *name, size_t len, dlock__node *node) {
  for (size_t i = 0; i < s->nchannels; i++)
    if (s->channels[i].sent && s->channels[i].node == node && s->channels[i].len == len &&
        !memcmp(s->channels[i].name, name, len))
      return &s->channels[i];
  return NULL;
}

/* The homes of a handle's channel: the Redlock nodes, or one routed entry. */
static int homes(dlock_client *c, dlock__node **out) {
  int n = dlock__redis_node_count(c);
  if (n <= 0) {
    out[0] = NULL;
    return 1;
  }
  for (int i = 0; i < n; i++) out[i] = dlock__redlock_node(c, i);
  return n;
}

int dlock__subscriber_watch(dlock_client *c, dlock__sub_target *t) {
  /* Tried once per handle: if it fails, the waiter goes on with re-checks. */
  t->watch_tried = 1;
  int rc = start(c);
  if (rc) return rc;
  dlock__subscriber *s = dlock__rc(c)->subscriber;
  dlock__node *home[DLOCK__REDLOCK_MAX];
  int nh = homes(c, home);
  const char *name = t->channel;
  size_t len = t->channel_len;
  pthread_mutex_lock(&s->mu);
  for (int h = 0; h < nh; h++) {
    channel *ch = find_entry(s, name, len, home[h]);
    if (!ch) {
      if (s->nchannels == s->capchannels) {
        size_t cap = s->capchannels ? s->capchannels * 2 : 16;
        channel *grown = realloc(s->channels, cap * sizeof *grown);
        if (!grown) break;
        s->channels = grown;
        s->capchannels = cap;
      }
      ch = &s->channels[s->nchannels];
      memset(ch, 0, sizeof *ch);
      if (!(ch->name = malloc(len + 1))) break;
      memcpy(ch->name, name, len + 1);
      ch->len = len;
      ch->fixed = home[h];
      ch->shard = t->shard;
      s->nchannels++;
    }
    ch->refs++;
    t->subscribed = h + 1; /* entries referenced */
  }
  if (!t->subscribed) {
    pthread_mutex_unlock(&s->mu);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  poke(s);
  /* Wait until every home settled, or (Redlock) a majority confirmed: a
   * release publishes on every node, so any one subscribed node wakes us;
   * a node that is down or frozen must not hold up the wait. */
  int want = nh > 1 ? nh / 2 + 1 : 1;
  dlock_mono_ms deadline = dlock_mono_now() + c->command_timeout_ms;
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  int ok = 0;
  for (;;) {
    int settled = 0;
    ok = 0;
    for (int h = 0; h < t->subscribed; h++) {
      channel *ch = find_entry(s, name, len, home[h]);
      if (!ch || ch->confirmed != 0) settled++;
      if (ch && ch->confirmed == 1) ok++;
    }
    if (settled == t->subscribed || ok >= want) break;
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) break;
  }
  rc = ok > 0 ? 0 : DLOCK_EIO;
  if (rc)
    dlock__error(rc, "subscribe to %s failed (%s); waiting falls back to re-checks", name,
                 s->last_error[0] ? s->last_error : "no confirmation in time");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void dlock__subscriber_unwatch(dlock_client *c, dlock__sub_target *t) {
  int n = t->subscribed;
  if (!n) return;
  t->subscribed = 0;
  dlock__subscriber *s = get(c);
  if (!s) return;
  dlock__node *home[DLOCK__REDLOCK_MAX];
  homes(c, home);
  pthread_mutex_lock(&s->mu);
  for (int h = 0; h < n; h++) {
    channel *ch = find_entry(s, t->channel, t->channel_len, home[h]);
    if (ch && ch->refs > 0) ch->refs--;
  }
  poke(s);
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_add_waiter(dlock_client *c, dlock__sub_target *t) {
  if (start(c) != 0) return; /* no subscriber: re-checks only */
  dlock__subscriber *s = dlock__rc(c)->subscriber;
  pthread_mutex_lock(&s->mu);
  if (s->nwaiters == s->capwaiters) {
    size_t cap = s->capwaiters ? s->capwaiters * 2 : 16;
    dlock__sub_target **grown = realloc(s->waiters, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->waiters = grown;
    s->capwaiters = cap;
  }
  s->waiters[s->nwaiters++] = t;
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_remove_waiter(dlock_client *c, dlock__sub_target *t) {
  dlock__subscriber *s = get(c);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->nwaiters; i++)
    if (s->waiters[i] == t) {
      s->waiters[i] = s->waiters[--s->nwaiters];
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_stop(dlock_client *c) {
  dlock__subscriber *s = dlock__rc(c)->subscriber;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  poke(s);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  for (size_t i = 0; i < s->nchannels; i++) free(s->channels[i].name);
  free(s->channels);
  free(s->waiters);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  dlock__rc(c)->subscriber = NULL;
}
