/*
 * fixtures_pg.c - PostgreSQL in the conformance suite, in lease mode (the
 * tables) and advisory mode (?mode=advisory): one server for both, a space
 * is dlock's schema. Lost replies go through pgproxy.h; freezing stops the
 * server's whole process group (postmaster and backends) with SIGSTOP.
 */
#include <signal.h>
#include <stdio.h>

#include "conformance.h"
#include "harness.h"
#include "harness_pg.h"
#include "pgproxy.h"

static th_pg pg;
static pgp_proxy *pp;

static int pg_start(char *why, size_t len) {
  if (!th_pg_suite_start(&pg, why, len)) return 0;
  if (pgp_start(&pp, pg.port) != 0) {
    th_pg_stop(&pg);
    snprintf(why, len, "the PostgreSQL proxy did not start");
    return 0;
  }
  return 1;
}

static void pg_stop(void) {
  pgp_stop(pp);
  th_pg_stop(&pg);
}

static dlock_client *lease_client(const char *space) { return th_pg_client(&pg, space, NULL); }
static dlock_client *advisory_client(const char *space) { return th_pg_client(&pg, space, "&mode=advisory"); }

static dlock_client *proxy_client(const char *space, const char *more) {
  char url[600];
  snprintf(url, sizeof url, "postgresql://postgres@127.0.0.1:%d/postgres?sslmode=disable&dlock_schema=%s%s",
           pgp_port(pp), space, more);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = (int)(2000 * th_time_factor());
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static dlock_client *lease_proxy_client(const char *space) { return proxy_client(space, ""); }
static dlock_client *advisory_proxy_client(const char *space) { return proxy_client(space, "&mode=advisory"); }

/* Lease mode: every statement of a lock names it. */
static void lease_drop(conf_call call, const char *name) {
  (void)call;
  pgp_drop_reply(pp, name, 1);
}

/* Advisory mode names a lock by its key: the acquire's statement takes the
 * transaction-level lock, the release rolls the transaction back. */
static void advisory_drop(conf_call call, const char *name) {
  (void)name;
  pgp_drop_reply(pp, call == CONF_ACQUIRE ? "pg_try_advisory_xact_lock" : "ROLLBACK", 1);
}

static int dropped(void) { return pgp_dropped(pp); }
static void pg_freeze(void) { kill(-pg.pid, SIGSTOP); }
static void pg_thaw(void) { kill(-pg.pid, SIGCONT); }

const conf_fixture conf_fx_pg_lease = {
    .name = "pg-lease",
    .caps = CONF_DEADLINE | CONF_FENCE | CONF_SEMAPHORE | CONF_RWLOCK | CONF_SCHED | CONF_GUARD | CONF_ADMIN,
    .start = pg_start,
    .stop = pg_stop,
    .client = lease_client,
    .proxy_client = lease_proxy_client,
    .drop_next_reply = lease_drop,
    .dropped = dropped,
    .freeze = pg_freeze,
    .thaw = pg_thaw,
    .kill_free_ms = 2000,
};

/* Advisory mode: no fence, no local deadline, no semaphore or read-write
 * lock, no guard or scheduler, no list or force release (docs/postgres.md,
 * "Advisory mode"); no latch on PostgreSQL (docs/latch.md). */
const conf_fixture conf_fx_pg_advisory = {
    .name = "pg-advisory",
    .caps = 0,
    .start = pg_start,
    .stop = pg_stop,
    .client = advisory_client,
    .proxy_client = advisory_proxy_client,
    .drop_next_reply = advisory_drop,
    .dropped = dropped,
    .freeze = pg_freeze,
    .thaw = pg_thaw,
    .kill_free_ms = 2000,
};
