/*
 * cmd_serve.c - "dlock serve": a local agent that holds locks for clients
 * of any language over HTTP/JSON (docs/agent.md, docs/agent.openapi.yaml).
 *
 * libmicrohttpd, one thread per connection. POST /v1/locks/NAME/acquire
 * waits for the lock in its connection's thread, then answers with a
 * stream of server-sent events on which the hold lives: "acquired" (holder
 * id, fence, valid_until), "renewed" when the watchdog moved valid_until,
 * then "lost" (at the local deadline at the latest) or "released"; the
 * client closing the stream releases the lock. The hold belongs to that
 * thread (the library's release and extend are the holding thread's): a
 * release or extend call from another connection is handed to it through
 * the hold's eventfd and answered when it has run. A monitor thread cancels
 * the waits whose clients went away. SIGTERM, SIGINT, SIGHUP: every hold is
 * released and every wait canceled, then the agent exits 0.
 *
 * Security: a TCP listener must be on loopback unless a token file is
 * given; with a token, every change (POST), and on a non-loopback listener
 * every call, needs "Authorization: Bearer TOKEN"; over TCP without a token
 * no change is taken (403). A unix socket is created with mode 0600 (its
 * mode decides who may connect; the token, when given, applies as well).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef DLOCK_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#include "cli.h"
#include "serve.h"

enum { OPT_LISTEN = 1, OPT_SOCKET, OPT_SOCKET_MODE, OPT_TOKEN_FILE };

static const cli_opt serve_opts[] = {
    {"listen", 0, 1, OPT_LISTEN},
    {"socket", 0, 1, OPT_SOCKET},
    {"socket-mode", 0, 1, OPT_SOCKET_MODE},
    {"token-file", 0, 1, OPT_TOKEN_FILE},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_serve_opts[] = {serve_opts, NULL};

#define DEFAULT_LISTEN "127.0.0.1:7457"
#define KEEPALIVE_MS 15000 /* a comment line on an idle stream: a dead client shows */
#define OP_WAIT_MS 10000   /* how long a release or extend call waits for the holding stream */
#define STOP_WAIT_MS 15000 /* at a signal: how long the holds get to be released */
#define MAX_WAITING 4096   /* waits the monitor watches at once */
#define IDLE_TIMEOUT_S 60  /* an idle connection (no stream) is closed */

/* 1 for 127.0.0.0/8 and ::1. */
static int is_loopback(const struct sockaddr_storage *sa) {
  if (sa->ss_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->ss_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return 0;
}

#ifdef DLOCK_HAVE_MICROHTTPD

/* Read the token: the first line of 'path', without its line end. 0, or
 * the exit code after saying why (never the token itself). */
static int read_token(const char *path, char **out) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return cli_usage_error("serve", "--token-file %s: %s; give a readable file whose first line is the token", path,
                           strerror(errno));
  char buf[1024];
  int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  size_t n = ok ? strcspn(buf, "\r\n") : 0;
  if (n < 16)
    return cli_usage_error("serve",
                           "--token-file %s: the first line must be a token of 16 characters or more "
                           "(e.g. from 'head -c 24 /dev/urandom | base64')",
                           path);
  *out = strndup(buf, n);
  explicit_bzero(buf, sizeof buf);
  return *out != NULL ? 0 : CLI_EXIT_SOFTWARE;
}

enum { H_WAITING, H_HELD, H_ENDED };
enum { OP_NONE, OP_RELEASE, OP_EXTEND };

typedef struct agent agent;

/* One acquire: waiting, then held on its stream, then ended. Freed when its
 * stream's response is freed and no release call looks at it (refs). */
typedef struct hold {
  struct hold *next;
  agent *a;
  char id[33];
  char name[DLOCK_MAX_NAME_LEN + 1];
  int kind;
  void *obj;      /* dlock_mutex, dlock_semaphore or dlock_rwlock */
  dlock_mutex *m; /* its mutex view: every dlock_mutex_* call works on it */
  int state;
  int client_gone; /* the monitor saw the client close while it waited */
  uint64_t seq;    /* 1, 2, 3 ... per hold of the agent */
  int conn_fd;
  int efd;  /* eventfd: a release or extend is asked for, or the agent stops */
  int refs; /* the stream (1 until freed) and the calls waiting on it */
  /* Asked by another connection, run by the stream's thread: */
  int op, op_done, op_rc;
  int64_t op_lease_ms;
  char op_msg[512];
  /* The stream, touched by its thread only: */
  uint64_t fence;
  dlock_mono_ms vu_sent;
  dlock_mono_ms last_out;
  int finished;
  char out[4096];
  size_t olen, ooff;
} hold;

struct agent {
  dlock_client *c;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  hold *holds;
  uint64_t seq; /* the last hold's */
  int stopping;
  char *token;
  int tcp;      /* a TCP listener (else a unix socket) */
  int loopback; /* a loopback TCP address, or a unix socket */
  int wake[2];  /* the monitor's pipe */
  int monitor_stop;
  char host[256];
  char user[64]; /* the agent's, for the holders' owner_info */
};

static agent the_agent;

/* ---- JSON answers ---- */

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status, char *text, const char *type) {
  if (text == NULL) return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (r == NULL) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* {"error": {"code": CODE, "message": MESSAGE, "detail": DETAIL}}: CODE the
 * library's (EBUSY ...) or the agent's own (UNAUTHORIZED ...). */
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *code, const char *message,
                                  const char *detail) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return MHD_NO;
  fputs("{\"error\": {\"code\": ", f);
  cli_json_string(f, code);
  fputs(", \"message\": ", f);
  cli_json_string(f, message);
  if (detail != NULL && detail[0] != '\0') {
    fputs(", \"detail\": ", f);
    cli_json_string(f, detail);
  }
  fputs("}}\n", f);
  fclose(f);
  return send_text(conn, status, text, "application/json");
}

