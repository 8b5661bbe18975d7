/*
 * sc_peers.c - the peers in the same run: redis-py's Lock and node-redlock
 * run the uncontended and contended loops (bench/peers/) against the same
 * server, pinned like the bench (a child inherits its CPU affinity), and
 * their figures join the table with the ratios dlock / peer. A peer that
 * cannot run here (no python3-redis, no 'npm ci') is reported, not failed.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* The string value of "key" in a flat JSON object line ("" if absent). */
static void json_str(const char *line, const char *key, char *out, size_t len) {
  char pat[48];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  size_t n = 0;
  const char *p = strstr(line, pat);
  if (p) {
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p == '"') {
      for (p++; *p && *p != '"' && n + 1 < len; p++) {
        if (*p == '\\' && p[1]) {
          p++;
          if (*p == 'u') { /* \uXXXX: not needed for our figures */
            out[n++] = '?';
            for (int i = 0; i < 4 && p[1]; i++) p++;
            continue;
          }
          out[n++] = *p == 'n' ? ' ' : *p;
        } else {
          out[n++] = *p;
        }
      }
    }
  }
  out[n] = '\0';
}

/* The number value of "key"; -1 if absent or not a number. */
static int json_num(const char *line, const char *key, double *v) {
  char pat[48];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return -1;
  p += strlen(pat);
  char *end;
  *v = strtod(p, &end);
  return end == p ? -1 : 0;
}

/* One row from a peer's JSON line; returns 1 if it was one. */
static int ingest(const char *line) {
  char scenario[24], impl[24], metric[64], unit[16], note[160];
  double value;
  json_str(line, "scenario", scenario, sizeof scenario);
  json_str(line, "impl", impl, sizeof impl);
  json_str(line, "metric", metric, sizeof metric);
  json_str(line, "unit", unit, sizeof unit);
  json_str(line, "note", note, sizeof note);
  if (!scenario[0] || !impl[0] || !metric[0] || json_num(line, "value", &value) != 0) return 0;
  bench_row(scenario, impl, metric, value, unit, note);
  return 1;
}

/* Run argv[0] with stdout into us, reading rows until it exits or 'max_s'
 * passes (then it is killed by PID). Returns the rows read, or -1 when it
 * could not start; *status gets its exit status (-1: killed or unknown). */
