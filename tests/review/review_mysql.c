/*
 * review_mysql.c - the adversarial review of the MySQL/MariaDB backend
 * (branch revmy; docs/mysql.md, "Tests"), with a real mariadbd
 * (tests/harness_mysql.h) and the lost-reply proxy (tests/pgproxy.h): one
 * test per finding, each failing before its fix and a regression test
 * since. The attacks that held are listed in docs/mysql.md's "Tests" and
 * in the commit that moved these tests here. Apart from test_mysql.c,
 * which would grow past a minute. Labels: review, mysql (about 20 s: one
 * private mariadbd for all).
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"
#include "harness_mysql.h"
#include "pgproxy.h"
#include "test.h"

static th_my my;
static int my_up;
static char skip_why[256];
static pgp_proxy *pp;

void test_setup(void) {
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

/* Promise ("URLs"): "Messages name the server as mysql://user:***@host:port/db:
 * the password never appears (dlock_url_redact(), every error, dlock
 * doctor, the CLI)"; dlock.h: dlock_url_redact() masks the password "also
 * when the URL is malformed", and "?password=PASSWORD keeps the parameter's
 * name". Attack: passwords the user forgot to percent-encode ('/', '#',
 * '?'), and a password given as ?password= (as in a PostgreSQL URL).
 * Before the fix (3 runs of 3): all 8 checks showed it. dlock__my_redact()
 * (src/mysql/my_conn.c) takes the authority up to the first '/', '?' or
 * '#', finds no '@' there and returns the URL unchanged, so
 * dlock_url_redact() and dlock_client_new()'s error ("...': the port must
 * be a number 1..65535") print "mysql://dlock:Zq9SECRETpw/x@127.0.0.1:...";
 * and "unknown option 'password=Zq9SECRETpw'" quotes the raw option, with
 * the redacted URL before it still holding ?password=Zq9SECRETpw.
 * The CLI the same: `dlock status --url 'mysql://dlock:Zq9SECRETpw/x@
 * 127.0.0.1:1/dlock' foo` prints "dlock: cannot use MySQL at
 * mysql://dlock:Zq9SECRETpw/x@127.0.0.1:1/dlock: malformed server URL", and
 * `dlock doctor` with ?password= prints it twice.
 * Severity: medium (a secret in logs from a plausible typo). Fixed: the
 * redaction masks up to the URL's last '@' and password= values. */
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
 * acquire or release has run, so a retry on a new connection is safe.
 * Before the fix (3 runs of 3): acquire, extend and release each returned -1,
 * i.e. DLOCK_EBUSY, with an empty message (extend/release: "... on
 * mysql://dlock:***@...: " and nothing after). transaction() in
 * src/mysql/my_conn.c returns -1 when SET TRANSACTION or START TRANSACTION
 * fails; run_loop() takes any answer but 1 as the body's own, so it neither
 * sends the transaction again nor marks the connection broken (put_conn(...,
 * 0)), and -1 reaches the caller as EBUSY. Worst: the release says EBUSY,
 * the handle drops its hold, and the permit stays held on the server until
 * its lease ends (another client is refused meanwhile). The watchdog's
 * renewal goes the same way (what the core makes of an EBUSY renewal was
 * not checked). Read-write locks share the code (family.c).
 * Severity: medium-high (a wrong status with no message, a permit leaked
 * for a lease); no exclusion broken. Fixed: a connection lost before the
 * transaction began is replaced and the transaction tried again. */
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

/* The same with real KILLs: a thread ends every connection of the user
 * 'dlock' (KILL CONNECTION USER) again and again while this thread renews
 * a semaphore's permit and a read-write lock's read, and releases and takes
 * them again. Promise: "KILL of dlock's connections ... does not free it
 * ... the watchdog renews it meanwhile, on a new connection"; an idle
 * connection the server ended is replaced before use. Any failure of a
 * call is counted with its status and message.
 * Before the fix (4 runs of 4, after 1 to 15 kills): a semaphore's or a
 * read-write lock's release returns -1 (DLOCK_EBUSY) with an empty
 * message: likely a KILL returns before the server has closed the killed
 * connection's socket, so the pool's idle check (poll) passes it, and the
 * transaction's first statement meets the closed link: the finding above,
 * with real KILLs and no proxy.
 * Since the fix, a call whose two copies are both killed answers
 * DLOCK_EUNKNOWN ("may have run", docs/mysql.md), which the review counted
 * legitimate (on the mutex): under this stream of KILLs it happened in 2
 * runs of 9 on a busy machine (the second copy waits for the row the killed session
 * still holds, and meets the next KILL); it ends the loop, not failing. */
static atomic_int killer_stop, killer_kills;

static void *killer(void *arg) {
  (void)arg;
  char out[64];
  for (int i = 0; i < 200 && !atomic_load(&killer_stop); i++) {
    th_my_sql(&my, out, sizeof out, "KILL CONNECTION USER 'dlock'");
    atomic_fetch_add(&killer_kills, 1);
  }
  return NULL;
}

TEST(kills_of_every_connection_do_not_fail_a_semaphores_calls) {
  need_server();
  dlock_client *c = test_client(my.url);
  dlock_semaphore *s = test_semaphore(c, "revmy-sem-kill", 2, 8000);
  dlock_rwlock *r = test_rwlock(c, "revmy-rw-kill", DLOCK_RW_READ, 8000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  ASSERT_OK(dlock_rwlock_acquire(r, 0));
  atomic_store(&killer_stop, 0);
  pthread_t th;
  pthread_create(&th, NULL, killer, NULL);
  int fails = 0, calls = 0, busy_empty = 0;
  dlock_mono_ms end = dlock_mono_now() + 15000;
  for (int i = 0; i < 3000 && dlock_mono_now() < end; i++) {
    int rc;
    switch (i % 4) {
    case 0: rc = dlock_semaphore_extend(s, 8000); break;
    case 1: rc = dlock_rwlock_release(r); if (rc == 0) rc = dlock_rwlock_acquire(r, 0); break;
    case 2: rc = dlock_semaphore_release(s); if (rc == 0) rc = dlock_semaphore_acquire(s, 0); break;
    default: rc = dlock_rwlock_fence(r) ? 0 : -99; break;
    }
    calls++;
    if (rc == DLOCK_EUNKNOWN && strstr(dlock_last_error(), "may have run")) {
      /* Both copies of one call killed (the first KILL's session may still
       * hold the row when the second copy waits for it): the documented
       * answer, with its whole message, not a failure; the state is
       * unknown from here, so the loop ends. */
      fprintf(stderr, "  call %d (%d): both copies lost: %s\n", i, i % 4, dlock_last_error());
      break;
    }
    if (rc != 0) {
      if (fails < 6) fprintf(stderr, "  call %d (%d): %d (%s): '%s'\n", i, i % 4, rc, dlock_err_name(rc), dlock_last_error());
      fails++;
      if (rc == DLOCK_EBUSY) busy_empty++;
      break;
    }
  }
  atomic_store(&killer_stop, 1);
  pthread_join(th, NULL);
  fprintf(stderr, "  %d calls, %d kills\n", calls, atomic_load(&killer_kills));
  if (fails) TEST_FAIL("%d calls failed under KILL (%d EBUSY)", fails, busy_empty);
  (void)dlock_semaphore_release(s);
  (void)dlock_rwlock_release(r);
  dlock_rwlock_free(r);
  dlock_semaphore_free(s);
  dlock_client_free(c);
}

/* Promise (common rules, docs/errors.md): every failure message says what
 * failed, where, and what to do. docs/mysql.md: "When the second try fails
 * too, the answer is DLOCK_EUNKNOWN ('may be held until its lease ends')".
 * Attack: the replies to a release are lost twice (the proxy drops the
 * reply to the release's UPDATE, and again to the copy sent once more),
 * for a mutex, a semaphore (its COMMIT) and a force release (once: it is
 * never sent twice).
 * Before the fix (3 runs of 3; first seen under real KILLs): the status is
 * DLOCK_EUNKNOWN as promised, but the message is garbled, e.g. "release of
 * 'x' on mysql://dlock:***@...: release of 'x' on mysql://...: ed out
 * before the reply (...)": release_lease() (src/mysql/backend.c),
 * dlock__my_fam_release() (family.c) and my_force_release() pass
 * dlock_last_error() as an argument to dlock__error(), which vsnprintf()s
 * into that same buffer (overlapping source and destination: undefined
 * behaviour). my_acquire() copies it first for this very reason.
 * Severity: low-medium (the user-facing explanation of an uncertain
 * release is unreadable; undefined behaviour). Fixed in dlock__error()
 * (formats apart, then copies). */
/* 'needle' in 'hay' exactly once. */
static int just_once(const char *hay, const char *needle) {
  const char *first = strstr(hay, needle);
  return first && !strstr(first + 1, needle);
}

TEST(an_unknown_release_has_a_whole_message) {
  need_server();
  if (!pp) TEST_SKIP("no proxy");
  dlock_client *c = proxied_client();
  int bad = 0;
  char msg[1200];
  /* A mutex. */
  dlock_mutex *m = test_mutex(c, "revmy-garble", 4000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  pgp_drop_reply(pp, "UPDATE dlock_locks SET owner_info", 2);
  int rc = dlock_mutex_release(m);
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  fprintf(stderr, "  mutex release: %s: '%s'\n", dlock_err_name(rc), msg);
  if (rc != DLOCK_EUNKNOWN || !just_once(msg, "release of 'revmy-garble'") ||
      !strstr(msg, "the connection was lost or timed out before the reply"))
    bad++;
  dlock_mutex_free(m);
  /* A semaphore. */
  dlock_semaphore *s = test_semaphore(c, "revmy-garble-sem", 2, 4000);
  ASSERT_OK(dlock_semaphore_acquire(s, 0));
  pgp_drop_reply(pp, "\x03" "COMMIT", 2);
  rc = dlock_semaphore_release(s);
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  fprintf(stderr, "  semaphore release: %s: '%s'\n", dlock_err_name(rc), msg);
  if (rc != DLOCK_EUNKNOWN || !just_once(msg, "release of 'revmy-garble-sem'") ||
      !strstr(msg, "the connection was lost or timed out before the reply"))
    bad++;
  dlock_semaphore_free(s);
  /* A force release. */
  dlock_mutex *f = test_mutex(c, "revmy-garble-force", 4000);
  ASSERT_OK(dlock_mutex_acquire(f, 0));
  pgp_drop_reply(pp, "last = CONCAT(token, '!')", 1);
  int was = 0;
  rc = dlock_lock_force_release(c, "revmy-garble-force", &was);
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  fprintf(stderr, "  force release: %s: '%s'\n", dlock_err_name(rc), msg);
  if (rc != DLOCK_EUNKNOWN || !just_once(msg, "force release of 'revmy-garble-force'") ||
      !strstr(msg, "the connection was lost or timed out before the reply"))
    bad++;
  dlock_mutex_free(f);
  dlock_client_free(c);
  if (bad) TEST_FAIL("%d of 3 messages are not whole (above)", bad);
}


TEST_MAIN()
