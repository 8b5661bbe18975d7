/*
 * reader.c - the RESP2 reply reader: bytes in, dlock__reply trees out.
 *
 * No I/O: conn.c feeds it what the socket gave, and the fuzz target and unit
 * tests feed it byte buffers, through the same code. Every reply is bounded
 * (elements announced, bulk length, line length, nesting, total size), so a
 * hostile or broken server gets DLOCK_EPROTO at once instead of making us
 * allocate what it announces. hiredis 0.14's reader, used before, had no such
 * limits and passed a 64-bit element count to an int callback.
 *
 * Incremental: arrays being filled stay on a small stack, so each element is
 * parsed once however the bytes are split; only an incomplete bulk string or
 * line is looked at again when more bytes arrive.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_resp.h"

/* Nesting deeper than any reply dlock reads (hiredis 0.14 allowed 7). */
#define READER_MAX_DEPTH 8

typedef struct level {
  dlock__reply *array;
  size_t filled;
} level;

struct dlock__reader {
  char *buf;
  size_t len, pos, cap;
  level stack[READER_MAX_DEPTH];
  int depth;
  dlock__reply *root; /* the reply being built, when depth > 0 */
  size_t elements;    /* array elements announced so far in this reply */
  size_t bytes;       /* bytes of this reply consumed so far */
  size_t scanned;     /* bytes of the line at 'pos' known to hold no CR */
  dlock__reader_limits limits;
  int failed;
  char err[256];
};

void dlock__reader_default_limits(dlock__reader_limits *l) {
  l->max_elements = DLOCK__REPLY_MAX_ELEMENTS;
  l->max_bulk = DLOCK__REPLY_MAX_BULK;
  l->max_reply = DLOCK__REPLY_MAX_BYTES;
}

dlock__reader *dlock__reader_new(const dlock__reader_limits *limits) {
  dlock__reader *rd = calloc(1, sizeof *rd);
  if (!rd) return NULL;
  if (limits)
    rd->limits = *limits;
  else
    dlock__reader_default_limits(&rd->limits);
  return rd;
}

static void drop_partial(dlock__reader *rd) {
  dlock__reply_free(rd->root);
  rd->root = NULL;
  rd->depth = 0;
  rd->elements = 0;
  rd->bytes = 0;
}

void dlock__reader_free(dlock__reader *rd) {
  if (!rd) return;
  drop_partial(rd);
  free(rd->buf);
  free(rd);
}

static int fail(dlock__reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(dlock__reader *rd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rd->err, sizeof rd->err, fmt, ap);
  va_end(ap);
  rd->failed = 1;
  drop_partial(rd);
  return DLOCK_EPROTO;
}

const char *dlock__reader_error(const dlock__reader *rd) { return rd->err; }

size_t dlock__reader_pending(const dlock__reader *rd) { return rd->len - rd->pos; }

int dlock__reader_feed(dlock__reader *rd, const char *data, size_t n) {
  if (rd->failed) return DLOCK_EPROTO;
  if (n == 0) return 0;
  if (rd->pos > 0) {
    memmove(rd->buf, rd->buf + rd->pos, rd->len - rd->pos);
    rd->len -= rd->pos;
    rd->pos = 0;
  }
  /* Give back the room a large reply needed once it has been read. */
  if (rd->len == 0 && rd->cap > 65536) {
    free(rd->buf);
    rd->buf = NULL;
    rd->cap = 0;
  }
  /* Never buffer more than one reply may hold (plus one read's slack):
   * replies are consumed as they complete, so more means a bad reply. */
  if (n > rd->limits.max_reply + 65536 - rd->len)
    return fail(rd, "reply larger than the limit of %zu bytes", rd->limits.max_reply);
  if (rd->len + n > rd->cap) {
    size_t cap = rd->cap ? rd->cap : 16384;
    while (cap < rd->len + n) cap *= 2;
    char *grown = realloc(rd->buf, cap);
    if (!grown) return fail(rd, "out of memory buffering a reply");
    rd->buf = grown;
    rd->cap = cap;
  }
  memcpy(rd->buf + rd->len, data, n);
  rd->len += n;
  return 0;
}

