/*
 * test_url.c - URL parsing, name and duration checks, tokens and error
 * texts: the parts that need no server.
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "redis.h"
#include "test.h"

TEST(a_full_redis_url_is_parsed_into_its_parts) {
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse("redis://app:p%40ss@cache.example:6380/3", &ep));
  ASSERT_STR_EQ(ep.host, "cache.example");
  ASSERT_EQ(ep.port, 6380);
  ASSERT_EQ(ep.db, 3);
  ASSERT_STR_EQ(ep.username, "app");
  ASSERT_STR_EQ(ep.password, "p@ss");
  ASSERT_EQ(ep.tls, 0);
  ASSERT_STR_EQ(ep.display, "cache.example:6380");
  dlock__endpoint_clear(&ep);
}

TEST(defaults_and_a_lone_password_follow_redis_cli) {
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse("redis://secret@127.0.0.1", &ep));
  ASSERT_EQ(ep.port, 6379);
  ASSERT_EQ(ep.db, 0);
  ASSERT(ep.username == NULL);
  ASSERT_STR_EQ(ep.password, "secret");
  dlock__endpoint_clear(&ep);
}

TEST(tls_urls_carry_their_files_and_server_name) {
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse("rediss://[::1]:6390?cacert=/etc/ca.pem&cert=/c.pem&key=/k.pem&sni=redis.internal", &ep));
  ASSERT_EQ(ep.tls, 1);
  ASSERT_STR_EQ(ep.host, "::1");
  ASSERT_EQ(ep.port, 6390);
  ASSERT_STR_EQ(ep.tls_ca_file, "/etc/ca.pem");
  ASSERT_STR_EQ(ep.tls_cert_file, "/c.pem");
  ASSERT_STR_EQ(ep.tls_key_file, "/k.pem");
  ASSERT_STR_EQ(ep.tls_server_name, "redis.internal");
  ASSERT_STR_EQ(ep.display, "tls [::1]:6390");
  dlock__endpoint_clear(&ep);
}

TEST(unix_socket_urls_take_db_and_credentials_as_parameters) {
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse("unix:///run/redis/redis.sock?db=2&user=u&password=p", &ep));
  ASSERT_EQ(ep.is_unix, 1);
  ASSERT_STR_EQ(ep.path, "/run/redis/redis.sock");
  ASSERT_EQ(ep.db, 2);
  ASSERT_STR_EQ(ep.username, "u");
  ASSERT_STR_EQ(ep.password, "p");
  dlock__endpoint_clear(&ep);
}

TEST(malformed_urls_are_rejected_with_the_reason) {
  static const char *const bad[][2] = {
      {"http://x", "unknown scheme"},  {"redis://", "no host"},
      {"redis://h:0", "port"},         {"redis://h:70000", "port"},
      {"redis://h:6379x", "port"},     {"redis://h/x", "database"},
      {"unix://relative", "absolute"}, {"redis://h?x=1", "unknown parameter"},
      {"redis://%zz@h", "percent"},    {"redis://h h", "whitespace"},
      {"redis://[::1", "IPv6"},        {"redis://h?db", "no '='"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock__endpoint ep;
    int rc = dlock__url_parse(bad[i][0], &ep);
    if (rc != DLOCK_EURL) TEST_FAIL("'%s' gave %d", bad[i][0], rc);
    ASSERT_CONTAINS(dlock_last_error(), bad[i][1]);
    char shown[256]; /* the URL is quoted, its password masked ("redis://%zz@h") */
    dlock_url_redact(bad[i][0], shown, sizeof shown);
    ASSERT_CONTAINS(dlock_last_error(), shown);
  }
}

