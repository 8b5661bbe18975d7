/*
 * pg_fenced_stock.c - the one-transaction fenced write on PostgreSQL: the
 * lock and its fence live in the same database as the data, so the write
 * that the lock protects checks the fence in the same statement:
 *
 *   UPDATE stock SET n = n - 1, fence = $1 WHERE sku = $2 AND fence <= $1
 *
 * A holder whose lease ran out while it was paused (GC, swap, SIGSTOP) and
 * whose lock someone else took since carries an older fence: its UPDATE
 * matches no row and changes nothing. No second system, no guard service.
 *
 * The lock comes from dlock's PostgreSQL backend. Until that backend is
 * wired behind the public API (dlock_client_new with a postgres:// URL, see
 * docs/postgres.md "Wiring"), this example calls the module directly and is
 * built inside the source tree (tests/CMakeLists.txt); with the public API
 * the three dlock__pg_* calls become dlock_mutex_lock(), dlock_mutex_fence()
 * and dlock_mutex_unlock().
 *
 * Usage: pg_fenced_stock URL SKU COUNT HOLD_MS LEASE_MS
 * Takes the lock COUNT times; each time sleeps HOLD_MS while holding it
 * (longer than LEASE_MS to play a paused holder), then decrements the stock
 * with the fenced UPDATE. Prints "applied A rejected R".
 * The table: CREATE TABLE stock (sku text PRIMARY KEY, n bigint, fence bigint NOT NULL DEFAULT 0)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <libpq-fe.h>

#include "pg/pg.h"

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s URL SKU COUNT HOLD_MS LEASE_MS\n", argv[0]);
    return 2;
  }
  const char *url = argv[1], *sku = argv[2];
  int count = atoi(argv[3]);
  long hold_ms = atol(argv[4]);
  int64_t lease_ms = atoll(argv[5]);

  dlock__pg *pg;
  if (dlock__pg_connect(url, NULL, &pg) != 0) {
    fprintf(stderr, "pg_fenced_stock: %s\n", dlock_last_error());
    return 1;
  }
  /* The application's own connection for its own table. The example's URL
   * carries no dlock parameters, so libpq takes it as it is. */
  PGconn *db = PQconnectdb(url);
  if (PQstatus(db) != CONNECTION_OK) {
    fprintf(stderr, "pg_fenced_stock: %s", PQerrorMessage(db));
    return 1;
  }
  int applied = 0, rejected = 0, failed = 0;
  char lockname[300];
  snprintf(lockname, sizeof lockname, "stock:%s", sku);
  for (int i = 0; i < count; i++) {
    dlock__pg_hold h;
    if (dlock__pg_acquire(pg, lockname, lease_ms, "pg_fenced_stock", 30000, NULL, &h) != 0) {
      fprintf(stderr, "pg_fenced_stock: %s\n", dlock_last_error());
      failed++;
      continue;
    }
    sleep_ms(hold_ms); /* the work; a pause here may outlive the lease */
    char fence[24];
    snprintf(fence, sizeof fence, "%" PRIu64, h.fence);
    const char *vals[2] = {fence, sku};
    PGresult *r =
        PQexecParams(db, "UPDATE stock SET n = n - 1, fence = $1::bigint WHERE sku = $2 AND fence <= $1::bigint", 2,
                     NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      fprintf(stderr, "pg_fenced_stock: %s", PQresultErrorMessage(r));
      failed++;
    } else if (atoi(PQcmdTuples(r)) == 1) {
      applied++;
    } else {
      rejected++; /* a newer holder already wrote: our fence is stale */
    }
    PQclear(r);
    dlock__pg_release(pg, &h); /* ENOTHELD after a lease that ran out: fine here */
  }
  printf("applied %d rejected %d failed %d\n", applied, rejected, failed);
  PQfinish(db);
  dlock__pg_close(pg);
  return failed ? 1 : 0;
}
