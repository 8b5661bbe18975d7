/*
 * test_hostile_reply.c - a server that announces huge replies (issue 14).
 *
 * No redis-server here: a loopback listener in this process answers every
 * command with a reply header announcing 2^31 - 1 array elements or a bulk
 * string of about 1 TB, and never sends the body. The client must fail with
 * DLOCK_EPROTO at once (well within its command timeout), name the server and
 * the limit, and not allocate what was announced.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

#define MAX_PEERS 16

typedef struct fake_server {
  int listen_fd;
  int port;
  const char *answer; /* sent for every command after the first */
  int pong_first;     /* answer a connection's first command with +PONG */
  atomic_int stop;
  atomic_int commands;
  pthread_t thread;
} fake_server;

/* Serve until 'stop': answer each read of a connection (one command per
 * read is enough for dlock's handshake and PING). */
static void *serve(void *arg) {
  fake_server *s = arg;
  struct pollfd fds[1 + MAX_PEERS];
  int answered[1 + MAX_PEERS] = {0};
  int n = 1;
  fds[0] = (struct pollfd){s->listen_fd, POLLIN, 0};
  long long until = th_now_ms() + 60000; /* bounded whatever happens */
  while (!atomic_load(&s->stop) && th_now_ms() < until) {
    if (poll(fds, (nfds_t)n, 50) <= 0) continue;
    if ((fds[0].revents & POLLIN) && n < 1 + MAX_PEERS) {
      int fd = accept(s->listen_fd, NULL, NULL);
      if (fd >= 0) {
        answered[n] = 0;
        fds[n++] = (struct pollfd){fd, POLLIN, 0};
      }
    }
    for (int i = 1; i < n; i++) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = recv(fds[i].fd, buf, sizeof buf, 0);
      if (got <= 0) {
        close(fds[i].fd);
        fds[i] = fds[n - 1];
        answered[i] = answered[n - 1];
        n--;
        i--;
        continue;
      }
      atomic_fetch_add(&s->commands, 1);
      const char *reply = s->pong_first && answered[i] == 0 ? "+PONG\r\n" : s->answer;
      answered[i]++;
      if (send(fds[i].fd, reply, strlen(reply), MSG_NOSIGNAL) < 0) continue;
    }
  }
  for (int i = 1; i < n; i++) close(fds[i].fd);
  return NULL;
}

static int fake_start(fake_server *s, const char *answer, int pong_first) {
  memset(s, 0, sizeof *s);
  s->answer = answer;
  s->pong_first = pong_first;
  s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (s->listen_fd < 0) return -1;
  struct sockaddr_in sa = {0};
  socklen_t len = sizeof sa;
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s->listen_fd, 16) != 0 ||
      getsockname(s->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
    close(s->listen_fd);
    return -1;
  }
  s->port = ntohs(sa.sin_port);
  if (pthread_create(&s->thread, NULL, serve, s) != 0) {
    close(s->listen_fd);
    return -1;
  }
  return 0;
}

static void fake_stop(fake_server *s) {
  atomic_store(&s->stop, 1);
  pthread_join(s->thread, NULL);
  close(s->listen_fd);
}

/* Connect (and PING) through a client with a 3 s command timeout (scaled
 * for slow builds); the status, the message and how long it took. */
typedef struct outcome {
  int rc;
  long long took_ms;
  char msg[1024];
  char where[64];
} outcome;

static void try_server(const char *answer, int pong_first, outcome *out) {
  fake_server s;
  memset(out, 0, sizeof *out);
  out->rc = 12345;
  if (fake_start(&s, answer, pong_first) != 0) {
    snprintf(out->msg, sizeof out->msg, "cannot start the fake server: %s", strerror(errno));
    return;
  }
  char url[128];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", s.port);
  snprintf(out->where, sizeof out->where, "127.0.0.1:%d", s.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = (int)(3000 * th_time_factor());
  o.command_timeout_ms = (int)(3000 * th_time_factor());
  dlock_client *c = NULL;
  long long t0 = th_now_ms();
  out->rc = dlock_client_new(&c, &o);
  if (out->rc == 0) out->rc = dlock_client_ping(c);
  out->took_ms = th_now_ms() - t0;
  snprintf(out->msg, sizeof out->msg, "%s", dlock_last_error());
  dlock_client_free(c);
  fake_stop(&s);
}

static void check(const outcome *o, const char *limit_text) {
  if (o->rc != DLOCK_EPROTO)
    TEST_FAIL("status %s (%d), want DLOCK_EPROTO; after %lld ms: %s", dlock_err_name(o->rc), o->rc, o->took_ms, o->msg);
  ASSERT_CONTAINS(o->msg, o->where);
  ASSERT_CONTAINS(o->msg, limit_text);
  /* At once, not at the command timeout (3 s): the body never comes. */
  if (o->took_ms >= 2000 * th_time_factor())
    TEST_FAIL("took %lld ms, want well under the %ld ms timeout", o->took_ms, 3000 * th_time_factor());
}

TEST(an_array_of_two_billion_elements_is_eproto_at_connect) {
  outcome o;
  try_server("*2147483647\r\n", 0, &o);
  check(&o, "reply announces 2147483647 array elements, more than the limit of 1048576");
}

TEST(a_terabyte_bulk_string_is_eproto_at_connect) {
  outcome o;
  try_server("$999999999999\r\n", 0, &o);
  check(&o, "bulk string of 999999999999 bytes, more than the limit of 67108864");
}

TEST(an_array_of_two_billion_elements_is_eproto_for_a_command) {
  outcome o;
  try_server("*2147483647\r\n", 1, &o);
  check(&o, "more than the limit of 1048576");
}

TEST(a_terabyte_bulk_string_is_eproto_for_a_command) {
  outcome o;
  try_server("$999999999999\r\n", 1, &o);
  check(&o, "more than the limit of 67108864");
}

TEST_MAIN()
