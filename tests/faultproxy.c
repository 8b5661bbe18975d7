/*
 * faultproxy.c - the fault-injecting TCP proxy of faultproxy.h: one thread,
 * poll(2) over every connection pair, RESP framing in both directions so
 * that each reply is paired with the command it answers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "faultproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FP_MAX_PAIRS 128

typedef struct buf {
  char *data;
  size_t len, cap;
} buf;

typedef struct pair {
  int cfd, sfd;           /* -1 when closed */
  buf in_c, in_s;         /* bytes read, not yet forwarded (incomplete frame) */
  unsigned char *pending; /* per command sent to the server and not answered: 1 = drop its reply, 2 = hold it */
  size_t npending, pending_head, pending_cap;
  int held; /* a reply is held at the start of in_s (fp_hold_reply): the server side is not read */
} pair;

struct fp_proxy {
  int lfd, port, target;
  char url[64];
  pthread_t thread;
  pthread_mutex_t mu; /* guards the rule fields and 'dropped' */
  int stop;
  char *pattern; /* drop rule, NULL when none */
  size_t patlen;
  int drop_left;
  char *hold_pattern; /* hold rule, NULL when none */
  size_t hold_patlen;
  int hold_left, held, release_held;
  int delay_ms;
  int blackhole;
  int blackhole_after_drop;
  int raw; /* fp_raw(): forward bytes as they come, no RESP framing */
  int close_all;
  int dropped;
  pair pairs[FP_MAX_PAIRS];
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int buf_add(buf *b, const char *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

static void buf_consume(buf *b, size_t n) {
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
}

/* Length of the line at p (through "\r\n"), 0 if incomplete. */
static size_t line_len(const char *p, size_t n) {
  const char *nl = memchr(p, '\n', n);
  return nl ? (size_t)(nl - p) + 1 : 0;
}

/* Bytes in the RESP2/RESP3 frame at p, 0 if incomplete, -1 if not RESP.
 * A request that does not start with '*' is an inline command (one line). */
static long frame_len(const char *p, size_t n, int depth) {
  if (n == 0) return 0;
  if (depth > 64) return -1;
  size_t l = line_len(p, n);
  if (!l) return 0;
  long long count = strtoll(p + 1, NULL, 10);
  switch (p[0]) {
  case '+':
  case '-':
  case ':':
  case '_':
  case ',':
  case '#':
  case '(':
    return (long)l;
  case '$':
  case '=':
  case '!':
    if (count < 0) return (long)l;
    if ((size_t)count + 2 > n - l) return 0;
    return (long)(l + (size_t)count + 2);
  case '*':
  case '~':
  case '>':
  case '%':
  case '|': {
    if (count < 0) return (long)l;
    if (p[0] == '%' || p[0] == '|') count *= 2;
    size_t off = l;
    for (long long i = 0; i < count; i++) {
      long e = frame_len(p + off, n - off, depth + 1);
      if (e <= 0) return e;
      off += (size_t)e;
    }
    return (long)off;
  }
  default:
    return depth == 0 ? (long)l : -1; /* inline command */
  }
}

static int send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      if (poll(&pf, 1, 5000) <= 0) return -1;
      continue;
    }
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void pair_close(pair *pr) {
  if (pr->cfd >= 0) close(pr->cfd);
  if (pr->sfd >= 0) close(pr->sfd);
  free(pr->in_c.data);
  free(pr->in_s.data);
  free(pr->pending);
  memset(pr, 0, sizeof *pr);
  pr->cfd = pr->sfd = -1;
}

static int push_pending(pair *pr, unsigned char drop) {
  if (pr->npending == pr->pending_cap) {
    size_t cap = pr->pending_cap ? pr->pending_cap * 2 : 64;
    unsigned char *d = malloc(cap);
    if (!d) return -1;
    for (size_t i = 0; i < pr->npending; i++) d[i] = pr->pending[(pr->pending_head + i) % pr->pending_cap];
    free(pr->pending);
    pr->pending = d;
    pr->pending_cap = cap;
    pr->pending_head = 0;
  }
  pr->pending[(pr->pending_head + pr->npending) % pr->pending_cap] = drop;
  pr->npending++;
  return 0;
}

static int pop_pending(pair *pr) {
  if (pr->npending == 0) return 0; /* a push message: no command to pair with */
  int d = pr->pending[pr->pending_head];
  pr->pending_head = (pr->pending_head + 1) % pr->pending_cap;
  pr->npending--;
  return d;
}

static void hold(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  int ms = p->delay_ms;
  pthread_mutex_unlock(&p->mu);
  if (ms > 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

/* Read what 'from' sent: dropped (blackhole), forwarded to 'to' as it
 * came (raw), or added to 'in' for the caller to frame (1). -1: the pair
 * must close; 0: done. */
static int take_in(fp_proxy *p, int from, int to, buf *in) {
  char tmp[65536];
  ssize_t n = recv(from, tmp, sizeof tmp, 0);
  if (n <= 0) return (n < 0 && errno == EINTR) ? 0 : -1;
  pthread_mutex_lock(&p->mu);
  int black = p->blackhole, raw = p->raw;
  pthread_mutex_unlock(&p->mu);
  if (black) return 0;
  if (raw) {
    hold(p);
    return send_all(to, tmp, (size_t)n);
  }
  return buf_add(in, tmp, (size_t)n) ? -1 : 1;
}

/* Client to server: forward whole commands, marking those the rule matches.
 * Returns -1 when the pair must close. */
static int from_client(fp_proxy *p, pair *pr) {
  int rc = take_in(p, pr->cfd, pr->sfd, &pr->in_c);
  if (rc <= 0) return rc;
  size_t off = 0;
  for (;;) {
    long f = frame_len(pr->in_c.data + off, pr->in_c.len - off, 0);
    if (f < 0) return -1;
    if (f == 0) break;
    unsigned char drop = 0; /* a candidate: decided when its reply comes */
    pthread_mutex_lock(&p->mu);
    if (p->pattern && p->drop_left > 0 && memmem(pr->in_c.data + off, (size_t)f, p->pattern, p->patlen))
      drop = 1;
    else if (p->hold_pattern && p->hold_left > 0 &&
             memmem(pr->in_c.data + off, (size_t)f, p->hold_pattern, p->hold_patlen))
      drop = 2;
    pthread_mutex_unlock(&p->mu);
    if (push_pending(pr, drop)) return -1;
    off += (size_t)f;
  }
  if (off > 0) {
    hold(p);
    if (send_all(pr->sfd, pr->in_c.data, off)) return -1;
    buf_consume(&pr->in_c, off);
  }
  return 0;
}

/* Forward the whole replies in in_s until one that is to be dropped (-1:
 * the pair must close) or held (0, the pair held). */
static int forward_replies(fp_proxy *p, pair *pr) {
  size_t off = 0;
  int drop = 0, keep = 0;
  for (;;) {
    long f = frame_len(pr->in_s.data + off, pr->in_s.len - off, 1); /* replies are never inline */
    if (f < 0) return -1;
    if (f == 0) break;
    int mark = pop_pending(pr);
    /* NOSCRIPT means the script did not run (the client sends it again as
     * EVAL): pass it on and keep the rule for the command that runs. */
    int noscript = f >= 9 && !memcmp(pr->in_s.data + off, "-NOSCRIPT", 9);
    if (mark && !noscript) {
      pthread_mutex_lock(&p->mu);
      if (mark == 1 && p->drop_left > 0) {
        p->drop_left--;
        drop = 1;
      } else if (mark == 2 && p->hold_left > 0) {
        p->hold_left--;
        p->held++;
        keep = 1;
      }
      pthread_mutex_unlock(&p->mu);
      if (drop || keep) break;
    }
    off += (size_t)f;
  }
  if (off > 0) {
    hold(p);
    if (send_all(pr->cfd, pr->in_s.data, off)) return -1;
    buf_consume(&pr->in_s, off);
  }
  if (keep) pr->held = 1;
  if (drop) {
    pthread_mutex_lock(&p->mu);
    p->dropped++;
    if (p->blackhole_after_drop) p->blackhole = 1;
    pthread_mutex_unlock(&p->mu);
    return -1;
  }
  return 0;
}

/* fp_release_held(): the held reply goes on, then those after it. */
static int release_held(fp_proxy *p, pair *pr) {
  pr->held = 0;
  long f = frame_len(pr->in_s.data, pr->in_s.len, 1);
  if (f <= 0 || send_all(pr->cfd, pr->in_s.data, (size_t)f)) return -1;
  buf_consume(&pr->in_s, (size_t)f);
  return forward_replies(p, pr);
}

/* Server to client. */
static int from_server(fp_proxy *p, pair *pr) {
  int rc = take_in(p, pr->sfd, pr->cfd, &pr->in_s);
  return rc <= 0 ? rc : forward_replies(p, pr);
}

static void accept_one(fp_proxy *p) {
  int cfd = accept(p->lfd, NULL, NULL);
  if (cfd < 0) return;
  int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)p->target);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (sfd < 0 || connect(sfd, (struct sockaddr *)&a, sizeof a) != 0) {
    if (sfd >= 0) close(sfd);
    close(cfd);
    return;
  }
  int one = 1;
  setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (int i = 0; i < FP_MAX_PAIRS; i++) {
    if (p->pairs[i].cfd < 0) {
      p->pairs[i].cfd = cfd;
      p->pairs[i].sfd = sfd;
      return;
    }
  }
  close(sfd);
  close(cfd);
}

static void *proxy_main(void *arg) {
  fp_proxy *p = arg;
  struct pollfd pfd[1 + 2 * FP_MAX_PAIRS];
  int idx[1 + 2 * FP_MAX_PAIRS];
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int stop = p->stop, close_all = p->close_all, release = p->release_held;
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    if (release) {
      for (int i = 0; i < FP_MAX_PAIRS; i++)
        if (p->pairs[i].cfd >= 0 && p->pairs[i].held && release_held(p, &p->pairs[i])) pair_close(&p->pairs[i]);
      pthread_mutex_lock(&p->mu);
      p->held = 0;
      p->release_held = 0; /* fp_release_held() waits for this */
      pthread_mutex_unlock(&p->mu);
    }
    if (close_all) {
      for (int i = 0; i < FP_MAX_PAIRS; i++)
        if (p->pairs[i].cfd >= 0) pair_close(&p->pairs[i]);
      pthread_mutex_lock(&p->mu);
      p->close_all = 0; /* fp_close_all() waits for this */
      pthread_mutex_unlock(&p->mu);
    }
    int n = 0;
    pfd[n++] = (struct pollfd){p->lfd, POLLIN, 0};
    for (int i = 0; i < FP_MAX_PAIRS; i++) {
      if (p->pairs[i].cfd < 0) continue;
      idx[n] = i;
      pfd[n++] = (struct pollfd){p->pairs[i].cfd, POLLIN, 0};
      if (p->pairs[i].held) continue; /* its replies wait behind the held one */
      idx[n] = i;
      pfd[n++] = (struct pollfd){p->pairs[i].sfd, POLLIN, 0};
    }
    if (poll(pfd, (nfds_t)n, 20) <= 0) continue;
    if (pfd[0].revents & POLLIN) accept_one(p);
    for (int k = 1; k < n; k++) {
      if (!pfd[k].revents) continue;
      pair *pr = &p->pairs[idx[k]];
      if (pr->cfd < 0) continue; /* closed by its other half this round */
      int rc = pfd[k].fd == pr->cfd ? from_client(p, pr) : from_server(p, pr);
      if (rc) pair_close(pr);
    }
  }
  for (int i = 0; i < FP_MAX_PAIRS; i++)
    if (p->pairs[i].cfd >= 0) pair_close(&p->pairs[i]);
  return NULL;
}

