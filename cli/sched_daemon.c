/*
 * sched_daemon.c - the foreground daemon behind "dlock cron" and "dlock
 * every": one library scheduler (dlock_sched) with one job whose callback
 * runs COMMAND as a child (child.c) and waits for it in the worker thread.
 * The main thread only reads signals from a signalfd; on SIGINT, SIGTERM or
 * SIGHUP it stops the scheduler and passes the signal to running commands.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* How long the scheduler may take to finish once the commands are gone:
 * recording a run's end is one Redis call. */
#define STOP_MARGIN_MS 10000

typedef struct daemon_state {
  const cli_daemon_opts *o;
  const char *program; /* resolved path of the command */
  const char *url;     /* for DLOCK_URL */
  sigset_t child_mask; /* what children get back: dlock's mask at start */
  pthread_mutex_t mu;
  pid_t *groups; /* process groups of the commands running now */
  int ngroups, cap;
  int stop_signal; /* set once a stop was asked for */
} daemon_state;

/* ---- Logging ---- */

/* --log-format json (log.c): each line one JSON object. */
static int log_json;

/* One JSON line to stderr (log.c): time, level, event, job, name, host, pid,
 * then the event's fields: 'tick' (0: none), 'fence', 'duration_ms' (< 0:
 * none), 'node', 'exit' (with has_exit) and 'message' (NULL: none). */
static void say_json(const char *level, const char *event, int64_t tick, uint64_t fence, int64_t duration_ms,
                     const char *node, int has_exit, int exit_status, const char *message) {
  cli_log_fields f = {.tick = tick, .node = node, .fence = fence, .has_exit = has_exit, .exit_status = exit_status};
  f.has_duration = duration_ms >= 0;
  f.duration_ms = duration_ms;
  cli_log_line(level, event, &f, message);
}

/* One line to stderr with one write() (log.c), so that the lines of several
 * threads (and of several daemons sharing a log) never interleave. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  cli_log_line("info", "message", NULL, line);
}

/* The JSON line of a tick's event (--log-format json). */
static void event_json(const dlock_sched_event *ev, const char *node, const char *message, int quiet) {
  switch (ev->kind) {
  case DLOCK_SCHED_RAN:
    if (!quiet || ev->status != 0)
      say_json(ev->status == 0 ? "info" : "warning", "ran", ev->scheduled_unix_ms, ev->fence, ev->duration_ms, node, 1,
               ev->status, NULL);
    return;
  case DLOCK_SCHED_SKIPPED:
  case DLOCK_SCHED_SKIPPED_BUSY:
  case DLOCK_SCHED_SKIPPED_POOL:
    if (!quiet)
      say_json("info",
               ev->kind == DLOCK_SCHED_SKIPPED        ? "skipped"
               : ev->kind == DLOCK_SCHED_SKIPPED_BUSY ? "skipped_busy"
                                                      : "skipped_pool",
               ev->scheduled_unix_ms, 0, -1, node, 0, 0, NULL);
    return;
  case DLOCK_SCHED_SKIPPED_PAUSED:
    if (!quiet) say_json("info", "skipped_paused", ev->scheduled_unix_ms, 0, -1, node, 0, 0, message);
    return;
  case DLOCK_SCHED_MISFIRED:
    say_json("warning", "misfired", ev->scheduled_unix_ms, 0, -1, NULL, 0, 0,
             "too late to run (was this "
             "process stopped?)");
    return;
  case DLOCK_SCHED_ERROR:
  case DLOCK_SCHED_CLOCK_SKEW:
    say_json("error", ev->kind == DLOCK_SCHED_ERROR ? "error" : "clock_skew", ev->scheduled_unix_ms, ev->fence, -1,
             NULL, 0, 0, message[0] != '\0' ? message : dlock_strerror(ev->status));
    return;
  }
}

void cli_format_time_ms(int64_t unix_ms, const char *tz, char *buf, size_t len) {
  int64_t s = unix_ms >= 0 ? unix_ms / 1000 : -((-unix_ms + 999) / 1000);
  int ms = (int)(unix_ms - s * 1000);
  char iso[48];

  if (dlock_time_format(s, tz, iso, sizeof iso) != 0) {
    snprintf(buf, len, "@%lld.%03d", (long long)s, ms);
    return;
  }
  /* "YYYY-MM-DDTHH:MM:SS" is 19 characters; the offset follows. */
  if (ms == 0 || strlen(iso) < 19) {
    snprintf(buf, len, "%s", iso);
    return;
  }
  snprintf(buf, len, "%.19s.%03d%s", iso, ms, iso + 19);
}

