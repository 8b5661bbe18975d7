/*
 * cmd_run.c - "dlock run NAME -- COMMAND": hold a lock for the life of a
 * command. The library ties a hold to the thread that acquired it, so one
 * thread owns the lock (acquire ... release) while the main thread waits in
 * poll() on a signalfd (signals and child exits), that thread's pipe and the
 * lock's lost fd. Nothing here runs inside a signal handler.
 *
 * "dlock elect NAME -- COMMAND" is the same supervisor around a leader
 * election (dlock_election_*): the hold is a term, taken by campaigning and
 * given up by resigning, and COMMAND learns its epoch and value.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

typedef enum on_lost { ON_LOST_TERM, ON_LOST_KILL, ON_LOST_IGNORE } on_lost;

typedef struct run_opts {
  const char *url;
  const char *name;
  int64_t wait_ms;
  int64_t lease_ms;
  int64_t grace_ms;
  on_lost lost_action;
  int shell;
  int quiet;
  int verbose;
  int conflict_code;
  int lost_code;
  int side;   /* -s: DLOCK_RW_READ, -x: DLOCK_RW_WRITE, 0: a mutex */
  int limit;  /* --limit N: a permit of a semaphore of N; 0: a mutex */
  char **cmd; /* NULL-terminated, from argv */
  int ncmd;
  /* flock's habits: -c COMMAND (one string for the shell) and --multi. */
  char *c_argv[2];
  char *multi_buf;    /* --multi names, each NUL-terminated */
  char *multi_joined; /* the same joined with commas (o->name then points here) */
  const char *multi[DLOCK_MULTI_MAX];
  size_t nmulti;
  /* dlock hold: no COMMAND; held until standard input ends */
  int hold;
  /* dlock elect: */
  int elect;
  const char *value;       /* --value: the leader's value (default: the host name) */
  const char *active_file; /* --active-file: written while leading */
  int on_elected, on_lost; /* --on-elected SIG, --on-lost SIG: COMMAND runs throughout, told */
  char host[256];
  cli_metrics_opts metrics; /* --metrics-file, --metrics-listen */
  int log_json;             /* --log-format json */
} run_opts;

enum {
  OPT_WAIT = 1,
  OPT_LEASE,
  OPT_ON_LOST,
  OPT_GRACE,
  OPT_SHELL,
  OPT_CONFLICT,
  OPT_QUIET,
  OPT_VERBOSE,
  OPT_LOST_CODE,
  OPT_SHARED,
  OPT_EXCLUSIVE,
  OPT_NONBLOCK,
  OPT_COMMAND,
  OPT_MULTI,
  OPT_LIMIT,
  OPT_VALUE,
  OPT_ACTIVE_FILE,
  OPT_RESIGN,
  OPT_EVICT,
  OPT_ON_ELECTED,
  OPT_ON_LOST_SIG,
  OPT_LOG_FORMAT
};

/* What run, hold and elect all take. */
static const cli_opt lock_table[] = {
    {"wait", 'w', 1, OPT_WAIT},
    {"lease", 'l', 1, OPT_LEASE},
    {"conflict-exit-code", 'E', 1, OPT_CONFLICT},
    {"lost-exit-code", 0, 1, OPT_LOST_CODE},
    {"quiet", 'q', 0, OPT_QUIET},
    {"verbose", 'v', 0, OPT_VERBOSE},
    {"log-format", 0, 1, OPT_LOG_FORMAT},
    {NULL, 0, 0, 0},
};

/* The kinds of lock and flock's spellings: run and hold. */
static const cli_opt kinds_table[] = {
    {"shared", 's', 0, OPT_SHARED}, {"exclusive", 'x', 0, OPT_EXCLUSIVE}, {"nonblock", 'n', 0, OPT_NONBLOCK},
    {"multi", 0, 1, OPT_MULTI},     {"limit", 0, 1, OPT_LIMIT},           {NULL, 0, 0, 0},
};

/* What a COMMAND run under the lock needs: run and elect. */
static const cli_opt command_table[] = {
    {"grace", 0, 1, OPT_GRACE},
    {"shell", 0, 0, OPT_SHELL},
    {"command", 'c', 1, OPT_COMMAND},
    {NULL, 0, 0, 0},
};

static const cli_opt run_table[] = {
    {"on-lost", 0, 1, OPT_ON_LOST},
    {NULL, 0, 0, 0},
};

/* dlock elect: a term's own options (run's lock and command ones too). */
static const cli_opt elect_table[] = {
    {"value", 0, 1, OPT_VALUE},
    {"active-file", 0, 1, OPT_ACTIVE_FILE},
    {"on-elected", 0, 1, OPT_ON_ELECTED},
    {"on-lost", 0, 1, OPT_ON_LOST_SIG},
    {"resign", 0, 0, OPT_RESIGN},
    {"evict", 0, 0, OPT_EVICT},
    {NULL, 0, 0, 0},
};

/* The command descriptors' option tables (help.c), in the order the parser
 * looks in them: the command's own, then the chained ones. */
const cli_opt *const cli_run_opts[] = {run_table, lock_table, kinds_table, command_table, NULL};
const cli_opt *const cli_hold_opts[] = {kinds_table, lock_table, NULL};
const cli_opt *const cli_elect_opts[] = {elect_table, lock_table, command_table, cli_metrics_table, NULL};

/* "run", "hold" or "elect": the command being parsed, for messages. */
static const char *cmdname = "run";

/* ---- Parsing ---- */

/* A signal by name (HUP, SIGUSR1, ...) or number; 0 when unknown. */
static int signal_arg(const char *text) {
  static const struct {
    const char *name;
    int sig;
  } names[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
      {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"ALRM", SIGALRM},
  };
  uint64_t n;
  if (cli_parse_u64(text, 64, &n) == 0) return (int)n;
  if (strncmp(text, "SIG", 3) == 0) text += 3;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(text, names[i].name) == 0) return names[i].sig;
  return 0;
}

static int duration_arg(const char *opt, const char *text, int zero_ok, int64_t *ms) {
  if (cli_parse_duration(text, ms) != 0) {
    return cli_usage_error(cmdname, "--%s: %s", opt, dlock_last_error());
  }
  if (*ms == 0 && !zero_ok) return cli_usage_error(cmdname, "--%s: must be more than 0", opt);
  return 0;
}

/* --multi a,b,c (repeatable): add each name; the names are joined with
 * commas into o->name for messages and DLOCK_NAME. */
static int add_multi(run_opts *o, const char *list) {
  size_t old = o->multi_buf ? strlen(o->multi_buf) : 0;
  char *buf = realloc(o->multi_buf, old + strlen(list) + 2);
  if (buf == NULL) return cli_usage_error(cmdname, "out of memory");
  /* The pointers into the old buffer move with it. */
  for (size_t i = 0; i < o->nmulti; i++) o->multi[i] = buf + (o->multi[i] - o->multi_buf);
  o->multi_buf = buf;
  char *start = buf + old;
  if (old > 0) *start++ = '\0';
  strcpy(start, list);
  for (char *p = start;;) {
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    if (*p == '\0') return cli_usage_error(cmdname, "--multi '%s': an empty name", list);
    if (o->nmulti == DLOCK_MULTI_MAX) return cli_usage_error(cmdname, "--multi: at most %d names", DLOCK_MULTI_MAX);
    o->multi[o->nmulti++] = p;
    if (comma == NULL) break;
    p = comma + 1;
  }
  return 0;
}

