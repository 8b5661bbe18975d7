/*
 * server.c - the redis-server under test: start a private one (temp dir,
 * free loopback port, no persistence) or use --url; pin it and us to CPUs;
 * stop it by PID on every exit path, Ctrl-C included; read INFO counters.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* What the signal handler needs, in plain globals it may read. */
static volatile pid_t own_server_pid;
static pid_t bench_main_pid;
static char dir_paths[4][320];      /* files to unlink, then the dir to rmdir */
static char sentinel_paths[2][320]; /* --sentinel: its config and log, in the same dir */
static volatile pid_t sentinel_pid;
#define MAX_TRACKED 256
static volatile pid_t tracked_children[MAX_TRACKED];

void bench_track_child(pid_t pid) {
  for (int i = 0; i < MAX_TRACKED; i++) {
    if (tracked_children[i] == 0) {
      tracked_children[i] = pid;
      return;
    }
  }
}

void bench_untrack_child(pid_t pid) {
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked_children[i] == pid) tracked_children[i] = 0;
}

/* Only async-signal-safe calls: kill, waitpid, unlink, rmdir, _exit. */
static void on_fatal_signal(int sig) {
  if (getpid() != bench_main_pid) _exit(128 + sig); /* a forked waiter: the parent cleans up */
  for (int i = 0; i < MAX_TRACKED; i++)
    if (tracked_children[i] > 0) kill(tracked_children[i], SIGKILL);
  if (own_server_pid > 0) {
    kill(own_server_pid, SIGKILL);
    waitpid(own_server_pid, NULL, 0);
    for (int i = 0; i < 3; i++)
      if (dir_paths[i][0]) unlink(dir_paths[i]);
    if (sentinel_pid > 0) {
      kill(sentinel_pid, SIGKILL);
      waitpid(sentinel_pid, NULL, 0);
    }
    for (int i = 0; i < 2; i++)
      if (sentinel_paths[i][0]) unlink(sentinel_paths[i]);
    if (dir_paths[3][0]) rmdir(dir_paths[3]);
  }
  _exit(128 + sig);
}

static void at_exit_cleanup(void) {
  if (getpid() == bench_main_pid) bench_server_teardown(&bench_redis);
}

int bench_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

redisContext *bench_connect(void) {
  struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
  redisContext *ctx = redisConnectWithTimeout(bench_redis.host, bench_redis.port, tv);
  if (!ctx || ctx->err) {
    fprintf(stderr, "dlock-bench: cannot connect to %s:%d: %s\n", bench_redis.host, bench_redis.port,
            ctx ? ctx->errstr : "out of memory");
    redisFree(ctx);
    return NULL;
  }
  /* A bound on every command, so that a wedged server cannot hang the bench. */
  tv.tv_sec = 10;
  redisSetTimeout(ctx, tv);
  return ctx;
}

redisReply *bench_cmd(redisContext *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(ctx, fmt, ap);
  va_end(ap);
  if (!r) fprintf(stderr, "dlock-bench: Redis command failed: %s\n", ctx->errstr);
  return r;
}

/* "redis://host:port[/db]": the bench only needs host and port for its own
 * hiredis connections and redis-benchmark; libdlock gets the URL as given. */
static int parse_url(const char *url, bench_server *srv) {
  const char *p = url;
  if (strncmp(p, "redis://", 8) != 0) {
    fprintf(stderr, "dlock-bench: --url must be redis://HOST:PORT (got %s)\n", url);
    return -1;
  }
  p += 8;
  const char *at = strchr(p, '@');
  if (at) p = at + 1;
  const char *colon = strchr(p, ':');
  size_t hostlen = colon ? (size_t)(colon - p) : strcspn(p, "/");
  if (hostlen == 0 || hostlen >= sizeof srv->host) {
    fprintf(stderr, "dlock-bench: bad host in %s\n", url);
    return -1;
  }
  memcpy(srv->host, p, hostlen);
  srv->host[hostlen] = '\0';
  srv->port = colon ? atoi(colon + 1) : 6379;
  snprintf(srv->url, sizeof srv->url, "%s", url);
  return 0;
}

