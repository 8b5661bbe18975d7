/*
 * test_redlock_clock.c - the fifth review of Redlock's restart rule
 * (formerly open_redlock_review5.c, branch rev5; fixed on branch rl6):
 * each rev5_rl_* test FAILED on the code it was written against. Registered
 * as ctest "review/test_redlock_clock" (labels "review;redlock"; REVIEW_TEST,
 * test.h), apart from test_redlock_faults.c, which runs for two minutes
 * already.
 *
 * Two of the five redis-servers run with a clock shim (their wall clock,
 * which TIME answers, offset by a file's value; their monotonic clock
 * untouched), so a test steps those nodes' clocks as NTP or a VM restore
 * would. The history check runs only with REV5_HISTORY=1 (it held).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hold_history.h"
#include "test.h"

#define N 5

static th_redis nodes[N];
static int up;
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

/* Step the clocks of nodes 1 and 2 to 'off_s' seconds from ours, and wait
 * (up to 5 s) until both answer TIME with it: the shim reads the file at
 * most every 20 ms. */
static long long node_time_s(int i);
static void step_clocks(long long off_s) {
  char off[32];
  snprintf(off, sizeof off, "%lld", off_s);
  set_offset(off);
  long long t0 = th_now_ms(), a = 0, b = 0, want = 0;
  for (int k = 0; k < 200 && th_now_ms() - t0 < 5000; k++) {
    want = (long long)time(NULL) + off_s;
    a = node_time_s(0);
    b = node_time_s(1);
    if (llabs(a - want) <= 2 && llabs(b - want) <= 2) return;
    th_sleep_ms(25);
  }
  TEST_FAIL("the clocks of nodes 1 and 2 did not step to %lld s (they read %lld and %lld, want %lld)", off_s, a, b,
            want);
}

static void stop_all(void) {
  if (up) th_redis_stop_n(nodes, N);
  up = 0;
}

/* A clock shim for redis-server (libfaketime recurses in redis-server's
 * start-up here: "Unexpected recursive calls to clock_gettime()"): the wall
 * clock (clock_gettime(CLOCK_REALTIME), gettimeofday, time) plus an offset
 * in seconds read from $REV5_CLOCK_FILE, looked at every 20 ms; the
 * monotonic clock untouched. Built with cc when the test starts. */
static const char shim_src[] = "#define _GNU_SOURCE\n"
                               "#include <stdio.h>\n"
                               "#include <stdlib.h>\n"
                               "#include <sys/syscall.h>\n"
                               "#include <sys/time.h>\n"
                               "#include <time.h>\n"
                               "#include <unistd.h>\n"
                               "static long long off_us, checked_ns;\n"
                               "static long long mono_ns(void) {\n"
                               "  struct timespec t;\n"
                               "  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);\n"
                               "  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;\n"
                               "}\n"
                               "static void refresh(void) {\n"
                               "  long long n = mono_ns();\n"
                               "  if (checked_ns && n - checked_ns < 20000000LL) return;\n"
                               "  checked_ns = n;\n"
                               "  const char *p = getenv(\"REV5_CLOCK_FILE\");\n"
                               "  if (!p) return;\n"
                               "  FILE *f = fopen(p, \"r\");\n"
                               "  if (!f) return;\n"
                               "  long long s;\n"
                               "  if (fscanf(f, \"%lld\", &s) == 1) off_us = s * 1000000LL;\n"
                               "  fclose(f);\n"
                               "}\n"
                               "int clock_gettime(clockid_t id, struct timespec *ts) {\n"
                               "  int rc = (int)syscall(SYS_clock_gettime, id, ts);\n"
                               "  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {\n"
                               "    refresh();\n"
                               "    long long us = (long long)ts->tv_sec * 1000000LL + ts->tv_nsec / 1000 + off_us;\n"
                               "    ts->tv_sec = us / 1000000LL;\n"
                               "    ts->tv_nsec = (us % 1000000LL) * 1000;\n"
                               "  }\n"
                               "  return rc;\n"
                               "}\n"
                               "int gettimeofday(struct timeval *tv, void *tz) {\n"
                               "  struct timespec ts;\n"
                               "  (void)tz;\n"
                               "  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;\n"
                               "  tv->tv_sec = ts.tv_sec;\n"
                               "  tv->tv_usec = ts.tv_nsec / 1000;\n"
                               "  return 0;\n"
                               "}\n"
                               "time_t time(time_t *t) {\n"
                               "  struct timespec ts;\n"
                               "  clock_gettime(CLOCK_REALTIME, &ts);\n"
                               "  if (t) *t = ts.tv_sec;\n"
                               "  return ts.tv_sec;\n"
                               "}\n";

