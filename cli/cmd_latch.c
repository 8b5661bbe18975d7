/*
 * cmd_latch.c - "dlock latch set|down|wait|count NAME": a countdown latch
 * from the shell (docs/latch.md). A job sets the count, each worker counts
 * down once when done, and whoever needs them all done waits for zero.
 */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

enum { OPT_EXPIRE = 1, OPT_WAIT, OPT_QUIET };

static const cli_opt latch_opts[] = {
    {"expire", 0, 1, OPT_EXPIRE},
    {"wait", 'w', 1, OPT_WAIT},
    {"quiet", 'q', 0, OPT_QUIET},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_latch_opts[] = {latch_opts, NULL};

int cmd_latch(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  const char *pos[3] = {NULL, NULL, NULL};
  int npos = 0;
  int64_t expire_ms = 3600 * 1000; /* an hour: long enough for most batches */
  int64_t wait_ms = DLOCK_WAIT_FOREVER;
  int expire_given = 0, wait_given = 0, quiet = 0;
  int id;

  cli_args_init(&args, argc, argv, "latch", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, latch_opts, &arg)) != CLI_OPT_DONE) {
    switch (id) {
    case CLI_OPT_ERROR:
      return CLI_EXIT_USAGE;
    case CLI_OPT_DASHDASH:
      break;
    case CLI_OPT_POSITIONAL:
      if (npos == 3) return cli_usage_error("latch", "unexpected argument '%s'", arg);
      pos[npos++] = arg;
      break;
    case CLI_OPT_URL:
    case CLI_OPT_PREFIX:
      cli_common_opt(id, arg, &url);
      break;
    case OPT_EXPIRE:
      if (cli_parse_duration(arg, &expire_ms) != 0 || expire_ms == 0)
        return cli_usage_error("latch", "--expire: %s", expire_ms == 0 ? "must be more than 0" : dlock_last_error());
      expire_given = 1;
      break;
    case OPT_WAIT:
      if (cli_parse_duration(arg, &wait_ms) != 0) return cli_usage_error("latch", "--wait: %s", dlock_last_error());
      wait_given = 1;
      break;
    case OPT_QUIET:
      quiet = 1;
      break;
    default:
      return cli_usage_error("latch", "internal: unhandled option");
    }
  }
  if (npos == 0) return cli_usage_error("latch", "missing action: set, down, wait or count");
  const char *action = pos[0];
  int is_set = strcmp(action, "set") == 0;
  if (!is_set && strcmp(action, "down") != 0 && strcmp(action, "wait") != 0 && strcmp(action, "count") != 0)
    return cli_usage_error("latch", "unknown action '%s' (set, down, wait or count)", action);
  if (npos < 2) return cli_usage_error("latch", "missing latch NAME after '%s'", action);
  const char *name = pos[1];
  uint64_t count = 0;
  if (is_set) {
    if (npos < 3) return cli_usage_error("latch", "missing COUNT: dlock latch set NAME COUNT");
    if (cli_parse_u64(pos[2], DLOCK_LATCH_MAX_COUNT, &count) != 0 || count == 0)
      return cli_usage_error("latch", "COUNT '%s' is not 1..%d", pos[2], DLOCK_LATCH_MAX_COUNT);
  } else if (npos > 2) {
    return cli_usage_error("latch", "unexpected argument '%s'", pos[2]);
  }
  if (expire_given && !is_set) return cli_usage_error("latch", "--expire goes with 'set'");
  if (wait_given && strcmp(action, "wait") != 0) return cli_usage_error("latch", "--wait goes with 'wait'");

  dlock_client *c;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  dlock_latch *l = NULL;
  int st = dlock_latch_new(&l, c, name);
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "latch '%s'", name);
    dlock_client_free(c);
    return rc;
  }
  int64_t n = 0;
  if (is_set) {
    st = dlock_latch_set(l, (int64_t)count, expire_ms);
    if (st == 0 && !quiet) {
      char exp[64];
      cli_format_duration(expire_ms, exp, sizeof exp);
      printf("latch '%s' set to %" PRIu64 " (expires in %s)\n", name, count, exp);
    }
  } else if (strcmp(action, "down") == 0) {
    st = dlock_latch_count_down(l, &n);
    if (st == 0 && !quiet) printf("latch '%s': %" PRId64 " left%s\n", name, n, n == 0 ? " (open)" : "");
  } else if (strcmp(action, "count") == 0) {
    st = dlock_latch_count(l, &n);
    if (st == 0) printf("%" PRId64 "\n", n);
  } else {
    st = dlock_latch_wait(l, wait_ms);
    if (st == 0 && !quiet) printf("latch '%s' is open\n", name);
  }
  if (st == DLOCK_EBUSY && !quiet) fprintf(stderr, "dlock: %s\n", dlock_latch_errmsg(l));
  if (st == DLOCK_EBUSY)
    rc = CLI_EXIT_BUSY;
  else if (st != 0)
    rc = cli_report(st, dlock_latch_errmsg(l), "latch %s '%s'", action, name);
  dlock_latch_free(l);
  dlock_client_free(c);
  return rc;
}
