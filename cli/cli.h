/*
 * cli.h - what the files of the dlock command share: exit codes, the
 * subcommand entry points, option parsing, durations, connecting and
 * reporting errors. The command uses only the public dlock.h, so that
 * it stays an example of the library's API and nothing more.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dlock.h"

/* ---- Exit codes ---- */

/* sysexits(3) values where one fits, so that scripts and service managers
 * can tell "try again later" from "you called me wrong". */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_STALE = 1,        /* fence check: the token is stale; leader --am-i: not this host */
  CLI_EXIT_NOLEADER = 3,     /* leader, elect --resign/--evict: no one leads */
  CLI_EXIT_USAGE = 64,       /* EX_USAGE */
  CLI_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: Redis unreachable, auth failed */
  CLI_EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: internal or unexpected error */
  CLI_EXIT_BUSY = 75,        /* EX_TEMPFAIL: lock not acquired within --wait */
  CLI_EXIT_LOST = 79,        /* the lock was lost while the command ran */
  CLI_EXIT_NOEXEC = 126,     /* command found but not executable */
  CLI_EXIT_NOTFOUND = 127    /* command not found */
};

/* ---- Subcommands ---- */

/* Each gets argv starting at the subcommand's name (argv[0] = "run"). */
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_release(int argc, char **argv);
int cmd_fence(int argc, char **argv);
int cmd_latch(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_cron(int argc, char **argv);
int cmd_every(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_leader(int argc, char **argv);
int cmd_job(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* ---- Help (help.c) ---- */

struct cli_opt;

/* A command's descriptor: everything about a command is said here once,
 * and main (dispatch), the help, the man page and the completion read it. */
typedef struct cli_command {
  const char *name;                  /* NULL: the overview ("dlock --help") */
  int (*run)(int argc, char **argv); /* argv[0] is the command's name; NULL for the overview */
  const char *page;                  /* the --help text (usage first): at most 24 lines of 80 columns */
  const char *more;                  /* Markdown only in the manual page, may be NULL */
  /* Its line in the overview's list of commands, "SYNOPSIS\tSUMMARY";
   * NULL: not listed on a line of its own (named on another's line). */
  const char *summary;
  /* The common options it takes (CLI_COMMON_*) and its own option tables,
   * NULL-ended, as its parser reads them: the completion offers exactly
   * these. NULL: the page's options (a command that passes them on). */
  unsigned common;
  const struct cli_opt *const *opts;
} cli_command;

/* The one command table (help.c), which main, every help text, the man
 * page and the completion read; and the manual's closing sections
 * (Markdown), for the generators in help_gen.c. */
const cli_command *cli_commands(size_t *n);
/* The descriptor of command 'name' (NULL: the overview), or NULL. */
const cli_command *cli_command_find(const char *name);
/* The --help page of 'c': its page, or for the overview the page with
 * the commands' summary lines. */
const char *cli_command_page(const cli_command *c);
const char *cli_help_man_tail(void);

/* Print the --help page of 'command' (NULL: the overview) to 'out'.
 * Returns 0, or -1 when there is no such page. */
int cli_help_print(FILE *out, const char *command);
/* The full manual page in Markdown: docs/dlock.1.md is this output. */
void cli_help_markdown(FILE *out);
/* The same manual page in roff (man(7)), installed as dlock.1 (help_gen.c). */
void cli_help_roff(FILE *out);
/* The completion script for 'shell' ("bash" or "zsh"), generated from the
 * help pages: commands, their options and the URL schemes. -1: no such shell. */
int cli_help_completion(FILE *out, const char *shell);
/* Print "dlock: <msg>; see 'dlock CMD --help'" and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
  int index;                 /* next argv element to look at */
  const char *command;       /* for error messages */
  const char *cluster;       /* rest of a "-qv" cluster being taken apart */
  int after_dashdash;        /* 1 once "--" was seen */
  unsigned common;           /* CLI_COMMON_*: the common options this command takes */
  const cli_opt *chained[3]; /* tables looked in after the command's (cli_args_chain) */
} cli_args;

enum {
  CLI_OPT_DONE = -1,       /* no more arguments */
  CLI_OPT_POSITIONAL = -2, /* *arg is a positional argument */
  CLI_OPT_DASHDASH = -3,   /* "--" seen: the rest are not options */
  CLI_OPT_ERROR = -4,      /* a usage error was printed */
  /* The common options (cli_common_opts), looked up before the command's
   * own table: */
  CLI_OPT_URL = -10,    /* --url URL */
  CLI_OPT_PREFIX = -11, /* --prefix P */
  /* --password-file F: taken by the parser itself (into the settings, as
   * 'password_file'), never returned; with --url. */
  CLI_OPT_PASSWORD_FILE = -12
};

/* Which common options a command takes (cli_args_init's 'common'). */
#define CLI_COMMON_URL 1u
#define CLI_COMMON_PREFIX 2u
#define CLI_COMMON_SERVER (CLI_COMMON_URL | CLI_COMMON_PREFIX)

/* The one table of the options shared by the commands that talk to a
 * server, in the order the help lists them. */
extern const cli_opt cli_common_opts[];
/* The CLI_COMMON_* bit of common option 'id' (0: not a common option). */
unsigned cli_common_bit(int id);

/* Each command's option tables, NULL-ended, in the order its parser looks
 * in them (its descriptor's 'opts'; defined beside the parser). */
extern const cli_opt *const cli_run_opts[], *const cli_hold_opts[], *const cli_elect_opts[];
extern const cli_opt *const cli_status_opts[], *const cli_list_opts[], *const cli_release_opts[];
extern const cli_opt *const cli_fence_opts[];
extern const cli_opt *const cli_latch_opts[], *const cli_cron_opts[], *const cli_every_opts[];
extern const cli_opt *const cli_leader_opts[], *const cli_doctor_opts[], *const cli_init_opts[];
extern const cli_opt *const cli_prune_opts[], *const cli_demo_opts[], *const cli_config_opts[];
extern const cli_opt *const cli_job_opts[], *const cli_top_opts[], *const cli_serve_opts[];

/* 'common': the CLI_COMMON_* options taken before 'table' (0: none). */
void cli_args_init(cli_args *a, int argc, char **argv, const char *command, unsigned common);
/* Also take the options of 't1', 't2' and 't3' (NULL: none), looked in
 * after the table given to cli_next_opt: option groups that several
 * commands share are written once. */
void cli_args_chain(cli_args *a, const cli_opt *t1, const cli_opt *t2, const cli_opt *t3);
/* Next option id, or one of CLI_OPT_*. Options and positional arguments may
 * be mixed until "--". For options with an argument *arg is its value. */
int cli_next_opt(cli_args *a, const cli_opt *table, const char **arg);
/* Take a common option: --url into '*url', --prefix into the settings.
 * 1 when 'id' was one, else 0. */
int cli_common_opt(int id, const char *arg, const char **url);

/* ---- Metrics of the long-running commands (metrics.c) ---- */

/* --metrics-file PATH, --metrics-listen ADDR:PORT, --metrics-interval D:
 * the option table to chain (cli_args_chain) and its ids. */
enum { CLI_OPT_METRICS_FILE = -30, CLI_OPT_METRICS_LISTEN = -31, CLI_OPT_METRICS_INTERVAL = -32 };
extern const cli_opt cli_metrics_table[];

typedef struct cli_metrics_opts {
  const char *file;    /* NULL: none */
  const char *listen;  /* "127.0.0.1:9464"; NULL: none */
  int64_t interval_ms; /* the file's; 0: 10 s */
} cli_metrics_opts;

/* Take option 'id' (one of the CLI_OPT_METRICS_*) into 'o': 0, or the
 * usage error's exit code. */
int cli_metrics_opt(const char *cmd, int id, const char *arg, cli_metrics_opts *o);
/* ADDR:PORT, ADDR an IPv4 address or [IPv6] (not a host name), into 'sa'
 * (struct sockaddr_storage *): 0, or -1. */
struct sockaddr_storage;
int cli_parse_listen(const char *text, struct sockaddr_storage *sa, unsigned *len);
/* The names that label the metrics of the client cli_connect() makes next
 * (dlock_client_options.metrics_names): the command's job or election. */
void cli_connect_metrics_names(const char *names);

typedef struct cli_metrics cli_metrics;
/* Start what 'o' asks for (nothing: *out NULL) on client 'c': 0, or an
 * exit code after saying why (a port in use: 69). */
int cli_metrics_start(cli_metrics **out, dlock_client *c, const cli_metrics_opts *o);
/* Stop serving, write the file a last time, free. NULL: nothing. */
void cli_metrics_stop(cli_metrics *m);

/* ---- Log lines of the long-running commands (log.c) ---- */

/* The fields a line may carry besides time, level, event, job, name, host
 * and pid (zero: absent). */
typedef struct cli_log_fields {
  int64_t tick;     /* a scheduler tick's time (unix ms) */
  const char *node; /* the node that ran a tick */
  uint64_t fence;   /* a hold's fence (elect: the epoch) */
  int has_duration, has_wait, has_exit;
  int64_t duration_ms, wait_ms;
  int exit_status;
  const char *signal; /* "SIGTERM" */
  const char *reason; /* why a hold was lost */
  const char *holder; /* who holds the lock (waiting, busy) */
} cli_log_fields;

/* --log-format text|json into '*json': 0, or the usage error's exit code. */
int cli_log_format_opt(const char *cmd, const char *arg, int *json);
/* What every line says from now on: JSON or text, the job (cron, every;
 * NULL: none) and the name (lock, election or job; NULL: none). */
void cli_log_setup(int json, const char *job, const char *name);
int cli_log_json(void);
/* One line on stderr, in one write(): "dlock: MESSAGE", or with
 * --log-format json one object with the fields and "message" (NULL: none;
 * a text line then is not written). 'f' may be NULL. */
void cli_log_line(const char *level, const char *event, const cli_log_fields *f, const char *message);
void cli_log(const char *level, const char *event, const cli_log_fields *f, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- Durations and numbers (duration.c) ---- */

/* dlock_duration_parse(): "250ms", "1m30s", "2d", "1.5s" or a bare number
 * of seconds. Returns 0 and *ms, or -1 for garbage, negatives and anything
 * over DLOCK_MAX_DURATION_MS, dlock_last_error() saying why ("bad duration
 * 'x': ..."). Zero is accepted; callers reject it where it means nothing. */
int cli_parse_duration(const char *text, int64_t *ms);
/* Unsigned decimal, no sign, no junk, within 'max'. */
int cli_parse_u64(const char *text, uint64_t max, uint64_t *out);
/* "1.234s", "250ms", "5m 3s": for messages. */
void cli_format_duration(int64_t ms, char *buf, size_t len);

/* ---- Connecting and errors (common.c) ---- */

/* ---- Settings (config.c) ---- */

/* A flag's value ("url" or "prefix"), before the first cli_config_load(). */
void cli_config_set_flag(const char *key, const char *value);
/* Read the config files and the environment (once). 0, or the exit code
 * after saying what is wrong (file:line). */
int cli_config_load(void);
/* The effective URL (never NULL) and key prefix ("" for none). */
const char *cli_config_url(void);
const char *cli_config_prefix(void);
/* 1 once loaded when nothing named a server (the default URL is in use). */
int cli_config_url_defaulted(void);
/* Put url, key prefix, TLS files and timeouts into 'opts'. */
void cli_config_apply(dlock_client_options *opts);
/* The system's and the user's config file paths ("" when there is no $HOME). */
void cli_config_paths(char *system, size_t slen, char *user, size_t ulen);
int cmd_config(int argc, char **argv);
int cmd_version(int argc, char **argv);

/* Connect to --url (NULL: $DLOCK_URL, else the library's default). On
 * failure prints why and returns the exit code (69 or 64); else 0. Prints
 * the client's warnings about the server (dlock_client_warnings) once. */
int cli_connect(const char *url, dlock_client **out);
/* Print dlock_client_warnings(c) on stderr, one "dlock: warning:" line each. */
void cli_print_warnings(const dlock_client *c);
/* The server's kind in messages, as the library's scheme registry names it
 * (dlock_url_backend); "the server" for a scheme it does not know. */
const char *cli_server_kind(const char *url);
/* The URL that applies, for DLOCK_URL in a child's environment. */
const char *cli_effective_url(const char *url);
/* 'url' with any password replaced by "***", into 'buf'. */
void cli_redact_url(const char *url, char *buf, size_t len);
/* "DLOCK_URL=..." for a command's environment (malloc'd; NULL: out of
 * memory): the password shown as ***, unless the URL is dlock's own
 * $DLOCK_URL (the caller's to hand on). */
char *cli_child_env_url(const char *url);
/* Who holds a lock, in one line for messages: "pid 12 on host user u,
 * command: make; since 3s ago; lease 27s left; 2 waiting" (cmd_status.c). */
void cli_holder_describe(const dlock_lock_info *info, char *buf, size_t len);
/* An owner_info in words: "pid 12 on host (user u), command: make", or the
 * text as it is when "dlock run" did not write it (cmd_status.c). */
void cli_owner_describe(const char *owner_info, char *buf, size_t len);
/* The same, short, for a column: "user@host:pid command" (cmd_status.c). */
void cli_owner_brief(const char *owner_info, char *buf, size_t len);
/* status NAME --watch (name set) and list --watch (name NULL, 'pattern' a
 * glob or NULL): one line per change until a signal (cmd_watch.c). */
int cli_watch(dlock_client *c, const char *name, const char *pattern, int json, int sfd);
/* The watch modes' end: SIGINT, SIGTERM and SIGHUP blocked and readable on
 * the returned signalfd (-1 on failure, errno set) (common.c). Call it
 * before connecting: the threads a client starts inherit the mask. */
int cli_stop_signalfd(void);
/* Exit code for a failed library call. */
int cli_exit_for_status(int status);
/* Print "dlock: <what>: <strerror> (<detail>)" to stderr and return the exit
 * code for 'status'. 'detail' may be NULL or empty. */
int cli_report(int status, const char *detail, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- Running a command (child.c) ---- */

/* Find 'file' as a shell would (PATH unless it holds a '/') and put its path
 * in 'out'. Returns 0, or after saying why CLI_EXIT_NOTFOUND (127) when
 * nothing is found, CLI_EXIT_NOEXEC (126) when only a file that cannot be
 * executed is. */
int cli_resolve_program(const char *file, char *out, size_t len);

/* Everything execve() needs, built before fork(): after fork() in a process
 * with threads only async-signal-safe calls are allowed, so no malloc, no
 * setenv and no PATH search in the child. */
typedef struct cli_child {
  char path[4096];
  char **argv;    /* what execve() gets; points into the caller's 'cmd' */
  char **sh_argv; /* fallback for a script without "#!" (ENOEXEC) */
  char **envp;
  char **env_own; /* copies of the variables set for the child */
} cli_child;

/* Build the child of 'program' (a resolved path) with the words 'cmd' (or,
 * with 'shell', /bin/sh -c cmd[0]). 'env' is a NULL-terminated list of
 * "NAME=value" that replace or join our environment. 0, or -1 (no memory;
 * cli_child_free() is still needed). 'cmd' must outlive the plan. */
int cli_child_build(cli_child *p, const char *program, char **cmd, int ncmd, int shell, const char *const *env);
void cli_child_free(cli_child *p);

/* fork() and execve() the plan in a new process group that it leads, with
 * PR_SET_PDEATHSIG (SIGTERM) and the signal mask 'mask'. 'tty' >= 0: give
 * that terminal's foreground to the child. An exec failure is reported on
 * stderr (naming 'shown') and the child exits 127 or 126. Returns the pid,
 * which is also the group id, or -1 after saying why. */
pid_t cli_child_spawn(const cli_child *p, const sigset_t *mask, int tty, const char *shown);

/* A guardian: a small process outside the command's group that stops the
 * whole group (SIGTERM and SIGCONT, SIGKILL after 'grace_ms') if dlock dies
 * without a word, e.g. by SIGKILL, since then nobody renews the lease.
 * PR_SET_PDEATHSIG reaches only the command's own process, not what it
 * started (the real work under sh -c). Told a deadline (each renewal), it
 * also stops the group by itself when dlock does not tell it a later one in
 * time (dlock stopped, frozen, starved): SIGTERM at deadline - grace,
 * SIGKILL at the deadline, so that the command is gone when the lease can
 * end; after dlock's death, SIGKILL comes at the deadline if it is sooner
 * than the grace. */
typedef struct cli_guard {
  pid_t pid;
  int fd;       /* write end of its pipe: 16-byte messages */
  int64_t told; /* the last deadline told (dlock_mono_ms), 0 if none */
} cli_guard;

/* Start a guardian for the group 'pgid'. On failure it says why, and
 * 'g->pid' is -1 (the command runs unguarded beyond PR_SET_PDEATHSIG). */
void cli_guard_start(cli_guard *g, pid_t pgid, int64_t grace_ms);
/* The hold is valid until 'deadline' (dlock_mono_ms; 0: no deadline, e.g.
 * between terms): SIGTERM at deadline - 'grace_ms', SIGKILL at the deadline
 * unless a later deadline comes first. Cheap when nothing changed. */
void cli_guard_deadline(cli_guard *g, int64_t deadline, int64_t grace_ms);
/* The group is gone: let the guardian go and reap it. */
void cli_guard_stop(cli_guard *g);

/* A wait status as a shell shows it: the exit code, or 128+N for signal N. */
int cli_exit_code_of(int status);
/* "SIGTERM" and the like, for messages. */
const char *cli_signame(int sig);

/* After a job's leader has ended and been reaped: stop what it left in its
 * process group (SIGTERM and SIGCONT, SIGKILL after 'grace_ms') and wait
 * until the group is empty. 'sigfd' >= 0: the caller has no other children
 * and reads SIGCHLD from that signalfd, so any child is reaped and the
 * signals that come meanwhile are read away; -1: only members of the group
 * are reaped (other threads have children of their own). */
void cli_stop_group(pid_t pgid, int64_t grace_ms, int quiet, int sigfd);

/* ---- The scheduler daemon of "cron" and "every" (sched_daemon.c) ---- */

typedef enum cli_trigger {
  CLI_TRIGGER_CRON, /* 'expr' */
  CLI_TRIGGER_RATE, /* every 'period_ms' on the epoch-aligned grid */
  CLI_TRIGGER_DELAY /* 'period_ms' after the previous run ended */
} cli_trigger;

typedef struct cli_daemon_opts {
  const char *command; /* "cron" or "every", for messages */
  cli_trigger trigger;
  const char *expr;
  int64_t period_ms;
  unsigned cron_flags; /* DLOCK_CRON_UNIX */
  const char *job;
  const char *tz;   /* cron: the zone of 'expr'; both: how times are shown */
  const char *node; /* NULL: the library's "<hostname>:<pid>" */
  const char *url;
  int64_t at_most_ms; /* 0: the library's default (10 minutes) */
  int64_t at_least_ms;
  int allow_overlap; /* --overlap allow */
  int64_t grace_ms;
  int pool; /* 0: 1 */
  int shell;
  int quiet, verbose;
  char **cmd; /* NULL-terminated, from argv */
  int ncmd;
  cli_metrics_opts metrics;
  int log_json; /* --log-format json */
} cli_daemon_opts;

/* Run the job until SIGINT, SIGTERM or SIGHUP, one log line per tick on
 * stderr. Returns the exit code: 128+N after signal N, else an error's. */
int cli_daemon_run(const cli_daemon_opts *o);

/* 'unix_ms' as ISO 8601 in 'tz' (NULL: UTC), with ".mmm" when the time is
 * not a whole second. 'len' >= 40 is always enough. */
void cli_format_time_ms(int64_t unix_ms, const char *tz, char *buf, size_t len);

/* ---- The demo's private Redis (demo_server.c) ---- */

typedef struct demo_server {
  int pid; /* of redis-server; 0 when none runs */
  int port;
  char dir[512]; /* temporary directory, removed by demo_server_stop() */
  char url[64];
} demo_server;

/* Start redis-server on a free loopback port in a new temporary directory
 * and wait until it answers. Returns 0, or an exit code after printing
 * why (69 when redis-server is missing or does not come up). */
int demo_server_start(demo_server *s);
/* Stop it by PID and remove its directory. Safe to call twice, and from a
 * thread other than the one that started it. */
void demo_server_stop(demo_server *s);

/* A growing list of names, for the callbacks of dlock_lock_list() and
 * dlock_job_list() (common.c): cli_names_add(name, list) copies the name
 * ('oom' set when it could not); cli_names_free() frees and empties it. */
typedef struct cli_names {
  char **v;
  size_t n, cap;
  int oom;
} cli_names;
void cli_names_add(const char *name, void *list);
void cli_names_free(cli_names *l);

/* Write 's' as a JSON string literal, quotes included. */
void cli_json_string(FILE *out, const char *s);
/* Length of the well-formed UTF-8 sequence at 'p' (1..4), or 0 (common.c). */
int cli_utf8_sequence(const unsigned char *p);
/* Print the last 'n' runs of 'job', newest first: a table, or JSON
 * (cmd_cron.c). Returns the exit code; 'command' names the usage errors. */
int cli_history_show(dlock_client *c, const char *command, const char *job, int n, const char *tz, int json);

#endif /* DLOCK_CLI_H */
