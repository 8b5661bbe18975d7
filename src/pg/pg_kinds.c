/*
 * pg_kinds.c - a descriptor per lock kind (mutex, semaphore, the two sides
 * of a read-write lock) for the one acquire loop of pg_lock.c: its
 * statements, the acquire statement's parameters, where its answer says
 * what, and its messages. See docs/design.md, "One lock machine, a
 * descriptor per kind".
 */
#include <stdio.h>

#include "pg/pg_internal.h"

/* The mutex: sql_acquire's parameters. */
static int mutex_args(const dlock__pg_hold *h, const dlock__pg_try *t, const char **vals) {
  const char *v[] = {h->name, h->token, t->lease, t->owner_info, t->hb, t->live};
  for (int i = 0; i < 6; i++) vals[i] = v[i];
  return 6;
}

/* The family (semaphores, read-write locks): sql_fam_acquire's. */
static int family_args(const dlock__pg_hold *h, const dlock__pg_try *t, const char **vals) {
  const char *v[] = {h->name, h->token, h->side, t->permits, t->lease, t->owner_info, h->shadow, t->hb, t->live};
  for (int i = 0; i < 9; i++) vals[i] = v[i];
  return 9;
}

static int mutex_busy(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen) {
  return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another owner on %s (%lld ms left on its lease)", h->name,
                      pg->display, (long long)seen->holder_ms);
}

/* A try finds a permit free but waiters ahead of it. */
static int sem_busy_free(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen) {
  if (seen->held < 0 || seen->held >= h->permits) return 0;
  long long ahead = seen->ahead > 0 ? (long long)seen->ahead : 0;
  return dlock__error(DLOCK_EBUSY,
                      "%lld of %d permits of semaphore '%s' on %s are held and %lld waiter%s ahead of this "
                      "caller, who %s the free permit%s first; a try does not go ahead of waiters (first come, "
                      "first served)",
                      (long long)seen->held, h->permits, h->name, pg->display, ahead, ahead == 1 ? " is" : "s are",
                      ahead == 1 ? "gets" : "get", h->permits - seen->held == 1 ? "" : "s");
}

static int sem_busy(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen) {
  return dlock__error(DLOCK_EBUSY,
                      "all %d permits of semaphore '%s' on %s are held (the first lease ends in "
                      "%lld ms)",
                      h->permits, h->name, pg->display, (long long)seen->holder_ms);
}

static int rw_busy(dlock__pg *pg, const dlock__pg_hold *h, const dlock__pg_seen *seen) {
  return dlock__error(DLOCK_EBUSY, "read-write lock '%s' on %s is held %s (the first lease ends in %lld ms)", h->name,
                      pg->display, h->side[0] == 'r' ? "for writing, or a writer waits ahead" : "by others",
                      (long long)seen->holder_ms);
}

/* Indexed by the core's dlock__kind. The mutex's acquire answers (fence,
 * holder's ms left, _, the other kind holding the name, waiters ahead, our
 * waiter row); the family's (fence, holder's ms left, refusal, _, live
 * holds, waiters ahead, our waiter row): see pg_sql.c. */
static const dlock__pg_kind KINDS[] = {
    [DLOCK__KIND_MUTEX] = {"", "mutex", DLOCK__PG_SQL_ACQUIRE, DLOCK__PG_SQL_RELEASE, mutex_args, 3, "kind ", -1, 4, 5,
                           NULL, mutex_busy},
    [DLOCK__KIND_SEMAPHORE] = {"p", "semaphore", DLOCK__PG_SQL_FAM_ACQUIRE, DLOCK__PG_SQL_FAM_RELEASE, family_args, 2,
                               "", 4, 5, 6, sem_busy_free, sem_busy},
    [DLOCK__KIND_READ] = {"r", "read-write lock", DLOCK__PG_SQL_FAM_ACQUIRE, DLOCK__PG_SQL_FAM_RELEASE, family_args, 2,
                          "", 4, 5, 6, NULL, rw_busy},
    [DLOCK__KIND_WRITE] = {"w", "read-write lock", DLOCK__PG_SQL_FAM_ACQUIRE, DLOCK__PG_SQL_FAM_RELEASE, family_args, 2,
                           "", 4, 5, 6, NULL, rw_busy},
};

const dlock__pg_kind *dlock__pg_kind_of(const dlock__pg_hold *h) {
  for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
    if (KINDS[i].side[0] == h->side[0]) return &KINDS[i];
  return &KINDS[DLOCK__KIND_MUTEX];
}

const char *dlock__pg_kind_side(dlock__kind kind) {
  return (size_t)kind < sizeof KINDS / sizeof KINDS[0] ? KINDS[kind].side : "";
}
