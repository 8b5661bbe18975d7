/*
 * cmd_leader.c - "dlock leader NAME": who leads the election NAME, read
 * from the server (dlock_election_leader); --am-i for scripts and health
 * checks; --watch, one line per change (dlock_observer_*) until a signal.
 * Exit 0: a leader (--am-i: it is this host), 3 no leader, 1 (--am-i) led
 * by another; the usual 64, 69, 70 otherwise.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { OPT_JSON = 1, OPT_AM_I, OPT_VALUE, OPT_WATCH, OPT_INTERVAL };

static const cli_opt leader_opts[] = {
    {"json", 0, 0, OPT_JSON},   {"am-i", 0, 0, OPT_AM_I},         {"value", 0, 1, OPT_VALUE},
    {"watch", 0, 0, OPT_WATCH}, {"interval", 0, 1, OPT_INTERVAL}, {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_leader_opts[] = {leader_opts, NULL};

static void print_leader(const char *name, const dlock_leader *l, int json) {
  if (json) {
    printf("{\"election\":");
    cli_json_string(stdout, name);
    if (l->has_leader) {
      printf(",\"leader\":");
      cli_json_string(stdout, l->value);
      printf(",\"epoch\":%llu,\"since_unix_ms\":%lld,\"lease_left_ms\":%lld}\n", (unsigned long long)l->epoch,
             (long long)l->since_unix_ms, (long long)l->lease_left_ms);
    } else {
      printf(",\"leader\":null}\n");
    }
  } else if (l->has_leader) {
    char since[64] = "?", lease[64] = "session";
    if (l->since_unix_ms > 0) cli_format_time_ms(l->since_unix_ms, NULL, since, sizeof since);
    if (l->lease_left_ms >= 0) cli_format_duration(l->lease_left_ms, lease, sizeof lease);
    printf("%s: led by '%s', epoch %llu, since %s, lease left %s\n", name, l->value, (unsigned long long)l->epoch,
           since, lease);
  } else {
    printf("%s: no leader\n", name);
  }
  fflush(stdout);
}

/* --watch: until SIGINT, SIGTERM or SIGHUP (exit 0), one line per change. */
static int watch(dlock_client *c, const char *name, int64_t interval_ms, int json) {
  int sfd = cli_stop_signalfd();
  dlock_observer_options oo;
  dlock_observer_options_init(&oo);
  oo.interval_ms = interval_ms;
  dlock_observer *o = NULL;
  int st = dlock_observer_new(&o, c, name, &oo);
  if (st != 0 || sfd < 0) {
    if (sfd >= 0) close(sfd);
    return st ? cli_report(st, dlock_last_error(), "watching '%s'", name) : CLI_EXIT_SOFTWARE;
  }
  char shown[512] = "";
  for (;;) {
    struct pollfd pfd[2] = {{sfd, POLLIN, 0}, {dlock_observer_fd(o), POLLIN, 0}};
    if (poll(pfd, 2, 1000) < 0 && errno != EINTR) break;
    if (pfd[0].revents & POLLIN) break;
    dlock_leader l;
    dlock_leader_init(&l);
    while (dlock_observer_next(o, &l) == 0) print_leader(name, &l, json);
    /* Errors once each, on stderr: the watch goes on. */
    const char *err = dlock_observer_errmsg(o);
    if (strcmp(err, shown) != 0) {
      snprintf(shown, sizeof shown, "%s", err);
      if (*err) fprintf(stderr, "dlock: %s (still watching)\n", err);
    }
  }
  dlock_observer_free(o);
  close(sfd);
  return CLI_EXIT_OK;
}

int cmd_leader(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  const char *name = NULL;
  const char *value = NULL;
  int json = 0, am_i = 0, watching = 0;
  int64_t interval_ms = 500;
  int id;

  cli_args_init(&args, argc, argv, "leader", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, leader_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_JSON) {
      json = 1;
    } else if (id == OPT_AM_I) {
      am_i = 1;
    } else if (id == OPT_VALUE) {
      value = arg;
    } else if (id == OPT_WATCH) {
      watching = 1;
    } else if (id == OPT_INTERVAL) {
      if (cli_parse_duration(arg, &interval_ms) != 0 || interval_ms < 10)
        return cli_usage_error("leader", "--interval: '%s' is not a duration of 10ms or more", arg);
    } else if (id == CLI_OPT_POSITIONAL && name == NULL) {
      name = arg;
    } else {
      return cli_usage_error("leader", "unexpected argument '%s'", arg);
    }
  }
  if (name == NULL) return cli_usage_error("leader", "missing election NAME");
  if (am_i && watching) return cli_usage_error("leader", "--am-i answers once; leave out --watch");
  char host[256] = "";
  if (value == NULL) {
    gethostname(host, sizeof host - 1);
    value = host;
  }

  dlock_client *c;
  int rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  if (watching) {
    rc = watch(c, name, interval_ms, json);
    dlock_client_free(c);
    return rc;
  }
  dlock_leader l;
  dlock_leader_init(&l);
  int st = dlock_election_leader(c, name, &l);
  dlock_client_free(c);
  if (st != 0) return cli_report(st, dlock_last_error(), "who leads '%s'", name);
  if (!am_i) print_leader(name, &l, json);
  if (!l.has_leader) return CLI_EXIT_NOLEADER;
  if (am_i && strcmp(l.value, value) != 0) return CLI_EXIT_STALE;
  return CLI_EXIT_OK;
}
