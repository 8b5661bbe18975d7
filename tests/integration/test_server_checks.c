/*
 * test_server_checks.c - what the client checks on the server: the
 * connect-time warning about a maxmemory-policy that can evict lock keys
 * (dlock_client_warnings) and the examination behind "dlock doctor"
 * (dlock_client_check): eviction, persistence, replication, clock, and the
 * ACL rights for scripts and pub/sub.
 */
#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv; /* starts with maxmemory-policy noeviction (Redis' default) */
static th_redis lru; /* starts with maxmemory-policy volatile-lru */

void test_setup(void) {
  static const char users[] = "user plain on >plainpw ~* &* +@all -@dangerous\n"
                              "user noscript on >noscriptpw ~* &* +@all -eval -evalsha\n"
                              "user nochan on >nochanpw resetchannels ~* +@all\n";
  char lru_conf[600];
  snprintf(lru_conf, sizeof lru_conf, "maxmemory-policy volatile-lru\n%s", users);
  if (th_redis_start(&srv, users) != 0 || th_redis_start(&lru, lru_conf) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) {
  th_redis_stop(&srv);
  th_redis_stop(&lru);
}

static dlock_client *client_as(const th_redis *r, const char *user, const char *pass) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = r->url;
  o.username = user;
  o.password = pass;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0)
    TEST_FAIL("client of %s as %s: %s", r->url, user ? user : "default", dlock_last_error());
  return c;
}

static const dlock_check *find(const dlock_check *k, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(k[i].name, name)) return &k[i];
  TEST_FAIL("no check named '%s'", name);
  return NULL;
}

static int check_all(dlock_client *c, dlock_check *k) {
  int n = dlock_client_check(c, k, DLOCK_CHECK_MAX);
  if (n != 6) TEST_FAIL("dlock_client_check gave %d (%s): %s", n, dlock_err_name(n), dlock_last_error());
  return n;
}

TEST(noeviction_gives_no_warning) {
  dlock_client *c = client_as(&srv, NULL, NULL);
  ASSERT_STR_EQ(dlock_client_warnings(c), "");
  ASSERT_STR_EQ(dlock_last_error(), "");
  dlock_client_free(c);
}

TEST(volatile_lru_is_warned_about_at_connect_naming_the_policy_and_the_fix) {
  dlock_client *c = client_as(&lru, NULL, NULL);
  const char *w = dlock_client_warnings(c);
  ASSERT_CONTAINS(w, lru.url + strlen("redis://"));
  ASSERT_CONTAINS(w, "maxmemory-policy is volatile-lru");
  ASSERT_CONTAINS(w, "CONFIG SET maxmemory-policy noeviction");
  ASSERT(strchr(w, '\n') == NULL); /* one warning, one line */
  /* A successful connect leaves no error behind. */
  ASSERT_STR_EQ(dlock_last_error(), "");
  dlock_client_free(c);
}

TEST(every_policy_but_noeviction_is_warned_about) {
  static const char *const policies[] = {"allkeys-lru",  "allkeys-lfu",     "allkeys-random",
                                         "volatile-lfu", "volatile-random", "volatile-ttl"};
  char out[64];
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
    th_redis_cli(&lru, out, sizeof out, "CONFIG SET maxmemory-policy %s", policies[i]);
    dlock_client *c = client_as(&lru, NULL, NULL);
    ASSERT_CONTAINS(dlock_client_warnings(c), policies[i]);
    dlock_client_free(c);
  }
  th_redis_cli(&lru, out, sizeof out, "CONFIG SET maxmemory-policy noeviction");
  dlock_client *c = client_as(&lru, NULL, NULL);
  ASSERT_STR_EQ(dlock_client_warnings(c), "");
  dlock_client_free(c);
  th_redis_cli(&lru, out, sizeof out, "CONFIG SET maxmemory-policy volatile-lru");
}

