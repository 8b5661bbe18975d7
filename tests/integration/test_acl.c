/*
 * test_acl.c - libdlock under Redis ACLs: a user limited to "app:" keys and
 * channels can do everything through a client with key_prefix "app:"; the
 * same user without the prefix is denied with ENOPERM naming the key; a user
 * without pub/sub channel rights can still lock, and its waiters still get
 * the lock through their re-checks.
 */
#include <pthread.h>
#include <time.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  const char *conf = "user default on nopass ~* &* +@all\n"
                     "user app on >apppw ~app:* ~{app:* &{app:* +@all\n"
                     "user nochan on >nochanpw resetchannels ~app:* ~{app:* +@all\n";
  if (th_redis_start(&srv, conf) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client_as(const char *user, const char *pass, const char *prefix) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.username = user;
  o.password = pass;
  o.key_prefix = prefix;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client as %s: %s", user, dlock_last_error());
  return c;
}

static dlock_mutex *mutex(dlock_client *c, const char *name, int64_t lease_ms, const char *info) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  mo.owner_info = info;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) TEST_FAIL("mutex: %s", dlock_last_error());
  return m;
}

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

/* Join 'th' within 'ms'; otherwise cancel the wait, join, and fail. */
static void join_within(pthread_t th, th_waiter *w, long ms) {
  long long deadline = th_now_ms() + ms;
  while (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST) && th_now_ms() < deadline) th_sleep_ms(10);
  if (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST)) {
    dlock_mutex_cancel(w->m);
    pthread_join(th, NULL);
    TEST_FAIL("the waiter was still waiting after %ld ms", ms);
  }
  pthread_join(th, NULL);
}

