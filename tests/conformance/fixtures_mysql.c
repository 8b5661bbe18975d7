/*
 * fixtures_mysql.c - MySQL/MariaDB in the conformance suite, in lease mode
 * (dlock's table) and advisory mode (?mode=advisory, GET_LOCK): one private
 * mariadbd (tests/harness_mysql.h) for both; a space is a key prefix.
 * Lost replies go through pgproxy.h, which forwards MySQL's protocol as
 * bytes and drops the server's first answer to a matched statement (it
 * ran); freezing stops mariadbd (one process, many threads) with SIGSTOP.
 */
#include <signal.h>
#include <stdio.h>

#include "conformance.h"
#include "harness.h"
#include "harness_mysql.h"
#include "pgproxy.h"

static th_my my;
static pgp_proxy *pp;
static char proxy_space[64]; /* the last proxy client's key prefix */

static int my_start(char *why, size_t len) {
  if (!th_my_suite_start(&my, why, len)) return 0;
  if (pgp_start(&pp, my.port) != 0) {
    th_my_stop(&my);
    snprintf(why, len, "the lost-reply proxy did not start");
    return 0;
  }
  pgp_drop_at_first_reply(pp);
  return 1;
}

static void my_stop(void) {
  pgp_stop(pp);
  th_my_stop(&my);
}

/* A client of the server, or of the proxy in front of it ('proxied'). */
static dlock_client *client_in(const char *space, const char *more, int proxied) {
  char url[700];
  if (proxied)
    snprintf(url, sizeof url, "mysql://dlock:%s@127.0.0.1:%d/dlock%s", TH_MY_PASSWORD_URL, pgp_port(pp), more);
  else
    snprintf(url, sizeof url, "%s%s", my.url, more);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.key_prefix = space;
  if (proxied) o.command_timeout_ms = (int)(2000 * th_time_factor());
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static dlock_client *lease_client(const char *space) { return client_in(space, "", 0); }
static dlock_client *advisory_client(const char *space) { return client_in(space, "?mode=advisory", 0); }
static const char *my_state(void) { return my.url; }
static void my_adopt(const char *state) { snprintf(my.url, sizeof my.url, "%s", state); }

static dlock_client *proxy_client(const char *space, const char *more) {
  snprintf(proxy_space, sizeof proxy_space, "%s", space);
  return client_in(space, more, 1);
}
static dlock_client *lease_proxy_client(const char *space) { return proxy_client(space, ""); }
static dlock_client *advisory_proxy_client(const char *space) { return proxy_client(space, "?mode=advisory"); }

/* Lease mode: every statement of a lock names it, as a hexadecimal literal
 * of the name with its prefix (docs/mysql.md, "Names"). */
static void lease_drop(conf_call call, const char *name) {
  (void)call;
  char full[200], lit[420];
  snprintf(full, sizeof full, "%s:%s", proxy_space, name);
  size_t o = (size_t)snprintf(lit, sizeof lit, "X'");
  for (const unsigned char *s = (const unsigned char *)full; *s; s++)
    o += (size_t)snprintf(lit + o, sizeof lit - o, "%02x", *s);
  snprintf(lit + o, sizeof lit - o, "'");
  pgp_drop_reply(pp, lit, 1);
}

/* Advisory mode names a lock by a hash of its name: the acquire's
 * statement is GET_LOCK, the release's RELEASE_LOCK. */
static void advisory_drop(conf_call call, const char *name) {
  (void)name;
  pgp_drop_reply(pp, call == CONF_ACQUIRE ? "GET_LOCK(" : "RELEASE_LOCK(", 1);
}

static int dropped(void) { return pgp_dropped(pp); }

static void my_freeze(void) { kill(my.pid, SIGSTOP); }

/* Resumed, it answers again: a statement through the mariadb client,
 * bounded in tries and time. */
static void my_thaw(void) {
  kill(my.pid, SIGCONT);
  char out[64];
  long long give_up = th_now_ms() + (long long)(20000 * th_time_factor());
  for (int i = 0; i < 200 && th_now_ms() < give_up; i++) {
    if (th_my_sql(&my, out, sizeof out, "SELECT 1") == 0) return;
    th_sleep_ms(100);
  }
}

/* Lease mode (docs/mysql.md): fences, the local deadline, the guard, list
 * and force release, semaphores, read-write locks and the scheduler; a
 * mutex's waiters are not queued ("no FIFO order": a semaphore's and a
 * read-write lock's are); no latch (docs/latch.md). */
const conf_fixture conf_fx_mysql_lease = {
    .name = "mysql-lease",
    .caps =
        CONF_DEADLINE | CONF_FENCE | CONF_GUARD | CONF_ADMIN | CONF_SEMAPHORE | CONF_RWLOCK | CONF_SCHED | CONF_JOBS,
    .start = my_start,
    .stop = my_stop,
    .client = lease_client,
    .state = my_state,
    .adopt = my_adopt,
    .proxy_client = lease_proxy_client,
    .drop_next_reply = lease_drop,
    .dropped = dropped,
    .freeze = my_freeze,
    .thaw = my_thaw,
    .kill_free_ms = 2000,
};

/* Advisory mode (docs/mysql.md, "Advisory mode"): no fence, so no guard,
 * list or force release; the lock is the session, so no local deadline; a
 * wait runs on the server, not in a queue dlock can count. */
const conf_fixture conf_fx_mysql_advisory = {
    .name = "mysql-advisory",
    .caps = 0,
    .start = my_start,
    .stop = my_stop,
    .client = advisory_client,
    .state = my_state,
    .adopt = my_adopt,
    .proxy_client = advisory_proxy_client,
    .drop_next_reply = advisory_drop,
    .dropped = dropped,
    .freeze = my_freeze,
    .thaw = my_thaw,
    .kill_free_ms = 2000,
};
