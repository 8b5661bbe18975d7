/*
 * test_election_guard.c - `dlock elect` (and so `dlock run`) against the
 * findings of the election review (branch revel, docs/election.md "Tests"):
 * no two leaders' commands at once when dlock is stopped (SIGSTOP), killed
 * (kill -9) or cut off (a fault proxy blackholes its link): the command gets
 * SIGTERM --grace before the local deadline and SIGKILL at it, from dlock or
 * from its guardian; a --grace that cannot fit is refused; and no password
 * handed to the command in DLOCK_URL.
 *
 * One Redis with a password, started lazily on a free loopback port and
 * stopped by PID in test_teardown(), which runs after every test, failed
 * ones too. The CLI is run by fork+exec.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"
#include "faultproxy.h"
#include "harness.h"
#include "test.h"

static th_redis redis_srv;
static int redis_up;
static char tmpdir[256];

#define PASSWORD "s3cretElectPw"

void test_teardown(void) {
  if (redis_up) th_redis_stop(&redis_srv);
  redis_up = 0;
  if (tmpdir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) { /* best effort */
    }
  }
}

static const char *tmp(void) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dlock-revel-XXXXXX");
    if (!mkdtemp(tmpdir)) TEST_FAIL("mkdtemp: %s", strerror(errno));
  }
  return tmpdir;
}

static void redis_need(void) {
  if (redis_up) return;
  if (th_redis_start(&redis_srv, NULL) != 0) TEST_FAIL("cannot start redis-server");
  redis_up = 1;
  /* After the start: the harness's readiness check has no password. */
  char out[256];
  if (th_redis_cli(&redis_srv, out, sizeof out, "CONFIG SET requirepass %s", PASSWORD) != 0 || !strstr(out, "OK"))
    TEST_FAIL("CONFIG SET requirepass on redis-server port %d: %s", redis_srv.port, out);
}

/* The CLI: DLOCK_BIN, else the build's cli/dlock next to tests/. */
static const char *dlock_bin(void) {
  static char path[PATH_MAX];
  const char *env = getenv("DLOCK_BIN");
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
#ifdef DLOCK_BIN_PATH
    snprintf(path, sizeof path, "%s", DLOCK_BIN_PATH);
#else
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) TEST_FAIL("readlink /proc/self/exe");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof path, "%s/../cli/dlock", self);
#endif
  }
  if (access(path, X_OK) != 0) TEST_SKIP("no dlock CLI at %s (build the 'dlock' target or set DLOCK_BIN)", path);
  return path;
}

static int file_contains(const char *path, const char *needle, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if (buf[i] == '\0') buf[i] = '\n'; /* /proc/PID/cmdline and environ */
  return strstr(buf, needle) != NULL;
}

/* ------------------------------------------------------------------------
 * Finding 1 (low; a secret handed on). The brief's promise, and the
 * project's rule "No secret is printed": the URL's password is masked
 * everywhere dlock shows a URL (docs/cli.md: "the URL's password as ***").
 * Attack: `dlock elect --url redis://:PASSWORD@... NAME -- sh -c 'env'`,
 * with no DLOCK_URL in dlock's own environment: what does CMD see?
 * What happened: dlock adds DLOCK_URL=redis://:PASSWORD@127.0.0.1:PORT to
 * CMD's environment (cli/cmd_run.c plan_build). CMD (any third-party
 * program run as the leader) and everything it starts, and anything that can
 * read /proc/PID/environ of those processes, now hold the Redis password the
 * operator gave only on dlock's command line. docs/cli.md lists DLOCK_URL
 * among the variables given to the command, without saying the password
 * goes with it; a nested `dlock fence check` could take the URL without
 * the password from DLOCK_URL and the password from a file or a variable
 * the operator chose to hand on.
 * ---------------------------------------------------------------------- */