/* The line at rd->pos (after its type byte): *line and *line_len, and the
 * position just past its CRLF. 0 when incomplete, <0 on error. */
static int take_line(dlock__reader *rd, const char **line, size_t *line_len, size_t *next) {
  const char *start = rd->buf + rd->pos + 1;
  size_t avail = rd->len - rd->pos - 1;
  size_t max = DLOCK__REPLY_MAX_LINE;
  size_t limit = avail < max + 1 ? avail : max + 1;
  /* Resume where the last look stopped: a line that trickles in byte by
   * byte is scanned once, not once per byte. */
  size_t from = rd->scanned < limit ? rd->scanned : limit;
  const char *cr = memchr(start + from, '\r', limit - from);
  if (!cr) {
    rd->scanned = limit;
    if (avail > max) {
      fail(rd, "reply line longer than the limit of %zu bytes", max);
      return -1;
    }
    return 0;
  }
  size_t at = (size_t)(cr - start);
  if (at + 1 >= avail) return 0; /* the '\n' has not arrived yet */
  if (cr[1] != '\n') {
    fail(rd, "reply line ends in CR without LF");
    return -1;
  }
  *line = start;
  *line_len = at;
  *next = rd->pos + 1 + at + 2;
  return 1;
}

/* A RESP integer: optional '-', 1 to 19 digits, no overflow. */
static int parse_ll(const char *s, size_t n, long long *out) {
  size_t i = 0;
  int neg = 0;
  if (n > 0 && s[0] == '-') {
    neg = 1;
    i = 1;
  }
  if (i == n || n - i > 19) return -1;
  unsigned long long v = 0;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (unsigned long long)(s[i] - '0');
  }
  if (neg ? v > (unsigned long long)LLONG_MAX + 1 : v > (unsigned long long)LLONG_MAX) return -1;
  *out = neg ? (long long)(0 - v) : (long long)v;
  return 0;
}

static dlock__reply *new_reply(dlock__reply_type type) {
  dlock__reply *r = calloc(1, sizeof *r);
  if (r) r->type = type;
  return r;
}

/* Place a new item: the root of the reply, or the next slot of the array
 * on top of the stack (so that freeing the root frees everything). */
static void place(dlock__reader *rd, dlock__reply *r) {
  if (rd->depth == 0)
    rd->root = r;
  else {
    level *top = &rd->stack[rd->depth - 1];
    top->array->element[top->filled] = r;
  }
}

/* An item is complete: count it in its array, and close every array that
 * this fills. 1 when the whole reply is complete. */
static int complete(dlock__reader *rd) {
  while (rd->depth > 0) {
    level *top = &rd->stack[rd->depth - 1];
    if (++top->filled < top->array->elements) return 0;
    rd->depth--;
  }
  return 1;
}

