/*
 * test_pg_family.c - semaphores and read-write locks on PostgreSQL (the
 * lease tables) through the public API, against a real server that the
 * harness starts (harness_pg.h): a kill -9'd and a SIGSTOPped holder. The
 * scenarios every backend runs are in tests/conformance/. Labels:
 * integration, pg.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "harness_pg.h"
#include "hold_history.h"
#include "test.h"

static th_pg srv;
static int srv_up;
static char skip_why[256];

void test_setup(void) { srv_up = th_pg_suite_start(&srv, skip_why, sizeof skip_why); }

static th_pg ft;
static int ft_up;
static char offset_file[128];

void test_teardown(void) {
  if (srv_up) th_pg_stop(&srv);
  if (ft_up) th_pg_stop(&ft);
  if (offset_file[0]) unlink(offset_file);
}

#define NEED_SERVER()                       \
  do {                                      \
    if (!srv_up) TEST_SKIP("%s", skip_why); \
  } while (0)

/* A client on the schema 'schema'; NULL on failure (usable in a child). */
static dlock_client *client_or_null(const char *schema) { return th_pg_client(&srv, schema, NULL); }

static dlock_client *client(const char *schema) {
  dlock_client *c = client_or_null(schema);
  if (!c) TEST_FAIL("client on schema %s: %s", schema, dlock_last_error());
  return c;
}

/* The scenarios every backend passes: tests/conformance/. */

/* ---- Leases ---- */

static int crash_holding(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = client_or_null("fam5");
  if (!c) return 1;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 1500;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "crash", 1, &mo) != 0 || dlock_semaphore_acquire(s, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  for (;;) pause();
}

static void wait_ready(int fd) {
  struct pollfd pf = {fd, POLLIN, 0};
  char ch = 0;
  if (poll(&pf, 1, (int)(30000L * th_time_factor())) != 1 || read(fd, &ch, 1) != 1 || ch != 'A')
    TEST_FAIL("the child did not take its permit");
}

TEST(a_holder_killed_with_sigkill_gives_its_permit_back_after_its_lease) {
  NEED_SERVER();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = th_spawn(crash_holding, (void *)(intptr_t)p[1]);
  wait_ready(p[0]);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
  close(p[1]);
  dlock_client *c = client("fam5");
  dlock_semaphore *s = test_semaphore(c, "crash", 1, 0);
  ASSERT_STATUS(dlock_semaphore_acquire(s, 0), DLOCK_EBUSY); /* its lease still runs */
  long long t0 = th_now_ms();
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor()));
  ASSERT(th_now_ms() - t0 < 15000L * th_time_factor()); /* the 1.5 s lease, polled */
  ASSERT_OK(dlock_semaphore_release(s));
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* A holder with a 1.5 s watchdog lease, stopped with SIGSTOP past it: it
 * must learn it lost the permit, and its late release must touch nothing. */
static int paused_holder(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = client_or_null("fam9");
  if (!c) return 1;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 1500;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, "zombie", 1, &mo) != 0 || dlock_semaphore_acquire(s, 0) != 0) return 2;
  if (write(fd, "A", 1) != 1) return 3;
  raise(SIGSTOP);
  /* Woken long after its lease: lost, and the release changes nothing. */
  for (int i = 0; i < 200 && dlock_semaphore_lost(s) == DLOCK_LOST_NONE; i++) th_sleep_ms(25);
  if (dlock_semaphore_lost(s) == DLOCK_LOST_NONE) return 4;
  if (dlock_semaphore_release(s) != DLOCK_ENOTHELD) return 5;
  return 0;
}

