/*
 * test_reply.c - the RESP reply reader (src/redis/reader.c), fed byte buffers.
 *
 * The same reader parses every reply read from a socket (conn.c); here it is
 * driven through dlock__reply_parse() and the incremental feed/get calls;
 * the command encoder (dlock__resp_encode) is checked byte for byte.
 * Hostile rows are the replies of issue 14 (a 2^31-element array, a 1 TB
 * bulk) and the malformed inputs a fuzzer would try first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "harness.h"
#include "redis.h"
#include "test.h"

/* A reply tree written back as compact text, for comparing. */
static void describe(const dlock__reply *r, char *out, size_t cap) {
  size_t n = strlen(out);
  if (n + 64 >= cap) return;
  switch (r->type) {
  case DLOCK__REPLY_STRING:
    snprintf(out + n, cap - n, "\"%s\"/%zu", r->str, r->len);
    break;
  case DLOCK__REPLY_STATUS:
    snprintf(out + n, cap - n, "+%s", r->str);
    break;
  case DLOCK__REPLY_ERROR:
    snprintf(out + n, cap - n, "-%s", r->str);
    break;
  case DLOCK__REPLY_INTEGER:
    snprintf(out + n, cap - n, ":%lld", r->integer);
    break;
  case DLOCK__REPLY_NIL:
    snprintf(out + n, cap - n, "nil");
    break;
  case DLOCK__REPLY_ARRAY:
    snprintf(out + n, cap - n, "[");
    for (size_t i = 0; i < r->elements; i++) {
      if (i) strncat(out, ",", cap - strlen(out) - 1);
      describe(r->element[i], out, cap);
    }
    strncat(out, "]", cap - strlen(out) - 1);
    break;
  }
}

static const struct {
  const char *in;
  size_t len; /* 0: strlen */
  const char *want;
} good[] = {
    {"+OK\r\n", 0, "+OK"},
    {"-ERR wrong\r\n", 0, "-ERR wrong"},
    {":42\r\n", 0, ":42"},
    {":-9223372036854775808\r\n", 0, ":-9223372036854775808"},
    {":9223372036854775807\r\n", 0, ":9223372036854775807"},
    {"$3\r\nabc\r\n", 0, "\"abc\"/3"},
    {"$0\r\n\r\n", 0, "\"\"/0"},
    {"$-1\r\n", 0, "nil"},
    {"*-1\r\n", 0, "nil"},
    {"*0\r\n", 0, "[]"},
    {"*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n+x\r\n", 0, "[\"a\"/1,[:1,nil],+x]"},
    /* Binary safe: CR, LF and NUL inside a bulk string. */
    {"$4\r\n\r\n\0z\r\n", 10, "\"\r\n\"/4"},
    /* Eight levels of nesting (what hiredis 0.14 allowed, plus one). */
    {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:7\r\n", 0, "[[[[[[[[:7]]]]]]]]"},
};

TEST(well_formed_replies_parse) {
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    size_t len = good[i].len ? good[i].len : strlen(good[i].in);
    dlock__reply *r = NULL;
    size_t used = 0;
    char err[256];
    int rc = dlock__reply_parse(good[i].in, len, NULL, &r, &used, err, sizeof err);
    if (rc != 0) TEST_FAIL("row %zu: rc %d: %s", i, rc, err);
    if (!r) TEST_FAIL("row %zu: no reply", i);
    char got[512] = "";
    describe(r, got, sizeof got);
    dlock__reply_free(r);
    ASSERT_STR_EQ(got, good[i].want);
    ASSERT_EQ(used, len);
  }
}

TEST(a_reply_split_anywhere_parses_the_same) {
  const char *in = "*3\r\n$5\r\nhello\r\n*2\r\n:-12\r\n$-1\r\n-ERR no\r\n+PONG\r\n";
  size_t len = strlen(in);
  for (size_t step = 1; step <= len; step++) {
    dlock__reader *rd = dlock__reader_new(NULL);
    ASSERT(rd != NULL);
    char got[512] = "";
    int replies = 0;
    for (size_t at = 0; at < len; at += step) {
      size_t n = len - at < step ? len - at : step;
      ASSERT_EQ(dlock__reader_feed(rd, in + at, n), 0);
      dlock__reply *r;
      for (;;) {
        ASSERT_EQ(dlock__reader_get(rd, &r), 0);
        if (!r) break;
        describe(r, got, sizeof got);
        dlock__reply_free(r);
        replies++;
      }
    }
    ASSERT_EQ(dlock__reader_pending(rd), 0);
    dlock__reader_free(rd);
    ASSERT_EQ(replies, 2);
    ASSERT_STR_EQ(got, "[\"hello\"/5,[:-12,nil],-ERR no]+PONG");
  }
}

