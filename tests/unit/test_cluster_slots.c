/*
 * test_cluster_slots.c - the Redis Cluster router's pure parts: CRC16 key
 * slots with hash tags, MOVED/ASK parsing, CLUSTER SLOTS parsing, and the
 * redis-cluster:// URL. Expected values come from the Redis Cluster
 * specification and `CLUSTER KEYSLOT` on a real server, not from our code.
 */
#include <stdio.h>
#include <stdlib.h>

#include "dlock.h"
#include "redis.h"
#include "test.h"

static int slot(const char *key) { return dlock__cluster_slot(key, strlen(key)); }

TEST(crc16_matches_the_cluster_spec_reference_vector) {
  /* The spec's reference: CRC16 of "123456789" is 0x31C3. */
  ASSERT_EQ(dlock__crc16("123456789", 9), 0x31C3u);
}

TEST(key_slots_match_cluster_keyslot) {
  ASSERT_EQ(slot("foo"), 12182);
  ASSERT_EQ(slot("bar"), 5061);
  ASSERT_EQ(slot("hello"), 866);
  ASSERT_EQ(slot(""), 0);
}

TEST(every_slot_has_a_record_tag_of_its_own) {
  /* The guard's floor is kept per slot in "<prefix>{<tag>}:dlock-epoch"
   * (scripts.c): the tag must exist for every slot, be the smallest, and
   * hash to it. */
  uint32_t most = 0;
  for (int s = 0; s < 16384; s++) {
    uint32_t tag = 0;
    ASSERT_EQ(dlock__epoch_slot_tag(s, &tag), 0);
    char key[64];
    snprintf(key, sizeof key, "app:{%u}:dlock-epoch", tag);
    ASSERT_EQ(slot(key), s);
    if (tag > most) most = tag;
  }
  ASSERT(most < 110000);
  uint32_t t = 0;
  ASSERT_EQ(dlock__epoch_slot_tag(slot("foo"), &t), 0);
  for (uint32_t n = 0; n < t; n++) {
    char buf[16];
    snprintf(buf, sizeof buf, "%u", n);
    ASSERT(slot(buf) != slot("foo")); /* the smallest */
  }
}

TEST(a_hash_tag_puts_keys_in_one_slot) {
  ASSERT_EQ(slot("{user1000}.following"), slot("{user1000}.followers"));
  ASSERT_EQ(slot("{user1000}.following"), slot("user1000"));
  ASSERT_EQ(slot("{user1000}.following"), 3443);
  ASSERT_EQ(slot("123456789"), 12739);
  /* Only the first {...} counts. */
  ASSERT_EQ(slot("foo{bar}{zap}"), slot("bar"));
  ASSERT_EQ(slot("foo{{bar}}zap"), slot("{bar"));
  /* Empty tag or no closing brace: the whole key is hashed. */
  ASSERT_EQ(slot("foo{}{bar}"), (int)(dlock__crc16("foo{}{bar}", 10) & 16383));
  ASSERT_EQ(slot("foo{}{bar}"), 8363);
  ASSERT(slot("foo{}{bar}") != slot("bar"));
  ASSERT_EQ(slot("foo{{bar}}zap"), 4015);
  ASSERT_EQ(slot("{}"), (int)(dlock__crc16("{}", 2) & 16383));
  ASSERT_EQ(slot("foo{bar"), (int)(dlock__crc16("foo{bar", 7) & 16383));
}

TEST(every_key_of_a_lock_shares_the_slot_of_its_name) {
  const char *keys[] = {"app:orders:42",
                        "{app:orders:42}:meta",
                        "{app:orders:42}:fence",
                        "{app:orders:42}:queue",
                        "{app:orders:42}:waiters",
                        "{app:orders:42}:guard",
                        "{app:orders:42}:w:0123456789abcdef"};
  for (size_t i = 1; i < sizeof keys / sizeof keys[0]; i++) ASSERT_EQ(slot(keys[i]), slot(keys[0]));
}

