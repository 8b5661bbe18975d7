/*
 * cmd_job.c - "dlock job pause|resume|trigger|list|history|check": operating
 * the jobs that "dlock cron" and "dlock every" run (docs/scheduler.md,
 * "Operations"). The state is on the server, so every running node of the
 * job obeys at its next tick; a trigger wakes them at once.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define HISTORY_DEFAULT 20
#define HISTORY_MAX 10000

/* Nagios plugin exit codes ('check'). */
enum { CHECK_OK = 0, CHECK_WARNING = 1, CHECK_CRITICAL = 2, CHECK_UNKNOWN = 3 };

enum { OPT_REASON = 1, OPT_BY, OPT_JSON, OPT_COUNT, OPT_TZ, OPT_MAX_AGE, OPT_CRITICAL, OPT_QUIET };

static const cli_opt job_opts[] = {
    {"reason", 0, 1, OPT_REASON},     {"by", 0, 1, OPT_BY},         {"json", 0, 0, OPT_JSON},
    {"count", 'n', 1, OPT_COUNT},     {"tz", 0, 1, OPT_TZ},         {"max-age", 0, 1, OPT_MAX_AGE},
    {"critical", 0, 1, OPT_CRITICAL}, {"quiet", 'q', 0, OPT_QUIET}, {NULL, 0, 0, 0},
};
const cli_opt *const cli_job_opts[] = {job_opts, NULL};

typedef struct job_args {
  const char *url;
  const char *verb;
  const char *job; /* JOB, or list's PATTERN */
  const char *reason;
  const char *by;
  const char *tz;
  int json, quiet;
  uint64_t count;
  int64_t max_age_ms, critical_ms;
  unsigned seen; /* bits of OPT_* given */
} job_args;

#define BIT(o) (1u << (o))

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "12s ago" for a server time, by this host's clock. */
static void ago(int64_t unix_ms, char *buf, size_t len) {
  int64_t d = now_ms() - unix_ms;
  char dur[32];
  cli_format_duration(d < 0 ? 0 : d, dur, sizeof dur);
  snprintf(buf, len, "%s ago", dur);
}

static int parse(int argc, char **argv, job_args *a) {
  cli_args args;
  const char *arg;
  int id;
  memset(a, 0, sizeof *a);
  cli_args_init(&args, argc, argv, "job", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, job_opts, &arg)) != CLI_OPT_DONE) {
    switch (id) {
    case CLI_OPT_ERROR:
      return CLI_EXIT_USAGE;
    case CLI_OPT_DASHDASH:
      break;
    case CLI_OPT_POSITIONAL:
      if (a->verb == NULL)
        a->verb = arg;
      else if (a->job == NULL)
        a->job = arg;
      else
        return cli_usage_error("job", "unexpected argument '%s'", arg);
      break;
    case CLI_OPT_URL:
    case CLI_OPT_PREFIX:
      cli_common_opt(id, arg, &a->url);
      break;
    case OPT_REASON:
      a->reason = arg;
      break;
    case OPT_BY:
      a->by = arg;
      break;
    case OPT_JSON:
      a->json = 1;
      break;
    case OPT_QUIET:
      a->quiet = 1;
      break;
    case OPT_TZ:
      a->tz = arg;
      break;
    case OPT_COUNT:
      if (cli_parse_u64(arg, HISTORY_MAX, &a->count) != 0 || a->count == 0)
        return cli_usage_error("job", "-n: '%s' is not a count in 1..%d", arg, HISTORY_MAX);
      break;
    case OPT_MAX_AGE:
    case OPT_CRITICAL: {
      int64_t *ms = id == OPT_MAX_AGE ? &a->max_age_ms : &a->critical_ms;
      if (cli_parse_duration(arg, ms) != 0 || *ms == 0)
        return cli_usage_error("job", "--%s: %s", id == OPT_MAX_AGE ? "max-age" : "critical",
                               *ms == 0 ? "must be more than 0" : dlock_last_error());
      break;
    }
    default:
      return cli_usage_error("job", "internal: unhandled option");
    }
    if (id > 0) a->seen |= BIT(id);
  }
  return 0;
}

/* The options 'verb' takes: any other given is a usage error. */
static int only(const job_args *a, unsigned allowed) {
  for (int o = OPT_REASON; o <= OPT_QUIET; o++) {
    if ((a->seen & BIT(o)) && !(allowed & BIT(o))) {
      for (const cli_opt *t = job_opts; t->long_name; t++)
        if (t->id == o) return cli_usage_error("job", "--%s does not go with '%s'", t->long_name, a->verb);
    }
  }
  return 0;
}

static int report(int st, const job_args *a, const char *what) {
  if (st == DLOCK_ENAME) return cli_usage_error("job", "%s", dlock_last_error());
  return cli_report(st, dlock_last_error(), "%s job '%s'", what, a->job);
}

