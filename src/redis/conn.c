/*
 * conn.c - one connection to Redis: TCP, unix socket or TLS, speaking RESP.
 *
 * hiredis 0.14 has no TLS, so we do the I/O ourselves on a non-blocking
 * socket (poll() gives every call a deadline), encode commands in RESP here
 * and parse replies with reader.c, which bounds what a server may announce:
 * the library needs no Redis client library at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "redis_topo.h"

struct dlock__conn {
  int fd;
  SSL *ssl;
  dlock__reader *reader;
  char *out;
  size_t out_len, out_cap;
  int64_t last_reply_ns; /* CLOCK_MONOTONIC when the last whole reply was read */
  int broken;
  int block_ms;        /* plain sockets: SO_RCVTIMEO of blocking reads (0: never block) */
  const char *display; /* points into the endpoint, which outlives us */
};

/* A pooled connection whose last reply came less than this long ago is
 * not polled before reuse (dlock__conn_idle_closed). */
#define JUST_USED_NS 20000

/* ---- Reply objects ---- */

void dlock__reply_free(dlock__reply *r) {
  if (!r) return;
  for (size_t i = 0; i < r->elements; i++) dlock__reply_free(r->element[i]);
  free(r->element);
  free(r->str);
  free(r);
}

int dlock__reply_error_status(const dlock__reply *r) {
  if (!r || r->type != DLOCK__REPLY_ERROR) return 0;
  /* Inside scripts Redis 7 keeps the original error code at the start. */
  const char *s = r->str;
  if (!strncmp(s, "WRONGTYPE", 9)) return DLOCK_EWRONGTYPE;
  if (!strncmp(s, "NOPERM", 6) || strstr(s, "No permissions")) return DLOCK_ENOPERM;
  if (!strncmp(s, "NOAUTH", 6) || !strncmp(s, "WRONGPASS", 9)) return DLOCK_EAUTH;
  if (!strncmp(s, "READONLY", 8)) return DLOCK_EREADONLY;
  if (!strncmp(s, "OOM", 3)) return DLOCK_ESERVEROOM;
  /* Not ready now, fine later: loading its data set, a script or module
   * running too long, a master down behind a replica, a slot migrating. */
  if (!strncmp(s, "LOADING", 7) || !strncmp(s, "BUSY", 4) || !strncmp(s, "MASTERDOWN", 10) ||
      !strncmp(s, "TRYAGAIN", 8) || !strncmp(s, "CLUSTERDOWN", 11))
    return DLOCK_ENOTREADY;
  if (!strncmp(s, "EFENCE", 6)) return DLOCK_EFENCE;   /* dlock's scripts */
  if (!strncmp(s, "EQUORUM", 7)) return DLOCK_EQUORUM; /* Redlock's per-call answers */
  if (!strncmp(s, "EFOREIGN", 8)) return DLOCK_EFOREIGN;
  if (!strncmp(s, "ELIMIT", 6)) return DLOCK_ELIMIT; /* sem_acquire.lua */
  return DLOCK_ESERVER;
}

/* ---- TLS context ---- */

static const char *tls_error_text(void) {
  static _Thread_local char buf[256];
  unsigned long e = ERR_peek_last_error();
  if (!e) return "no detail from OpenSSL";
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

int dlock__tls_ctx_new(const dlock__endpoint *ep, SSL_CTX **out) {
  *out = NULL;
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return dlock__error(DLOCK_ETLS, "TLS: cannot create context: %s", tls_error_text());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (!ep->tls_skip_verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int ok = ep->tls_ca_file ? SSL_CTX_load_verify_locations(ctx, ep->tls_ca_file, NULL)
                             : SSL_CTX_set_default_verify_paths(ctx);
    if (ok != 1) {
      SSL_CTX_free(ctx);
      return dlock__error(DLOCK_ETLS, "TLS: cannot load CA file '%s': %s; check tls_ca_file / ?cacert=",
                          ep->tls_ca_file ? ep->tls_ca_file : "(system default)", tls_error_text());
    }
  }
  if (ep->tls_cert_file || ep->tls_key_file) {
    if (!ep->tls_cert_file || !ep->tls_key_file) {
      SSL_CTX_free(ctx);
      return dlock__error(DLOCK_ETLS, "TLS: a client certificate needs both cert and key files");
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, ep->tls_cert_file) != 1) {
      SSL_CTX_free(ctx);
      return dlock__error(DLOCK_ETLS, "TLS: cannot load client certificate '%s': %s", ep->tls_cert_file,
                          tls_error_text());
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, ep->tls_key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      SSL_CTX_free(ctx);
      return dlock__error(DLOCK_ETLS,
                          "TLS: cannot load client key '%s' (or it does not match the "
                          "certificate): %s",
                          ep->tls_key_file, tls_error_text());
    }
  }
  *out = ctx;
  return 0;
}

