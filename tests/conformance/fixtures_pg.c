/*
 * fixtures_pg.c - PostgreSQL in the conformance suite, in lease mode (the
 * tables) and advisory mode (?mode=advisory): one server for both, a space
 * is dlock's schema. Lost replies go through pgproxy.h; freezing stops the
 * server's whole process group (postmaster and backends) with SIGSTOP.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static const char *pg_state(void) { return pg.url; }
static void pg_adopt(const char *state) { snprintf(pg.url, sizeof pg.url, "%s", state); }

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
/* Signal the postmaster and every process it started (each backend is in
 * a session of its own, so no process group reaches them all): stopped
 * first, it forks no new backend meanwhile. */
static void signal_server(int sig) {
  if (sig == SIGSTOP) kill(pg.pid, sig);
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[300], line[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int pid = 0, ppid = 0;
    /* pid (comm) state ppid: comm may hold spaces, so read past the last ')'. */
    if (fgets(line, sizeof line, f)) {
      char *close = strrchr(line, ')');
      pid = atoi(line);
      if (close) sscanf(close + 1, " %*c %d", &ppid);
    }
    fclose(f);
    if (pid > 0 && ppid == pg.pid) kill(pid, sig);
  }
  if (d) closedir(d);
  if (sig == SIGCONT) kill(pg.pid, sig);
}

static void pg_freeze(void) { signal_server(SIGSTOP); }
static void pg_thaw(void) { signal_server(SIGCONT); }

const conf_fixture conf_fx_pg_lease = {
    .name = "pg-lease",
    .caps = CONF_FORCE_NOTIFY | CONF_QUEUE | CONF_DEADLINE | CONF_FENCE | CONF_SEMAPHORE | CONF_RWLOCK | CONF_SCHED |
            CONF_GUARD | CONF_ADMIN | CONF_JOBS | CONF_WATCH_NOTIFY,
    .start = pg_start,
    .stop = pg_stop,
    .client = lease_client,
    .state = pg_state,
    .adopt = pg_adopt,
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
    .state = pg_state,
    .adopt = pg_adopt,
    .proxy_client = advisory_proxy_client,
    .drop_next_reply = advisory_drop,
    .dropped = dropped,
    .freeze = pg_freeze,
    .thaw = pg_thaw,
    .kill_free_ms = 2000,
};