TEST(a_paused_holder_is_reported_lost_and_its_late_release_touches_nothing) {
  NEED_SERVER();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = th_spawn(paused_holder, (void *)(intptr_t)p[1]);
  wait_ready(p[0]);
  int st;
  for (int i = 0; i < 400; i++) {
    if (waitpid(pid, &st, WUNTRACED | WNOHANG) == pid && WIFSTOPPED(st)) break;
    th_sleep_ms(10);
  }
  dlock_client *c = client("fam9");
  dlock_semaphore *s = test_semaphore(c, "zombie", 1, 0);
  ASSERT_OK(dlock_semaphore_acquire(s, 30000L * th_time_factor())); /* after the zombie's lease */
  kill(pid, SIGCONT);
  st = th_wait(pid, 30000L * th_time_factor());
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
  ASSERT_EQ(dlock_mutex_is_held(dlock_semaphore_mutex(s)), 1); /* untouched by the late release */
  ASSERT_OK(dlock_semaphore_release(s));
  close(p[0]);
  close(p[1]);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* ---- The review of the semaphore and read-write lock on the lease tables
 * (branch revzkpg): one test per finding, each FAILED on the code as
 * reviewed; the fifth review's PostgreSQL findings (a family's fences across
 * clock steps) at the end, on a second server under libfaketime. Labels
 * review, pg: ctest review/test_pg_family. ---- */

/* The fifth review's server under libfaketime (ft, above), started on first use. */
static int ft_tried;
static char ft_why[256];

static dlock_rwlock *rw(dlock_client *c, const char *name, int side, int64_t watchdog_lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = watchdog_lease_ms;
  dlock_rwlock *l = NULL;
  if (dlock_rwlock_new(&l, c, name, side, &mo) != 0) TEST_FAIL("rwlock %s: %s", name, dlock_last_error());
  return l;
}

/* ---- Finding 1: a read "in the shadow" of a write that is gone ----
 *
 * pg_acquire() (src/pg/backend.c) passes p_shadow = true to fam_acquire()
 * (src/pg/pg_sql.c) whenever this thread's write handle on the name is
 * held and not yet seen lost, and fam_acquire() then grants the read without
 * looking at anything ("ok := true"). The core learns a loss only at the
 * watchdog's next renewal; until then a write hold that was force-released
 * (or whose lease ran out) still counts. Another client's writer takes the
 * name, and this thread's read is granted beside it: a reader alongside a
 * writer. (ZooKeeper checks that the shared node still exists.) */
/* Review of the PostgreSQL semaphore and rwlock (branch revzkpg), finding 1. */
REVIEW_TEST(review_a_read_in_the_shadow_of_a_force_released_write_does_not_join_the_new_writer) {
  NEED_SERVER();
  dlock_client *a = client("rpf1"), *b = client("rpf1");
  /* A long watchdog lease: the core does not notice the loss for ~20 s. */
  dlock_rwlock *w = rw(a, "doc", DLOCK_RW_WRITE, 60000), *r = rw(a, "doc", DLOCK_RW_READ, 60000);
  dlock_rwlock *w2 = rw(b, "doc", DLOCK_RW_WRITE, 0);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(b, "doc", &was_held));
  ASSERT_EQ(was_held, 1);
  ASSERT_OK(dlock_rwlock_acquire(w2, 0)); /* the name is free: another writer holds it now */
  int rc = dlock_rwlock_acquire(r, 0);
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  ASSERT_OK(dlock_lock_info_get(b, "doc", &info));
  if (rc == 0)
    TEST_FAIL("the read was granted beside another client's writer (readers %lld, writer %d)", (long long)info.readers,
              info.writer);
  ASSERT(rc == DLOCK_EBUSY || rc == DLOCK_ELOST);
  ASSERT_OK(dlock_rwlock_release(w2));
  dlock_rwlock_release(w);
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_rwlock_free(w2);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- Finding 2: a mutex and a semaphore on one name, both held ----
 *
 * The mutex's acquire (sql_acquire) checks "no live hold in holds" in its
 * statement's snapshot, without the families row lock; fam_acquire() checks
 * "no live row in locks" after locking the families row, but an uncommitted
 * INSERT into locks is invisible to it and does not block it. Started
 * together on a fresh name, both commit: a mutex and a semaphore permit
 * held at once. docs/postgres.md: "a name is one kind at a time ... at most
 * N permits, ... whatever the interleaving". Up to 400 rounds (or 40 s). */

