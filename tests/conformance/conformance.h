/*
 * conformance.h - the backend conformance suite (docs/conformance.md): one
 * contract, written once on the public API (dlock.h), run on every backend
 * and topology through a fixture.
 *
 * A fixture starts its servers once for all scenarios, makes clients in an
 * isolated space (a key prefix, a ZooKeeper namespace, a PostgreSQL
 * schema), and says what it can do to them (freeze, lose a reply). Its
 * 'caps' are what the docs promise for that deployment: a scenario whose
 * feature the library refuses with its documented "not offered" error is
 * "not offered" when the fixture does not claim it, and a failure when it
 * does; a feature that works although the fixture does not claim it is a
 * failure too (the docs and the library disagree). Nothing passes silently.
 */
#ifndef DLOCK_CONFORMANCE_H
#define DLOCK_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"

/* What the docs say a deployment offers. */
#define CONF_FENCE 0x01u /* fences rise per name (not: fence 0) */
#define CONF_SEMAPHORE 0x02u
#define CONF_RWLOCK 0x04u
#define CONF_LATCH 0x08u
#define CONF_SCHED 0x10u /* fixed-rate jobs */
#define CONF_GUARD 0x20u
#define CONF_ADMIN 0x40u         /* list and force release */
#define CONF_DEADLINE 0x80u      /* a hold ends at a local deadline (valid_until) */
#define CONF_QUEUE 0x100u        /* waiters queue by arrival, counted in the status */
#define CONF_FORCE_NOTIFY 0x200u /* a forced release notifies the holder (not: its next renewal) */
#define CONF_JOBS 0x400u         /* a job's state: pause, resume, trigger (docs/scheduler.md) */
#define CONF_WATCH_NOTIFY 0x800u /* a watch of a named lock is woken by the server, not a timer (bound 0) */

/* Which reply conf_fixture.drop_next_reply() loses. */
typedef enum conf_call { CONF_ACQUIRE, CONF_RELEASE } conf_call;

typedef struct conf_fixture {
  const char *name; /* the column: "redis", "zk", "pg-lease", ... */
  unsigned caps;
  /* Start the servers: 1 up; 0 cannot run here (why: a missing package). */
  int (*start)(char *why, size_t len);
  void (*stop)(void);
  /* A new client in 'space' (a short word), or NULL with dlock_last_error().
   * Called in the children of conf_spawn() too, after adopt(). */
  dlock_client *(*client)(const char *space);
  /* What client() needs, as text (a URL), and how a child takes it in. */
  const char *(*state)(void);
  void (*adopt)(const char *state);
  /* Optional (NULL: the fixture has no such fault). A client whose
   * connections go through a fault proxy; drop the reply to the next
   * 'call' of the lock 'name' (after it ran); replies dropped so far. */
  dlock_client *(*proxy_client)(const char *space);
  void (*drop_next_reply)(conf_call call, const char *name);
  int (*dropped)(void);
  /* Optional: make the servers stop answering (SIGSTOP) and resume. thaw()
   * returns once the deployment serves again. */
  void (*freeze)(void);
  void (*thaw)(void);
  /* How long a holder killed with SIGKILL keeps the lock at most, in ms,
   * with the clients this fixture makes: the lease or the session. */
  int64_t kill_free_ms;
} conf_fixture;

/* The current fixture (runner.c). */
extern const conf_fixture *conf_fx;

/* A client of the fixture in 'space', or the test fails. */
dlock_client *conf_client(const char *space);
/* End the scenario as "not offered" (longjmp, like TEST_FAIL). */
void conf_not_offered(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* The first call that may be refused returned 'rc' for the feature 'cap'
 * ("semaphore"...): not offered, a failure, or go on (rc 0). */
void conf_offered(unsigned cap, const char *what, int rc);
/* End the scenario as "n/a": the fixture cannot inject the fault it needs
 * (the library is not at fault, and the docs promise it all the same). */
void conf_not_applicable(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define CONF_NEED(hook, what)                                                                 \
  do {                                                                                        \
    if (!conf_fx->hook) conf_not_applicable("the %s fixture cannot %s", conf_fx->name, what); \
  } while (0)

typedef struct conf_scenario {
  const char *name;
  void (*fn)(void);
} conf_scenario;

/* contract.c: the mutex contract, then every other lock kind (kinds.c),
 * then the scenarios that may disturb a deployment (conf_last). */
extern const conf_scenario conf_contract[], conf_kinds[], conf_last[];
extern const size_t conf_contract_len, conf_kinds_len, conf_last_len;
/* election.c: leader election on the mutex (docs/election.md). */
extern const conf_scenario conf_election[];
extern const size_t conf_election_len;

/* Handles that the runner frees after the scenario (handles first, in
 * reverse order, then clients), also when it failed: a scenario frees
 * nothing it got from these. The lock kinds end "not offered" or fail as
 * conf_offered() decides when _new refuses. */
dlock_mutex *conf_mutex(dlock_client *c, const char *name, const dlock_mutex_options *o);
dlock_semaphore *conf_sem(dlock_client *c, const char *name, int permits);
dlock_rwlock *conf_rw(dlock_client *c, const char *name, int side);
dlock_latch *conf_latch(dlock_client *c, const char *name);
dlock_multi *conf_multi(dlock_client *c, const char *const *names, size_t n);
void conf_adopt_client(dlock_client *c);
void conf_adopt_sched(dlock_sched *s);
/* Run fn(arg) in a child process: a fresh image of this program (fork,
 * then exec), so that the threads of the parent (fault proxies, clients)
 * leave no lock behind in it. The child makes its clients with
 * conf_fx->client(); file descriptors and conf_shared() reach it. */
pid_t conf_spawn(int (*fn)(void *), intptr_t arg);
/* 'size' bytes (zeroed) shared by the scenario and its children; the same
 * memory for every call in one scenario, gone when it ends. */
void *conf_shared(size_t size);

void conf_adopt_election(dlock_election *e); /* election.c */
void conf_adopt_observer(dlock_observer *o);
/* Free a handle of the above before the scenario ends (it releases). */
void conf_free(void *handle);
void conf_free_all(void);

/* 'name''s registered waiters, -1 on error. */
int64_t conf_waiters(dlock_client *c, const char *name);
/* Wait (bounded by 'ms') until 'name' has at least 'n' waiters (n < 0:
 * none). 1 then, 0 on timeout. */
int conf_wait_waiters(dlock_client *c, const char *name, int64_t n, long ms);

/* The fixtures. */
extern const conf_fixture conf_fx_redis, conf_fx_tls, conf_fx_sentinel, conf_fx_cluster, conf_fx_redlock;
extern const conf_fixture conf_fx_zk;
extern const conf_fixture conf_fx_pg_lease, conf_fx_pg_advisory;
extern const conf_fixture conf_fx_mysql_lease, conf_fx_mysql_advisory;

#endif