static int parse_run(int argc, char **argv, run_opts *o, int *admin) {
  cli_args args;
  const char *arg;
  int id;
  int dashdash = 0;
  int grace_given = 0;
  int cmd_at = 0; /* argv index of a COMMAND given without '--' */
  const char *c_cmd = NULL;

  memset(o, 0, sizeof *o);
  o->wait_ms = DLOCK_WAIT_FOREVER;
  o->lease_ms = 30000;
  o->grace_ms = 5000;
  o->lost_action = ON_LOST_TERM;
  o->conflict_code = CLI_EXIT_BUSY;
  o->lost_code = CLI_EXIT_LOST;
  o->elect = strcmp(argv[0], "elect") == 0;
  o->hold = strcmp(argv[0], "hold") == 0;
  cmdname = o->elect ? "elect" : o->hold ? "hold" : "run";
  if (o->elect) {
    o->lease_ms = 15000;
    gethostname(o->host, sizeof o->host - 1);
    o->value = o->host;
  }

  cli_args_init(&args, argc, argv, cmdname, CLI_COMMON_SERVER);
  /* run: its own, lock, kinds, command; elect: its own, lock, command;
   * hold: kinds and lock (the lists above). */
  const cli_opt *const *tables = o->elect ? cli_elect_opts : o->hold ? cli_hold_opts : cli_run_opts;
  const cli_opt *own = tables[0];
  cli_args_chain(&args, tables[1], tables[1] ? tables[2] : NULL, tables[1] && tables[2] ? tables[3] : NULL);
  while (!dashdash && !cmd_at && (id = cli_next_opt(&args, own, &arg)) != CLI_OPT_DONE) {
    int rc = 0;
    uint64_t n;
    switch (id) {
    case CLI_OPT_ERROR:
      return CLI_EXIT_USAGE;
    case CLI_OPT_DASHDASH:
      dashdash = 1;
      break;
    case CLI_OPT_POSITIONAL:
      if (o->name == NULL && o->nmulti == 0) {
        o->name = arg;
      } else {
        /* As flock: "dlock run NAME CMD ARGS..." needs no '--' when CMD
         * does not start with '-'; everything from CMD on is the command's. */
        cmd_at = args.index - 1;
      }
      break;
    case OPT_NONBLOCK:
      o->wait_ms = 0;
      break;
    case OPT_COMMAND:
      c_cmd = arg;
      break;
    case OPT_MULTI:
      rc = add_multi(o, arg);
      break;
    case CLI_OPT_URL:
    case CLI_OPT_PREFIX:
      cli_common_opt(id, arg, &o->url);
      break;
    case OPT_WAIT:
      rc = duration_arg("wait", arg, 1, &o->wait_ms);
      break;
    case OPT_LEASE:
      rc = duration_arg("lease", arg, 0, &o->lease_ms);
      break;
    case OPT_GRACE:
      rc = duration_arg("grace", arg, 1, &o->grace_ms);
      grace_given = 1;
      break;
    case OPT_ON_LOST:
      if (strcmp(arg, "term") == 0) {
        o->lost_action = ON_LOST_TERM;
      } else if (strcmp(arg, "kill") == 0) {
        o->lost_action = ON_LOST_KILL;
      } else if (strcmp(arg, "ignore") == 0) {
        o->lost_action = ON_LOST_IGNORE;
      } else {
        rc = cli_usage_error(cmdname, "--on-lost: '%s' is not one of term, kill, ignore", arg);
      }
      break;
    case OPT_SHELL:
      o->shell = 1;
      break;
    case OPT_CONFLICT:
      if (cli_parse_u64(arg, 255, &n) != 0)
        rc = cli_usage_error(cmdname, "--conflict-exit-code: '%s' is not 0..255", arg);
      else
        o->conflict_code = (int)n;
      break;
    case OPT_LOST_CODE:
      if (cli_parse_u64(arg, 255, &n) != 0)
        rc = cli_usage_error(cmdname, "--lost-exit-code: '%s' is not 0..255", arg);
      else
        o->lost_code = (int)n;
      break;
    case OPT_QUIET:
      o->quiet = 1;
      break;
    case OPT_VERBOSE:
      o->verbose = 1;
      break;
    case OPT_LOG_FORMAT:
      rc = cli_log_format_opt(cmdname, arg, &o->log_json);
      break;
    case OPT_SHARED:
    case OPT_EXCLUSIVE:
      /* The two sides of one read-write lock (docs/rwlock.md), as flock's -s/-x. */
      if (o->side != 0 && o->side != (id == OPT_SHARED ? DLOCK_RW_READ : DLOCK_RW_WRITE))
        rc = cli_usage_error(cmdname, "-s/--shared and -x/--exclusive exclude each other");
      o->side = id == OPT_SHARED ? DLOCK_RW_READ : DLOCK_RW_WRITE;
      break;
    case CLI_OPT_METRICS_FILE:
    case CLI_OPT_METRICS_LISTEN:
    case CLI_OPT_METRICS_INTERVAL:
      rc = cli_metrics_opt(cmdname, id, arg, &o->metrics);
      break;
    case OPT_VALUE:
      if (strlen(arg) > 1024) rc = cli_usage_error(cmdname, "--value: at most 1024 bytes");
      o->value = arg;
      break;
    case OPT_ACTIVE_FILE:
      o->active_file = arg;
      break;
    case OPT_ON_ELECTED:
    case OPT_ON_LOST_SIG:
      if ((n = (uint64_t)signal_arg(arg)) == 0)
        rc = cli_usage_error(cmdname, "--%s: '%s' is not a signal (HUP, USR1, USR2, TERM, ... or a number)",
                             id == OPT_ON_ELECTED ? "on-elected" : "on-lost", arg);
      else if (id == OPT_ON_ELECTED)
        o->on_elected = (int)n;
      else
        o->on_lost = (int)n;
      break;
    case OPT_RESIGN:
    case OPT_EVICT:
      *admin = id;
      break;
    case OPT_LIMIT: /* consul lock -n N */
      if (cli_parse_u64(arg, DLOCK_SEMAPHORE_MAX_PERMITS, &n) != 0 || n == 0)
        rc = cli_usage_error(cmdname, "--limit: '%s' is not a number of permits in 1..%d", arg,
                             DLOCK_SEMAPHORE_MAX_PERMITS);
      else
        o->limit = (int)n;
      break;
    default:
      /* ids are ints from the tables, not an enum */
      rc = cli_usage_error(cmdname, "internal: unhandled option");
      break;
    }
    if (rc != 0) return rc;
  }
  /* A command that ignores SIGTERM must be gone when the lease can end:
   * SIGTERM comes at the local deadline minus the grace (from dlock, or from
   * the guardian if dlock is killed or stopped), SIGKILL at the deadline.
   * Renewals come every third of the lease, so the deadline is two thirds
   * of it away just before one; the grace must fit with room for the
   * renewal's round trip: at most half the lease. The default shrinks. */
  if (grace_given && o->grace_ms > o->lease_ms / 2) {
    char grace[64], lease[64], most[64];
    cli_format_duration(o->grace_ms, grace, sizeof grace);
    cli_format_duration(o->lease_ms, lease, sizeof lease);
    cli_format_duration(o->lease_ms / 2, most, sizeof most);
    return cli_usage_error(cmdname,
                           "--grace %s is too long for --lease %s: the command gets SIGTERM "
                           "--grace before the lease could end and SIGKILL when it could, and the lease "
                           "is renewed every third of it; give --grace %s or less (half the lease), or a "
                           "longer --lease",
                           grace, lease, most);
  }
  /* The default leaves a late renewal more room than the most one may
   * ask for: a quarter of the lease (5/12 of it for the renewal's round
   * trip, not 1/6), so that a busy machine does not stop the command. */
  if (!grace_given && o->grace_ms > o->lease_ms / 4) o->grace_ms = o->lease_ms / 4;
  if (o->nmulti > 0 && o->name != NULL)
    return cli_usage_error(cmdname, "give the lock as NAME or the names with --multi, not both");
  if (o->nmulti > 0 && (o->side != 0 || o->limit > 0))
    return cli_usage_error(cmdname, "--multi takes mutexes; -s/-x (a read-write lock) and --limit (a semaphore) "
                                    "work on one NAME");
  if (o->side != 0 && o->limit > 0)
    return cli_usage_error(cmdname, "-s/-x (a read-write lock) and --limit (a semaphore) exclude each other");
  if (o->nmulti > 0) {
    /* The joined list names the set in messages and DLOCK_NAME. */
    size_t len = 1;
    for (size_t i = 0; i < o->nmulti; i++) len += strlen(o->multi[i]) + 1;
    if ((o->multi_joined = malloc(len)) == NULL) return cli_usage_error(cmdname, "out of memory");
    o->multi_joined[0] = '\0';
    for (size_t i = 0; i < o->nmulti; i++) {
      if (i > 0) strcat(o->multi_joined, ",");
      strcat(o->multi_joined, o->multi[i]);
    }
    o->name = o->multi_joined;
  }
  if (o->name == NULL) return cli_usage_error(cmdname, o->elect ? "missing election NAME" : "missing lock NAME");
  if (o->hold) {
    if (dashdash || cmd_at)
      return cli_usage_error(cmdname, "takes no COMMAND: it holds NAME until its standard input "
                                      "ends (use 'dlock run NAME -- COMMAND' to run one)");
    return 0;
  }
  if (*admin) {
    if (dashdash || cmd_at || c_cmd)
      return cli_usage_error(cmdname, "--resign and --evict take an election NAME and no COMMAND");
    return 0;
  }
  if (c_cmd != NULL) {
    /* -c COMMAND, as flock: one string for the shell, nothing after it. */
    if (dashdash || cmd_at)
      return cli_usage_error(cmdname,
                             "-c takes the whole command as one string; "
                             "give no other COMMAND (unexpected '%s')",
                             argv[cmd_at              ? cmd_at
                                  : args.index < argc ? args.index
                                                      : argc - 1]);
    o->c_argv[0] = (char *)c_cmd;
    o->c_argv[1] = NULL;
    o->cmd = o->c_argv;
    o->ncmd = 1;
    o->shell = 1;
    return 0;
  }
  if (!dashdash && !cmd_at)
    return cli_usage_error(cmdname, "missing COMMAND after NAME (dlock run NAME -- COMMAND, "
                                    "or -c 'COMMAND')");
  int first = cmd_at ? cmd_at : args.index;
  o->cmd = argv + first;
  o->ncmd = argc - first;
  if (o->ncmd == 0) return cli_usage_error(cmdname, "missing COMMAND after '--'");
  if (o->shell && o->ncmd != 1) {
    return cli_usage_error(cmdname, "--shell takes COMMAND as one string: "
                                    "--shell NAME -- 'cmd1 | cmd2'");
  }
  return 0;
}