TEST(no_url_error_message_shows_the_password) {
  /* Malformed in every place a parser might stop, with the password "s3cret"
   * in the userinfo, alone, unencoded with '/', '?' or '@', or as a parameter. */
  static const char *const bad[] = {
      "redis://u:s3cret@host:99999",
      "redis://s3cret@host:x",
      "redis://u:pa/s3cret@host",
      "redis://u:pa?s3cret@host",
      "redis://u:p@s3cret@host:0",
      "redis://u:s3cret@host?bogus=1",
      "rediss://u:s3cret@[::1",
      "unix:///tmp/r.sock?password=s3cret&bogus=1",
      "unix://relative?password=s3cret",
      "http://u:s3cret@host",
      "redis://u:s3cret%zz@host",
      "s3cret",
      "unix:///s?password=pw&s3cret=1",
      "redis://h?password=pw&s3cret",
      /* Cluster URLs: every error of the seed list goes through the same mask. */
      "redis-cluster://u:s3cret@h1:7000,h2:0",
      "redis-cluster://u:s3cret@h1:7000,,h2:7001",
      "redis-cluster://u:s3cret@h1:7000,h1:7000",
      "redis-cluster://u:s3cret@h1:7000/2",
      "rediss-cluster://u:s3cret@h1:7000?bogus=1",
      "redis-cluster://u:s3cret@",
      "redis-cluster://u:pa/s3cret@h1:7000",
      "redis-cluster://h1:7000?password=s3cret&bogus=1",
      /* a mistyped parameter name: its value may be the password */
      "unix:///s?PASSWORD=s3cret&db=1",
      "redis://h?db=1&pass%77ord=s3cret&x=1",
      "redis://h?pass=s3cret",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock__endpoint ep;
    int rc = dlock__url_parse(bad[i], &ep);
    if (rc != DLOCK_EURL) TEST_FAIL("'%s' gave %d", bad[i], rc);
    if (strstr(dlock_last_error(), "s3cret") && strcmp(bad[i], "s3cret") != 0)
      TEST_FAIL("the message for '%s' shows the password: %s", bad[i], dlock_last_error());
  }
  /* A URL that is only a word has no userinfo: nothing to mask there. */
  static const char *const shown[][2] = {
      {"redis://app:p%40ss@cache:6380/3", "redis://app:***@cache:6380/3"},
      {"redis://secret@127.0.0.1", "redis://***@127.0.0.1"},
      {"redis://:secret@h", "redis://:***@h"},
      {"redis://u:a@b/c?d@h:1", "redis://u:***@h:1"},
      {"unix:///s?user=u&password=p&db=1", "unix:///s?user=u&password=***&db=1"},
      {"unix://u:pw@/s", "unix://u:***@/s"},
      {"unix:///s?cacert=/a@b", "unix:///s?cacert=/a@b"},
      {"rediss://u:x@h?password=y", "rediss://u:***@h?password=***"},
      {"redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2"},
      {"redis-cluster://u:pw@h1:7000,h2:7001", "redis-cluster://u:***@h1:7000,h2:7001"},
      {"unix:///s?db=1&PASSWORD=p&sni=h", "unix:///s?db=1&PASSWORD=***&sni=h"},
  };
  for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
    char buf[128];
    dlock_url_redact(shown[i][0], buf, sizeof buf);
    ASSERT_STR_EQ(buf, shown[i][1]);
  }
  char small[12];
  dlock_url_redact("redis://u:secret@host", small, sizeof small);
  ASSERT_STR_EQ(small, "redis://u:*");
}