static int do_set(dlock_client *c, const job_args *a) {
  dlock_job_state st;
  dlock_job_state_init(&st);
  int rc;
  if (strcmp(a->verb, "pause") == 0)
    rc = dlock_job_pause(c, a->job, a->by, a->reason);
  else if (strcmp(a->verb, "resume") == 0)
    rc = dlock_job_resume(c, a->job, a->by);
  else
    rc = dlock_job_trigger(c, a->job, a->by);
  if (rc < 0) return report(rc, a, a->verb);
  if (a->quiet) return CLI_EXIT_OK;
  if (rc == 1) {
    if (strcmp(a->verb, "pause") == 0)
      printf("job '%s' paused: its ticks are skipped (and recorded) until 'dlock job resume %s'\n", a->job, a->job);
    else if (strcmp(a->verb, "resume") == 0)
      printf("job '%s' resumed: it runs from its next tick\n", a->job);
    else
      printf("job '%s' triggered: one run, on one of the nodes running the job, when one is free "
             "('dlock job history %s' shows it)\n",
             a->job, a->job);
    return CLI_EXIT_OK;
  }
  /* Nothing to do: say why, from the state. */
  int sr = dlock_job_state_get(c, a->job, &st);
  char when[64] = "?";
  if (strcmp(a->verb, "pause") == 0) {
    if (sr == 0 && st.paused) ago(st.paused_unix_ms, when, sizeof when);
    printf("job '%s' was already paused (by %s, %s%s%s); left as it was\n", a->job, sr == 0 ? st.paused_by : "?", when,
           sr == 0 && st.paused_reason[0] ? ": " : "", sr == 0 ? st.paused_reason : "");
  } else if (strcmp(a->verb, "resume") == 0) {
    printf("job '%s' was not paused\n", a->job);
  } else {
    if (sr == 0 && st.trigger_pending) ago(st.trigger_unix_ms, when, sizeof when);
    printf("job '%s': a trigger is already pending (by %s, %s), not added: it runs once when a node "
           "of the job is free\n",
           a->job, sr == 0 ? st.trigger_by : "?", when);
  }
  return CLI_EXIT_OK;
}

/* ---- list ---- */

typedef struct list_ctx {
  dlock_client *c;
  const char *tz;
  int json, n, failed;
} list_ctx;

static void list_one(const char *job, void *arg) {
  list_ctx *l = arg;
  dlock_job_state st;
  dlock_job_state_init(&st);
  if (dlock_job_state_get(l->c, job, &st) != 0) {
    fprintf(stderr, "dlock: job '%s': %s\n", job, dlock_last_error());
    l->failed = 1;
    return;
  }
  char run[64] = "-", ok[64] = "-";
  if (st.last_run_unix_ms) cli_format_time_ms(st.last_run_unix_ms, l->tz, run, sizeof run);
  if (st.last_success_unix_ms) cli_format_time_ms(st.last_success_unix_ms, l->tz, ok, sizeof ok);
  if (l->json) {
    printf("%s\n  {\"job\": ", l->n ? "," : "");
    cli_json_string(stdout, job);
    printf(", \"paused\": %s, \"paused_by\": ", st.paused ? "true" : "false");
    cli_json_string(stdout, st.paused_by);
    printf(", \"paused_reason\": ");
    cli_json_string(stdout, st.paused_reason);
    printf(", \"paused_unix_ms\": %lld, \"trigger_pending\": %s, \"last_run_unix_ms\": %lld, "
           "\"last_outcome\": ",
           (long long)st.paused_unix_ms, st.trigger_pending ? "true" : "false", (long long)st.last_run_unix_ms);
    cli_json_string(stdout, st.last_outcome);
    printf(", \"last_success_unix_ms\": %lld}", (long long)st.last_success_unix_ms);
  } else {
    if (l->n == 0)
      printf("%-24s  %-6s  %-7s  %-29s  %-12s  %s\n", "JOB", "PAUSED", "TRIGGER", "LAST RUN", "OUTCOME",
             "LAST SUCCESS");
    printf("%-24s  %-6s  %-7s  %-29s  %-12s  %s\n", job, st.paused ? "yes" : "no", st.trigger_pending ? "pending" : "-",
           run, st.last_outcome[0] ? st.last_outcome : "-", ok);
    if (st.paused) printf("  paused by %s%s%s\n", st.paused_by, st.paused_reason[0] ? ": " : "", st.paused_reason);
  }
  l->n++;
}

static int do_list(dlock_client *c, const job_args *a) {
  list_ctx l = {c, a->tz, a->json, 0, 0};
  if (a->json) printf("[");
  int rc = dlock_job_list(c, a->job, list_one, &l);
  if (a->json) printf("%s]\n", l.n ? "\n" : "");
  if (rc < 0) return cli_report(rc, dlock_last_error(), "list jobs");
  if (rc == 0 && !a->json && !a->quiet)
    fprintf(stderr, "dlock: no job has run in the last 30 days%s%s\n", a->job ? " matching " : "",
            a->job ? a->job : "");
  return l.failed ? CLI_EXIT_SOFTWARE : CLI_EXIT_OK;
}