/* ---- What the child gets ---- */

/* DLOCK_NAME, DLOCK_FENCE, DLOCK_URL, DLOCK_PREFIX and DLOCK_KIND replaced
 * or added. With --multi: DLOCK_KIND=multi and DLOCK_FENCES=name=fence,...
 * (one fence per name, in the order given) instead of DLOCK_FENCE, since
 * fences of different names are not comparable. */
static int plan_build(cli_child *p, const char *program, const run_opts *o, uint64_t fence, dlock_multi *mm) {
  const char *url = cli_effective_url(o->url);
  char env_name[DLOCK_MAX_NAME_LEN + 16];
  char env_fence[64];
  char env_prefix[DLOCK_MAX_NAME_LEN + 16];
  char *env_url = cli_child_env_url(url);
  char *env_fences = NULL;

  memset(p, 0, sizeof *p);
  if (env_url == NULL) return -1;
  snprintf(env_name, sizeof env_name, "DLOCK_NAME=%s", o->name);
  snprintf(env_fence, sizeof env_fence, "DLOCK_FENCE=%llu", (unsigned long long)fence);
  /* The prefix too, so that a nested 'dlock fence check' finds our keys. */
  snprintf(env_prefix, sizeof env_prefix, "DLOCK_PREFIX=%s", cli_config_prefix());
  /* What was taken: -s read, -x write, else a mutex. */
  const char *env_kind = o->side == DLOCK_RW_READ    ? "DLOCK_KIND=read"
                         : o->side == DLOCK_RW_WRITE ? "DLOCK_KIND=write"
                         : o->limit > 0              ? "DLOCK_KIND=semaphore"
                                                     : "DLOCK_KIND=mutex";
  /* DLOCK_PERMIT: the permit's fence; empty otherwise, so that an outer
   * run's value does not leak into a nested one. */
  char env_permit[64];
  if (o->limit > 0)
    snprintf(env_permit, sizeof env_permit, "DLOCK_PERMIT=%llu", (unsigned long long)fence);
  else
    snprintf(env_permit, sizeof env_permit, "DLOCK_PERMIT=");
  /* dlock elect: the term's epoch (its fence) and the leader's value. */
  char env_epoch[64], *env_value = NULL;
  if (o->elect) {
    size_t vlen = strlen("DLOCK_LEADER_VALUE=") + strlen(o->value) + 1;
    if ((env_value = malloc(vlen)) == NULL) {
      free(env_url);
      return -1;
    }
    snprintf(env_value, vlen, "DLOCK_LEADER_VALUE=%s", o->value);
    snprintf(env_epoch, sizeof env_epoch, "DLOCK_LEADER_EPOCH=%llu", (unsigned long long)fence);
    env_kind = "DLOCK_KIND=election";
  }
  const char *env[] = {env_name,  env_fence, env_url, env_prefix, env_kind, env_permit, o->elect ? env_epoch : NULL,
                       env_value, NULL};
  if (mm != NULL) {
    size_t len = strlen("DLOCK_FENCES=") + 1;
    for (size_t i = 0; i < dlock_multi_count(mm); i++) len += strlen(dlock_multi_name(mm, i)) + 24;
    if ((env_fences = malloc(len)) == NULL) {
      free(env_url);
      return -1;
    }
    size_t used = (size_t)snprintf(env_fences, len, "DLOCK_FENCES=");
    for (size_t i = 0; i < dlock_multi_count(mm); i++)
      used += (size_t)snprintf(env_fences + used, len - used, "%s%s=%llu", i ? "," : "", dlock_multi_name(mm, i),
                               (unsigned long long)dlock_multi_fence(mm, i));
    env[1] = env_fences;
    env[4] = "DLOCK_KIND=multi";
  }
  int rc = cli_child_build(p, program, o->cmd, o->ncmd, o->shell, env);
  free(env_url);
  free(env_value);
  free(env_fences);
  return rc;
}

/* "dlock-run host=H pid=P user=U cmd=ARGS": parsed back by cmd_status.c.
 * Arguments with blanks or quotes are single-quoted as a shell would need. */
static void owner_info_format(const run_opts *o, char *buf, size_t len) {
  char host[256] = "?";
  char pwbuf[1024];
  struct passwd pw;
  struct passwd *pwp = NULL;
  const char *user = "?";

  gethostname(host, sizeof host - 1);
  if (getpwuid_r(geteuid(), &pw, pwbuf, sizeof pwbuf, &pwp) == 0 && pwp != NULL) user = pwp->pw_name;
  size_t used = (size_t)snprintf(buf, len, "dlock-run host=%s pid=%ld user=%s cmd=", host, (long)getpid(), user);
  if (o->hold && used < len) {
    /* No COMMAND: name the shell that holds the lock through us. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)getppid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    used += (size_t)snprintf(buf + used, len - used, "(dlock hold, for) ");
    ssize_t n = fd >= 0 && used + 1 < len ? read(fd, buf + used, len - used - 1) : -1;
    if (fd >= 0) close(fd);
    for (ssize_t i = 0; i < n; i++)
      if ((unsigned char)buf[used + (size_t)i] < 0x20) buf[used + (size_t)i] = i == n - 1 ? '\0' : ' ';
    used = n > 0 ? used + (size_t)n : used;
  }
  for (int i = 0; i < o->ncmd && used + 8 < len; i++) {
    const char *a = o->cmd[i];
    int quote = a[0] == '\0' || strpbrk(a, " \t'\"\\$`") != NULL;
    if (i > 0) buf[used++] = ' ';
    if (quote) buf[used++] = '\'';
    for (; *a != '\0' && used + 6 < len; a++) {
      if (*a == '\'' && quote) {
        memcpy(buf + used, "'\\''", 4);
        used += 4;
      } else {
        /* One line of text: control bytes would garble status output. */
        buf[used++] = (unsigned char)*a < 0x20 ? '?' : *a;
      }
    }
    if (quote) buf[used++] = '\'';
  }
  if (used + 1 > len) used = len - 1;
  buf[used] = '\0';
}