TEST(an_incomplete_reply_waits_for_more) {
  static const char *const partial[] = {"", "+OK", "+OK\r", "$5\r\nab", "*2\r\n:1\r\n", "$999\r\n"};
  for (size_t i = 0; i < sizeof(partial) / sizeof(partial[0]); i++) {
    dlock__reply *r = (dlock__reply *)&r;
    char err[256];
    ASSERT_EQ(dlock__reply_parse(partial[i], strlen(partial[i]), NULL, &r, NULL, err, sizeof err), 0);
    ASSERT(r == NULL);
  }
}

static const struct {
  const char *in;
  const char *message;
} bad[] = {
    /* Issue 14: announced sizes are checked before anything is allocated. */
    {"*2147483647\r\n", "reply announces 2147483647 array elements, more than the limit of 1048576"},
    {"*2147483648\r\n:1\r\n", "reply announces 2147483648 array elements"},
    {"*4294967297\r\n:1\r\n", "reply announces 4294967297 array elements"},
    {"$999999999999\r\n", "reply announces a bulk string of 999999999999 bytes, more than the limit of 67108864"},
    {"$67108865\r\n", "more than the limit of 67108864"},
    /* Malformed. */
    {"*-2\r\n", "bad array length in reply: \"*-2\""},
    {"$-2\r\n", "bad bulk length in reply: \"$-2\""},
    {"*x\r\n", "bad array length"},
    {"$\r\n", "bad bulk length"},
    {"$1 \r\n", "bad bulk length"},
    {":12a\r\n", "bad integer in reply: \":12a\""},
    {":\r\n", "bad integer"},
    {":9223372036854775808\r\n", "bad integer"},
    {":-9223372036854775809\r\n", "bad integer"},
    {":99999999999999999999\r\n", "bad integer"},
    {"?x\r\n", "unexpected byte 0x3f at the start of a reply item"},
    {"\r\n", "unexpected byte 0x0d"},
    {"+OK\rX\n", "reply line ends in CR without LF"},
    {"$3\r\nabcX\r\n", "bulk string of 3 bytes not followed by CRLF"},
    {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:9\r\n", "reply nests arrays deeper than 8 levels"},
    {"*2\r\n:1\r\n!\r\n", "unexpected byte 0x21"},
};

TEST(hostile_and_malformed_replies_are_protocol_errors) {
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    dlock__reply *r = (dlock__reply *)&r;
    char err[256] = "";
    int rc = dlock__reply_parse(bad[i].in, strlen(bad[i].in), NULL, &r, NULL, err, sizeof err);
    if (rc != DLOCK_EPROTO) {
      dlock__reply_free(rc == 0 ? r : NULL);
      TEST_FAIL("row %zu (%.20s): rc %d, want DLOCK_EPROTO", i, bad[i].in, rc);
    }
    ASSERT(r == NULL);
    ASSERT_CONTAINS(err, bad[i].message);
  }
}

TEST(a_line_without_end_is_refused_at_the_line_limit) {
  size_t n = DLOCK__REPLY_MAX_LINE + 2;
  char *line = malloc(n);
  ASSERT(line != NULL);
  line[0] = '+';
  memset(line + 1, 'a', n - 1);
  dlock__reply *r;
  char err[256] = "";
  int rc = dlock__reply_parse(line, n, NULL, &r, NULL, err, sizeof err);
  free(line);
  ASSERT_EQ(rc, DLOCK_EPROTO);
  ASSERT_CONTAINS(err, "reply line longer than the limit of 1048576 bytes");
}

/* A hostile server can send a long line one byte per packet: each byte must
 * not rescan the whole line (1 MB would take about 8 s if it did). */