TEST(a_prefixed_client_of_a_restricted_user_can_lock_extend_and_release) {
  dlock_client *c = client_as("app", "apppw", "app:");
  dlock_mutex *m = mutex(c, "orders:1", 10000, "acl test");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > 0);
  char out[256];
  cli(out, sizeof out, "EXISTS app:orders:1");
  ASSERT_STR_EQ(out, "1");
  /* The hold's record: "fence|since|token|owner info" (docs/keys.md). */
  cli(out, sizeof out, "GET {app:orders:1}:fence");
  ASSERT_CONTAINS(out, "|acl test");
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  ASSERT_OK(dlock_mutex_extend(m, 20000));
  int64_t ttl = 0;
  ASSERT_OK(dlock_mutex_remaining(m, &ttl));
  ASSERT(ttl > 15000 && ttl <= 20000);
  ASSERT_OK(dlock_mutex_release(m));
  cli(out, sizeof out, "EXISTS app:orders:1");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_restricted_users_waiter_is_woken_by_the_hand_off_message) {
  dlock_client *c1 = client_as("app", "apppw", "app:"), *c2 = client_as("app", "apppw", "app:");
  dlock_mutex *a = mutex(c1, "wake", 0, NULL), *b = mutex(c2, "wake", 0, NULL);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fa = dlock_mutex_fence(a);
  th_waiter w = {b, 10000, -99, 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, th_wait_for_lock, &w);
  th_sleep_ms(500);
  char out[64];
  cli(out, sizeof out, "ZCARD {app:wake}:queue");
  ASSERT_STR_EQ(out, "1");
  long long released = th_now_ms();
  ASSERT_OK(dlock_mutex_release(a));
  join_within(th, &w, 12000);
  ASSERT_OK(w.rc);
  ASSERT(w.fence > fa);
  ASSERT(w.acquired_at - released < 2500); /* the message, not the 5 s re-check */
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

struct names {
  char name[8][64];
  int n;
};

static void collect(const char *name, void *arg) {
  struct names *ns = arg;
  if (ns->n < 8) snprintf(ns->name[ns->n], sizeof ns->name[0], "%s", name);
  ns->n++;
}

static int with_fn(uint64_t fence, void *arg) {
  *(uint64_t *)arg = fence;
  return 7;
}

TEST(info_list_force_release_guard_and_with_lock_work_for_the_restricted_user) {
  dlock_client *c = client_as("app", "apppw", "app:"), *c2 = client_as("app", "apppw", "app:");
  dlock_mutex *m = mutex(c, "admin", 10000, "holder-1");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c2, "admin", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 0);
  ASSERT_EQ(info.fence, dlock_mutex_fence(m));
  ASSERT_STR_EQ(info.owner_info, "holder-1");
  ASSERT(info.ttl_ms > 5000 && info.ttl_ms <= 10000);

  /* A key outside the prefix is invisible to list (and not this user's). */
  char out[64];
  cli(out, sizeof out, "SET other:thing x");
  struct names ns = {0};
  ASSERT_EQ(dlock_lock_list(c2, NULL, collect, &ns), 1);
  ASSERT_EQ(ns.n, 1);
  ASSERT_STR_EQ(ns.name[0], "admin");
  ns.n = 0;
  ASSERT_EQ(dlock_lock_list(c2, "adm*", collect, &ns), 1);
  ns.n = 0;
  ASSERT_EQ(dlock_lock_list(c2, "zzz*", collect, &ns), 0);

  int was = -1;
  ASSERT_OK(dlock_lock_force_release(c2, "admin", &was));
  ASSERT_EQ(was, 1);
  cli(out, sizeof out, "EXISTS app:admin");
  ASSERT_STR_EQ(out, "0");
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);

  ASSERT_OK(dlock_guard_check(c2, "res", 10));
  ASSERT_STATUS(dlock_guard_check(c2, "res", 9), DLOCK_ESTALE);
  cli(out, sizeof out, "GET {app:res}:guard");
  ASSERT_STR_EQ(out, "10");

  uint64_t fence = 0;
  ASSERT_EQ(dlock_with_lock(c2, "with", 0, with_fn, &fence), 7);
  ASSERT(fence > 0);
  cli(out, sizeof out, "EXISTS app:with");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(without_the_prefix_the_restricted_user_gets_enoperm_naming_the_key) {
  dlock_client *c = client_as("app", "apppw", NULL);
  dlock_mutex *m = mutex(c, "orders:2", 10000, NULL);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "orders:2");
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "orders:2");
  ASSERT_EQ(dlock_mutex_fence(m), 0);
  ASSERT_STATUS(dlock_mutex_acquire(m, 1000), DLOCK_ENOPERM); /* a wait does not hide it */
  char out[64];
  cli(out, sizeof out, "EXISTS orders:2 {orders:2}:fence {orders:2}:meta {orders:2}:queue");
  ASSERT_STR_EQ(out, "0");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_STATUS(dlock_lock_info_get(c, "orders:2", &info), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "orders:2");
  ASSERT_STATUS(dlock_lock_force_release(c, "orders:2", NULL), DLOCK_ENOPERM);
  ASSERT_STATUS(dlock_guard_check(c, "res2", 3), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "res2");
  cli(out, sizeof out, "EXISTS {res2}:guard");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_prefix_outside_the_users_patterns_gets_enoperm) {
  dlock_client *c = client_as("app", "apppw", "billing:");
  dlock_mutex *m = mutex(c, "x", 10000, NULL);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "billing:x");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_user_without_channel_rights_can_still_acquire_and_release) {
  dlock_client *c = client_as("nochan", "nochanpw", "app:");
  dlock_mutex *m = mutex(c, "nochan:1", 10000, NULL);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[64];
  cli(out, sizeof out, "EXISTS app:nochan:1");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(m));
  cli(out, sizeof out, "EXISTS app:nochan:1");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The holder 'a' releases while a waiter of 'c2' is queued; returns the
 * release's status and message, and how long the waiter took after it. */