/* The HTTP status of a library status. */
static unsigned http_status_of(int st) {
  switch (st) {
  case DLOCK_EBUSY:
  case DLOCK_ENOTHELD:
  case DLOCK_ELOST:
  case DLOCK_EWRONGTYPE:
  case DLOCK_ELIMIT:
  case DLOCK_EUPGRADE:
  case DLOCK_EFOREIGN:
    return 409;
  case DLOCK_EINVAL:
  case DLOCK_ENAME:
  case DLOCK_ERANGE:
    return 400;
  case DLOCK_EAUTH:
  case DLOCK_ENOPERM:
  case DLOCK_EPROTO:
  case DLOCK_ESERVER:
    return 502;
  case DLOCK_ENOMEM:
  case DLOCK_ESYS:
    return 500;
  default:
    return 503; /* unreachable, timed out, not ready, outcome unknown, stopping */
  }
}

static enum MHD_Result send_status(struct MHD_Connection *conn, int st, const char *detail) {
  return send_error(conn, http_status_of(st), dlock_err_name(st), dlock_strerror(st), detail);
}

/* ---- Holds ---- */

static void hold_id(char out[33]) {
  unsigned char r[16];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
    /* No entropy source: a unique id all the same (ids are handles, and
     * the token, not the id, guards the calls). */
    static unsigned long n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, 33, "%016lx%08lx%08lx", (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec, (unsigned long)getpid(),
             __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED));
    return;
  }
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", r[i]);
}

static void hold_free_obj(hold *h) {
  if (h->obj == NULL) return;
  switch (h->kind) {
  case SERVE_KIND_SEMAPHORE:
    dlock_semaphore_free(h->obj);
    break;
  case SERVE_KIND_READ:
  case SERVE_KIND_WRITE:
    dlock_rwlock_free(h->obj);
    break;
  default:
    dlock_mutex_free(h->obj);
    break;
  }
  h->obj = NULL;
  h->m = NULL;
}

/* Under a->mu: take 'h' out of the list (no-op when not in it). */
static void hold_unlink(agent *a, hold *h) {
  for (hold **p = &a->holds; *p != NULL; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      h->next = NULL;
      pthread_cond_broadcast(&a->cv);
      return;
    }
}

/* Under a->mu: drop one reference; the last frees (the lock was released). */
static void hold_unref(hold *h) {
  if (--h->refs > 0) return;
  if (h->efd >= 0) close(h->efd);
  free(h);
}

static void hold_wake(hold *h) {
  uint64_t one = 1;
  ssize_t n = write(h->efd, &one, sizeof one);
  (void)n; /* an eventfd write fails only when it is already readable */
}

/* ---- The stream (its connection's thread) ---- */

