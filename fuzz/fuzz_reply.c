/*
 * fuzz_reply.c - the RESP reply reader (src/redis/reader.c), the code conn.c runs
 * on every byte a server sends.
 *
 * Byte 0 picks default or small limits and where to split the input; the
 * rest is fed once whole, once in two parts and (when short) byte by byte. All
 * three readings must give the same replies and the same verdict, and a
 * reply must respect the limits it was read under.
 */
#include "fuzz.h"
#include "redis.h"

/* Replies as text, to compare the readings; returns the final status. */
static int read_all(const char *buf, size_t len, size_t chunk, const dlock__reader_limits *l, char *out, size_t cap) {
  dlock__reader *rd = dlock__reader_new(l);
  if (!rd) return DLOCK_ENOMEM;
  int rc = 0;
  out[0] = '\0';
  for (size_t at = 0; at < len && rc == 0; at += chunk) {
    size_t n = len - at < chunk ? len - at : chunk;
    rc = dlock__reader_feed(rd, buf + at, n);
    while (rc == 0) {
      dlock__reply *r = NULL;
      rc = dlock__reader_get(rd, &r);
      if (rc != 0 || !r) break;
      /* Only the shape and sizes: enough to tell readings apart. */
      size_t o = strlen(out);
      if (o + 48 < cap) snprintf(out + o, cap - o, "%d/%zu/%zu/%lld;", (int)r->type, r->len, r->elements, r->integer);
      FUZZ_CHECK(r->type != DLOCK__REPLY_STRING || r->len <= l->max_bulk);
      FUZZ_CHECK(r->elements <= l->max_elements);
      dlock__reply_free(r);
    }
  }
  if (rc != 0) FUZZ_CHECK(dlock__reader_error(rd)[0] != '\0');
  dlock__reader_free(rd);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  dlock__reader_limits l;
  dlock__reader_default_limits(&l);
  if (data[0] & 1) l = (dlock__reader_limits){.max_elements = 16, .max_bulk = 64, .max_reply = 512};
  const char *buf = (const char *)data + 1;
  size_t len = size - 1;

  static char whole[8192], split[8192], bytes[8192];
  int rc1 = read_all(buf, len, len ? len : 1, &l, whole, sizeof whole);
  size_t cut = len ? (size_t)(data[0] >> 1) % len + 1 : 1;
  int rc2 = read_all(buf, len, cut, &l, split, sizeof split);
  FUZZ_CHECK(rc1 == rc2);
  FUZZ_CHECK(strcmp(whole, split) == 0);
  if (len <= 512) { /* byte by byte is quadratic in a long line */
    int rc3 = read_all(buf, len, 1, &l, bytes, sizeof bytes);
    FUZZ_CHECK(rc1 == rc3);
    FUZZ_CHECK(strcmp(whole, bytes) == 0);
  }

  /* The one-shot entry point agrees with the first reply of the reader. */
  dlock__reply *r = NULL;
  size_t used = 0;
  char err[256];
  int rc = dlock__reply_parse(buf, len, &l, &r, &used, err, sizeof err);
  if (rc == 0 && r) FUZZ_CHECK(used > 0 && used <= len);
  if (rc != 0) FUZZ_CHECK(r == NULL && err[0] != '\0');
  dlock__reply_free(r);
  return 0;
}
