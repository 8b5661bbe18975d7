/*
 * token.c - unguessable owner tokens and ids from the OS (getrandom(2)).
 * Never derived from time, pid or thread id: a token proves ownership.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"

int dlock__random_hex(char *out, size_t nbytes) {
  static const char hex[] = "0123456789abcdef";
  unsigned char buf[64];
  if (nbytes > sizeof buf) return dlock__error(DLOCK_EINVAL, "token too long");
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = getrandom(buf + got, nbytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return dlock__error(DLOCK_ESYS, "getrandom failed: %s", strerror(errno));
    }
    got += (size_t)n;
  }
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hex[buf[i] >> 4];
    out[2 * i + 1] = hex[buf[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return 0;
}
