/*
 * cmd_cron.c - "dlock cron" and "dlock every": the command lines of the
 * scheduler. "cron EXPR" and "every DURATION" start the daemon
 * (sched_daemon.c); "cron --next EXPR" prints fire times (no Redis) and
 * "cron --history JOB" shows a job's recent runs.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define NEXT_DEFAULT 5
#define NEXT_MAX 1000
#define HISTORY_DEFAULT 20
#define HISTORY_MAX 10000 /* the library keeps at most this many runs */
#define POOL_MAX 256

/* OPT_URL and OPT_PREFIX: the common options (cli_common_opts), as bits of
 * 'seen' for the modes that refuse them. */
enum {
  OPT_URL = 1,
  OPT_NAME,
  OPT_TZ,
  OPT_UNIX,
  OPT_AT_MOST,
  OPT_AT_LEAST,
  OPT_OVERLAP,
  OPT_POOL,
  OPT_NODE,
  OPT_GRACE,
  OPT_SHELL,
  OPT_QUIET,
  OPT_VERBOSE,
  OPT_NEXT,
  OPT_HISTORY,
  OPT_COUNT,
  OPT_FROM,
  OPT_EPOCH,
  OPT_JSON,
  OPT_FIXED_DELAY,
  OPT_PREFIX,
  OPT_LOG_FORMAT,
  OPT_METRICS, /* any of --metrics-file, --metrics-listen, --metrics-interval (cli_metrics_table) */
  OPT_MAX
};

static const cli_opt cron_table[] = {
    {"name", 0, 1, OPT_NAME},
    {"tz", 0, 1, OPT_TZ},
    {"unix", 0, 0, OPT_UNIX},
    {"lock-at-most-for", 0, 1, OPT_AT_MOST},
    {"lock-at-least-for", 0, 1, OPT_AT_LEAST},
    {"overlap", 0, 1, OPT_OVERLAP},
    {"pool", 0, 1, OPT_POOL},
    {"node", 0, 1, OPT_NODE},
    {"grace", 0, 1, OPT_GRACE},
    {"shell", 0, 0, OPT_SHELL},
    {"quiet", 'q', 0, OPT_QUIET},
    {"verbose", 'v', 0, OPT_VERBOSE},
    {"next", 0, 0, OPT_NEXT},
    {"history", 0, 0, OPT_HISTORY},
    {"count", 'n', 1, OPT_COUNT},
    {"from", 0, 1, OPT_FROM},
    {"epoch", 0, 0, OPT_EPOCH},
    {"json", 0, 0, OPT_JSON},
    {"log-format", 0, 1, OPT_LOG_FORMAT},
    {NULL, 0, 0, 0},
};