TEST(elect_does_not_hand_the_url_password_to_the_command) {
  redis_need();
  const char *bin = dlock_bin();
  char url[600], out[400], buf[65536];
  snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, redis_srv.port);
  snprintf(out, sizeof out, "%s/env.txt", tmp());
  unlink(out);
  for (int round = 0; round < 3; round++) {
    pid_t pid = fork();
    if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
      unsetenv("DLOCK_URL"); /* only --url gives dlock the password */
      int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0) _exit(120);
      dup2(fd, 1);
      execl(bin, bin, "elect", "--url", url, "revel-env", "--lease", "10s", "--", "sh", "-c",
            "env; cat /proc/$$/cmdline", (char *)NULL);
      _exit(127);
    }
    int st = th_wait(pid, 30000);
    if (st == -1) TEST_FAIL("dlock elect did not end within 30 s (killed)");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      TEST_FAIL("dlock elect --url redis://:***@127.0.0.1:%d exited with status %d, expected 0", redis_srv.port,
                WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    int has = file_contains(out, PASSWORD, buf, sizeof buf);
    if (has < 0) TEST_FAIL("the command wrote no %s", out);
    if (!strstr(buf, "DLOCK_LEADER_EPOCH=")) TEST_FAIL("the command did not run as leader: %s", buf);
    if (has)
      TEST_FAIL("round %d: the command of `dlock elect --url redis://:***@...` sees the Redis password in its "
                "environment (DLOCK_URL=redis://:<password>@...); it was given only on dlock's command line",
                round + 1);
  }
}

/* Start `dlock elect --url URL NAME --value V --lease 3s -- sh -c LOOP`, the
 * loop appending "V EPOCH NANOS" to 'hist' every 100 ms. fork+exec. */