void dlock__tls_ctx_free(SSL_CTX *ctx) { SSL_CTX_free(ctx); }

/* ---- Waiting on the socket ---- */

static int wait_fd(int fd, short events, dlock_mono_ms deadline) {
  for (;;) {
    dlock_mono_ms left = deadline - dlock_mono_now();
    if (left <= 0) return DLOCK_ETIMEDOUT;
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return DLOCK_EIO;
  }
}

static int conn_fail(dlock__conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int conn_fail(dlock__conn *c, int status, const char *fmt, ...) {
  char detail[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  c->broken = 1;
  return dlock__error(status, "%s: %s", c->display, detail);
}

/* ---- Connect ---- */

static int set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int connect_addr(int fd, const struct sockaddr *sa, socklen_t len, dlock_mono_ms deadline) {
  if (connect(fd, sa, len) == 0) return 0;
  if (errno != EINPROGRESS && errno != EAGAIN) return errno;
  int rc = wait_fd(fd, POLLOUT, deadline);
  if (rc == DLOCK_ETIMEDOUT) return ETIMEDOUT;
  if (rc) return errno ? errno : EIO;
  int err = 0;
  socklen_t elen = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) return errno;
  return err;
}

static int open_socket(dlock__conn *c, const dlock__endpoint *ep, dlock_mono_ms deadline) {
  if (ep->is_unix) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", ep->path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || set_nonblocking(c->fd) != 0) return conn_fail(c, DLOCK_ESYS, "socket: %s", strerror(errno));
    int err = connect_addr(c->fd, (struct sockaddr *)&sa, sizeof sa, deadline);
    if (err)
      return conn_fail(c, err == ETIMEDOUT ? DLOCK_ETIMEDOUT : DLOCK_ECONNECT,
                       "cannot connect: %s; is redis-server running with this unixsocket?", strerror(err));
    return 0;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", ep->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(ep->host, port, &hints, &res);
  if (gai != 0) return conn_fail(c, DLOCK_ECONNECT, "cannot resolve host '%s': %s", ep->host, gai_strerror(gai));
  int err = ECONNREFUSED;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (c->fd < 0) {
      err = errno;
      continue;
    }
    if (set_nonblocking(c->fd) == 0 && (err = connect_addr(c->fd, ai->ai_addr, ai->ai_addrlen, deadline)) == 0) {
      int one = 1;
      setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      freeaddrinfo(res);
      return 0;
    }
    close(c->fd);
    c->fd = -1;
    if (err == ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  if (err == ETIMEDOUT)
    return conn_fail(c, DLOCK_ETIMEDOUT, "connect timed out after %d ms; is the host reachable?",
                     ep->connect_timeout_ms);
  return conn_fail(c, DLOCK_ECONNECT, "cannot connect: %s; is redis-server running there?", strerror(err));
}

static int is_ip_literal(const char *host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static int tls_handshake(dlock__conn *c, const dlock__endpoint *ep, SSL_CTX *ctx, dlock_mono_ms deadline) {
  c->ssl = SSL_new(ctx);
  if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
    return conn_fail(c, DLOCK_ETLS, "TLS setup failed: %s", tls_error_text());
  const char *name = ep->tls_server_name ? ep->tls_server_name : ep->host;
  if (!ep->tls_skip_verify) {
    X509_VERIFY_PARAM *param = SSL_get0_param(c->ssl);
    int ok =
        is_ip_literal(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name) : X509_VERIFY_PARAM_set1_host(param, name, 0);
    if (ok != 1) return conn_fail(c, DLOCK_ETLS, "TLS: cannot set the name to verify ('%s')", name);
  }
  if (!is_ip_literal(name)) SSL_set_tlsext_host_name(c->ssl, name);
  for (;;) {
    ERR_clear_error();
    int rc = SSL_connect(c->ssl);
    if (rc == 1) return 0;
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) != 0)
        return conn_fail(c, DLOCK_ETIMEDOUT, "TLS handshake timed out; is this a TLS port?");
      continue;
    }
    long vr = SSL_get_verify_result(c->ssl);
    if (vr != X509_V_OK)
      return conn_fail(c, DLOCK_ETLS,
                       "TLS: server certificate rejected for '%s': %s; check the CA "
                       "(cacert) and the server name (sni)",
                       name, X509_verify_cert_error_string(vr));
    return conn_fail(c, DLOCK_ETLS,
                     "TLS handshake failed: %s; is this a TLS port, and does the server "
                     "require a client certificate?",
                     tls_error_text());
  }
}