/* ---- What is held: one mutex, or the names of --multi ---- */

typedef struct run_hold {
  dlock_mutex *m;    /* NAME (dlock elect: the election's mutex view) */
  dlock_multi *mm;   /* --multi: all the names, or none */
  dlock_election *e; /* dlock elect: a term, taken by campaigning */
  const char *value; /* dlock elect: the leader's value */
} run_hold;

static int hold_acquire(run_hold *h, int64_t wait_ms) {
  if (h->e) return dlock_election_campaign(h->e, h->value, wait_ms);
  return h->mm ? dlock_multi_acquire(h->mm, wait_ms) : dlock_mutex_acquire(h->m, wait_ms);
}

static int hold_release(run_hold *h) {
  if (h->e) /* the next candidate in line leads at once */
    return dlock_election_resign(h->e);
  return h->mm ? dlock_multi_release(h->mm) : dlock_mutex_release(h->m);
}

static void hold_cancel(run_hold *h) {
  if (h->mm)
    dlock_multi_cancel(h->mm);
  else
    dlock_mutex_cancel(h->m);
}

static int hold_lost_fd(run_hold *h) { return h->mm ? dlock_multi_lost_fd(h->mm) : dlock_mutex_lost_fd(h->m); }

static dlock_lost_reason hold_lost(run_hold *h) { return h->mm ? dlock_multi_lost(h->mm) : dlock_mutex_lost(h->m); }

static dlock_mono_ms hold_valid_until(run_hold *h) {
  return h->mm ? dlock_multi_valid_until(h->mm) : dlock_mutex_valid_until(h->m);
}

static const char *hold_errmsg(run_hold *h) { return h->mm ? dlock_multi_errmsg(h->mm) : dlock_mutex_errmsg(h->m); }

/* ---- The lock thread ---- */

typedef struct lock_thread {
  pthread_t tid;
  run_hold *h;
  int64_t wait_ms;
  int notify_r, notify_w; /* one byte per finished step */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int release_now;
  int acquire_rc;
  int release_rc;
  dlock_mono_ms waited_ms;
} lock_thread;

static void *lock_thread_main(void *arg) {
  lock_thread *t = arg;
  dlock_mono_ms t0 = dlock_mono_now();
  int rc = hold_acquire(t->h, t->wait_ms);
  dlock_mono_ms t1 = dlock_mono_now();

  pthread_mutex_lock(&t->mu);
  t->acquire_rc = rc;
  t->waited_ms = t1 - t0;
  pthread_mutex_unlock(&t->mu);
  (void)!write(t->notify_w, "a", 1);

  pthread_mutex_lock(&t->mu);
  while (!t->release_now) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);

  int rel = 0;
  if (rc == 0) rel = hold_release(t->h);
  pthread_mutex_lock(&t->mu);
  t->release_rc = rel;
  pthread_mutex_unlock(&t->mu);
  (void)!write(t->notify_w, "r", 1);
  return NULL;
}

/* Wait for the thread's next byte. Signals stay queued in the signalfd. */
static void lock_thread_wait(lock_thread *t) {
  char b;
  for (;;) {
    ssize_t n = read(t->notify_r, &b, 1);
    if (n == 1 || (n < 0 && errno != EINTR)) return;
    if (n == 0) return;
  }
}

/* Release (if held), join and return release's status. */
static int lock_thread_finish(lock_thread *t) {
  pthread_mutex_lock(&t->mu);
  t->release_now = 1;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->mu);
  lock_thread_wait(t);
  pthread_join(t->tid, NULL);
  pthread_mutex_lock(&t->mu);
  int rc = t->release_rc;
  pthread_mutex_unlock(&t->mu);
  return rc;
}

/* ---- Signals ---- */

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP};

typedef struct sig_setup {
  sigset_t watched;  /* blocked and read through the signalfd */
  sigset_t old_mask; /* restored in the child */
  int fd;
  /* The controlling terminal when dlock runs in its foreground: the command
   * gets the foreground (so it can read the terminal, and Ctrl-C reaches it
   * directly), and dlock takes it back when the command stops or ends. */
  int tty;
} sig_setup;

static int signals_start(sig_setup *s) {
  struct sigaction sa;

  sigemptyset(&s->watched);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
    /* Respect nohup and "cmd &" in scripts: a signal ignored at start
     * stays ignored (the child inherits that too). */
    if (sigaction(forwarded[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) continue;
    sigaddset(&s->watched, forwarded[i]);
  }
  /* SIGCHLD set to SIG_IGN by our parent would make the kernel reap the
   * child for us, and its status would be lost. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, NULL);
  sigaddset(&s->watched, SIGCHLD);

  /* Blocked before any thread exists (the client starts some), so that every
   * thread inherits the mask and the signals wait for the signalfd. */
  /* SIGTTOU blocked too: it lets a background dlock take the terminal back
   * with tcsetpgrp() (POSIX allows that when SIGTTOU is blocked). It never
   * reaches the signalfd; the child gets the old mask back. */
  sigset_t block = s->watched;
  sigaddset(&block, SIGTTOU);
  if (pthread_sigmask(SIG_BLOCK, &block, &s->old_mask) != 0) return -1;
  s->tty = -1;
  if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp()) s->tty = STDIN_FILENO;
  s->fd = signalfd(-1, &s->watched, SFD_CLOEXEC | SFD_NONBLOCK);
  return s->fd < 0 ? -1 : 0;
}

/* Reap what has ended. Sets *done and *status when 'child' has ended and
 * returns 1 when it was stopped (Ctrl-Z), else 0. */
static int reap(pid_t child, int *done, int *status) {
  int st;
  int stopped = 0;
  pid_t p;

  /* As subreaper we also inherit orphaned grandchildren: reap them too. */
  while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED)) > 0) {
    if (p == child && WIFSTOPPED(st)) {
      stopped = 1;
    } else if (p == child) {
      *done = 1;
      *status = st;
    }
  }
  return stopped;
}

/* Read every queued signal. SIGCHLD reaps; the others are collected in
 * 'got' (each one, so that two different signals arriving together are both
 * passed on), and 'last' is the last of them (0 when none came). */
static int drain_signals(int fd, pid_t child, int *done, int *status, sigset_t *got, int *last) {
  struct signalfd_siginfo si;
  int stopped = 0;

  sigemptyset(got);
  *last = 0;
  while (read(fd, &si, sizeof si) == (ssize_t)sizeof si) {
    if ((int)si.ssi_signo == SIGCHLD) {
      if (child > 0 && reap(child, done, status)) stopped = 1;
    } else {
      sigaddset(got, (int)si.ssi_signo);
      *last = (int)si.ssi_signo;
    }
  }
  return stopped;
}

static const int forwarded_signals[] = {SIGHUP, SIGINT, SIGTERM};

/* Why a hold was lost, in the user's words. */
static void loss_text(dlock_lost_reason reason, char *why, size_t len) {
  /* The library's text cannot know the server; the URL does. */
  if (reason == DLOCK_LOST_UNREACHABLE)
    snprintf(why, len, "%s could not be reached in time to renew the lease or keep the session",
             cli_server_kind(cli_config_url()));
  else
    snprintf(why, len, "%s", dlock_lost_reason_str(reason == DLOCK_LOST_NONE ? DLOCK_LOST_DEADLINE : reason));
}

/* ---- dlock hold ---- */

/* The lock is held until standard input ends (EOF: the writer closed it,
 * or Ctrl-D) or a signal comes; what happens is told on stdout, a line
 * each, for the shell reading it (a coprocess). Input is read and ignored. */
