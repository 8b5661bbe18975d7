/*
 * test_admin.c - looking at and managing locks from outside: lock status
 * (held, TTL, fence, since, owner info, waiters, foreign keys), listing,
 * forced release (and the waiter it wakes), the fencing guard (including
 * tokens near 2^63), and the one-call dlock_with_lock().
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/time.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client_with_prefix(const char *prefix) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.key_prefix = prefix;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client: %s", dlock_last_error());
  return c;
}

static dlock_client *client(void) { return client_with_prefix(NULL); }

static dlock_mutex *mutex_info(dlock_client *c, const char *name, int64_t lease_ms, const char *info) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  mo.owner_info = info;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) TEST_FAIL("mutex: %s", dlock_last_error());
  return m;
}

static dlock_mutex *mutex(dlock_client *c, const char *name, int64_t lease_ms) {
  return mutex_info(c, name, lease_ms, NULL);
}

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

static long long wall_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* ---- Status ---- */

TEST(info_of_a_held_lock_shows_ttl_fence_since_owner_and_waiters) {
  dlock_client *c = client(), *c2 = client(), *admin = client();
  dlock_mutex *m = mutex_info(c, "adm:info", 10000, "worker-7 on host-a");
  long long before = wall_ms();
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  long long after = wall_ms();
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  memset(&info, 0x5a, sizeof info); /* every field must be written */
  info.struct_size = sizeof info;
  ASSERT_OK(dlock_lock_info_get(admin, "adm:info", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 0);
  ASSERT(info.ttl_ms > 8000 && info.ttl_ms <= 10000);
  ASSERT(info.fence > 0);
  ASSERT_EQ(info.fence, dlock_mutex_fence(m));
  /* Server clock, same machine: within a generous margin of ours. */
  ASSERT(info.since_unix_ms >= before - 2000 && info.since_unix_ms <= after + 2000);
  ASSERT_STR_EQ(info.owner_info, "worker-7 on host-a");
  ASSERT_EQ(info.waiters, 0);

  /* A waiter from another client shows up in the count. */
  dlock_mutex *b = mutex(c2, "adm:info", 10000);
  th_waiter w = {b, 15000, -99, 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, th_wait_for_lock, &w);
  long long deadline = th_now_ms() + 5000;
  do {
    th_sleep_ms(50);
    ASSERT_OK(dlock_lock_info_get(admin, "adm:info", &info));
  } while (info.waiters != 1 && th_now_ms() < deadline);
  int waiters_seen = (int)info.waiters;
  uint64_t first = dlock_mutex_fence(m);
  ASSERT_OK(dlock_mutex_release(m));
  pthread_join(th, NULL);
  ASSERT_EQ(waiters_seen, 1);
  ASSERT_OK(w.rc);
  ASSERT(w.fence > first);
  ASSERT_OK(dlock_lock_info_get(admin, "adm:info", &info));
  ASSERT_EQ(info.waiters, 0);
  dlock_mutex_free(m);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(c2);
  dlock_client_free(admin);
}

TEST(info_of_a_free_lock_shows_the_last_fence_and_no_owner) {
  dlock_client *c = client();
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "adm:never", &info));
  ASSERT_EQ(info.held, 0);
  ASSERT_EQ(info.foreign, 0);
  ASSERT_EQ(info.fence, 0);
  ASSERT_EQ(info.waiters, 0);
  ASSERT_STR_EQ(info.owner_info, "");

  dlock_mutex *m = mutex_info(c, "adm:free", 10000, "someone");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t f = dlock_mutex_fence(m);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_lock_info_get(c, "adm:free", &info));
  ASSERT_EQ(info.held, 0);
  ASSERT_EQ(info.foreign, 0);
  ASSERT_EQ(info.ttl_ms, 0);
  ASSERT_EQ(info.fence, f); /* the last one issued */
  ASSERT_EQ(info.since_unix_ms, 0);
  ASSERT_STR_EQ(info.owner_info, "");
  /* Info is read-only: it creates nothing. */
  char out[64];
  cli(out, sizeof out, "EXISTS adm:never {adm:never}:fence {adm:never}:meta");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(info_of_a_key_set_by_someone_else_shows_foreign) {
  dlock_client *c = client();
  char out[64];
  cli(out, sizeof out, "SET adm:foreign not-dlock PX 10000");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "adm:foreign", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 1);
  ASSERT(info.ttl_ms > 5000 && info.ttl_ms <= 10000);
  ASSERT_EQ(info.fence, 0);
  ASSERT_STR_EQ(info.owner_info, "");
  /* Without an expiry the TTL is -1. */
  cli(out, sizeof out, "SET adm:foreign2 forever");
  ASSERT_OK(dlock_lock_info_get(c, "adm:foreign2", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 1);
  ASSERT_EQ(info.ttl_ms, -1);
  /* A dlock acquire on it says it is no dlock lock and leaves it alone
   * (without an expiry it would never be released: not "busy"). */
  dlock_mutex *m = mutex(c, "adm:foreign2", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFOREIGN);
  cli(out, sizeof out, "GET adm:foreign2");
  ASSERT_STR_EQ(out, "forever");
  cli(out, sizeof out, "DEL adm:foreign adm:foreign2");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The hold's record stays in the counter after the release: it describes a
 * key only while that key holds the record's token. Someone else's key on
 * the name later is foreign, not the last dlock holder's. */
TEST(a_key_set_by_someone_else_after_a_dlock_hold_is_foreign_not_the_old_holders) {
  dlock_client *c = client();
  dlock_mutex *m = mutex_info(c, "adm:after", 10000, "old holder");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  char out[256];
  cli(out, sizeof out, "GET {adm:after}:fence");
  ASSERT_CONTAINS(out, "|old holder"); /* the record outlives the hold */
  cli(out, sizeof out, "SET adm:after 0123456789abcdef0123456789abcdef PX 10000");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "adm:after", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 1);
  ASSERT_STR_EQ(info.owner_info, "");
  ASSERT_STATUS(dlock_lock_force_release(c, "adm:after", NULL), DLOCK_EFOREIGN);
  cli(out, sizeof out, "EXISTS adm:after");
  ASSERT_STR_EQ(out, "1");
  cli(out, sizeof out, "DEL adm:after");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* A hold taken or granted by a client before the hold's record (its fence,
 * since and owner info in a meta hash {K}:meta, the counter a bare number)
 * is still dlock's: status shows it, a forced release ends it. */
