/*
 * cmd_status.c - "dlock status NAME" and "dlock list [PATTERN]": read-only
 * views of the locks, for people (aligned text) and for programs (--json).
 * Who holds a lock comes from the owner_info that "dlock run" stores with
 * it (see owner_info_format() in cmd_run.c for the format parsed here).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { OPT_JSON = 1, OPT_QUIET, OPT_WATCH, OPT_LONG };

/* What the parser of both commands knows; it refuses -q for list and -l
 * for status, saying what each is for. */
static const cli_opt view_opts[] = {
    {"json", 0, 0, OPT_JSON}, {"quiet", 'q', 0, OPT_QUIET}, {"watch", 0, 0, OPT_WATCH}, {"long", 'l', 0, OPT_LONG},
    {NULL, 0, 0, 0},
};

/* The command descriptors' option tables (help.c): what each one takes. */
static const cli_opt status_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {"quiet", 'q', 0, OPT_QUIET},
    {"watch", 0, 0, OPT_WATCH},
    {NULL, 0, 0, 0},
};
static const cli_opt list_opts[] = {
    {"json", 0, 0, OPT_JSON},
    {"watch", 0, 0, OPT_WATCH},
    {"long", 'l', 0, OPT_LONG},
    {NULL, 0, 0, 0},
};
const cli_opt *const cli_status_opts[] = {status_opts, NULL};
const cli_opt *const cli_list_opts[] = {list_opts, NULL};

/* "status -q": the answer is the exit status alone, for "if dlock status
 * -q NAME; then ...": held 0, free 1 (as grep -q and fence check -q). */
#define STATUS_FREE 1

/* The holder as "dlock run" describes itself; fields point into 'buf'. */
typedef struct holder {
  char buf[1025];
  const char *host, *pid, *user, *cmd;
} holder;

/* "dlock-run host=H pid=P user=U cmd=REST": cmd comes last so that it may
 * hold spaces. Returns 0 when owner_info has that form. */
static int holder_parse(const char *owner_info, holder *h) {
  static const char magic[] = "dlock-run ";

  memset(h, 0, sizeof *h);
  if (strncmp(owner_info, magic, strlen(magic)) != 0) return -1;
  snprintf(h->buf, sizeof h->buf, "%s", owner_info + strlen(magic));
  char *p = h->buf;
  while (*p != '\0') {
    if (strncmp(p, "cmd=", 4) == 0) {
      h->cmd = p + 4;
      break;
    }
    char *end = strchr(p, ' ');
    if (end != NULL) *end = '\0';
    if (strncmp(p, "host=", 5) == 0)
      h->host = p + 5;
    else if (strncmp(p, "pid=", 4) == 0)
      h->pid = p + 4;
    else if (strncmp(p, "user=", 5) == 0)
      h->user = p + 5;
    if (end == NULL) break;
    p = end + 1;
  }
  return h->host != NULL && h->pid != NULL ? 0 : -1;
}

/* Every permit (or read-write hold) of a lock, as dlock_lock_holders gives them. */
#define MAX_SHOWN 128
typedef struct permit_list {
  int n, more;
  struct {
    uint64_t fence;
    int64_t ttl_ms, since_unix_ms;
    char owner[1025];
  } p[MAX_SHOWN];
} permit_list;

static void collect_permit(const dlock_holder *h, void *arg) {
  permit_list *l = arg;
  if (l->n == MAX_SHOWN) {
    l->more++;
    return;
  }
  l->p[l->n].fence = h->fence;
  l->p[l->n].ttl_ms = h->ttl_ms;
  l->p[l->n].since_unix_ms = h->since_unix_ms;
  snprintf(l->p[l->n].owner, sizeof l->p[l->n].owner, "%s", h->owner_info);
  l->n++;
}

void cli_owner_describe(const char *owner_info, char *buf, size_t len) {
  holder h;

  if (holder_parse(owner_info, &h) == 0)
    snprintf(buf, len, "pid %s on %s%s%s, command: %s", h.pid, h.host, h.user != NULL ? " user " : "",
             h.user != NULL ? h.user : "", h.cmd != NULL && h.cmd[0] != '\0' ? h.cmd : "?");
  else
    snprintf(buf, len, "%s", owner_info);
}

void cli_owner_brief(const char *owner_info, char *buf, size_t len) {
  holder h;

  if (holder_parse(owner_info, &h) == 0)
    snprintf(buf, len, "%s%s%s:%s %s", h.user != NULL ? h.user : "", h.user != NULL ? "@" : "", h.host, h.pid,
             h.cmd != NULL ? h.cmd : "");
  else
    snprintf(buf, len, "%s", owner_info);
}