static int hold_until_input_ends(run_hold *h, const run_opts *o, int sigfd, uint64_t fence, int *lost) {
  if (h->mm != NULL)
    printf("acquired %s\n", o->name);
  else
    printf("acquired %s fence %llu\n", o->name, (unsigned long long)fence);
  fflush(stdout);
  int lost_fd = hold_lost_fd(h);
  for (;;) {
    struct pollfd pfd[3] = {{sigfd, POLLIN, 0}, {lost_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    if (poll(pfd, 3, -1) < 0) {
      if (errno == EINTR) continue;
      perror("dlock: poll");
      return CLI_EXIT_SOFTWARE;
    }
    if ((pfd[1].revents & POLLIN) != 0 && hold_lost(h) != DLOCK_LOST_NONE) {
      char why[160];
      loss_text(hold_lost(h), why, sizeof why);
      printf("lost %s: %s\n", o->name, why);
      fflush(stdout);
      *lost = 1;
      return o->lost_code;
    }
    int done = 0, status = 0, last = 0;
    sigset_t got;
    drain_signals(sigfd, 0, &done, &status, &got, &last);
    if (last != 0) {
      cli_log_fields f = {.signal = cli_signame(last)};
      if (o->verbose || (o->log_json && !o->quiet))
        cli_log("info", "signal", &f, "%s: releasing '%s'", cli_signame(last), o->name);
      return 128 + last;
    }
    if ((pfd[2].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0) {
      char buf[4096];
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return CLI_EXIT_OK; /* the input ended: release */
    }
  }
}

/* ---- Running the command ---- */

static int64_t ms_until(dlock_mono_ms when) {
  dlock_mono_ms now = dlock_mono_now();
  return when > now ? when - now : 0;
}

/* How often dlock tells the guardian the hold's deadline (when it changed). */
#define GUARD_TELL_EVERY_MS 100

/* When dlock stops the command if no renewal came: 'grace' before the local
 * deadline with --on-lost term (SIGKILL at the deadline), at it otherwise;
 * 0 when there is no deadline. */
static dlock_mono_ms stop_point(const run_opts *o, dlock_mono_ms valid_until, int64_t grace) {
  if (valid_until == 0) return 0;
  if (o->lost_action != ON_LOST_TERM) return valid_until + 1;
  return valid_until > grace ? valid_until - grace : 1;
}

/* The grace spent before a deadline first seen now: --grace, but at most
 * half of what the deadline grants (a hand-off's short claim lease runs
 * until the first renewal, at a third of it), so that a renewal on time
 * always comes before the stop point. */
static int64_t grace_before(const run_opts *o, dlock_mono_ms valid_until) {
  int64_t half = ms_until(valid_until) / 2;
  return o->grace_ms < half ? o->grace_ms : half;
}

typedef struct run_state {
  int lost;
  int signal_got; /* last signal passed on */
} run_state;

/* Supervise the child until it has ended; returns its wait status. */
static int supervise(pid_t pid, run_hold *h, const run_opts *o, int sigfd, int tty, run_state *rs, cli_guard *guard) {
  int done = 0, status = 0, last = 0;
  sigset_t got;
  int lost_fd = hold_lost_fd(h);
  dlock_mono_ms kill_at = 0;
  dlock_mono_ms seen_until = 0; /* the deadline 'grace' was set for */
  int64_t grace = o->grace_ms;

  while (!done) {
    struct pollfd pfd[2];
    nfds_t n = 0;
    pfd[n++] = (struct pollfd){sigfd, POLLIN, 0};
    if (!rs->lost && lost_fd >= 0) pfd[n++] = (struct pollfd){lost_fd, POLLIN, 0};
    int64_t timeout = -1;
    if (kill_at != 0) timeout = ms_until(kill_at);
    /* Backstop: past the validity deadline the hold must be taken as gone
     * even if no news came from the watchdog; with --on-lost term already
     * --grace before it, so that the command is gone when the lease can end.
     * The guardian learns each new deadline, to do the same if we cannot. */
    dlock_mono_ms valid_until = rs->lost ? 0 : hold_valid_until(h);
    if (valid_until != seen_until && valid_until != 0) {
      seen_until = valid_until;
      grace = grace_before(o, valid_until);
    }
    if (valid_until != 0 && o->lost_action != ON_LOST_IGNORE) cli_guard_deadline(guard, valid_until, grace);
    dlock_mono_ms stop_at = stop_point(o, valid_until, grace);
    if (stop_at != 0 && (timeout < 0 || ms_until(stop_at) < timeout)) timeout = ms_until(stop_at) + 1;
    if (valid_until != 0 && guard->pid > 0 && (timeout < 0 || timeout > GUARD_TELL_EVERY_MS))
      timeout = GUARD_TELL_EVERY_MS; /* a renewal's new deadline, to the guardian */
    if (timeout > 60000) timeout = 60000;
    int r = poll(pfd, n, (int)timeout);
    if (r < 0 && errno != EINTR) {
      perror("dlock: poll");
      kill(-pid, SIGKILL);
      kill_at = 0;
    }

    int stopped = drain_signals(sigfd, pid, &done, &status, &got, &last);
    if (stopped && tty >= 0 && !done) {
      /* Ctrl-Z stopped the command: stop too, so that the shell sees the
       * job stopped, and carry on together after "fg" or "bg". */
      tcsetpgrp(tty, getpgrp());
      kill(getpid(), SIGSTOP);
      if (tcgetpgrp(tty) == getpgrp()) tcsetpgrp(tty, pid); /* continued in the foreground */
      kill(-pid, SIGCONT);
    }
    if (last != 0 && !done) {
      rs->signal_got = last;
      for (size_t i = 0; i < sizeof forwarded_signals / sizeof forwarded_signals[0]; i++) {
        int s = forwarded_signals[i];
        if (!sigismember(&got, s)) continue;
        cli_log_fields f = {.signal = cli_signame(s)};
        if (o->verbose || (o->log_json && !o->quiet))
          cli_log("info", "signal", &f, "passing %s to the command", cli_signame(s));
        kill(-pid, s);
      }
    }
    if (done) break;

    int lost_now = 0;
    dlock_lost_reason reason = DLOCK_LOST_NONE;
    if (!rs->lost && n > 1 && (pfd[1].revents & POLLIN) != 0) {
      lost_now = 1;
      reason = hold_lost(h);
    }
    valid_until = rs->lost ? 0 : hold_valid_until(h);
    stop_at = stop_point(o, valid_until, grace);
    int early = 0; /* the lease is still ours, for less than --grace */
    if (!rs->lost && !lost_now && stop_at != 0 && dlock_mono_now() >= stop_at) {
      lost_now = 1;
      reason = DLOCK_LOST_DEADLINE;
      early = dlock_mono_now() <= valid_until;
    }
    if (lost_now) {
      rs->lost = 1;
      if (o->active_file) /* not leading any more: say so first */
        unlink(o->active_file);
      if (reason == DLOCK_LOST_NONE) reason = DLOCK_LOST_DEADLINE;
      const char *what = o->lost_action == ON_LOST_TERM   ? "sending SIGTERM to the command"
                         : o->lost_action == ON_LOST_KILL ? "sending SIGKILL to the command"
                                                          : "letting the command run on";
      char why[160];
      if (early)
        snprintf(why, sizeof why, "the lease could not be renewed in time and may end within --grace");
      else
        loss_text(reason, why, sizeof why);
      cli_log_fields f = {.reason = why};
      cli_log("error", "lost", &f, "%s '%s' lost: %s; %s", o->elect ? "leadership of" : "lock", o->name, why, what);
      switch (o->lost_action) {
      case ON_LOST_TERM:
        kill(-pid, SIGTERM);
        kill(-pid, SIGCONT);
        kill_at = dlock_mono_now() + o->grace_ms;
        if (early && valid_until < kill_at) kill_at = valid_until; /* gone when the lease can end */
        if (kill_at == 0) kill_at = 1;
        break;
      case ON_LOST_KILL:
        kill(-pid, SIGKILL);
        break;
      case ON_LOST_IGNORE:
        break;
      }
    }
    if (kill_at != 0 && dlock_mono_now() >= kill_at) {
      if (!o->quiet)
        cli_log("warning", "killed", NULL,
                "the command did not end within --grace (or before the lease could end); sending SIGKILL");
      kill(-pid, SIGKILL);
      kill_at = 0;
    }
  }
  return status;
}

/* ---- Reporting the wait ---- */

/* -v: the first line once the lock was not ours within this long, then one
 * line per WAIT_REPORT_EVERY_MS. */
#define WAIT_FIRST_REPORT_MS 250
#define WAIT_REPORT_EVERY_MS 10000

/* Who holds 'name' now, for a message; "another owner" when the server cannot
 * say (the question failing must not change the outcome). */
static void holder_now(dlock_client *c, const char *name, char *buf, size_t len) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  if (dlock_lock_info_get(c, name, &info) != 0 || !info.held)
    snprintf(buf, len, "another owner");
  else
    cli_holder_describe(&info, buf, len);
}

static void report_wait(dlock_client *c, const run_opts *o, const char *owner, int64_t waited) {
  dlock_lock_info info;
  char who[1600], w[64];

  dlock_lock_info_init(&info);
  if (dlock_lock_info_get(c, o->name, &info) != 0)
    snprintf(who, sizeof who, "an owner %s could not name: %s", cli_server_kind(cli_config_url()), dlock_last_error());
  else if (!info.held || strcmp(info.owner_info, owner) == 0)
    return; /* free, or ours by now: the acquire is about to return */
  else
    cli_holder_describe(&info, who, sizeof who);
  cli_log_fields f = {.has_wait = 1, .wait_ms = waited, .holder = who};
  if (waited < WAIT_REPORT_EVERY_MS) {
    cli_log("info", "waiting", &f, "waiting for '%s', held by %s", o->name, who);
  } else {
    cli_format_duration(waited, w, sizeof w);
    cli_log("info", "waiting", &f, "still waiting for '%s' after %s, held by %s", o->name, w, who);
  }
}

/* ---- dlock elect ---- */

/* --active-file: "EPOCH VALUE" while this host leads, written whole (a
 * temporary file renamed over it), removed on loss and at the end. */
static int active_file_write(const char *path, const char *name, uint64_t epoch, const char *value) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return -1;
  fprintf(f, "%llu %s\n", (unsigned long long)epoch, value);
  int bad = fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  (void)name;
  return 0;
}

/* dlock elect --resign NAME: the leader steps down if it is this host
 * (its value is --value, by default the host name); --evict NAME: whoever
 * leads. Either way the term read goes (dlock_election_evict: a forced
 * release of that epoch only, so a term begun in between stays, exit 1):
 * the leader's dlock sees the loss at its next renewal and stops its
 * COMMAND; the next candidate in line leads at once. */
static int elect_admin(const run_opts *o, int how) {
  dlock_client *c = NULL;
  int rc = cli_connect(o->url, &c);
  if (rc != 0) return rc;
  dlock_leader l;
  dlock_leader_init(&l);
  int st = dlock_election_leader(c, o->name, &l);
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "who leads '%s'", o->name);
  } else if (!l.has_leader) {
    if (!o->quiet) fprintf(stderr, "dlock: no one leads '%s'\n", o->name);
    rc = CLI_EXIT_NOLEADER;
  } else if (how == OPT_RESIGN && strcmp(l.value, o->value) != 0) {
    fprintf(stderr,
            "dlock: '%s' is led by '%s', not by '%s' (this host; --value says otherwise): not "
            "resigning; --evict NAME forces out whoever leads\n",
            o->name, l.value, o->value);
    rc = CLI_EXIT_STALE;
  } else {
    /* Only the term read above: one begun since is left alone. Where the
     * backend cannot check the epoch, whichever term holds goes (said). */
    int was = 0, checked = 1;
    st = dlock_election_evict(c, o->name, l.epoch, &was);
    if (st == DLOCK_EINVAL && strstr(dlock_last_error(), "not offered")) {
      checked = 0;
      st = dlock_lock_force_release(c, o->name, &was);
    }
    dlock_leader now;
    dlock_leader_init(&now);
    if (st != 0)
      rc = cli_report(st, dlock_last_error(), "%s '%s'",
                      how == OPT_RESIGN ? "resigning from" : "evicting the leader of", o->name);
    else if (!was && dlock_election_leader(c, o->name, &now) == 0 && now.has_leader && now.epoch != l.epoch) {
      fprintf(stderr,
              "dlock: '%s' (epoch %llu) had gone already; '%s' leads now (epoch %llu) and was left "
              "alone: run the command again to %s\n",
              l.value, (unsigned long long)l.epoch, now.value, (unsigned long long)now.epoch,
              how == OPT_RESIGN ? "resign if it is this host" : "evict it");
      rc = CLI_EXIT_STALE;
    } else if (!o->quiet) {
      fprintf(stderr, "dlock: '%s' (epoch %llu) %s; the next candidate leads%s\n", l.value, (unsigned long long)l.epoch,
              was ? "is out" : "had gone already",
              checked ? "" : " (this backend cannot check the epoch: whichever term held is out)");
    }
  }
  dlock_client_free(c);
  return rc;
}

