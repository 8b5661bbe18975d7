/*
 * fuzz_url.c - the Redis URL parser (src/redis/url.c, dlock__url_parse).
 *
 * Any input: a result of 0 or a DLOCK_E* status, never a crash, a leak or a
 * read past the string; a parsed endpoint is complete and consistent.
 */
#include "fuzz.h"
#include "redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = fuzz_string(data, size);
  if (!url) return 0;
  dlock__endpoint ep;
  int rc = dlock__url_parse(url, &ep);
  if (rc == 0) {
    FUZZ_CHECK(memchr(ep.display, '\0', sizeof ep.display) != NULL);
    if (ep.is_unix) {
      FUZZ_CHECK(ep.path != NULL && ep.path[0] != '\0');
    } else {
      FUZZ_CHECK(ep.host != NULL);
      FUZZ_CHECK(ep.port >= 1 && ep.port <= 65535);
    }
    FUZZ_CHECK(ep.db >= 0);
    /* The display form never carries the password (unless the display's
     * own text happens to contain the same: "user:6380@h:6380", whose
     * password "6380" is in "h:6380", or "unix:///?password=nix:/", whose
     * password "nix:/" is in "unix:/"). 'bare' is every form the display
     * takes, built from the parsed fields. */
    const char *where = ep.is_unix ? ep.path : ep.host;
    char bare[2200];
    snprintf(bare, sizeof bare, "unix:%.1000s tls [%.500s]:%d tls %.500s:%d", where, where, ep.port, where, ep.port);
    if (ep.password && strlen(ep.password) >= 4 && !strstr(bare, ep.password) &&
        !(ep.username && strstr(ep.username, ep.password)) &&
        !(ep.tls_server_name && strstr(ep.tls_server_name, ep.password)))
      FUZZ_CHECK(strstr(ep.display, ep.password) == NULL);
  } else {
    FUZZ_CHECK(rc < 0);
  }
  dlock__endpoint_clear(&ep);
  free(url);
  return 0;
}
