/*
 * pgproxy.h - a TCP proxy in front of the test PostgreSQL server that loses
 * a statement's reply after the statement ran, for the lost-reply tests of
 * the PostgreSQL backend (the Redis twin is faultproxy.h).
 *
 * Each accepted connection gets a thread that forwards bytes both ways.
 * pgp_drop_reply(p, pat, n): the next n client writes that contain 'pat'
 * (a lock name, a token) are forwarded; the server's answer is held back
 * until its ReadyForQuery message ('Z', length 5) arrived, so the statement
 * ran and committed, and then it is dropped and both sides are closed. Use
 * sslmode=disable in URLs through the proxy (it reads the plain protocol).
 */
#ifndef DLOCK_TEST_PGPROXY_H
#define DLOCK_TEST_PGPROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct pgp_proxy pgp_proxy;

/* 0, or -1 with a message on stderr. */
int pgp_start(pgp_proxy **out, int target_port);
void pgp_stop(pgp_proxy *p);
int pgp_port(const pgp_proxy *p);
void pgp_drop_reply(pgp_proxy *p, const char *pattern, int count);
/* Replies dropped so far. */
int pgp_dropped(pgp_proxy *p);
/* Latency: each chunk of a server's reply is held 'ms' before it is passed on. */
void pgp_set_delay(pgp_proxy *p, int ms);
/* Connections accepted so far. */
int pgp_accepted(pgp_proxy *p);
/* For a server that is not PostgreSQL (MySQL: tests/conformance/
 * fixtures_mysql.c): the first bytes of the server's answer to a matched
 * write end the statement (it ran, and in autocommit committed), and the
 * answer is dropped then, rather than at ReadyForQuery. */
void pgp_drop_at_first_reply(pgp_proxy *p);

/* What the test proxies share (pgproxy.c, myproxy.c). A listener on a
 * free loopback port: each connection is served by serve(owner, cfd) on a
 * thread of its own, which closes 'cfd' and returns soon once 'stop' is
 * set; pgp_listener_stop() sets it and joins them all. */
#define PGP_MAX_CONNS 256
typedef struct pgp_listener {
  int lfd, port;
  atomic_int stop;
  void (*serve)(void *owner, int cfd);
  void *owner;
  pthread_t acceptor;
  pthread_mutex_t mu;
  pthread_t threads[PGP_MAX_CONNS];
  int nthreads;
} pgp_listener;
/* 0, or -1 with a message on stderr. */
int pgp_listener_start(pgp_listener *l, void (*serve)(void *owner, int cfd), void *owner);
void pgp_listener_stop(pgp_listener *l);
/* A connection to 127.0.0.1:port (a descriptor, or -1); a whole write (0, or -1). */
int pgp_dial_loopback(int port);
int pgp_write_all(int fd, const void *buf, size_t n);

#endif