/* Run one command synchronously on a fresh connection (AUTH, SELECT). */
static int simple_command(dlock__conn *c, dlock_mono_ms deadline, dlock__reply **out, int argc, ...) {
  const char *argv[4];
  size_t lens[4];
  va_list ap;
  va_start(ap, argc);
  for (int i = 0; i < argc && i < 4; i++) {
    argv[i] = va_arg(ap, const char *);
    lens[i] = strlen(argv[i]);
  }
  va_end(ap);
  dlock__cmd cmd = {argc, argv, lens};
  int rc = dlock__conn_append(c, &cmd);
  if (!rc) rc = dlock__conn_flush(c, deadline);
  if (!rc) rc = dlock__conn_read(c, deadline, out);
  return rc;
}

static int handshake(dlock__conn *c, const dlock__endpoint *ep, dlock_mono_ms deadline) {
  dlock__reply *r = NULL;
  int rc;
  if (ep->password) {
    rc = ep->username ? simple_command(c, deadline, &r, 3, "AUTH", ep->username, ep->password)
                      : simple_command(c, deadline, &r, 2, "AUTH", ep->password);
    if (rc) return rc;
    if (r->type == DLOCK__REPLY_ERROR) {
      c->broken = 1;
      /* A server may quote what it was sent; the password never goes into a message. */
      const char *said =
          *ep->password && strstr(r->str, ep->password) ? "(reply withheld: it quotes the password)" : r->str;
      rc = dlock__error(DLOCK_EAUTH, "%s: authentication%s%s failed: %s; check the user and password", c->display,
                        ep->username ? " as " : "", ep->username ? ep->username : "", said);
      dlock__reply_free(r);
      return rc;
    }
    dlock__reply_free(r);
  }
  if (ep->db) {
    char db[16];
    snprintf(db, sizeof db, "%d", ep->db);
    if ((rc = simple_command(c, deadline, &r, 2, "SELECT", db))) return rc;
    if (r->type == DLOCK__REPLY_ERROR) {
      c->broken = 1;
      rc = dlock__reply_error_status(r);
      /* "DB index is out of range", or no SELECT at all (Redis Cluster): the
       * URL asks for what this server does not have. */
      if (rc != DLOCK_EAUTH && rc != DLOCK_ENOPERM)
        rc = dlock__error(DLOCK_EDB,
                          "%s: SELECT %s failed: %s; the URL names database %s, which this "
                          "server does not offer (see its 'databases' setting; 0 always exists)",
                          c->display, db, r->str, db);
      else
        rc = dlock__error(rc, "%s: SELECT %s failed: %s", c->display, db, r->str);
      dlock__reply_free(r);
      return rc;
    }
    dlock__reply_free(r);
  }
  if ((rc = simple_command(c, deadline, &r, 1, "PING"))) return rc;
  if (r->type == DLOCK__REPLY_ERROR) {
    c->broken = 1;
    int st = dlock__reply_error_status(r);
    rc = dlock__error(st == DLOCK_EAUTH || st == DLOCK_ENOTREADY ? st : DLOCK_ESERVER, "%s: PING failed: %s%s",
                      c->display, r->str,
                      st == DLOCK_EAUTH ? "; the server requires a password (redis://user:password@host)" : "");
    dlock__reply_free(r);
    return rc;
  }
  dlock__reply_free(r);
  return 0;
}