TEST(a_user_without_info_rights_connects_without_warning_and_the_check_says_why) {
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory-policy allkeys-lru");
  dlock_client *c = client_as(&srv, "plain", "plainpw");
  ASSERT_STR_EQ(dlock_client_warnings(c), "");
  dlock_check k[DLOCK_CHECK_MAX];
  int n = check_all(c, k);
  const dlock_check *e = find(k, n, "eviction");
  ASSERT_EQ(e->level, DLOCK_CHECK_WARN);
  ASSERT_CONTAINS(e->found, "cannot read maxmemory-policy");
  ASSERT_CONTAINS(e->found, "NOPERM");
  ASSERT_EQ(find(k, n, "scripts")->level, DLOCK_CHECK_OK);
  ASSERT_CONTAINS(find(k, n, "scripts")->found, "user 'plain'");
  ASSERT_EQ(find(k, n, "pubsub")->level, DLOCK_CHECK_OK);
  dlock_client_free(c);
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory-policy noeviction");
}

TEST(the_check_reports_each_area_with_a_fix_for_every_non_ok_line) {
  dlock_client *c = client_as(&srv, NULL, NULL);
  dlock_check k[DLOCK_CHECK_MAX];
  int n = check_all(c, k);
  static const char *const names[] = {"eviction", "persistence", "replication", "clock", "scripts", "pubsub"};
  for (int i = 0; i < n; i++) {
    ASSERT_STR_EQ(k[i].name, names[i]);
    ASSERT(k[i].found[0] != '\0');
    if (k[i].level != DLOCK_CHECK_OK && k[i].fix[0] == '\0') TEST_FAIL("'%s' is not OK but has no fix", k[i].name);
  }
  ASSERT_EQ(find(k, n, "eviction")->level, DLOCK_CHECK_OK);
  /* The harness runs servers without persistence. */
  ASSERT_EQ(find(k, n, "persistence")->level, DLOCK_CHECK_WARN);
  ASSERT_CONTAINS(find(k, n, "persistence")->fix, "appendonly yes");
  ASSERT_EQ(find(k, n, "replication")->level, DLOCK_CHECK_OK);
  const dlock_check *clk = find(k, n, "clock");
  ASSERT_EQ(clk->level, DLOCK_CHECK_OK);
  ASSERT(clk->skew_ms > -1000 && clk->skew_ms < 1000);
  ASSERT_EQ(find(k, n, "scripts")->level, DLOCK_CHECK_OK);
  ASSERT_EQ(find(k, n, "pubsub")->level, DLOCK_CHECK_OK);
  /* The probe lock was released. */
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "dlock-doctor", &info));
  ASSERT_EQ(info.held, 0);

  /* AOF on is OK; RDB rules alone are a WARN naming them. */
  th_redis_cli(&srv, NULL, 0, "CONFIG SET appendonly yes");
  n = check_all(c, k);
  ASSERT_EQ(find(k, n, "persistence")->level, DLOCK_CHECK_OK);
  th_redis_cli(&srv, NULL, 0, "CONFIG SET appendonly no");
  th_redis_cli(&srv, NULL, 0, "CONFIG SET save '900 1'");
  n = check_all(c, k);
  ASSERT_EQ(find(k, n, "persistence")->level, DLOCK_CHECK_WARN);
  ASSERT_CONTAINS(find(k, n, "persistence")->found, "RDB snapshots only (save 900 1)");
  th_redis_cli(&srv, NULL, 0, "CONFIG SET save ''");

  /* An evicting policy with a memory limit is a FAIL. */
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory-policy volatile-ttl");
  n = check_all(c, k);
  ASSERT_EQ(find(k, n, "eviction")->level, DLOCK_CHECK_WARN); /* maxmemory 0: nothing evicted yet */
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory 500mb");
  n = check_all(c, k);
  ASSERT_EQ(find(k, n, "eviction")->level, DLOCK_CHECK_FAIL);
  ASSERT_CONTAINS(find(k, n, "eviction")->found, "volatile-ttl");
  ASSERT_CONTAINS(find(k, n, "eviction")->fix, "CONFIG SET maxmemory-policy noeviction");
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory 0");
  th_redis_cli(&srv, NULL, 0, "CONFIG SET maxmemory-policy noeviction");
  dlock_client_free(c);
}

