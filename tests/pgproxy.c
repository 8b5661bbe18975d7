/*
 * pgproxy.c - the reply-losing proxy for PostgreSQL tests (see pgproxy.h).
 */
#include "pgproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct pgp_proxy {
  pgp_listener l;
  int target;
  pthread_mutex_t mu;
  char pattern[256];
  int count;
  int dropped;
  atomic_int delay_ms; /* each reply chunk waits this long (latency) */
  atomic_int accepted;
  atomic_int any_reply; /* pgp_drop_at_first_reply() */
};

int pgp_write_all(int fd, const void *buf, size_t n) {
  const char *b = buf;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

int pgp_dial_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

typedef struct pgp_incoming {
  pgp_listener *l;
  int cfd;
} pgp_incoming;

static void *serve_main(void *arg) {
  pgp_incoming *a = arg;
  a->l->serve(a->l->owner, a->cfd);
  free(a);
  return NULL;
}

static void *listener_main(void *arg) {
  pgp_listener *l = arg;
  while (!atomic_load(&l->stop)) {
    struct pollfd f = {.fd = l->lfd, .events = POLLIN};
    if (poll(&f, 1, 100) <= 0) continue;
    int cfd = accept(l->lfd, NULL, NULL);
    if (cfd < 0) continue;
    pgp_incoming *a = malloc(sizeof *a);
    pthread_mutex_lock(&l->mu);
    int slot = a && l->nthreads < PGP_MAX_CONNS ? l->nthreads : -1;
    if (slot >= 0) *a = (pgp_incoming){.l = l, .cfd = cfd};
    if (slot >= 0 && pthread_create(&l->threads[slot], NULL, serve_main, a) == 0)
      l->nthreads++;
    else
      slot = -1;
    pthread_mutex_unlock(&l->mu);
    if (slot < 0) {
      close(cfd);
      free(a);
    }
  }
  return NULL;
}

int pgp_listener_start(pgp_listener *l, void (*serve)(void *owner, int cfd), void *owner) {
  memset(l, 0, sizeof *l);
  l->serve = serve;
  l->owner = owner;
  l->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l->lfd, 64) != 0 ||
      getsockname(l->lfd, (struct sockaddr *)&sa, &sl) != 0) {
    fprintf(stderr, "test proxy: cannot listen: %s\n", strerror(errno));
    if (l->lfd >= 0) close(l->lfd);
    return -1;
  }
  l->port = ntohs(sa.sin_port);
  pthread_mutex_init(&l->mu, NULL);
  if (pthread_create(&l->acceptor, NULL, listener_main, l) != 0) {
    close(l->lfd);
    pthread_mutex_destroy(&l->mu);
    return -1;
  }
  return 0;
}

void pgp_listener_stop(pgp_listener *l) {
  atomic_store(&l->stop, 1);
  pthread_join(l->acceptor, NULL);
  for (int i = 0; i < l->nthreads; i++) pthread_join(l->threads[i], NULL);
  close(l->lfd);
  pthread_mutex_destroy(&l->mu);
}

static void serve(void *owner, int cfd) {
  pgp_proxy *p = owner;
  atomic_fetch_add(&p->accepted, 1);
  int sfd = pgp_dial_loopback(p->target);
  if (sfd < 0) {
    close(cfd);
    return;
  }
  int dropping = 0;
  char *held = NULL;
  size_t heldn = 0;
  char buf[65536];
  while (!atomic_load(&p->l.stop)) {
    struct pollfd f[2] = {{.fd = cfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    int r = poll(f, 2, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (f[0].revents) {
      ssize_t n = read(cfd, buf, sizeof buf);
      if (n <= 0) break;
      pthread_mutex_lock(&p->mu);
      if (!dropping && p->count > 0 && p->pattern[0] && memmem(buf, (size_t)n, p->pattern, strlen(p->pattern))) {
        p->count--;
        dropping = 1;
      }
      pthread_mutex_unlock(&p->mu);
      if (pgp_write_all(sfd, buf, (size_t)n) != 0) break;
    }
    if (f[1].revents) {
      ssize_t n = read(sfd, buf, sizeof buf);
      if (n <= 0) break;
      int d = atomic_load(&p->delay_ms);
      if (d > 0) usleep((useconds_t)d * 1000);
      if (!dropping) {
        if (pgp_write_all(cfd, buf, (size_t)n) != 0) break;
        continue;
      }
      char *nh = realloc(held, heldn + (size_t)n);
      if (!nh) break;
      held = nh;
      memcpy(held + heldn, buf, (size_t)n);
      heldn += (size_t)n;
      /* ReadyForQuery: 'Z', int32 5, status. The statement is over. */
      static const char rfq[] = {'Z', 0, 0, 0, 5};
      char *z = memmem(held, heldn, rfq, sizeof rfq);
      if (atomic_load(&p->any_reply) || (z && (size_t)(z - held) + 6 <= heldn)) {
        pthread_mutex_lock(&p->mu);
        p->dropped++;
        pthread_mutex_unlock(&p->mu);
        break; /* drop it: close both sides */
      }
    }
  }
  free(held);
  close(cfd);
  close(sfd);
}

int pgp_start(pgp_proxy **out, int target_port) {
  pgp_proxy *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->target = target_port;
  pthread_mutex_init(&p->mu, NULL);
  if (pgp_listener_start(&p->l, serve, p) != 0) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    return -1;
  }
  *out = p;
  return 0;
}

void pgp_stop(pgp_proxy *p) {
  if (!p) return;
  pgp_listener_stop(&p->l);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int pgp_port(const pgp_proxy *p) { return p->l.port; }

void pgp_drop_reply(pgp_proxy *p, const char *pattern, int count) {
  pthread_mutex_lock(&p->mu);
  snprintf(p->pattern, sizeof p->pattern, "%s", pattern);
  p->count = count;
  pthread_mutex_unlock(&p->mu);
}

int pgp_dropped(pgp_proxy *p) {
  pthread_mutex_lock(&p->mu);
  int n = p->dropped;
  pthread_mutex_unlock(&p->mu);
  return n;
}

void pgp_set_delay(pgp_proxy *p, int ms) { atomic_store(&p->delay_ms, ms); }

int pgp_accepted(pgp_proxy *p) { return atomic_load(&p->accepted); }

void pgp_drop_at_first_reply(pgp_proxy *p) { atomic_store(&p->any_reply, 1); }