TEST(names_with_braces_line_breaks_or_bad_sizes_are_refused) {
  char longname[DLOCK_MAX_NAME_LEN + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  ASSERT_STATUS(dlock__check_name("lock name", ""), DLOCK_ENAME);
  ASSERT_STATUS(dlock__check_name("lock name", NULL), DLOCK_ENAME);
  ASSERT_STATUS(dlock__check_name("lock name", longname), DLOCK_ENAME);
  ASSERT_CONTAINS(dlock_last_error(), "longer than 512");
  ASSERT_STATUS(dlock__check_name("lock name", "a{b"), DLOCK_ENAME);
  ASSERT_CONTAINS(dlock_last_error(), "'{'");
  ASSERT_STATUS(dlock__check_name("lock name", "a}b"), DLOCK_ENAME);
  ASSERT_STATUS(dlock__check_name("lock name", "a\nb"), DLOCK_ENAME);
  ASSERT_STATUS(dlock__check_name("lock name", "a\rb"), DLOCK_ENAME);
  ASSERT_OK(dlock__check_name("lock name", "orders:42 é"));
  longname[DLOCK_MAX_NAME_LEN] = '\0';
  ASSERT_OK(dlock__check_name("lock name", longname));
}

TEST(durations_out_of_range_are_refused) {
  ASSERT_STATUS(dlock__check_duration("lease_ms", -1, 1), DLOCK_ERANGE);
  ASSERT_STATUS(dlock__check_duration("lease_ms", 0, 0), DLOCK_ERANGE);
  ASSERT_STATUS(dlock__check_duration("lease_ms", DLOCK_MAX_DURATION_MS + 1, 1), DLOCK_ERANGE);
  ASSERT_STATUS(dlock__check_duration("lease_ms", INT64_MAX, 1), DLOCK_ERANGE);
  ASSERT_STATUS(dlock__check_duration("lease_ms", INT64_MIN, 1), DLOCK_ERANGE);
  ASSERT_OK(dlock__check_duration("lease_ms", 0, 1));
  ASSERT_OK(dlock__check_duration("lease_ms", DLOCK_MAX_DURATION_MS, 0));
}

TEST(tokens_are_128_bit_hex_and_do_not_repeat) {
  char a[DLOCK__TOKEN_HEX + 1], b[DLOCK__TOKEN_HEX + 1];
  ASSERT_OK(dlock__random_hex(a, DLOCK__TOKEN_HEX / 2));
  ASSERT_OK(dlock__random_hex(b, DLOCK__TOKEN_HEX / 2));
  ASSERT_EQ(strlen(a), 32);
  ASSERT_EQ(strspn(a, "0123456789abcdef"), 32);
  ASSERT(strcmp(a, b) != 0);
}

TEST(a_forked_child_never_hands_out_the_parents_next_tokens) {
  /* Tokens come from a pool of random bytes (token.c): a child that kept a
   * copy of it would draw the very token the parent draws next. */
  char parent[DLOCK__TOKEN_HEX + 1], child[DLOCK__TOKEN_HEX + 1] = "";
  ASSERT_OK(dlock__random_hex(parent, DLOCK__TOKEN_HEX / 2)); /* the pool is filled */
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    char t[DLOCK__TOKEN_HEX + 1];
    int ok = dlock__random_hex(t, DLOCK__TOKEN_HEX / 2) == 0 && write(fds[1], t, DLOCK__TOKEN_HEX) == DLOCK__TOKEN_HEX;
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], child, DLOCK__TOKEN_HEX);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(got, DLOCK__TOKEN_HEX);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_OK(dlock__random_hex(parent, DLOCK__TOKEN_HEX / 2));
  ASSERT(strcmp(parent, child) != 0);
}

TEST(every_status_has_its_own_name_and_text) {
  static const int codes[] = {
#define CODE(name, code, text) DLOCK_##name,
      DLOCK_ERRNO_MAP(CODE)
#undef CODE
  };
  size_t n = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < n; i++) {
    ASSERT(codes[i] < 0);
    ASSERT(strcmp(dlock_err_name(codes[i]), "UNKNOWN") != 0);
    ASSERT(strcmp(dlock_strerror(codes[i]), "unknown dlock status") != 0);
    for (size_t j = 0; j < i; j++) {
      ASSERT(codes[i] != codes[j]);
      ASSERT(strcmp(dlock_strerror(codes[i]), dlock_strerror(codes[j])) != 0);
    }
  }
  ASSERT_STR_EQ(dlock_err_name(-999), "UNKNOWN");
  ASSERT_STR_EQ(dlock_strerror(12345), "unknown dlock status");
  ASSERT_STR_EQ(dlock_err_name(DLOCK_EBUSY), "EBUSY");
  ASSERT_EQ(DLOCK_EBUSY, -1); /* codes are never renumbered */
  ASSERT_EQ(DLOCK_ECANCELED, -24);
}

