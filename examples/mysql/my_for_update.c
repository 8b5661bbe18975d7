/*
 * my_for_update.c - the two ways the articles' `SELECT ... FOR UPDATE` lock
 * silently fails on MySQL/MariaDB (InnoDB), and the fenced write that holds
 * (docs/mysql.md, "The guard in SQL: the fenced write").
 *
 *  1. Autocommit on: each statement is its own transaction, so the row lock
 *     of `SELECT ... FOR UPDATE` ends with that SELECT. Two clients both
 *     "lock" the row at once, both read 100, both write 99: one sale is
 *     lost.
 *  2. No index on the column of the WHERE: InnoDB locks every row it scans,
 *     so locking item 'a' locks the whole table, and a client that wants
 *     item 'b' waits for it (here: until its 1 s lock wait timeout).
 *  3. The fenced write: the lock is dlock's (its lease on the database's
 *     clock, its fence rising per name), and the write itself checks the
 *     fence in one statement, the optimistic lock made safe:
 *
 *       UPDATE stock SET qty = qty - 1, fence = F WHERE item = ? AND fence <= F
 *
 *     A holder paused past its lease (GC, swap, SIGSTOP) wakes up with an
 *     older fence than the holder that took the lock meanwhile: its UPDATE
 *     changes no row. No autocommit setting and no index can break it.
 *
 * Usage: my_for_update HOST PORT USER PASSWORD DB
 * Creates the tables ex_stock and ex_stock_noidx in DB (dropped first).
 * Prints one line per demonstration; exit 0 when all three came out as
 * described above, 1 otherwise (2: usage, or the server refused).
 * The application's own statements use the MariaDB Connector/C directly
 * (mysql.h): that is the application's code, not dlock's.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mysql.h>

#include "dlock.h"

static const char *host, *user, *password, *db;
static unsigned port;

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static MYSQL *connect_app(void) {
  MYSQL *c = mysql_init(NULL);
  if (!c || !mysql_real_connect(c, host, user, password, db, port, NULL, CLIENT_FOUND_ROWS)) {
    fprintf(stderr, "my_for_update: cannot connect to %s:%u/%s: %s\n", host, port, db, c ? mysql_error(c) : "");
    exit(2);
  }
  return c;
}

/* One statement; its error (0 none). */
static unsigned sql(MYSQL *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static unsigned sql(MYSQL *c, const char *fmt, ...) {
  char q[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(q, sizeof q, fmt, ap);
  va_end(ap);
  if (mysql_real_query(c, q, strlen(q)) != 0) return mysql_errno(c);
  /* A SELECT's error (a lock wait timeout) may come after its columns. */
  MYSQL_RES *r = mysql_store_result(c);
  if (r)
    mysql_free_result(r);
  else if (mysql_field_count(c) > 0)
    return mysql_errno(c);
  return 0;
}

/* The first cell of a SELECT as a number (-1: an error). */
static long long value(MYSQL *c, const char *q) {
  if (mysql_real_query(c, q, strlen(q)) != 0) return -1;
  MYSQL_RES *r = mysql_store_result(c);
  MYSQL_ROW row = r ? mysql_fetch_row(r) : NULL;
  long long v = row && row[0] ? atoll(row[0]) : -1;
  if (r) mysql_free_result(r);
  return v;
}

static void must(unsigned err, MYSQL *c, const char *what) {
  if (err) {
    fprintf(stderr, "my_for_update: %s: %s\n", what, mysql_error(c));
    exit(2);
  }
}

/* 1. Autocommit on: both clients get the "lock" and one sale is lost. */
static int autocommit_on(MYSQL *a, MYSQL *b) {
  must(sql(a, "UPDATE ex_stock SET qty = 100 WHERE item = 'a'"), a, "reset");
  /* Both sessions run with autocommit = 1 (the server's default). */
  long long qa = value(a, "SELECT qty FROM ex_stock WHERE item = 'a' FOR UPDATE");
  long long qb = value(b, "SELECT qty FROM ex_stock WHERE item = 'a' FOR UPDATE"); /* not blocked */
  must(sql(a, "UPDATE ex_stock SET qty = %lld WHERE item = 'a'", qa - 1), a, "sale a");
  must(sql(b, "UPDATE ex_stock SET qty = %lld WHERE item = 'a'", qb - 1), b, "sale b");
  long long left = value(a, "SELECT qty FROM ex_stock WHERE item = 'a'");
  printf("1. autocommit on: both clients 'locked' the row (read %lld and %lld), two sales left %lld, not 98: %s\n", qa,
         qb, left, left == 99 ? "one sale lost (reproduced)" : "not reproduced");
  return left == 99;
}

/* 2. No index: locking one item locks the table; another item waits. */
static int missing_index(MYSQL *a, MYSQL *b) {
  must(sql(b, "SET SESSION innodb_lock_wait_timeout = 1"), b, "timeout");
  must(sql(a, "START TRANSACTION"), a, "begin");
  long long qa = value(a, "SELECT qty FROM ex_stock_noidx WHERE item = 'a' FOR UPDATE");
  must(sql(b, "START TRANSACTION"), b, "begin");
  unsigned e = sql(b, "SELECT qty FROM ex_stock_noidx WHERE item = 'b' FOR UPDATE");
  sql(b, "ROLLBACK");
  /* The same with an index (ex_stock's primary key): 'b' is free. */
  must(sql(a, "SELECT qty FROM ex_stock WHERE item = 'a' FOR UPDATE"), a, "lock a");
  must(sql(b, "START TRANSACTION"), b, "begin");
  unsigned e2 = sql(b, "SELECT qty FROM ex_stock WHERE item = 'b' FOR UPDATE");
  sql(b, "ROLLBACK");
  sql(a, "ROLLBACK");
  int waited = e == 1205; /* ER_LOCK_WAIT_TIMEOUT */
  printf("2. no index on item: with 'a' locked (qty %lld), locking 'b' %s; with the index it %s: %s\n", qa,
         waited ? "waited until its lock wait timeout" : "did not wait", e2 ? "failed too" : "went at once",
         waited && !e2 ? "the row lock was a table lock (reproduced)" : "not reproduced");
  return waited && !e2;
}

static dlock_mutex *lock_for(dlock_client *c, int64_t lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms; /* a fixed lease, not renewed: the paused holder's runs out */
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, "ex_stock:a", &mo) != 0) {
    fprintf(stderr, "my_for_update: %s\n", dlock_last_error());
    exit(2);
  }
  return m;
}