static char shim_dir[128];

/* Nodes 0 and 1 under the shim (through a redis-server wrapper found first
 * on PATH while they start), 2..4 plain. */
static int start_all(void) {
  snprintf(shim_dir, sizeof shim_dir, "/tmp/dlock-rev5-rl-%d", (int)getpid());
  mkdir(shim_dir, 0755);
  snprintf(offset_file, sizeof offset_file, "%s/offset", shim_dir);
  char path[256], cmd[1024];
  snprintf(path, sizeof path, "%s/shim.c", shim_dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(shim_src, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O1 -o %s/shim.so %s/shim.c", shim_dir, shim_dir);
  if (system(cmd) != 0) return -1;
  char real[256] = "";
  FILE *w = popen("command -v redis-server", "r");
  if (!w || !fgets(real, sizeof real, w)) {
    if (w) pclose(w);
    return -1;
  }
  pclose(w);
  real[strcspn(real, "\n")] = '\0';
  snprintf(path, sizeof path, "%s/bin", shim_dir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/bin/redis-server", shim_dir);
  f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "#!/bin/sh\nREV5_CLOCK_FILE=%s LD_PRELOAD=%s/shim.so exec %s \"$@\"\n", offset_file, shim_dir, real);
  fclose(f);
  chmod(path, 0755);
  f = fopen(offset_file, "w");
  if (!f) return -1;
  fprintf(f, "0\n");
  fclose(f);
  const char *old = getenv("PATH");
  char saved[4096];
  snprintf(saved, sizeof saved, "%s", old ? old : "/usr/bin:/bin");
  char newpath[4400];
  snprintf(newpath, sizeof newpath, "%s/bin:%s", shim_dir, saved);
  setenv("PATH", newpath, 1);
  int rc = th_redis_start_n(nodes, 2, NULL);
  setenv("PATH", saved, 1);
  if (rc != 0) return -1;
  if (th_redis_start_n(nodes + 2, N - 2, NULL) != 0) {
    th_redis_stop_n(nodes, 2);
    return -1;
  }
  up = 1;
  return 0;
}

void test_teardown(void) {
  stop_all();
  if (shim_dir[0]) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shim_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", shim_dir);
  }
}

static dlock_client *rl_client(int command_timeout_ms) {
  char url[1024];
  th_redlock_url(nodes, N, url, sizeof url);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = command_timeout_ms;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client of %s: %s", url, dlock_last_error());
  return c;
}

static long long node_time_s(int i) {
  char out[128];
  if (th_redis_cli(&nodes[i], out, sizeof out, "TIME") != 0) return -1;
  return atoll(out);
}

/* The deployment in use (one acquire promotes every node), nodes 1 and 2
 * flushed, then H (command timeout 2 s, 6 s watchdog lease) acquires 'name'
 * (its look holds 1 and 2 out; its key goes on all five) and holds it
 * 'hold_ms', renewing. Returns H's mutex, its client in '*h'. */
static dlock_mutex *held_across_a_loss(dlock_client **h, const char *name, long hold_ms) {
  char out[256];
  dlock_client *w = rl_client(2000);
  dlock_mutex *wm = test_mutex(w, "rev5-warm", 3000);
  ASSERT_OK(dlock_mutex_acquire(wm, 3000));
  ASSERT_OK(dlock_mutex_release(wm));
  dlock_mutex_free(wm);
  dlock_client_free(w);
  for (int i = 0; i < 2; i++) th_redis_cli(&nodes[i], out, sizeof out, "FLUSHALL");
  *h = rl_client(2000);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 0;
  mo.watchdog_lease_ms = 6000;
  dlock_mutex *hm = NULL;
  ASSERT_OK(dlock_mutex_new(&hm, *h, name, &mo));
  ASSERT_OK(dlock_mutex_acquire(hm, 5000));
  th_sleep_ms(hold_ms);
  if (dlock_mutex_lost(hm) != DLOCK_LOST_NONE) TEST_FAIL("H's hold was lost before the attack: %s", dlock_last_error());
  return hm;
}

/* kill -9 and restart without data nodes 'from'+1 .. N. */
static void restart_empty_from(int from) {
  for (int i = from; i < N; i++)
    if (th_redis_restart(&nodes[i]) != 0) TEST_FAIL("restart of node %d", i + 1);
}

/* A new client C (command timeout 'ct' ms) tries 'name' with a 'lease' ms
 * lease while H ('hm', fence 'hf') holds it: how long H's hold was still
 * valid (and not lost) when C got it, or -1 when C did not get it or H's
 * hold was over. */
static long long newcomer_while_held(dlock_mutex *hm, uint64_t hf, const char *name, int ct, int64_t lease) {
  dlock_client *c = rl_client(ct);
  dlock_mutex *cm = test_mutex(c, name, lease);
  int rc = dlock_mutex_acquire(cm, 0);
  dlock_mono_ms now = dlock_mono_now();
  dlock_mono_ms h_valid = dlock_mutex_valid_until(hm);
  int h_lost = dlock_mutex_lost(hm) != DLOCK_LOST_NONE;
  uint64_t cf = rc == 0 ? dlock_mutex_fence(cm) : 0;
  fprintf(stderr,
          "  C (command timeout %d ms): %s (%.300s); H (fence %llu) valid for %lld ms more, lost: %d; C's "
          "fence %llu\n",
          ct, dlock_err_name(rc), rc ? dlock_last_error() : "", (unsigned long long)hf, (long long)(h_valid - now),
          h_lost, (unsigned long long)cf);
  if (rc == 0) dlock_mutex_release(cm);
  dlock_mutex_free(cm);
  dlock_client_free(c);
  return rc == 0 && !h_lost && h_valid > now ? (long long)(h_valid - now) : -1;
}

/* newcomer_while_held(), then H freed, every clock set right, every node
 * stopped. */
static long long newcomer_then_stop(dlock_client *h, dlock_mutex *hm, uint64_t hf, const char *name, int ct,
                                    int64_t lease) {
  long long left = newcomer_while_held(hm, hf, name, ct, lease);
  dlock_mutex_free(hm);
  dlock_client_free(h);
  set_offset("0");
  stop_all();
  return left;
}

/*
 * Promise (docs/redlock.md, "Restarts"): "Survived: nodes losing their data
 * (restarted empty, flushed, replaced) at any moment, any number of them
 * short of all ...: one node that kept its marker ..., or that carries any
 * marker written since it lost its data by a renewal's re-seed, or by a look
 * more than the command timeout earlier, stops the deployment from looking
 * new (so nodes emptied a lease apart ... do not)"; ("Timing assumptions"):
 * Redlock "does not rest on synchronised wall clocks"; the clock failures
 * listed as not survived are "clocks that run at very different rates, or a
 * node's clock stepped forward" (a backward step is not among them).
 *
 * Attack: nodes 1 and 2 are flushed; the holder H acquires (its look writes
 * their held-out markers, on their clocks; H counts on 3..5 and puts its
 * key on all five); H holds 7 s with a 6 s watchdog lease (more than a
 * lease: the markers are 7 s old, far past the 2 s command timeout). Then
 * nodes 1 and 2 have their wall clocks stepped back one hour (NTP, a VM
 * restored), and nodes 3..5 are restarted empty (kill -9, no persistence):
 * a node that kept its marker (1 and 2) still exists. A new client C looks:
 * the held-out markers on 1 and 2 are "-1 h old" on their clocks, which
 * judge_markers() reads as younger than the command timeout (a racing first
 * look), so the deployment looks new, every node counts at once, and C takes
 * the lock on 3..5 while H's hold is valid.
 *
 * What happened (3 of 3 runs, before the fix): C acquired with H's hold
 * still valid (3.1 to 3.4 s of validity left, not lost); C's fence is above
 * H's (the fences still order them). Fixed (rl6): a held-out marker from its
 * node's future (a negative age) is no racing first look. Control (the same run without the step, done by hand):
 * C is refused, EQUORUM, nodes 3..5 held out and 1..2 held by H.
 * Severity: medium (two holders, fences intact). The threshold compares a
 * node's clock with a 'since' that node wrote: a backward step gives a
 * negative age, which is no racing look.
 */
/* Fifth review of Redlock (branch rev5), finding 1. */
REVIEW_TEST(rev5_rl_1_a_node_clock_stepped_back_makes_a_deployment_in_use_look_new) {
  if (start_all() != 0) TEST_FAIL("could not start %d redis-servers", N);
  const char *name = "rev5-rl-step";
  dlock_client *h = NULL;
  dlock_mutex *hm = held_across_a_loss(&h, name, 7000); /* more than a lease: H renews */
  uint64_t hf = dlock_mutex_fence(hm);

  step_clocks(-3600);
  restart_empty_from(2);

  long long left = newcomer_then_stop(h, hm, hf, name, 2000, 6000);
  if (left >= 0)
    TEST_FAIL("two holders: C acquired '%s' while H's hold was valid for %lld ms more (the held-out markers of the "
              "nodes whose clocks stepped back read as a racing first look: the deployment looked new)",
              name, left);
}

/*
 * Promise (docs/redlock.md, "Restarts"): "Not survived: ... nodes emptied a
 * lease apart whose losses were first seen by looks within one command
 * timeout of each other with no renewal between"; so nodes emptied more than
 * a lease apart with a renewal between are survived ("Survived: ... (so
 * nodes emptied a lease apart, as in a rolling restart without persistence,
 * do not [look new])"); the longest lease is the longest "announced by an
 * acquire".
 *
 * Attack: as rev5_rl_1 without any clock step: nodes 1 and 2 flushed; H
 * (command timeout 2 s, 6 s watchdog lease) acquires (held-out markers on 1
 * and 2, its key on all five) and renews for 10 s (15 renewals: they find
 * their key on 1 and 2, so they write no record there); nodes 3..5 are
 * restarted empty, 10 s (more than the longest lease announced, 6 s) after
 * 1 and 2 lost their data. A new client C with a 30 s command timeout and a
 * 30 s lease looks: judge_markers() takes a held-out marker younger than
 * min(C's command timeout, C's longest lease) = 30 s for a racing first
 * look, so the 10 s old markers make the deployment new, and C takes the
 * lock on 3..5 while H's hold is valid. The window is set by the newcomer's
 * own options, not by the leases in use, and H's renewals were no record.
 *
 * What happened (3 of 3 runs, before the fix): C acquired with H's hold
 * valid (3.0 to 4.9 s left) and not lost. Fixed (rl6): the marker records
 * its writer's look window (rl_marker.lua 'look', H's command timeout, 2 s),
 * and a reader takes it for a racing look only within that, whatever its
 * own command timeout. Control (REV5_CONTROL=1: C's command timeout 2 s):
 * C is refused, EQUORUM (the 10 s old markers are a deployment in use).
 * Severity: medium (two holders; fences intact). Needs no clock step.
 * Arguable: the "new deployment" bullet defines a racing look by "the
 * command timeout" (the newcomer's, here 30 s), but the "Survived" and
 * "Not survived" bullets promise nodes emptied a lease apart with a renewal
 * between; the window should be bounded by the leases in use (the record
 * on the markers), not by one client's option, or the docs should say so.
 */
/* Fifth review of Redlock (branch rev5), finding 2. */
REVIEW_TEST(rev5_rl_2_a_client_with_a_long_command_timeout_reads_10_s_old_markers_as_a_racing_first_look) {
  if (start_all() != 0) TEST_FAIL("could not start %d redis-servers", N);
  const char *name = "rev5-rl-timeout";
  dlock_client *h = NULL;
  dlock_mutex *hm = held_across_a_loss(&h, name, 10000); /* more than a lease: H renews */
  uint64_t hf = dlock_mutex_fence(hm);
  restart_empty_from(2);

  int ct = getenv("REV5_CONTROL") ? 2000 : 30000;
  long long left = newcomer_then_stop(h, hm, hf, name, ct, 30000);
  if (left >= 0)
    TEST_FAIL(
        "two holders: C (command timeout %d ms) acquired '%s' while H's hold was valid for %lld ms more (held-out "
        "markers 10 s old, older than the longest lease in use, read as a racing first look)",
        ct, name, left);
}

/*
 * rev5_rl_1 with a smaller step (rl6): nodes 1 and 2 have their clocks
 * stepped back by all but under a second of their held-out markers' age, so
 * the markers read younger than their writer's look window (H's command
 * timeout, 2 s), as a racing first look would. H's acquire, which took the
 * lock while 1 and 2 were held out, left its record on their markers
 * (rl_marker.lua 'p': 'renewed'), so the deployment does not look new
 * whatever their clocks read, and C is refused.
 */
/* Fifth review of Redlock (branch rev5), finding 1b. */
REVIEW_TEST(rev5_rl_1b_a_clock_stepped_back_by_all_but_a_second_of_the_markers_age_is_no_racing_look) {
  if (start_all() != 0) TEST_FAIL("could not start %d redis-servers", N);
  const char *name = "rev5-rl-step-small";
  dlock_client *h = NULL;
  dlock_mutex *hm = held_across_a_loss(&h, name, 7000);
  uint64_t hf = dlock_mutex_fence(hm);
  restart_empty_from(2);
  char out[64];
  if (th_redis_cli(&nodes[0], out, sizeof out, "HGET dlock:redlock:marker since") != 0)
    TEST_FAIL("no restart marker on node 1");
  long long age_s = node_time_s(0) - atoll(out) / 1000000;
  if (age_s < 5) TEST_FAIL("node 1's held-out marker is only %lld s old", age_s);
  step_clocks(-age_s); /* the markers now read 0 to 1 s old */

  long long left = newcomer_then_stop(h, hm, hf, name, 2000, 6000);
  if (left >= 0)
    TEST_FAIL("two holders: C acquired '%s' while H's hold was valid for %lld ms more (held-out markers %lld s old "
              "read as younger than their writer's look window after a step back of %lld s)",
              name, left, age_s, age_s);
}

/* ---- The history check (held: run with REV5_HISTORY=1) ---- */

static int worker(void *arg) {
  int id;
  int fd = h5_worker_open(arg, &id);
  if (fd < 0) return 2;
  char url[1024];
  th_redlock_url(nodes, N, url, sizeof url);
  int holds = 0;
  for (int round = 0; round < 2000 && th_now_ms() < h5_until; round++) {
    dlock_client_options o;
    dlock_client_options_init(&o);
    o.url = url;
    o.command_timeout_ms = id % 2 ? 3000 : 1000;
    dlock_client *c = NULL;
    if (dlock_client_new(&c, &o) != 0) {
      th_sleep_ms(100);
      continue;
    }
    int held = h5_one_hold(fd, id, c, "rev5-hist", id < 2 ? 1500 : 3000, 1500, 20, 130);
    if (held < 0) return 3;
    holds += held;
    dlock_client_free(c);
  }
  close(fd);
  return holds > 0 ? 0 : 4;
}

/*
 * Held (run with REV5_HISTORY=1; the test skips otherwise): 4 processes, a
 * new client per hold, leases 1.5 s and 3 s, command timeouts 1 s and 3 s,
 * for 35 s, while every 0.4-0.9 s one of nodes 2..5 is flushed, restarted
 * empty (kill -9), or frozen (SIGSTOP) for 0.3-1.5 s, or a holder process
 * is frozen for 1.6-3.6 s (past its lease); node 1 keeps its data
 * (docs/redlock.md: "any number of them short of all"). Checks: no two holds
 * overlap while both are within their validity; fences of holds that do not
 * overlap rise strictly.
 */
/* Fifth review of Redlock (branch rev5): an attack that held (REV5_HISTORY=1). */
REVIEW_TEST(rev5_rl_held_history_under_flush_restart_and_freeze) {
  if (!getenv("REV5_HISTORY")) TEST_SKIP("the history check runs with REV5_HISTORY=1 (it held)");
  if (start_all() != 0) TEST_FAIL("could not start %d redis-servers", N);
  char hist_path[200];
  snprintf(hist_path, sizeof hist_path, "%s/history", shim_dir);
  pid_t kids[4];
  if (h5_run_start(hist_path, 35000, worker, 4, kids) != 0) TEST_FAIL("cannot create %s", hist_path);
  srand((unsigned)getpid());
  int faults[4] = {0, 0, 0, 0};
  for (int step = 0; step < 200 && th_now_ms() < h5_until - 1000; step++) {
    th_sleep_ms(400 + rand() % 500);
    int i = 1 + rand() % (N - 1), what = rand() % 4;
    char out[64];
    if (what == 0) {
      th_redis_cli(&nodes[i], out, sizeof out, "FLUSHALL");
    } else if (what == 1) {
      if (th_redis_restart(&nodes[i]) != 0) TEST_FAIL("restart of node %d", i + 1);
    } else if (what == 2) {
      kill(nodes[i].pid, SIGSTOP);
      th_sleep_ms(300 + rand() % 1200);
      kill(nodes[i].pid, SIGCONT);
    } else {
      pid_t k = kids[rand() % 4]; /* a holder paused past its lease */
      kill(k, SIGSTOP);
      th_sleep_ms(1600 + rand() % 2000);
      kill(k, SIGCONT);
    }
    faults[what]++;
  }
  int bad = h5_wait_workers(kids, 4, 1);
  int overlaps, falls, n = h5_check(hist_path, &overlaps, &falls);
  if (n < 0) TEST_FAIL("no history in %s", hist_path);
  fprintf(stderr,
          "  %d holds; faults: %d flushes, %d restarts, %d node freezes, %d holder freezes; %d overlaps, "
          "%d fence falls\n",
          n, faults[0], faults[1], faults[2], faults[3], overlaps, falls);
  stop_all();
  if (bad) TEST_FAIL("%d workers failed", bad);
  if (overlaps || falls) TEST_FAIL("%d overlapping holds, %d falling fences", overlaps, falls);
}

TEST_MAIN()
