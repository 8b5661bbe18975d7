/*
 * myproxy.c - the session-sharing MySQL proxy for tests (see myproxy.h).
 *
 * A MySQL packet is a 3-byte little-endian payload length, a sequence id,
 * then the payload. Only the client's packets are cut into packets (to
 * route each command); the servers' bytes are relayed as they come.
 */
#include "myproxy.h"

#include "pgproxy.h" /* the proxies' shared helpers */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MYP_CLIENT_SSL 0x0800
/* A handshake step that takes longer than this fails the connection. */
#define MYP_STEP_MS 10000

struct myp_proxy {
  pgp_listener l;
  int target, mode;
  atomic_int switches, commands, failed;
};

typedef struct myp_conn {
  myp_proxy *p;
  int cfd, sfd[2]; /* the client; sessions A and B */
} myp_conn;

/* Exactly 'n' bytes from 'fd' within MYP_STEP_MS (the proxy's stop ends it). */
static int read_n(myp_proxy *p, int fd, unsigned char *b, size_t n) {
  for (int waited = 0; n > 0;) {
    if (atomic_load(&p->l.stop) || waited >= MYP_STEP_MS) return -1;
    struct pollfd f = {.fd = fd, .events = POLLIN};
    int r = poll(&f, 1, 100);
    if (r < 0 && errno != EINTR) return -1;
    if (r <= 0) {
      waited += 100;
      continue;
    }
    ssize_t got = read(fd, b, n);
    if (got <= 0) return -1;
    b += got;
    n -= (size_t)got;
  }
  return 0;
}

/* One whole packet, header included, into '*out' (malloc'd). */
static int read_packet(myp_proxy *p, int fd, unsigned char **out, size_t *len) {
  unsigned char h[4];
  if (read_n(p, fd, h, 4) != 0) return -1;
  size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16;
  unsigned char *b = malloc(n + 4);
  if (!b) return -1;
  memcpy(b, h, 4);
  if (read_n(p, fd, b + 4, n) != 0) {
    free(b);
    return -1;
  }
  *out = b;
  *len = n + 4;
  return 0;
}

/* The greeting of A to the client (CLIENT_SSL cleared), the client's
 * answer to A and B, B's verdict swallowed. 0, or -1. */
static int handshake(myp_conn *c) {
  myp_proxy *p = c->p;
  unsigned char *g = NULL, *gb = NULL, *r = NULL, *ok = NULL;
  size_t gn = 0, gbn = 0, rn = 0, okn = 0;
  int rc = -1;
  if (read_packet(p, c->sfd[0], &g, &gn) != 0 || read_packet(p, c->sfd[1], &gb, &gbn) != 0) goto out;
  /* Protocol 10: version, server version (NUL-ended), connection id (4),
   * scramble part 1 (8), a filler (1), the capabilities' low 2 bytes. */
  size_t ver = 5 < gn ? strnlen((const char *)g + 5, gn - 5) : gn;
  size_t caps = 5 + ver + 1 + 4 + 8 + 1;
  if (gn < caps + 2 || g[4] != 10) goto out;
  g[caps + 1] &= (unsigned char)~(MYP_CLIENT_SSL >> 8);
  if (pgp_write_all(c->cfd, g, gn) != 0 || read_packet(p, c->cfd, &r, &rn) != 0) goto out;
  if (pgp_write_all(c->sfd[0], r, rn) != 0 || pgp_write_all(c->sfd[1], r, rn) != 0) goto out;
  /* B's answer: OK (0x00), or this proxy cannot share the session. */
  if (read_packet(p, c->sfd[1], &ok, &okn) != 0 || okn < 5 || ok[4] != 0x00) goto out;
  rc = 0;
out:
  if (rc) {
    atomic_fetch_add(&p->failed, 1);
    fprintf(stderr, "myproxy: a handshake failed (is the user's password empty?)\n");
  }
  free(g);
  free(gb);
  free(r);
  free(ok);
  return rc;
}

static void serve(void *owner, int cfd) {
  myp_proxy *p = owner;
  myp_conn conn = {.p = p, .cfd = cfd, .sfd = {pgp_dial_loopback(p->target), pgp_dial_loopback(p->target)}}, *c = &conn;
  unsigned char *in = NULL; /* the client's bytes not yet relayed */
  size_t inn = 0;
  int cur = 0, commands = 0;
  unsigned char buf[65536];
  if (c->sfd[0] < 0 || c->sfd[1] < 0 || handshake(c) != 0) goto out;
  while (!atomic_load(&p->l.stop)) {
    struct pollfd f[3] = {
        {.fd = c->cfd, .events = POLLIN}, {.fd = c->sfd[0], .events = POLLIN}, {.fd = c->sfd[1], .events = POLLIN}};
    int r = poll(f, 3, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    int broken = 0;
    for (int i = 1; i < 3 && !broken; i++) {
      if (!f[i].revents) continue;
      ssize_t n = read(f[i].fd, buf, sizeof buf);
      broken = n <= 0 || pgp_write_all(c->cfd, buf, (size_t)n) != 0;
    }
    if (broken) break;
    if (!f[0].revents) continue;
    ssize_t n = read(c->cfd, buf, sizeof buf);
    if (n <= 0) break;
    unsigned char *grown = realloc(in, inn + (size_t)n);
    if (!grown) break;
    in = grown;
    memcpy(in + inn, buf, (size_t)n);
    inn += (size_t)n;
    /* Whole packets: a command (sequence id 0) picks the session; what
     * follows it (a continuation) goes to the same one. */
    size_t off = 0;
    while (inn - off >= 4) {
      size_t len = 4 + ((size_t)in[off] | (size_t)in[off + 1] << 8 | (size_t)in[off + 2] << 16);
      if (inn - off < len) break;
      if (in[off + 3] == 0) {
        int base = p->mode == MYP_ALTERNATE ? commands % 2 : 0;
        cur = base ^ (atomic_load(&p->switches) & 1);
        commands++;
        atomic_fetch_add(&p->commands, 1);
      }
      if (pgp_write_all(c->sfd[cur], in + off, len) != 0) {
        broken = 1;
        break;
      }
      off += len;
    }
    if (broken) break;
    memmove(in, in + off, inn - off);
    inn -= off;
  }
out:
  free(in);
  close(c->cfd);
  if (c->sfd[0] >= 0) close(c->sfd[0]);
  if (c->sfd[1] >= 0) close(c->sfd[1]);
}

int myp_start(myp_proxy **out, int target_port, int mode) {
  myp_proxy *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->target = target_port;
  p->mode = mode;
  if (pgp_listener_start(&p->l, serve, p) != 0) {
    free(p);
    return -1;
  }
  *out = p;
  return 0;
}

void myp_stop(myp_proxy *p) {
  if (!p) return;
  pgp_listener_stop(&p->l);
  free(p);
}

int myp_port(const myp_proxy *p) { return p->l.port; }

void myp_switch(myp_proxy *p) { atomic_fetch_add(&p->switches, 1); }

int myp_commands(myp_proxy *p) { return atomic_load(&p->commands); }

int myp_failed(myp_proxy *p) { return atomic_load(&p->failed); }