int fp_start(fp_proxy **out, int target_port) {
  fp_proxy *p = calloc(1, sizeof *p);
  if (!p) return -1;
  for (int i = 0; i < FP_MAX_PAIRS; i++) p->pairs[i].cfd = p->pairs[i].sfd = -1;
  p->target = target_port;
  p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->lfd, 64) != 0 ||
      getsockname(p->lfd, (struct sockaddr *)&a, &alen) != 0) {
    fprintf(stderr, "faultproxy: cannot listen on 127.0.0.1: %s\n", strerror(errno));
    if (p->lfd >= 0) close(p->lfd);
    free(p);
    return -1;
  }
  p->port = ntohs(a.sin_port);
  snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", p->port);
  pthread_mutex_init(&p->mu, NULL);
  if (pthread_create(&p->thread, NULL, proxy_main, p) != 0) {
    fprintf(stderr, "faultproxy: cannot start its thread\n");
    close(p->lfd);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return -1;
  }
  *out = p;
  return 0;
}

void fp_stop(fp_proxy *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_mutex_unlock(&p->mu);
  pthread_join(p->thread, NULL);
  close(p->lfd);
  pthread_mutex_destroy(&p->mu);
  free(p->pattern);
  free(p->hold_pattern);
  free(p);
}

int fp_port(const fp_proxy *p) { return p->port; }
const char *fp_url(const fp_proxy *p) { return p->url; }