static void out_add(hold *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(hold *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(h->out + h->olen, sizeof h->out - h->olen, fmt, ap);
  va_end(ap);
  if (n > 0) h->olen = (size_t)n >= sizeof h->out - h->olen ? sizeof h->out - 1 : h->olen + (size_t)n;
  h->last_out = dlock_mono_now();
}

/* 'name' as a JSON string into buf. */
static void json_str(const char *s, char *buf, size_t len) {
  size_t n = 0;
  char *text = NULL;
  FILE *f = open_memstream(&text, &n);
  if (f != NULL) {
    cli_json_string(f, s);
    fclose(f);
  }
  snprintf(buf, len, "%s", text != NULL ? text : "\"\"");
  free(text);
}

/* The reason as a word for programs ("unreachable"); the message gives
 * dlock_lost_reason_str(). */
static const char *lost_word(dlock_lost_reason r) {
  static const char *const words[] = {"none",     "expired",  "taken",    "unreachable",
                                      "max_hold", "deadline", "failover", "deleted"};
  return (unsigned)r < sizeof words / sizeof words[0] ? words[r] : "unknown";
}

static int64_t unix_ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ', "valid_until": "...", "valid_until_unix_ms": N, "lease_left_ms": N' of the hold now. */
static void valid_fields(hold *h, char *buf, size_t len) {
  dlock_mono_ms vu = dlock_mutex_valid_until(h->m);
  int64_t left = vu > 0 ? vu - dlock_mono_now() : 0;
  if (left < 0) left = 0;
  int64_t at = unix_ms_now() + left;
  char when[64];
  cli_format_time_ms(at, NULL, when, sizeof when);
  snprintf(buf, len, ", \"valid_until\": \"%s\", \"valid_until_unix_ms\": %lld, \"lease_left_ms\": %lld", when,
           (long long)at, (long long)left);
  h->vu_sent = vu;
}

/* Finish a pending release or extend call (under a->mu). */
static void op_finish(agent *a, hold *h, int rc, const char *msg) {
  if (h->op == OP_NONE) return;
  h->op = OP_NONE;
  h->op_done = 1;
  h->op_rc = rc;
  snprintf(h->op_msg, sizeof h->op_msg, "%s", msg != NULL ? msg : "");
  pthread_cond_broadcast(&a->cv);
}

/* Release the hold now (its thread): the status. */
static int stream_release(hold *h, char *detail, size_t len) {
  int st = dlock_mutex_release(h->m);
  snprintf(detail, len, "%s", st != 0 ? dlock_mutex_errmsg(h->m) : "");
  pthread_mutex_lock(&h->a->mu);
  h->state = H_ENDED;
  pthread_mutex_unlock(&h->a->mu);
  return st;
}

/* One look at the hold: what happened since the last look goes out as an
 * event. Sets h->finished when the stream is to end. */
static void stream_step(hold *h) {
  agent *a = h->a;
  char nm[DLOCK_MAX_NAME_LEN * 6 + 8], vf[200], detail[600], dj[1300];
  json_str(h->name, nm, sizeof nm);

  pthread_mutex_lock(&a->mu);
  int op = h->op, stopping = a->stopping;
  int64_t op_lease = h->op_lease_ms;
  pthread_mutex_unlock(&a->mu);

  dlock_lost_reason lost = dlock_mutex_lost(h->m);
  if (lost != DLOCK_LOST_NONE) {
    pthread_mutex_lock(&a->mu);
    h->state = H_ENDED;
    op_finish(a, h, DLOCK_ELOST, dlock_lost_reason_str(lost));
    pthread_mutex_unlock(&a->mu);
    json_str(dlock_lost_reason_str(lost), dj, sizeof dj);
    out_add(h,
            "event: lost\ndata: {\"name\": %s, \"holder\": \"%s\", \"fence\": %llu, \"reason\": \"%s\", "
            "\"message\": %s}\n\n",
            nm, h->id, (unsigned long long)h->fence, lost_word(lost), dj);
    h->finished = 1;
    return;
  }
  if (op == OP_RELEASE || stopping) {
    int st = stream_release(h, detail, sizeof detail);
    json_str(detail, dj, sizeof dj);
    pthread_mutex_lock(&a->mu);
    op_finish(a, h, st, detail);
    pthread_mutex_unlock(&a->mu);
    if (st == 0)
      out_add(h, "event: released\ndata: {\"name\": %s, \"holder\": \"%s\", \"fence\": %llu, \"by\": \"%s\"}\n\n", nm,
              h->id, (unsigned long long)h->fence, op == OP_RELEASE ? "release" : "agent stopping");
    else
      out_add(h,
              "event: released\ndata: {\"name\": %s, \"holder\": \"%s\", \"fence\": %llu, \"by\": \"%s\", "
              "\"error\": {\"code\": \"%s\", \"message\": \"%s\", \"detail\": %s}}\n\n",
              nm, h->id, (unsigned long long)h->fence, op == OP_RELEASE ? "release" : "agent stopping",
              dlock_err_name(st), dlock_strerror(st), dj);
    h->finished = 1;
    return;
  }
  if (op == OP_EXTEND) {
    int st = dlock_mutex_extend(h->m, op_lease);
    pthread_mutex_lock(&a->mu);
    op_finish(a, h, st, st != 0 ? dlock_mutex_errmsg(h->m) : "");
    pthread_mutex_unlock(&a->mu);
  }
  if (dlock_mutex_valid_until(h->m) != h->vu_sent) {
    valid_fields(h, vf, sizeof vf);
    out_add(h, "event: renewed\ndata: {\"name\": %s, \"holder\": \"%s\", \"fence\": %llu%s}\n\n", nm, h->id,
            (unsigned long long)h->fence, vf);
    return;
  }
  if (dlock_mono_now() - h->last_out >= KEEPALIVE_MS) out_add(h, ": keepalive\n\n");
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  hold *h = cls;
  (void)pos;
  for (;;) {
    if (h->ooff < h->olen) {
      size_t n = h->olen - h->ooff < max ? h->olen - h->ooff : max;
      memcpy(buf, h->out + h->ooff, n);
      h->ooff += n;
      return (ssize_t)n;
    }
    h->olen = h->ooff = 0;
    if (h->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    stream_step(h);
    if (h->olen > 0 || h->finished) continue;
    struct pollfd p[3] = {{dlock_mutex_lost_fd(h->m), POLLIN, 0}, {h->efd, POLLIN, 0}, {h->conn_fd, POLLRDHUP, 0}};
    /* Renewals move valid_until: look once a second. */
    int n = poll(p, 3, 1000);
    if (n > 0 && (p[2].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      /* The client closed the stream: that is its release. */
      char detail[600];
      if (dlock_mutex_lost(h->m) == DLOCK_LOST_NONE) stream_release(h, detail, sizeof detail);
      pthread_mutex_lock(&h->a->mu);
      h->state = H_ENDED;
      op_finish(h->a, h, DLOCK_ENOTHELD, "the client closed the stream: the lock was released");
      pthread_mutex_unlock(&h->a->mu);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (n > 0 && (p[1].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = read(h->efd, &v, sizeof v);
      (void)r;
    }
  }
}

/* The response is done with (stream ended, client gone, agent stopped). */
static void stream_free(void *cls) {
  hold *h = cls;
  agent *a = h->a;
  hold_free_obj(h); /* releases a hold still held (best effort) */
  pthread_mutex_lock(&a->mu);
  h->state = H_ENDED;
  op_finish(a, h, DLOCK_ENOTHELD, "the stream ended");
  hold_unlink(a, h);
  hold_unref(h);
  pthread_mutex_unlock(&a->mu);
}

/* ---- The monitor: waits whose clients left are canceled ---- */

static void *monitor_main(void *arg) {
  agent *a = arg;
  static struct pollfd p[MAX_WAITING + 1];
  static hold *who[MAX_WAITING + 1];
  static uint64_t who_seq[MAX_WAITING + 1]; /* not another hold at the same address */
  for (;;) {
    int n = 1;
    p[0] = (struct pollfd){a->wake[0], POLLIN, 0};
    pthread_mutex_lock(&a->mu);
    if (a->monitor_stop) {
      pthread_mutex_unlock(&a->mu);
      return NULL;
    }
    for (hold *h = a->holds; h != NULL && n <= MAX_WAITING; h = h->next) {
      if (h->state != H_WAITING) continue;
      /* Canceled already: again, in case its wait had not begun then (a
       * cancel reaches only the waits under way). */
      if (h->client_gone || a->stopping) {
        dlock_mutex_cancel(h->m);
        continue;
      }
      p[n] = (struct pollfd){h->conn_fd, POLLRDHUP, 0};
      who_seq[n] = h->seq;
      who[n++] = h;
    }
    pthread_mutex_unlock(&a->mu);
    if (poll(p, (nfds_t)n, 500) <= 0) continue;
    if (p[0].revents & POLLIN) {
      char buf[64];
      ssize_t r = read(a->wake[0], buf, sizeof buf);
      (void)r;
    }
    pthread_mutex_lock(&a->mu);
    for (int i = 1; i < n; i++) {
      if (!(p[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
      for (hold *h = a->holds; h != NULL; h = h->next)
        if (h == who[i] && h->seq == who_seq[i] && h->state == H_WAITING) {
          h->client_gone = 1;
          dlock_mutex_cancel(h->m);
        }
    }
    pthread_mutex_unlock(&a->mu);
  }
}

static void monitor_wake(agent *a) {
  ssize_t n = write(a->wake[1], "w", 1);
  (void)n; /* a full pipe wakes it all the same */
}

/* ---- The calls ---- */

typedef struct request {
  serve_route route;
  char *body;
  size_t len;
  int answered;     /* an answer was queued before the body came in */
  size_t too_large; /* bytes dropped past SERVE_MAX_BODY */
} request;

static const char *client_text(struct MHD_Connection *conn, char *buf, size_t len) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
  char ip[INET6_ADDRSTRLEN] = "?";
  if (sa != NULL && sa->sa_family == AF_INET) {
    const struct sockaddr_in *s4 = (const void *)sa;
    inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
    snprintf(buf, len, "%s:%u", ip, ntohs(s4->sin_port));
  } else if (sa != NULL && sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const void *)sa;
    inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
    snprintf(buf, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
  } else {
    snprintf(buf, len, "a client of the unix socket");
  }
  return buf;
}

static enum MHD_Result do_acquire(agent *a, struct MHD_Connection *conn, request *rq) {
  serve_acquire_req q;
  char err[600];
  if (serve_parse_acquire(rq->body, rq->len, &q, err, sizeof err) != 0)
    return send_error(conn, 400, "EINVAL", "invalid argument", err);

  char owner[1200], who[128];
  if (q.has_owner)
    snprintf(owner, sizeof owner, "%s", q.owner);
  else
    snprintf(owner, sizeof owner, "dlock-run host=%s pid=%ld user=%s cmd=(dlock serve, for %s)", a->host,
             (long)getpid(), a->user, client_text(conn, who, sizeof who));
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = q.ttl_ms;
  mo.watchdog_lease_ms = q.lease_ms;
  mo.max_hold_ms = q.max_hold_ms;
  mo.owner_info = owner;

  hold *h = calloc(1, sizeof *h);
  if (h == NULL) return send_status(conn, DLOCK_ENOMEM, "");
  h->a = a;
  h->kind = q.kind;
  h->refs = 1;
  snprintf(h->name, sizeof h->name, "%s", rq->route.name);
  h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  h->conn_fd = ci != NULL ? ci->connect_fd : -1;
  int st;
  switch (q.kind) {
  case SERVE_KIND_SEMAPHORE:
    st = dlock_semaphore_new((dlock_semaphore **)&h->obj, a->c, h->name, q.permits, &mo);
    if (st == 0) h->m = dlock_semaphore_mutex(h->obj);
    break;
  case SERVE_KIND_READ:
  case SERVE_KIND_WRITE:
    st = dlock_rwlock_new((dlock_rwlock **)&h->obj, a->c, h->name,
                          q.kind == SERVE_KIND_READ ? DLOCK_RW_READ : DLOCK_RW_WRITE, &mo);
    if (st == 0) h->m = dlock_rwlock_mutex(h->obj);
    break;
  default:
    st = dlock_mutex_new((dlock_mutex **)&h->obj, a->c, h->name, &mo);
    h->m = h->obj;
  }
  if (st != 0 || h->efd < 0 || h->conn_fd < 0) {
    snprintf(err, sizeof err, "%s", st != 0 ? dlock_last_error() : strerror(errno));
    hold_free_obj(h);
    if (h->efd >= 0) close(h->efd);
    free(h);
    return send_status(conn, st != 0 ? st : DLOCK_ESYS, err);
  }
  pthread_mutex_lock(&a->mu);
  if (a->stopping) {
    pthread_mutex_unlock(&a->mu);
    hold_free_obj(h);
    close(h->efd);
    free(h);
    return send_status(conn, DLOCK_ECLOSED, "the agent is stopping");
  }
  h->state = H_WAITING;
  h->seq = ++a->seq;
  h->next = a->holds;
  a->holds = h;
  pthread_mutex_unlock(&a->mu);
  monitor_wake(a);
  /* No idle timeout while it waits and while the stream lives. */
  MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)0);

  st = dlock_mutex_acquire(h->m, q.wait_ms < 0 ? DLOCK_WAIT_FOREVER : q.wait_ms);
  snprintf(err, sizeof err, "%s", st != 0 ? dlock_mutex_errmsg(h->m) : "");
  pthread_mutex_lock(&a->mu);
  int gone = h->client_gone, stopping = a->stopping;
  if (st == 0 && !gone && !stopping) {
    h->state = H_HELD;
    h->fence = dlock_mutex_fence(h->m);
    hold_id(h->id);
  }
  pthread_mutex_unlock(&a->mu);
  if (st == 0 && (gone || stopping)) {
    dlock_mutex_release(h->m);
    st = stopping ? DLOCK_ECLOSED : DLOCK_ECANCELED;
  }
  if (st != 0) {
    hold_free_obj(h);
    pthread_mutex_lock(&a->mu);
    hold_unlink(a, h);
    hold_unref(h);
    pthread_mutex_unlock(&a->mu);
    if (gone) return MHD_NO; /* nobody to answer */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S);
    if (stopping && st == DLOCK_ECANCELED) st = DLOCK_ECLOSED;
    if (st == DLOCK_EBUSY && err[0] == '\0')
      snprintf(err, sizeof err, "'%s' stayed held by another owner for the whole wait", h->name);
    return send_status(conn, st, stopping ? "the agent is stopping" : err);
  }

  char nm[DLOCK_MAX_NAME_LEN * 6 + 8], vf[200];
  static const char *const kinds[] = {"mutex", "semaphore", "read", "write"};
  json_str(h->name, nm, sizeof nm);
  valid_fields(h, vf, sizeof vf);
  out_add(h, "event: acquired\ndata: {\"name\": %s, \"kind\": \"%s\", \"holder\": \"%s\", \"fence\": %llu%s}\n\n", nm,
          kinds[h->kind], h->id, (unsigned long long)h->fence, vf);
  struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, h, stream_free);
  if (r == NULL) {
    stream_free(h);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  MHD_add_response_header(r, "X-Dlock-Holder", h->id);
  enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* release and extend: handed to the holding stream's thread. */
static enum MHD_Result do_holder_op(agent *a, struct MHD_Connection *conn, request *rq, int op) {
  serve_holder_req q;
  char err[600];
  if (serve_parse_holder(rq->body, rq->len, op == OP_EXTEND, &q, err, sizeof err) != 0)
    return send_error(conn, 400, "EINVAL", "invalid argument", err);
  pthread_mutex_lock(&a->mu);
  hold *h = a->holds;
  while (h != NULL && (h->state == H_WAITING || strcmp(h->id, q.holder) != 0 || strcmp(h->name, rq->route.name) != 0))
    h = h->next;
  if (h == NULL || h->state != H_HELD || h->op != OP_NONE) {
    int busy = h != NULL && h->state == H_HELD;
    pthread_mutex_unlock(&a->mu);
    if (busy)
      return send_error(conn, 409, "EBUSY", "another release or extend of this hold is under way",
                        "wait for its answer, then try again");
    snprintf(err, sizeof err,
             "this agent holds '%s' for no holder %s (released, lost, its stream closed, or never taken here)",
             rq->route.name, q.holder);
    return send_error(conn, 404, "ENOTHELD", dlock_strerror(DLOCK_ENOTHELD), err);
  }
  h->op = op;
  h->op_done = 0;
  h->op_lease_ms = q.lease_ms;
  h->refs++;
  hold_wake(h);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += OP_WAIT_MS / 1000;
  while (!h->op_done && pthread_cond_timedwait(&a->cv, &a->mu, &ts) != ETIMEDOUT) {
  }
  int done = h->op_done, rc = h->op_rc;
  uint64_t fence = h->fence;
  snprintf(err, sizeof err, "%s", h->op_msg);
  h->op_done = 0;
  hold_unref(h);
  pthread_mutex_unlock(&a->mu);
  if (!done)
    return send_error(conn, 504, "ETIMEDOUT", "the holding stream did not take the call in time",
                      "it runs when the stream's client reads again; do not send it again blindly, read the stream");
  if (rc != 0) {
    if (rc == DLOCK_ELOST) {
      char why[600];
      snprintf(why, sizeof why, "the hold was lost before the call ran (%s)", err);
      return send_status(conn, rc, why);
    }
    return send_status(conn, rc, err);
  }
  char *text = NULL;
  if (op == OP_RELEASE) {
    if (asprintf(&text, "{\"released\": true, \"holder\": \"%s\", \"fence\": %llu}\n", q.holder,
                 (unsigned long long)fence) < 0)
      text = NULL;
  } else if (asprintf(&text, "{\"extended\": true, \"holder\": \"%s\", \"fence\": %llu, \"lease_ms\": %lld}\n",
                      q.holder, (unsigned long long)fence, (long long)q.lease_ms) < 0) {
    text = NULL;
  }
  return send_text(conn, 200, text, "application/json");
}

static void counts(agent *a, int *held, int *waiting, int64_t *oldest_ms, const char *name) {
  *held = *waiting = 0;
  pthread_mutex_lock(&a->mu);
  for (hold *h = a->holds; h != NULL; h = h->next) {
    if (name != NULL && strcmp(h->name, name) != 0) continue;
    if (h->state == H_HELD) (*held)++;
    if (h->state == H_WAITING) (*waiting)++;
  }
  pthread_mutex_unlock(&a->mu);
  if (oldest_ms != NULL) *oldest_ms = 0;
}

static enum MHD_Result do_status(agent *a, struct MHD_Connection *conn, request *rq) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  int st = dlock_lock_info_get(a->c, rq->route.name, &info);
  if (st != 0) return send_status(conn, st, dlock_last_error());
  int held, waiting;
  counts(a, &held, &waiting, NULL, rq->route.name);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return MHD_NO;
  fputs("{\"name\": ", f);
  cli_json_string(f, rq->route.name);
  fprintf(f,
          ", \"held\": %s, \"fence\": %llu, \"ttl_ms\": %lld, \"since_unix_ms\": %lld, \"waiters\": %lld, "
          "\"owner_info\": ",
          info.held ? "true" : "false", (unsigned long long)info.fence, (long long)(info.held ? info.ttl_ms : 0),
          (long long)info.since_unix_ms, (long long)info.waiters);
  cli_json_string(f, info.owner_info);
  if (info.permits != 0)
    fprintf(f, ", \"kind\": \"semaphore\", \"permits\": %lld, \"permits_used\": %lld", (long long)info.permits,
            (long long)info.permits_used);
  else if (info.rwlock)
    fprintf(f, ", \"kind\": \"rwlock\", \"readers\": %lld, \"writer\": %s, \"waiting_writers\": %lld",
            (long long)info.readers, info.writer ? "true" : "false", (long long)info.waiting_writers);
  else if (info.held)
    fputs(", \"kind\": \"mutex\"", f);
  fprintf(f, ", \"agent\": {\"holds\": %d, \"waiting\": %d}}\n", held, waiting);
  fclose(f);
  return send_text(conn, 200, text, "application/json");
}

static enum MHD_Result do_metrics(agent *a, struct MHD_Connection *conn) {
  const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
  int om = accept != NULL && strstr(accept, "application/openmetrics-text") != NULL;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return MHD_NO;
  int st = dlock_client_metrics_write(a->c, f, om ? DLOCK_METRICS_OPENMETRICS : DLOCK_METRICS_PROMETHEUS);
  fflush(f);
  if (om && len >= 6 && strcmp(text + len - 6, "# EOF\n") == 0) fseeko(f, (off_t)len - 6, SEEK_SET);
  int held, waiting;
  counts(a, &held, &waiting, NULL, NULL);
  fprintf(f,
          "# HELP dlock_agent_holds Locks dlock serve holds for its clients now.\n"
          "# TYPE dlock_agent_holds gauge\ndlock_agent_holds %d\n"
          "# HELP dlock_agent_waiting Acquires waiting in dlock serve now.\n"
          "# TYPE dlock_agent_waiting gauge\ndlock_agent_waiting %d\n%s",
          held, waiting, om ? "# EOF\n" : "");
  fclose(f);
  if (st != 0) {
    free(text);
    return send_status(conn, st, dlock_last_error());
  }
  return send_text(conn, 200, text,
                   om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                      : "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result do_health(agent *a, struct MHD_Connection *conn) {
  int held, waiting;
  counts(a, &held, &waiting, NULL, NULL);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) return MHD_NO;
  fputs("{\"ok\": true, \"version\": \"" DLOCK_VERSION "\", \"backend\": ", f);
  cli_json_string(f, dlock_client_backend(a->c));
  fputs(", \"server\": ", f);
  cli_json_string(f, dlock_client_server(a->c));
  fprintf(f, ", \"holds\": %d, \"waiting\": %d}\n", held, waiting);
  fclose(f);
  return send_text(conn, 200, text, "application/json");
}

/* Constant time in the token's length: no byte-by-byte timing. */
static int token_ok(const agent *a, struct MHD_Connection *conn) {
  const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (h == NULL || strncmp(h, "Bearer ", 7) != 0) return 0;
  const char *t = h + 7;
  size_t n = strlen(a->token), m = strlen(t);
  unsigned diff = n != m;
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)a->token[i] ^ (unsigned char)(i < m ? t[i] : 0);
  return diff == 0;
}

/* 0 when the call may go on; else the answer was queued (*ret). */
static int gate(agent *a, struct MHD_Connection *conn, request *rq, enum MHD_Result *ret) {
  int need = rq->route.mutating || !a->loopback;
  if (!need) return 0;
  if (a->token == NULL) {
    if (!a->tcp) return 0; /* a unix socket without a token: its mode decides */
    *ret = send_error(conn, 403, "FORBIDDEN", "this agent takes no changes over TCP without a token",
                      "start dlock serve with --token-file FILE and send 'Authorization: Bearer TOKEN', "
                      "or listen on a unix socket (--socket PATH)");
    return -1;
  }
  if (token_ok(a, conn)) return 0;
  int given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION) != NULL;
  *ret = send_error(conn, 401, "UNAUTHORIZED", given ? "the bearer token is wrong" : "this call needs the token",
                    "send 'Authorization: Bearer TOKEN' with the token of the agent's --token-file");
  return -1;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
  agent *a = cls;
  request *rq = *con_cls;
  char err[600];
  (void)version;

  if (rq == NULL) {
    rq = calloc(1, sizeof *rq);
    if (rq == NULL) return MHD_NO;
    *con_cls = rq;
    serve_route_parse(method, url, strlen(url), &rq->route, err, sizeof err);
    enum MHD_Result ret = MHD_YES;
    if (gate(a, conn, rq, &ret) != 0) {
      rq->answered = 1;
      return ret;
    }
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t n;
    if (cl != NULL && (cli_parse_u64(cl, UINT64_MAX, &n) != 0 || n > SERVE_MAX_BODY)) {
      rq->answered = 1;
      snprintf(err, sizeof err, "the body is larger than %d bytes", SERVE_MAX_BODY);
      return send_error(conn, 413, "TOO_LARGE", "request body too large", err);
    }
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (rq->answered) return MHD_YES;
    if (rq->too_large || rq->len + n > SERVE_MAX_BODY) {
      /* Chunked, no Content-Length: read on and drop it (the answer comes
       * at its end), but not forever. */
      rq->too_large += n;
      return rq->too_large > 16 * SERVE_MAX_BODY ? MHD_NO : MHD_YES;
    }
    char *b = realloc(rq->body, rq->len + n + 1);
    if (b == NULL) return MHD_NO;
    memcpy(b + rq->len, upload_data, n);
    rq->body = b;
    rq->len += n;
    rq->body[rq->len] = '\0';
    return MHD_YES;
  }
  if (rq->answered) return MHD_YES;
  rq->answered = 1;
  if (rq->too_large) {
    snprintf(err, sizeof err, "the body is larger than %d bytes", SERVE_MAX_BODY);
    return send_error(conn, 413, "TOO_LARGE", "request body too large", err);
  }
  switch (rq->route.kind) {
  case SERVE_ACQUIRE:
    return do_acquire(a, conn, rq);
  case SERVE_RELEASE:
    return do_holder_op(a, conn, rq, OP_RELEASE);
  case SERVE_EXTEND:
    return do_holder_op(a, conn, rq, OP_EXTEND);
  case SERVE_LOCK_STATUS:
    return do_status(a, conn, rq);
  case SERVE_METRICS:
    return do_metrics(a, conn);
  case SERVE_HEALTH:
    return do_health(a, conn);
  case SERVE_BAD_NAME:
    serve_route_parse(method, url, strlen(url), &rq->route, err, sizeof err); /* its message again */
    return send_error(conn, 400, "ENAME", dlock_strerror(DLOCK_ENAME), err);
  case SERVE_BAD_METHOD:
  case SERVE_NOT_FOUND:
    break;
  }
  serve_route_parse(method, url, strlen(url), &rq->route, err, sizeof err); /* its message again */
  if (rq->route.kind == SERVE_BAD_METHOD)
    return send_error(conn, 405, "METHOD_NOT_ALLOWED", "method not allowed here", err);
  return send_error(conn, 404, "NOT_FOUND", "no such path", err);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls, (void)conn, (void)toe;
  request *rq = *con_cls;
  if (rq == NULL) return;
  free(rq->body);
  free(rq);
  *con_cls = NULL;
}

/* The path as libmicrohttpd decodes it, but a %00 becomes a byte the name
 * check refuses (not the end of the string: "a%00b" is not "a"). */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *uri) {
  (void)cls, (void)conn;
  size_t n = MHD_http_unescape(uri);
  for (size_t i = 0; i < n; i++)
    if (uri[i] == '\0') uri[i] = '\x01';
  return n;
}

/* ---- Listening ---- */

/* A unix socket at 'path' with 'mode', listening: the fd, or -1 after saying why. */
static int unix_listen(const char *path, unsigned mode) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sun.sun_path) {
    fprintf(stderr, "dlock serve: --socket %s: the path is too long (at most %zu bytes)\n", path,
            sizeof sun.sun_path - 1);
    return -1;
  }
  strcpy(sun.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct stat st;
  if (lstat(path, &st) == 0) {
    /* A socket left by an agent that died may go; a live one or another file stays. */
    if (!S_ISSOCK(st.st_mode) || connect(fd, (struct sockaddr *)&sun, sizeof sun) == 0 || errno != ECONNREFUSED) {
      fprintf(stderr, "dlock serve: --socket %s: %s; remove it or choose another path\n", path,
              S_ISSOCK(st.st_mode) ? "another agent listens there" : "a file that is not a socket is there");
      close(fd);
      return -1;
    }
    unlink(path);
  }
  mode_t old = umask(0777 & ~mode);
  int rc = bind(fd, (struct sockaddr *)&sun, sizeof sun);
  int e = errno;
  umask(old);
  if (rc != 0 || chmod(path, mode) != 0 || listen(fd, 128) != 0) {
    if (rc == 0) e = errno;
    fprintf(stderr, "dlock serve: --socket %s: %s; choose a path in a directory you may write to\n", path, strerror(e));
    close(fd);
    return -1;
  }
  return fd;
}