static pid_t elect_writer(const char *url, const char *name, const char *value, const char *hist) {
  char loop[600];
  snprintf(loop, sizeof loop,
           "while :; do echo \"$DLOCK_LEADER_VALUE $DLOCK_LEADER_EPOCH $(date +%%s%%N)\" >> '%s'; sleep 0.1; done",
           hist);
  const char *bin = dlock_bin();
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 1);
    execl(bin, bin, "elect", "--url", url, name, "--value", value, "--lease", "3s", "--grace", "1s", "--", "sh", "-c",
          loop, (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* The first and last time (ns) 'who' wrote to 'hist'; 0 when never. */
static void hist_span(const char *hist, const char *who, long long *first, long long *last, long long after,
                      int *count_after) {
  *first = *last = 0;
  if (count_after) *count_after = 0;
  FILE *f = fopen(hist, "r");
  if (!f) return;
  char w[64];
  unsigned long long e;
  long long t;
  while (fscanf(f, "%63s %llu %lld", w, &e, &t) == 3) {
    if (strcmp(w, who) != 0) continue;
    if (!*first || t < *first) *first = t;
    if (t > *last) *last = t;
    if (count_after && after && t > after) (*count_after)++;
  }
  fclose(f);
}

/* When 'who' wrote its first line to 'hist', waiting up to 20 s; 0 if it did not. */
static long long wait_first_line(const char *hist, const char *who) {
  long long first = 0, last, until = th_now_ms() + 20000;
  do {
    th_sleep_ms(20);
    hist_span(hist, who, &first, &last, 0, NULL);
  } while (!first && th_now_ms() < until);
  return first;
}

static void stop_dlock(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGCONT);
  kill(pid, SIGTERM);
  if (th_wait(pid, 15000) == -1) { /* killed by th_wait: its guardian ends the command's group */
  }
}

/* ------------------------------------------------------------------------
 * Finding 3 (medium-high; two leaders' commands at once). The promises,
 * docs/election.md: "CMD runs only while this host leads"; "the lease
 * guarantees that no two live, running leaders overlap"; the pause caveat
 * is about a leader that "does not run".
 * Attack: A's `dlock elect` leads (lease 3 s) and its CMD appends a line
 * every 100 ms to a shared history; B stands by. SIGSTOP the dlock process
 * of A only (a supervisor that is swapped out, stopped by a debugger or a
 * cgroup freezer aimed at it, or starved): A's CMD is in its own process
 * group and keeps running. After the lease B leads and its CMD writes too.
 * What happened: A's CMD went on writing for the whole time its dlock was
 * stopped (seconds after B's term began, unbounded in general): nothing
 * outside the stopped dlock watches A's deadline. The guardian process
 * (cli_guard) only reacts to dlock's death, not to the deadline. A fix: the
 * guardian could be given each new valid_until and end the group at the
 * deadline by itself.
 * ---------------------------------------------------------------------- */
TEST(elect_command_stops_at_the_deadline_even_when_its_dlock_is_stopped) {
  redis_need();
  char url[600], hist[400];
  snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, redis_srv.port);
  for (int round = 0; round < 2; round++) {
    char name[64];
    snprintf(name, sizeof name, "revel-pause-%d", round);
    snprintf(hist, sizeof hist, "%s/pause-%d.hist", tmp(), round);
    unlink(hist);
    pid_t a = elect_writer(url, name, "A", hist), b = -1;
    long long fa, la, fb, lb;
    fa = wait_first_line(hist, "A");
    long long until;
    if (!fa) {
      stop_dlock(a);
      TEST_FAIL("A's command did not start leading within 20 s on redis-server port %d", redis_srv.port);
    }
    b = elect_writer(url, name, "B", hist);
    th_sleep_ms(1000); /* B is queued */
    kill(a, SIGSTOP);
    until = th_now_ms() + 30000;
    do {
      th_sleep_ms(100);
      hist_span(hist, "B", &fb, &lb, 0, NULL);
    } while (!fb && th_now_ms() < until);
    if (fb) th_sleep_ms(2000); /* both would write now, if A's command ran on */
    int a_after = 0;
    hist_span(hist, "A", &fa, &la, fb + 500LL * 1000000, &a_after);
    kill(a, SIGCONT);
    stop_dlock(b);
    stop_dlock(a);
    if (!fb) TEST_FAIL("B never led within 30 s of stopping A's dlock (redis-server port %d)", redis_srv.port);
    if (a_after > 0)
      TEST_FAIL("round %d: A's command (its dlock stopped with SIGSTOP, lease 3 s) wrote %d lines after B's term "
                "began, the last %lld ms after B's first: two leaders' commands ran at once",
                round + 1, a_after, (la - fb) / 1000000);
  }
}

/* ------------------------------------------------------------------------
 * Finding 4 (medium; two leaders' commands at once after kill -9). The
 * promises: docs/election.md "CMD runs only while this host leads"; and the
 * CLI's own check, `--grace must be shorter than --lease: if dlock is killed,
 * a command that ignores SIGTERM would still run after the lease ran out and
 * another holder took the lock`.
 * Attack: A leads with --lease 3s --grace 2900ms (accepted), its CMD
 * ignores SIGTERM and appends to a shared history every 50 ms; B stands by.
 * kill -9 A's dlock 1.9 s after A's term began (0.9 s after its first
 * renewal, just before the second). The guardian sends SIGTERM at once and
 * SIGKILL 2.9 s after the kill; but the key expires 3 s after the last
 * renewal *was sent*, 0.9 s before the kill, and B leads then.
 * What happened: A's CMD kept writing for ~0.8 s after B's CMD had begun.
 * The check compares --grace with the whole lease, but the lease left at
 * the moment of a kill is as short as two thirds of it: grace must be
 * shorter than the lease left (or the guardian must SIGKILL at the lease's
 * end, which dlock can tell it at each renewal).
 * ---------------------------------------------------------------------- */
static pid_t elect_ignoring_term(const char *url, const char *name, const char *value, const char *hist,
                                 const char *grace) {
  char loop[600];
  snprintf(loop, sizeof loop,
           "trap '' TERM; while :; do echo \"$DLOCK_LEADER_VALUE $DLOCK_LEADER_EPOCH $(date +%%s%%N)\" >> '%s'; "
           "sleep 0.05; done",
           hist);
  const char *bin = dlock_bin();
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 1);
    execl(bin, bin, "elect", "--url", url, name, "--value", value, "--lease", "3s", "--grace", grace, "--", "sh", "-c",
          loop, (char *)NULL);
    _exit(127);
  }
  return pid;
}

