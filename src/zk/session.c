/*
 * zk/session.c - the ZooKeeper session: connect (with a diagnosis when no
 * server answers), the session watcher, and the monitor thread that pings,
 * keeps the validity deadline on our monotonic clock and reports
 * suspension, reconnection and loss. Uses the C client's multi-threaded
 * library (libzookeeper_mt): its own I/O and completion threads call the
 * watcher; our monitor thread calls the core's callback.
 *
 * Loss rule (docs/zookeeper.md): the ensemble expires a session no sooner
 * than its timeout after its leader last heard of us. Only an answer that
 * went through the leader counts as contact: the validity ping is a sync,
 * which a follower answers only once its leader answered it (a read such as
 * exists is served by the follower alone, also by one cut off from the
 * leader, which serves on for syncLimit ticks). The leader hears of a
 * follower's sessions only at its pings, every half tick, and a tick is at
 * most half the session timeout (ZooKeeper's minimum session timeout is two
 * ticks): so the leader's record may be up to a quarter of the timeout
 * older than our contact, and no older than our previous contact (pings are
 * a quarter of the timeout apart, and the leader pinged our server in
 * between). valid_until = the earlier of (send time of the last answered
 * sync + 3/4 of the negotiated timeout) and (send time of the one before +
 * the timeout), less the drift allowance, is a moment before which nobody
 * else can have been given our lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "zk/zk_int.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void quiet_client_log(void) {
  /* The C client logs every reconnect attempt to stderr; our errors say
   * what matters. 0 turns its logging off. */
  zoo_set_debug_level((ZooLogLevel)0);
}

char *dlock__zk_path(dlock__zk *z, const char *a, const char *b) {
  size_t n = strlen(z->url.ns) + 1 + strlen(a) + (b ? 1 + strlen(b) : 0) + 1;
  char *p = malloc(n);
  if (!p) return NULL;
  snprintf(p, n, "%s/%s%s%s", z->url.ns, a, b ? "/" : "", b ? b : "");
  return p;
}

int dlock__zk_rc_uncertain(int zrc) {
  return zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT || zrc == ZSESSIONEXPIRED || zrc == ZCLOSING ||
         zrc == ZSESSIONMOVED;
}

int dlock__zk_fail(dlock__zk *z, int zrc, const char *op, const char *path) {
  const char *p = path ? path : "/";
  switch (zrc) {
  case ZNOAUTH:
    return dlock__error(DLOCK_EAUTH,
                        "%s '%s' on %s: not allowed by the ACL (the node's, or its parent's for a create or "
                        "delete): give ?digest=user:password of the user the ACL admits (with a digest, dlock's "
                        "nodes admit only the digest that created them: all clients of a lock use the same one)",
                        op, p, z->server);
  case ZAUTHFAILED:
    return dlock__error(DLOCK_EAUTH, "%s '%s' on %s: the ensemble refused our digest credentials", op, p, z->server);
  case ZCONNECTIONLOSS:
  case ZSESSIONMOVED:
    return dlock__error(DLOCK_EIO, "%s '%s' on %s: connection to ZooKeeper lost (%s)", op, p, z->server, zerror(zrc));
  case ZOPERATIONTIMEOUT:
    return dlock__error(DLOCK_ETIMEDOUT, "%s '%s' on %s: ZooKeeper did not answer in time", op, p, z->server);
  case ZSESSIONEXPIRED:
  case ZINVALIDSTATE:
    return dlock__error(DLOCK_ELOST, "%s '%s' on %s: the ZooKeeper session expired (its ephemeral nodes are gone)", op,
                        p, z->server);
  case ZCLOSING:
    return dlock__error(DLOCK_ECLOSED, "%s '%s' on %s: the ZooKeeper handle is closing", op, p, z->server);
  case ZNOCHILDRENFOREPHEMERALS:
    return dlock__error(DLOCK_EFOREIGN,
                        "%s '%s' on %s: a parent is an ephemeral node of some other program, not a lock path", op, p,
                        z->server);
  case ZNOTREADONLY:
    return dlock__error(DLOCK_EREADONLY, "%s '%s' on %s: the server is in read-only mode (no quorum)", op, p,
                        z->server);
  case ZMARSHALLINGERROR:
    return dlock__error(DLOCK_EPROTO, "%s '%s' on %s: %s", op, p, z->server, zerror(zrc));
  case ZBADARGUMENTS:
    return dlock__error(DLOCK_ENAME, "%s '%s' on %s: ZooKeeper refused the path (%s)", op, p, z->server, zerror(zrc));
  default:
    return dlock__error(DLOCK_ESERVER, "%s '%s' on %s: %s (ZooKeeper error %d)", op, p, z->server, zerror(zrc), zrc);
  }
}