int dlock__reader_get(dlock__reader *rd, dlock__reply **out) {
  *out = NULL;
  if (rd->failed) return DLOCK_EPROTO;
  for (;;) {
    if (rd->pos >= rd->len) return 0;
    char type = rd->buf[rd->pos];
    if (!memchr("+-:$*", type, 5) || type == '\0')
      return fail(rd, "unexpected byte 0x%02x at the start of a reply item", (unsigned char)type);
    const char *line;
    size_t line_len, next;
    int rc = take_line(rd, &line, &line_len, &next);
    if (rc < 0) return DLOCK_EPROTO;
    if (rc == 0) return 0;
    dlock__reply *r = NULL;
    long long n = 0;
    switch (type) {
    case '+':
    case '-': {
      r = new_reply(type == '+' ? DLOCK__REPLY_STATUS : DLOCK__REPLY_ERROR);
      if (!r || !(r->str = malloc(line_len + 1))) {
        free(r);
        return fail(rd, "out of memory reading a reply");
      }
      memcpy(r->str, line, line_len);
      r->str[line_len] = '\0';
      r->len = line_len;
      break;
    }
    case ':':
      if (parse_ll(line, line_len, &n) != 0)
        return fail(rd, "bad integer in reply: \":%.*s\"", (int)(line_len > 40 ? 40 : line_len), line);
      if (!(r = new_reply(DLOCK__REPLY_INTEGER))) return fail(rd, "out of memory reading a reply");
      r->integer = n;
      break;
    case '$': {
      if (parse_ll(line, line_len, &n) != 0 || n < -1)
        return fail(rd, "bad bulk length in reply: \"$%.*s\"", (int)(line_len > 40 ? 40 : line_len), line);
      if (n == -1) {
        if (!(r = new_reply(DLOCK__REPLY_NIL))) return fail(rd, "out of memory reading a reply");
        break;
      }
      if ((unsigned long long)n > rd->limits.max_bulk)
        return fail(rd, "reply announces a bulk string of %lld bytes, more than the limit of %zu", n,
                    rd->limits.max_bulk);
      if (rd->bytes + (next - rd->pos) + (size_t)n + 2 > rd->limits.max_reply)
        return fail(rd, "reply larger than the limit of %zu bytes", rd->limits.max_reply);
      if (rd->len - next < (size_t)n + 2) return 0; /* wait for the rest */
      const char *body = rd->buf + next;
      if (body[n] != '\r' || body[n + 1] != '\n') return fail(rd, "bulk string of %lld bytes not followed by CRLF", n);
      r = new_reply(DLOCK__REPLY_STRING);
      if (!r || !(r->str = malloc((size_t)n + 1))) {
        free(r);
        return fail(rd, "out of memory reading a reply");
      }
      memcpy(r->str, body, (size_t)n);
      r->str[n] = '\0';
      r->len = (size_t)n;
      next += (size_t)n + 2;
      break;
    }
    case '*': {
      if (parse_ll(line, line_len, &n) != 0 || n < -1)
        return fail(rd, "bad array length in reply: \"*%.*s\"", (int)(line_len > 40 ? 40 : line_len), line);
      if (n == -1) {
        if (!(r = new_reply(DLOCK__REPLY_NIL))) return fail(rd, "out of memory reading a reply");
        break;
      }
      if ((unsigned long long)n > rd->limits.max_elements - rd->elements)
        return fail(rd, "reply announces %lld array elements, more than the limit of %zu", n + (long long)rd->elements,
                    rd->limits.max_elements);
      if (n > 0 && rd->depth == READER_MAX_DEPTH)
        return fail(rd, "reply nests arrays deeper than %d levels", READER_MAX_DEPTH);
      r = new_reply(DLOCK__REPLY_ARRAY);
      if (!r || (n > 0 && !(r->element = calloc((size_t)n, sizeof *r->element)))) {
        free(r);
        return fail(rd, "out of memory reading a reply");
      }
      r->elements = (size_t)n;
      rd->elements += (size_t)n;
      break;
    }
    default:
      return fail(rd, "unexpected byte 0x%02x at the start of a reply item", (unsigned char)type);
    }
    place(rd, r);
    rd->bytes += next - rd->pos;
    rd->pos = next;
    rd->scanned = 0;
    if (r->type == DLOCK__REPLY_ARRAY && r->elements > 0) {
      rd->stack[rd->depth++] = (level){r, 0};
      continue;
    }
    if (complete(rd)) {
      *out = rd->root;
      rd->root = NULL;
      rd->elements = 0;
      rd->bytes = 0;
      return 0;
    }
  }
}

int dlock__reply_parse(const char *buf, size_t len, const dlock__reader_limits *limits, dlock__reply **out,
                       size_t *used, char *err, size_t err_len) {
  *out = NULL;
  if (used) *used = 0;
  if (err && err_len) err[0] = '\0';
  dlock__reader *rd = dlock__reader_new(limits);
  if (!rd) {
    if (err && err_len) snprintf(err, err_len, "out of memory");
    return DLOCK_ENOMEM;
  }
  int rc = dlock__reader_feed(rd, buf, len);
  if (rc == 0) rc = dlock__reader_get(rd, out);
  if (rc != 0 && err && err_len) snprintf(err, err_len, "%s", rd->err);
  if (rc == 0 && used && *out) *used = len - dlock__reader_pending(rd);
  dlock__reader_free(rd);
  return rc;
}
