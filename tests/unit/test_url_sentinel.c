/*
 * test_url_sentinel.c - parsing redis-sentinel:// URLs (no server): the
 * sentinel list, the service, the master's credentials and WAIT options,
 * and the errors, none of which may print a password.
 */
#include "dlock.h"
#include "redis.h"
#include "test.h"

TEST(a_sentinel_url_lists_the_sentinels_the_service_and_the_master_options) {
  dlock__sentinel_url u;
  ASSERT_OK(dlock__url_parse_sentinel(
      "redis-sentinel://su:s%40p@s1.example,s2.example:26380,[::1]:26381/my%20svc?db=3&master_user=mu"
      "&master_password=m%26p&wait_replicas=2&wait_timeout=150ms",
      &u));
  ASSERT_EQ(u.nsentinels, 3);
  ASSERT_STR_EQ(u.sentinel[0].host, "s1.example");
  ASSERT_EQ(u.sentinel[0].port, 26379);
  ASSERT_STR_EQ(u.sentinel[1].display, "s2.example:26380");
  ASSERT_STR_EQ(u.sentinel[2].host, "::1");
  ASSERT_STR_EQ(u.sentinel[2].display, "[::1]:26381");
  for (int i = 0; i < 3; i++) {
    ASSERT_STR_EQ(u.sentinel[i].username, "su");
    ASSERT_STR_EQ(u.sentinel[i].password, "s@p");
    ASSERT_EQ(u.sentinel[i].db, 0);
  }
  ASSERT_STR_EQ(u.service, "my svc");
  ASSERT_EQ(u.master.db, 3);
  ASSERT_STR_EQ(u.master.username, "mu");
  ASSERT_STR_EQ(u.master.password, "m&p");
  ASSERT_EQ(u.wait_replicas, 2);
  ASSERT_EQ(u.wait_timeout_ms, 150);
  ASSERT(strstr(u.shown, "s%40p") == NULL && strstr(u.shown, "m%26p") == NULL);
  ASSERT_CONTAINS(u.shown, "su:****@s1.example");
  ASSERT_CONTAINS(u.shown, "master_password=****&wait_replicas=2");
  dlock__sentinel_url_clear(&u);
}

TEST(a_sentinel_url_without_credentials_leaves_them_unset) {
  dlock__sentinel_url u;
  ASSERT_OK(dlock__url_parse_sentinel("redis-sentinel://127.0.0.1/svc", &u));
  ASSERT_EQ(u.nsentinels, 1);
  ASSERT(u.sentinel[0].username == NULL && u.sentinel[0].password == NULL);
  ASSERT(u.master.username == NULL && u.master.password == NULL);
  ASSERT_EQ(u.wait_replicas, 0);
  dlock__sentinel_url_clear(&u);
  ASSERT(dlock__url_is_sentinel("redis-sentinel://x/y"));
  ASSERT(!dlock__url_is_sentinel("redis://x"));
}

TEST(bad_sentinel_urls_say_what_is_wrong_without_the_password) {
  static const struct {
    const char *url, *says;
  } bad[] = {
      {"redis-sentinel://", "empty sentinel address"},
      {"redis-sentinel://:pw@/svc", "empty sentinel address"},
      {"redis-sentinel://h1,,h2/svc", "empty sentinel address"},
      {"redis-sentinel://h1:0/svc", "port must be"},
      {"redis-sentinel://h1", "no service name"},
      {"redis-sentinel://:pw@h1/", "no service name"},
      {"redis-sentinel://h1:26379,h1/svc", "sentinel h1:26379 is listed twice"},
      {"redis-sentinel://[::1/svc", "IPv6"},
      {"redis-sentinel://h!/svc", "bad character"},
      {"redis-sentinel://h/svc?master_password=pw&x=1", "unknown parameter 'x'"},
      /* a mistyped parameter name: its value may be the password */
      {"redis-sentinel://h/svc?MASTER_PASSWORD=pw", "unknown parameter"},
      {"redis-sentinel://h/svc?db=1&master%5Fpassword=pw", "unknown parameter"},
      {"redis-sentinel://h/svc?xmaster_password=a&master_password=pw", "unknown parameter 'xmaster_password'"},
      {"redis-sentinel://h/svc?wait_replicas=101", "wait_replicas must be"},
      {"redis-sentinel://h/svc?wait_timeout=abc", "wait_timeout must be"},
      {"redis-sentinel://h/svc?db", "has no '='"},
      {"redis-sentinel://h/s%zz", "percent-encoding"},
      {"redis-sentinel://h/s vc", "whitespace"},
      {"redis-sentinel://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,h17/svc", "more than 16"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock__sentinel_url u;
    int rc = dlock__url_parse_sentinel(bad[i].url, &u);
    if (rc != DLOCK_EURL) TEST_FAIL("%s: got %d, want EURL", bad[i].url, rc);
    ASSERT_CONTAINS(dlock_last_error(), bad[i].says);
    if (strstr(dlock_last_error(), "pw")) TEST_FAIL("password printed: %s", dlock_last_error());
    ASSERT_EQ(u.nsentinels, 0); /* cleared */
  }
}

TEST(the_failover_loss_reason_reads_as_a_sentence) {
  ASSERT_EQ(DLOCK_LOST_FAILOVER, 6);
  ASSERT_CONTAINS(dlock_lost_reason_str(DLOCK_LOST_FAILOVER), "failover");
  ASSERT_EQ(DLOCK_ETOPOLOGY, -29);
  ASSERT_EQ(DLOCK_EREPLICAS, -30);
}

TEST_MAIN()