/* The fenced sale: 1 applied, 0 refused (a newer fence wrote first). */
static int fenced_sale(MYSQL *c, uint64_t fence) {
  must(sql(c, "UPDATE ex_stock SET qty = qty - 1, fence = %" PRIu64 " WHERE item = 'a' AND fence <= %" PRIu64, fence,
           fence),
       c, "fenced sale");
  return (int)mysql_affected_rows(c);
}

/* 3. The fenced write: a holder paused past its lease changes nothing. */
static int fenced(MYSQL *a, MYSQL *b) {
  must(sql(a, "UPDATE ex_stock SET qty = 100, fence = 0 WHERE item = 'a'"), a, "reset");
  char url[300];
  snprintf(url, sizeof url, "mysql://%s:%u/%s", host, port, db);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.username = user;
  o.password = password; /* not in the URL: never printed either way */
  dlock_client *ca = NULL, *cb = NULL;
  if (dlock_client_new(&ca, &o) != 0 || dlock_client_new(&cb, &o) != 0) {
    fprintf(stderr, "my_for_update: %s\n", dlock_last_error());
    exit(2);
  }
  dlock_mutex *ma = lock_for(ca, 500), *mb = lock_for(cb, 10000);
  int ok = dlock_mutex_acquire(ma, 0) == 0;
  uint64_t fa = dlock_mutex_fence(ma);
  sleep_ms(1200); /* A pauses past its 500 ms lease */
  ok = ok && dlock_mutex_acquire(mb, 5000) == 0;
  uint64_t fb = dlock_mutex_fence(mb);
  int b_applied = ok && fenced_sale(b, fb);
  dlock_mutex_release(mb);
  int a_applied = fenced_sale(a, fa); /* A wakes up and writes */
  dlock_mutex_release(ma);            /* DLOCK_ENOTHELD: its lease had run out */
  long long left = value(a, "SELECT qty FROM ex_stock WHERE item = 'a'");
  int held = ok && b_applied == 1 && a_applied == 0 && left == 99 && fb > fa;
  printf("3. fenced write: the new holder (fence %" PRIu64 ") sold one, the paused one (fence %" PRIu64
         ") changed %d rows, %lld left: %s\n",
         fb, fa, a_applied, left, held ? "held" : "NOT held");
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
  return held;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s HOST PORT USER PASSWORD DB\n", argv[0]);
    return 2;
  }
  host = argv[1];
  port = (unsigned)atoi(argv[2]);
  user = argv[3];
  password = argv[4];
  db = argv[5];
  MYSQL *a = connect_app(), *b = connect_app();
  must(sql(a, "DROP TABLE IF EXISTS ex_stock, ex_stock_noidx"), a, "drop");
  must(sql(a, "CREATE TABLE ex_stock (item VARCHAR(20) PRIMARY KEY, qty BIGINT NOT NULL, "
              "fence BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB"),
       a, "create");
  must(sql(a, "CREATE TABLE ex_stock_noidx (item VARCHAR(20) NOT NULL, qty BIGINT NOT NULL) ENGINE=InnoDB"), a,
       "create");
  must(sql(a, "INSERT INTO ex_stock VALUES ('a', 100, 0), ('b', 100, 0)"), a, "insert");
  must(sql(a, "INSERT INTO ex_stock_noidx VALUES ('a', 100), ('b', 100)"), a, "insert");
  int ok = autocommit_on(a, b);
  ok &= missing_index(a, b);
  ok &= fenced(a, b);
  mysql_close(a);
  mysql_close(b);
  return ok ? 0 : 1;
}
