/*
 * open_mysql_review.c - an adversarial review of the MySQL/MariaDB backend
 * (docs/mysql.md) with a real mariadbd (tests/harness_mysql.h) and the
 * lost-reply proxy (tests/pgproxy.h). Attacks that held are listed in
 * held_mysql_review.md next to this file; the tests here are the ones
 * written as attacks, kept while they fail (open findings) or as the
 * reproduction of what was tried.
 *
 * Children exec this binary again (REVMY_CHILD in the environment), so no
 * forked copy of a threaded process makes dlock clients.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_mysql.h"
#include "pgproxy.h"
#include "test.h"

static th_my my;
static int my_up;
static char skip_why[256];
static pgp_proxy *pp;

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the child: N holds of one mutex, each entry/exit appended to a file ---- */

static int child_main(const char *url, const char *name, const char *file, int n) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    fprintf(stderr, "child: client: %s\n", dlock_last_error());
    return 2;
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 3000;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) return 2;
  int fd = open(file, O_WRONLY | O_APPEND);
  if (fd < 0) return 2;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int rc = dlock_mutex_acquire(m, 40000);
    if (rc != 0) {
      fprintf(stderr, "child %d: acquire: %s\n", (int)getpid(), dlock_last_error());
      bad = 1;
      break;
    }
    int64_t in = mono_us();
    uint64_t fence = dlock_mutex_fence(m);
    int64_t until = dlock_mutex_valid_until(m);
    int g = dlock_guard_check(c, "revmy-res", fence);
    char line[200];
    int len = snprintf(line, sizeof line, "E %d %" PRIu64 " %" PRId64 " %" PRId64 " %d\n", (int)getpid(), fence, in,
                       until * 1000, g);
    if (write(fd, line, (size_t)len) != len) bad = 1;
    usleep(3000);
    int64_t out = mono_us();
    len = snprintf(line, sizeof line, "X %d %" PRIu64 " %" PRId64 "\n", (int)getpid(), fence, out);
    if (write(fd, line, (size_t)len) != len) bad = 1;
    rc = dlock_mutex_release(m);
    if (rc != 0) {
      fprintf(stderr, "child %d: release: %s\n", (int)getpid(), dlock_last_error());
      bad = 1;
    }
  }
  close(fd);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return bad;
}

void test_setup(void) {
  const char *child = getenv("REVMY_CHILD");
  if (child) {
    int rc = child_main(getenv("REVMY_URL"), getenv("REVMY_NAME"), getenv("REVMY_FILE"), atoi(child));
    _exit(rc);
  }
  my_up = th_my_suite_start(&my, skip_why, sizeof skip_why);
  if (my_up && pgp_start(&pp, my.port) == 0) pgp_drop_at_first_reply(pp);
}

void test_teardown(void) {
  if (pp) pgp_stop(pp);
  if (my_up) th_my_stop(&my);
}

static void need_server(void) {
  if (!my_up) TEST_SKIP("%s", skip_why);
}

static dlock_client *proxied_client(void) {
  char url[512];
  snprintf(url, sizeof url, "mysql://dlock:%s@127.0.0.1:%d/dlock", TH_MY_PASSWORD_URL, pgp_port(pp));
  return test_client(url);
}

/* Promise (docs/mysql.md, "Safety model"): one holder at a time; "Fences
 * rise strictly per name"; the guard admits the newest fence.
 * Attack: 4 processes x 12 holds of one name, each entry/exit with its fence
 * and the guard's answer appended to one O_APPEND file. */