static void print_json(const char *name, const dlock_lock_info *info, const permit_list *pl) {
  holder h;

  fputs("{\"name\": ", stdout);
  cli_json_string(stdout, name);
  printf(", \"held\": %s, \"foreign\": %s, \"ttl_ms\": %lld, \"fence\": %llu, "
         "\"since_unix_ms\": %lld, \"waiters\": %lld, \"owner_info\": ",
         info->held ? "true" : "false", info->foreign ? "true" : "false", (long long)(info->held ? info->ttl_ms : 0),
         (unsigned long long)info->fence, (long long)info->since_unix_ms, (long long)info->waiters);
  cli_json_string(stdout, info->owner_info);
  if (info->permits != 0) /* a semaphore: fence and holder are its newest holder's */
    printf(", \"kind\": \"semaphore\", \"permits\": %lld, \"permits_used\": %lld", (long long)info->permits,
           (long long)info->permits_used);
  if (info->held && holder_parse(info->owner_info, &h) == 0) {
    fputs(", \"holder\": {\"host\": ", stdout);
    cli_json_string(stdout, h.host);
    uint64_t pid;
    /* owner_info is free text anyone can write: keep the JSON valid. */
    if (cli_parse_u64(h.pid, UINT64_MAX, &pid) == 0) {
      printf(", \"pid\": %llu", (unsigned long long)pid);
    } else {
      fputs(", \"pid\": ", stdout);
      cli_json_string(stdout, h.pid);
    }
    fputs(", \"user\": ", stdout);
    cli_json_string(stdout, h.user != NULL ? h.user : "");
    fputs(", \"command\": ", stdout);
    cli_json_string(stdout, h.cmd != NULL ? h.cmd : "");
    fputc('}', stdout);
  }
  if (info->rwlock)
    printf(", \"kind\": \"rwlock\", \"readers\": %lld, \"writer\": %s, \"waiting_writers\": %lld",
           (long long)info->readers, info->writer ? "true" : "false", (long long)info->waiting_writers);
  if (info->latch)
    printf(", \"latch\": {\"count\": %lld, \"ttl_ms\": %lld}", (long long)info->latch_count,
           (long long)info->latch_ttl_ms);
  if (pl != NULL && pl->n > 0) {
    fputs(", \"holders\": [", stdout);
    for (int i = 0; i < pl->n; i++) {
      char who[1200];
      cli_owner_describe(pl->p[i].owner, who, sizeof who);
      printf("%s{\"fence\": %llu, \"ttl_ms\": %lld, \"since_unix_ms\": %lld, \"holder\": ", i ? ", " : "",
             (unsigned long long)pl->p[i].fence, (long long)pl->p[i].ttl_ms, (long long)pl->p[i].since_unix_ms);
      cli_json_string(stdout, who);
      fputs(", \"owner_info\": ", stdout);
      cli_json_string(stdout, pl->p[i].owner);
      fputc('}', stdout);
    }
    fputc(']', stdout);
  }
  fputc('}', stdout);
}

/* A read-write lock's sides (docs/rwlock.md): who holds which, who waits. */
static void print_rw_text(const dlock_lock_info *info) {
  printf("kind:     read-write lock\n");
  if (info->writer)
    printf("writer:   holds it (the holder below)\n");
  else
    printf("readers:  %lld\n", (long long)info->readers);
  printf("waiting:  %lld writer%s, %lld reader%s\n", (long long)info->waiting_writers,
         info->waiting_writers == 1 ? "" : "s", (long long)(info->waiters - info->waiting_writers),
         info->waiters - info->waiting_writers == 1 ? "" : "s");
}

static void print_since(int64_t since_unix_ms) {
  time_t secs = (time_t)(since_unix_ms / 1000);
  struct tm tm;
  char when[64];
  char ago[64];
  struct timespec now;

  if (localtime_r(&secs, &tm) == NULL || strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %z", &tm) == 0) {
    snprintf(when, sizeof when, "%lld ms since the epoch", (long long)since_unix_ms);
  }
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  /* The server's clock wrote 'since'; ours may differ a little. */
  if (now_ms >= since_unix_ms) {
    cli_format_duration(now_ms - since_unix_ms, ago, sizeof ago);
    printf("since:    %s (%s ago)\n", when, ago);
  } else {
    printf("since:    %s\n", when);
  }
}