/* ---- ACLs ---- */

static char scheme_auth[] = "auth", id_empty[] = "", scheme_world[] = "world", id_anyone[] = "anyone";
/* The client's ZOO_PERM_* are variables, not constants: filled once. */
static struct ACL closed_acl[2];
static struct ACL_vector closed_acl_vector = {2, closed_acl};
static pthread_once_t closed_acl_once = PTHREAD_ONCE_INIT;

static void closed_acl_init(void) {
  closed_acl[0].perms = ZOO_PERM_ALL;
  closed_acl[0].id.scheme = scheme_auth;
  closed_acl[0].id.id = id_empty;
  closed_acl[1].perms = ZOO_PERM_READ;
  closed_acl[1].id.scheme = scheme_world;
  closed_acl[1].id.id = id_anyone;
}

const struct ACL_vector *dlock__zk_acl(const dlock__zk *z) {
  if (!z->url.digest) return &ZOO_OPEN_ACL_UNSAFE;
  pthread_once(&closed_acl_once, closed_acl_init);
  return &closed_acl_vector;
}

/* Our digest's id as ZooKeeper stores it in an ACL: "user:" followed by
 * base64(SHA1("user:password")). 0, or -1 when it cannot be computed. */
static int our_digest_id(const char *digest, char *out, size_t len) {
  const char *colon = strchr(digest, ':');
  if (!colon) return -1;
  size_t ulen = (size_t)(colon - digest);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (!EVP_Digest(digest, strlen(digest), md, &mdlen, EVP_sha1(), NULL)) return -1;
  char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  EVP_EncodeBlock((unsigned char *)b64, md, (int)mdlen);
  int n = snprintf(out, len, "%.*s:%s", (int)ulen, digest, b64);
  OPENSSL_cleanse(md, sizeof md);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Whether 'acl' admits anyone but us beyond read: closed only if EVERY
 * entry is our own digest (any rights) or grants read alone. An ip: entry
 * (ip:0.0.0.0/0 matches every client), another digest, world:anyone or any
 * other scheme with more than read counts as open: such clients need no
 * credentials of ours. 'what' gets the first such entry, for messages. */
static int acl_open(const struct ACL_vector *acl, const char *ours, char *what, size_t wlen) {
  for (int i = 0; i < acl->count; i++) {
    const struct ACL *a = &acl->data[i];
    if (!(a->perms & ~ZOO_PERM_READ)) continue;
    if (a->id.scheme && a->id.id && ours && !strcmp(a->id.scheme, "digest") && !strcmp(a->id.id, ours)) continue;
    /* Another digest is a hash, not a secret, but name only its user. */
    const char *id = a->id.id ? a->id.id : "";
    int idlen = (int)strlen(id);
    if (a->id.scheme && !strcmp(a->id.scheme, "digest") && strchr(id, ':')) idlen = (int)(strchr(id, ':') - id);
    snprintf(what, wlen, "%s:%.*s", a->id.scheme ? a->id.scheme : "?", idlen, id);
    return 1;
  }
  return 0;
}

int dlock__zk_close_path(dlock__zk *z, dlock__zk_sess *s, const char *path, int *closed_now) {
  if (closed_now) *closed_now = 0;
  if (!z->url.digest) return 0;
  char ours[256], what[300] = "";
  if (our_digest_id(z->url.digest, ours, sizeof ours) != 0)
    return dlock__error(DLOCK_ESYS, "'%s' on %s: could not compute our digest's id (SHA1)", path, z->server);
  int resent = 0; /* a setAcl whose reply was lost: it may be what closed it */
  for (int attempt = 0; attempt < 20; attempt++) {
    struct ACL_vector acl;
    struct Stat st;
    int zrc = zoo_get_acl(s->zh, path, &acl, &st);
    if (zrc == ZNONODE) {
      if (closed_now) *closed_now = resent;
      return 0;
    }
    if (zrc != ZOK) {
      if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
          dlock__zk_wait_connected(s, dlock__zk_retry_limit(s)))
        continue;
      return dlock__zk_fail(z, zrc, "read the ACL of", path);
    }
    int open = acl_open(&acl, ours, what, sizeof what);
    deallocate_ACL_vector(&acl);
    if (!open) {
      if (closed_now) *closed_now = resent;
      return 0;
    }
    /* Only if nobody changed it since we read it (its ACL version); a
     * resend after a lost reply is decided by reading it again. */
    zrc = zoo_set_acl(s->zh, path, st.aversion, dlock__zk_acl(z));
    if (zrc == ZOK) {
      if (closed_now) *closed_now = 1;
      return 0;
    }
    if (zrc == ZBADVERSION || zrc == ZNONODE) continue;
    if (dlock__zk_rc_uncertain(zrc) && zrc != ZSESSIONEXPIRED &&
        dlock__zk_wait_connected(s, dlock__zk_retry_limit(s))) {
      resent = 1;
      continue;
    }
    if (zrc == ZNOAUTH)
      return dlock__error(DLOCK_EAUTH,
                          "'%s' on %s lets clients without our credentials create, delete or write nodes there "
                          "(its ACL entry %s has more than read), and our digest may not change its ACL: such a "
                          "client could delete a holder's node or lower a guard. Have its owner restrict it (zkCli: "
                          "setAcl %s auth::cdrwa,world:anyone:r, as the digest user), or use another namespace",
                          path, z->server, what, path);
    return dlock__zk_fail(z, zrc, "restrict the ACL of", path);
  }
  return dlock__error(DLOCK_EUNKNOWN, "'%s' on %s: its ACL kept changing while we restricted it; try again", path,
                      z->server);
}