static void on_event(const dlock_sched_event *ev, void *arg) {
  daemon_state *d = arg;
  const cli_daemon_opts *o = d->o;
  char when[64];
  char took[32];
  char message[512];
  const char *node = ev->node != NULL && ev->node[0] != '\0' ? ev->node : NULL;

  /* The message may be the thread's dlock_last_error(), which the next
   * library call (dlock_time_format() below) clears: copy it first. */
  snprintf(message, sizeof message, "%s", ev->message != NULL ? ev->message : "");
  if (log_json) {
    event_json(ev, node, message, o->quiet);
    return;
  }
  cli_format_time_ms(ev->scheduled_unix_ms, o->tz, when, sizeof when);
  /* A run of 'dlock job trigger': its time is the trigger's. */
  const char *tick = ev->trigger != NULL && strcmp(ev->trigger, "manual") == 0 ? "manual run of" : "tick";
  switch (ev->kind) {
  case DLOCK_SCHED_RAN:
    if (o->quiet && ev->status == 0) return;
    if (ev->duration_ms >= 0)
      cli_format_duration(ev->duration_ms, took, sizeof took);
    else
      snprintf(took, sizeof took, "? (end not recorded)");
    if (ev->status == 0)
      say("%s %s %s: ran on %s, fence %llu, %s, exit 0", ev->job, tick, when, node ? node : "?",
          (unsigned long long)ev->fence, took);
    else
      say("%s %s %s: ran on %s, fence %llu, %s, failed (exit %d)", ev->job, tick, when, node ? node : "?",
          (unsigned long long)ev->fence, took, ev->status);
    return;
  case DLOCK_SCHED_SKIPPED:
    if (!o->quiet) {
      say("%s %s %s: skipped, claimed by %s", ev->job, tick, when, node != NULL ? node : "another node");
    }
    return;
  case DLOCK_SCHED_SKIPPED_BUSY:
    if (!o->quiet) {
      say("%s %s %s: skipped, busy: the previous run (%s) still holds the job lock", ev->job, tick, when,
          node != NULL ? node : "?");
    }
    return;
  case DLOCK_SCHED_SKIPPED_POOL:
    if (!o->quiet) {
      say("%s %s %s: skipped, pool: all %d worker(s) of this node busy, so this node "
          "did not claim it (it runs only if another node takes it)",
          ev->job, tick, when, o->pool > 0 ? o->pool : 1);
    }
    return;
  case DLOCK_SCHED_MISFIRED:
    say("%s %s %s: misfired: too late to run (was this process stopped?)", ev->job, tick, when);
    return;
  case DLOCK_SCHED_ERROR:
    say("%s %s %s: error: %s%s%s%s", ev->job, tick, when, dlock_strerror(ev->status), message[0] != '\0' ? " (" : "",
        message, message[0] != '\0' ? ")" : "");
    return;
  case DLOCK_SCHED_SKIPPED_PAUSED:
    if (!o->quiet) say("%s %s %s: %s", ev->job, tick, when, message);
    return;
  case DLOCK_SCHED_CLOCK_SKEW:
    /* Logged even with --quiet: only a fixed clock ends it. */
    say("%s %s %s: not claimed: %s", ev->job, tick, when, message);
    return;
  }
  say("%s %s %s: unknown event %d", ev->job, tick, when, (int)ev->kind);
}

/* ---- Running one tick (scheduler worker threads) ---- */

static void groups_add(daemon_state *d, pid_t pgid) {
  if (d->ngroups < d->cap) d->groups[d->ngroups++] = pgid;
}

static void groups_remove(daemon_state *d, pid_t pgid) {
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < d->ngroups; i++) {
    if (d->groups[i] == pgid) {
      d->groups[i] = d->groups[--d->ngroups];
      break;
    }
  }
  pthread_mutex_unlock(&d->mu);
}

/* Send 'sig' (and SIGCONT, so that a stopped job sees it) to every running
 * command's group; returns how many there are. */
static int groups_signal(daemon_state *d, int sig) {
  pthread_mutex_lock(&d->mu);
  int n = d->ngroups;
  for (int i = 0; i < n; i++) {
    kill(-d->groups[i], sig);
    if (sig != SIGKILL) kill(-d->groups[i], SIGCONT);
  }
  pthread_mutex_unlock(&d->mu);
  return n;
}

static int groups_count(daemon_state *d) {
  pthread_mutex_lock(&d->mu);
  int n = d->ngroups;
  pthread_mutex_unlock(&d->mu);
  return n;
}

/* Wait for the command 'pid' in this worker thread. A run that reaches
 * --lock-at-most-for is stopped (SIGTERM, SIGKILL after --grace): its job
 * lock has expired by then, and another node may start the next tick. */
