/*
 * open_sp_review4.c - the fourth Sentinel/Cluster/PostgreSQL review's open
 * findings (reproductions that fail on today's code).
 *
 * Finding 1 (PostgreSQL lease mode, prune racing an acquire after a backward
 * clock step).
 *
 * The promise (docs/postgres.md, "prune"): "A name's row keeps its fences
 * rising when the clock steps back, so prune() raises fence_seq to the highest
 * fence it deletes (never lowers it): a name whose row was pruned gets a higher
 * fence next time, even after a backward step of the database clock"; and
 * (clock steps) "the next fence of the name is above the last, also when the
 * name's row was pruned in between".
 *
 * The attack: the acquire statement computes its new fence,
 * greatest(nextval(fence_seq), clock), while building the row it inserts,
 * BEFORE ON CONFLICT meets the name's row. A prune that has already deleted
 * that row (uncommitted) makes the acquire wait for it; prune then raises
 * fence_seq and commits; the acquire's insert goes on with the fence it
 * computed before the raise. After a backward step of the server's clock
 * (libfaketime, two hours) that fence is below the name's last fence.
 * To hold prune open between its DELETE of the name's row and its setval, a
 * session holds another expired row (FOR UPDATE) that the same DELETE reaches
 * after it (a slow disk or a busy row does the same).
 *
 * What happened: the acquire returned a fence two hours (7.2e9) below the
 * name's previous fence; a fenced resource that saw the old holder's fence
 * refuses every write of the new holder, and the fences of the name no longer
 * rise (every run here).
 *
 * Finding 2 (PostgreSQL lease mode, prune by the documented run-time user).
 *
 * The promise (docs/postgres.md, "Schema"): "A run-time user needs USAGE on
 * the schema, SELECT, INSERT, UPDATE, DELETE on its tables, USAGE on its
 * sequences and EXECUTE on its functions", with the GRANTs shown; and
 * (prune) "A released lock's row stays for a while (a tombstone ...), then is
 * pruned" (dlock_client_prune(), `dlock prune`, and the release's own prune
 * now and then).
 *
 * The attack: the schema made by its owner, the run-time user 'app' granted
 * exactly as the docs show, 'app' acquires, releases and prunes.
 *
 * What happened: prune() now reads fence_seq's last_value and may setval it
 * (the third review's fix); USAGE on a sequence allows neither (SELECT and
 * UPDATE on the sequence are needed; GRANT ... ON ALL TABLES does not reach
 * sequences), so every prune by the run-time user fails with "permission
 * denied for sequence fence_seq" and nothing is ever pruned by it (also the
 * release's prune, whose failure is silent): the tables grow (every run here).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_pg.h"
#include "test.h"

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

static th_pg pg;
static char ft_file[128];

static void ft_set(const char *offset) {
  FILE *f = fopen(ft_file, "w");
  if (!f) return;
  fprintf(f, "%s\n", offset);
  fclose(f);
  chmod(ft_file, 0644);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Wait (bounded) until 'n' sessions wait for a lock. */