TEST(a_hold_recorded_by_an_older_client_in_the_meta_hash_is_shown_and_forced) {
  dlock_client *c = client();
  char out[256];
  cli(out, sizeof out, "SET {adm:old}:fence 1795000000000000 PX 60000");
  cli(out, sizeof out, "SET adm:old 00112233445566778899aabbccddeeff PX 10000");
  cli(out, sizeof out, "HSET {adm:old}:meta fence 1795000000000000 since 1795000000000 info 'old client'");
  cli(out, sizeof out, "PEXPIRE {adm:old}:meta 10000");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "adm:old", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.foreign, 0);
  ASSERT_EQ(info.fence == 1795000000000000ULL, 1);
  ASSERT_EQ(info.since_unix_ms, 1795000000000LL);
  ASSERT_STR_EQ(info.owner_info, "old client");
  /* A new client's acquire waits for it (it is a lock, not an application's
   * key) and issues a fence above it. */
  dlock_mutex *m = mutex(c, "adm:old", 10000);
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EBUSY);
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(c, "adm:old", &was_held));
  ASSERT_EQ(was_held, 1);
  cli(out, sizeof out, "EXISTS adm:old {adm:old}:meta");
  ASSERT_STR_EQ(out, "0");
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > 1795000000000000ULL);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* The counter holds the hold's record and outlives it by 30 days from the
 * acquire; a renewal starts those 30 days again, so that a hold kept longer
 * by renewals keeps its record (status, and force release's "is it dlock's"). */
TEST(a_renewal_keeps_the_holds_record_as_long_as_the_hold) {
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "adm:renew", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[256];
  cli(out, sizeof out, "PEXPIRE {adm:renew}:fence 5000"); /* as if 30 days had nearly passed */
  ASSERT_OK(dlock_mutex_extend(m, 10000));
  cli(out, sizeof out, "PTTL {adm:renew}:fence");
  if (atoll(out) < 2591000000LL) TEST_FAIL("counter PTTL %s after a renewal, want 30 days", out);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(info_after_a_lock_was_taken_over_shows_the_new_holder) {
  dlock_client *c = client();
  dlock_mutex *a = mutex_info(c, "adm:over", 300, "first"), *b = mutex_info(c, "adm:over", 10000, "second");
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fa = dlock_mutex_fence(a);
  ASSERT_OK(dlock_mutex_acquire(b, 10000)); /* after a's lease ran out */
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(c, "adm:over", &info));
  ASSERT_EQ(info.held, 1);
  ASSERT_EQ(info.fence, dlock_mutex_fence(b));
  ASSERT(info.fence > fa);
  ASSERT_STR_EQ(info.owner_info, "second");
  ASSERT_OK(dlock_mutex_release(b));
  ASSERT_STATUS(dlock_mutex_release(a), DLOCK_ENOTHELD);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
}

/* ---- Listing ---- */

struct names {
  char name[16][DLOCK_MAX_NAME_LEN + 1];
  int n;
};

static void collect(const char *name, void *arg) {
  struct names *ns = arg;
  if (ns->n < 16) snprintf(ns->name[ns->n], sizeof ns->name[0], "%s", name);
  ns->n++;
}

static int has(const struct names *ns, const char *name) {
  for (int i = 0; i < ns->n && i < 16; i++)
    if (!strcmp(ns->name[i], name)) return 1;
  return 0;
}

TEST(list_shows_only_locks_held_by_dlock_and_returns_their_number) {
  /* A prefix of its own keeps the other tests' locks out of the count. */
  dlock_client *c = client_with_prefix("lst:");
  dlock_mutex *a = mutex(c, "jobs:a", 10000), *b = mutex(c, "jobs:b", 10000), *o = mutex(c, "other:c", 10000),
              *gone = mutex(c, "jobs:released", 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  ASSERT_OK(dlock_mutex_acquire(o, 0));
  ASSERT_OK(dlock_mutex_acquire(gone, 0));
  ASSERT_OK(dlock_mutex_release(gone));
  char out[64];
  cli(out, sizeof out, "SET lst:jobs:foreign x PX 10000"); /* not dlock's */
  cli(out, sizeof out, "SET jobs:unprefixed x PX 10000");  /* outside the prefix */

  struct names ns = {0};
  int n = dlock_lock_list(c, NULL, collect, &ns);
  ASSERT_EQ(n, 3);
  ASSERT_EQ(ns.n, 3);
  ASSERT(has(&ns, "jobs:a") && has(&ns, "jobs:b") && has(&ns, "other:c"));
  ASSERT(!has(&ns, "jobs:released") && !has(&ns, "jobs:foreign"));

  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "jobs:*", collect, &ns), 2);
  ASSERT_EQ(ns.n, 2);
  ASSERT(has(&ns, "jobs:a") && has(&ns, "jobs:b"));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "jobs:?", collect, &ns), 2);
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "jobs:[b-z]", collect, &ns), 1);
  ASSERT(has(&ns, "jobs:b"));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "other:c", collect, &ns), 1);
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "nothing*", collect, &ns), 0);
  ASSERT_EQ(ns.n, 0);

  /* Released locks drop out of the list. */
  ASSERT_OK(dlock_mutex_release(a));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, "jobs:*", collect, &ns), 1);
  ASSERT(has(&ns, "jobs:b"));
  ASSERT_OK(dlock_mutex_release(b));
  ASSERT_OK(dlock_mutex_release(o));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, NULL, collect, &ns), 0);
  cli(out, sizeof out, "DEL lst:jobs:foreign jobs:unprefixed");
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_mutex_free(o);
  dlock_mutex_free(gone);
  dlock_client_free(c);
}