TEST(elect_refuses_a_grace_that_cannot_fit_before_the_deadline) {
  const char *bin = dlock_bin();
  char err[400], buf[4096];
  snprintf(err, sizeof err, "%s/grace.err", tmp());
  pid_t pid = fork();
  if (pid < 0) TEST_FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) _exit(120);
    dup2(fd, 2);
    execl(bin, bin, "elect", "--url", "redis://127.0.0.1:1", "revel-grace", "--lease", "3s", "--grace", "2900ms", "--",
          "true", (char *)NULL);
    _exit(127);
  }
  int st = th_wait(pid, 30000);
  int has = file_contains(err, "--grace 2.900s is too long for --lease 3s", buf, sizeof buf);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 64 || has != 1)
    TEST_FAIL("dlock elect --lease 3s --grace 2900ms: exit %d, stderr '%s'; expected 64 and a message that the "
              "grace is too long for the lease (after kill -9 of dlock the command would outlive the key)",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, buf);
}

/* One round of the loss tests below: A (its command ignores SIGTERM,
 * --grace 1500ms) leads the election 'name' on 'url_a' until its command's
 * first line, B stands on 'url_b', 'fault' ends A's term (A's pid, the time
 * of A's first line), then B's first line is awaited (20 s) and, 'settle_ms'
 * later, A's lines after it are counted into '*a_after' ('*ms_after': the
 * last one's distance from B's first); 'heal' (may be NULL) undoes the fault
 * before both are stopped. Returns NULL or what went wrong. */
typedef void (*round_fault)(pid_t a, long long fa, void *arg);

static const char *loss_round(const char *url_a, const char *url_b, const char *name, const char *hist,
                              round_fault fault, round_fault heal, void *arg, long settle_ms, int *a_after,
                              long long *ms_after) {
  unlink(hist);
  pid_t a = elect_ignoring_term(url_a, name, "A", hist, "1500ms");
  long long fa = wait_first_line(hist, "A"), la, fb;
  *a_after = 0;
  if (!fa) {
    stop_dlock(a);
    return "A's command did not start leading within 20 s";
  }
  pid_t b = elect_writer(url_b, name, "B", hist);
  fault(a, fa, arg);
  fb = wait_first_line(hist, "B");
  th_sleep_ms(settle_ms); /* A's grace is over by now */
  hist_span(hist, "A", &fa, &la, fb, a_after);
  *ms_after = fb ? (la - fb) / 1000000 : 0;
  if (heal) heal(a, fa, arg);
  stop_dlock(b);
  stop_dlock(a);
  return fb ? NULL : "B never led within 20 s of the fault on A";
}

/* kill -9 of A's dlock 1.9 s after A's term began (by A's first line): just
 * before its second renewal. */
static void kill9_before_second_renewal(pid_t a, long long fa, void *arg) {
  (void)arg;
  long long kill_at_ns = fa + 1900LL * 1000000;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  long long now_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
  if (kill_at_ns > now_ns) th_sleep_ms((kill_at_ns - now_ns) / 1000000);
  kill(a, SIGKILL);
  th_wait(a, 5000);
}