static int wait_lock_waiters(int n, long timeout_ms) {
  for (long t = 0; t < timeout_ms; t += 100) {
    char out[64] = "";
    if (th_pg_sql(&pg, NULL, out, sizeof out,
                  "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == 0 &&
        atoi(out) >= n)
      return 0;
    sleep_ms(100);
  }
  return -1;
}

static void *blocker(void *arg) {
  (void)arg;
  char out[256];
  th_pg_sql(&pg, NULL, out, sizeof out,
            "BEGIN; SELECT 1 FROM rev4.locks WHERE name = 'rev4-b' FOR UPDATE; SELECT pg_sleep(3.5); COMMIT;");
  return NULL;
}

struct pruner {
  dlock_client *c;
  int rc;
  int64_t n;
  char err[512];
};

static void *pruner(void *arg) {
  struct pruner *p = arg;
  p->rc = dlock_client_prune(p->c, 0, &p->n);
  snprintf(p->err, sizeof p->err, "%s", dlock_last_error());
  return NULL;
}

struct acquirer {
  dlock_mutex *m;
  int rc;
  char err[512];
};

static void *acquirer(void *arg) {
  struct acquirer *a = arg;
  a->rc = dlock_mutex_acquire(a->m, 30000);
  snprintf(a->err, sizeof a->err, "%s", dlock_last_error());
  return NULL;
}

TEST(pg_prune_racing_acquire_after_backward_step_lowers_fence) {
  char why[256];
  if (access(FAKETIME_LIB, R_OK) != 0) TEST_SKIP("libfaketime is not installed (%s)", FAKETIME_LIB);
  snprintf(ft_file, sizeof ft_file, "/tmp/dlock-rev4sp-ft-%d", (int)getpid());
  ft_set("+0");
  setenv("FAKETIME_TIMESTAMP_FILE", ft_file, 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);
  setenv("TH_PG_PRELOAD", FAKETIME_LIB, 1);
  int up = th_pg_suite_start(&pg, why, sizeof why);
  unsetenv("TH_PG_PRELOAD");
  if (!up) {
    unlink(ft_file);
    TEST_SKIP("%s", why);
  }
  dlock_client *c = th_pg_client(&pg, "rev4", NULL), *c2 = th_pg_client(&pg, "rev4", NULL),
               *c3 = th_pg_client(&pg, "rev4", NULL);
  dlock_mutex *a = NULL, *b = NULL, *a2 = NULL;
  int ok = c && c2 && c3 && dlock_mutex_new(&a, c, "rev4-a", NULL) == 0 &&
           dlock_mutex_new(&b, c, "rev4-b", NULL) == 0 && dlock_mutex_new(&a2, c3, "rev4-a", NULL) == 0;
  if (!ok) {
    th_pg_stop(&pg);
    unlink(ft_file);
    TEST_FAIL("clients of %s: %s", pg.url, dlock_last_error());
  }
  /* 'a' then 'b' get rows (in that order) and fences at the real clock. */
  int rc = dlock_mutex_acquire(a, 5000);
  int rc2 = dlock_mutex_acquire(b, 5000);
  uint64_t fa = dlock_mutex_fence(a);
  /* The database clock steps back two hours; the holders release then (their
   * rows end at the stepped clock, so a prune with age 0 deletes them). */
  ft_set("-7200");
  sleep_ms(300);
  char now[128] = "";
  th_pg_sql(&pg, NULL, now, sizeof now, "SELECT clock_timestamp()");
  int rel = dlock_mutex_release(a), rel2 = dlock_mutex_release(b);
  sleep_ms(200);

  pthread_t tb, tp, ta;
  struct pruner pr = {c2, -1, 0, ""};
  struct acquirer ac = {a2, -1, ""};
  pthread_create(&tb, NULL, blocker, NULL);
  int w0 = th_pg_wait_active(&pg, "pg_sleep(3.5)", 20000);
  pthread_create(&tp, NULL, pruner, &pr);
  int w1 = wait_lock_waiters(1, 20000); /* prune deleted 'a' and waits for 'b' */
  pthread_create(&ta, NULL, acquirer, &ac);
  int w2 = wait_lock_waiters(2, 20000); /* the acquire waits for prune's delete */
  pthread_join(tb, NULL);
  pthread_join(tp, NULL);
  pthread_join(ta, NULL);
  uint64_t fa2 = dlock_mutex_fence(a2);
  char seq[64] = "";
  th_pg_sql(&pg, NULL, seq, sizeof seq, "SELECT last_value FROM rev4.fence_seq");
  fprintf(stderr,
          "acquire %d %d, fence before %llu, clock stepped back (%s), release %d %d, waits %d %d %d, "
          "prune rc %d pruned %lld (%s), acquire again rc %d fence %llu (%s), fence_seq %s\n",
          rc, rc2, (unsigned long long)fa, now, rel, rel2, w0, w1, w2, pr.rc, (long long)pr.n, pr.err, ac.rc,
          (unsigned long long)fa2, ac.err, seq);
  if (ac.rc == 0) dlock_mutex_release(a2);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_mutex_free(a2);
  dlock_client_free(c);
  dlock_client_free(c2);
  dlock_client_free(c3);
  th_pg_stop(&pg);
  unlink(ft_file);
  if (rc != 0 || rc2 != 0 || ac.rc != 0) TEST_FAIL("an acquire failed on %s (see above)", pg.url);
  if (w0 != 0 || w1 != 0 || w2 != 0) TEST_FAIL("the race was not set up (waits %d %d %d)", w0, w1, w2);
  if (fa2 <= fa)
    TEST_FAIL("fences of 'rev4-a' went down after a prune racing the acquire: %llu then %llu (%.1f s below)",
              (unsigned long long)fa, (unsigned long long)fa2, (double)(fa - fa2) / 1e6);
}

TEST(pg_prune_by_the_documented_run_time_user) {
  char why[256];
  th_pg p2;
  if (!th_pg_suite_start(&p2, why, sizeof why)) TEST_SKIP("%s", why);
  char out[512] = "";
  /* The schema by its owner (the superuser's first use), then 'app' granted as the docs say. */
  dlock_client *owner = th_pg_client(&p2, "rev4g", NULL);
  dlock_mutex *m0 = NULL;
  int rc0 = owner && dlock_mutex_new(&m0, owner, "rev4-init", NULL) == 0 ? dlock_mutex_acquire(m0, 5000) : -100;
  if (m0) dlock_mutex_release(m0);
  dlock_mutex_free(m0);
  dlock_client_free(owner);
  int g = th_pg_sql(&p2, NULL, out, sizeof out,
                    "CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA rev4g TO app; "
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA rev4g TO app; "
                    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA rev4g TO app;");
  char url[900];
  snprintf(url, sizeof url, "postgresql://app@127.0.0.1:%d/postgres?dlock_schema=rev4g", p2.port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  int rc = dlock_client_new(&c, &o);
  int acq = rc == 0 && dlock_mutex_new(&m, c, "rev4-app", NULL) == 0 ? dlock_mutex_acquire(m, 5000) : -100;
  int rel = acq == 0 ? dlock_mutex_release(m) : -100;
  char acq_err[512];
  snprintf(acq_err, sizeof acq_err, "%s", dlock_last_error());
  int64_t n = -1;
  int pr = rc == 0 ? dlock_client_prune(c, 0, &n) : -100;
  char err[512];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  fprintf(stderr, "owner's first use %d, grants %d, app: client %d acquire %d release %d (%s), prune %d pruned %lld (%s)\n",
          rc0, g, rc, acq, rel, acq_err, pr, (long long)n, err);
  dlock_mutex_free(m);
  dlock_client_free(c);
  th_pg_stop(&p2);
  if (rc0 != 0 || g != 0 || rc != 0 || acq != 0 || rel != 0) TEST_FAIL("setup failed (see above)");
  if (pr != 0 || n < 1)
    TEST_FAIL("prune by the run-time user granted as docs/postgres.md says: rc %d, pruned %lld: %s", pr,
              (long long)n, err);
}

TEST_MAIN()