TEST(list_without_a_prefix_sees_every_dlock_lock_by_its_full_name) {
  dlock_client *plain = client(), *pre = client_with_prefix("lst2:");
  dlock_mutex *a = mutex(pre, "x", 10000), *b = mutex(plain, "lst2-plain", 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  struct names ns = {0};
  int n = dlock_lock_list(plain, "lst2*", collect, &ns);
  ASSERT_EQ(n, 2);
  ASSERT(has(&ns, "lst2:x") && has(&ns, "lst2-plain"));
  ASSERT_OK(dlock_mutex_release(a));
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(plain);
  dlock_client_free(pre);
}

TEST(a_prefix_is_a_whole_segment_so_app_never_reaches_the_locks_of_app2) {
  dlock_client *app = client_with_prefix("app"), *app2 = client_with_prefix("app2"),
               *app2c = client_with_prefix("app2:");
  dlock_mutex *mine = mutex(app, "own", 10000), *theirs = mutex(app2, "foo", 10000);
  ASSERT_OK(dlock_mutex_acquire(mine, 0));
  ASSERT_OK(dlock_mutex_acquire(theirs, 0));
  char out[64];
  /* "app" is used as "app:"; "app2" and "app2:" are the same prefix. */
  cli(out, sizeof out, "EXISTS app:own app2:foo");
  ASSERT_STR_EQ(out, "2");
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(app2c, "foo", &info));
  ASSERT_EQ(info.held, 1);

  /* Without the separator, the name "2:foo" under "app" was app2's lock. */
  struct names ns = {0};
  ASSERT_EQ(dlock_lock_list(app, NULL, collect, &ns), 1);
  ASSERT(has(&ns, "own"));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(app, "2*", collect, &ns), 0);
  ASSERT_OK(dlock_lock_info_get(app, "2:foo", &info));
  ASSERT_EQ(info.held, 0);
  int was = -1;
  ASSERT_OK(dlock_lock_force_release(app, "2:foo", &was));
  ASSERT_EQ(was, 0);
  ASSERT_EQ(dlock_mutex_is_held(theirs), 1);
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(app2, NULL, collect, &ns), 1);
  ASSERT(has(&ns, "foo"));

  /* Glob characters in a prefix are literal in the scan. */
  dlock_client *star = client_with_prefix("ap*");
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(star, NULL, collect, &ns), 0);
  ASSERT_OK(dlock_mutex_release(mine));
  ASSERT_OK(dlock_mutex_release(theirs));
  dlock_mutex_free(mine);
  dlock_mutex_free(theirs);
  dlock_client_free(star);
  dlock_client_free(app);
  dlock_client_free(app2);
  dlock_client_free(app2c);
}

