/*
 * fixtures_mysql.c - MySQL/MariaDB in the conformance suite, in lease mode
 * (dlock's table) and advisory mode (?mode=advisory, GET_LOCK): one private
 * mariadbd (tests/harness_mysql.h) for both; a space is a key prefix.
 * Freezing stops mariadbd (one process, many threads) with SIGSTOP. No
 * fault proxy: the replies are MySQL's binary protocol, which no proxy of
 * the tests speaks (tests/integration/test_mysql.c loses replies its own
 * way, a statement held behind LOCK TABLES past the command timeout).
 */
#include <signal.h>
#include <stdio.h>

#include "conformance.h"
#include "harness.h"
#include "harness_mysql.h"

static th_my my;

static int my_start(char *why, size_t len) { return th_my_suite_start(&my, why, len); }
static void my_stop(void) { th_my_stop(&my); }

static dlock_client *client_in(const char *space, const char *more) {
  char url[700];
  snprintf(url, sizeof url, "%s%s", my.url, more);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.key_prefix = space;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static dlock_client *lease_client(const char *space) { return client_in(space, ""); }
static dlock_client *advisory_client(const char *space) { return client_in(space, "?mode=advisory"); }

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
 * and force release; waiters are not queued ("no FIFO order"); no
 * semaphore, read-write lock or scheduler ("Not yet"), no latch
 * (docs/latch.md). */
const conf_fixture conf_fx_mysql_lease = {
    .name = "mysql-lease",
    .caps = CONF_DEADLINE | CONF_FENCE | CONF_GUARD | CONF_ADMIN,
    .start = my_start,
    .stop = my_stop,
    .client = lease_client,
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
    .freeze = my_freeze,
    .thaw = my_thaw,
    .kill_free_ms = 2000,
};
