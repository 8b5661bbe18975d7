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

/* "dlock CMD --help" / "-h" anywhere before "--" answers with the help page,
 * so that no subcommand can forget to. */
static int wants_help(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0)
      return 0;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return 1;
  }
  return 0;
}

/* "dlock version" and "dlock --version": the command's version, and the
 * library's when another libdlock is loaded at run time. */
int cmd_version(int argc, char **argv)
{
  if (argc > 1)
    return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
  if (strcmp(dlock_version(), DLOCK_VERSION) == 0)
    printf("dlock %s\n", DLOCK_VERSION);
  else
    printf("dlock %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
  return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
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
  if (strcmp(first, "--version") == 0 || strcmp(first, "-V") == 0)
    return cmd_version(argc - 1, argv + 1);
  /* Hidden alias of "dlock help --markdown", kept for man page tooling. */
  if (strcmp(first, "--man-markdown") == 0) {
    cli_help_markdown(stdout);
    return CLI_EXIT_OK;
  }
  if (first[0] == '-')
    return cli_usage_error(NULL, "unknown option '%s' (options go after the command)", first);

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
  return cli_usage_error(NULL, "unknown command '%s'", first);
}