static int start_own_server(bench_server *srv) {
  snprintf(srv->dir, sizeof srv->dir, "/tmp/dlock-bench.XXXXXX");
  if (!mkdtemp(srv->dir)) {
    fprintf(stderr, "dlock-bench: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  snprintf(dir_paths[0], sizeof dir_paths[0], "%s/redis.conf", srv->dir);
  snprintf(dir_paths[1], sizeof dir_paths[1], "%s/redis.log", srv->dir);
  snprintf(dir_paths[2], sizeof dir_paths[2], "%s/dump.rdb", srv->dir);
  snprintf(dir_paths[3], sizeof dir_paths[3], "%s", srv->dir);
  snprintf(srv->host, sizeof srv->host, "127.0.0.1");

  /* A port found free may be taken before redis binds it: try a few. */
  for (int attempt = 0; attempt < 5; attempt++) {
    srv->port = bench_free_port();
    if (srv->port <= 0) continue;
    FILE *f = fopen(dir_paths[0], "w");
    if (!f) return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsave \"\"\nappendonly no\n"
            "daemonize no\nprotected-mode yes\nmaxmemory-policy noeviction\n"
            "maxclients 10000\n",
            srv->port, srv->dir, dir_paths[1]);
    fclose(f);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int devnull = open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
      }
      execlp("redis-server", "redis-server", dir_paths[0], (char *)NULL);
      fprintf(stderr, "dlock-bench: cannot run redis-server: %s\n", strerror(errno));
      _exit(127);
    }
    own_server_pid = pid;
    srv->own_pid = pid;
    /* Wait for it to answer, at most 5 s. */
    for (int i = 0; i < 100; i++) {
      bench_sleep_ms(50);
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        own_server_pid = 0;
        srv->own_pid = 0;
        break;
      }
      struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
      redisContext *ctx = redisConnectWithTimeout(srv->host, srv->port, tv);
      if (ctx && !ctx->err) {
        redisReply *r = redisCommand(ctx, "PING");
        int ok = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        redisFree(ctx);
        if (ok) {
          snprintf(srv->url, sizeof srv->url, "redis://127.0.0.1:%d", srv->port);
          return 0;
        }
      } else {
        redisFree(ctx);
      }
    }
    if (srv->own_pid > 0) {
      kill(srv->own_pid, SIGKILL);
      waitpid(srv->own_pid, NULL, 0);
      own_server_pid = 0;
      srv->own_pid = 0;
    }
  }
  fprintf(stderr, "dlock-bench: redis-server did not start (see %s)\n", dir_paths[1]);
  return -1;
}

/* --sentinel: one sentinel (quorum 1) monitoring our own server as
 * 'dlockbench'; libdlock then gets a redis-sentinel:// URL and resolves the
 * master through it, while the bare clients keep talking to the server. */
static int start_sentinel(bench_server *srv) {
  snprintf(sentinel_paths[0], sizeof sentinel_paths[0], "%s/sentinel.conf", srv->dir);
  snprintf(sentinel_paths[1], sizeof sentinel_paths[1], "%s/sentinel.log", srv->dir);
  for (int attempt = 0; attempt < 5; attempt++) {
    int port = bench_free_port();
    FILE *f = fopen(sentinel_paths[0], "w");
    if (port <= 0 || !f) {
      if (f) fclose(f);
      continue;
    }
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\ndaemonize no\n"
            "sentinel resolve-hostnames no\nsentinel announce-ip 127.0.0.1\n"
            "sentinel monitor dlockbench 127.0.0.1 %d 1\n",
            port, srv->dir, sentinel_paths[1], srv->port);
    fclose(f);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int devnull = open("/dev/null", O_RDWR);
      if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
      }
      execlp("redis-server", "redis-server", sentinel_paths[0], "--sentinel", (char *)NULL);
      _exit(127);
    }
    sentinel_pid = pid;
    bench_track_child(pid);
    for (int i = 0; i < 100; i++) { /* at most 5 s */
      bench_sleep_ms(50);
      if (waitpid(pid, NULL, WNOHANG) == pid) break;
      struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
      redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
      redisReply *r = ctx && !ctx->err ? redisCommand(ctx, "SENTINEL get-master-addr-by-name dlockbench") : NULL;
      int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
      freeReplyObject(r);
      redisFree(ctx);
      if (ok) {
        snprintf(srv->url, sizeof srv->url, "redis-sentinel://127.0.0.1:%d/dlockbench", port);
        return 0;
      }
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    bench_untrack_child(pid);
    sentinel_pid = 0;
  }
  fprintf(stderr, "dlock-bench: the sentinel did not start (see %s)\n", sentinel_paths[1]);
  return -1;
}

