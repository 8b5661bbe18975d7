/*
 * cmd_doctor.c - "dlock doctor": is this server fit to hold locks? One line
 * per dlock_client_check() finding (OK, WARN or FAIL, what was found and
 * the fix), or one JSON object; exit 0 unless something FAILed.
 */
#include <string.h>

#include "cli.h"

enum { OPT_JSON = 1 };

static const cli_opt doctor_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_doctor_opts[] = {doctor_opts, NULL};

static const char *level_name(dlock_check_level level) {
  switch (level) {
  case DLOCK_CHECK_OK:
    return "OK";
  case DLOCK_CHECK_WARN:
    return "WARN";
  case DLOCK_CHECK_FAIL:
    return "FAIL";
  }
  return "FAIL";
}

static void print_json(const char *server, const char *url, const dlock_check *checks, int n, int failed) {
  printf("{\"server\": ");
  cli_json_string(stdout, server);
  printf(", \"url\": ");
  cli_json_string(stdout, url);
  printf(", \"ok\": %s, \"checks\": [", failed ? "false" : "true");
  for (int i = 0; i < n; i++) {
    printf("%s{\"name\": ", i ? ", " : "");
    cli_json_string(stdout, checks[i].name);
    printf(", \"level\": ");
    cli_json_string(stdout, level_name(checks[i].level));
    printf(", \"found\": ");
    cli_json_string(stdout, checks[i].found);
    printf(", \"fix\": ");
    cli_json_string(stdout, checks[i].fix);
    if (strcmp(checks[i].name, "clock") == 0 && strncmp(checks[i].found, "cannot", 6) != 0)
      printf(", \"skew_ms\": %lld", (long long)checks[i].skew_ms);
    printf("}");
  }
  printf("]}\n");
}

static void print_text(const dlock_check *checks, int n) {
  for (int i = 0; i < n; i++) {
    printf("%-4s  %-12s %s\n", level_name(checks[i].level), checks[i].name, checks[i].found);
    if (checks[i].fix[0] != '\0') printf("      %-12s fix: %s\n", "", checks[i].fix);
  }
}

/* Redlock: the checks of each node, one block per node ("node" in JSON). */
static int doctor_nodes(dlock_client *c, const char *shown, int json) {
  int nodes = dlock_client_node_count(c), failed = 0;

  if (json) {
    printf("{\"server\": ");
    cli_json_string(stdout, dlock_client_server(c));
    printf(", \"url\": ");
    cli_json_string(stdout, shown);
    printf(", \"nodes\": [");
  } else {
    printf("dlock doctor: %s\n", dlock_client_server(c));
  }
  for (int k = 0; k < nodes; k++) {
    dlock_check checks[DLOCK_CHECK_MAX];
    int n = dlock_client_check_node(c, k, checks, DLOCK_CHECK_MAX);
    if (n < 0) {
      memset(checks, 0, sizeof checks);
      checks[0].name = "connect";
      checks[0].level = DLOCK_CHECK_FAIL;
      snprintf(checks[0].found, sizeof checks[0].found, "cannot use node %s: %s: %s", dlock_client_node_name(c, k),
               dlock_strerror(n), dlock_last_error());
      snprintf(checks[0].fix, sizeof checks[0].fix, "%s",
               "bring the node back; Redlock works while a majority answers");
      n = 1;
    }
    int node_failed = 0;
    for (int i = 0; i < n; i++) node_failed |= checks[i].level == DLOCK_CHECK_FAIL;
    failed |= node_failed;
    if (json) {
      printf("%s", k ? ", " : "");
      print_json(dlock_client_node_name(c, k), shown, checks, n, node_failed);
    } else {
      printf("node %s:\n", dlock_client_node_name(c, k));
      print_text(checks, n);
    }
  }
  if (json) printf("], \"ok\": %s}\n", failed ? "false" : "true");
  dlock_client_free(c);
  return failed ? 1 : CLI_EXIT_OK;
}

int cmd_doctor(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  int json = 0;
  int id;

  cli_args_init(&args, argc, argv, "doctor", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, doctor_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_JSON)
      json = 1;
    else if (id == CLI_OPT_POSITIONAL)
      return cli_usage_error("doctor", "unexpected argument '%s'", arg);
  }

  char shown[512];
  cli_redact_url(cli_effective_url(url), shown, sizeof shown);
  dlock_client_options opts;
  dlock_client_options_init(&opts);
  opts.url = url != NULL && url[0] != '\0' ? url : NULL;
  dlock_client *c = NULL;
  int st = dlock_client_new(&c, &opts);
  if (st == DLOCK_EURL || st == DLOCK_EINVAL)
    return cli_report(st, dlock_last_error(), "cannot use %s at %s", cli_server_kind(shown), shown);

  if (st == 0 && dlock_client_node_count(c) > 0) return doctor_nodes(c, shown, json);
  dlock_check checks[DLOCK_CHECK_MAX];
  int n = st == 0 ? dlock_client_check(c, checks, DLOCK_CHECK_MAX) : st;
  if (n < 0) {
    /* The first thing to fix: the server cannot be reached or logged in to. */
    memset(checks, 0, sizeof checks);
    checks[0].name = "connect";
    checks[0].level = DLOCK_CHECK_FAIL;
    snprintf(checks[0].found, sizeof checks[0].found, "cannot use %s at %s: %s: %s", cli_server_kind(shown), shown,
             dlock_strerror(n), dlock_last_error());
    if (n == DLOCK_EAUTH)
      snprintf(checks[0].fix, sizeof checks[0].fix, "check the user and password in the URL");
    else
      snprintf(checks[0].fix, sizeof checks[0].fix, "check that %s runs there and the URL (--url, $DLOCK_URL)",
               cli_server_kind(shown));
    n = 1;
  }
  int failed = 0;
  for (int i = 0; i < n; i++) failed |= checks[i].level == DLOCK_CHECK_FAIL;
  if (json) {
    print_json(c != NULL ? dlock_client_server(c) : "", shown, checks, n, failed);
  } else {
    printf("dlock doctor: %s\n", c != NULL ? dlock_client_server(c) : shown);
    print_text(checks, n);
  }
  dlock_client_free(c);
  return failed ? 1 : CLI_EXIT_OK;
}