TEST(moved_and_ask_replies_are_parsed) {
  int ask = -1, s = -1;
  dlock__hostport to;
  ASSERT_EQ(dlock__cluster_parse_redirect("MOVED 3999 127.0.0.1:6381", "10.0.0.1", &ask, &s, &to), 0);
  ASSERT_EQ(ask, 0);
  ASSERT_EQ(s, 3999);
  ASSERT_STR_EQ(to.host, "127.0.0.1");
  ASSERT_EQ(to.port, 6381);
  ASSERT_EQ(dlock__cluster_parse_redirect("ASK 16383 ::1:7002", NULL, &ask, &s, &to), 0);
  ASSERT_EQ(ask, 1);
  ASSERT_EQ(s, 16383);
  ASSERT_STR_EQ(to.host, "::1");
  ASSERT_EQ(to.port, 7002);
  /* An unknown endpoint (empty host) means the node that answered. */
  ASSERT_EQ(dlock__cluster_parse_redirect("MOVED 1 :7005", "10.0.0.1", &ask, &s, &to), 0);
  ASSERT_STR_EQ(to.host, "10.0.0.1");
  ASSERT_EQ(to.port, 7005);
}

TEST(malformed_redirects_are_not_followed) {
  static const char *const bad[] = {"MOVED",
                                    "MOVED 3999",
                                    "MOVED x 1.2.3.4:5",
                                    "MOVED 16384 h:1",
                                    "MOVED -1 h:1",
                                    "MOVED 1 h",
                                    "MOVED 1 h:",
                                    "MOVED 1 h:0",
                                    "MOVED 1 h:70000",
                                    "MOVED 1 h:12a",
                                    "ASK 1",
                                    "ERR MOVED 1 h:1",
                                    "TRYAGAIN Multiple keys request during rehashing of slot",
                                    "MOVED 1 :7005"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int ask, s;
    dlock__hostport to;
    if (dlock__cluster_parse_redirect(bad[i], NULL, &ask, &s, &to) == 0) TEST_FAIL("accepted '%s'", bad[i]);
  }
}

/* ---- Building replies by hand ---- */

static dlock__reply *r_int(long long v) {
  dlock__reply *r = calloc(1, sizeof *r);
  r->type = DLOCK__REPLY_INTEGER;
  r->integer = v;
  return r;
}

static dlock__reply *r_str(const char *s) {
  dlock__reply *r = calloc(1, sizeof *r);
  r->type = DLOCK__REPLY_STRING;
  r->str = strdup(s);
  r->len = strlen(s);
  return r;
}

static dlock__reply *r_arr(size_t n, ...) {
  dlock__reply *r = calloc(1, sizeof *r);
  r->type = DLOCK__REPLY_ARRAY;
  r->elements = n;
  r->element = calloc(n ? n : 1, sizeof *r->element);
  va_list ap;
  va_start(ap, n);
  for (size_t i = 0; i < n; i++) r->element[i] = va_arg(ap, dlock__reply *);
  va_end(ap);
  return r;
}

static dlock__reply *r_node(const char *host, int port, const char *id) {
  return r_arr(3, r_str(host), r_int(port), r_str(id));
}

TEST(a_cluster_slots_reply_becomes_ranges_with_masters_and_replicas) {
  /* As Redis 7 answers for 3 masters, the first with a replica and an
   * unknown endpoint ("?" / "") for the node that answered. */
  dlock__reply *r =
      r_arr(3, r_arr(4, r_int(0), r_int(5460), r_node("127.0.0.1", 30001, "a"), r_node("127.0.0.1", 30004, "d")),
            r_arr(3, r_int(5461), r_int(10922), r_node("", 30002, "b")),
            r_arr(3, r_int(10923), r_int(16383), r_node("?", 30003, "c")));
  dlock__slot_range *v = NULL;
  size_t n = 0;
  ASSERT_EQ(dlock__cluster_parse_slots(r, "10.1.1.1", &v, &n), 0);
  ASSERT_EQ(n, 3u);
  ASSERT_EQ(v[0].start, 0);
  ASSERT_EQ(v[0].end, 5460);
  ASSERT_STR_EQ(v[0].master.host, "127.0.0.1");
  ASSERT_EQ(v[0].master.port, 30001);
  ASSERT_EQ(v[0].nreplicas, 1);
  ASSERT_EQ(v[0].replica[0].port, 30004);
  ASSERT_STR_EQ(v[1].master.host, "10.1.1.1");
  ASSERT_EQ(v[1].nreplicas, 0);
  ASSERT_STR_EQ(v[2].master.host, "10.1.1.1");
  ASSERT_EQ(v[2].end, 16383);
  free(v);
  dlock__reply_free(r);
}

