/*
 * cmd_bench.c - `dlock bench`: runs the benchmark program, dlock-bench,
 * which is built from the same tree (bench/) and installed next to dlock.
 * Kept a separate program so that the CLI stays on the public API while the
 * benchmarks may also drive hiredis (the Redis floor) and libpq (the
 * PostgreSQL floor, bench/pg_floor.c) directly.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Where dlock-bench may be: beside this binary (installed), in the build
 * tree's bench/ next to cli/, then on PATH. */
static int find_bench(char *out, size_t len) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = {"/dlock-bench", "/../bench/dlock-bench"};
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(out, len, "%s%s", self, rel[i]);
        if (access(out, X_OK) == 0) return 0;
      }
    }
  }
  snprintf(out, len, "dlock-bench");
  return -1;
}

int cmd_bench(int argc, char **argv) {
  /* Which server: --url, else $DLOCK_URL and the config files for a
   * PostgreSQL server (dlock-bench starts a private redis-server when no
   * --url is given). */
  const char *url = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
      url = argv[++i];
    else if (strncmp(argv[i], "--url=", 6) == 0)
      url = argv[i] + 6;
  }
  if (url == NULL && cli_config_load() == 0) url = cli_config_url();
  int pg = url != NULL && strcmp(cli_server_kind(url), "PostgreSQL") == 0;
  /* dlock-bench takes the same arguments after "bench", "--url=U" as
   * "--url U", and a PostgreSQL URL from the settings as "--url U". */
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (args == NULL) {
    fprintf(stderr, "dlock: bench: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  static char url_opt[] = "--url";
  int n = 1, url_given = 0;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--url=", 6) == 0) {
      args[n++] = url_opt;
      args[n++] = argv[i] + 6;
      url_given = 1;
    } else {
      url_given |= strcmp(argv[i], "--url") == 0;
      args[n++] = argv[i];
    }
  }
  if (pg && !url_given) {
    args[n++] = url_opt;
    args[n++] = (char *)url;
  }
  char path[PATH_MAX + 32];
  int found = find_bench(path, sizeof path) == 0;
  args[0] = path;
  if (found)
    execv(path, args);
  else
    execvp(path, args);
  fprintf(stderr,
          "dlock: cannot run the benchmark program '%s': %s; build it with the "
          "dlock-bench target or install it beside dlock\n",
          path, strerror(errno));
  free(args);
  return CLI_EXIT_SOFTWARE;
}