/* ---- history ---- */

static int do_history(dlock_client *c, const job_args *a) {
  return cli_history_show(c, "job", a->job, a->count ? (int)a->count : HISTORY_DEFAULT, a->tz, a->json);
}

/* ---- check: one line, Nagios exit codes ---- */

static int do_check(dlock_client *c, const job_args *a) {
  dlock_job_state st;
  dlock_job_state_init(&st);
  int rc = dlock_job_state_get(c, a->job, &st);
  if (rc != 0) {
    printf("UNKNOWN - job %s: %s\n", a->job, dlock_last_error());
    return CHECK_UNKNOWN;
  }
  char max[32], paused[300] = "";
  cli_format_duration(a->max_age_ms, max, sizeof max);
  if (st.paused)
    snprintf(paused, sizeof paused, "; paused by %s%s%s", st.paused_by, st.paused_reason[0] ? ": " : "",
             st.paused_reason);
  if (!st.last_success_unix_ms) {
    printf("CRITICAL - job %s: no successful run in its history (last run: %s)%s\n", a->job,
           st.last_outcome[0] ? st.last_outcome : "none", paused);
    return CHECK_CRITICAL;
  }
  int64_t age = now_ms() - st.last_success_unix_ms;
  char took[32];
  cli_format_duration(age < 0 ? 0 : age, took, sizeof took);
  int64_t critical = a->critical_ms ? a->critical_ms : 2 * a->max_age_ms;
  int code = age > critical ? CHECK_CRITICAL : age > a->max_age_ms ? CHECK_WARNING : CHECK_OK;
  static const char *const label[] = {"OK", "WARNING", "CRITICAL"};
  printf("%s - job %s: last success %s ago (max age %s)%s | age=%llds;%lld;%lld\n", label[code], a->job, took, max,
         paused, (long long)(age < 0 ? 0 : age / 1000), (long long)(a->max_age_ms / 1000),
         (long long)(critical / 1000));
  return code;
}

int cmd_job(int argc, char **argv) {
  job_args a;
  int rc = parse(argc, argv, &a);
  if (rc != 0) return rc;
  if (a.verb == NULL) return cli_usage_error("job", "missing action: pause, resume, trigger, list, history or check");
  const char *v = a.verb;
  int set = strcmp(v, "pause") == 0 || strcmp(v, "resume") == 0 || strcmp(v, "trigger") == 0;
  int is_check = strcmp(v, "check") == 0;
  if (!set && !is_check && strcmp(v, "list") != 0 && strcmp(v, "history") != 0)
    return cli_usage_error("job", "unknown action '%s' (pause, resume, trigger, list, history or check)", v);
  if (a.job == NULL && strcmp(v, "list") != 0) return cli_usage_error("job", "missing JOB: dlock job %s JOB", v);
  if (strcmp(v, "pause") == 0)
    rc = only(&a, BIT(OPT_REASON) | BIT(OPT_BY) | BIT(OPT_QUIET));
  else if (set)
    rc = only(&a, BIT(OPT_BY) | BIT(OPT_QUIET));
  else if (strcmp(v, "list") == 0)
    rc = only(&a, BIT(OPT_JSON) | BIT(OPT_TZ) | BIT(OPT_QUIET));
  else if (strcmp(v, "history") == 0)
    rc = only(&a, BIT(OPT_JSON) | BIT(OPT_TZ) | BIT(OPT_COUNT));
  else
    rc = only(&a, BIT(OPT_MAX_AGE) | BIT(OPT_CRITICAL));
  if (rc != 0) return rc;
  if (is_check && !a.max_age_ms)
    return cli_usage_error("job", "check needs --max-age D: the age of the last success that is still fine");
  if (is_check && a.critical_ms && a.critical_ms < a.max_age_ms)
    return cli_usage_error("job", "--critical must be at least --max-age");
  if (a.tz != NULL) {
    char probe[64];
    if (dlock_time_format(0, a.tz, probe, sizeof probe) != 0)
      return cli_usage_error("job", "--tz: %s", dlock_last_error());
  }
  dlock_client *c;
  rc = cli_connect(a.url, &c);
  if (rc != 0) {
    if (is_check) {
      printf("UNKNOWN - job %s: cannot reach the server (see above)\n", a.job);
      return CHECK_UNKNOWN;
    }
    return rc;
  }
  if (set)
    rc = do_set(c, &a);
  else if (is_check)
    rc = do_check(c, &a);
  else if (strcmp(v, "list") == 0)
    rc = do_list(c, &a);
  else
    rc = do_history(c, &a);
  dlock_client_free(c);
  return rc;
}