TEST(missing_script_or_channel_rights_are_named) {
  dlock_check k[DLOCK_CHECK_MAX];
  dlock_client *c = client_as(&srv, "noscript", "noscriptpw");
  int n = check_all(c, k);
  const dlock_check *s = find(k, n, "scripts");
  ASSERT_EQ(s->level, DLOCK_CHECK_FAIL);
  ASSERT_CONTAINS(s->found, "user 'noscript'");
  ASSERT_CONTAINS(s->found, "ENOPERM");
  ASSERT_CONTAINS(s->fix, "+evalsha");
  dlock_client_free(c);

  c = client_as(&srv, "nochan", "nochanpw");
  n = check_all(c, k);
  ASSERT_EQ(find(k, n, "scripts")->level, DLOCK_CHECK_OK);
  const dlock_check *p = find(k, n, "pubsub");
  ASSERT_EQ(p->level, DLOCK_CHECK_WARN);
  ASSERT_CONTAINS(p->found, "user 'nochan' cannot PUBLISH");
  ASSERT_CONTAINS(p->fix, "&{PREFIX*");
  dlock_client_free(c);
}

TEST(a_replica_fails_and_replicas_without_min_replicas_to_write_warn) {
  th_redis rep;
  char conf[128];
  snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", srv.port);
  ASSERT(th_redis_start(&rep, conf) == 0);
  dlock_client *c = client_as(&rep, NULL, NULL), *m = client_as(&srv, NULL, NULL);
  dlock_check k[DLOCK_CHECK_MAX];
  int n = dlock_client_check(c, k, DLOCK_CHECK_MAX);
  ASSERT(n >= 3);
  ASSERT_EQ(find(k, n, "replication")->level, DLOCK_CHECK_FAIL);
  ASSERT_CONTAINS(find(k, n, "replication")->found, "is a replica of 127.0.0.1");
  /* The master sees the replica once it has synced (bounded wait). */
  long long deadline = th_now_ms() + 10000 * th_time_factor();
  const dlock_check *r = NULL;
  do {
    n = check_all(m, k);
    r = find(k, n, "replication");
    if (strstr(r->found, "1 replica")) break;
    th_sleep_ms(100);
  } while (th_now_ms() < deadline);
  ASSERT_EQ(r->level, DLOCK_CHECK_WARN);
  ASSERT_CONTAINS(r->found, "min-replicas-to-write 0");
  ASSERT_CONTAINS(r->fix, "min-replicas-to-write 1");
  th_redis_cli(&srv, NULL, 0, "CONFIG SET min-replicas-to-write 1");
  n = check_all(m, k);
  ASSERT_EQ(find(k, n, "replication")->level, DLOCK_CHECK_OK);
  th_redis_cli(&srv, NULL, 0, "CONFIG SET min-replicas-to-write 0");
  dlock_client_free(c);
  dlock_client_free(m);
  th_redis_stop(&rep);
}

TEST(bad_arguments_give_einval) {
  dlock_check k[1];
  ASSERT_STATUS(dlock_client_check(NULL, k, 1), DLOCK_EINVAL);
  ASSERT_STR_EQ(dlock_client_warnings(NULL), "");
  dlock_client *c = client_as(&srv, NULL, NULL);
  ASSERT_STATUS(dlock_client_check(c, NULL, 1), DLOCK_EINVAL);
  ASSERT_EQ(dlock_client_check(c, k, 1), 1); /* only as many as fit */
  ASSERT_STR_EQ(k[0].name, "eviction");
  dlock_client_free(c);
}

TEST_MAIN()
