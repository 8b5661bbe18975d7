/*
 * my_url.h - the MySQL/MariaDB backend's URL parser without <mysql.h>, for
 * the fuzzer (fuzz/fuzz_url_mysql.c) and the backend's own use:
 * mysql://user[:password]@host[:port]/db[?mode=lease|advisory] (and
 * mariadb://), docs/mysql.md "URLs". No I/O.
 */
#ifndef DLOCK_MY_URL_H
#define DLOCK_MY_URL_H

#include <stddef.h>

typedef struct dlock__my_url {
  char display[400]; /* the URL as messages show it: the password as *** */
  char host[256], user[128], password[256], db[65];
  unsigned port;
  int advisory; /* ?mode=advisory */
} dlock__my_url;

/* 'url' with its password replaced by "***" (always NUL-terminated). */
void dlock__my_redact(const char *url, char *buf, size_t len);
/* Parse 'url' into 'out': 0, or DLOCK_EURL with dlock_last_error() saying
 * what is wrong (naming the URL without its password). */
int dlock__my_url_parse(const char *url, dlock__my_url *out);

#endif /* DLOCK_MY_URL_H */