TEST(malformed_cluster_slots_replies_are_refused) {
  dlock__reply *bad[] = {
      r_int(1),
      r_arr(1, r_arr(2, r_int(0), r_int(10))),                         /* no master */
      r_arr(1, r_arr(3, r_int(10), r_int(5), r_node("h", 1, "x"))),    /* start > end */
      r_arr(1, r_arr(3, r_int(0), r_int(16384), r_node("h", 1, "x"))), /* past the last slot */
      r_arr(1, r_arr(3, r_int(0), r_int(5), r_node("h", 0, "x"))),     /* port 0 */
      r_arr(1, r_arr(3, r_str("0"), r_int(5), r_node("h", 1, "x"))),   /* slot as a string */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock__slot_range *v = NULL;
    size_t n = 0;
    if (dlock__cluster_parse_slots(bad[i], "self", &v, &n) != -1) TEST_FAIL("case %zu accepted", i);
    free(v);
    dlock__reply_free(bad[i]);
  }
}

/* ---- URLs ---- */

TEST(a_cluster_url_lists_its_seeds_and_shares_credentials) {
  dlock__endpoint ep;
  ASSERT_OK(dlock__url_parse("redis-cluster://app:p%40ss@10.0.0.1:7000,node-b:7001,[::1]:7002?insecure=1", &ep));
  ASSERT_EQ(ep.cluster, 1);
  ASSERT_EQ(ep.nseeds, 3);
  ASSERT_STR_EQ(ep.seeds[0].host, "10.0.0.1");
  ASSERT_EQ(ep.seeds[0].port, 7000);
  ASSERT_STR_EQ(ep.seeds[1].host, "node-b");
  ASSERT_EQ(ep.seeds[1].port, 7001);
  ASSERT_STR_EQ(ep.seeds[2].host, "::1");
  ASSERT_EQ(ep.seeds[2].port, 7002);
  ASSERT_STR_EQ(ep.host, "10.0.0.1");
  ASSERT_STR_EQ(ep.username, "app");
  ASSERT_STR_EQ(ep.password, "p@ss");
  ASSERT_EQ(ep.tls, 0);
  dlock__endpoint_clear(&ep);
  ASSERT_OK(dlock__url_parse("rediss-cluster://h1:7000", &ep));
  ASSERT_EQ(ep.tls, 1);
  ASSERT_EQ(ep.nseeds, 1);
  ASSERT_EQ(ep.seeds[0].port, 7000);
  dlock__endpoint_clear(&ep);
}

TEST(bad_cluster_urls_say_what_is_wrong) {
  static const char *const bad[][2] = {
      {"redis-cluster://", "at least one seed"},           {"redis-cluster://u:topsecret@", "at least one seed"},
      {"redis-cluster://h1:7000,,h2:7001", "empty seed"},  {"redis-cluster://h1:7000,", "empty seed"},
      {"redis-cluster://h1:7000,h1:7000", "listed twice"}, {"redis-cluster://h1:7000,h2:0", "port"},
      {"redis-cluster://h1:7000/2", "only database 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock__endpoint ep;
    int rc = dlock__url_parse(bad[i][0], &ep);
    if (rc != DLOCK_EURL) TEST_FAIL("'%s' gave %d", bad[i][0], rc);
    ASSERT_CONTAINS(dlock_last_error(), bad[i][1]);
  }
}

/* WAIT needs one connection that carries every write it counts; a cluster
 * splits pipelines by slot owner, so the option is refused before any
 * connection is tried (the seed here does not exist). */
TEST(wait_replicas_with_a_cluster_url_is_refused_before_connecting) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = "redis-cluster://127.0.0.1:1";
  o.wait_replicas = 1;
  dlock_client *c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EINVAL);
  ASSERT(c == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "redis-cluster://");
  o.wait_replicas = 0;
  o.wait_timeout_ms = 100;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EINVAL);
}

TEST_MAIN()
