/*
 * open_pg_review5.c - fifth review round, PostgreSQL lease mode: open
 * findings (each test FAILS on the code it was written against).
 *
 * Run: cmake -S . -B build/plain -DDLOCK_OPEN_FINDINGS=ON && cmake --build
 * build/plain -j2 && (cd build/plain && ctest -R open/open_pg_review5
 * --output-on-failure)
 *
 * The server runs under libfaketime (TH_PG_PRELOAD) with its offset read
 * from a file at every clock call (FAKETIME_TIMESTAMP_FILE, no cache), so
 * a test steps the database host's clock while it runs.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../harness_pg.h"
#include "../test.h"
#include "review5_history.h"

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

static th_pg pg;
static int pg_up;
static char why[256];
static char offset_file[128];

static void set_offset(const char *off) {
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", offset_file);
  FILE *f = fopen(tmp, "w");
  if (!f) TEST_FAIL("cannot write %s", tmp);
  fprintf(f, "%s\n", off);
  fclose(f);
  chmod(tmp, 0644);
  if (rename(tmp, offset_file) != 0) TEST_FAIL("cannot rename %s", tmp);
}

/* The server's clock, read through psql (µs since the epoch). */
static long long server_clock_us(void) {
  char out[64];
  if (th_pg_sql(&pg, NULL, out, sizeof out, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint") != 0)
    return -1;
  return atoll(out);
}

void test_setup(void) {
  if (access(FAKETIME_LIB, R_OK) != 0) {
    snprintf(why, sizeof why, "libfaketime is not installed (%s)", FAKETIME_LIB);
    return;
  }
  snprintf(offset_file, sizeof offset_file, "/tmp/dlock-rev5-faketime-%d", (int)getpid());
  FILE *f = fopen(offset_file, "w");
  if (!f) return;
  fprintf(f, "+0\n");
  fclose(f);
  chmod(offset_file, 0644);
  setenv("TH_PG_PRELOAD", FAKETIME_LIB, 1);
  setenv("FAKETIME_TIMESTAMP_FILE", offset_file, 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);
  setenv("FAKETIME_DONT_RESET", "1", 1);
  pg_up = th_pg_suite_start(&pg, why, sizeof why);
}

void test_teardown(void) {
  if (pg_up) th_pg_stop(&pg);
  pg_up = 0;
  if (offset_file[0]) unlink(offset_file);
}

/* One hold of the semaphore 'name' (limit 1) by a new handle: its fence. */
static uint64_t one_permit(dlock_client *c, const char *name) {
  dlock_semaphore *s = test_semaphore(c, name, 1, 5000);
  int rc = dlock_semaphore_acquire(s, 5000);
  if (rc != 0) {
    dlock_semaphore_free(s);
    TEST_FAIL("acquire of '%s': %s", name, dlock_last_error());
  }
  uint64_t f = dlock_semaphore_fence(s);
  rc = dlock_semaphore_release(s);
  dlock_semaphore_free(s);
  if (rc != 0) TEST_FAIL("release of '%s': %s", name, dlock_last_error());
  return f;
}

/*
 * Promise (docs/postgres.md, "A step of the database host's clock"): "A
 * backward step lengthens leases ...; it is safe: ... the next fence of the
 * name is above the last, also when the name's row was pruned in between";
 * ("Semaphores and read-write locks"): each permit has "its own fence from
 * fence_seq (rising per name; a writer's above every earlier holder's)";
 * ("Fences"): "at least the last fence of the same name ... plus one, so
 * that a clock stepped back cannot lower the fences of one name".
 *
 * Attack: the semaphore's fence is greatest(nextval, clock, max(holds.fence)
 * + 1, locks.fence + 1), and the name's locks row of a family keeps fence 0:
 * only the holds rows carry the name's last fence. fam_acquire() itself
 * deletes the name's holds that ended more than a minute ago (on the
 * database clock) before it computes the fence, and does not raise
 * fence_seq to what it deletes (prune() does). So: A holds at the true time
 * T (fence F ~ T in µs); the clock steps back 2 h; B1..B3 hold (fences F+1,
 * F+2, F+3: above the clock, from A's row); the clock steps forward 1 h
 * (still an hour behind; nothing held). C's acquire deletes B1..B3's rows
 * (they ended 1 h ago on that clock) but keeps A's (it ends "in the
 * future"), and takes F + 1: below B3's F + 3, equal to B1's.
 *
 * What happened (3 of 3 runs, and again under ctest): C's fence is F + 1,
 * B3's F + 3. Severity: high (a name's fences fall: a paused B2, fence
 * F + 2, is admitted by a guard after C's write). The forward step is not
 * needed: with the clock left 2 h back, C a minute after B3's release
 * deletes B1..B3's rows the same way (REV5_NO_FORWARD=1 runs it so: 62 s
 * more; ran twice, C's fence F + 1 both times). The fix wants fam_acquire's own DELETE to carry its
 * fences (raise fence_seq as prune() does), or the name's last fence kept
 * in its locks row.
 */
TEST(rev5_pg_1_semaphore_fence_falls_when_fam_acquire_deletes_old_holds_after_clock_steps) {
  if (!pg_up) TEST_SKIP("%s", why);
  set_offset("+0");
  dlock_client *c = th_pg_client(&pg, "rev5a", NULL);
  if (!c) TEST_FAIL("client: %s", dlock_last_error());
  const char *name = "rev5-sem-fence";
  uint64_t fa = one_permit(c, name);
  long long before = server_clock_us();
  set_offset("-2h");
  long long after = server_clock_us();
  if (after < 0 || before - after < 3600LL * 1000000) {
    dlock_client_free(c);
    TEST_FAIL("the server's clock did not step back (before %lld, after %lld)", before, after);
  }
  uint64_t fb = 0;
  for (int i = 0; i < 3; i++) {
    uint64_t f = one_permit(c, name);
    if (f <= fa || f <= fb) {
      dlock_client_free(c);
      TEST_FAIL("B%d's fence %llu is not above the last (%llu)", i + 1, (unsigned long long)f,
                (unsigned long long)(fb ? fb : fa));
    }
    fb = f;
  }
  if (getenv("REV5_NO_FORWARD")) th_sleep_ms(62000); /* the clock stays 2 h back; a minute passes */
  else set_offset("-1h");
  uint64_t fc = one_permit(c, name);
  fprintf(stderr, "  fences: A %llu, last B %llu, C %llu\n", (unsigned long long)fa, (unsigned long long)fb,
          (unsigned long long)fc);
  set_offset("+0");
  dlock_client_free(c);
  if (fc <= fb)
    TEST_FAIL("the semaphore's fence fell: C's %llu after B's %llu (A's %llu): fam_acquire deleted B's rows, "
              "which held the name's last fence, without raising fence_seq",
              (unsigned long long)fc, (unsigned long long)fb, (unsigned long long)fa);
}

/*
 * Promise (docs/postgres.md, "Fences"): a new fence is "at least the last
 * fence of the same name (or scheduler job) plus one, so that a clock
 * stepped back cannot lower the fences of one name"; ("Semaphores and
 * read-write locks"): "a name is one kind at a time" (the same name, used
 * as a semaphore and later, once every permit is released, as a mutex).
 *
 * Attack: a name's permit is held (fence ~ the true time T, kept in its
 * holds row); the database clock steps back 2 h; the permit is released
 * (a live hold's release works across a backward step); the name is then
 * taken as a mutex. fam_acquire() made the name's locks
 * row with fence 0, and the mutex's fence is greatest(nextval, clock,
 * locks.fence + 1): the holds' fences are not looked at.
 *
 * What happened (3 of 3 runs, and again under ctest): the mutex's fence is
 * 7200 s (in µs) below the semaphore's last fence. Severity: medium (needs
 * a name used as a semaphore or read-write lock, then as a mutex, across a
 * backward step). The mutex's acquire could also take the name's holds
 * rows into its floor, or fam_acquire could keep its fences in the name's
 * locks row.
 */
TEST(rev5_pg_2_a_mutex_after_a_semaphore_of_the_same_name_gets_a_lower_fence_after_a_backward_step) {
  if (!pg_up) TEST_SKIP("%s", why);
  set_offset("+0");
  dlock_client *c = th_pg_client(&pg, "rev5b", NULL);
  if (!c) TEST_FAIL("client: %s", dlock_last_error());
  const char *name = "rev5-kind-change";
  dlock_semaphore *s = test_semaphore(c, name, 1, 30000);
  ASSERT_OK(dlock_semaphore_acquire(s, 5000));
  uint64_t fs = dlock_semaphore_fence(s);
  set_offset("-2h");
  int rs = dlock_semaphore_release(s); /* a live hold's release works across the step */
  dlock_semaphore_free(s);
  if (rs != 0) {
    set_offset("+0");
    dlock_client_free(c);
    TEST_FAIL("the semaphore's release across the step: %s", dlock_last_error());
  }
  dlock_mutex *m = test_mutex(c, name, 5000);
  int rc = dlock_mutex_acquire(m, 5000);
  uint64_t fm = rc == 0 ? dlock_mutex_fence(m) : 0;
  if (rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  set_offset("+0");
  dlock_client_free(c);
  if (rc != 0) TEST_FAIL("the mutex's acquire of '%s' failed: %s", name, dlock_err_name(rc));
  fprintf(stderr, "  fences: semaphore %llu, then mutex %llu\n", (unsigned long long)fs, (unsigned long long)fm);
  if (fm <= fs)
    TEST_FAIL("the name's fence fell: the mutex got %llu after the semaphore's %llu (%.0f s lower)",
              (unsigned long long)fm, (unsigned long long)fs, ((double)fs - (double)fm) / 1e6);
}

/* ---- The history check (held: run with REV5_HISTORY=1) ---- */

static char hist_path[200];
static long long hist_until;
static th_pgbouncer bouncer;

typedef struct worker_arg { int id; } worker_arg;

static int worker(void *arg) {
  int id = ((worker_arg *)arg)->id;
  srand((unsigned)(getpid() * 7919 + id));
  int fd = open(hist_path, O_WRONLY | O_APPEND);
  if (fd < 0) return 2;
  char url[900];
  /* Odd workers through the transaction-mode PgBouncer. */
  snprintf(url, sizeof url, "%s%cdlock_schema=rev5h", id % 2 ? bouncer.url : pg.url,
           strchr(id % 2 ? bouncer.url : pg.url, '?') ? '&' : '?');
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return 5;
  int holds = 0;
  for (int round = 0; round < 5000 && th_now_ms() < hist_until; round++) {
    int held = h5_one_hold(fd, id, c, "rev5-pg-hist", 1500, 1000, 5, 60);
    if (held < 0) return 3;
    holds += held;
  }
  dlock_client_free(c);
  close(fd);
  return holds > 0 ? 0 : 4;
}

/*
 * Held (run with REV5_HISTORY=1; skipped otherwise): 4 processes (two
 * direct, two through a transaction-mode PgBouncer) take one mutex for 30 s
 * with a 1.5 s lease, while the parent runs dlock_client_prune(0) without
 * pause, steps the database clock back 10 minutes twice (backward steps are
 * survived), and freezes a holder (SIGSTOP) past its lease now and then.
 * Checks: no two holds overlap while both within their validity; fences of
 * holds that do not overlap rise strictly (across prunes and the steps).
 */
TEST(rev5_pg_held_history_prune_steps_pgbouncer) {
  if (!getenv("REV5_HISTORY")) TEST_SKIP("the history check runs with REV5_HISTORY=1 (it held)");
  if (!pg_up) TEST_SKIP("%s", why);
  char bwhy[256];
  if (!th_pgbouncer_available(bwhy, sizeof bwhy)) TEST_SKIP("%s", bwhy);
  if (th_pgbouncer_start(&bouncer, &pg, "transaction") != 0) TEST_FAIL("pgbouncer did not start");
  set_offset("+0");
  dlock_client *c = th_pg_client(&pg, "rev5h", NULL);
  if (!c) TEST_FAIL("client: %s", dlock_last_error());
  snprintf(hist_path, sizeof hist_path, "/tmp/dlock-rev5-pg-hist-%d", (int)getpid());
  int fd = open(hist_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  close(fd);
  hist_until = th_now_ms() + 30000;
  pid_t kids[4];
  worker_arg wa[4];
  for (int i = 0; i < 4; i++) {
    wa[i].id = i;
    kids[i] = th_spawn(worker, &wa[i]);
  }
  int prunes = 0, steps = 0, freezes = 0;
  long long start = th_now_ms();
  for (int step = 0; step < 100000 && th_now_ms() < hist_until - 500; step++) {
    int64_t pruned = 0;
    if (dlock_client_prune(c, 0, &pruned) == 0) prunes++;
    long long t = th_now_ms() - start;
    if (steps == 0 && t > 8000) { set_offset("-10m"); steps++; }
    if (steps == 1 && t > 16000) { set_offset("-20m"); steps++; }
    if (step % 50 == 25) {
      pid_t k = kids[step % 4];
      kill(k, SIGSTOP);
      th_sleep_ms(1800);
      kill(k, SIGCONT);
      freezes++;
    }
    th_sleep_ms(20);
  }
  int bad = h5_wait_workers(kids, 4, 0);
  set_offset("+0");
  dlock_client_free(c);
  th_pgbouncer_stop(&bouncer);
  int overlaps, falls, n = h5_check(hist_path, &overlaps, &falls);
  unlink(hist_path);
  if (n < 0) TEST_FAIL("no history in %s", hist_path);
  fprintf(stderr, "  %d holds; %d prunes, %d clock steps back, %d holder freezes; %d overlaps, %d fence falls\n", n,
          prunes, steps, freezes, overlaps, falls);
  if (bad) TEST_FAIL("%d workers failed", bad);
  if (overlaps || falls) TEST_FAIL("%d overlapping holds, %d falling fences", overlaps, falls);
}

TEST_MAIN()