TEST(a_line_that_trickles_in_is_scanned_once) {
  size_t n = 1000 * 1000;
  dlock__reader *rd = dlock__reader_new(NULL);
  ASSERT(rd != NULL);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  int rc = 0;
  dlock__reply *r = NULL;
  for (size_t i = 0; i < n + 3 && rc == 0 && !r; i++) {
    char ch = i == 0 ? '+' : i == n + 1 ? '\r' : i == n + 2 ? '\n' : 'a';
    rc = dlock__reader_feed(rd, &ch, 1);
    if (rc == 0) rc = dlock__reader_get(rd, &r);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
  size_t len = r ? r->len : 0;
  dlock__reply_free(r);
  dlock__reader_free(rd);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(len, n);
  if (secs > 3.0 * th_time_factor()) TEST_FAIL("took %.2f s", secs);
}

TEST(limits_can_be_set_per_reader) {
  dlock__reader_limits l = {.max_elements = 10, .max_bulk = 4, .max_reply = 64};
  dlock__reply *r;
  char err[256] = "";
  ASSERT_EQ(dlock__reply_parse("*5\r\n*5\r\n", 8, &l, &r, NULL, err, sizeof err), 0);
  ASSERT(r == NULL); /* 10 elements are allowed; it waits for them */
  ASSERT_EQ(dlock__reply_parse("*5\r\n*6\r\n", 8, &l, &r, NULL, err, sizeof err), DLOCK_EPROTO);
  ASSERT_CONTAINS(err, "reply announces 11 array elements, more than the limit of 10");
  ASSERT_EQ(dlock__reply_parse("$4\r\nabcd\r\n", 10, &l, &r, NULL, err, sizeof err), 0);
  ASSERT(r != NULL);
  dlock__reply_free(r);
  ASSERT_EQ(dlock__reply_parse("$5\r\nabcde\r\n", 11, &l, &r, NULL, err, sizeof err), DLOCK_EPROTO);
  ASSERT_CONTAINS(err, "bulk string of 5 bytes, more than the limit of 4");
  /* 8 bulks of 4 bytes: 10 bytes each on the wire, over 64 in all. */
  const char *many = "*8\r\n$4\r\naaaa\r\n$4\r\naaaa\r\n$4\r\naaaa\r\n$4\r\naaaa\r\n$4\r\naaaa\r\n"
                     "$4\r\naaaa\r\n$4\r\naaaa\r\n$4\r\naaaa\r\n";
  ASSERT_EQ(dlock__reply_parse(many, strlen(many), &l, &r, NULL, err, sizeof err), DLOCK_EPROTO);
  ASSERT_CONTAINS(err, "reply larger than the limit of 64 bytes");
}

TEST(a_failed_reader_stays_failed) {
  dlock__reader *rd = dlock__reader_new(NULL);
  ASSERT(rd != NULL);
  dlock__reply *r;
  ASSERT_EQ(dlock__reader_feed(rd, "*2\r\n:1\r\n$-5\r\n+OK\r\n", 19), 0);
  int rc1 = dlock__reader_get(rd, &r);
  int rc2 = dlock__reader_feed(rd, "+OK\r\n", 5);
  int rc3 = dlock__reader_get(rd, &r);
  char msg[256];
  snprintf(msg, sizeof msg, "%s", dlock__reader_error(rd));
  dlock__reader_free(rd);
  ASSERT_EQ(rc1, DLOCK_EPROTO);
  ASSERT_EQ(rc2, DLOCK_EPROTO);
  ASSERT_EQ(rc3, DLOCK_EPROTO);
  ASSERT(r == NULL);
  ASSERT_CONTAINS(msg, "bad bulk length in reply: \"$-5\"");
}

TEST(commands_are_encoded_in_resp_byte_for_byte) {
  /* An empty argument, one with CR LF and NUL inside, and one of ten bytes. */
  const char *argv[] = {"EVALSHA", "", "a\r\nb\0c", "0123456789"};
  size_t lens[] = {7, 0, 6, 10};
  dlock__cmd cmd = {4, argv, lens};
  static const char want[] = "*4\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$6\r\na\r\nb\0c\r\n$10\r\n0123456789\r\n";
  char out[256];
  ASSERT(dlock__resp_size(&cmd) <= sizeof out);
  size_t n = dlock__resp_encode(out, &cmd);
  ASSERT_EQ(n, sizeof want - 1);
  ASSERT(dlock__resp_size(&cmd) >= n);
  ASSERT(memcmp(out, want, n) == 0);
}

TEST_MAIN()