TEST(many_processes_never_overlap_and_fences_rise) {
  need_server();
  char file[300];
  snprintf(file, sizeof file, "%s/revmy_history", my.dir);
  int fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0666);
  ASSERT(fd >= 0);
  close(fd);
  enum { P = 4, N = 12 };
  pid_t kids[P];
  for (int i = 0; i < P; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      setenv("REVMY_CHILD", "12", 1);
      setenv("REVMY_URL", my.url, 1);
      setenv("REVMY_NAME", "revmy-contended", 1);
      setenv("REVMY_FILE", file, 1);
      execl("/proc/self/exe", "open_mysql_review", (char *)NULL);
      _exit(127);
    }
  }
  int bad = 0;
  int64_t stop = mono_us() + 80 * 1000000LL;
  for (int i = 0; i < P; i++) {
    int st = 0;
    while (waitpid(kids[i], &st, WNOHANG) == 0) {
      if (mono_us() > stop) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], &st, 0);
        bad = 1;
        break;
      }
      usleep(50000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
  }
  FILE *f = fopen(file, "r");
  ASSERT(f != NULL);
  char kind;
  int pid, g;
  uint64_t fence, last_fence = 0;
  int64_t t, until, open_since = -1;
  int entries = 0, open_pid = 0;
  char line[200];
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%c %d %" SCNu64 " %" SCNd64, &kind, &pid, &fence, &t) != 4) continue;
    if (kind == 'E') {
      if (sscanf(line, "%c %d %" SCNu64 " %" SCNd64 " %" SCNd64 " %d", &kind, &pid, &fence, &t, &until, &g) != 6)
        continue;
      if (open_pid) {
        fclose(f);
        TEST_FAIL("pid %d entered (fence %" PRIu64 ") while pid %d was inside", pid, fence, open_pid);
      }
      if (fence <= last_fence) {
        fclose(f);
        TEST_FAIL("fence %" PRIu64 " after %" PRIu64 ": not rising", fence, last_fence);
      }
      if (g != 0) {
        fclose(f);
        TEST_FAIL("the guard refused the newest fence %" PRIu64 " (status %d)", fence, g);
      }
      last_fence = fence;
      open_pid = pid;
      open_since = t;
      entries++;
    } else if (kind == 'X') {
      if (pid != open_pid) {
        fclose(f);
        TEST_FAIL("pid %d left while pid %d was inside", pid, open_pid);
      }
      open_pid = 0;
    }
  }
  fclose(f);
  (void)open_since;
  ASSERT(!bad);
  ASSERT_EQ(entries, P * N);
  /* The guard refuses an older fence after the newest was admitted. */
  ASSERT_STATUS(dlock_guard_check(test_client(my.url), "revmy-res", last_fence - 1), DLOCK_ESTALE);
}

/* Promise ("A lost reply is never answered by guessing"): extend/renew is
 * "sent once more on a new connection, and answers as the first would have".
 * Attack: the proxy drops the reply to the extend's UPDATE after it ran. */
