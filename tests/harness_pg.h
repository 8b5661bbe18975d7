/*
 * harness_pg.h - start and stop a private PostgreSQL server for tests.
 *
 * initdb in a temp dir, then `postgres` on a free loopback port with its
 * unix socket in that dir, trust authentication, fsync off. As root (CI),
 * both run as the `postgres` user through setpriv(1), on a temp dir handed
 * to that user. The server is stopped by PID (SIGINT, fast shutdown; then
 * SIGKILL) from th_pg_stop(), at exit, and on SIGINT/SIGTERM/SIGALRM/SIGABRT.
 * The binaries are found under /usr/lib/postgresql/<version>/bin.
 */
#ifndef DLOCK_TEST_HARNESS_PG_H
#define DLOCK_TEST_HARNESS_PG_H

#include <stddef.h>
#include <sys/types.h>

typedef struct th_pg {
  pid_t pid;
  int port;
  char bindir[256];
  char dir[256];    /* temp dir: data/, the socket, the log */
  char url[512];    /* postgresql://postgres@127.0.0.1:PORT/postgres */
  char extra[2048]; /* -c options given at start (kept for restart) */
} th_pg;

/* 1 when PostgreSQL's server binaries are installed, else 0 and why. */
int th_pg_available(char *why, size_t len);
/* initdb and start. 'extra' (may be NULL): more "-c name=value" arguments.
 * 0, or -1 with a message on stderr. */
int th_pg_start(th_pg *p, const char *extra);
/* A test file's server: th_pg_available() and th_pg_start(p, NULL). 1 when
 * it runs; else 0, with why in 'why' (for TEST_SKIP). */
int th_pg_suite_start(th_pg *p, char *why, size_t len);
/* A dlock client of 'p' on dlock's schema 'schema', 'more' (may be NULL)
 * appended to its URL ("&name=value..."). NULL on failure, with
 * dlock_last_error(). */
struct dlock_client *th_pg_client(const th_pg *p, const char *schema, const char *more);
/* Stop by PID and remove the temp dir. */
void th_pg_stop(th_pg *p);
/* An asynchronous streaming standby of 'primary' (pg_basebackup -R into a
 * temp dir, started on a free port; read-only until promoted). Stopped and
 * removed by th_pg_stop(). 0, or -1 with a message on stderr. */
int th_pg_start_standby(th_pg *standby, const th_pg *primary);
/* Stop the server by PID (fast shutdown; kill9: SIGKILL), keeping its data
 * dir; th_pg_relaunch() starts it again on the same port. */
void th_pg_halt(th_pg *p, int kill9);
int th_pg_relaunch(th_pg *p);
/* Stop (SIGINT, fast shutdown; kill9: SIGKILL, a crash) and start again on
 * the same port and data. 'down_ms': how long it stays down. */
int th_pg_restart(th_pg *p, int kill9, long down_ms);
/* Run SQL through psql as the superuser 'postgres' (or 'user' if not NULL);
 * output (unaligned, tuples only, trimmed) into 'out'. Returns psql's exit
 * status (0 ok). */
int th_pg_sql(const th_pg *p, const char *user, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Wait until another session runs a statement containing 'text' (e.g. the
 * pg_sleep of a session that took a lock first), so that a test never
 * counts on a fixed sleep for it. 0, or -1 after 'timeout_ms'. */
int th_pg_wait_active(const th_pg *p, const char *text, long timeout_ms);

/* A PgBouncer (Debian: pgbouncer) in front of 'pg', in 'pool_mode'
 * ("transaction" or "session"), trust authentication, on a free loopback
 * port; run as the postgres user when root; stopped by PID like the server. */
typedef struct th_pgbouncer {
  pid_t pid;
  int port;
  char dir[256];
  char url[512]; /* postgresql://postgres@127.0.0.1:PORT/postgres?sslmode=disable */
} th_pgbouncer;

/* 1 when pgbouncer is installed, else 0 and why. */
int th_pgbouncer_available(char *why, size_t len);
int th_pgbouncer_start(th_pgbouncer *b, const th_pg *pg, const char *pool_mode);
void th_pgbouncer_stop(th_pgbouncer *b);

#endif