static const cli_opt every_table[] = {
    {"name", 0, 1, OPT_NAME},
    {"tz", 0, 1, OPT_TZ},
    {"lock-at-most-for", 0, 1, OPT_AT_MOST},
    {"lock-at-least-for", 0, 1, OPT_AT_LEAST},
    {"overlap", 0, 1, OPT_OVERLAP},
    {"pool", 0, 1, OPT_POOL},
    {"node", 0, 1, OPT_NODE},
    {"grace", 0, 1, OPT_GRACE},
    {"shell", 0, 0, OPT_SHELL},
    {"quiet", 'q', 0, OPT_QUIET},
    {"verbose", 'v', 0, OPT_VERBOSE},
    {"fixed-delay", 0, 0, OPT_FIXED_DELAY},
    {"log-format", 0, 1, OPT_LOG_FORMAT},
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_cron_opts[] = {cron_table, cli_metrics_table, NULL};
const cli_opt *const cli_every_opts[] = {every_table, cli_metrics_table, NULL};

/* Everything either command line can say; 'seen' has bit (1 << id) set for
 * each option given, so that each mode can refuse the others' options. */
typedef struct sched_args {
  cli_daemon_opts d;
  const char *positional; /* EXPR, DURATION or (with --history) JOB */
  int dashdash;           /* 1 after "--", or at COMMAND given without it */
  int cmd_at;             /* argv index of a COMMAND given without "--", else 0 */
  uint64_t count;
  const char *from;
  unsigned seen;
} sched_args;

static const char *opt_name(const cli_opt *table, int id) {
  if (id == OPT_URL || id == OPT_PREFIX) return opt_name(cli_common_opts, id == OPT_URL ? CLI_OPT_URL : CLI_OPT_PREFIX);
  if (id == OPT_METRICS) return "metrics-file (or --metrics-listen)";
  for (const cli_opt *o = table; o->long_name != NULL; o++) {
    if (o->id == id) return o->long_name;
  }
  return "?";
}

static int duration_arg(const char *cmd, const char *opt, const char *text, int zero_ok, int64_t *ms) {
  if (cli_parse_duration(text, ms) != 0) {
    return cli_usage_error(cmd, "--%s: %s", opt, dlock_last_error());
  }
  if (*ms == 0 && !zero_ok) return cli_usage_error(cmd, "--%s: must be more than 0", opt);
  return 0;
}

/* The node name goes into Redis records separated by '|'. */
static int node_ok(const char *node) { return node[0] != '\0' && strlen(node) < 128 && strpbrk(node, "|\r\n") == NULL; }

static int parse(const char *cmd, const cli_opt *table, int argc, char **argv, sched_args *a) {
  cli_args args;
  const char *arg;
  int id;

  memset(a, 0, sizeof *a);
  a->d.command = cmd;
  a->d.grace_ms = 5000;
  cli_args_init(&args, argc, argv, cmd, CLI_COMMON_SERVER);
  cli_args_chain(&args, cli_metrics_table, NULL, NULL);
  while (!a->dashdash && (id = cli_next_opt(&args, table, &arg)) != CLI_OPT_DONE) {
    int rc = 0;
    uint64_t n;
    if (id == CLI_OPT_URL || id == CLI_OPT_PREFIX) id = id == CLI_OPT_URL ? OPT_URL : OPT_PREFIX;
    if (id > 0) a->seen |= 1u << id;
    switch (id) {
    case CLI_OPT_ERROR:
      return CLI_EXIT_USAGE;
    case CLI_OPT_DASHDASH:
      a->dashdash = 1;
      break;
    case CLI_OPT_POSITIONAL:
      if (a->positional == NULL) {
        a->positional = arg;
        break;
      }
      /* As run: "cron EXPR --name J CMD ARGS..." needs no '--' when CMD
       * does not start with '-'; everything from CMD on is the command's.
       * A second word with blanks is a second expression, not a command. */
      if (strpbrk(arg, " \t") != NULL)
        return cli_usage_error(cmd,
                               "unexpected argument '%s' after '%s' (one %s; COMMAND "
                               "comes after the options)",
                               arg, a->positional, strcmp(cmd, "cron") == 0 ? "EXPR" : "DURATION");
      a->dashdash = 1;
      a->cmd_at = args.index - 1;
      break;
    case OPT_URL:
      a->d.url = arg;
      break;
    case OPT_PREFIX:
      cli_config_set_flag("prefix", arg);
      break;
    case OPT_NAME:
      a->d.job = arg;
      break;
    case OPT_LOG_FORMAT:
      rc = cli_log_format_opt(cmd, arg, &a->d.log_json);
      break;
    case CLI_OPT_METRICS_FILE:
    case CLI_OPT_METRICS_LISTEN:
    case CLI_OPT_METRICS_INTERVAL:
      a->seen |= 1u << OPT_METRICS; /* for the modes that refuse it */
      rc = cli_metrics_opt(cmd, id, arg, &a->d.metrics);
      break;
    case OPT_TZ:
      /* The library reads "" as UTC; on the command line it is a mistake
       * (an unset variable), not a choice (issue 22 item 10). */
      if (arg[0] == '\0')
        return cli_usage_error(cmd, "--tz: empty time zone name; give an IANA zone such as "
                                    "Europe/Berlin or UTC, or leave --tz out for UTC");
      a->d.tz = arg;
      break;
    case OPT_UNIX:
      a->d.cron_flags |= DLOCK_CRON_UNIX;
      break;
    case OPT_AT_MOST:
      rc = duration_arg(cmd, "lock-at-most-for", arg, 0, &a->d.at_most_ms);
      break;
    case OPT_AT_LEAST:
      rc = duration_arg(cmd, "lock-at-least-for", arg, 1, &a->d.at_least_ms);
      break;
    case OPT_GRACE:
      rc = duration_arg(cmd, "grace", arg, 1, &a->d.grace_ms);
      break;
    case OPT_OVERLAP:
      /* queue-one and replace (issue 25) are not offered yet: said, not guessed. */
      if (!strcmp(arg, "skip") || !strcmp(arg, "allow"))
        a->d.allow_overlap = !strcmp(arg, "allow");
      else
        rc = cli_usage_error(cmd,
                             "--overlap: '%s' is %s; give skip (the default: a tick that finds the previous run "
                             "going is skipped) or allow (it starts anyway)",
                             arg,
                             strcmp(arg, "queue-one") && strcmp(arg, "replace") ? "not a policy" : "not offered yet");
      break;
    case OPT_POOL:
      if (cli_parse_u64(arg, POOL_MAX, &n) != 0 || n == 0)
        rc = cli_usage_error(cmd, "--pool: '%s' is not 1..%d", arg, POOL_MAX);
      else
        a->d.pool = (int)n;
      break;
    case OPT_NODE:
      if (!node_ok(arg))
        rc = cli_usage_error(cmd,
                             "--node: '%s' must be 1..127 bytes without '|', CR or "
                             "LF",
                             arg);
      a->d.node = arg;
      break;
    case OPT_SHELL:
      a->d.shell = 1;
      break;
    case OPT_QUIET:
      a->d.quiet = 1;
      break;
    case OPT_VERBOSE:
      a->d.verbose = 1;
      break;
    case OPT_COUNT:
      /* Checked against the mode's limit later. */
      if (cli_parse_u64(arg, HISTORY_MAX, &a->count) != 0 || a->count == 0)
        rc = cli_usage_error(cmd, "-n: '%s' is not a number from 1", arg);
      break;
    case OPT_FROM:
      a->from = arg;
      break;
    case OPT_FIXED_DELAY:
      a->d.trigger = CLI_TRIGGER_DELAY;
      break;
    case OPT_NEXT:
    case OPT_HISTORY:
    case OPT_EPOCH:
    case OPT_JSON:
      break; /* only 'seen' matters */
    default:
      /* ids are ints from the tables, not an enum */
      rc = cli_usage_error(cmd, "internal: unhandled option");
      break;
    }
    if (rc != 0) return rc;
  }
  int at = a->cmd_at > 0 ? a->cmd_at : args.index;
  a->d.cmd = argv + at;
  a->d.ncmd = argc - at;
  return 0;
}

/* Refuse any option of 'seen' outside 'allowed'; 'mode' says what for. */
static int only(const char *cmd, const cli_opt *table, const sched_args *a, unsigned allowed, const char *mode) {
  for (int id = 1; id < OPT_MAX; id++) {
    if ((a->seen & (1u << id)) != 0 && (allowed & (1u << id)) == 0)
      return cli_usage_error(cmd, "--%s does not go with %s", opt_name(table, id), mode);
  }
  return 0;
}

#define BIT(id) (1u << (id))

/* A library status from a pure call (cron, zone, time) as a usage error. */
static int input_error(const char *cmd, int st, const char *what) {
  if (st == DLOCK_ECRON || st == DLOCK_ETZ || st == DLOCK_ETIME || st == DLOCK_EINVAL || st == DLOCK_ERANGE ||
      st == DLOCK_ENAME)
    return cli_usage_error(cmd, "%s%s", what, dlock_last_error());
  return cli_report(st, dlock_last_error(), "%s", what);
}

/* How EXPR is read, decided once for --next and the daemon: a 5-field
 * expression is classic Unix cron (what crontab(5) users write), 6 or 7
 * fields are Quartz's; '@every D' is a period, which "dlock every" runs. */
static int cron_reading(const char *cmd, sched_args *a) {
  const char *e = a->positional;
  int fields = 0;

  while (*e == ' ' || *e == '\t') e++;
  if (strncmp(e, "@every", 6) == 0 && (e[6] == ' ' || e[6] == '\t' || e[6] == '\0')) {
    const char *d = e + 6;
    while (*d == ' ' || *d == '\t') d++;
    return cli_usage_error(cmd,
                           "'%s' is a period, not a cron expression: run it with "
                           "'dlock every %s --name JOB -- COMMAND'",
                           a->positional, *d != '\0' ? d : "DURATION");
  }
  for (const char *p = e; *p != '\0';) {
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\0') break;
    fields++;
    while (*p != '\0' && *p != ' ' && *p != '\t') p++;
  }
  if (fields == 5) a->d.cron_flags |= DLOCK_CRON_UNIX;
  return 0;
}

/* The line --next prints first on stderr: which reading it used. */
static void say_reading(const sched_args *a) {
  if (a->positional[strspn(a->positional, " \t")] == '@') return;
  if ((a->d.cron_flags & DLOCK_CRON_UNIX) != 0 && (a->seen & (1u << OPT_UNIX)) == 0)
    fprintf(stderr, "dlock: read as Unix cron (minute hour day-of-month month day-of-week); "
                    "Quartz's form has 6 or 7 fields, from seconds\n");
}

/* ---- cron --next ---- */

static int cron_next(sched_args *a) {
  int64_t from;
  int rc =
      only("cron", cron_table, a,
           BIT(OPT_NEXT) | BIT(OPT_COUNT) | BIT(OPT_FROM) | BIT(OPT_TZ) | BIT(OPT_UNIX) | BIT(OPT_EPOCH), "--next");
  if (rc != 0) return rc;
  if (a->positional == NULL) return cli_usage_error("cron", "--next needs a cron EXPR");
  if (a->dashdash) return cli_usage_error("cron", "--next takes no COMMAND");
  rc = cron_reading("cron", a);
  if (rc != 0) return rc;
  uint64_t n = a->count != 0 ? a->count : NEXT_DEFAULT;
  if (n > NEXT_MAX) return cli_usage_error("cron", "-n: at most %d fire times", NEXT_MAX);
  if (a->from == NULL) {
    from = (int64_t)time(NULL);
  } else {
    int st = dlock_time_parse(a->from, a->d.tz, &from);
    if (st != 0) return input_error("cron", st, st == DLOCK_ETIME ? "--from: " : "--tz: ");
  }
  int64_t *times = calloc((size_t)n, sizeof *times);
  if (times == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  int got = dlock_cron_next(a->positional, a->d.tz, a->d.cron_flags, from, times, (int)n);
  if (got < 0) {
    free(times);
    return input_error("cron", got, got == DLOCK_ETZ ? "--tz: " : "bad cron expression: ");
  }
  if (got == 0) {
    free(times);
    return cli_usage_error("cron", "'%s' never fires after %s", a->positional, a->from != NULL ? a->from : "now");
  }
  say_reading(a);
  int epoch = (a->seen & BIT(OPT_EPOCH)) != 0;
  for (int i = 0; i < got; i++) {
    char buf[64];
    if (epoch || dlock_time_format(times[i], a->d.tz, buf, sizeof buf) != 0)
      printf("%lld\n", (long long)times[i]);
    else
      printf("%s\n", buf);
  }
  if (got < (int)n) fprintf(stderr, "dlock: '%s' fires no more after the last time shown\n", a->positional);
  free(times);
  return CLI_EXIT_OK;
}

/* ---- cron --history ---- */

/* A job's history, newest first, as JSON or a table ('dlock job history' too). */
static void history_json(const dlock_run_record *r, int n, const char *tz) {
  printf("[");
  for (int i = 0; i < n; i++) {
    char sched[64], start[64];
    cli_format_time_ms(r[i].scheduled_unix_ms, tz, sched, sizeof sched);
    cli_format_time_ms(r[i].start_unix_ms, tz, start, sizeof start);
    printf("%s\n  {\"node\": ", i > 0 ? "," : "");
    cli_json_string(stdout, r[i].node);
    printf(", \"fence\": %llu, \"scheduled_unix_ms\": %lld, \"scheduled\": ", (unsigned long long)r[i].fence,
           (long long)r[i].scheduled_unix_ms);
    cli_json_string(stdout, sched);
    printf(", \"start_unix_ms\": %lld, \"start\": ", (long long)r[i].start_unix_ms);
    cli_json_string(stdout, start);
    printf(", \"duration_ms\": %lld, \"outcome\": ", (long long)r[i].duration_ms);
    cli_json_string(stdout, r[i].outcome);
    printf(", \"trigger\": ");
    cli_json_string(stdout, r[i].trigger[0] != '\0' ? r[i].trigger : "tick");
    printf("}");
  }
  printf("%s]\n", n > 0 ? "\n" : "");
}

static void history_text(const dlock_run_record *r, int n, const char *tz) {
  int width = 4;
  int fwidth = 5;
  for (int i = 0; i < n; i++) {
    char fence[32];
    int len = (int)strlen(r[i].node);
    if (len > width) width = len;
    len = snprintf(fence, sizeof fence, "%llu", (unsigned long long)r[i].fence);
    if (len > fwidth) fwidth = len;
  }
  printf("%-25s  %-*s  %*s  %-29s  %9s  %s\n", "SCHEDULED", width, "NODE", fwidth, "FENCE", "START", "DURATION",
         "OUTCOME");
  for (int i = 0; i < n; i++) {
    char sched[64], start[64], took[32];
    cli_format_time_ms(r[i].scheduled_unix_ms, tz, sched, sizeof sched);
    cli_format_time_ms(r[i].start_unix_ms, tz, start, sizeof start);
    if (r[i].duration_ms >= 0)
      cli_format_duration(r[i].duration_ms, took, sizeof took);
    else
      snprintf(took, sizeof took, "-");
    printf("%-25s  %-*s  %*llu  %-29s  %9s  %s%s\n", sched, width, r[i].node, fwidth, (unsigned long long)r[i].fence,
           start, took, r[i].outcome, strcmp(r[i].trigger, "manual") == 0 ? " (manual)" : "");
  }
}

int cli_history_show(dlock_client *c, const char *command, const char *job, int n, const char *tz, int json) {
  dlock_run_record *recs = calloc((size_t)n, sizeof *recs);
  if (recs == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  for (int i = 0; i < n; i++) dlock_run_record_init(&recs[i]);
  int rc = CLI_EXIT_OK;
  int got = dlock_sched_history(c, job, recs, n);
  if (got < 0) {
    rc = got == DLOCK_ENAME ? cli_usage_error(command, "%s", dlock_last_error())
                            : cli_report(got, dlock_last_error(), "history of '%s'", job);
  } else if (json) {
    history_json(recs, got, tz);
  } else if (got == 0) {
    fprintf(stderr, "dlock: no runs recorded for job '%s'\n", job);
  } else {
    history_text(recs, got, tz);
  }
  free(recs);
  return rc;
}

static int cron_history(sched_args *a) {
  int rc = only("cron", cron_table, a,
                BIT(OPT_HISTORY) | BIT(OPT_COUNT) | BIT(OPT_JSON) | BIT(OPT_URL) | BIT(OPT_TZ) | BIT(OPT_PREFIX),
                "--history");
  if (rc != 0) return rc;
  if (a->positional == NULL) return cli_usage_error("cron", "--history needs a JOB name");
  if (a->dashdash) return cli_usage_error("cron", "--history takes no COMMAND");
  char probe[64];
  int st = dlock_time_format(0, a->d.tz, probe, sizeof probe);
  if (st != 0) return input_error("cron", st, "--tz: ");
  int n = a->count != 0 ? (int)a->count : HISTORY_DEFAULT;
  dlock_client *c;
  rc = cli_connect(a->d.url, &c);
  if (rc != 0) return rc;
  rc = cli_history_show(c, "cron", a->positional, n, a->d.tz, (a->seen & BIT(OPT_JSON)) != 0);
  dlock_client_free(c);
  return rc;
}

/* ---- The daemons ---- */

/* What "cron EXPR" and "every DURATION" share once the trigger is known. */
static int daemon_checks(const char *cmd, sched_args *a) {
  if (a->d.job == NULL) return cli_usage_error(cmd, "missing --name JOB");
  if (!a->dashdash)
    return cli_usage_error(cmd, "missing COMMAND (after %s, or after '--')",
                           strcmp(cmd, "cron") == 0 ? "'EXPR'" : "DURATION");
  if (a->d.ncmd == 0) return cli_usage_error(cmd, "missing COMMAND after '--'");
  if (a->d.shell && a->d.ncmd != 1)
    return cli_usage_error(cmd, "--shell takes COMMAND as one string: --shell ... -- "
                                "'cmd1 | cmd2'");
  int64_t at_most = a->d.at_most_ms > 0 ? a->d.at_most_ms : 10 * 60 * 1000;
  if (a->d.at_least_ms > at_most) return cli_usage_error(cmd, "--lock-at-least-for is longer than --lock-at-most-for");
  if (a->d.allow_overlap && a->d.trigger == CLI_TRIGGER_DELAY)
    return cli_usage_error(cmd, "--overlap allow does not go with --fixed-delay: a fixed delay's runs never overlap");
  char probe[64];
  int st = dlock_time_format(0, a->d.tz, probe, sizeof probe);
  if (st != 0) return input_error(cmd, st, "--tz: ");
  return 0;
}

int cmd_cron(int argc, char **argv) {
  sched_args a;
  int rc = parse("cron", cron_table, argc, argv, &a);

  if (rc != 0) return rc;
  int next = (a.seen & BIT(OPT_NEXT)) != 0;
  int history = (a.seen & BIT(OPT_HISTORY)) != 0;
  if (next && history) return cli_usage_error("cron", "--next and --history do not go together");
  if (next) return cron_next(&a);
  if (history) return cron_history(&a);

  rc = only("cron", cron_table, &a, ~(BIT(OPT_COUNT) | BIT(OPT_FROM) | BIT(OPT_EPOCH) | BIT(OPT_JSON)),
            "a cron job (they are for --next or --history)");
  if (rc != 0) return rc;
  if (a.positional == NULL) return cli_usage_error("cron", "missing cron EXPR (quote it: '0 */5 * * * ?')");
  rc = daemon_checks("cron", &a);
  if (rc == 0) rc = cron_reading("cron", &a);
  if (rc != 0) return rc;
  /* Check the expression before connecting: a typo is a usage error even
   * when Redis is down, and one that never fires again is refused. */
  int64_t first;
  int got = dlock_cron_next(a.positional, a.d.tz, a.d.cron_flags, (int64_t)time(NULL), &first, 1);
  if (got < 0) return input_error("cron", got, got == DLOCK_ETZ ? "--tz: " : "bad cron expression: ");
  if (got == 0) return cli_usage_error("cron", "'%s' never fires after now", a.positional);
  a.d.trigger = CLI_TRIGGER_CRON;
  a.d.expr = a.positional;
  return cli_daemon_run(&a.d);
}

int cmd_every(int argc, char **argv) {
  sched_args a;
  int rc = parse("every", every_table, argc, argv, &a);

  if (rc != 0) return rc;
  if (a.positional == NULL) return cli_usage_error("every", "missing DURATION (e.g. 10s, 5m)");
  if (cli_parse_duration(a.positional, &a.d.period_ms) != 0) {
    return cli_usage_error("every", "%s", dlock_last_error());
  }
  if (a.d.period_ms == 0) return cli_usage_error("every", "DURATION must be more than 0");
  if (a.d.period_ms < DLOCK_SCHED_MIN_PERIOD_MS)
    return cli_usage_error("every",
                           "DURATION must be at least %dms: each tick is claimed on the "
                           "server, so a shorter period cannot be kept (for a busy loop, use 'dlock run')",
                           DLOCK_SCHED_MIN_PERIOD_MS);
  rc = daemon_checks("every", &a);
  if (rc != 0) return rc;
  if (a.d.trigger != CLI_TRIGGER_DELAY) a.d.trigger = CLI_TRIGGER_RATE;
  return cli_daemon_run(&a.d);
}