/* A reply is waited for with one blocking recv(2) instead of recv, poll(2)
 * and recv again: the socket becomes blocking with a receive timeout of half
 * the command timeout, and a read blocks only while more than that is left
 * before its deadline (so it never overruns it); sends and shorter waits pass
 * MSG_DONTWAIT and poll as before. TLS keeps its non-blocking socket. */
static void enable_blocking_reads(dlock__conn *c, int command_timeout_ms) {
  int ms = command_timeout_ms / 2;
  if (ms < 1) return;
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  int flags = fcntl(c->fd, F_GETFL);
  if (flags < 0 || setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) return;
  if (fcntl(c->fd, F_SETFL, flags & ~O_NONBLOCK) == 0) c->block_ms = ms;
}

int dlock__conn_open(const dlock__endpoint *ep, SSL_CTX *ctx, dlock__conn **out) {
  return dlock__conn_open_until(ep, ctx, INT64_MAX, out);
}

int dlock__conn_open_until(const dlock__endpoint *ep, SSL_CTX *ctx, dlock_mono_ms limit, dlock__conn **out) {
  *out = NULL;
  dlock__conn *c = calloc(1, sizeof *c);
  if (!c) return dlock__error(DLOCK_ENOMEM, "out of memory");
  c->fd = -1;
  c->display = ep->display;
  c->reader = dlock__reader_new(NULL);
  if (!c->reader) {
    free(c);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  dlock_mono_ms deadline = dlock_mono_now() + ep->connect_timeout_ms;
  if (limit < deadline) deadline = limit;
  int rc = open_socket(c, ep, deadline);
  if (!rc && ep->tls) rc = tls_handshake(c, ep, ctx, deadline);
  if (!rc) rc = handshake(c, ep, deadline);
  if (rc) {
    dlock__conn_close(c);
    return rc;
  }
  if (!c->ssl) enable_blocking_reads(c, ep->command_timeout_ms);
  *out = c;
  return 0;
}

void dlock__conn_close(dlock__conn *c) {
  if (!c) return;
  if (c->ssl) SSL_free(c->ssl); /* no close_notify: the peer may be gone */
  if (c->fd >= 0) close(c->fd);
  dlock__reader_free(c->reader);
  free(c->out);
  free(c);
}

int dlock__conn_fd(const dlock__conn *c) { return c->fd; }
int dlock__conn_broken(const dlock__conn *c) { return c->broken; }

/* ---- Commands ---- */

/* 'v' in decimal at 'p' (no terminator); returns the digits written. */
static size_t put_decimal(char *p, size_t v) {
  char tmp[24];
  size_t n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  for (size_t i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
  return n;
}

size_t dlock__resp_size(const dlock__cmd *cmd) {
  size_t need = 1 + 20 + 2;
  for (int i = 0; i < cmd->argc; i++) need += 1 + 20 + 2 + cmd->lens[i] + 2;
  return need;
}

/* RESP: *<argc>\r\n, then $<len>\r\n<bytes>\r\n for each argument; written
 * here (snprintf per argument cost more than the rest of the encoding). */
size_t dlock__resp_encode(char *out, const dlock__cmd *cmd) {
  char *p = out;
  *p++ = '*';
  p += put_decimal(p, (size_t)cmd->argc);
  *p++ = '\r';
  *p++ = '\n';
  for (int i = 0; i < cmd->argc; i++) {
    *p++ = '$';
    p += put_decimal(p, cmd->lens[i]);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, cmd->argv[i], cmd->lens[i]);
    p += cmd->lens[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  return (size_t)(p - out);
}

int dlock__conn_append(dlock__conn *c, const dlock__cmd *cmd) {
  size_t need = dlock__resp_size(cmd);
  if (c->out_len + need > c->out_cap) {
    char *grown = realloc(c->out, c->out_len + need);
    if (!grown) {
      /* On failure the output buffer may hold part of a pipeline: never reuse it. */
      c->broken = 1;
      return dlock__error(DLOCK_ENOMEM, "out of memory formatting a command");
    }
    c->out = grown;
    c->out_cap = c->out_len + need;
  }
  c->out_len += dlock__resp_encode(c->out + c->out_len, cmd);
  return 0;
}

/* SSL_write() writes to the socket with write(2), which raises SIGPIPE on a
 * closed peer. A library must not change the process's signal disposition,
 * so block SIGPIPE in this thread and swallow one that became pending. */
static int ssl_write_nosigpipe(SSL *ssl, const void *buf, int len) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  int n = SSL_write(ssl, buf, len);
  sigset_t pending;
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) && !sigismember(&old, SIGPIPE)) {
    struct timespec zero = {0, 0};
    sigtimedwait(&pipe_set, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return n;
}

int dlock__conn_flush(dlock__conn *c, dlock_mono_ms deadline) {
  size_t sent = 0;
  if (c->broken) return conn_fail(c, DLOCK_EIO, "connection already failed");
  while (sent < c->out_len) {
    size_t left = c->out_len - sent;
    if (c->ssl) {
      ERR_clear_error();
      int n = ssl_write_nosigpipe(c->ssl, c->out + sent, left > 1 << 30 ? 1 << 30 : (int)left);
      if (n > 0) {
        sent += (size_t)n;
        continue;
      }
      int e = SSL_get_error(c->ssl, n);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) != 0)
          return conn_fail(c, DLOCK_ETIMEDOUT, "timed out writing to Redis");
        continue;
      }
      return conn_fail(c, DLOCK_EIO, "TLS write failed: %s", tls_error_text());
    }
    ssize_t n = send(c->fd, c->out + sent, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_fd(c->fd, POLLOUT, deadline) != 0) return conn_fail(c, DLOCK_ETIMEDOUT, "timed out writing");
      continue;
    }
    return conn_fail(c, DLOCK_EIO, "write failed: %s", strerror(errno));
  }
  c->out_len = 0;
  return 0;
}