static int run_peer(const char *const argv[], int max_s, int *status) {
  *status = -1;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    char *args[16] = {0}; /* execvp() wants non-const strings it does not change */
    for (int i = 0; i < 15 && argv[i]; i++) args[i] = (char *)(uintptr_t)argv[i];
    execvp(args[0], args);
    fprintf(stderr, "dlock-bench: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  bench_track_child(pid);
  close(fds[1]);
  int rows = 0;
  char buf[8192];
  size_t have = 0;
  int64_t deadline = bench_now_ns() + (int64_t)max_s * 1000000000LL;
  for (;;) {
    int64_t left_ms = (deadline - bench_now_ns()) / 1000000;
    if (left_ms <= 0) {
      fprintf(stderr, "dlock-bench: %s ran longer than %d s: stopped\n", argv[0], max_s);
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd p = {fds[0], POLLIN, 0};
    int n = poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf + have, sizeof buf - 1 - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    have += (size_t)got;
    buf[have] = '\0';
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      rows += ingest(line);
      line = nl + 1;
    }
    have = strlen(line);
    memmove(buf, line, have);
    if (have == sizeof buf - 1) have = 0; /* a line longer than any figure: drop it */
  }
  close(fds[0]);
  int st;
  if (waitpid(pid, &st, 0) == pid && WIFEXITED(st)) *status = WEXITSTATUS(st);
  bench_untrack_child(pid);
  return rows;
}

static void ratio(const char *peer) {
  int f1, f2;
  double lib = bench_row_value("uncontended", "dlock", "cycles per second", &f1);
  double other = bench_row_value("uncontended", peer, "cycles per second", &f2);
  if (!f1 || !f2 || other <= 0) return;
  char metric[64], detail[160];
  snprintf(metric, sizeof metric, "dlock / %s, cycles/s", peer);
  bench_row("uncontended", "ratio", metric, lib / other, "x", "same server, same layout, one after the other");
  snprintf(metric, sizeof metric, "cycles/s >= 3x %s", peer);
  snprintf(detail, sizeof detail, "dlock %.0f/s vs %s %.0f/s = %.2fx", lib, peer, other, lib / other);
  bench_target("uncontended", metric, lib >= 3 * other, detail);
}

bench_status bench_scenario_peers(void) {
  const bench_opts *o = &bench_options;
  const char *dir = o->peers_dir;
  /* Which loops to ask for: those selected ("contended" as a whole word,
   * not the end of "uncontended"). */
  int unc = 0, con = 0;
  if (!o->scenario) {
    unc = con = 1;
  } else {
    const char *p = o->scenario;
    for (int guard = 0; guard < 64 && *p; guard++) {
      size_t len = strcspn(p, ",");
      if (len == 11 && !strncmp(p, "uncontended", 11)) unc = 1;
      if (len == 9 && !strncmp(p, "contended", 9)) con = 1;
      p += len;
      if (*p == ',') p++;
    }
  }
  if (!unc && !con) unc = con = 1; /* --scenario peers alone: both */
  const char *which = unc && con ? "uncontended,contended" : unc ? "uncontended" : "contended";
  int max_s = o->quick ? 90 : 400;
  const char *quick = o->quick ? "--quick" : NULL;
  int ran = 0;

  /* redis-py */
  const char *py = getenv("DLOCK_BENCH_PYTHON");
  if (!py || !*py) py = "/usr/bin/python3";
  char script[512];
  snprintf(script, sizeof script, "%s/redis_py_peer.py", dir);
  if (access(script, R_OK) != 0) {
    bench_row("peers", "redis-py", "not run", 0, "", "no redis_py_peer.py in the peers dir (--peers-dir)");
  } else if (access(py, X_OK) != 0) {
    bench_row("peers", "redis-py", "not run", 0, "", "no python3 (set DLOCK_BENCH_PYTHON)");
  } else {
    bench_progress("redis-py peer (%s)", which);
    const char *const argv[] = {
        py, script, "--url", bench_redis.url, "--layout", bench_redis.layout_used, "--scenario", which, quick, NULL};
    int status;
    int rows = run_peer(argv, max_s, &status);
    if (rows > 0) {
      ran++;
    } else {
      bench_row("peers", "redis-py", "not run", 0, "",
                "the peer reported nothing: is python3-redis installed (apt-get install python3-redis)?");
    }
    if (status != 0) bench_row("peers", "redis-py", "exit status", status, "", "nonzero: see its stderr above");
  }

  /* node-redlock */
  char js[512], mod[600];
  snprintf(js, sizeof js, "%s/redlock_peer.js", dir);
  snprintf(mod, sizeof mod, "%s/node_modules/redlock/package.json", dir);
  if (access(js, R_OK) != 0) {
    bench_row("peers", "node-redlock", "not run", 0, "", "no redlock_peer.js in the peers dir (--peers-dir)");
  } else if (access(mod, R_OK) != 0) {
    bench_row("peers", "node-redlock", "not run", 0, "", "its packages are missing: run 'npm ci' in the peers dir");
  } else {
    bench_progress("node-redlock peer (%s)", which);
    const char *const argv[] = {
        "node", js, "--url", bench_redis.url, "--layout", bench_redis.layout_used, "--scenario", which, quick, NULL};
    int status;
    int rows = run_peer(argv, max_s, &status);
    if (rows > 0)
      ran++;
    else
      bench_row("peers", "node-redlock", "not run", 0, "", "the peer reported nothing: is node installed?");
    if (status != 0) bench_row("peers", "node-redlock", "exit status", status, "", "nonzero: see its stderr above");
  }

  ratio("redis-py");
  ratio("node-redlock");
  return ran ? BENCH_OK : BENCH_UNAVAILABLE;
}