/* Every kind is listed: the list scans the fence counters, which every kind
 * keeps, and keeps the names whose key exists. */
TEST(list_shows_semaphores_and_read_write_locks_too) {
  dlock_client *c = client_with_prefix("lsk:");
  dlock_semaphore *s = NULL;
  dlock_rwlock *rw = NULL;
  ASSERT_OK(dlock_semaphore_new(&s, c, "sem", 3, NULL));
  ASSERT_OK(dlock_rwlock_new(&rw, c, "rw", DLOCK_RW_READ, NULL));
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_rwlock_acquire(rw, 0));
  struct names ns = {0};
  ASSERT_EQ(dlock_lock_list(c, NULL, collect, &ns), 2);
  ASSERT(has(&ns, "sem") && has(&ns, "rw"));
  ASSERT_OK(dlock_semaphore_release(s));
  ASSERT_OK(dlock_rwlock_release(rw));
  memset(&ns, 0, sizeof ns);
  ASSERT_EQ(dlock_lock_list(c, NULL, collect, &ns), 0);
  dlock_semaphore_free(s);
  dlock_rwlock_free(rw);
  dlock_client_free(c);
}

TEST(list_scans_many_locks) {
  dlock_client *c = client_with_prefix("many:");
  enum { N = 150 };
  dlock_mutex *m[N];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "k%03d", i);
    m[i] = mutex(c, name, 20000);
    ASSERT_OK(dlock_mutex_acquire(m[i], 0));
  }
  struct names ns = {0};
  ASSERT_EQ(dlock_lock_list(c, NULL, collect, &ns), N);
  ASSERT_EQ(ns.n, N);
  for (int i = 0; i < N; i++) dlock_mutex_free(m[i]); /* releases */
  ns.n = 0;
  ASSERT_EQ(dlock_lock_list(c, NULL, collect, &ns), 0);
  dlock_client_free(c);
}

/* ---- Forced release ---- */

