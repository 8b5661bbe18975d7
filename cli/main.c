/*
 * main.c - the dlock command: global options and the subcommand table,
 * nothing else. Each subcommand lives in its own cmd_*.c (curl's tool_*.c
 * split); adding one is a line in 'commands' plus its file and help page.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct cli_command {
  const char *name;
  int (*fn)(int argc, char **argv);
} cli_command;

static const cli_command commands[] = {
  {"run", cmd_run},
  {"status", cmd_status},
  {"list", cmd_list},
  {"release", cmd_release},
  {"fence", cmd_fence},
  {"latch", cmd_latch},
  {"demo", cmd_demo},
  {"help", cmd_help},
  {"cron", cmd_cron},
  {"every", cmd_every},
  {"bench", cmd_bench},
  {"doctor", cmd_doctor},
  {"init", cmd_init},
  {"prune", cmd_prune},
  {"config", cmd_config},
  {"version", cmd_version},
};

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
   * its number, and our messages would be sent to Redis as commands. */
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
    return cli_usage_error(NULL, "missing command (run, status, list, release, "
                                 "fence, latch, cron, every, demo, bench, doctor, init, prune, config, "
                                 "version)");
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

  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(first, commands[i].name) != 0)
      continue;
    if (commands[i].fn != cmd_help &&
        wants_help(argc - 1, argv + 1)) {
      cli_help_print(stdout, first);
      return CLI_EXIT_OK;
    }
    /* Flush and check stdout at the end: a full disk or closed pipe must
     * not pass for success in scripts. */
    int rc = commands[i].fn(argc - 1, argv + 1);
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
      perror("dlock: stdout");
      return CLI_EXIT_SOFTWARE;
    }
    return rc;
  }
  return cli_usage_error(NULL, "unknown command '%s'", first);
}
