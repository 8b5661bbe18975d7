/*
 * open_redlock_review5.c - fifth review round, Redlock: open findings (each
 * test FAILS on the code it was written against).
 *
 * Run: cmake -S . -B build/plain -DDLOCK_OPEN_FINDINGS=ON && cmake --build
 * build/plain -j2 && (cd build/plain && ctest -R open/open_redlock_review5
 * --output-on-failure)
 *
 * Two of the five redis-servers run with a clock shim (their wall clock,
 * which TIME answers, offset by a file's value; their monotonic clock
 * untouched), so a test steps those nodes' clocks as NTP or a VM restore
 * would.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "../test.h"

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

static void stop_all(void) {
  if (up) th_redis_stop_n(nodes, N);
  up = 0;
}

/* A clock shim for redis-server (libfaketime recurses in redis-server's
 * start-up here: "Unexpected recursive calls to clock_gettime()"): the wall
 * clock (clock_gettime(CLOCK_REALTIME), gettimeofday, time) plus an offset
 * in seconds read from $REV5_CLOCK_FILE, looked at every 20 ms; the
 * monotonic clock untouched. Built with cc when the test starts. */
static const char shim_src[] =
    "#define _GNU_SOURCE\n"
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
    "}\n"
;

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
 * What happened (3 of 3 runs): C acquired with H's hold still valid (3.1 to
 * 3.4 s of validity left, not lost); C's fence is above H's (the fences
 * still order them). Control (the same run without the step, done by hand):
 * C is refused, EQUORUM, nodes 3..5 held out and 1..2 held by H.
 * Severity: medium (two holders, fences intact). The threshold compares a
 * node's clock with a 'since' that node wrote: a backward step gives a
 * negative age, which is no racing look.
 */
TEST(rev5_rl_1_a_node_clock_stepped_back_makes_a_deployment_in_use_look_new) {
  if (start_all() != 0) TEST_FAIL("could not start %d redis-servers", N);
  const char *name = "rev5-rl-step";
  char out[256];
  /* The deployment in use: one acquire promotes every node. */
  dlock_client *w = rl_client(2000);
  dlock_mutex *wm = test_mutex(w, "rev5-warm", 3000);
  ASSERT_OK(dlock_mutex_acquire(wm, 3000));
  ASSERT_OK(dlock_mutex_release(wm));
  dlock_mutex_free(wm);
  dlock_client_free(w);
  for (int i = 0; i < 2; i++) th_redis_cli(&nodes[i], out, sizeof out, "FLUSHALL");

  dlock_client *h = rl_client(2000);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 0;
  mo.watchdog_lease_ms = 6000;
  dlock_mutex *hm = NULL;
  ASSERT_OK(dlock_mutex_new(&hm, h, name, &mo));
  ASSERT_OK(dlock_mutex_acquire(hm, 5000));
  uint64_t hf = dlock_mutex_fence(hm);
  th_sleep_ms(7000); /* more than a lease: H renews (its key is on all five) */
  if (dlock_mutex_lost(hm) != DLOCK_LOST_NONE) TEST_FAIL("H's hold was lost before the attack: %s", dlock_last_error());

  long long before = node_time_s(0);
  set_offset("-3600");
  long long after = node_time_s(0);
  if (before < 0 || after < 0 || before - after < 3000) TEST_FAIL("node 1's clock did not step back (%lld, %lld)", before, after);
  for (int i = 2; i < N; i++)
    if (th_redis_restart(&nodes[i]) != 0) TEST_FAIL("restart of node %d", i + 1);

  dlock_client *c = rl_client(2000);
  dlock_mutex *cm = test_mutex(c, name, 6000);
  int rc = dlock_mutex_acquire(cm, 0);
  dlock_mono_ms now = dlock_mono_now();
  dlock_mono_ms h_valid = dlock_mutex_valid_until(hm);
  int h_lost = dlock_mutex_lost(hm) != DLOCK_LOST_NONE;
  uint64_t cf = rc == 0 ? dlock_mutex_fence(cm) : 0;
  fprintf(stderr, "  C's acquire: %s (%s); H (fence %llu) valid for %lld ms more, lost: %d; C's fence %llu\n",
          dlock_err_name(rc), rc ? dlock_last_error() : "", (unsigned long long)hf, (long long)(h_valid - now), h_lost,
          (unsigned long long)cf);
  if (rc == 0) dlock_mutex_release(cm);
  dlock_mutex_free(cm);
  dlock_client_free(c);
  dlock_mutex_free(hm);
  dlock_client_free(h);
  set_offset("0");
  stop_all();
  if (rc == 0 && !h_lost && h_valid > now)
    TEST_FAIL("two holders: C acquired '%s' while H's hold was valid for %lld ms more (the held-out markers of the "
              "nodes whose clocks stepped back read as a racing first look: the deployment looked new)",
              name, (long long)(h_valid - now));
}

TEST_MAIN()