static int serve_run(dlock_client *c, const char *listen_addr, const char *sock, unsigned sock_mode, char *token,
                     int sfd) {
  agent *a = &the_agent;
  memset(a, 0, sizeof *a);
  a->c = c;
  a->token = token;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  gethostname(a->host, sizeof a->host - 1);
  char pwbuf[1024];
  struct passwd pw, *pwp = NULL;
  snprintf(a->user, sizeof a->user, "%s",
           getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &pwp) == 0 && pwp != NULL ? pwp->pw_name : "?");
  signal(SIGPIPE, SIG_IGN);

  struct sockaddr_storage sa;
  socklen_t salen = 0;
  int lfd = -1;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
  if (sock != NULL) {
    lfd = unix_listen(sock, sock_mode);
    if (lfd < 0) return CLI_EXIT_UNAVAILABLE;
    a->loopback = 1;
  } else {
    cli_parse_listen(listen_addr, &sa, &salen); /* checked when parsed */
    a->tcp = 1;
    a->loopback = is_loopback(&sa);
    if (sa.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  }
  if (pipe2(a->wake, O_CLOEXEC | O_NONBLOCK) != 0) return cli_report(DLOCK_ESYS, strerror(errno), "dlock serve");
  struct MHD_Daemon *d;
  if (lfd >= 0)
    d = MHD_start_daemon(flags, 0, NULL, NULL, answer, a, MHD_OPTION_LISTEN_SOCKET, lfd, MHD_OPTION_NOTIFY_COMPLETED,
                         completed, a, MHD_OPTION_UNESCAPE_CALLBACK, unescape, a, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_END);
  else
    d = MHD_start_daemon(flags, 0, NULL, NULL, answer, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, a, MHD_OPTION_UNESCAPE_CALLBACK, unescape, a,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)1000, MHD_OPTION_END);
  if (d == NULL) {
    int e = errno;
    fprintf(stderr, "dlock serve: cannot listen on %s: %s; give a free port of an address of this host\n",
            sock != NULL ? sock : listen_addr, e ? strerror(e) : "refused");
    if (lfd >= 0) close(lfd);
    if (sock != NULL) unlink(sock);
    return CLI_EXIT_UNAVAILABLE;
  }
  pthread_t mon;
  if (pthread_create(&mon, NULL, monitor_main, a) != 0) {
    MHD_stop_daemon(d);
    return cli_report(DLOCK_ESYS, "cannot start a thread", "dlock serve");
  }
  fprintf(stderr, "dlock serve: listening on %s%s for %s (%s)\n", sock != NULL ? "unix:" : "",
          sock != NULL ? sock : listen_addr, dlock_client_server(c),
          a->token != NULL ? "changes need the token"
          : a->tcp         ? "no token: read-only over TCP"
                           : "no token: the socket's mode decides who may connect");

  /* Until a signal. */
  struct signalfd_siginfo si;
  int sig = 0;
  while (sig == 0) {
    ssize_t n = read(sfd, &si, sizeof si);
    if (n == (ssize_t)sizeof si)
      sig = (int)si.ssi_signo;
    else if (n < 0 && errno != EINTR)
      break;
  }
  pthread_mutex_lock(&a->mu);
  a->stopping = 1;
  int nheld = 0;
  for (hold *h = a->holds; h != NULL; h = h->next) {
    if (h->state == H_WAITING) dlock_mutex_cancel(h->m);
    if (h->state == H_HELD) nheld++;
    hold_wake(h);
  }
  fprintf(stderr, "dlock serve: %s: releasing the %d lock%s held for clients, then stopping\n",
          sig ? cli_signame(sig) : "stop", nheld, nheld == 1 ? "" : "s");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += STOP_WAIT_MS / 1000;
  int left = 0;
  for (;;) {
    left = 0;
    for (hold *h = a->holds; h != NULL; h = h->next)
      if (h->state != H_ENDED) left++;
    if (left == 0 || pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
  }
  a->monitor_stop = 1;
  pthread_mutex_unlock(&a->mu);
  monitor_wake(a);
  pthread_join(mon, NULL);
  if (left > 0)
    fprintf(stderr,
            "dlock serve: %d lock%s not released in time (a client that does not read its stream): "
            "released as the connections close, best effort; what is missed ends with its lease\n",
            left, left == 1 ? " was" : "s were");
  MHD_stop_daemon(d); /* frees what is left (each hold's release, best effort) */
  if (sock != NULL) unlink(sock);
  close(a->wake[0]);
  close(a->wake[1]);
  return CLI_EXIT_OK;
}

