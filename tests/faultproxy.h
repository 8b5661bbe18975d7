/*
 * faultproxy.h - a TCP proxy in front of a test redis-server that can lose
 * replies on purpose, for tests of what a client does when it cannot know
 * whether its command ran.
 *
 * fp_start() listens on a free 127.0.0.1 port and forwards every connection
 * to 127.0.0.1:<target port>, one thread for all connections. It reads both
 * directions as RESP, so it knows which reply answers which command. Rules
 * (they can be changed at any time from any thread):
 *
 *   fp_pass()               forward everything (the start state)
 *   fp_drop_reply(p, pat, n) the next n commands whose bytes contain 'pat'
 *                           (binary substring: a script's SHA1, a key, a token)
 *                           are forwarded; when the server's reply to such a
 *                           command has fully arrived (so the command ran),
 *                           that reply is dropped and both the client's and
 *                           the server's connection are closed. Replies to
 *                           earlier commands of the same pipeline are
 *                           forwarded, later ones are lost with the connection.
 *                           A -NOSCRIPT reply is passed on and does not count:
 *                           the script did not run, and the client sends it
 *                           again as EVAL (which the rule then matches if 'pat'
 *                           is in it; a SHA1 is not, so match EVALSHA by SHA1
 *                           only once the script is cached, or by a key).
 *   fp_hold_reply(p, pat, n) the next n commands whose bytes contain 'pat'
 *                           are forwarded; the server's reply to such a command
 *                           (it ran) is held, with the later replies of its
 *                           connection, until fp_release_held() or fp_pass():
 *                           a reply late on one connection while the others
 *                           (pub/sub) go on. fp_held() counts the replies held.
 *   fp_blackhole_after_drop(p, on) once a reply was dropped, blackhole (as
 *                           below) until fp_pass(): the client's retry then
 *                           gets no answer either, as when the server is gone
 *   fp_delay(p, ms)         hold every forwarded chunk ms before sending it on
 *                           (one thread: this slows every connection)
 *   fp_blackhole(p, on)     accept and read, forward nothing in either direction
 *   fp_close_all(p)         close every open connection now (like CLIENT KILL)
 *   fp_raw(p, on)           forward bytes as they come, without RESP framing,
 *                           for any TCP protocol (ZooKeeper's quorum links);
 *                           the drop rule then matches nothing, blackhole,
 *                           delay and close_all work as above
 *
 * fp_dropped() counts the replies dropped so far, fp_wait_dropped() waits for
 * a count. Pub/sub connections pass through, but a rule should not match a
 * command sent on one (pushes have no command to pair with).
 *
 * tests/faultproxy_main.c wraps this as a program for the shell tests.
 */
#ifndef DLOCK_TEST_FAULTPROXY_H
#define DLOCK_TEST_FAULTPROXY_H

#include <stddef.h>

typedef struct fp_proxy fp_proxy;

/* Start a proxy to 127.0.0.1:target_port. 0, or -1 with a message on stderr. */
int fp_start(fp_proxy **out, int target_port);
/* Stop the thread, close every socket, free. NULL is fine. */
void fp_stop(fp_proxy *p);
int fp_port(const fp_proxy *p);
/* "redis://127.0.0.1:<port>" */
const char *fp_url(const fp_proxy *p);

void fp_pass(fp_proxy *p);
void fp_drop_reply(fp_proxy *p, const char *pattern, int count);
void fp_hold_reply(fp_proxy *p, const char *pattern, int count);
void fp_release_held(fp_proxy *p);
int fp_held(fp_proxy *p);
/* Wait until fp_held() >= n or timeout_ms passed; returns fp_held(). */
int fp_wait_held(fp_proxy *p, int n, long timeout_ms);
void fp_delay(fp_proxy *p, int ms);
void fp_blackhole(fp_proxy *p, int on);
void fp_blackhole_after_drop(fp_proxy *p, int on);
void fp_close_all(fp_proxy *p);
void fp_raw(fp_proxy *p, int on);

/* Send one command straight to the target server (not through the proxy)
 * and read its reply: 0 unless the reply is an error or I/O failed. For
 * SCRIPT LOAD, CLIENT KILL, DEBUG SLEEP and the like. */
int fp_server_command(fp_proxy *p, int argc, const char **argv, const size_t *lens);

int fp_dropped(fp_proxy *p);
/* Wait until fp_dropped() >= n or timeout_ms passed; returns fp_dropped(). */
int fp_wait_dropped(fp_proxy *p, int n, long timeout_ms);

#endif