static int release_to_a_waiter_without_channel_rights(const char *name, char *msg, size_t msglen, th_waiter *w) {
  dlock_client *c1 = client_as("nochan", "nochanpw", "app:"), *c2 = client_as("nochan", "nochanpw", "app:");
  /* Watchdog mode: a 30 s lease, so the waiter re-checks every 5 s. */
  dlock_mutex *a = mutex(c1, name, 0, NULL), *b = mutex(c2, name, 0, NULL);
  int rel = dlock_mutex_acquire(a, 0);
  snprintf(msg, msglen, "%s", dlock_last_error());
  *w = (th_waiter){b, 20000, -99, 0, 0, 0};
  if (rel == 0) {
    pthread_t th;
    pthread_create(&th, NULL, th_wait_for_lock, w);
    th_sleep_ms(800);
    long long released = th_now_ms();
    rel = dlock_mutex_release(a);
    snprintf(msg, msglen, "%s", dlock_last_error());
    long long deadline = th_now_ms() + 9000;
    while (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST) && th_now_ms() < deadline) th_sleep_ms(10);
    if (!__atomic_load_n(&w->done, __ATOMIC_SEQ_CST)) dlock_mutex_cancel(b); /* hung: stop it */
    pthread_join(th, NULL);
    w->acquired_at -= released;
  }
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
  return rel;
}

TEST(a_waiter_without_channel_rights_still_gets_the_lock_by_its_recheck) {
  char msg[1024];
  th_waiter w;
  release_to_a_waiter_without_channel_rights("nochan:wait", msg, sizeof msg, &w);
  printf("  waiter without channel rights: %s, %lld ms after the release\n", dlock_err_name(w.rc), w.acquired_at);
  ASSERT_OK(w.rc);
  ASSERT(w.acquired_at < 6500);
}

TEST(a_release_that_hands_off_to_a_waiter_succeeds_without_channel_rights) {
  /* The release deletes the key and hands the lock to the waiter in Redis;
   * the wake-up message cannot be published to a channel this user may not
   * use. That must not turn a done release into an error. */
  char msg[1024];
  th_waiter w;
  int rel = release_to_a_waiter_without_channel_rights("nochan:release", msg, sizeof msg, &w);
  ASSERT_OK(w.rc);
  if (rel != 0) TEST_FAIL("release returned %d (%s): %s", rel, dlock_err_name(rel), msg);
}

TEST(a_forced_release_by_a_user_without_channel_rights_succeeds_and_the_waiter_gets_the_lock) {
  dlock_client *holder = client_as("app", "apppw", "app:");
  dlock_client *waiter = client_as("nochan", "nochanpw", "app:");
  dlock_client *admin = client_as("nochan", "nochanpw", "app:");
  dlock_mutex *a = mutex(holder, "nochan:force", 0, NULL), *b = mutex(waiter, "nochan:force", 0, NULL);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  th_waiter w = {b, 20000, -99, 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, th_wait_for_lock, &w);
  th_sleep_ms(800);
  long long released = th_now_ms();
  int was = -1;
  int rc = dlock_lock_force_release(admin, "nochan:force", &was);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  join_within(th, &w, 9000);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(holder);
  dlock_client_free(waiter);
  dlock_client_free(admin);
  ASSERT_OK(w.rc);
  ASSERT(w.acquired_at - released < 6500);
  if (rc != 0) TEST_FAIL("force release returned %d (%s): %s", rc, dlock_err_name(rc), msg);
  ASSERT_EQ(was, 1);
}

TEST(a_user_without_the_lua_scripting_commands_gets_enoperm_not_a_hang) {
  char out[256];
  cli(out, sizeof out, "ACL SETUSER noeval on '>noevalpw' '~app:*' '~{app:*' '&{app:*' +@all -evalsha -eval");
  ASSERT_STR_EQ(out, "OK");
  dlock_client *c = client_as("noeval", "noevalpw", "app:");
  dlock_mutex *m = mutex(c, "noeval", 10000, NULL);
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_ENOPERM);
  ASSERT(th_now_ms() - t0 < 3000);
  ASSERT_CONTAINS(dlock_last_error(), "noeval");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST_MAIN()
