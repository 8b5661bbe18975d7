/*
 * test_url_redlock.c - splitting redlock:// URLs into one redis:// URL per
 * node (no server): per-node credentials, the shared /db and query, the
 * errors, and a redaction that masks every node's password.
 */
#include "dlock.h"
#include "redis.h"
#include "test.h"

TEST(a_redlock_url_gives_one_redis_url_per_node_with_the_shared_db_and_query) {
  char **urls = NULL;
  int n = 0;
  ASSERT_OK(dlock__redlock_split("redlock://u:p%2Cw@h1:1,h2:2,[::1]:3/4?cacert=ca.pem", &urls, &n));
  ASSERT_EQ(n, 3);
  ASSERT_STR_EQ(urls[0], "redis://u:p%2Cw@h1:1/4?cacert=ca.pem");
  ASSERT_STR_EQ(urls[1], "redis://h2:2/4?cacert=ca.pem");
  ASSERT_STR_EQ(urls[2], "redis://[::1]:3/4?cacert=ca.pem");
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse(urls[0], &ep));
  ASSERT_STR_EQ(ep.password, "p,w");
  ASSERT_STR_EQ(ep.tls_ca_file, "ca.pem");
  ASSERT_EQ(ep.db, 4);
  dlock__endpoint_clear(&ep);
  dlock__redlock_urls_free(urls, n);
}

TEST(bad_redlock_lists_are_refused_without_the_password) {
  char **urls = NULL;
  int n = 0;
  ASSERT_STATUS(dlock__redlock_split("redlock://u:s3cret@h1:1,,h3:3", &urls, &n), DLOCK_EURL);
  ASSERT_CONTAINS(dlock_last_error(), "empty node");
  ASSERT(!strstr(dlock_last_error(), "s3cret"));
  ASSERT_STATUS(dlock__redlock_split("redlock://h1:1,h2:2,", &urls, &n), DLOCK_EURL);
  ASSERT_STATUS(dlock__redlock_split("redis://h1:1", &urls, &n), DLOCK_EURL);
  ASSERT(urls == NULL && n == 0);
}

TEST(redaction_masks_every_nodes_password_and_the_query_password) {
  char out[256];
  dlock_url_redact("redlock://a:pw1@h1:1,b:pw2@h2:2,h3:3/0?password=pw3&db=1", out, sizeof out);
  ASSERT_STR_EQ(out, "redlock://a:***@h1:1,b:***@h2:2,h3:3/0?password=***&db=1");
  dlock_url_redact("redlock://only-user@h1:1,h2:2,h3:3", out, sizeof out);
  ASSERT_STR_EQ(out, "redlock://only-user@h1:1,h2:2,h3:3");
  dlock_url_redact("redlock://a:pw1@h1:1,b:pw2@h2:2,h3:3", out, 20);
  ASSERT(!strstr(out, "pw"));
}

TEST_MAIN()