/* The largest grace accepted for a 3 s lease: SIGKILL must still land before the key expires. */
TEST(elect_kill9_of_dlock_never_leaves_its_command_beside_the_next_leader) {
  redis_need();
  char url[600], hist[400];
  snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", PASSWORD, redis_srv.port);
  int worst_count = 0;
  long long worst_ms = 0;
  for (int round = 0; round < 2; round++) {
    char name[64];
    snprintf(name, sizeof name, "revel-kill9-%d", round);
    snprintf(hist, sizeof hist, "%s/kill9-%d.hist", tmp(), round);
    int a_after;
    long long ms;
    const char *fail = loss_round(url, url, name, hist, kill9_before_second_renewal, NULL, NULL, 3500, &a_after, &ms);
    if (fail) TEST_FAIL("%s (redis-server port %d)", fail, redis_srv.port);
    if (a_after > worst_count) {
      worst_count = a_after;
      worst_ms = ms;
    }
  }
  if (worst_count > 0)
    TEST_FAIL("after kill -9 of A's dlock (--lease 3s --grace 1500ms), A's command, which ignores "
              "SIGTERM, wrote %d lines after B's term began, the last %lld ms after B's first: two leaders' "
              "commands ran at once",
              worst_count, worst_ms);
}

/* A second into A's term, its link to Redis cut (blackholed); then passed again. */
static void cut_after_a_second(pid_t a, long long fa, void *arg) {
  (void)a, (void)fa;
  th_sleep_ms(1000);
  fp_blackhole((fp_proxy *)arg, 1);
}

static void pass_again(pid_t a, long long fa, void *arg) {
  (void)a, (void)fa;
  fp_pass((fp_proxy *)arg);
}

/* ------------------------------------------------------------------------
 * Finding 5 (medium; two leaders' commands at once on every loss by a
 * partition). The promises: docs/election.md "CMD runs only while this host
 * leads", "the lease guarantees that no two live, running leaders overlap".
 * Attack: A's dlock reaches Redis through a fault proxy, B's directly. A
 * leads (--lease 3s --grace 2s), its CMD takes its time to stop (ignores
 * SIGTERM, as a server finishing its requests does) and appends to a shared
 * history every 50 ms. Blackhole A's link.
 * What happened: A's dlock sends SIGTERM at its local deadline, which is
 * (by design) the moment the key expires on the server, so B leads at once;
 * A's CMD is killed only --grace later: it ran beside B's CMD for about
 * --grace (2 s here, any accepted --grace in general). The grace is spent
 * after the lease instead of inside it: a leader whose renewals fail should
 * start stopping its command at valid_until - grace (as client-go's renew
 * deadline is shorter than its lease), so that the command is gone when the
 * lease ends.
 * ---------------------------------------------------------------------- */
TEST(elect_partitioned_leader_command_is_gone_before_the_next_leader_starts) {
  redis_need();
  fp_proxy *fp = NULL;
  if (fp_start(&fp, redis_srv.port) != 0)
    TEST_FAIL("cannot start the fault proxy to redis-server port %d", redis_srv.port);
  char url_a[600], url_b[600], hist[400];
  snprintf(url_a, sizeof url_a, "redis://:%s@127.0.0.1:%d", PASSWORD, fp_port(fp));
  snprintf(url_b, sizeof url_b, "redis://:%s@127.0.0.1:%d", PASSWORD, redis_srv.port);
  int worst_count = 0;
  long long worst_ms = 0;
  const char *fail = NULL;
  for (int round = 0; round < 2 && !fail; round++) {
    fp_pass(fp);
    char name[64];
    snprintf(name, sizeof name, "revel-cut-%d", round);
    snprintf(hist, sizeof hist, "%s/cut-%d.hist", tmp(), round);
    int a_after;
    long long ms;
    fail = loss_round(url_a, url_b, name, hist, cut_after_a_second, pass_again, fp, 4000, &a_after, &ms);
    if (a_after > worst_count) {
      worst_count = a_after;
      worst_ms = ms;
    }
  }
  fp_stop(fp);
  if (fail) TEST_FAIL("%s (redis-server port %d)", fail, redis_srv.port);
  if (worst_count > 0)
    TEST_FAIL("A cut off from Redis (--lease 3s --grace 1500ms): its command, slow to stop, wrote %d lines after B's "
              "term began, the last %lld ms after B's first: two leaders' commands ran at once for the grace",
              worst_count, worst_ms);
}

TEST_MAIN()