#endif /* DLOCK_HAVE_MICROHTTPD */

int cmd_serve(int argc, char **argv) {
  cli_args args;
  const char *arg, *url = NULL, *listen_addr = NULL, *sock = NULL, *token_file = NULL;
  unsigned sock_mode = 0600;
  int id;

  cli_args_init(&args, argc, argv, "serve", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, serve_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    struct sockaddr_storage sa;
    socklen_t len;
    uint64_t m;
    switch (id) {
    case OPT_LISTEN:
      if (cli_parse_listen(arg, &sa, &len) != 0)
        return cli_usage_error("serve", "--listen: '%s' is not ADDR:PORT (127.0.0.1:7457, [::1]:7457)", arg);
      listen_addr = arg;
      break;
    case OPT_SOCKET:
      if (arg[0] == '\0') return cli_usage_error("serve", "--socket: empty path");
      sock = arg;
      break;
    case OPT_SOCKET_MODE: {
      char *end;
      errno = 0;
      m = strtoull(arg, &end, 8);
      if (errno != 0 || *end != '\0' || end == arg || m > 0777 || (m & 0600) != 0600)
        return cli_usage_error("serve", "--socket-mode: '%s' is not an octal mode from 0600 to 0777", arg);
      sock_mode = (unsigned)m;
      break;
    }
    case OPT_TOKEN_FILE:
      token_file = arg;
      break;
    default:
      return cli_usage_error("serve", "unexpected argument '%s'", arg);
    }
  }
  if (listen_addr != NULL && sock != NULL) return cli_usage_error("serve", "--listen and --socket exclude each other");
  if (listen_addr == NULL && sock == NULL) listen_addr = DEFAULT_LISTEN;
  if (listen_addr != NULL) {
    struct sockaddr_storage sa;
    socklen_t len;
    cli_parse_listen(listen_addr, &sa, &len);
    if (!is_loopback(&sa) && token_file == NULL)
      return cli_usage_error("serve",
                             "--listen %s is not a loopback address: give --token-file too (every call then "
                             "needs the token)",
                             listen_addr);
  }
#ifndef DLOCK_HAVE_MICROHTTPD
  (void)sock_mode, (void)url;
  fprintf(stderr, "dlock serve: this dlock was built without libmicrohttpd; install it (Debian: "
                  "libmicrohttpd-dev) and build again\n");
  return CLI_EXIT_UNAVAILABLE;
#else
  char *token = NULL;
  if (token_file != NULL) {
    int rc = read_token(token_file, &token);
    if (rc != 0) return rc;
  }
  /* The signals are read from a signalfd: blocked before the client's and
   * the server's threads start, which inherit the mask. */
  int sfd = cli_stop_signalfd();
  if (sfd < 0) {
    free(token);
    return cli_report(DLOCK_ESYS, strerror(errno), "dlock serve: signals");
  }
  dlock_client *c = NULL;
  int rc = cli_connect(url, &c);
  if (rc == 0) {
    rc = serve_run(c, listen_addr, sock, sock_mode, token, sfd);
    dlock_client_free(c);
  }
  close(sfd);
  if (token != NULL) explicit_bzero(token, strlen(token));
  free(token);
  return rc;
#endif
}
