/*
 * main.c - the dlock command: global options and the dispatch through the
 * command table (help.c: one descriptor per command, with its handler and
 * help page), nothing else. Each subcommand lives in its own cmd_*.c
 * (curl's tool_*.c split).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Edit distance with transpositions (optimal string alignment), capped:
 * "rnu" is one step from "run". Words are command names, so short. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  int d[17][17];
  if (la > 16 || lb > 16) return 99;
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    for (size_t j = 1; j <= lb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[la][lb];
}

/* What a mistyped or borrowed command word most likely meant: the words of
 * flock(1), consul lock and etcdctl first, then the nearest command name. */
static const char *did_you_mean(const char *word) {
  static const char *const borrowed[][2] = {
      {"lock", "run"},       {"flock", "run"},      {"acquire", "run"},    {"exec", "run"},
      {"unlock", "release"}, {"ls", "list"},        {"info", "status"},    {"show", "status"},
      {"election", "elect"}, {"campaign", "elect"}, {"leaders", "leader"}, {"schedule", "cron"},
  };
  for (size_t i = 0; i < sizeof borrowed / sizeof borrowed[0]; i++)
    if (strcmp(word, borrowed[i][0]) == 0) return borrowed[i][1];
  size_t n;
  const cli_command *cmds = cli_commands(&n);
  const char *best = NULL;
  int best_d = 3;
  for (size_t i = 0; i < n; i++) {
    if (cmds[i].name == NULL) continue;
    int d = distance(word, cmds[i].name);
    /* At most two edits, and fewer than half of the word's letters. */
    if (d < best_d && (size_t)d * 2 < strlen(cmds[i].name)) {
      best = cmds[i].name;
      best_d = d;
    }
  }
  return best;
}

/* "dlock CMD --help" / "-h" anywhere before "--" answers with the help page,
 * so that no subcommand can forget to. */
static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return 0;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
  }
  return 0;
}

/* "dlock version" and "dlock --version": the command's version, and the
 * library's when another libdlock is loaded at run time. */
int cmd_version(int argc, char **argv) {
  if (argc > 1) return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
  if (strcmp(dlock_version(), DLOCK_VERSION) == 0)
    printf("dlock %s\n", DLOCK_VERSION);
  else
    printf("dlock %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
  return CLI_EXIT_OK;
}

int main(int argc, char **argv) {
  /* With stdin, stdout or stderr closed, the next socket (Redis) would take
   * its number, and our messages would be sent to the server as commands. */
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null >= 0 && null != fd) {
        dup2(null, fd);
        close(null);
      }
    }
  }
  if (argc < 2) {
    /* The commands, as the table lists them. */
    char names[256];
    size_t n, len = 0;
    const cli_command *cmds = cli_commands(&n);
    names[0] = '\0';
    for (size_t i = 0; i < n && len < sizeof names; i++)
      if (cmds[i].name != NULL && strcmp(cmds[i].name, "help") != 0)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", cmds[i].name);
    return cli_usage_error(NULL, "missing command (%s)", names);
  }
  const char *first = argv[1];
  if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
    cli_help_print(stdout, NULL);
    return CLI_EXIT_OK;
  }
  if (strcmp(first, "--version") == 0 || strcmp(first, "-V") == 0) return cmd_version(argc - 1, argv + 1);
  /* Hidden alias of "dlock help --markdown", kept for man page tooling. */
  if (strcmp(first, "--man-markdown") == 0) {
    cli_help_markdown(stdout);
    return CLI_EXIT_OK;
  }
  if (first[0] == '-') return cli_usage_error(NULL, "unknown option '%s' (options go after the command)", first);

  const cli_command *cmd = cli_command_find(first);
  if (cmd != NULL) {
    if (cmd->run != cmd_help && wants_help(argc - 1, argv + 1)) {
      cli_help_print(stdout, first);
      return CLI_EXIT_OK;
    }
    /* Flush and check stdout at the end: a full disk or closed pipe must
     * not pass for success in scripts. */
    int rc = cmd->run(argc - 1, argv + 1);
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
      perror("dlock: stdout");
      return CLI_EXIT_SOFTWARE;
    }
    return rc;
  }
  const char *meant = did_you_mean(first);
  if (meant != NULL) return cli_usage_error(NULL, "unknown command '%s' (did you mean 'dlock %s'?)", first, meant);
  return cli_usage_error(NULL, "unknown command '%s'", first);
}