static void print_text(const char *name, const dlock_lock_info *info, const permit_list *pl) {
  char ttl[64];
  holder h;

  printf("lock:     %s\n", name);
  if (info->latch) {
    cli_format_duration(info->latch_ttl_ms < 0 ? 0 : info->latch_ttl_ms, ttl, sizeof ttl);
    if (info->latch_count > 0)
      printf("latch:    %lld left to count down, expires in %s\n", (long long)info->latch_count, ttl);
    else
      printf("latch:    open (counted down to 0), expires in %s\n", ttl);
  }
  if (info->permits != 0) {
    printf("kind:     semaphore\n");
    if (info->permits > 0)
      printf("permits:  %lld of %lld held, %lld free\n", (long long)info->permits_used, (long long)info->permits,
             (long long)(info->permits - info->permits_used));
    else
      printf("permits:  %lld held (limit not recorded)\n", (long long)info->permits_used);
  }
  if (!info->held) {
    printf("state:    free\n");
    if (info->fence > 0) printf("fence:    %llu (last issued)\n", (unsigned long long)info->fence);
    if (info->waiters > 0) printf("waiters:  %lld\n", (long long)info->waiters);
    return;
  }
  if (info->foreign && info->ttl_ms < 0) {
    printf("state:    not a dlock lock: a key without dlock metadata and without expiry\n"
           "          (an application key?); 'dlock run' refuses this name\n");
  } else if (info->foreign) {
    printf("state:    held by something other than dlock (no metadata)\n");
  } else {
    printf("state:    held\n");
  }
  if (info->rwlock) print_rw_text(info);
  if (info->ttl_ms < 0) {
    printf("lease:    none (the key never expires)\n");
  } else {
    cli_format_duration(info->ttl_ms, ttl, sizeof ttl);
    printf(info->permits != 0 ? "lease:    %s left (the last permit)\n" : "lease:    %s left\n", ttl);
  }
  if (!info->foreign && pl->n == 0) printf("fence:    %llu\n", (unsigned long long)info->fence);
  if (pl->n > 0) {
    /* Every permit (or read-write hold): fence, lease left, holder. */
    printf("holders:  %d\n", pl->n + pl->more);
    for (int i = 0; i < pl->n; i++) {
      char who[1200];
      if (pl->p[i].ttl_ms < 0) {
        snprintf(ttl, sizeof ttl, "none (it lasts as its holder's session)");
      } else {
        cli_format_duration(pl->p[i].ttl_ms, ttl, sizeof ttl - 5);
        strcat(ttl, " left");
      }
      cli_owner_describe(pl->p[i].owner, who, sizeof who);
      printf("  fence %llu, lease %s: %s\n", (unsigned long long)pl->p[i].fence, ttl,
             who[0] != '\0' ? who : "(no owner info)");
    }
    if (pl->more > 0) printf("  ... and %d more\n", pl->more);
  } else if (info->permits != 0 && info->owner_info[0] != '\0') {
    printf("newest holder of a permit:\n");
  }
  if (pl->n == 0 && holder_parse(info->owner_info, &h) == 0) {
    printf("holder:   pid %s on %s", h.pid, h.host);
    if (h.user != NULL && h.user[0] != '\0') printf(" (user %s)", h.user);
    putchar('\n');
    if (h.cmd != NULL) printf("command:  %s\n", h.cmd);
  } else if (pl->n == 0 && info->owner_info[0] != '\0') {
    printf("owner:    %s\n", info->owner_info);
  }
  if (info->since_unix_ms > 0) print_since(info->since_unix_ms);
  printf("waiters:  %lld\n", (long long)info->waiters);
}

/* Redlock: one line per node, as that node alone sees the lock. */
static void print_nodes(dlock_client *c, const char *name) {
  int n = dlock_client_node_count(c);

  for (int i = 0; i < n; i++) {
    dlock_lock_info ni;
    char ttl[64];

    dlock_lock_info_init(&ni);
    printf("node %s: ", dlock_client_node_name(c, i));
    if (dlock_lock_info_get_node(c, name, i, &ni) != 0) {
      printf("unreachable (%s)\n", dlock_last_error());
    } else if (!ni.held) {
      printf("free\n");
    } else {
      cli_format_duration(ni.ttl_ms < 0 ? 0 : ni.ttl_ms, ttl, sizeof ttl);
      if (ni.foreign)
        printf("held by something other than dlock, %s left\n", ttl);
      else
        printf("held, fence %llu, %s left\n", (unsigned long long)ni.fence, ttl);
    }
  }
}

