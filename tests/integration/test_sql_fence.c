/*
 * test_sql_fence.c - the fencing pattern for a SQL row, on a real database
 * (sqlite3): the row remembers the highest fence that wrote it, and an
 * UPDATE ... WHERE fence <= $token turns a stale holder's write into a no-op.
 */
#include <stdarg.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;
static char db[300];

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
  snprintf(db, sizeof db, "%s/shop.db", srv.dir);
}

void test_teardown(void) { th_redis_stop(&srv); }

/* Run SQL with sqlite3(1); returns the first line of output as a number. */
static long long sql(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long sql(const char *fmt, ...) {
  char stmt[1024], cmd[1500], out[128] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(stmt, sizeof stmt, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\"", db, stmt);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  if (!fgets(out, sizeof out, p)) out[0] = '\0';
  pclose(p);
  return atoll(out);
}

/* The guarded write: decrement stock only if no newer fence has written. */
static long long deduct(uint64_t fence) {
  return sql("UPDATE stock SET n = n - 1, fence = %llu WHERE sku = 42 AND fence <= %llu; SELECT changes();",
             (unsigned long long)fence, (unsigned long long)fence);
}

TEST(a_stale_holders_update_changes_no_row) {
  sql("CREATE TABLE stock (sku INTEGER PRIMARY KEY, n INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0);"
      "INSERT INTO stock (sku, n) VALUES (42, 100); SELECT 0;");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_mutex_options short_lease;
  dlock_mutex_options_init(&short_lease);
  short_lease.lease_ms = 300 * th_time_factor();
  dlock_mutex *zombie = NULL, *next = NULL;
  ASSERT_OK(dlock_mutex_new(&zombie, c, "stock:42", &short_lease));
  ASSERT_OK(dlock_mutex_new(&next, c, "stock:42", NULL));

  ASSERT_OK(dlock_mutex_acquire(zombie, 0));
  uint64_t old_fence = dlock_mutex_fence(zombie);
  ASSERT_EQ(deduct(old_fence), 1);
  ASSERT_EQ(deduct(old_fence), 1); /* the same holder may write again */

  /* The first holder stalls past its lease; the next one takes over. */
  ASSERT_OK(dlock_mutex_acquire(next, 10000 * th_time_factor()));
  uint64_t new_fence = dlock_mutex_fence(next);
  ASSERT(new_fence > old_fence);
  ASSERT_EQ(deduct(new_fence), 1);

  /* The stalled holder wakes and writes: nothing changes. */
  ASSERT_EQ(deduct(old_fence), 0);
  ASSERT_EQ(sql("SELECT n FROM stock WHERE sku = 42;"), 97);
  ASSERT_EQ(sql("SELECT fence FROM stock WHERE sku = 42;"), (long long)new_fence);
  ASSERT_STATUS(dlock_mutex_release(zombie), DLOCK_ENOTHELD);
  ASSERT_OK(dlock_mutex_release(next));
  dlock_mutex_free(zombie);
  dlock_mutex_free(next);
  dlock_client_free(c);
}

TEST_MAIN()