/* Pin 'pid' (0: this process) to one CPU, or to all CPUs when cpu < 0. */
static int pin(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpu >= 0) {
    CPU_SET(cpu, &set);
  } else {
    for (long i = 0; i < ncpu && i < CPU_SETSIZE; i++) CPU_SET((int)i, &set);
  }
  return sched_setaffinity(pid, sizeof set, &set);
}

/* sched_setaffinity() on a PID moves one thread: move each of the server's
 * threads (main, bio, io) so that none runs on the client's CPU. */
static int pin_process(pid_t pid, int cpu) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
  DIR *d = opendir(path);
  if (!d) return pin(pid, cpu);
  int rc = 0;
  struct dirent *e;
  for (int n = 0; n < 1024 && (e = readdir(d)) != NULL; n++) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (pin((pid_t)atol(e->d_name), cpu) != 0) rc = -1;
  }
  closedir(d);
  return rc;
}

static void read_server_info(redisContext *ctx, bench_server *srv) {
  redisReply *r = bench_cmd(ctx, "INFO server");
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *p = strstr(r->str, "process_id:");
    if (p) srv->server_pid = atol(p + 11);
    p = strstr(r->str, "redis_version:");
    if (p) sscanf(p + 14, "%31[^\r\n]", srv->version);
  }
  freeReplyObject(r);
}

/* Pin by the server's own PID from INFO, so that the layout holds for a
 * server started by run-all.sh as well as for our own. */
static void apply_layout(const bench_opts *opts, bench_server *srv) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const char *want = opts->layout == BENCH_LAYOUT_CROSS ? "cross" : opts->layout == BENCH_LAYOUT_SAME ? "same" : "none";
  if (opts->layout == BENCH_LAYOUT_NONE) {
    if (srv->server_pid > 0) pin_process((pid_t)srv->server_pid, -1);
    pin(0, -1);
    snprintf(srv->layout_used, sizeof srv->layout_used, "none");
    return;
  }
  if (ncpu < 2 && opts->layout == BENCH_LAYOUT_CROSS) {
    snprintf(srv->layout_used, sizeof srv->layout_used, "none (1 CPU, cross impossible)");
    return;
  }
  int client_cpu = opts->layout == BENCH_LAYOUT_CROSS ? 1 : 0;
  if (srv->server_pid <= 0 || pin_process((pid_t)srv->server_pid, 0) != 0) {
    snprintf(srv->layout_used, sizeof srv->layout_used, "none (pinning redis failed: %s)",
             srv->server_pid <= 0 ? "pid unknown" : strerror(errno));
    pin(0, -1);
    return;
  }
  if (pin(0, client_cpu) != 0) {
    snprintf(srv->layout_used, sizeof srv->layout_used, "none (pinning client failed: %s)", strerror(errno));
    pin_process((pid_t)srv->server_pid, -1);
    return;
  }
  snprintf(srv->layout_used, sizeof srv->layout_used, "%s", want);
}

int bench_server_setup(const bench_opts *opts, bench_server *srv) {
  bench_main_pid = getpid();
  atexit(at_exit_cleanup);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  /* A peer closing its socket must not kill the bench. */
  signal(SIGPIPE, SIG_IGN);

  if (opts->url) {
    if (opts->sentinel) {
      fprintf(stderr, "dlock-bench: --sentinel starts its own server and sentinel; drop --url\n");
      return -1;
    }
    if (parse_url(opts->url, srv) != 0) return -1;
  } else if (start_own_server(srv) != 0) {
    return -1;
  } else if (opts->sentinel && start_sentinel(srv) != 0) {
    return -1;
  }
  redisContext *ctx = bench_connect();
  if (!ctx) return -1;
  read_server_info(ctx, srv);
  redisFree(ctx);
  apply_layout(opts, srv);
  return 0;
}