void cli_holder_describe(const dlock_lock_info *info, char *buf, size_t len) {
  holder h;
  char ttl[64];
  size_t used = 0;

#define ADD(...)                                                                   \
  do {                                                                             \
    if (used < len) used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__); \
  } while (0)
  buf[0] = '\0';
  if (!info->held) {
    ADD("nobody (it was just released)");
    return;
  }
  if (info->foreign && info->ttl_ms < 0) {
    ADD("a key that is not a dlock lock: no dlock metadata and no expiry");
    return;
  }
  if (info->rwlock && !info->writer)
    ADD("%lld reader%s", (long long)info->readers, info->readers == 1 ? "" : "s");
  else if (info->foreign)
    ADD("a client other than dlock (no dlock metadata)");
  else if (holder_parse(info->owner_info, &h) == 0) {
    if (used < len) cli_owner_describe(info->owner_info, buf + used, len - used);
    used = strlen(buf);
  } else if (info->owner_info[0] != '\0')
    ADD("'%s'", info->owner_info);
  else
    ADD("another owner");
  if (info->since_unix_ms > 0) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    char ago[64];
    cli_format_duration(now_ms > info->since_unix_ms ? now_ms - info->since_unix_ms : 0, ago, sizeof ago);
    ADD("; since %s ago", ago);
  }
  if (info->ttl_ms >= 0) {
    cli_format_duration(info->ttl_ms, ttl, sizeof ttl);
    ADD("; lease %s left", ttl);
  }
  if (info->waiters > 0) ADD("; %lld waiting", (long long)info->waiters);
#undef ADD
}

/* The command line both commands share: --url, --json, --watch, and at
 * most one positional argument; -q for status, -l for list. Returns -1 to
 * go on, else the exit status. */
static int parse_view_args(int argc, char **argv, const char *cmd, const char **url, int *json, int *quiet, int *watch,
                           int *longer, const char **positional) {
  cli_args args;
  const char *arg;
  int id;

  cli_args_init(&args, argc, argv, cmd, CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, view_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, url)) continue;
    if (id == OPT_JSON) {
      *json = 1;
    } else if (id == OPT_QUIET) {
      if (quiet == NULL) return cli_usage_error(cmd, "-q is for 'dlock status NAME'");
      *quiet = 1;
    } else if (id == OPT_WATCH) {
      *watch = 1;
    } else if (id == OPT_LONG) {
      if (longer == NULL) return cli_usage_error(cmd, "-l is for 'dlock list'; 'dlock status NAME' is long already");
      *longer = 1;
    } else if (id == CLI_OPT_POSITIONAL && *positional == NULL) {
      *positional = arg;
    } else if (id == CLI_OPT_POSITIONAL) {
      return cli_usage_error(cmd, "unexpected argument '%s'", arg);
    }
  }
  return -1;
}

/* --watch: the stop signals blocked before the client starts its threads. */
static int watch_mode(const char *url, const char *name, const char *pattern, int json) {
  int sfd = cli_stop_signalfd();
  if (sfd < 0) {
    fprintf(stderr, "dlock: cannot watch for signals: %s\n", strerror(errno));
    return CLI_EXIT_SOFTWARE;
  }
  dlock_client *c;
  int rc = cli_connect(url, &c);
  if (rc == 0) {
    rc = cli_watch(c, name, pattern, json, sfd);
    dlock_client_free(c);
  }
  close(sfd);
  return rc;
}

int cmd_status(int argc, char **argv) {
  const char *url = NULL;
  const char *name = NULL;
  int json = 0, quiet = 0, watch = 0;
  int rc = parse_view_args(argc, argv, "status", &url, &json, &quiet, &watch, NULL, &name);
  if (rc >= 0) return rc;
  if (name == NULL) return cli_usage_error("status", "missing lock NAME");
  if (quiet && json) return cli_usage_error("status", "-q prints nothing; it does not go with --json");
  if (quiet && watch) return cli_usage_error("status", "-q answers once; leave out --watch");
  if (watch) return watch_mode(url, name, NULL, json);

  dlock_client *c;
  rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  int st = dlock_lock_info_get(c, name, &info);
  static permit_list pl; /* large: not on the stack */
  if (st == 0 && !quiet && (info.permits != 0 || info.rwlock) && info.held) {
    int n = dlock_lock_holders(c, name, collect_permit, &pl);
    st = n < 0 ? n : 0;
    /* A backend that gives the newest holder only: say what it knows, as before. */
    int64_t want = info.permits != 0 ? info.permits_used : info.readers + info.writer;
    if (n >= 0 && n < want) pl.n = pl.more = 0;
  }
  if (st != 0) {
    rc = cli_report(st, dlock_last_error(), "status of '%s'", name);
  } else if (quiet) {
    rc = info.held ? CLI_EXIT_OK : STATUS_FREE;
  } else if (json) {
    print_json(name, &info, &pl);
    fputc('\n', stdout);
  } else {
    print_text(name, &info, &pl);
    print_nodes(c, name);
  }
  dlock_client_free(c);
  return rc;
}

