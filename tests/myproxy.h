/*
 * myproxy.h - a session-sharing MySQL proxy for tests: what ProxySQL's
 * multiplexing or MaxScale's connection sharing does to a client, that
 * its consecutive statements run on different server sessions.
 *
 * For each client connection it opens TWO server connections, A and B. A's
 * greeting goes to the client (CLIENT_SSL cleared: the URLs through it use
 * no TLS), the client's handshake response goes to both, and B's answer is
 * swallowed. No auth code: the user must have NO password, so that the
 * empty auth response is valid for A's and B's scrambles alike. After the
 * handshake each command (a client packet with sequence id 0) goes to the
 * connection's current session, and replies from both are relayed (the
 * client sends one command at a time). Which one is current:
 *   MYP_PIN        A for the connection's whole life (a pooler that pins a
 *                  session: indistinguishable from a direct connection);
 *   MYP_ALTERNATE  A, B, A, ... one command each.
 * myp_switch() makes every open connection's next commands go to its other
 * session from then on (a pooler that hands a client another session).
 */
#ifndef DLOCK_TEST_MYPROXY_H
#define DLOCK_TEST_MYPROXY_H

typedef struct myp_proxy myp_proxy;

enum { MYP_PIN = 0, MYP_ALTERNATE = 1 };

/* A proxy on a free loopback port in front of 127.0.0.1:target_port. 0, or
 * -1 with a message on stderr. Stopped (its threads joined, its sockets
 * closed) by myp_stop(). */
int myp_start(myp_proxy **out, int target_port, int mode);
void myp_stop(myp_proxy *p);
int myp_port(const myp_proxy *p);
/* Every open connection moves to its other session (A <-> B). */
void myp_switch(myp_proxy *p);
/* Commands relayed so far; handshakes failed so far (B refused, an auth
 * exchange the proxy cannot follow). */
int myp_commands(myp_proxy *p);
int myp_failed(myp_proxy *p);

#endif