TEST(force_release_deletes_any_holders_lock_and_reports_whether_it_was_held) {
  dlock_client *c = client(), *admin = client();
  dlock_mutex *m = mutex(c, "adm:force", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t f = dlock_mutex_fence(m);
  int was = -1;
  ASSERT_OK(dlock_lock_force_release(admin, "adm:force", &was));
  ASSERT_EQ(was, 1);
  char out[64];
  cli(out, sizeof out, "EXISTS adm:force {adm:force}:meta");
  ASSERT_STR_EQ(out, "0");
  ASSERT_EQ(dlock_mutex_is_held(m), 0);
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  was = -1;
  ASSERT_OK(dlock_lock_force_release(admin, "adm:force", &was));
  ASSERT_EQ(was, 0);
  ASSERT_OK(dlock_lock_force_release(admin, "adm:force", NULL));
  /* The fence counter survives: the next hold is higher. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > f);
  ASSERT_OK(dlock_mutex_release(m));
  /* A key dlock did not take (an application's data) is refused and kept... */
  cli(out, sizeof out, "SET adm:force not-dlock");
  was = -1;
  ASSERT_STATUS(dlock_lock_force_release(admin, "adm:force", &was), DLOCK_EFOREIGN);
  ASSERT_EQ(was, 0);
  ASSERT_CONTAINS(dlock_last_error(), "'adm:force'");
  ASSERT_CONTAINS(dlock_last_error(), "DLOCK_FORCE_FOREIGN");
  cli(out, sizeof out, "GET adm:force");
  ASSERT_STR_EQ(out, "not-dlock");
  /* ... unless the caller says it is another library's lock (redis-py's token). */
  cli(out, sizeof out, "SET adm:force 0123456789abcdef0123456789abcdef PX 10000");
  ASSERT_STATUS(dlock_lock_force_release(admin, "adm:force", NULL), DLOCK_EFOREIGN);
  ASSERT_OK(dlock_lock_force_release_flags(admin, "adm:force", DLOCK_FORCE_FOREIGN, &was));
  ASSERT_EQ(was, 1);
  cli(out, sizeof out, "EXISTS adm:force");
  ASSERT_STR_EQ(out, "0");
  /* The flag changes nothing for dlock's own locks and free names. */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_lock_force_release_flags(admin, "adm:force", DLOCK_FORCE_FOREIGN, &was));
  ASSERT_EQ(was, 1);
  ASSERT_OK(dlock_lock_force_release_flags(admin, "adm:force", DLOCK_FORCE_FOREIGN, &was));
  ASSERT_EQ(was, 0);
  ASSERT_STATUS(dlock_lock_force_release_flags(admin, "adm:force", 2, NULL), DLOCK_EINVAL);
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(admin);
}

/* A forced release leaves a tombstone, so that the holder learns "deleted",
 * not "expired"; a plain DEL still reads as expired (test_mutex.c). */
TEST(a_forced_release_is_reported_to_the_holder_as_deleted) {
  dlock_client *c = client(), *admin = client(), *c2 = client();
  char out[128];
  /* (1) extend finds the tombstone */
  dlock_mutex *m = mutex(c, "adm:del", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_lock_force_release(admin, "adm:del", NULL));
  cli(out, sizeof out, "HEXISTS {adm:del}:waiters deleted");
  ASSERT_STR_EQ(out, "1");
  cli(out, sizeof out, "PTTL {adm:del}:waiters");
  long long ttl = atoll(out);
  ASSERT(ttl > 0 && ttl <= 10000); /* no longer than the lease it cut short */
  ASSERT_STATUS(dlock_mutex_extend(m, 10000), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "deleted");
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_DELETED);
  ASSERT_CONTAINS(dlock_lost_reason_str(DLOCK_LOST_DELETED), "deleted");
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  /* (2) release finds it, also after another owner took the lock */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_lock_force_release(admin, "adm:del", NULL));
  dlock_mutex *other = mutex(c2, "adm:del", 10000);
  ASSERT_OK(dlock_mutex_acquire(other, 0));
  ASSERT_STATUS(dlock_mutex_release(m), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "deleted the key");
  ASSERT_EQ(dlock_mutex_is_held(other), 1); /* untouched */
  ASSERT_OK(dlock_mutex_release(other));
  /* (3) the watchdog reports it */
  dlock_mutex *w = mutex(c, "adm:del-wd", 0);
  dlock_mutex_free(m);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 900;
  dlock_mutex_free(w);
  ASSERT_OK(dlock_mutex_new(&w, c, "adm:del-wd", &mo));
  ASSERT_OK(dlock_mutex_acquire(w, 0));
  ASSERT_OK(dlock_lock_force_release(admin, "adm:del-wd", NULL));
  for (int i = 0; i < 100 && dlock_mutex_lost(w) == DLOCK_LOST_NONE; i++) th_sleep_ms(50 * th_time_factor());
  ASSERT_EQ(dlock_mutex_lost(w), DLOCK_LOST_DELETED);
  dlock_mutex_release(w);
  dlock_mutex_free(w);
  dlock_mutex_free(other);
  dlock_client_free(c);
  dlock_client_free(c2);
  dlock_client_free(admin);
}

/* An application's key (no expiry, no {K}:meta) would never be released:
 * the acquire fails at once rather than wait forever. */
