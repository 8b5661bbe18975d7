/*
 * fuzz_url_mysql.c - the MySQL/MariaDB URL parser (src/mysql/my_url.h,
 * dlock__my_url_parse), built when DLOCK_WITH_MYSQL is on.
 *
 * Any input: 0 or DLOCK_EURL, never a crash, a leak or a read past the
 * string; a parsed URL is complete (a host, a port 1..65535, a database of
 * the allowed characters), and a password never reaches the display form
 * (which then shows ":***@"). Whatever the input, parsed or not: the
 * redacted form never holds the text between the URL's first ':' and its
 * last '@' (a password with an unencoded '/', '?', '#' or '@').
 */
#include "dlock.h"
#include "fuzz.h"
#include "mysql/my_url.h"

/* The password segment of 'url' ([':', '@') as dlock__my_redact() sees it)
 * must not show in its redacted form, unless the URL without it holds the
 * same text (a password equal to the host) or it holds '*' (the mask). */
static void check_secret_masked(const char *url) {
  const char *a = strstr(url, "://");
  a = a ? a + 3 : url;
  const char *colon = strchr(a, ':');
  const char *at = strrchr(a, '@');
  if (!colon || !at || at <= colon || strlen(url) > 300) return;
  char secret[400], cut[400], shown[1024];
  snprintf(secret, sizeof secret, "%.*s", (int)(at - colon - 1), colon + 1);
  snprintf(cut, sizeof cut, "%.*s:***%s", (int)(colon - url), url, at);
  dlock__my_redact(url, shown, sizeof shown);
  if (strlen(secret) < 1 || strchr(secret, '*')) return;
  FUZZ_CHECK(strstr(shown, secret) == NULL || strstr(cut, secret) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = fuzz_string(data, size);
  if (!url) return 0;
  check_secret_masked(url);
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
    /* A display cut at its size (a URL of 400 bytes and more) may end
     * before the mask: check_secret_masked() still holds for it. */
    int cut_short = strlen(u.display) + 1 >= sizeof u.display;
    if (u.password[0] && !cut_short) {
      FUZZ_CHECK(strstr(u.display, ":***@") != NULL);
      /* Nothing of the URL's password segment is left before the mask. */
      const char *mask = strstr(u.display, ":***@");
      size_t plen = strlen(u.password);
      if (plen >= 4) {
        char head[400];
        snprintf(head, sizeof head, "%.*s", (int)(mask - u.display), u.display);
        /* The text up to "://" (the scheme: dlock_url_redact() comes here
         * for mysql:// and mariadb:// only) is the input's own. */
        const char *sep = strstr(url, "://");
        char scheme[400];
        snprintf(scheme, sizeof scheme, "%.*s", sep ? (int)(sep - url + 3) : 0, url); /* with "://" */
        FUZZ_CHECK(strstr(head, u.password) == NULL || strstr(u.user, u.password) != NULL ||
                   strstr("mysql://mariadb://", u.password) != NULL || strstr(scheme, u.password) != NULL);
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