/* ---- Watcher and pings ---- */

static void queue_event(dlock__zk_sess *s, dlock__zk_event ev) { s->ev_pending |= 1 << ev; }

/* Caller holds z->mu. Past 'valid_until' the session may have expired
 * (e.g. our process was paused): its holds are lost, as the monitor
 * thread would find on its next turn. */
static void mark_lost_past_deadline(dlock__zk_sess *s) {
  if (s->lost || !s->connected_once || dlock_mono_now() < s->valid_until) return;
  s->lost = DLOCK_LOST_UNREACHABLE;
  queue_event(s, DLOCK__ZK_LOST);
  pthread_cond_broadcast(&s->z->cv);
}

/* How long after a contact sent at 'sent' (the one before it sent at
 * 'prev') the session surely lives. */
static dlock_mono_ms valid_after(dlock_mono_ms sent, dlock_mono_ms prev, int timeout_ms) {
  int64_t t = timeout_ms;
  dlock_mono_ms v = sent + t - t / 4;
  if (prev + t < v) v = prev + t; /* our ping came late: the leader's record may be that old */
  return v - (t / 100 + 2);
}

static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  dlock__zk_sess *s = ctx;
  dlock__zk *z = s->z;
  (void)zh;
  (void)path;
  pthread_mutex_lock(&z->mu);
  if (type == ZOO_SESSION_EVENT) {
    s->state = state;
    if (state == ZOO_CONNECTED_STATE) {
      if (!s->connected_once) {
        const clientid_t *cid = zoo_client_id(s->zh);
        s->connected_once = 1;
        s->id = cid ? cid->client_id : 0;
        s->timeout_ms = zoo_recv_timeout(s->zh);
        /* last_contact was set to the connect start; the first ping moves it. */
        s->valid_until = valid_after(s->last_contact, s->last_contact, s->timeout_ms);
      } else if (s->uncertain && !s->lost) {
        queue_event(s, DLOCK__ZK_RECONNECTED);
      }
      s->uncertain = 0;
      s->next_ping = 0; /* ping now: a fresh answer moves valid_until */
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      if (!s->lost) s->lost = DLOCK_LOST_EXPIRED;
      queue_event(s, DLOCK__ZK_LOST);
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      s->auth_failed = 1;
      if (s->connected_once && !s->lost) {
        s->lost = DLOCK_LOST_EXPIRED;
        queue_event(s, DLOCK__ZK_LOST);
      }
    } else if (s->connected_once && !s->lost && !s->uncertain) {
      /* CONNECTING or ASSOCIATING: Curator's SUSPENDED. */
      s->uncertain = 1;
      queue_event(s, DLOCK__ZK_SUSPENDED);
    }
  }
  z->wake_gen++;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