TEST(an_acquire_on_an_application_key_without_expiry_fails_fast) {
  dlock_client *c = client();
  char out[128];
  cli(out, sizeof out, "SET adm:appkey some-data");
  dlock_mutex *m = mutex(c, "adm:appkey", 10000);
  long long t0 = wall_ms();
  ASSERT_STATUS(dlock_mutex_acquire(m, 5000), DLOCK_EFOREIGN);
  ASSERT(wall_ms() - t0 < 2500);
  ASSERT_CONTAINS(dlock_mutex_errmsg(m), "not a dlock lock");
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EFOREIGN);
  cli(out, sizeof out, "GET adm:appkey");
  ASSERT_STR_EQ(out, "some-data"); /* left alone */
  cli(out, sizeof out, "EXISTS {adm:appkey}:queue {adm:appkey}:waiters");
  ASSERT_STR_EQ(out, "0"); /* not queued either */
  /* Another library's lock has an expiry: that is waited for as usual. */
  cli(out, sizeof out, "SET adm:appkey 0123456789abcdef PX 10000");
  ASSERT_STATUS(dlock_mutex_acquire(m, 0), DLOCK_EBUSY);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_database_the_server_does_not_have_is_edb) {
  char url[256];
  snprintf(url, sizeof url, "%s/99", srv.url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &o), DLOCK_EDB);
  ASSERT_CONTAINS(dlock_last_error(), "database 99");
  ASSERT(c == NULL);
}

/* Issue 23: the seam's optional parts. A single server keeps nothing to
 * prune (success, saying why, as dlock_client_setup does) and has no
 * independent nodes (the query hook answers for them). */
TEST(prune_on_a_server_that_keeps_nothing_answers_0_and_says_why) {
  dlock_client *c = client();
  int64_t pruned = -1;
  ASSERT_OK(dlock_client_prune(c, 0, &pruned));
  ASSERT(pruned == 0);
  ASSERT_CONTAINS(dlock_last_error(), "nothing to prune on");
  ASSERT_STATUS(dlock_client_prune(c, -1, &pruned), DLOCK_EINVAL); /* the age is still checked */
  ASSERT(dlock_client_node_count(c) == 0);
  ASSERT(strcmp(dlock_client_node_name(c, 0), "") == 0);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_STATUS(dlock_lock_info_get_node(c, "adm:nodes", 0, &info), DLOCK_EINVAL);
  dlock_check chk[4];
  ASSERT_STATUS(dlock_client_check_node(c, 0, chk, 4), DLOCK_EINVAL);
  dlock_client_free(c);
}

TEST(a_waiter_is_woken_promptly_by_a_forced_release) {
  dlock_client *c = client(), *c2 = client(), *admin = client();
  /* Watchdog mode (30 s lease): the waiter's own re-check would come after 5 s. */
  dlock_mutex *a = mutex(c, "adm:force-wake", 0), *b = mutex(c2, "adm:force-wake", 0);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fa = dlock_mutex_fence(a);
  th_waiter w = {b, 15000, -99, 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, th_wait_for_lock, &w);
  th_sleep_ms(600);
  ASSERT_EQ(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), 0);
  long long forced = th_now_ms();
  int was = -1;
  int rc = dlock_lock_force_release(admin, "adm:force-wake", &was);
  pthread_join(th, NULL);
  ASSERT_OK(rc);
  ASSERT_EQ(was, 1);
  ASSERT_OK(w.rc);
  ASSERT(w.fence > fa);
  long long took = w.acquired_at - forced;
  printf("  waiter got the lock %lld ms after the forced release\n", took);
  ASSERT(took < 2500);
  /* The old holder finds out. */
  ASSERT_STATUS(dlock_mutex_release(a), DLOCK_ENOTHELD);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(c2);
  dlock_client_free(admin);
}

/* ---- Guard ---- */

TEST(the_guard_admits_equal_or_higher_tokens_and_rejects_lower_ones) {
  dlock_client *c = client();
  char out[128];
  cli(out, sizeof out, "DEL {adm:res}:guard");
  ASSERT_OK(dlock_guard_check(c, "adm:res", 5));
  cli(out, sizeof out, "GET {adm:res}:guard");
  ASSERT_STR_EQ(out, "5");
  ASSERT_OK(dlock_guard_check(c, "adm:res", 5));
  ASSERT_OK(dlock_guard_check(c, "adm:res", 6));
  ASSERT_STATUS(dlock_guard_check(c, "adm:res", 5), DLOCK_ESTALE);
  ASSERT_CONTAINS(dlock_last_error(), "stale");
  ASSERT_CONTAINS(dlock_last_error(), "adm:res");
  ASSERT_STATUS(dlock_guard_check(c, "adm:res", 1), DLOCK_ESTALE);
  cli(out, sizeof out, "GET {adm:res}:guard");
  ASSERT_STR_EQ(out, "6");
  /* Numeric, not textual, order: 10 > 9. */
  ASSERT_OK(dlock_guard_check(c, "adm:res", 9));
  ASSERT_OK(dlock_guard_check(c, "adm:res", 10));
  ASSERT_STATUS(dlock_guard_check(c, "adm:res", 9), DLOCK_ESTALE);
  /* Token 0 is never issued. */
  ASSERT_STATUS(dlock_guard_check(c, "adm:res", 0), DLOCK_ERANGE);
  cli(out, sizeof out, "GET {adm:res}:guard");
  ASSERT_STR_EQ(out, "10");
  /* Resources are independent. */
  ASSERT_OK(dlock_guard_check(c, "adm:res-other", 1));
  dlock_client_free(c);
}