void bench_server_teardown(bench_server *srv) {
  if (sentinel_pid > 0) {
    pid_t spid = sentinel_pid;
    sentinel_pid = 0;
    kill(spid, SIGTERM);
    waitpid(spid, NULL, 0); /* a sentinel stops at once on SIGTERM */
    bench_untrack_child(spid);
    unlink(sentinel_paths[0]);
    unlink(sentinel_paths[1]);
  }
  if (srv->own_pid <= 0) return;
  pid_t pid = srv->own_pid;
  srv->own_pid = 0;
  kill(pid, SIGTERM);
  int exited = 0;
  for (int i = 0; i < 100 && !exited; i++) {
    if (waitpid(pid, NULL, WNOHANG) == pid)
      exited = 1;
    else
      bench_sleep_ms(50);
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  own_server_pid = 0;
  for (int i = 0; i < 3; i++) unlink(dir_paths[i]);
  rmdir(dir_paths[3]);
}

int bench_cmdstats_read(redisContext *ctx, bench_cmdstats *out) {
  memset(out, 0, sizeof *out);
  redisReply *r = bench_cmd(ctx, "INFO commandstats");
  if (!r || r->type != REDIS_REPLY_STRING) {
    freeReplyObject(r);
    return -1;
  }
  /* Lines: cmdstat_evalsha:calls=12,usec=...  */
  const char *p = r->str;
  for (int lines = 0; lines < 1000 && (p = strstr(p, "cmdstat_")) != NULL; lines++) {
    p += 8;
    char name[32];
    long long calls;
    double usec = 0;
    if (sscanf(p, "%31[^:]:calls=%lld,usec=%lf", name, &calls, &usec) >= 2 && out->count < BENCH_MAX_CMDS) {
      snprintf(out->name[out->count], sizeof out->name[0], "%s", name);
      out->usec[out->count] = usec;
      out->calls[out->count++] = calls;
    }
  }
  freeReplyObject(r);
  r = bench_cmd(ctx, "INFO cpu");
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *u = strstr(r->str, "used_cpu_user:");
    const char *s = strstr(r->str, "used_cpu_sys:");
    if (u && s) out->server_cpu_s = atof(u + 14) + atof(s + 13);
  }
  freeReplyObject(r);
  return 0;
}

static long long calls_of(const bench_cmdstats *st, const char *cmd) {
  for (int i = 0; i < st->count; i++)
    if (strcmp(st->name[i], cmd) == 0) return st->calls[i];
  return 0;
}

long long bench_cmdstats_delta(const bench_cmdstats *before, const bench_cmdstats *after, const char *cmd) {
  return calls_of(after, cmd) - calls_of(before, cmd);
}

double bench_cmdstats_usec_delta(const bench_cmdstats *before, const bench_cmdstats *after, const char *cmd) {
  double a = 0, b = 0;
  for (int i = 0; i < after->count; i++)
    if (strcmp(after->name[i], cmd) == 0) a = after->usec[i];
  for (int i = 0; i < before->count; i++)
    if (strcmp(before->name[i], cmd) == 0) b = before->usec[i];
  return a - b;
}

long long bench_cmdstats_delta_all(const bench_cmdstats *before, const bench_cmdstats *after) {
  long long total = 0;
  for (int i = 0; i < after->count; i++)
    if (strcmp(after->name[i], "info") != 0) total += after->calls[i] - calls_of(before, after->name[i]);
  return total;
}

long long bench_cmdstats_delta_wire(const bench_cmdstats *before, const bench_cmdstats *after) {
  /* Redis counts commands run by scripts in commandstats too. In the lock
   * runs measured here data commands are sent only by scripts, except the
   * bare clients' SET/DEL, which are measured separately. */
  static const char *const wire[] = {"evalsha",        "eval",         "ping",        "subscribe", "unsubscribe",
                                     "psubscribe",     "punsubscribe", "select",      "auth",      "hello",
                                     "client|setname", "client|id",    "script|load", "readonly"};
  long long total = 0;
  for (size_t i = 0; i < sizeof wire / sizeof wire[0]; i++) total += bench_cmdstats_delta(before, after, wire[i]);
  return total;
}