/* ---- dlock elect --on-elected / --on-lost: COMMAND is told ---- */

/* Start a lock thread that campaigns (without limit). 0, or -1. */
static int campaign_start(lock_thread *t, run_hold *h) {
  int fds[2];
  memset(t, 0, sizeof *t);
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  t->notify_r = fds[0];
  t->notify_w = fds[1];
  t->h = h;
  t->wait_ms = DLOCK_WAIT_FOREVER;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  if (pthread_create(&t->tid, NULL, lock_thread_main, t) != 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  return 0;
}

/* End the lock thread's term or campaign (resign; cancel a campaign). */
static void campaign_end(lock_thread *t, run_hold *h, int campaigning) {
  if (campaigning) hold_cancel(h);
  lock_thread_finish(t);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  close(t->notify_r);
  close(t->notify_w);
}

/* COMMAND runs for dlock's whole life, as a standby too; dlock campaigns,
 * sends --on-elected to its group when this host leads and --on-lost
 * (default SIGTERM) when the term is lost, then campaigns again. When
 * COMMAND ends, dlock resigns and exits with its status. COMMAND reads the
 * epoch from --active-file (DLOCK_LEADER_EPOCH is 0: it starts unelected). */
static int elect_told(const run_opts *o, const char *program, run_hold *h, sig_setup *sig) {
  cli_child plan;
  if (plan_build(&plan, program, o, 0, NULL) != 0) {
    cli_child_free(&plan);
    cli_log("error", "error", NULL, "out of memory");
    return CLI_EXIT_SOFTWARE;
  }
  pid_t pid = cli_child_spawn(&plan, &sig->old_mask, sig->tty, o->shell ? "/bin/sh" : o->cmd[0]);
  cli_child_free(&plan);
  if (pid < 0) return CLI_EXIT_SOFTWARE;
  cli_guard guard;
  cli_guard_start(&guard, pid, o->grace_ms);
  lock_thread t;
  int running = 0, leading = 0, done = 0, status = 0, lost_any = 0;
  dlock_mono_ms retry_at = 0;
  while (!done) {
    if (!running && dlock_mono_now() >= retry_at) {
      if (campaign_start(&t, h) != 0) {
        cli_log("error", "error", NULL, "cannot start a thread");
        kill(-pid, SIGTERM);
        retry_at = dlock_mono_now() + 1000;
      } else {
        running = 1;
      }
    }
    struct pollfd pfd[2] = {{sig->fd, POLLIN, 0}, {-1, POLLIN, 0}};
    int64_t timeout = running ? 60000 : ms_until(retry_at) + 1;
    if (running && !leading) pfd[1].fd = t.notify_r;
    if (leading) {
      pfd[1].fd = hold_lost_fd(h);
      int64_t left = ms_until(hold_valid_until(h)) + 1;
      if (left < timeout) timeout = left;
    }
    if (poll(pfd, 2, (int)timeout) < 0 && errno != EINTR) break;
    sigset_t got;
    int last = 0;
    drain_signals(sig->fd, pid, &done, &status, &got, &last);
    for (size_t i = 0; last != 0 && !done && i < sizeof forwarded_signals / sizeof forwarded_signals[0]; i++)
      if (sigismember(&got, forwarded_signals[i])) kill(-pid, forwarded_signals[i]);
    if (done) break;
    if (running && !leading && (pfd[1].revents & POLLIN) != 0) {
      lock_thread_wait(&t);
      pthread_mutex_lock(&t.mu);
      int st = t.acquire_rc;
      pthread_mutex_unlock(&t.mu);
      if (st != 0) { /* the server failed: say so, try again in a second */
        cli_report(st, hold_errmsg(h), "campaigning in '%s' (trying again)", o->name);
        campaign_end(&t, h, 0);
        running = 0;
        retry_at = dlock_mono_now() + 1000;
        continue;
      }
      leading = 1;
      uint64_t epoch = dlock_mutex_fence(h->m);
      if (o->active_file && active_file_write(o->active_file, o->name, epoch, o->value) != 0)
        cli_log("error", "error", NULL, "cannot write --active-file %s: %s", o->active_file, strerror(errno));
      cli_log_fields f = {.fence = epoch};
      if (o->verbose || (o->log_json && !o->quiet))
        cli_log("info", "elected", &f, "leading '%s', epoch %llu", o->name, (unsigned long long)epoch);
      if (o->on_elected) kill(-pid, o->on_elected);
    } else if (leading && ((pfd[1].revents & POLLIN) != 0 || dlock_mono_now() > hold_valid_until(h))) {
      dlock_lost_reason why = hold_lost(h);
      if (o->active_file) unlink(o->active_file);
      cli_log_fields f = {.reason = dlock_lost_reason_str(why == DLOCK_LOST_NONE ? DLOCK_LOST_DEADLINE : why)};
      cli_log("error", "lost", &f, "leadership of '%s' lost: %s; sending %s to the command, campaigning again", o->name,
              f.reason, o->on_lost ? "the --on-lost signal" : "SIGTERM");
      kill(-pid, o->on_lost ? o->on_lost : SIGTERM);
      campaign_end(&t, h, 0);
      running = leading = 0;
      lost_any = 1;
    }
  }
  if (running) campaign_end(&t, h, !leading); /* resigns: the next candidate leads at once */
  if (o->active_file) unlink(o->active_file);
  if (sig->tty >= 0) tcsetpgrp(sig->tty, getpgrp());
  cli_stop_group(pid, o->grace_ms, o->quiet, sig->fd);
  cli_guard_stop(&guard);
  (void)lost_any; /* a term lost and taken again is the normal life of a told command */
  return cli_exit_code_of(status);
}

/* ---- The command ---- */

int cmd_run(int argc, char **argv) {
  run_opts o;
  char program[4096];
  char owner[1025];
  sig_setup sig = {.fd = -1, .tty = -1};
  dlock_client *c = NULL;
  cli_metrics *mx = NULL;
  dlock_mutex *m = NULL;
  run_hold hold = {NULL, NULL};
  lock_thread t;
  int thread_started = 0;
  int admin = 0;
  int rc = parse_run(argc, argv, &o, &admin);

  if (rc == 0 && admin) return elect_admin(&o, admin);
  if (rc == 0 && !o.hold) rc = cli_resolve_program(o.shell ? "/bin/sh" : o.cmd[0], program, sizeof program);
  /* hold: a reader that went away must not kill us before the release. */
  if (rc == 0 && o.hold) signal(SIGPIPE, SIG_IGN);
  if (rc != 0) {
    free(o.multi_buf);
    free(o.multi_joined);
    return rc;
  }
  owner_info_format(&o, owner, sizeof owner);
  if (o.elect) snprintf(owner, sizeof owner, "%s", o.value);
  cli_log_setup(o.log_json, NULL, o.name);

  if (signals_start(&sig) != 0) {
    perror("dlock: signals");
    return CLI_EXIT_SOFTWARE;
  }
  /* Orphans of the command come to us, so we can wait for them to go. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  if (o.elect) cli_connect_metrics_names(o.name);
  rc = cli_connect(o.url, &c);
  if (rc == 0) rc = cli_metrics_start(&mx, c, &o.metrics);
  if (rc != 0) goto out;

  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 0; /* watchdog mode: renewed for as long as we run */
  mo.watchdog_lease_ms = o.lease_ms;
  mo.owner_info = owner;
  int st;
  if (o.elect) {
    dlock_election_options eo;
    dlock_election_options_init(&eo);
    eo.lease_ms = o.lease_ms;
    eo.value = o.value; /* the campaign's: the mutex handle stays the same */
    st = dlock_election_new(&hold.e, c, o.name, &eo);
    m = st == 0 ? dlock_election_mutex(hold.e) : NULL;
    hold.value = o.value;
  } else if (o.nmulti > 0) {
    st = dlock_multi_new(&hold.mm, c, o.multi, o.nmulti, &mo);
  } else if (o.side != 0) {
    /* One side of a read-write lock; its mutex view serves the rest. */
    dlock_rwlock *rw = NULL;
    st = dlock_rwlock_new(&rw, c, o.name, o.side, &mo);
    m = dlock_rwlock_mutex(rw);
  } else if (o.limit > 0) { /* a semaphore, driven through its lock handle */
    dlock_semaphore *s = NULL;
    st = dlock_semaphore_new(&s, c, o.name, o.limit, &mo);
    m = st == 0 ? dlock_semaphore_mutex(s) : NULL;
  } else {
    st = dlock_mutex_new(&m, c, o.name, &mo);
  }
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "%s '%s'", o.elect ? "election" : "lock", o.name);
    goto out;
  }
  hold.m = m;
  if (o.elect && (o.on_elected || o.on_lost)) {
    rc = elect_told(&o, program, &hold, &sig);
    goto out;
  }

  int fds[2];
  memset(&t, 0, sizeof t);
  if (pipe2(fds, O_CLOEXEC) != 0) {
    perror("dlock: pipe");
    rc = CLI_EXIT_SOFTWARE;
    goto out;
  }
  t.notify_r = fds[0];
  t.notify_w = fds[1];
  t.h = &hold;
  t.wait_ms = o.wait_ms;
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  if (pthread_create(&t.tid, NULL, lock_thread_main, &t) != 0) {
    cli_log("error", "error", NULL, "cannot start a thread");
    rc = CLI_EXIT_SOFTWARE;
    goto out_pipe;
  }
  thread_started = 1;

  /* Wait for the lock, or for a signal that ends the wait. With -v, say so
   * when the lock was not ours at once, and every 10 s after: the library's
   * acquire keeps one place in the queue for the whole wait (FIFO), and we
   * ask who holds the lock on the side, through the same client. */
  int got_signal = 0;
  dlock_mono_ms wait_start = dlock_mono_now();
  dlock_mono_ms report_at = o.verbose && o.wait_ms != 0 && !hold.mm ? wait_start + WAIT_FIRST_REPORT_MS : 0;
  for (;;) {
    struct pollfd pfd[2] = {{sig.fd, POLLIN, 0}, {t.notify_r, POLLIN, 0}};
    int done = 0, status = 0, last = 0;
    sigset_t got;
    int timeout = report_at != 0 ? (int)ms_until(report_at) : -1;
    int pr = poll(pfd, 2, timeout);
    if (pr == 0 && report_at != 0) {
      report_wait(c, &o, owner, dlock_mono_now() - wait_start);
      report_at = dlock_mono_now() + WAIT_REPORT_EVERY_MS;
      continue;
    }
    if (pr < 0 && errno != EINTR) {
      perror("dlock: poll");
      hold_cancel(&hold);
    }
    drain_signals(sig.fd, 0, &done, &status, &got, &last);
    if (last != 0 && got_signal == 0) {
      got_signal = last;
      report_at = 0; /* no more wait reports: the wait is ending */
      hold_cancel(&hold);
    }
    if ((pfd[1].revents & POLLIN) != 0) {
      lock_thread_wait(&t);
      break;
    }
  }
  pthread_mutex_lock(&t.mu);
  st = t.acquire_rc;
  dlock_mono_ms waited = t.waited_ms;
  pthread_mutex_unlock(&t.mu);

  char waited_text[64];
  cli_format_duration(waited, waited_text, sizeof waited_text);
  if (got_signal != 0) {
    if (!o.quiet) {
      cli_log_fields f = {.signal = cli_signame(got_signal)};
      cli_log("info", "signal", &f, "%s while waiting for '%s'; not running the command", cli_signame(got_signal),
              o.name);
    }
    rc = 128 + got_signal;
    goto out_thread;
  }
  if (st == DLOCK_EBUSY && hold.mm != NULL) {
    if (!o.quiet) /* the message names the busy name and what was given back */
      cli_log("info", "busy", NULL, "%s", dlock_multi_errmsg(hold.mm));
    rc = o.conflict_code;
    goto out_thread;
  }
  if (st == DLOCK_EBUSY) {
    if (!o.quiet) {
      char who[1600];
      holder_now(c, o.name, who, sizeof who);
      cli_log_fields f = {.has_wait = 1, .wait_ms = waited, .holder = who};
      if (o.limit > 0 && o.wait_ms == 0)
        cli_log("info", "busy", &f, "all %d permits of '%s' are held (the newest by %s)", o.limit, o.name, who);
      else if (o.limit > 0)
        cli_log("info", "busy", &f, "all %d permits of '%s' are held (the newest by %s); gave up after %s", o.limit,
                o.name, who, waited_text);
      else if (o.elect && o.wait_ms == 0)
        cli_log("info", "busy", &f, "election '%s' is led by %s", o.name, who);
      else if (o.elect)
        cli_log("info", "busy", &f, "election '%s' is led by %s; gave up after %s", o.name, who, waited_text);
      else if (o.wait_ms == 0)
        cli_log("info", "busy", &f, "'%s' is held by %s", o.name, who);
      else
        cli_log("info", "busy", &f, "'%s' is held by %s; gave up after %s", o.name, who, waited_text);
      /* Redlock: which nodes said what (a single node has nothing to add). */
      const char *why = dlock_mutex_errmsg(m);
      if (strstr(why, "Redlock nodes")) cli_log("info", "busy", NULL, "%s", why);
    }
    rc = o.conflict_code;
    goto out_thread;
  }
  if (st != 0) {
    rc = cli_report(st, hold_errmsg(&hold), "%s '%s'", o.elect ? "campaigning in" : "acquiring", o.name);
    goto out_thread;
  }
  uint64_t fence = hold.mm ? 0 : dlock_mutex_fence(m);
  if (o.active_file && active_file_write(o.active_file, o.name, fence, o.value) != 0) {
    cli_log("error", "error", NULL, "cannot write --active-file %s: %s; not running the command", o.active_file,
            strerror(errno));
    rc = CLI_EXIT_SOFTWARE;
    goto out_thread;
  }
  /* JSON lines are for machines: the acquire and the release are logged without -v (not with -q). */
  int say_done = o.verbose || (o.log_json && !o.quiet);
  cli_log_fields acquired = {.fence = fence, .has_wait = 1, .wait_ms = waited};
  dlock_mono_ms held_from = dlock_mono_now();
  cli_log_fields released = {.fence = fence, .has_duration = 1};
  if (say_done && o.elect) {
    cli_log("info", "elected", &acquired, "leading '%s' after %s, epoch %llu", o.name, waited_text,
            (unsigned long long)fence);
  } else if (say_done && hold.mm) {
    cli_log("info", "acquired", &acquired, "acquired '%s' after %s", o.name, waited_text);
  } else if (say_done) {
    cli_log("info", "acquired", &acquired, "acquired '%s' after %s, fence %llu", o.name, waited_text,
            (unsigned long long)fence);
  }

  if (o.hold) {
    int lost = 0;
    rc = hold_until_input_ends(&hold, &o, sig.fd, fence, &lost);
    int rel = lock_thread_finish(&t);
    thread_started = 0;
    if (lost) {
      rc = o.lost_code;
    } else if (rel == DLOCK_ENOTHELD) {
      /* The release found the lock gone before the watchdog did. */
      printf("lost %s: %s\n", o.name, hold_errmsg(&hold));
      rc = o.lost_code;
    } else if (rel != 0) {
      char lease[64];
      cli_format_duration(o.lease_ms, lease, sizeof lease);
      rc = cli_report(rel, hold_errmsg(&hold), "releasing '%s' (it expires within %s)", o.name, lease);
    } else if (say_done) {
      released.duration_ms = dlock_mono_now() - held_from;
      cli_log("info", "released", &released, "released '%s'", o.name);
    }
    goto out_thread;
  }

  cli_child plan;
  if (plan_build(&plan, program, &o, fence, hold.mm) != 0) {
    cli_log("error", "error", NULL, "out of memory");
    cli_child_free(&plan);
    rc = CLI_EXIT_SOFTWARE;
    goto out_thread;
  }
  pid_t pid = cli_child_spawn(&plan, &sig.old_mask, sig.tty, o.shell ? "/bin/sh" : o.cmd[0]);
  cli_child_free(&plan);
  if (pid < 0) {
    rc = CLI_EXIT_SOFTWARE;
    goto out_thread;
  }

  cli_guard guard;
  cli_guard_start(&guard, pid, o.grace_ms);
  run_state rs = {0, 0};
  int status = supervise(pid, &hold, &o, sig.fd, sig.tty, &rs, &guard);
  if (sig.tty >= 0) tcsetpgrp(sig.tty, getpgrp());
  cli_stop_group(pid, o.grace_ms, o.quiet, sig.fd);
  cli_guard_stop(&guard);
  rc = cli_exit_code_of(status);
  cli_log_fields exited = {.fence = fence, .has_exit = 1, .exit_status = rc};
  if (o.log_json && (!o.quiet || rc != 0)) cli_log_line(rc == 0 ? "info" : "warning", "exited", &exited, NULL);

  if (o.active_file) unlink(o.active_file);
  int rel = lock_thread_finish(&t);
  thread_started = 0;
  if (rel == DLOCK_ENOTHELD && !rs.lost) {
    /* The watchdog had not noticed yet, but Redis no longer had our token:
     * the command may have run its last moments without the lock. */
    rs.lost = 1;
    cli_log_fields f = {.fence = fence, .reason = hold_errmsg(&hold)};
    cli_log("error", "lost", &f, "lock '%s' was lost before the command ended: %s", o.name, hold_errmsg(&hold));
  } else if (rel != 0 && rel != DLOCK_ENOTHELD && !rs.lost) {
    char lease[64];
    cli_format_duration(o.lease_ms, lease, sizeof lease);
    cli_report(rel, hold_errmsg(&hold), "releasing '%s' (it expires within %s)", o.name, lease);
  } else if (rel == 0 && say_done) {
    released.duration_ms = dlock_mono_now() - held_from;
    cli_log("info", "released", &released, "released '%s'", o.name);
  }
  if (rs.lost) rc = o.lost_code;

out_thread:
  if (thread_started) lock_thread_finish(&t);
  pthread_mutex_destroy(&t.mu);
  pthread_cond_destroy(&t.cv);
out_pipe:
  close(t.notify_r);
  close(t.notify_w);
out:
  if (hold.e)
    dlock_election_free(hold.e); /* m is its view */
  else
    dlock_mutex_free(m);
  dlock_multi_free(hold.mm);
  cli_metrics_stop(mx); /* after the resign: the file's last write shows it */
  dlock_client_free(c);
  free(o.multi_buf);
  free(o.multi_joined);
  if (sig.fd >= 0) close(sig.fd);
  return rc;
}
