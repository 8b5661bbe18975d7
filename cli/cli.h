/*
 * cli.h - what the files of the dlock command share: exit codes, the
 * subcommand entry points, option parsing, durations, connecting and
 * reporting errors. The command uses only the public dlock.h, so that
 * it stays an example of the library's API and nothing more.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dlock.h"

/* ---- Exit codes ---- */

/* sysexits(3) values where one fits, so that scripts and service managers
 * can tell "try again later" from "you called me wrong". */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_STALE = 1,       /* fence check: the token is stale */
  CLI_EXIT_USAGE = 64,      /* EX_USAGE */
  CLI_EXIT_UNAVAILABLE = 69,/* EX_UNAVAILABLE: Redis unreachable, auth failed */
  CLI_EXIT_SOFTWARE = 70,   /* EX_SOFTWARE: internal or unexpected error */
  CLI_EXIT_BUSY = 75,       /* EX_TEMPFAIL: lock not acquired within --wait */
  CLI_EXIT_LOST = 79,       /* the lock was lost while the command ran */
  CLI_EXIT_NOEXEC = 126,    /* command found but not executable */
  CLI_EXIT_NOTFOUND = 127   /* command not found */
};

/* ---- Subcommands ---- */

/* Each gets argv starting at the subcommand's name (argv[0] = "run"). */
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_release(int argc, char **argv);
int cmd_fence(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_help(int argc, char **argv);

/* ---- Help (help.c) ---- */

/* Print the --help page of 'command' (NULL: the overview) to 'out'.
 * Returns 0, or -1 when there is no such page. */
int cli_help_print(FILE *out, const char *command);
/* The full manual page in Markdown: docs/dlock.1.md is this output. */
void cli_help_markdown(FILE *out);
/* Print "dlock: <msg>; see 'dlock CMD --help'" and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Option parsing (opts.c) ---- */

typedef struct cli_opt {
  const char *long_name; /* without the dashes; NULL ends the table */
  char short_name;       /* 0: none */
  int has_arg;
  int id;
} cli_opt;

typedef struct cli_args {
  int argc;
  char **argv;
  int index;           /* next argv element to look at */
  const char *command; /* for error messages */
  const char *cluster; /* rest of a "-qv" cluster being taken apart */
  int after_dashdash;  /* 1 once "--" was seen */
} cli_args;

enum {
  CLI_OPT_DONE = -1,       /* no more arguments */
  CLI_OPT_POSITIONAL = -2, /* *arg is a positional argument */
  CLI_OPT_DASHDASH = -3,   /* "--" seen: the rest are not options */
  CLI_OPT_ERROR = -4       /* a usage error was printed */
};

void cli_args_init(cli_args *a, int argc, char **argv, const char *command);
/* Next option id, or one of CLI_OPT_*. Options and positional arguments may
 * be mixed until "--". For options with an argument *arg is its value. */
int cli_next_opt(cli_args *a, const cli_opt *table, const char **arg);

/* ---- Durations and numbers (duration.c) ---- */

/* "250ms", "10s", "5m", "1h", "1.5s" or a bare number of seconds. Returns 0
 * and *ms, or -1 for garbage, negatives and anything over
 * DLOCK_MAX_DURATION_MS. Zero is accepted; callers reject it where it means
 * nothing. */
int cli_parse_duration(const char *text, int64_t *ms);
/* Unsigned decimal, no sign, no junk, within 'max'. */
int cli_parse_u64(const char *text, uint64_t max, uint64_t *out);
/* "1.234s", "250ms", "5m 3s": for messages. */
void cli_format_duration(int64_t ms, char *buf, size_t len);

/* ---- Connecting and errors (common.c) ---- */

/* Connect to --url (NULL: $DLOCK_URL, else the library's default). On
 * failure prints why and returns the exit code (69 or 64); else 0. */
int cli_connect(const char *url, dlock_client **out);
/* The URL that applies, for DLOCK_URL in a child's environment. */
const char *cli_effective_url(const char *url);
/* 'url' with any password replaced by "***", into 'buf'. */
void cli_redact_url(const char *url, char *buf, size_t len);
/* Exit code for a failed library call. */
int cli_exit_for_status(int status);
/* Print "dlock: <what>: <strerror> (<detail>)" to stderr and return the exit
 * code for 'status'. 'detail' may be NULL or empty. */
int cli_report(int status, const char *detail, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- The demo's private Redis (demo_server.c) ---- */

typedef struct demo_server {
  int pid;        /* of redis-server; 0 when none runs */
  int port;
  char dir[512];  /* temporary directory, removed by demo_server_stop() */
  char url[64];
} demo_server;

/* Start redis-server on a free loopback port in a new temporary directory
 * and wait until it answers. Returns 0, or an exit code after printing
 * why (69 when redis-server is missing or does not come up). */
int demo_server_start(demo_server *s);
/* Stop it by PID and remove its directory. Safe to call twice, and from a
 * thread other than the one that started it. */
void demo_server_stop(demo_server *s);

/* Write 's' as a JSON string literal, quotes included. */
void cli_json_string(FILE *out, const char *s);

#endif /* DLOCK_CLI_H */
