/*
 * cmd_prune.c - "dlock prune": delete what the server keeps of locks that
 * no one holds or waits for any more (dlock_client_prune): on PostgreSQL,
 * the rows of released and expired locks, of waiters that died, of
 * semaphores and read-write locks with no hold left, in batches until none
 * is left. A backend that keeps nothing to prune says so (the library's
 * answer with nothing deleted), and prune prints that.
 */
#include <string.h>

#include "cli.h"

enum { OPT_OLDER = 1 };

static const cli_opt prune_opts[] = {
    {"older-than", 0, 1, OPT_OLDER},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_prune_opts[] = {prune_opts, NULL};

/* At most this many batches (DLOCK_PRUNE_BATCH rows per table each) in one
 * run: a table of millions of rows is pruned by running it again. */
#define PRUNE_MAX_BATCHES 1000

int cmd_prune(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  int64_t older_ms = 3600 * 1000;
  int id;

  cli_args_init(&args, argc, argv, "prune", CLI_COMMON_URL);
  while ((id = cli_next_opt(&args, prune_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_OLDER) {
      if (cli_parse_duration(arg, &older_ms) != 0)
        return cli_usage_error("prune", "--older-than: %s", dlock_last_error());
    } else {
      return cli_usage_error("prune", "unexpected argument '%s'", arg);
    }
  }
  dlock_client *c = NULL;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  char server[400];
  snprintf(server, sizeof server, "%s", dlock_client_server(c));
  int64_t total = 0;
  for (int i = 0; i < PRUNE_MAX_BATCHES; i++) {
    int64_t n = 0;
    int st = dlock_client_prune(c, older_ms, &n);
    if (st != 0) {
      char detail[1024];
      snprintf(detail, sizeof detail, "%s", dlock_last_error());
      dlock_client_free(c);
      if (total > 0) fprintf(stderr, "dlock prune: %lld rows were deleted before this failure\n", (long long)total);
      return cli_report(st, detail, "prune on %s", server);
    }
    if (i == 0 && n == 0 && dlock_last_error()[0] != '\0') {
      /* Nothing kept to prune on this backend: the library says why. */
      printf("dlock prune: %s\n", dlock_last_error());
      dlock_client_free(c);
      return CLI_EXIT_OK;
    }
    total += n;
    if (n == 0) break;
  }
  char age[64];
  cli_format_duration(older_ms, age, sizeof age);
  printf("dlock prune: %s: %lld rows deleted (locks, waiters and holds that ended more than %s ago; "
         "live holds, waiters, fences and scheduler rows stay)\n",
         server, (long long)total, age);
  dlock_client_free(c);
  return CLI_EXIT_OK;
}