TEST(the_lost_reasons_read_as_sentences) {
  for (int r = DLOCK_LOST_NONE; r <= DLOCK_LOST_DEADLINE; r++)
    ASSERT(strcmp(dlock_lost_reason_str((dlock_lost_reason)r), "unknown reason") != 0);
}

/* Issue 22 item 10: the texts every backend shows do not say Redis (a
 * PostgreSQL standby said "Redis is a read-only replica"), and a hold lost
 * because its server could not be reached names the backend its client
 * uses. */
TEST(texts_shared_by_every_backend_do_not_say_redis) {
  static const int shared[] = {DLOCK_EURL,   DLOCK_ECONNECT, DLOCK_EAUTH,   DLOCK_ETIMEDOUT, DLOCK_EIO,
                               DLOCK_EPROTO, DLOCK_ESERVER,  DLOCK_ENOPERM, DLOCK_EREADONLY};
  for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
    if (strstr(dlock_strerror(shared[i]), "Redis"))
      TEST_FAIL("%s: \"%s\" names Redis", dlock_err_name(shared[i]), dlock_strerror(shared[i]));
  for (int r = DLOCK_LOST_NONE; r <= DLOCK_LOST_DELETED; r++)
    if (r != DLOCK_LOST_FAILOVER && strstr(dlock_lost_reason_str((dlock_lost_reason)r), "Redis"))
      TEST_FAIL("lost reason %d: \"%s\" names Redis", r, dlock_lost_reason_str((dlock_lost_reason)r));
  static const struct {
    const char *url, *kind;
  } backends[] = {{"redis://127.0.0.1:1", "Redis"},
                  {"zk://127.0.0.1:1/ns", "ZooKeeper"},
                  {"postgres://127.0.0.1:1/db", "PostgreSQL"}};
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
    int rc = 0;
    dlock_client c;
    memset(&c, 0, sizeof c);
    c.ops = dlock__backend_for(backends[i].url, &rc);
    if (!c.ops) continue; /* not built in */
    const char *text = dlock__lost_reason_on(&c, DLOCK_LOST_UNREACHABLE);
    if (!strstr(text, backends[i].kind) || (strcmp(backends[i].kind, "Redis") && strstr(text, "Redis")))
      TEST_FAIL("%s: the unreachable reason \"%s\" does not name %s alone", backends[i].url, text, backends[i].kind);
  }
}

/* Issue 23 item 2: one registry of URL schemes answers for everyone; an
 * unknown scheme is said to be one, not parsed as a Redis URL. */
TEST(the_scheme_registry_names_the_backend_of_a_url) {
  static const char *const urls[][2] = {
      {"redis://h", "Redis"},
      {"rediss://h", "Redis"},
      {"unix:///tmp/r.sock", "Redis"},
      {"redis-sentinel://h/m", "Redis"},
      {"redis-cluster://h:1,h:2", "Redis"},
      {"redlock://a,b,c", "Redis"},
      {"zk://h:2181/ns", "ZooKeeper"},
      {"postgres://h/db", "PostgreSQL"},
      {"postgresql://h/db", "PostgreSQL"},
      {"host=h dbname=db", "PostgreSQL"},
  };
  for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
    const char *b = dlock_url_backend(urls[i][0]);
    if (!b || strcmp(b, urls[i][1])) TEST_FAIL("'%s' gave %s, want %s", urls[i][0], b ? b : "NULL", urls[i][1]);
  }
  ASSERT(dlock_url_backend(NULL) != NULL); /* $DLOCK_URL or the default */
  ASSERT(dlock_url_backend("http://u:s3cret@h") == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "unknown scheme");
  ASSERT_CONTAINS(dlock_last_error(), "zk://");
  ASSERT(!strstr(dlock_last_error(), "s3cret"));
  ASSERT(dlock_url_backend("localhost:6379") == NULL);
  dlock_client *c = (dlock_client *)1;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "http://h";
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EURL);
  ASSERT_CONTAINS(dlock_last_error(), "unknown scheme");
  ASSERT(!strstr(dlock_last_error(), "Redis"));
}

TEST_MAIN()
