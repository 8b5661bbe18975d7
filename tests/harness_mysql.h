/*
 * harness_mysql.h - start and stop a private MariaDB server for tests.
 *
 * mariadb-install-db in a temp dir, then `mariadbd --no-defaults` on a free
 * loopback port with its socket in that dir. As root (CI), both run as the
 * `mysql` user through setpriv(1), on a temp dir handed to that user. The
 * server has a database 'dlock' and a user 'dlock'@'127.0.0.1' with the
 * password TH_MY_PASSWORD and all rights on it; root has no password (TCP
 * from 127.0.0.1). The server is stopped by PID (SIGTERM; then SIGKILL)
 * from th_my_stop(), at exit, and on SIGINT/SIGTERM/SIGALRM/SIGABRT.
 */
#ifndef DLOCK_TEST_HARNESS_MYSQL_H
#define DLOCK_TEST_HARNESS_MYSQL_H

#include <stddef.h>
#include <sys/types.h>

/* Has characters a URL must percent-encode. */
#define TH_MY_PASSWORD "s3cret:p@ss/word"
#define TH_MY_PASSWORD_URL "s3cret%3Ap%40ss%2Fword"

typedef struct th_my {
  pid_t pid;
  int port;
  char dir[256]; /* temp dir: data/, the socket, the log */
  char url[512]; /* mysql://dlock:PASSWORD@127.0.0.1:PORT/dlock */
} th_my;

/* 1 when mariadbd and mariadb-install-db are installed, else 0 and why. */
int th_my_available(char *why, size_t len);
/* Install and start. 0, or -1 with a message on stderr. With TH_MY_PRELOAD
 * set (a library path, e.g. libfaketime), mariadbd runs with it preloaded
 * and the environment's FAKETIME_* variables. */
int th_my_start(th_my *p);
/* A test file's server: th_my_available() and th_my_start(). 1 when it
 * runs; else 0, with why in 'why' (for TEST_SKIP). */
int th_my_suite_start(th_my *p, char *why, size_t len);
/* A dlock client of 'p', 'more' (may be NULL) appended to its URL. NULL on
 * failure, with dlock_last_error(). */
struct dlock_client *th_my_client(const th_my *p, const char *more);
/* Stop by PID and remove the temp dir. */
void th_my_stop(th_my *p);
/* Stop by PID (SIGTERM; kill9: SIGKILL, a crash), keeping the data;
 * th_my_relaunch() starts it again on the same port. */
void th_my_halt(th_my *p, int kill9);
int th_my_relaunch(th_my *p);
/* Run SQL through the mariadb client as root; output (tab-separated, no
 * column names) into 'out', trailing newline trimmed. Its exit status. */
int th_my_sql(const th_my *p, char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