TEST(an_extend_whose_reply_is_lost_answers_as_the_first_would) {
  need_server();
  if (!pp) TEST_SKIP("no proxy");
  dlock_client *c = proxied_client();
  dlock_mutex *m = test_mutex(c, "revmy-extend", 4000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t fence = dlock_mutex_fence(m);
  int before = pgp_dropped(pp);
  pgp_drop_reply(pp, "UPDATE dlock_locks SET expires", 1);
  ASSERT_OK(dlock_mutex_extend(m, 8000));
  ASSERT_EQ(pgp_dropped(pp), before + 1);
  ASSERT_EQ(dlock_mutex_fence(m), fence);
  dlock_client *o = test_client(my.url);
  dlock_mutex *m2 = test_mutex(o, "revmy-extend", 4000);
  ASSERT_STATUS(dlock_mutex_acquire(m2, 0), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(m));
  ASSERT_OK(dlock_mutex_acquire(m2, 0));
  ASSERT(dlock_mutex_fence(m2) > fence);
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_client_free(o);
  dlock_client_free(c);
}

/* Promise: the guard decides by the fence, and is safe to send twice.
 * Attack: the guard's reply is lost after the statement ran. */
TEST(a_guard_check_whose_reply_is_lost_admits_once_and_refuses_older) {
  need_server();
  if (!pp) TEST_SKIP("no proxy");
  dlock_client *c = proxied_client();
  int before = pgp_dropped(pp);
  pgp_drop_reply(pp, "INSERT INTO dlock_guards", 1);
  ASSERT_OK(dlock_guard_check(c, "revmy-guard-lost", 7));
  ASSERT_EQ(pgp_dropped(pp), before + 1);
  ASSERT_STATUS(dlock_guard_check(c, "revmy-guard-lost", 6), DLOCK_ESTALE);
  ASSERT_OK(dlock_guard_check(c, "revmy-guard-lost", 7));
  ASSERT_OK(dlock_guard_check(c, "revmy-guard-lost", 8));
  dlock_client_free(c);
}

/* Promise ("Names"): every name goes in as a hexadecimal literal; a name
 * longer than 255 bytes is refused before any SQL (DLOCK_ENAME).
 * Attack: binary bytes, quotes and backslashes in a lock's, a guard
 * resource's and a semaphore's name; 300 and 100000 bytes. */
TEST(hostile_names_are_data_or_a_clear_error) {
  need_server();
  dlock_client *c = test_client(my.url);
  const char *names[] = {"x'; DROP TABLE dlock_locks; -- ", "back\\slash\\'", "\x01\x7f\x80\xff\xfe bin", "%_*"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    dlock_mutex *m = test_mutex(c, names[i], 3000);
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    ASSERT_OK(dlock_guard_check(c, names[i], dlock_mutex_fence(m)));
    ASSERT_OK(dlock_mutex_release(m));
    dlock_mutex_free(m);
    dlock_semaphore *s = test_semaphore(c, names[i], 2, 3000);
    ASSERT_OK(dlock_semaphore_acquire(s, 0));
    ASSERT_OK(dlock_semaphore_release(s));
    dlock_semaphore_free(s);
  }
  char *huge = malloc(100001);
  ASSERT(huge != NULL);
  memset(huge, 'n', 100000);
  huge[100000] = 0;
  size_t lens[] = {256, 300, 100000};
  for (size_t i = 0; i < 3; i++) {
    huge[lens[i]] = 0;
    ASSERT_STATUS(dlock_guard_check(c, huge, 1), DLOCK_ENAME);
    dlock_mutex *m = NULL;
    int rc = dlock_mutex_new(&m, c, huge, NULL);
    if (rc == 0) {
      rc = dlock_mutex_acquire(m, 0);
      dlock_mutex_free(m);
    }
    if (rc != DLOCK_ENAME) {
      free(huge);
      TEST_FAIL("a %zu-byte name: %s, not DLOCK_ENAME: %s", lens[i], dlock_err_name(rc), dlock_last_error());
    }
    huge[lens[i]] = 'n';
  }
  free(huge);
  char out[256] = "";
  th_my_sql(&my, out, sizeof out, "SELECT COUNT(*) FROM dlock.dlock_locks");
  ASSERT(atoi(out) > 0);
  dlock_client_free(c);
}

typedef struct frozen_probe {
  dlock_mutex *m;
  dlock_mono_ms at;
  dlock_lost_reason seen;
} frozen_probe;

static void *probe_lost(void *arg) {
  frozen_probe *p = arg;
  for (int i = 0; i < 2000 && dlock_mono_now() < p->at; i++) usleep(5000);
  p->seen = dlock_mutex_lost(p->m);
  return NULL;
}

/* Promise ("The local deadline rules the holder ... once it passes without
 * a renewal (the server unreachable or stuck), the hold is lost for the
 * holder"). Attack: SIGSTOP of mariadbd past a 1.5 s lease; the extend must
 * not report success, and the loss comes at the local deadline, not later. */
TEST(a_frozen_server_loses_the_hold_at_the_local_deadline) {
  need_server();
  dlock_client *c = test_client(my.url);
  dlock_mutex *m = test_mutex(c, "revmy-frozen", 1500);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_mono_ms until = dlock_mutex_valid_until(m);
  kill(my.pid, SIGSTOP);
  frozen_probe pr = {m, until + 150, DLOCK_LOST_NONE};
  pthread_t th;
  pthread_create(&th, NULL, probe_lost, &pr);
  int64_t t0 = mono_us();
  int rc = dlock_mutex_extend(m, 1500);
  int64_t took_ms = (mono_us() - t0) / 1000;
  dlock_mono_ms until2 = dlock_mutex_valid_until(m);
  pthread_join(th, NULL);
  kill(my.pid, SIGCONT);
  if (rc == 0) TEST_FAIL("extend on a frozen server succeeded after %" PRId64 " ms", took_ms);
  ASSERT(until2 <= until);
  if (pr.seen == DLOCK_LOST_NONE) TEST_FAIL("150 ms past the local deadline the hold was not lost (extend took %" PRId64 " ms)", took_ms);
  (void)dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Promise ("Waiting"): a waiter is never kept past its deadline by the
 * doorbell ("never past the deadline"). Attack: a waiter with 120 ms to wait
 * on a held mutex whose holder keeps its bell. */
TEST(a_short_wait_on_the_doorbell_ends_at_its_deadline) {
  need_server();
  dlock_client *a = test_client(my.url), *b = test_client(my.url);
  dlock_mutex *h = test_mutex(a, "revmy-bell", 10000);
  ASSERT_OK(dlock_mutex_acquire(h, 0));
  dlock_mutex *w = test_mutex(b, "revmy-bell", 10000);
  int64_t worst = 0;
  for (int i = 0; i < 5; i++) {
    int64_t t0 = mono_us();
    ASSERT_STATUS(dlock_mutex_acquire(w, 120), DLOCK_EBUSY);
    int64_t ms = (mono_us() - t0) / 1000;
    if (ms > worst) worst = ms;
  }
  ASSERT_OK(dlock_mutex_release(h));
  if (worst > 120 + 400) TEST_FAIL("a 120 ms wait took %" PRId64 " ms", worst);
  dlock_mutex_free(w);
  dlock_mutex_free(h);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Promise ("Semaphores and read-write locks"): "A lost reply is answered by
 * the hold's token as for the mutex: the transaction is run once more and
 * finds its own hold (the same fence), or the release's trace in
 * released". Attack: the reply to the COMMIT of a semaphore's acquire, and
 * then of its release, is lost after the COMMIT ran. */
TEST(a_semaphore_whose_commit_replies_are_lost_answers_as_the_first_would) {
  need_server();
  if (!pp) TEST_SKIP("no proxy");
  dlock_client *c = proxied_client();
  dlock_client *o = test_client(my.url);
  dlock_semaphore *s = test_semaphore(c, "revmy-sem-lost", 1, 5000);
  dlock_semaphore *s2 = test_semaphore(o, "revmy-sem-lost", 1, 5000);
  int before = pgp_dropped(pp);
  pgp_drop_reply(pp, "\x03" "COMMIT", 1);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_EQ(pgp_dropped(pp), before + 1);
  uint64_t fence = dlock_semaphore_fence(s);
  ASSERT(fence > 0);
  ASSERT_STATUS(dlock_semaphore_acquire(s2, 0), DLOCK_EBUSY);
  pgp_drop_reply(pp, "\x03" "COMMIT", 1);
  ASSERT_OK(dlock_semaphore_release(s));
  ASSERT_EQ(pgp_dropped(pp), before + 2);
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  ASSERT(dlock_semaphore_fence(s2) > fence);
  ASSERT_OK(dlock_semaphore_release(s2));
  /* A read-write lock's writer, likewise. */
  dlock_rwlock *w = test_rwlock(c, "revmy-rw-lost", DLOCK_RW_WRITE, 5000);
  dlock_rwlock *r = test_rwlock(o, "revmy-rw-lost", DLOCK_RW_READ, 5000);
  pgp_drop_reply(pp, "\x03" "COMMIT", 1);
  ASSERT_OK(dlock_rwlock_acquire(w, 0));
  ASSERT_STATUS(dlock_rwlock_acquire(r, 0), DLOCK_EBUSY);
  pgp_drop_reply(pp, "\x03" "COMMIT", 1);
  ASSERT_OK(dlock_rwlock_release(w));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  ASSERT_OK(dlock_rwlock_release(r));
  dlock_rwlock_free(r);
  dlock_rwlock_free(w);
  dlock_semaphore_free(s2);
  dlock_semaphore_free(s);
  dlock_client_free(o);
  dlock_client_free(c);
}

/* Promise ("URLs"): "Messages name the server as mysql://user:***@host:port/db:
 * the password never appears (dlock_url_redact(), every error, dlock
 * doctor, the CLI)"; dlock.h: dlock_url_redact() masks the password "also
 * when the URL is malformed", and "?password=PASSWORD keeps the parameter's
 * name". Attack: passwords the user forgot to percent-encode ('/', '#',
 * '?'), and a password given as ?password= (as in a PostgreSQL URL). */
TEST(a_password_never_appears_in_messages_of_malformed_urls) {
  need_server();
  const char *secret = "Zq9SECRETpw";
  int leaks = 0;
  const char *fmts[] = {
      "mysql://dlock:%s/x@127.0.0.1:%d/dlock",  /* '/' not encoded */
      "mysql://dlock:%s#x@127.0.0.1:%d/dlock",  /* '#' not encoded */
      "mysql://dlock:%s?x@127.0.0.1:%d/dlock",  /* '?' not encoded */
      "mysql://dlock@127.0.0.1:%2$d/dlock?password=%1$s",
  };
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    char url[512], shown[512];
    snprintf(url, sizeof url, fmts[i], secret, my.port);
    dlock_url_redact(url, shown, sizeof shown);
    if (strstr(shown, secret)) {
      fprintf(stderr, "  dlock_url_redact(\"%s\") = \"%s\": the password shows\n", url, shown);
      leaks++;
    }
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = url;
    dlock_client *c = NULL;
    int rc = dlock_client_new(&c, &o);
    const char *msg = rc ? dlock_last_error() : "";
    if (rc == 0) dlock_client_free(c);
    if (strstr(msg, secret)) {
      fprintf(stderr, "  %s: the error shows the password: %s\n", url, msg);
      leaks++;
    }
  }
  if (leaks) TEST_FAIL("the password was shown %d times (above)", leaks);
}

/* Promise ("A lost reply is never answered by guessing ... sent once more on
 * a new connection"; "An idle connection the server ended ... is noticed
 * before use and replaced"). Attack: the connection is lost at the first
 * statement of a semaphore's transaction (SET TRANSACTION ISOLATION LEVEL,
 * which changes nothing): the proxy drops its reply and closes the link, as
 * a KILL, a restart or a network cut at that moment would. Nothing of the
 * acquire or release has run, so a retry on a new connection is safe. */
TEST(a_connection_lost_at_a_transactions_start_is_retried_not_busy) {
  need_server();
  if (!pp) TEST_SKIP("no proxy");
  dlock_client *c = proxied_client();
  dlock_client *o = test_client(my.url);
  dlock_semaphore *s = test_semaphore(c, "revmy-sem-start", 1, 5000);
  dlock_semaphore *s2 = test_semaphore(o, "revmy-sem-start", 1, 5000);
  /* The name's row exists first (its first use takes another path). */
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  ASSERT_OK(dlock_semaphore_release(s2));
  int before = pgp_dropped(pp), wrong = 0;
  const char *what[] = {"acquire", "extend", "release"};
  for (int step = 0; step < 3; step++) {
    pgp_drop_reply(pp, "SET TRANSACTION ISOLATION", 1);
    int rc = step == 0 ? dlock_semaphore_acquire(s, 0)
             : step == 1 ? dlock_semaphore_extend(s, 5000)
                         : dlock_semaphore_release(s);
    ASSERT_EQ(pgp_dropped(pp), before + step + 1);
    if (rc != 0) {
      fprintf(stderr, "  %s after a connection lost at SET TRANSACTION: %d (%s), message '%s'\n", what[step], rc,
              dlock_err_name(rc), dlock_last_error());
      wrong++;
      if (step == 0) ASSERT_OK(dlock_semaphore_acquire(s, 0));
      if (step == 2 && dlock_semaphore_acquire(s2, 0) == DLOCK_EBUSY)
        fprintf(stderr, "  and its permit is still held on the server (another client is refused), while this "
                "handle no longer holds it: %s\n", dlock_last_error());
      else if (step == 2)
        ASSERT_OK(dlock_semaphore_release(s2));
    }
  }
  if (wrong) TEST_FAIL("%d of 3 calls failed though nothing of them had run (above)", wrong);
  ASSERT_OK(dlock_semaphore_acquire(s2, 0));
  ASSERT_OK(dlock_semaphore_release(s2));
  dlock_semaphore_free(s2);
  dlock_semaphore_free(s);
  dlock_client_free(o);
  dlock_client_free(c);
}

/* ---- semaphore limit and read-write exclusion under contention (threads,
 * one client each) ---- */
typedef struct fam_run {
  int kind; /* 0 semaphore of 2, 1 reader, 2 writer */
  int bad, done;
} fam_run;
static pthread_mutex_t fam_mu = PTHREAD_MUTEX_INITIALIZER;
static int fam_in_sem, fam_max_sem, fam_readers, fam_writers, fam_violations;

static void *fam_thread(void *arg) {
  fam_run *r = arg;
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = my.url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) {
    r->bad = 1;
    return NULL;
  }
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 4000;
  dlock_semaphore *s = NULL;
  dlock_rwlock *rw = NULL;
  if (r->kind == 0) dlock_semaphore_new(&s, c, "revmy-sem-many", 2, &mo);
  else dlock_rwlock_new(&rw, c, "revmy-rw-many", r->kind == 1 ? DLOCK_RW_READ : DLOCK_RW_WRITE, &mo);
  for (int i = 0; i < 8; i++) {
    int rc = s ? dlock_semaphore_acquire(s, 40000) : dlock_rwlock_acquire(rw, 40000);
    if (rc) {
      fprintf(stderr, "  kind %d: acquire: %s\n", r->kind, dlock_last_error());
      r->bad = 1;
      break;
    }
    pthread_mutex_lock(&fam_mu);
    if (r->kind == 0) {
      if (++fam_in_sem > fam_max_sem) fam_max_sem = fam_in_sem;
    } else if (r->kind == 1) {
      fam_readers++;
      if (fam_writers) fam_violations++;
    } else {
      fam_writers++;
      if (fam_writers > 1 || fam_readers) fam_violations++;
    }
    pthread_mutex_unlock(&fam_mu);
    usleep(20000);
    pthread_mutex_lock(&fam_mu);
    if (r->kind == 0) fam_in_sem--;
    else if (r->kind == 1) fam_readers--;
    else fam_writers--;
    pthread_mutex_unlock(&fam_mu);
    rc = s ? dlock_semaphore_release(s) : dlock_rwlock_release(rw);
    if (rc) {
      fprintf(stderr, "  kind %d: release: %s\n", r->kind, dlock_last_error());
      r->bad = 1;
    }
    r->done++;
  }
  if (s) dlock_semaphore_free(s);
  if (rw) dlock_rwlock_free(rw);
  dlock_client_free(c);
  return NULL;
}

/* Promise (semaphore.md, rwlock.md, "Semaphores and read-write locks"): at
 * most 'limit' permits; a writer alone, readers together. Attack: 5 threads
 * on a semaphore of 2; 3 readers and 2 writers on one lock, 8 holds each. */
TEST(semaphore_limit_and_rwlock_exclusion_hold_under_contention) {
  need_server();
  enum { T = 10 };
  fam_run runs[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    runs[i] = (fam_run){.kind = i < 5 ? 0 : i < 8 ? 1 : 2};
    pthread_create(&th[i], NULL, fam_thread, &runs[i]);
  }
  int bad = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    bad |= runs[i].bad || runs[i].done != 8;
  }
  if (fam_max_sem > 2) TEST_FAIL("%d permits of 2 were held at once", fam_max_sem);
  if (fam_violations) TEST_FAIL("%d times a writer was not alone", fam_violations);
  ASSERT(!bad);
}

TEST_MAIN()
