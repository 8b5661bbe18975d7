/*
 * pg_server_main.c - pg-server: a private PostgreSQL for the shell tests
 * (tests/cli/test_pg.sh), started through the C harness (harness_pg.h:
 * initdb in a temp dir, run as the postgres user when root, a free
 * loopback port). Prints the URL on one line once the server answers, then
 * waits; SIGTERM or SIGINT stops the server by PID and removes its
 * directory. Exit 77 when PostgreSQL is not installed (the reason on stderr).
 * With DLOCK_PG_SERVER_BOUNCER=MODE set (and pgbouncer installed), a
 * PgBouncer in that pool_mode in front of it too: its URL is a second line
 * ("none" when it could not start), and it is stopped first.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness_pg.h"

int main(void) {
  char why[256];
  if (!th_pg_available(why, sizeof why)) {
    fprintf(stderr, "pg-server: %s\n", why);
    return 77;
  }
  th_pg srv;
  if (th_pg_start(&srv, NULL) != 0) return 1;
  /* Blocked only now: the server must not inherit a blocked SIGINT. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, NULL);
  printf("%s\n", srv.url);
  const char *mode = getenv("DLOCK_PG_SERVER_BOUNCER");
  th_pgbouncer b;
  int bouncer = 0;
  if (mode && *mode) {
    bouncer = th_pgbouncer_available(why, sizeof why) && th_pgbouncer_start(&b, &srv, mode) == 0;
    printf("%s\n", bouncer ? b.url : "none");
  }
  fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  if (bouncer) th_pgbouncer_stop(&b);
  th_pg_stop(&srv);
  return 0;
}
