/*
 * cmd_bench.c - `dlock bench`: runs the benchmark program, dlock-bench,
 * which is built from the same tree (bench/) and installed next to dlock.
 * Kept a separate program so that the CLI stays on the public API while the
 * benchmarks may also drive hiredis directly for the Redis floor.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Where dlock-bench may be: beside this binary (installed), in the build
 * tree's bench/ next to cli/, then on PATH. */
static int find_bench(char *out, size_t len)
{
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

int cmd_bench(int argc, char **argv)
{
  char path[PATH_MAX + 32];
  int found = find_bench(path, sizeof path) == 0;
  argv[0] = path; /* dlock-bench takes the same arguments after "bench" */
  if (found)
    execv(path, argv);
  else
    execvp(path, argv);
  fprintf(stderr, "dlock: cannot run the benchmark program '%s': %s; build it with the "
                  "dlock-bench target or install it beside dlock\n", path, strerror(errno));
  (void)argc;
  return CLI_EXIT_SOFTWARE;
}