int dlock__conn_has_buffered(dlock__conn *c) {
  /* The reader keeps unparsed bytes in r->buf; ask it without consuming. */
  return dlock__reader_pending(c->reader) > 0 || (c->ssl && SSL_pending(c->ssl) > 0);
}

int dlock__conn_read(dlock__conn *c, dlock_mono_ms deadline, dlock__reply **out) {
  *out = NULL;
  if (c->broken) return conn_fail(c, DLOCK_EIO, "connection already failed");
  int fed = 0;
  for (;;) {
    dlock__reply *reply = NULL;
    if (dlock__reader_get(c->reader, &reply) != 0)
      return conn_fail(c, DLOCK_EPROTO, "protocol error: %s; is this a Redis server?", dlock__reader_error(c->reader));
    if (reply) {
      *out = reply;
      c->last_reply_ns = dlock__mono_ns();
      return 0;
    }
    /* A server that keeps sending must not keep us past the deadline (a
     * socket that always has data never makes us wait in poll()). */
    if (fed && dlock_mono_now() >= deadline)
      return conn_fail(c, DLOCK_ETIMEDOUT, "no whole reply within the command timeout");
    char buf[16384];
    ssize_t n;
    if (c->ssl) {
      ERR_clear_error();
      int r = SSL_read(c->ssl, buf, sizeof buf);
      if (r > 0) {
        n = r;
      } else {
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          if (wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) != 0)
            return conn_fail(c, DLOCK_ETIMEDOUT, "no reply within the command timeout");
          continue;
        }
        if (e == SSL_ERROR_ZERO_RETURN) return conn_fail(c, DLOCK_EIO, "server closed the connection");
        /* An alert from the server (e.g. "certificate required") is a TLS
         * failure, not a dropped connection. */
        if (e == SSL_ERROR_SSL)
          return conn_fail(c, DLOCK_ETLS,
                           "TLS error from the server: %s; does it require a client "
                           "certificate (cert=, key=)?",
                           tls_error_text());
        return conn_fail(c, DLOCK_EIO, "TLS read failed: %s", tls_error_text());
      }
    } else {
      int block = c->block_ms && deadline - dlock_mono_now() > c->block_ms;
      n = recv(c->fd, buf, sizeof buf, block ? 0 : MSG_DONTWAIT);
      if (n == 0) return conn_fail(c, DLOCK_EIO, "server closed the connection");
      if (n < 0) {
        if (errno == EINTR) continue;
        if (block && (errno == EAGAIN || errno == EWOULDBLOCK)) continue; /* SO_RCVTIMEO ran out */
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (wait_fd(c->fd, POLLIN, deadline) != 0)
            return conn_fail(c, DLOCK_ETIMEDOUT, "no reply within the command timeout");
          continue;
        }
        return conn_fail(c, DLOCK_EIO, "read failed: %s", strerror(errno));
      }
    }
    fed = 1;
    if (dlock__reader_feed(c->reader, buf, (size_t)n) != 0)
      return conn_fail(c, DLOCK_EPROTO, "protocol error: %s; is this a Redis server?", dlock__reader_error(c->reader));
  }
}

