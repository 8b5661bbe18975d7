/*
 * faultproxy_main.c - the fault proxy of faultproxy.h as a program, for the
 * shell tests:
 *
 *   faultproxy --target PORT [--port-file FILE] [--drop-script NAME | --drop PATTERN]
 *              [--count N] [--delay MS] [--then-blackhole] [--stdin]
 *
 * Listens on a free 127.0.0.1 port, written to FILE (or stdout) once ready.
 * --drop-script NAME drops replies to EVALSHA of that dlock script (acquire,
 * release, extend, withdraw, sched_claim, ...): the pattern is its SHA1. At
 * start it loads every dlock script into the server (SCRIPT LOAD), so that
 * the first EVALSHA of each runs (and can lose its reply). --then-blackhole
 * answers nothing more once a reply was dropped (fp_blackhole_after_drop).
 * With --stdin it reads rules line by line ("pass", "drop PATTERN [N]",
 * "drop-script NAME [N]", "delay MS", "blackhole on|off", "close", "dropped")
 * until end of input; otherwise it runs until SIGTERM or SIGINT. On exit it
 * prints "dropped N" on stdout.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_proxy.h"

static const char *script_sha(const char *name) {
  for (int i = 0; i < DLOCK__SCRIPT_COUNT; i++)
    if (!strcmp(dlock__script_name((dlock__script_id)i), name)) return dlock__script_sha((dlock__script_id)i);
  fprintf(stderr, "faultproxy: no dlock script named '%s'\n", name);
  return NULL;
}

static void apply(fp_proxy *p, char *line) {
  char a[256] = "", b[256] = "";
  int n = 1;
  if (sscanf(line, "%255s %255s %d", a, b, &n) < 1) return;
  if (!strcmp(a, "pass"))
    fp_pass(p);
  else if (!strcmp(a, "drop"))
    fp_drop_reply(p, b, n);
  else if (!strcmp(a, "drop-script")) {
    const char *sha = script_sha(b);
    if (sha) fp_drop_reply(p, sha, n);
  } else if (!strcmp(a, "delay"))
    fp_delay(p, atoi(b));
  else if (!strcmp(a, "blackhole"))
    fp_blackhole(p, !strcmp(b, "on"));
  else if (!strcmp(a, "close"))
    fp_close_all(p);
  else if (!strcmp(a, "dropped")) {
    printf("dropped %d\n", fp_dropped(p));
    fflush(stdout);
  } else
    fprintf(stderr, "faultproxy: unknown rule '%s'\n", a);
}

int main(int argc, char **argv) {
  int target = 0, count = 1, delay = 0, use_stdin = 0, then_black = 0;
  const char *port_file = NULL, *pattern = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--stdin")) {
      use_stdin = 1;
      continue;
    }
    if (!strcmp(argv[i], "--then-blackhole")) {
      then_black = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "faultproxy: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--target"))
      target = atoi(v);
    else if (!strcmp(argv[i], "--port-file"))
      port_file = v;
    else if (!strcmp(argv[i], "--drop"))
      pattern = v;
    else if (!strcmp(argv[i], "--drop-script")) {
      if (!(pattern = script_sha(v))) return 2;
    } else if (!strcmp(argv[i], "--count"))
      count = atoi(v);
    else if (!strcmp(argv[i], "--delay"))
      delay = atoi(v);
    else {
      fprintf(stderr, "faultproxy: unknown option %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  if (target <= 0) {
    fprintf(stderr, "faultproxy: --target PORT is required\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the proxy thread starts */
  fp_proxy *p;
  if (fp_start(&p, target)) return 1;
  /* Cache every dlock script in the server, so that an EVALSHA matched by
   * SHA1 runs at once rather than being answered NOSCRIPT and sent as EVAL. */
  if (th_proxy_cache_scripts(p) != 0) fprintf(stderr, "faultproxy: SCRIPT LOAD failed\n");
  if (pattern) fp_drop_reply(p, pattern, count);
  if (delay) fp_delay(p, delay);
  if (then_black) fp_blackhole_after_drop(p, 1);
  FILE *f = port_file ? fopen(port_file, "w") : stdout;
  if (!f) {
    fprintf(stderr, "faultproxy: cannot write %s\n", port_file);
    fp_stop(p);
    return 1;
  }
  fprintf(f, "%d\n", fp_port(p));
  if (port_file)
    fclose(f);
  else
    fflush(stdout);
  if (use_stdin) {
    char line[1024];
    while (fgets(line, sizeof line, stdin)) apply(p, line);
  } else {
    int sig;
    sigwait(&set, &sig);
  }
  printf("dropped %d\n", fp_dropped(p));
  fp_stop(p);
  return 0;
}