void fp_pass(fp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  free(p->pattern);
  p->pattern = NULL;
  p->drop_left = 0;
  free(p->hold_pattern);
  p->hold_pattern = NULL;
  p->hold_left = 0;
  if (p->held) p->release_held = 1;
  p->delay_ms = 0;
  p->blackhole = 0;
  p->blackhole_after_drop = 0;
  pthread_mutex_unlock(&p->mu);
}

void fp_blackhole_after_drop(fp_proxy *p, int on) {
  pthread_mutex_lock(&p->mu);
  p->blackhole_after_drop = on;
  pthread_mutex_unlock(&p->mu);
}

/* A rule for the next 'count' commands that contain 'pattern'. */
static void set_rule(fp_proxy *p, char **pat, size_t *patlen, int *left, const char *pattern, int count) {
  pthread_mutex_lock(&p->mu);
  free(*pat);
  *pat = strdup(pattern);
  *patlen = strlen(pattern);
  *left = *pat ? count : 0;
  pthread_mutex_unlock(&p->mu);
}

void fp_drop_reply(fp_proxy *p, const char *pattern, int count) {
  set_rule(p, &p->pattern, &p->patlen, &p->drop_left, pattern, count);
}

void fp_delay(fp_proxy *p, int ms) {
  pthread_mutex_lock(&p->mu);
  p->delay_ms = ms;
  pthread_mutex_unlock(&p->mu);
}