static int wait_command(daemon_state *d, const dlock_tick *t, pid_t pid) {
  const cli_daemon_opts *o = d->o;
  int64_t at_most = o->at_most_ms > 0 ? o->at_most_ms : 10 * 60 * 1000;
  dlock_mono_ms term_at = dlock_mono_now() + at_most;
  dlock_mono_ms kill_at = 0;
  /* A pidfd becomes readable when the child ends: no polling, no SIGCHLD
   * (which the other workers' children share). */
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int status = 0;

  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      say("%s: waiting for the command (pid %ld): %s", t->job, (long)pid, strerror(errno));
      status = CLI_EXIT_SOFTWARE << 8;
      break;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (term_at != 0 && now >= term_at) {
      char limit[32];
      cli_format_duration(at_most, limit, sizeof limit);
      say("%s: the run passed --lock-at-most-for (%s) and its job lock expired; "
          "sending SIGTERM",
          t->job, limit);
      kill(-pid, SIGTERM);
      kill(-pid, SIGCONT);
      term_at = 0;
      kill_at = now + o->grace_ms;
    }
    if (kill_at != 0 && now >= kill_at) {
      say("%s: the command outlived --grace; sending SIGKILL", t->job);
      kill(-pid, SIGKILL);
      kill_at = 0;
    }
    dlock_mono_ms next = term_at != 0 ? term_at : kill_at;
    int64_t timeout = next != 0 ? next - now : 1000;
    if (timeout > 1000) timeout = 1000;
    if (timeout < 1) timeout = 1;
    if (pidfd >= 0) {
      struct pollfd pfd = {pidfd, POLLIN, 0};
      poll(&pfd, 1, (int)timeout);
    } else {
      poll(NULL, 0, timeout < 20 ? (int)timeout : 20);
    }
  }
  if (pidfd >= 0) close(pidfd);
  return status;
}

static int run_job(const dlock_tick *t, void *arg) {
  daemon_state *d = arg;
  const cli_daemon_opts *o = d->o;
  char when[64];
  char env_job[DLOCK_MAX_NAME_LEN + 16];
  char env_tick[48], env_tick_ms[48], env_fence[48], env_node[160];
  char env_prefix[DLOCK_MAX_NAME_LEN + 16], env_trigger[32];
  char *env_url = cli_child_env_url(d->url);
  cli_child plan;

  cli_format_time_ms(t->scheduled_unix_ms, o->tz, when, sizeof when);
  if (env_url == NULL) {
    say("%s tick %s: out of memory", t->job, when);
    return CLI_EXIT_SOFTWARE;
  }
  int64_t tick_s = t->scheduled_unix_ms >= 0 ? t->scheduled_unix_ms / 1000 : -((-t->scheduled_unix_ms + 999) / 1000);
  snprintf(env_job, sizeof env_job, "DLOCK_JOB=%s", t->job);
  snprintf(env_tick, sizeof env_tick, "DLOCK_TICK=%lld", (long long)tick_s);
  snprintf(env_tick_ms, sizeof env_tick_ms, "DLOCK_TICK_MS=%lld", (long long)t->scheduled_unix_ms);
  snprintf(env_fence, sizeof env_fence, "DLOCK_FENCE=%llu", (unsigned long long)t->fence);
  snprintf(env_node, sizeof env_node, "DLOCK_NODE=%s", t->node);
  snprintf(env_prefix, sizeof env_prefix, "DLOCK_PREFIX=%s", cli_config_prefix());
  snprintf(env_trigger, sizeof env_trigger, "DLOCK_TRIGGER=%s", t->trigger != NULL ? t->trigger : "tick");
  const char *env[] = {env_job, env_tick, env_tick_ms, env_fence, env_node, env_url, env_prefix, env_trigger, NULL};
  int rc = cli_child_build(&plan, d->program, o->cmd, o->ncmd, o->shell, env);
  free(env_url);
  if (rc != 0) {
    cli_child_free(&plan);
    say("%s tick %s: out of memory", t->job, when);
    return CLI_EXIT_SOFTWARE;
  }

  /* Spawned and registered under the lock, so that a stop either finds the
   * command in the list (and signals it) or is seen here first. */
  pthread_mutex_lock(&d->mu);
  int stopping = d->stop_signal;
  pid_t pid = -1;
  if (!stopping) {
    pid = cli_child_spawn(&plan, &d->child_mask, -1, o->shell ? "/bin/sh" : o->cmd[0]);
    if (pid > 0) groups_add(d, pid);
  }
  pthread_mutex_unlock(&d->mu);
  cli_child_free(&plan);
  if (stopping) {
    say("%s tick %s: claimed while stopping; not run", t->job, when);
    return 128 + stopping;
  }
  if (pid < 0) return CLI_EXIT_SOFTWARE;
  if (o->verbose) {
    say("%s tick %s: running the command (pid %ld, fence %llu)", t->job, when, (long)pid, (unsigned long long)t->fence);
  }

  cli_guard guard;
  cli_guard_start(&guard, pid, o->grace_ms);
  int status = wait_command(d, t, pid);
  cli_stop_group(pid, o->grace_ms, o->quiet, -1);
  cli_guard_stop(&guard);
  groups_remove(d, pid);
  return cli_exit_code_of(status);
}

