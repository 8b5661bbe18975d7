/*
 * redis_resp.h - the Redis backend's protocol: RESP replies, the bounded reply reader
 * (reader.c) and the encoding of commands. No I/O, no topology: reader.c
 * includes only this.
 */
#ifndef DLOCK_REDIS_RESP_H
#define DLOCK_REDIS_RESP_H

#include <stddef.h>

#include "dlock.h"

/* ---- Replies (conn.c) ---- */

typedef enum dlock__reply_type {
  DLOCK__REPLY_STRING,
  DLOCK__REPLY_ARRAY,
  DLOCK__REPLY_INTEGER,
  DLOCK__REPLY_NIL,
  DLOCK__REPLY_STATUS,
  DLOCK__REPLY_ERROR
} dlock__reply_type;

typedef struct dlock__reply {
  dlock__reply_type type;
  long long integer;
  char *str; /* NUL-terminated; STRING, STATUS, ERROR */
  size_t len;
  size_t elements;
  struct dlock__reply **element;
} dlock__reply;

void dlock__reply_free(dlock__reply *r);

/* ---- Reply reader (reader.c) ---- */

/* Bounds on one reply. Real replies to dlock's commands are far smaller
 * (the largest are INFO and SCAN pages); a reply that announces more is
 * refused with DLOCK_EPROTO before anything is allocated for it. */
#define DLOCK__REPLY_MAX_ELEMENTS ((size_t)1 << 20) /* array elements, all levels */
#define DLOCK__REPLY_MAX_BULK ((size_t)64 << 20)    /* one bulk string */
#define DLOCK__REPLY_MAX_BYTES ((size_t)256 << 20)  /* the whole reply */
#define DLOCK__REPLY_MAX_LINE ((size_t)1 << 20)     /* status, error, length lines */

typedef struct dlock__reader_limits {
  size_t max_elements;
  size_t max_bulk;
  size_t max_reply;
} dlock__reader_limits;

typedef struct dlock__reader dlock__reader;

void dlock__reader_default_limits(dlock__reader_limits *l);
/* NULL limits: the defaults above. NULL when out of memory. */
dlock__reader *dlock__reader_new(const dlock__reader_limits *limits);
void dlock__reader_free(dlock__reader *rd);
/* Append bytes. DLOCK_EPROTO when they cannot be part of a bounded reply. */
int dlock__reader_feed(dlock__reader *rd, const char *data, size_t n);
/* 0 and *out = the next whole reply, or *out = NULL when more bytes are
 * needed; DLOCK_EPROTO (sticky) with dlock__reader_error() saying why. */
int dlock__reader_get(dlock__reader *rd, dlock__reply **out);
const char *dlock__reader_error(const dlock__reader *rd);
/* Bytes fed but not yet returned as replies. */
size_t dlock__reader_pending(const dlock__reader *rd);
/* One reply from a byte buffer, through the same reader (tests, fuzzing):
 * 0 with *out set (or NULL when 'buf' holds no whole reply) and *used the
 * bytes it took; DLOCK_EPROTO/DLOCK_ENOMEM with the reason in 'err'. */
int dlock__reply_parse(const char *buf, size_t len, const dlock__reader_limits *limits, dlock__reply **out,
                       size_t *used, char *err, size_t err_len);
/* Map an error reply to a DLOCK_E* status (WRONGTYPE, NOPERM, NOAUTH, ...). */
int dlock__reply_error_status(const dlock__reply *r);

/* ---- Commands (conn.c) ---- */

/* One command: argv with explicit lengths (binary safe). */
typedef struct dlock__cmd {
  int argc;
  const char **argv;
  const size_t *lens;
} dlock__cmd;

/* RESP encoding of 'cmd': at most dlock__resp_size() bytes, written by
 * dlock__resp_encode(), which returns how many it wrote. */
size_t dlock__resp_size(const dlock__cmd *cmd);
size_t dlock__resp_encode(char *out, const dlock__cmd *cmd);

#endif /* DLOCK_REDIS_RESP_H */
