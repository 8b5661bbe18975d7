/*
 * cmd_release.c - "dlock release --force NAME": the admin's way to remove a
 * lock whatever its owner. A plain release is deliberately not offered: a
 * lock belongs to its holder, and deleting someone else's key is exactly the
 * mistake the library's compare-and-delete exists to prevent. A key that
 * dlock did not take is refused unless --foreign says it is another
 * library's lock: a mistyped name must not delete an application's data.
 */
#include <string.h>

#include "cli.h"

enum { OPT_FORCE = 1, OPT_QUIET, OPT_FOREIGN };

static const cli_opt release_opts[] = {
    {"force", 0, 0, OPT_FORCE},
    {"foreign", 0, 0, OPT_FOREIGN},
    {"quiet", 'q', 0, OPT_QUIET},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_release_opts[] = {release_opts, NULL};

int cmd_release(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  const char *name = NULL;
  int force = 0;
  int foreign = 0;
  int quiet = 0;
  int id;

  cli_args_init(&args, argc, argv, "release", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, release_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_FORCE) {
      force = 1;
    } else if (id == OPT_FOREIGN) {
      foreign = 1;
    } else if (id == OPT_QUIET) {
      quiet = 1;
    } else if (id == CLI_OPT_POSITIONAL && name == NULL) {
      name = arg;
    } else if (id == CLI_OPT_POSITIONAL) {
      return cli_usage_error("release", "unexpected argument '%s'", arg);
    }
  }
  if (name == NULL) return cli_usage_error("release", "missing lock NAME");
  if (!force) {
    return cli_usage_error("release", "only 'release --force NAME' exists: a lock "
                                      "is released by its holder");
  }

  dlock_client *c;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  int was_held = 0;
  int st = dlock_lock_force_release_flags(c, name, foreign ? DLOCK_FORCE_FOREIGN : 0, &was_held);
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "release of '%s'", name);
  } else if (!quiet) {
    printf(was_held ? "released '%s'\n" : "'%s' was not held\n", name);
  }
  dlock_client_free(c);
  return rc;
}