TEST(the_guard_compares_tokens_near_2_63_exactly) {
  dlock_client *c = client();
  char out[128];
  ASSERT_OK(dlock_guard_check(c, "adm:big", INT64_MAX - 1));
  cli(out, sizeof out, "GET {adm:big}:guard");
  ASSERT_STR_EQ(out, "9223372036854775806");
  ASSERT_OK(dlock_guard_check(c, "adm:big", INT64_MAX));
  cli(out, sizeof out, "GET {adm:big}:guard");
  ASSERT_STR_EQ(out, "9223372036854775807");
  ASSERT_STATUS(dlock_guard_check(c, "adm:big", INT64_MAX - 1), DLOCK_ESTALE);
  ASSERT_CONTAINS(dlock_last_error(), "9223372036854775807");
  ASSERT_OK(dlock_guard_check(c, "adm:big", INT64_MAX));
  /* Above 2^63-1 no token is a dlock fence (test_fence.c has more). */
  ASSERT_STATUS(dlock_guard_check(c, "adm:big", UINT64_MAX), DLOCK_ERANGE);
  /* Beyond the 53 bits of a double: 2^53 + 1 vs 2^53. */
  ASSERT_OK(dlock_guard_check(c, "adm:dbl", 9007199254740993ULL));
  ASSERT_STATUS(dlock_guard_check(c, "adm:dbl", 9007199254740992ULL), DLOCK_ESTALE);
  cli(out, sizeof out, "GET {adm:dbl}:guard");
  ASSERT_STR_EQ(out, "9007199254740993");
  dlock_client_free(c);
}

