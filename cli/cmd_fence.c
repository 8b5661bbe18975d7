/*
 * cmd_fence.c - "dlock fence check RESOURCE TOKEN": dlock_guard_check() for
 * shell pipelines. Exit 0 means "admitted, write", 1 "stale, do not": the
 * shell's own true/false, so that "dlock fence check ... && write" reads
 * naturally. Errors use the usual codes (64, 69, 70), never 0 or 1.
 */
#include <string.h>

#include "cli.h"

enum { OPT_QUIET = 1, OPT_JSON };

static const cli_opt fence_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {"quiet", 'q', 0, OPT_QUIET},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_fence_opts[] = {fence_opts, NULL};

int cmd_fence(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  const char *pos[3] = {NULL, NULL, NULL};
  int npos = 0;
  int quiet = 0;
  int json = 0;
  int id;

  cli_args_init(&args, argc, argv, "fence", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, fence_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_QUIET) {
      quiet = 1;
    } else if (id == OPT_JSON) {
      json = 1;
    } else if (id == CLI_OPT_POSITIONAL && npos < 3) {
      pos[npos++] = arg;
    } else if (id == CLI_OPT_POSITIONAL) {
      return cli_usage_error("fence", "unexpected argument '%s'", arg);
    }
  }
  if (npos == 0) return cli_usage_error("fence", "missing action: dlock fence check RESOURCE TOKEN");
  if (strcmp(pos[0], "check") != 0) return cli_usage_error("fence", "unknown fence action '%s' (only 'check')", pos[0]);
  if (npos < 3) return cli_usage_error("fence", "usage: dlock fence check RESOURCE TOKEN");
  uint64_t token;
  if (cli_parse_u64(pos[2], UINT64_MAX, &token) != 0 || token == 0) {
    return cli_usage_error("fence",
                           "bad token '%s' (a positive decimal number, "
                           "e.g. $DLOCK_FENCE)",
                           pos[2]);
  }

  dlock_client *c;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  uint64_t highest = 0;
  int st = dlock_guard_check_highest(c, pos[1], token, &highest);
  if ((st == 0 || st == DLOCK_ESTALE) && json) {
    fputs("{\"resource\": ", stdout);
    cli_json_string(stdout, pos[1]);
    printf(", \"token\": %llu, \"admitted\": %s, \"highest\": %llu}\n", (unsigned long long)token,
           st == 0 ? "true" : "false", (unsigned long long)highest);
  }
  if (st == 0) {
    if (!quiet && !json)
      printf("admitted: token %llu for '%s' (highest seen: %llu)\n", (unsigned long long)token, pos[1],
             (unsigned long long)highest);
    rc = CLI_EXIT_OK;
  } else if (st == DLOCK_ESTALE) {
    if (!quiet && !json) {
      printf("stale: token %llu for '%s' is older than %llu, the highest seen\n", (unsigned long long)token, pos[1],
             (unsigned long long)highest);
    }
    rc = CLI_EXIT_STALE;
  } else {
    rc = cli_report(st, dlock_last_error(), "fence check of '%s'", pos[1]);
    /* A stale token maps to 1; no error may pass for "stale" or "ok". */
    if (rc == CLI_EXIT_OK || rc == CLI_EXIT_STALE) rc = CLI_EXIT_SOFTWARE;
  }
  dlock_client_free(c);
  return rc;
}