/* Review of the PostgreSQL semaphore and rwlock (branch revzkpg), finding 2. */
REVIEW_TEST(review_a_mutex_and_a_semaphore_racing_on_a_fresh_name_never_both_hold) {
  NEED_SERVER();
  dlock_client *a = client("rpf2"), *b = client("rpf2");
  int rounds;
  int both = th_race_mutex_and_semaphore(a, b, 400, 40000L * th_time_factor(), 30000, &rounds);
  if (both >= 0) TEST_FAIL("round %d of %d: the mutex and the semaphore 'race-%d' were both held", both, rounds, both);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* ---- The fifth review's findings 1 and 2, and its history check ----
 *
 * Moved from tests/review/open_pg_review5.c (branch rev5) once fixed; each
 * FAILED on the code before the fix (3 of 3 runs each). A second server,
 * started by the first of these tests and shared by them, runs under
 * libfaketime (TH_PG_PRELOAD) with its offset read from a file at every
 * clock call (FAKETIME_TIMESTAMP_FILE, no cache), so a test steps the
 * database host's clock while it runs. */
#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

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

static void ft_start(void) {
  ft_tried = 1;
  if (access(FAKETIME_LIB, R_OK) != 0) {
    snprintf(ft_why, sizeof ft_why, "libfaketime is not installed (%s; Debian: faketime)", FAKETIME_LIB);
    return;
  }
  snprintf(offset_file, sizeof offset_file, "/tmp/dlock-rev5-faketime-%d", (int)getpid());
  FILE *f = fopen(offset_file, "w");
  if (!f) {
    snprintf(ft_why, sizeof ft_why, "cannot write %s", offset_file);
    return;
  }
  fprintf(f, "+0\n");
  fclose(f);
  chmod(offset_file, 0644);
  setenv("TH_PG_PRELOAD", FAKETIME_LIB, 1);
  setenv("FAKETIME_TIMESTAMP_FILE", offset_file, 1);
  setenv("FAKETIME_NO_CACHE", "1", 1);
  setenv("FAKETIME_DONT_RESET", "1", 1);
  ft_up = th_pg_suite_start(&ft, ft_why, sizeof ft_why);
  unsetenv("TH_PG_PRELOAD"); /* the server keeps what it was started with */
}

#define FT_NEED()                        \
  do {                                   \
    if (!ft_tried) ft_start();           \
    if (!ft_up) TEST_SKIP("%s", ft_why); \
  } while (0)

/* A client of the libfaketime server on 'schema', its clock set right. */
static dlock_client *ft_client(const char *schema) {
  FT_NEED();
  set_offset("+0");
  dlock_client *c = th_pg_client(&ft, schema, NULL);
  if (!c) TEST_FAIL("client: %s", dlock_last_error());
  return c;
}

/* The server's clock, read through psql (µs since the epoch). */
static long long server_clock_us(void) {
  char out[64];
  if (th_pg_sql(&ft, NULL, out, sizeof out, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint") !=
      0)
    return -1;
  return atoll(out);
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
 *
 * Fixed: fam_acquire's DELETE of old holds raises the name's locks row's
 * fence to the fences it deletes, in the same statement (the row is locked
 * by then), and the next fence is above that row's fence.
 */
/* Fifth review (branch rev5), PostgreSQL finding 1. */
REVIEW_TEST(rev5_pg_1_semaphore_fence_falls_when_fam_acquire_deletes_old_holds_after_clock_steps) {
  dlock_client *c = ft_client("rev5a");
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
  if (getenv("REV5_NO_FORWARD"))
    th_sleep_ms(62000); /* the clock stays 2 h back; a minute passes */
  else
    set_offset("-1h");
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
 *
 * Fixed: each grant writes its fence into the name's locks row (greatest,
 * in the UPDATE that marks the row), whose fence + 1 the mutex's acquire
 * takes: one high-water per name across the kinds.
 */
/* Fifth review (branch rev5), PostgreSQL finding 2. */
REVIEW_TEST(rev5_pg_2_a_mutex_after_a_semaphore_of_the_same_name_gets_a_lower_fence_after_a_backward_step) {
  dlock_client *c = ft_client("rev5b");
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

/* The promise the fix for findings 1 and 2 states (docs/postgres.md,
 * "Fences": one name's fences rise strictly across its kinds and clock
 * steps): one name taken in turn as a mutex, a read-write lock's writer and
 * reader, a mutex, a semaphore, with the database clock stepped back two
 * hours after the first hold and forward an hour before the last. Each
 * fence must be above the one before. (FAILED before the fix: the second
 * mutex got the first mutex's fence + 1, below the reader's: the family's
 * fences were not in the name's locks row, as in finding 2.) */
/* Fifth review (branch rev5), PostgreSQL findings 1 and 2: one name across kinds and clock steps. */
REVIEW_TEST(pg6_one_name_fences_rise_across_kinds_and_clock_steps) {
  dlock_client *c = ft_client("pg6k");
  const char *name = "pg6-kinds";
  const char *what[5] = {"mutex", "write", "read", "mutex again", "permit"};
  uint64_t f[5] = {0};
  int rc = 0, i = 0;
  for (; i < 5 && rc == 0; i++) {
    if (i == 1) set_offset("-2h");
    if (i == 4) set_offset("-1h");
    if (i == 0 || i == 3) {
      dlock_mutex *m = test_mutex(c, name, 5000);
      rc = dlock_mutex_acquire(m, 5000);
      if (rc == 0) f[i] = dlock_mutex_fence(m), rc = dlock_mutex_release(m);
      dlock_mutex_free(m);
    } else if (i == 4) {
      dlock_semaphore *sm = test_semaphore(c, name, 2, 5000);
      rc = dlock_semaphore_acquire(sm, 5000);
      if (rc == 0) f[i] = dlock_semaphore_fence(sm), rc = dlock_semaphore_release(sm);
      dlock_semaphore_free(sm);
    } else {
      dlock_rwlock *l = test_rwlock(c, name, i == 1 ? DLOCK_RW_WRITE : DLOCK_RW_READ, 5000);
      rc = dlock_rwlock_acquire(l, 5000);
      if (rc == 0) f[i] = dlock_rwlock_fence(l), rc = dlock_rwlock_release(l);
      dlock_rwlock_free(l);
    }
  }
  set_offset("+0");
  dlock_client_free(c);
  if (rc != 0) TEST_FAIL("the %s of '%s': %s", what[i - 1], name, dlock_err_name(rc));
  for (int k = 0; k < 5; k++) fprintf(stderr, "  %s: %llu\n", what[k], (unsigned long long)f[k]);
  for (int k = 1; k < 5; k++)
    if (f[k] <= f[k - 1])
      TEST_FAIL("the fence of '%s' fell: the %s got %llu after the %s's %llu (%.0f s lower)", name, what[k],
                (unsigned long long)f[k], what[k - 1], (unsigned long long)f[k - 1],
                ((double)f[k - 1] - (double)f[k]) / 1e6);
}

/* ---- The history check (held: run with REV5_HISTORY=1) ---- */

static th_pgbouncer bouncer;

static int worker(void *arg) {
  int id;
  int fd = h5_worker_open(arg, &id);
  if (fd < 0) return 2;
  char url[900];
  /* Odd workers through the transaction-mode PgBouncer. */
  snprintf(url, sizeof url, "%s%cdlock_schema=rev5h", id % 2 ? bouncer.url : ft.url,
           strchr(id % 2 ? bouncer.url : ft.url, '?') ? '&' : '?');
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return 5;
  int holds = 0;
  for (int round = 0; round < 5000 && th_now_ms() < h5_until; round++) {
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
/* Fifth review (branch rev5): an attack that held (history under prune, steps, pgbouncer). */
REVIEW_TEST(rev5_pg_held_history_prune_steps_pgbouncer) {
  if (!getenv("REV5_HISTORY")) TEST_SKIP("the history check runs with REV5_HISTORY=1 (it held)");
  FT_NEED();
  char bwhy[256];
  if (!th_pgbouncer_available(bwhy, sizeof bwhy)) TEST_SKIP("%s", bwhy);
  if (th_pgbouncer_start(&bouncer, &ft, "transaction") != 0) TEST_FAIL("pgbouncer did not start");
  set_offset("+0");
  dlock_client *c = th_pg_client(&ft, "rev5h", NULL);
  if (!c) TEST_FAIL("client: %s", dlock_last_error());
  char hist_path[200];
  snprintf(hist_path, sizeof hist_path, "/tmp/dlock-rev5-pg-hist-%d", (int)getpid());
  pid_t kids[4];
  if (h5_run_start(hist_path, 30000, worker, 4, kids) != 0) TEST_FAIL("cannot create %s", hist_path);
  int prunes = 0, steps = 0, freezes = 0;
  long long start = th_now_ms();
  for (int step = 0; step < 100000 && th_now_ms() < h5_until - 500; step++) {
    int64_t pruned = 0;
    if (dlock_client_prune(c, 0, &pruned) == 0) prunes++;
    long long t = th_now_ms() - start;
    if (steps == 0 && t > 8000) {
      set_offset("-10m");
      steps++;
    }
    if (steps == 1 && t > 16000) {
      set_offset("-20m");
      steps++;
    }
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

/* ---- The review of b28f110, d9e4c88 and d3f4d89 (branch rev2), the
 * PostgreSQL findings (a mutex and the family meet on the name's locks row):
 * each FAILED on the code as reviewed (labels review, pg: ctest
 * review/test_pg_family). ---- */
/* ---- d9e4c88, finding: a family's release never clears its mark, so a
 * mutex stays busy until the family's lease would have ended ----
 *
 * fam_acquire() (src/pg/pg_sql.c) writes the hold (holds.since =
 * clock_timestamp()) and then marks the locks row (family_since =
 * clock_timestamp(), a later reading of the clock: clock_timestamp() moves
 * within a transaction). sql_fam_release clears the mark only where
 * family_since <= the hold's since, which is never the case for the grant's
 * own hold: after the last permit is released, a mutex on the name is
 * refused ("busy") until the permit's lease would have ended. */
/* Review of b28f110, d9e4c88 and d3f4d89 (branch rev2): a d9e4c88 finding. */
REVIEW_TEST(review_pg_a_mutex_takes_the_name_once_the_permit_is_released) {
  NEED_SERVER();
  dlock_client *c = client("rv2a");
  dlock_semaphore *s = test_semaphore(c, "rv2:pgmark", 1, 30000);
  dlock_mutex *m = test_mutex(c, "rv2:pgmark", 30000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_semaphore_release(s));
  int rc = dlock_mutex_acquire(m, 0);
  if (rc) TEST_FAIL("the only permit was released, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m));
  /* The same for a read-write lock's writer. */
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 30000;
  dlock_rwlock *w = NULL;
  ASSERT_OK(dlock_rwlock_new(&w, c, "rv2:pgmark2", DLOCK_RW_WRITE, &mo));
  dlock_mutex *m2 = test_mutex(c, "rv2:pgmark2", 30000);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_OK(dlock_rwlock_release(w));
  rc = dlock_mutex_acquire(m2, 0);
  if (rc) TEST_FAIL("the writer released, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_rwlock_free(w);
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* ---- d9e4c88, finding: the mark outlives the family when the latest grant
 * ended by its lease, not by a release ----
 *
 * sql_fam_release clears the mark only when the releasing hold is the
 * latest grant (family_since <= its since). A later grant whose hold then
 * ran out (its owner crashed, or a short fixed lease) leaves family_since
 * ahead of every hold still to be released: the last release of the family
 * clears nothing, and a mutex is refused until the longest lease granted
 * would have ended (here 20 s after the family is gone). */
/* Review of b28f110, d9e4c88 and d3f4d89 (branch rev2): a d9e4c88 finding. */
REVIEW_TEST(review_pg_a_mutex_takes_the_name_after_a_later_permit_ran_out) {
  NEED_SERVER();
  dlock_client *c = client("rv2b");
  dlock_semaphore *p1 = test_semaphore(c, "rv2:pgmark3", 2, 20000), *p2 = test_semaphore(c, "rv2:pgmark3", 2, 500);
  dlock_mutex *m = test_mutex(c, "rv2:pgmark3", 30000);
  ASSERT_OK(dlock_semaphore_acquire(p1, 0));
  ASSERT_OK(dlock_semaphore_acquire(p2, 0));
  th_sleep_ms(900); /* p2's lease runs out (never released) */
  ASSERT_OK(dlock_semaphore_release(p1));
  int rc = dlock_mutex_acquire(m, 0);
  if (rc) TEST_FAIL("no permit is held any more, yet the mutex is refused: %s", dlock_last_error());
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_semaphore_free(p1);
  dlock_semaphore_free(p2);
  dlock_client_free(c);
}

TEST_MAIN()