TEST(the_guard_rejects_a_holder_whose_lock_was_taken_over) {
  dlock_client *c = client(), *c2 = client();
  dlock_mutex *a = mutex(c, "adm:fenced", 10000), *b = mutex(c2, "adm:fenced", 10000);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fa = dlock_mutex_fence(a);
  ASSERT_OK(dlock_guard_check(c, "adm:fenced-store", fa));
  /* a is paused; the lock is force-released and b takes over and writes. */
  ASSERT_OK(dlock_lock_force_release(c2, "adm:fenced", NULL));
  ASSERT_OK(dlock_mutex_acquire(b, 0));
  uint64_t fb = dlock_mutex_fence(b);
  ASSERT(fb > fa);
  ASSERT_OK(dlock_guard_check(c2, "adm:fenced-store", fb));
  /* a wakes up and tries to write with its old token. */
  ASSERT_STATUS(dlock_guard_check(c, "adm:fenced-store", fa), DLOCK_ESTALE);
  ASSERT_OK(dlock_guard_check(c2, "adm:fenced-store", fb));
  ASSERT_OK(dlock_mutex_release(b));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TEST(the_guard_key_carries_the_client_prefix) {
  dlock_client *c = client_with_prefix("gp:");
  ASSERT_OK(dlock_guard_check(c, "store", 3));
  char out[64];
  cli(out, sizeof out, "GET {gp:store}:guard");
  ASSERT_STR_EQ(out, "3");
  cli(out, sizeof out, "EXISTS {store}:guard");
  ASSERT_STR_EQ(out, "0");
  dlock_client_free(c);
}

/* ---- dlock_with_lock ---- */

struct with_arg {
  uint64_t fence;
  int calls;
  char key_seen[64];
  int result;
};

static int with_fn(uint64_t fence, void *arg) {
  struct with_arg *a = arg;
  a->fence = fence;
  a->calls++;
  cli(a->key_seen, sizeof a->key_seen, "EXISTS adm:with");
  return a->result;
}

TEST(guard_check_highest_gives_the_highest_token_seen) {
  dlock_client *c = client();
  uint64_t hi = 1;
  ASSERT_OK(dlock_guard_check_highest(c, "adm:hi", 50, &hi));
  ASSERT_EQ(hi, 50);
  ASSERT_STATUS(dlock_guard_check_highest(c, "adm:hi", 20, &hi), DLOCK_ESTALE);
  ASSERT_EQ(hi, 50);
  ASSERT_OK(dlock_guard_check_highest(c, "adm:hi", 9223372036854775807ULL, &hi));
  ASSERT_EQ(hi, 9223372036854775807ULL);
  ASSERT_STATUS(dlock_guard_check_highest(c, "adm:hi", 0, &hi), DLOCK_ERANGE);
  ASSERT_EQ(hi, 0);
  ASSERT_OK(dlock_guard_check_highest(c, "adm:hi2", 5, NULL));
  dlock_client_free(c);
}

TEST(with_lock_runs_the_function_with_the_fence_and_releases) {
  dlock_client *c = client();
  struct with_arg a = {0, 0, "", 42};
  ASSERT_EQ(dlock_with_lock(c, "adm:with", 0, with_fn, &a), 42);
  ASSERT_EQ(a.calls, 1);
  ASSERT(a.fence > 0);
  ASSERT_STR_EQ(a.key_seen, "1"); /* held while it ran */
  char out[64];
  cli(out, sizeof out, "EXISTS adm:with");
  ASSERT_STR_EQ(out, "0");
  uint64_t first = a.fence;
  a.result = 0;
  ASSERT_EQ(dlock_with_lock(c, "adm:with", 1000, with_fn, &a), 0);
  ASSERT_EQ(a.calls, 2);
  ASSERT(a.fence > first);
  cli(out, sizeof out, "EXISTS adm:with");
  ASSERT_STR_EQ(out, "0");
  dlock_client_free(c);
}

TEST(with_lock_on_a_busy_lock_returns_ebusy_without_running_the_function) {
  dlock_client *c = client(), *c2 = client();
  dlock_mutex *m = mutex(c2, "adm:with", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  struct with_arg a = {0, 0, "", 42};
  ASSERT_STATUS(dlock_with_lock(c, "adm:with", 0, with_fn, &a), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  ASSERT_STATUS(dlock_with_lock(c, "adm:with", 300, with_fn, &a), DLOCK_EBUSY);
  ASSERT(th_now_ms() - t0 >= 300);
  ASSERT_EQ(a.calls, 0);
  char out[64];
  cli(out, sizeof out, "ZCARD {adm:with}:queue");
  ASSERT_STR_EQ(out, "0");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(c2);
}

struct release_later {
  dlock_mutex *m;
  long ms;
};

static void *hold_then_release(void *arg) {
  struct release_later *r = arg;
  if (dlock_mutex_acquire(r->m, 0) != 0) return (void *)1;
  th_sleep_ms(r->ms);
  dlock_mutex_release(r->m);
  return NULL;
}

TEST(with_lock_waits_for_the_holder_and_then_runs) {
  dlock_client *c = client(), *c2 = client();
  dlock_mutex *m = mutex(c2, "adm:with", 0);
  struct release_later r = {m, 500};
  pthread_t th;
  pthread_create(&th, NULL, hold_then_release, &r);
  th_sleep_ms(150);
  struct with_arg a = {0, 0, "", 5};
  long long t0 = th_now_ms();
  int rc = dlock_with_lock(c, "adm:with", 10000, with_fn, &a);
  long long took = th_now_ms() - t0;
  void *hres;
  pthread_join(th, &hres);
  ASSERT(hres == NULL);
  ASSERT_EQ(rc, 5);
  ASSERT_EQ(a.calls, 1);
  ASSERT(took >= 200 && took < 3000); /* the hand-off, not a 5 s re-check */
  dlock_mutex_free(m);
  dlock_client_free(c);
  dlock_client_free(c2);
}

struct steal_arg {
  dlock_client *admin;
  int calls;
};

static int stolen_fn(uint64_t fence, void *arg) {
  (void)fence;
  struct steal_arg *s = arg;
  s->calls++;
  dlock_lock_force_release(s->admin, "adm:with-lost", NULL);
  return 3;
}

TEST(with_lock_reports_elost_when_the_lock_was_taken_away_while_fn_ran) {
  dlock_client *c = client(), *admin = client();
  struct steal_arg s = {admin, 0};
  ASSERT_STATUS(dlock_with_lock(c, "adm:with-lost", 0, stolen_fn, &s), DLOCK_ELOST);
  ASSERT_EQ(s.calls, 1);
  dlock_client_free(c);
  dlock_client_free(admin);
}

TEST_MAIN()