void dlock__zk_node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
  dlock__zk *z = ctx;
  (void)zh;
  (void)type;
  (void)state;
  (void)path;
  pthread_mutex_lock(&z->mu);
  z->wake_gen++;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

/* A watched hold's node is gone (dlock__zk_watch_held): the monitor
 * delivers DLOCK__ZK_NODE_GONE. 'z' lives as long as its sessions. */
void dlock__zk_node_gone(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  if (z->cur) queue_event(z->cur, DLOCK__ZK_NODE_GONE);
  z->wake_gen++;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

typedef struct ping_ctx {
  dlock__zk_sess *s;
  dlock_mono_ms sent;
} ping_ctx;

static void note_contact(dlock__zk_sess *s, dlock_mono_ms sent) {
  /* Caller holds z->mu. Once lost, a late answer changes nothing: the
   * holds were declared lost and others may act on it. */
  if (s->lost || !s->connected_once) return;
  if (sent > s->last_contact) {
    dlock_mono_ms v = valid_after(sent, s->last_contact, s->timeout_ms);
    s->last_contact = sent;
    s->contacted = 1;
    if (v > s->valid_until) s->valid_until = v;
  }
}

static void ping_done(int rc, const char *value, const void *data) {
  ping_ctx *p = (ping_ctx *)data;
  dlock__zk *z = p->s->z;
  (void)value;
  pthread_mutex_lock(&z->mu);
  /* A sync's answer: our server heard from the leader after we sent it. */
  if (rc == ZOK) note_contact(p->s, p->sent);
  if (p->s->pings_out > 0) p->s->pings_out--;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  free(p);
}

/* Send an asynchronous ping on 's' (caller holds z->mu): a sync, which our
 * server answers only after its leader did (see the loss rule above). */
static int send_sync(dlock__zk_sess *s, dlock_mono_ms now) {
  ping_ctx *p = malloc(sizeof *p);
  if (!p) return ZSYSTEMERROR;
  p->s = s;
  p->sent = now;
  int zrc = zoo_async(s->zh, "/", ping_done, p);
  if (zrc != ZOK)
    free(p);
  else
    s->pings_out++;
  return zrc;
}

static void send_ping(dlock__zk_sess *s, dlock_mono_ms now) { (void)send_sync(s, now); }

int dlock__zk_sync(dlock__zk_sess *s) {
  dlock__zk *z = s->z;
  pthread_mutex_lock(&z->mu);
  int zrc = send_sync(s, dlock_mono_now());
  pthread_mutex_unlock(&z->mu);
  return zrc;
}

/* ---- Monitor thread ---- */

static void *monitor_main(void *arg) {
  dlock__zk *z = arg;
  pthread_mutex_lock(&z->mu);
  while (!z->stop) {
    dlock_mono_ms now = dlock_mono_now();
    dlock__zk_sess *s = z->cur;
    dlock_mono_ms wake = now + 1000;
    if (s && s->connected_once) {
      mark_lost_past_deadline(s);
      /* One ping at a time: while a sync waits (our server cannot reach its
       * leader), later ones would queue behind it on the same session. */
      if (!s->lost && s->state == ZOO_CONNECTED_STATE && now >= s->next_ping && !s->pings_out) {
        send_ping(s, now);
        s->next_ping = now + (s->timeout_ms / 4 > 20 ? s->timeout_ms / 4 : 20);
      }
      if (!s->lost) {
        if (s->valid_until < wake) wake = s->valid_until;
        /* A ping out wakes us when answered (ping_done). */
        if (s->state == ZOO_CONNECTED_STATE && !s->pings_out && s->next_ping < wake) wake = s->next_ping;
      }
      if (s->ev_pending && z->fn) {
        dlock__zk_event_fn fn = z->fn;
        void *fa = z->fn_arg;
        int pending = s->ev_pending;
        s->ev_pending = 0;
        dlock_lost_reason reason = s->lost;
        s->refs++;
        z->in_callback = 1;
        pthread_mutex_unlock(&z->mu);
        /* In order: a suspension before the loss it led to. */
        if (pending & (1 << DLOCK__ZK_SUSPENDED)) fn(z, DLOCK__ZK_SUSPENDED, DLOCK_LOST_NONE, fa);
        if ((pending & (1 << DLOCK__ZK_RECONNECTED)) && !reason) fn(z, DLOCK__ZK_RECONNECTED, DLOCK_LOST_NONE, fa);
        if (pending & (1 << DLOCK__ZK_LOST)) fn(z, DLOCK__ZK_LOST, reason, fa);
        if ((pending & (1 << DLOCK__ZK_NODE_GONE)) && !reason) fn(z, DLOCK__ZK_NODE_GONE, DLOCK_LOST_NONE, fa);
        dlock__zk_sess_put(s);
        pthread_mutex_lock(&z->mu);
        z->in_callback = 0;
        pthread_cond_broadcast(&z->cv);
        continue;
      }
      if (!z->fn) s->ev_pending = 0;
    }
    struct timespec ts;
    dlock__deadline_timespec(wake, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  pthread_mutex_unlock(&z->mu);
  return NULL;
}

/* ---- Connecting ---- */

/* After a connect timed out: did anything accept TCP at each host? */
static void diagnose(dlock__zk *z, char *out, size_t len) {
  char hosts[1024];
  size_t o = 0;
  int any_open = 0, any_closed = 0;
  char open_list[400] = "", closed_list[400] = "";
  snprintf(hosts, sizeof hosts, "%s", z->url.hosts);
  for (char *save = NULL, *h = strtok_r(hosts, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
    char *colon = strrchr(h, ':');
    if (!colon) continue;
    *colon = '\0';
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int ok = 0;
    if (getaddrinfo(h, colon + 1, &hints, &ai) == 0 && ai) {
      int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          ok = 1;
        } else if (errno == EINPROGRESS) {
          struct pollfd pfd = {fd, POLLOUT, 0};
          int err = 0;
          socklen_t el = sizeof err;
          if (poll(&pfd, 1, 500) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0) ok = 1;
        }
        close(fd);
      }
      freeaddrinfo(ai);
    }
    *colon = ':';
    char *list = ok ? open_list : closed_list;
    size_t l = strlen(list);
    snprintf(list + l, 400 - l, "%s%s", l ? ", " : "", h);
    if (ok)
      any_open = 1;
    else
      any_closed = 1;
  }
  if (any_open)
    o += (size_t)snprintf(out + o, len - o,
                          "%s accepted a TCP connection but never completed the ZooKeeper handshake: is it a "
                          "ZooKeeper server, and does it serve (an ensemble member needs a quorum)?",
                          open_list);
  if (any_closed && o < len)
    snprintf(out + o, len - o, "%s%s refused or did not accept a connection: is ZooKeeper running there?",
             any_open ? "; " : "", closed_list);
}

static void auth_done(int rc, const void *data) {
  dlock__zk_sess *s = (dlock__zk_sess *)data;
  dlock__zk *z = s->z;
  pthread_mutex_lock(&z->mu);
  if (rc == ZAUTHFAILED) s->auth_failed = 1;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}

static void sess_close(dlock__zk_sess *s) {
  if (s->zh) zookeeper_close(s->zh);
  free(s);
}

/* Open a new session and wait for it (caller holds no lock). */
static int sess_open(dlock__zk *z, dlock__zk_sess **out) {
  dlock__zk_sess *s = calloc(1, sizeof *s);
  if (!s) return dlock__error(DLOCK_ENOMEM, "out of memory");
  s->z = z;
  s->refs = 1;
  dlock_mono_ms start = dlock_mono_now();
  s->last_contact = start;
  pthread_mutex_lock(&z->mu);
  /* The watcher may run before zookeeper_init returns: hold mu across it. */
  s->zh = zookeeper_init(z->url.hosts, session_watcher, z->url.session_timeout_ms, NULL, s, 0);
  int err = errno;
  if (!s->zh) {
    pthread_mutex_unlock(&z->mu);
    free(s);
    return dlock__error(DLOCK_ECONNECT, "cannot start a ZooKeeper session for %s: %s", z->server, strerror(err));
  }
  if (z->url.digest) {
    int rc = zoo_add_auth(s->zh, "digest", z->url.digest, (int)strlen(z->url.digest), auth_done, s);
    if (rc != ZOK) {
      pthread_mutex_unlock(&z->mu);
      sess_close(s);
      return dlock__zk_fail(z, rc, "add digest credentials for", "/");
    }
  }
  dlock_mono_ms deadline = start + z->url.connect_timeout_ms;
  while (s->state != ZOO_CONNECTED_STATE && !s->auth_failed && s->state != ZOO_EXPIRED_SESSION_STATE &&
         dlock_mono_now() < deadline) {
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  int state = s->state, auth_failed = s->auth_failed;
  pthread_mutex_unlock(&z->mu);
  if (auth_failed) {
    sess_close(s);
    return dlock__error(DLOCK_EAUTH, "connect to %s: the ensemble refused our digest credentials", z->server);
  }
  if (state != ZOO_CONNECTED_STATE) {
    char why[1200];
    diagnose(z, why, sizeof why);
    sess_close(s);
    return dlock__error(DLOCK_ECONNECT, "connect to %s: no ZooKeeper session within %d ms: %s", z->server,
                        z->url.connect_timeout_ms, why);
  }
  *out = s;
  return 0;
}

int dlock__zk_connect(const char *url, dlock__zk **out) {
  *out = NULL;
  pthread_once(&log_once, quiet_client_log);
  dlock__zk *z = calloc(1, sizeof *z);
  if (!z) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__zk_url_parse(url, &z->url);
  if (rc) {
    free(z);
    return rc;
  }
  snprintf(z->server, sizeof z->server, "zk %s%s", z->url.hosts, z->url.ns);
  pthread_mutex_init(&z->mu, NULL);
  dlock__cond_init(&z->cv);
  dlock__zk_sess *s;
  rc = sess_open(z, &s);
  if (rc) {
    dlock__zk_free(z);
    return rc;
  }
  z->cur = s;
  if (pthread_create(&z->monitor, NULL, monitor_main, z) != 0) {
    dlock__zk_free(z);
    return dlock__error(DLOCK_ESYS, "cannot start the ZooKeeper monitor thread for %s", z->server);
  }
  z->monitor_started = 1;
  /* The namespace must be reachable with our rights: a clear error now
   * beats one at the first lock. */
  rc = dlock__zk_ping(z);
  if (rc) {
    dlock__zk_free(z);
    return rc;
  }
  *out = z;
  return 0;
}

void dlock__zk_free(dlock__zk *z) {
  if (!z) return;
  pthread_mutex_lock(&z->mu);
  z->stop = 1;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
  if (z->monitor_started) pthread_join(z->monitor, NULL);
  dlock__zk_sess *s = z->cur;
  z->cur = NULL;
  if (s) {
    s->detached = 1;
    dlock__zk_sess_put(s);
  }
  pthread_cond_destroy(&z->cv);
  pthread_mutex_destroy(&z->mu);
  dlock__zk_url_clear(&z->url);
  free(z);
}

dlock__zk_sess *dlock__zk_sess_get(dlock__zk *z, int *rc) {
  pthread_mutex_lock(&z->mu);
  while (1) {
    dlock__zk_sess *s = z->cur;
    /* A process resumed after a pause must not use a session that may
     * have expired meanwhile before the monitor thread has run. Not one
     * that no ping answered yet: a slow connect (a busy server) can end past
     * its first deadline, and the ping that follows moves it. */
    if (s && s->contacted) mark_lost_past_deadline(s);
    if (z->stop) {
      pthread_mutex_unlock(&z->mu);
      *rc = dlock__error(DLOCK_ECLOSED, "%s: the client is shutting down", z->server);
      return NULL;
    }
    if (s && !s->lost) {
      s->refs++;
      pthread_mutex_unlock(&z->mu);
      return s;
    }
    if (z->reconnecting) {
      pthread_cond_wait(&z->cv, &z->mu);
      continue;
    }
    /* The session is over: a new one (its holds were reported lost). */
    z->reconnecting = 1;
    z->cur = NULL;
    if (s) s->detached = 1;
    pthread_mutex_unlock(&z->mu);
    if (s) dlock__zk_sess_put(s);
    dlock__zk_sess *n = NULL;
    int r = sess_open(z, &n);
    pthread_mutex_lock(&z->mu);
    z->reconnecting = 0;
    pthread_cond_broadcast(&z->cv);
    if (r) {
      pthread_mutex_unlock(&z->mu);
      *rc = r;
      return NULL;
    }
    z->cur = n;
  }
}

int dlock__zk_sess_over(dlock__zk_sess *s) {
  pthread_mutex_lock(&s->z->mu);
  int over = s->lost != DLOCK_LOST_NONE;
  pthread_mutex_unlock(&s->z->mu);
  return over;
}

void dlock__zk_sess_put(dlock__zk_sess *s) {
  dlock__zk *z = s->z;
  pthread_mutex_lock(&z->mu);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&z->mu);
  /* Only a detached session reaches 0 (z->cur holds one reference). */
  if (last) sess_close(s);
}

int dlock__zk_wait_connected(dlock__zk_sess *s, dlock_mono_ms deadline) {
  dlock__zk *z = s->z;
  pthread_mutex_lock(&z->mu);
  while (s->state != ZOO_CONNECTED_STATE && !s->lost && !z->stop && dlock_mono_now() < deadline) {
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    pthread_cond_timedwait(&z->cv, &z->mu, &ts);
  }
  int ok = s->state == ZOO_CONNECTED_STATE && !s->lost;
  pthread_mutex_unlock(&z->mu);
  return ok;
}

dlock_mono_ms dlock__zk_retry_limit(dlock__zk_sess *s) {
  pthread_mutex_lock(&s->z->mu);
  dlock_mono_ms v = s->valid_until;
  pthread_mutex_unlock(&s->z->mu);
  return v;
}

const char *dlock__zk_server(const dlock__zk *z) { return z->server; }

void dlock__zk_connected_to(dlock__zk *z, char *buf, size_t len) {
  int rc;
  buf[0] = '\0';
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return;
  const char *cur = zoo_get_current_server(s->zh);
  /* A static buffer of the C client's, not ours to free. */
  if (cur) snprintf(buf, len, "%s", cur);
  dlock__zk_sess_put(s);
}

void dlock__zk_on_event(dlock__zk *z, dlock__zk_event_fn fn, void *arg) {
  pthread_mutex_lock(&z->mu);
  z->fn = fn;
  z->fn_arg = arg;
  pthread_mutex_unlock(&z->mu);
}

int dlock__zk_ping(dlock__zk *z) {
  int rc;
  dlock__zk_sess *s = dlock__zk_sess_get(z, &rc);
  if (!s) return rc;
  const char *path = z->url.ns[0] ? z->url.ns : "/";
  struct Stat st;
  /* A sync first: the session answers in order, so the exists returns
   * after it, and only the sync's answer (through the leader) moves
   * valid_until; the exists checks that the namespace is readable. */
  pthread_mutex_lock(&z->mu);
  if (!s->lost && s->connected_once) send_ping(s, dlock_mono_now());
  pthread_mutex_unlock(&z->mu);
  int zrc = zoo_exists(s->zh, path, 0, &st);
  if (zrc == ZOK || zrc == ZNONODE) {
    rc = 0;
  } else {
    rc = dlock__zk_fail(z, zrc, "ping (exists)", path);
  }
  dlock__zk_sess_put(s);
  return rc;
}

dlock_mono_ms dlock__zk_valid_until(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  dlock_mono_ms v = z->cur ? z->cur->valid_until : 0;
  pthread_mutex_unlock(&z->mu);
  return v;
}

dlock_lost_reason dlock__zk_session_view(dlock__zk *z, int64_t *id, dlock_mono_ms *valid_until) {
  pthread_mutex_lock(&z->mu);
  dlock__zk_sess *s = z->cur;
  dlock_lost_reason r = DLOCK_LOST_EXPIRED;
  *id = 0;
  *valid_until = 0;
  if (s) {
    mark_lost_past_deadline(s);
    r = s->lost;
    *id = s->id;
    *valid_until = s->valid_until;
  }
  pthread_mutex_unlock(&z->mu);
  return r;
}

dlock_lost_reason dlock__zk_lost(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  dlock__zk_sess *s = z->cur;
  dlock_lost_reason r = DLOCK_LOST_NONE;
  if (!s) {
    r = DLOCK_LOST_EXPIRED;
  } else {
    mark_lost_past_deadline(s);
    r = s->lost;
  }
  pthread_mutex_unlock(&z->mu);
  return r;
}

int dlock__zk_uncertain(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  int u = z->cur && z->cur->uncertain && !z->cur->lost;
  pthread_mutex_unlock(&z->mu);
  return u;
}

int dlock__zk_session_timeout_ms(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  int t = z->cur ? z->cur->timeout_ms : 0;
  pthread_mutex_unlock(&z->mu);
  return t;
}

int64_t dlock__zk_session_id(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  int64_t id = z->cur ? z->cur->id : 0;
  pthread_mutex_unlock(&z->mu);
  return id;
}

void dlock__zk_wake(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  z->wake_gen++;
  pthread_cond_broadcast(&z->cv);
  pthread_mutex_unlock(&z->mu);
}