void fp_raw(fp_proxy *p, int on) {
  pthread_mutex_lock(&p->mu);
  p->raw = on;
  pthread_mutex_unlock(&p->mu);
}

void fp_blackhole(fp_proxy *p, int on) {
  pthread_mutex_lock(&p->mu);
  p->blackhole = on;
  pthread_mutex_unlock(&p->mu);
}

/* Set '*flag' and let the thread act on it (it clears it) before the
 * caller goes on, half a second at most. */
static void request(fp_proxy *p, int *flag) {
  pthread_mutex_lock(&p->mu);
  *flag = 1;
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < 100; i++) {
    pthread_mutex_lock(&p->mu);
    int pendingc = *flag;
    pthread_mutex_unlock(&p->mu);
    if (!pendingc) break;
    struct timespec ts = {0, 5000000L};
    nanosleep(&ts, NULL);
  }
}

void fp_close_all(fp_proxy *p) { request(p, &p->close_all); }

void fp_hold_reply(fp_proxy *p, const char *pattern, int count) {
  set_rule(p, &p->hold_pattern, &p->hold_patlen, &p->hold_left, pattern, count);
}

void fp_release_held(fp_proxy *p) { request(p, &p->release_held); }

static int count_of(fp_proxy *p, const int *field) {
  pthread_mutex_lock(&p->mu);
  int n = *field;
  pthread_mutex_unlock(&p->mu);
  return n;
}

/* Wait until '*field' >= n or timeout_ms passed; returns '*field'. */
static int wait_count(fp_proxy *p, const int *field, int n, long timeout_ms) {
  long long end = now_ms() + timeout_ms;
  int d;
  while ((d = count_of(p, field)) < n && now_ms() < end) {
    struct timespec ts = {0, 5000000L};
    nanosleep(&ts, NULL);
  }
  return d;
}

int fp_held(fp_proxy *p) { return count_of(p, &p->held); }
int fp_wait_held(fp_proxy *p, int n, long timeout_ms) { return wait_count(p, &p->held, n, timeout_ms); }
int fp_dropped(fp_proxy *p) { return count_of(p, &p->dropped); }
int fp_wait_dropped(fp_proxy *p, int n, long timeout_ms) { return wait_count(p, &p->dropped, n, timeout_ms); }

int fp_server_command(fp_proxy *p, int argc, const char **argv, const size_t *lens) {
  buf out = {0};
  char hdr[64];
  int rc = -1;
  snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
  if (buf_add(&out, hdr, strlen(hdr))) return -1;
  for (int i = 0; i < argc; i++) {
    snprintf(hdr, sizeof hdr, "$%zu\r\n", lens[i]);
    if (buf_add(&out, hdr, strlen(hdr)) || buf_add(&out, argv[i], lens[i]) || buf_add(&out, "\r\n", 2)) {
      free(out.data);
      return -1;
    }
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)p->target);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && send_all(fd, out.data, out.len) == 0) {
    buf in = {0};
    char tmp[4096];
    long long end = now_ms() + 10000;
    for (;;) {
      long f = frame_len(in.data, in.len, 1);
      if (f > 0) {
        rc = in.data[0] == '-' ? -1 : 0;
        break;
      }
      struct pollfd pf = {fd, POLLIN, 0};
      long long left = end - now_ms();
      if (f < 0 || left <= 0 || poll(&pf, 1, (int)left) <= 0) break;
      ssize_t n = recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0 || buf_add(&in, tmp, (size_t)n)) break;
    }
    free(in.data);
  }
  if (fd >= 0) close(fd);
  free(out.data);
  return rc;
}
