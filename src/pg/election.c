/*
 * election.c - what leader election needs of PostgreSQL beyond the mutex
 * (core/election.c): proclaim, an UPDATE of the owner info of the hold's
 * row while its token holds it by the server's clock. Lease mode only:
 * advisory mode has no fences, so no elections (core/election.c says so).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/pg_internal.h"

static int pg_proclaim(dlock_mutex *m, const char *token, const char *value) {
  dlock__pg *pg = (dlock__pg *)m->client->be;
  char sql[256 + DLOCK__PG_SCHEMA_MAX];
  snprintf(sql, sizeof sql,
           "UPDATE \"%s\".locks SET owner_info = $3 WHERE name = $1 AND token = $2 AND NOT released "
           "AND expires > clock_timestamp()",
           pg->schema);
  const char *vals[3] = {m->name, token, value};
  PGresult *r = NULL;
  /* Twice-safe: the same value for the same token again. */
  int rc = dlock__pg_run(pg, sql, 3, vals, 0, 1, &r, NULL, NULL);
  if (rc) return rc;
  int n = atoi(PQcmdTuples(r));
  PQclear(r);
  if (n != 1)
    return dlock__error(DLOCK_ENOTHELD,
                        "lock '%s' on %s is no longer held by this candidate (its lease ran out, "
                        "or it was evicted); the value was not written",
                        m->name, pg->display);
  return 0;
}

/* The hold's row goes only while its fence is still 'epoch' (one UPDATE). */
static int pg_evict(dlock_client *c, const char *name, uint64_t epoch, int *evicted) {
  char full[512];
  if (snprintf(full, sizeof full, "%s%s", c->prefix ? c->prefix : "", name) >= (int)sizeof full)
    return dlock__error(DLOCK_EINVAL, "election name '%.100s...' is too long", name);
  return dlock__pg_force_release_fence((dlock__pg *)c->be, full, epoch, evicted);
}

const struct dlock__election_ops dlock__pg_election_ops = {
    .proclaim = pg_proclaim,
    .evict = pg_evict,
};
