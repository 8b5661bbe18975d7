/*
 * fuzz_serve_req.c - the request parser of "dlock serve" (cli/serve_req.c):
 * routes, lock names and the JSON bodies of acquire, release and extend.
 *
 * The first byte picks what the rest is: a path (routed as GET and as
 * POST), an acquire body, or a release or extend body. Any input: an
 * answer, never a crash, a leak or a read past the buffer; what is taken
 * holds to the documented bounds.
 */
#include "fuzz.h"
#include "dlock.h"
#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  int mode = data[0] % 4;
  /* The body is not NUL-terminated for the parser: a copy of exactly its
   * bytes, so that ASan sees a read past its end. */
  size_t n = size - 1;
  char *body = malloc(n ? n : 1);
  if (!body) return 0;
  memcpy(body, data + 1, n);
  char err[600];
  err[0] = '\0';
  if (mode == 0) {
    char *path = fuzz_string(data + 1, n);
    if (path) {
      static const char *const methods[] = {"GET", "POST", "DELETE"};
      for (int i = 0; i < 3; i++) {
        serve_route r;
        serve_route_parse(methods[i], path, n, &r, err, sizeof err);
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
        if (r.kind >= SERVE_LOCK_STATUS) {
          size_t len = strlen(r.name);
          FUZZ_CHECK(serve_name_check(r.name, len, err, sizeof err) == 0);
          FUZZ_CHECK(len >= 1 && len <= DLOCK_MAX_NAME_LEN);
        }
        FUZZ_CHECK(!r.mutating || i == 1);
      }
      free(path);
    }
  } else if (mode == 1) {
    serve_acquire_req q;
    if (serve_parse_acquire(body, n, &q, err, sizeof err) == 0) {
      FUZZ_CHECK(q.kind >= SERVE_KIND_MUTEX && q.kind <= SERVE_KIND_WRITE);
      FUZZ_CHECK((q.kind == SERVE_KIND_SEMAPHORE) == (q.permits > 0));
      FUZZ_CHECK(q.permits >= 0 && q.permits <= DLOCK_SEMAPHORE_MAX_PERMITS);
      FUZZ_CHECK(q.wait_ms >= -1 && q.wait_ms <= DLOCK_MAX_DURATION_MS);
      FUZZ_CHECK(q.lease_ms >= 0 && q.lease_ms <= DLOCK_MAX_DURATION_MS);
      FUZZ_CHECK(q.ttl_ms >= 0 && q.ttl_ms <= DLOCK_MAX_DURATION_MS);
      FUZZ_CHECK(!q.has_owner || strlen(q.owner) <= 1024);
    } else {
      FUZZ_CHECK(err[0] != '\0');
    }
  } else {
    serve_holder_req q;
    int want_lease = mode == 3;
    if (serve_parse_holder(body, n, want_lease, &q, err, sizeof err) == 0) {
      FUZZ_CHECK(strlen(q.holder) == 32);
      FUZZ_CHECK(!want_lease || (q.lease_ms >= 100 && q.lease_ms <= DLOCK_MAX_DURATION_MS));
    } else {
      FUZZ_CHECK(err[0] != '\0');
    }
  }
  free(body);
  return 0;
}
