/*
 * cmd_init.c - "dlock init": create what the backend needs on the server
 * ahead of time (dlock_client_setup): on PostgreSQL, dlock's schema, tables,
 * sequences and functions, for deployments whose run-time user has no DDL
 * rights. A backend that needs nothing made ahead says so (the library's
 * words, dlock_last_error()).
 */
#include <string.h>

#include "cli.h"

static const cli_opt init_opts[] = {
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_init_opts[] = {init_opts, NULL};

int cmd_init(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  int id;

  cli_args_init(&args, argc, argv, "init", CLI_COMMON_URL);
  while ((id = cli_next_opt(&args, init_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (!cli_common_opt(id, arg, &url)) return cli_usage_error("init", "unexpected argument '%s'", arg);
  }
  dlock_client *c = NULL;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  int st = dlock_client_setup(c);
  if (st != 0) {
    char server[400];
    snprintf(server, sizeof server, "%s", dlock_client_server(c));
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", dlock_last_error());
    dlock_client_free(c);
    return cli_report(st, detail, "init on %s", server);
  }
  /* The library says when the backend needs nothing made ahead. */
  if (dlock_last_error()[0] != '\0')
    printf("dlock init: %s\n", dlock_last_error());
  else
    printf("dlock init: %s: what dlock keeps its locks in is ready\n", dlock_client_server(c));
  dlock_client_free(c);
  return CLI_EXIT_OK;
}
