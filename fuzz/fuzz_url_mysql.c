/*
 * fuzz_url_mysql.c - the MySQL/MariaDB URL parser (src/mysql/my_url.h,
 * dlock__my_url_parse), built when DLOCK_WITH_MYSQL is on.
 *
 * Any input: 0 or DLOCK_EURL, never a crash, a leak or a read past the
 * string; a parsed URL is complete (a host, a port 1..65535, a database of
 * the allowed characters), and a password never reaches the display form
 * (which then shows ":***@").
 */
#include "dlock.h"
#include "fuzz.h"
#include "mysql/my_url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = fuzz_string(data, size);
  if (!url) return 0;
  dlock__my_url u;
  int rc = dlock__my_url_parse(url, &u);
  FUZZ_CHECK(memchr(u.display, '\0', sizeof u.display) != NULL);
  if (rc == 0) {
    FUZZ_CHECK(u.host[0] != '\0');
    FUZZ_CHECK(u.port >= 1 && u.port <= 65535);
    FUZZ_CHECK(u.db[0] != '\0');
    for (const char *p = u.db; *p; p++)
      FUZZ_CHECK(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$-", *p) != NULL);
    FUZZ_CHECK(u.advisory == 0 || u.advisory == 1);
    if (u.password[0]) {
      FUZZ_CHECK(strstr(u.display, ":***@") != NULL);
      /* Nothing of the URL's password segment is left before the mask. */
      const char *mask = strstr(u.display, ":***@");
      size_t plen = strlen(u.password);
      if (plen >= 4) {
        char head[400];
        snprintf(head, sizeof head, "%.*s", (int)(mask - u.display), u.display);
        FUZZ_CHECK(strstr(head, u.password) == NULL || strstr(u.user, u.password) != NULL ||
                   strstr("mysql://mariadb://", u.password) != NULL);
      }
    }
  } else {
    FUZZ_CHECK(rc == DLOCK_EURL);
    FUZZ_CHECK(dlock_last_error()[0] != '\0');
  }
  memset(u.password, 0, sizeof u.password);
  free(url);
  return 0;
}