/* ---- list ---- */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_json(dlock_client *c, const cli_names *l) {
  int first = 1;

  fputc('[', stdout);
  for (size_t i = 0; i < l->n; i++) {
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    int st = dlock_lock_info_get(c, l->v[i], &info);
    if (st != 0) {
      fputs("]\n", stdout);
      return cli_report(st, dlock_last_error(), "status of '%s'", l->v[i]);
    }
    if (!info.held && !info.latch) continue; /* released (or expired) since the SCAN */
    fputs(first ? "\n  " : ",\n  ", stdout);
    first = 0;
    print_json(l->v[i], &info, NULL);
  }
  fputs(first ? "]\n" : "\n]\n", stdout);
  return CLI_EXIT_OK;
}

/* list -l: one line per name, aligned: name, state, fence, lease left, holder. */
static int list_long(dlock_client *c, const cli_names *l) {
  size_t width = 4;
  for (size_t i = 0; i < l->n; i++)
    if (strlen(l->v[i]) > width) width = strlen(l->v[i]);
  printf("%-*s  %-9s  %-20s  %-10s  %s\n", (int)width, "NAME", "STATE", "FENCE", "LEASE LEFT", "HOLDER");
  for (size_t i = 0; i < l->n; i++) {
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    int st = dlock_lock_info_get(c, l->v[i], &info);
    if (st != 0) return cli_report(st, dlock_last_error(), "status of '%s'", l->v[i]);
    if (!info.held && !info.latch) continue; /* released (or expired) since the SCAN */
    char state[32], ttl[64], who[1200];
    if (!info.held)
      snprintf(state, sizeof state, "latch");
    else if (info.permits != 0)
      snprintf(state, sizeof state, "%lld/%lld", (long long)info.permits_used, (long long)info.permits);
    else if (info.rwlock && !info.writer)
      snprintf(state, sizeof state, "%lld read", (long long)info.readers);
    else
      snprintf(state, sizeof state, info.foreign ? "foreign" : "held");
    if (!info.held || info.ttl_ms < 0)
      snprintf(ttl, sizeof ttl, "-");
    else
      cli_format_duration(info.ttl_ms, ttl, sizeof ttl);
    cli_owner_describe(info.owner_info, who, sizeof who);
    if (info.permits != 0 && info.permits_used > 1)
      snprintf(who + strlen(who), sizeof who - strlen(who), " (newest of %lld)", (long long)info.permits_used);
    printf("%-*s  %-9s  %-20llu  %-10s  %s\n", (int)width, l->v[i], state,
           (unsigned long long)(info.held && !info.foreign ? info.fence : 0), ttl, who[0] ? who : "-");
  }
  return CLI_EXIT_OK;
}

int cmd_list(int argc, char **argv) {
  const char *url = NULL;
  const char *pattern = NULL;
  int json = 0, watch = 0, longer = 0;
  int rc = parse_view_args(argc, argv, "list", &url, &json, NULL, &watch, &longer, &pattern);
  if (rc >= 0) return rc;
  if (longer && json) return cli_usage_error("list", "--json already gives every field; leave out -l");

  if (watch) return watch_mode(url, NULL, pattern, json);

  dlock_client *c;
  rc = cli_connect(url, &c);
  if (rc != 0) return rc;
  cli_names l = {NULL, 0, 0, 0};
  int n = dlock_lock_list(c, pattern, cli_names_add, &l);
  if (n < 0) {
    rc = cli_report(n, dlock_last_error(), "listing locks");
  } else if (l.oom) {
    fprintf(stderr, "dlock: out of memory while listing locks\n");
    rc = CLI_EXIT_SOFTWARE;
  } else {
    /* SCAN order is arbitrary; sorted output diffs well. */
    if (l.n > 1) qsort(l.v, l.n, sizeof *l.v, cmp_names);
    if (json) {
      rc = list_json(c, &l);
    } else if (longer) {
      rc = list_long(c, &l);
    } else {
      for (size_t i = 0; i < l.n; i++) printf("%s\n", l.v[i]);
    }
  }
  cli_names_free(&l);
  dlock_client_free(c);
  return rc;
}