/* ---- Signals and stopping (main thread) ---- */

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};

/* Block the stop signals in every thread (before any exists) and return a
 * signalfd for them; -1 on failure. */
static int signals_start(sigset_t *old_mask) {
  struct sigaction sa;
  sigset_t watched;

  sigemptyset(&watched);
  for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++) {
    /* Respect nohup: a signal ignored at start stays ignored. */
    if (sigaction(stop_signals[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) continue;
    sigaddset(&watched, stop_signals[i]);
  }
  /* SIGCHLD set to SIG_IGN by our parent would make the kernel reap the
   * commands for us, and their statuses would be lost. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, NULL);
  if (pthread_sigmask(SIG_BLOCK, &watched, old_mask) != 0) return -1;
  return signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Block until a stop signal comes; returns it. */
static int wait_signal(int sigfd) {
  struct signalfd_siginfo si;

  for (;;) {
    struct pollfd pfd = {sigfd, POLLIN, 0};
    if (poll(&pfd, 1, -1) < 0 && errno != EINTR) return SIGTERM; /* cannot wait for signals: stop as if told to */
    if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) return (int)si.ssi_signo;
  }
}

typedef struct stopper {
  dlock_sched *s;
  int64_t timeout_ms;
  pthread_mutex_t mu;
  int done;
  int rc;
  char message[512]; /* dlock_last_error() is per thread: kept from the call */
} stopper;

static void *stopper_main(void *arg) {
  stopper *st = arg;
  int rc = dlock_sched_stop(st->s, st->timeout_ms);
  pthread_mutex_lock(&st->mu);
  st->rc = rc;
  snprintf(st->message, sizeof st->message, "%s", dlock_last_error());
  st->done = 1;
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

static int stopper_done(stopper *st) {
  pthread_mutex_lock(&st->mu);
  int done = st->done;
  pthread_mutex_unlock(&st->mu);
  return done;
}

/* Stop the scheduler after signal 'sig': no new ticks; running commands
 * get the signal, then SIGKILL after --grace. Returns 0 when the scheduler
 * has stopped (it may be freed), -1 when a run is still stuck. */
static int stop_all(daemon_state *d, dlock_sched *s, int sigfd, int sig) {
  const cli_daemon_opts *o = d->o;
  char grace[32];

  pthread_mutex_lock(&d->mu);
  d->stop_signal = sig;
  pthread_mutex_unlock(&d->mu);
  int running = groups_signal(d, sig);
  cli_format_duration(o->grace_ms, grace, sizeof grace);
  if (running > 0 && !o->quiet) {
    say("%s: stopping; passed %s to the running command, SIGKILL after %s", cli_signame(sig), cli_signame(sig), grace);
  } else if (!o->quiet) {
    say("%s: stopping", cli_signame(sig));
  }

  /* The library call waits for the runs; it goes in a thread of its own so
   * that this one can keep passing signals and enforce --grace. */
  stopper st = {s, o->grace_ms + STOP_MARGIN_MS, PTHREAD_MUTEX_INITIALIZER, 0, 0, ""};
  pthread_t tid;
  if (pthread_create(&tid, NULL, stopper_main, &st) != 0) {
    groups_signal(d, SIGKILL);
    return dlock_sched_stop(s, STOP_MARGIN_MS) == 0 ? 0 : -1;
  }
  dlock_mono_ms kill_at = dlock_mono_now() + o->grace_ms;
  int killed = 0;
  while (!stopper_done(&st)) {
    struct pollfd pfd = {sigfd, POLLIN, 0};
    struct signalfd_siginfo si;
    poll(&pfd, 1, 50);
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
      if (!killed) groups_signal(d, (int)si.ssi_signo);
    }
    if (!killed && dlock_mono_now() >= kill_at && groups_count(d) > 0) {
      if (!o->quiet) say("the command outlived --grace (%s); sending SIGKILL", grace);
      groups_signal(d, SIGKILL);
      killed = 1;
    }
  }
  pthread_join(tid, NULL);
  pthread_mutex_destroy(&st.mu);
  if (st.rc != 0) {
    say("cannot stop the scheduler cleanly: %s; exiting anyway", st.message);
    return -1;
  }
  return 0;
}

/* ---- The daemon ---- */

static void describe(const cli_daemon_opts *o, char *buf, size_t len) {
  char period[32];
  switch (o->trigger) {
  case CLI_TRIGGER_CRON:
    snprintf(buf, len, "cron '%s'%s in %s", o->expr, (o->cron_flags & DLOCK_CRON_UNIX) != 0 ? " (Unix)" : "",
             o->tz != NULL ? o->tz : "UTC");
    return;
  case CLI_TRIGGER_RATE:
    cli_format_duration(o->period_ms, period, sizeof period);
    snprintf(buf, len, "every %s (fixed rate)", period);
    return;
  case CLI_TRIGGER_DELAY:
    cli_format_duration(o->period_ms, period, sizeof period);
    snprintf(buf, len, "every %s after the previous run ended (fixed delay)", period);
    return;
  }
  snprintf(buf, len, "?");
}

int cli_daemon_run(const cli_daemon_opts *o) {
  char program[4096];
  daemon_state d;
  dlock_client *c = NULL;
  dlock_sched *s = NULL;
  cli_metrics *mx = NULL;
  int rc = cli_resolve_program(o->shell ? "/bin/sh" : o->cmd[0], program, sizeof program);

  if (rc != 0) return rc;
  memset(&d, 0, sizeof d);
  d.o = o;
  log_json = o->log_json;
  cli_log_setup(o->log_json, o->job, o->job);
  d.program = program;
  d.url = cli_effective_url(o->url);
  d.cap = o->pool > 0 ? o->pool : 1;
  d.groups = calloc((size_t)d.cap, sizeof *d.groups);
  if (d.groups == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  pthread_mutex_init(&d.mu, NULL);

  int sigfd = signals_start(&d.child_mask);
  if (sigfd < 0) {
    perror("dlock: signals");
    rc = CLI_EXIT_SOFTWARE;
    goto out;
  }
  cli_connect_metrics_names(o->job);
  rc = cli_connect(o->url, &c);
  if (rc != 0) goto out;
  rc = cli_metrics_start(&mx, c, &o->metrics);
  if (rc != 0) goto out;

  /* The library's default node name, made here so that the log can show it. */
  char node[128];
  if (o->node != NULL) {
    snprintf(node, sizeof node, "%s", o->node);
  } else {
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(node, sizeof node, "%s:%ld", host, (long)getpid());
  }
  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.pool_size = o->pool;
  so.node_name = node;
  so.on_event = on_event;
  so.on_event_arg = &d;
  int st = dlock_sched_new(&s, c, &so);
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "scheduler");
    goto out;
  }
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_most_for_ms = o->at_most_ms;
  jo.lock_at_least_for_ms = o->at_least_ms;
  jo.allow_overlap = o->allow_overlap;
  jo.time_zone = o->tz;
  jo.cron_flags = o->cron_flags;
  switch (o->trigger) {
  case CLI_TRIGGER_CRON:
    st = dlock_sched_add_cron(s, o->job, o->expr, &jo, run_job, &d);
    break;
  case CLI_TRIGGER_RATE:
    st = dlock_sched_add_fixed_rate(s, o->job, o->period_ms, &jo, run_job, &d);
    break;
  case CLI_TRIGGER_DELAY:
    st = dlock_sched_add_fixed_delay(s, o->job, o->period_ms, &jo, run_job, &d);
    break;
  }
  if (st == 0) st = dlock_sched_start(s);
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "job '%s'", o->job);
    goto out;
  }
  if (!o->quiet) {
    char what[DLOCK_MAX_NAME_LEN + 128];
    describe(o, what, sizeof what);
    say("job '%s' started on node %s: %s; stop with SIGTERM or Ctrl-C", o->job, node, what);
  }

  int sig = wait_signal(sigfd);
  if (stop_all(&d, s, sigfd, sig) != 0) {
    /* A run is stuck in the library (Redis calls): freeing would wait for
     * it forever. The process ends anyway, and the OS frees the rest. */
    s = NULL;
    c = NULL;
  }
  rc = 128 + sig;

out:
  dlock_sched_free(s);
  cli_metrics_stop(mx); /* the file's last write: every run counted */
  dlock_client_free(c);
  if (sigfd >= 0) close(sigfd);
  pthread_mutex_destroy(&d.mu);
  free(d.groups);
  return rc;
}