int dlock__conn_try_read(dlock__conn *c, dlock__reply **out) {
  *out = NULL;
  if (c->broken) return conn_fail(c, DLOCK_EIO, "connection already failed");
  for (;;) {
    if (dlock__reader_get(c->reader, out) != 0)
      return conn_fail(c, DLOCK_EPROTO, "protocol error: %s; is this a Redis server?", dlock__reader_error(c->reader));
    if (*out) return 0;
    char buf[16384];
    ssize_t n;
    if (c->ssl) {
      ERR_clear_error();
      int r = SSL_read(c->ssl, buf, sizeof buf);
      if (r <= 0) {
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
        if (e == SSL_ERROR_ZERO_RETURN) return conn_fail(c, DLOCK_EIO, "server closed the connection");
        return conn_fail(c, e == SSL_ERROR_SSL ? DLOCK_ETLS : DLOCK_EIO, "TLS read failed: %s", tls_error_text());
      }
      n = r;
    } else {
      n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) return conn_fail(c, DLOCK_EIO, "server closed the connection");
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return conn_fail(c, DLOCK_EIO, "read failed: %s", strerror(errno));
      }
    }
    if (dlock__reader_feed(c->reader, buf, (size_t)n) != 0)
      return conn_fail(c, DLOCK_EPROTO, "protocol error: %s; is this a Redis server?", dlock__reader_error(c->reader));
  }
}

int dlock__conn_idle_closed(dlock__conn *c) {
  if (c->broken || dlock__conn_has_buffered(c)) return 1;
  /* Handed back a moment ago (the release after an acquire, back-to-back
   * cycles): the poll would only cover a close in these microseconds, no
   * likelier than one just after the poll, which it cannot cover either
   * (the reply is then lost, and handled as any lost reply). It is for
   * connections that sat idle: an idle timeout, a restart, CLIENT KILL. */
  if (dlock__mono_ns() - c->last_reply_ns < JUST_USED_NS) return 0;
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  int n = poll(&p, 1, 0);
  if (n == 0) return 0;
  if (n < 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) || !c->ssl) return 1;
  /* TLS: records that carry no data (a session ticket) make the socket
   * readable too. Let OpenSSL take them; only data or a close is stale. */
  char b;
  ERR_clear_error();
  int r = SSL_peek(c->ssl, &b, 1);
  if (r > 0) return 1;
  int e = SSL_get_error(c->ssl, r);
  return !(e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE);
}
