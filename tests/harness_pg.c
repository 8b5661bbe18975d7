/*
 * harness_pg.c - a private PostgreSQL server per test (see harness_pg.h).
 */
#include "harness_pg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "harness_proc.h"

#define THP_MAX 8
static th_pg *live[THP_MAX];
#define THB_MAX 4
static th_pgbouncer *live_bouncers[THB_MAX];

static void kill_live(void) {
  for (int i = 0; i < THP_MAX; i++) {
    if (!live[i]) continue;
    if (live[i]->pid > 0) {
      kill(live[i]->pid, SIGKILL);
      waitpid(live[i]->pid, NULL, 0);
      live[i]->pid = 0;
    }
    if (live[i]->dir[0]) {
      char cmd[600];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", live[i]->dir);
      if (system(cmd) != 0) {
      }
      live[i]->dir[0] = '\0';
    }
  }
}

static void (*prev_handler[NSIG])(int);

static void on_signal(int sig) {
  for (int i = 0; i < THP_MAX; i++)
    if (live[i] && live[i]->pid > 0) kill(live[i]->pid, SIGKILL);
  for (int i = 0; i < THB_MAX; i++)
    if (live_bouncers[i] && live_bouncers[i]->pid > 0) kill(live_bouncers[i]->pid, SIGKILL);
  /* Then whatever was there before (the Redis harness kills its servers). */
  void (*prev)(int) = prev_handler[sig];
  if (prev && prev != SIG_DFL && prev != SIG_IGN && prev != SIG_ERR) {
    prev(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void track(th_pg *p, int add) {
  static int hooked;
  if (!hooked) {
    hooked = 1;
    atexit(kill_live);
    int sigs[] = {SIGINT, SIGTERM, SIGALRM, SIGABRT};
    for (int i = 0; i < 4; i++) prev_handler[sigs[i]] = signal(sigs[i], on_signal);
  }
  for (int i = 0; i < THP_MAX; i++)
    if (add && live[i] == p) return;
  for (int i = 0; i < THP_MAX; i++) {
    if (add && !live[i]) {
      live[i] = p;
      return;
    }
    if (!add && live[i] == p) {
      live[i] = NULL;
      return;
    }
  }
}

static int find_bindir(char *out, size_t len) {
  DIR *d = opendir("/usr/lib/postgresql");
  if (!d) return -1;
  struct dirent *e;
  int best = -1;
  while ((e = readdir(d)) != NULL) {
    int v = atoi(e->d_name);
    char path[300];
    snprintf(path, sizeof path, "/usr/lib/postgresql/%s/bin/postgres", e->d_name);
    if (v > best && access(path, X_OK) == 0) {
      best = v;
      snprintf(out, len, "/usr/lib/postgresql/%s/bin", e->d_name);
    }
  }
  closedir(d);
  return best < 0 ? -1 : 0;
}

int th_pg_available(char *why, size_t len) {
  char b[256];
  if (find_bindir(b, sizeof b) != 0) {
    snprintf(why, len, "no PostgreSQL server under /usr/lib/postgresql/*/bin (Debian: postgresql)");
    return 0;
  }
  if (access("/usr/bin/psql", X_OK) != 0) {
    snprintf(why, len, "psql is not installed (Debian: postgresql-client)");
    return 0;
  }
  if (geteuid() == 0 && !getpwnam("postgres")) {
    snprintf(why, len, "running as root and there is no 'postgres' user to run the server as");
    return 0;
  }
  return 1;
}

/* argv[0] run as the postgres user when we are root. */
static pid_t spawn(const char *const argv[], const char *log) {
  /* TH_PG_PRELOAD (a test's libfaketime): preloaded into the server alone. */
  const char *pre = getenv("TH_PG_PRELOAD");
  size_t a0 = strlen(argv[0]);
  int server = a0 >= 9 && !strcmp(argv[0] + a0 - 9, "/postgres");
  return th_proc_spawn_as("postgres", argv, log, pre && server ? pre : NULL);
}

static int psql_ok(const th_pg *p) {
  char out[64];
  return th_pg_sql(p, NULL, out, sizeof out, "SELECT 1") == 0 && strcmp(out, "1") == 0;
}

static int launch(th_pg *p) {
  char postgres[300], data[300], port[16], log[300];
  snprintf(postgres, sizeof postgres, "%s/postgres", p->bindir);
  snprintf(data, sizeof data, "%s/data", p->dir);
  snprintf(port, sizeof port, "%d", p->port);
  snprintf(log, sizeof log, "%s/server.log", p->dir);
  const char *argv[64];
  int n = 0;
  argv[n++] = postgres;
  argv[n++] = "-D";
  argv[n++] = data;
  argv[n++] = "-p";
  argv[n++] = port;
  argv[n++] = "-k";
  argv[n++] = p->dir;
  argv[n++] = "-c";
  argv[n++] = "listen_addresses=127.0.0.1";
  argv[n++] = "-c";
  argv[n++] = "fsync=off";
  argv[n++] = "-c";
  argv[n++] = "max_connections=60";
  argv[n++] = "-c";
  argv[n++] = "shared_buffers=16MB";
  char extra[2048];
  snprintf(extra, sizeof extra, "%s", p->extra);
  for (char *tok = strtok(extra, " "); tok && n < 60; tok = strtok(NULL, " ")) {
    argv[n++] = "-c";
    argv[n++] = tok;
  }
  argv[n] = NULL;
  p->pid = spawn(argv, log);
  if (p->pid < 0) return -1;
  track(p, 1);
  for (int i = 0; i < 300; i++) { /* up to 30 s */
    if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
      p->pid = 0;
      return -1;
    }
    if (psql_ok(p)) return 0;
    th_sleep_ms(100);
  }
  return -1;
}

int th_pg_start(th_pg *p, const char *extra) {
  memset(p, 0, sizeof *p);
  if (extra) snprintf(p->extra, sizeof p->extra, "%s", extra);
  if (find_bindir(p->bindir, sizeof p->bindir) != 0) {
    fprintf(stderr, "harness_pg: no PostgreSQL under /usr/lib/postgresql\n");
    return -1;
  }
  snprintf(p->dir, sizeof p->dir, "/tmp/dlock-pg-XXXXXX");
  if (!mkdtemp(p->dir)) {
    fprintf(stderr, "harness_pg: mkdtemp: %s\n", strerror(errno));
    p->dir[0] = '\0';
    return -1;
  }
  track(p, 1);
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("postgres");
    if (!pw || chown(p->dir, pw->pw_uid, pw->pw_gid) != 0) {
      fprintf(stderr, "harness_pg: cannot hand %s to the postgres user\n", p->dir);
      th_pg_stop(p);
      return -1;
    }
  }
  chmod(p->dir, 0700);
  char initdb[300], data[300], log[300];
  snprintf(initdb, sizeof initdb, "%s/initdb", p->bindir);
  snprintf(data, sizeof data, "%s/data", p->dir);
  snprintf(log, sizeof log, "%s/initdb.log", p->dir);
  const char *argv[] = {initdb,      "-D", data,   "-U",         "postgres", "--auth=trust",
                        "--no-sync", "-E", "UTF8", "--locale=C", NULL};
  pid_t pid = spawn(argv, log);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "harness_pg: initdb failed, see %s\n", log);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cat '%s' >&2", log);
    if (system(cmd) != 0) {
    }
    th_pg_stop(p);
    return -1;
  }
  for (int tries = 0; tries < 20; tries++) {
    p->port = th_free_port();
    snprintf(p->url, sizeof p->url, "postgresql://postgres@127.0.0.1:%d/postgres", p->port);
    if (launch(p) == 0) return 0;
    if (p->pid > 0) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      p->pid = 0;
    }
  }
  fprintf(stderr, "harness_pg: postgres did not start, log:\n");
  char cmd[400];
  snprintf(cmd, sizeof cmd, "tail -20 '%s/server.log' >&2", p->dir);
  if (system(cmd) != 0) {
  }
  th_pg_stop(p);
  return -1;
}

static void stop_pid(th_pg *p, int sig) { th_proc_stop(&p->pid, sig, 5000); }

void th_pg_stop(th_pg *p) {
  stop_pid(p, SIGINT);
  if (p->dir[0]) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
    if (system(cmd) != 0) {
    }
    p->dir[0] = '\0';
  }
  track(p, 0);
}

void th_pg_halt(th_pg *p, int kill9) { stop_pid(p, kill9 ? SIGKILL : SIGINT); }

int th_pg_relaunch(th_pg *p) {
  for (int i = 0; i < 20; i++) {
    if (launch(p) == 0) return 0;
    if (p->pid > 0) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      p->pid = 0;
    }
    th_sleep_ms(200);
  }
  return -1;
}

int th_pg_start_standby(th_pg *s, const th_pg *primary) {
  memset(s, 0, sizeof *s);
  snprintf(s->bindir, sizeof s->bindir, "%s", primary->bindir);
  snprintf(s->extra, sizeof s->extra, "%s", primary->extra);
  snprintf(s->dir, sizeof s->dir, "/tmp/dlock-pgs-XXXXXX");
  if (!mkdtemp(s->dir)) {
    fprintf(stderr, "harness_pg: mkdtemp: %s\n", strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  track(s, 1);
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("postgres");
    if (!pw || chown(s->dir, pw->pw_uid, pw->pw_gid) != 0) {
      fprintf(stderr, "harness_pg: cannot hand %s to the postgres user\n", s->dir);
      th_pg_stop(s);
      return -1;
    }
  }
  chmod(s->dir, 0700);
  char bb[300], data[300], log[300], port[16];
  snprintf(bb, sizeof bb, "%s/pg_basebackup", s->bindir);
  snprintf(data, sizeof data, "%s/data", s->dir);
  snprintf(log, sizeof log, "%s/basebackup.log", s->dir);
  snprintf(port, sizeof port, "%d", primary->port);
  const char *argv[] = {bb,   "-D",       data, "-h", "127.0.0.1", "-p",        port,
                        "-U", "postgres", "-R", "-X", "stream",    "--no-sync", NULL};
  pid_t pid = spawn(argv, log);
  int st = -1;
  if (pid > 0) {
    for (int i = 0; i < 1200; i++) { /* up to 60 s */
      if (waitpid(pid, &st, WNOHANG) == pid) break;
      if (i == 1199) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
      }
      th_sleep_ms(50);
    }
  }
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    fprintf(stderr, "harness_pg: pg_basebackup failed, see %s\n", log);
    th_pg_stop(s);
    return -1;
  }
  for (int tries = 0; tries < 20; tries++) {
    s->port = th_free_port();
    snprintf(s->url, sizeof s->url, "postgresql://postgres@127.0.0.1:%d/postgres", s->port);
    if (launch(s) == 0) return 0;
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      s->pid = 0;
    }
  }
  fprintf(stderr, "harness_pg: the standby did not start, see %s/server.log\n", s->dir);
  th_pg_stop(s);
  return -1;
}

int th_pg_restart(th_pg *p, int kill9, long down_ms) {
  stop_pid(p, kill9 ? SIGKILL : SIGINT);
  if (kill9) th_sleep_ms(300); /* the backends notice the postmaster's death */
  th_sleep_ms(down_ms);
  for (int i = 0; i < 50; i++) {
    if (launch(p) == 0) return 0;
    if (p->pid > 0) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      p->pid = 0;
    }
    th_sleep_ms(200);
  }
  return -1;
}

int th_pg_sql(const th_pg *p, const char *user, char *out, size_t outlen, const char *fmt, ...) {
  char sql[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sql, sizeof sql, fmt, ap);
  va_end(ap);
  char path[300];
  snprintf(path, sizeof path, "%s/query-XXXXXX", p->dir[0] ? "/tmp" : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  size_t n = strlen(sql);
  if (write(fd, sql, n) != (ssize_t)n) {
    close(fd);
    unlink(path);
    return -1;
  }
  close(fd);
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "PGCONNECT_TIMEOUT=5 psql -X -q -A -t -v ON_ERROR_STOP=1 -h '%s' -p %d -U '%s' -d postgres -f '%s' 2>&1",
           p->dir, p->port, user ? user : "postgres", path);
  FILE *f = popen(cmd, "r");
  if (!f) {
    unlink(path);
    return -1;
  }
  size_t got = 0;
  if (out && outlen) {
    got = fread(out, 1, outlen - 1, f);
    out[got] = '\0';
    while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == ' ')) out[--got] = '\0';
  } else {
    char sink[512];
    while (fread(sink, 1, sizeof sink, f) > 0) {
    }
  }
  int st = pclose(f);
  unlink(path);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- PgBouncer ---- */

static void kill_bouncers(void) {
  for (int i = 0; i < THB_MAX; i++)
    if (live_bouncers[i] && live_bouncers[i]->pid > 0) {
      kill(live_bouncers[i]->pid, SIGKILL);
      waitpid(live_bouncers[i]->pid, NULL, 0);
      live_bouncers[i]->pid = 0;
    }
}

static void track_bouncer(th_pgbouncer *b, int add) {
  static int hooked;
  if (!hooked) {
    hooked = 1;
    atexit(kill_bouncers);
  }
  for (int i = 0; i < THB_MAX; i++) {
    if (add && !live_bouncers[i]) {
      live_bouncers[i] = b;
      return;
    }
    if (!add && live_bouncers[i] == b) {
      live_bouncers[i] = NULL;
      return;
    }
  }
}

int th_pgbouncer_available(char *why, size_t len) {
  if (access("/usr/sbin/pgbouncer", X_OK) != 0) {
    snprintf(why, len, "pgbouncer is not installed (Debian: pgbouncer)");
    return 0;
  }
  return 1;
}

int th_pgbouncer_start(th_pgbouncer *b, const th_pg *pg, const char *pool_mode) {
  memset(b, 0, sizeof *b);
  snprintf(b->dir, sizeof b->dir, "/tmp/dlock-pgb-XXXXXX");
  if (!mkdtemp(b->dir)) {
    b->dir[0] = '\0';
    return -1;
  }
  b->port = th_free_port();
  char path[400];
  snprintf(path, sizeof path, "%s/users.txt", b->dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "\"postgres\" \"\"\n");
  fclose(f);
  snprintf(path, sizeof path, "%s/pgbouncer.ini", b->dir);
  f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "[databases]\npostgres = host=127.0.0.1 port=%d dbname=postgres\n"
          "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n"
          "auth_type = trust\nauth_file = %s/users.txt\npool_mode = %s\nmax_client_conn = 200\n"
          "default_pool_size = 4\nlogfile = %s/pgbouncer.log\npidfile =\n"
          "ignore_startup_parameters = extra_float_digits,options\n",
          pg->port, b->port, b->dir, pool_mode, b->dir);
  fclose(f);
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("postgres");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "chown -R %d:%d '%s'", pw ? (int)pw->pw_uid : 0, pw ? (int)pw->pw_gid : 0, b->dir);
    if (!pw || system(cmd) != 0) return -1;
  }
  char logp[400];
  snprintf(logp, sizeof logp, "%s/stdout.log", b->dir);
  const char *argv[] = {"/usr/sbin/pgbouncer", path, NULL};
  b->pid = spawn(argv, logp);
  if (b->pid < 0) return -1;
  track_bouncer(b, 1);
  snprintf(b->url, sizeof b->url, "postgresql://postgres@127.0.0.1:%d/postgres?sslmode=disable", b->port);
  for (int i = 0; i < 100; i++) {
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "PGCONNECT_TIMEOUT=3 psql -X -q -A -t -h 127.0.0.1 -p %d -U postgres -d postgres -c 'SELECT 1' "
             ">/dev/null 2>&1",
             b->port);
    if (system(cmd) == 0) return 0;
    if (waitpid(b->pid, NULL, WNOHANG) == b->pid) {
      b->pid = 0;
      break;
    }
    th_sleep_ms(100);
  }
  fprintf(stderr, "harness_pg: pgbouncer did not start, see %s\n", logp);
  th_pgbouncer_stop(b);
  return -1;
}

void th_pgbouncer_stop(th_pgbouncer *b) {
  if (b->pid > 0) {
    kill(b->pid, SIGTERM);
    for (int i = 0; i < 250 && b->pid > 0; i++) {
      if (waitpid(b->pid, NULL, WNOHANG) == b->pid)
        b->pid = 0;
      else
        th_sleep_ms(20);
    }
    if (b->pid > 0) {
      kill(b->pid, SIGKILL);
      waitpid(b->pid, NULL, 0);
      b->pid = 0;
    }
  }
  track_bouncer(b, 0);
  if (b->dir[0]) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b->dir);
    if (system(cmd) != 0) {
    }
    b->dir[0] = '\0';
  }
}

int th_pg_suite_start(th_pg *p, char *why, size_t len) {
  if (!th_pg_available(why, len)) return 0;
  if (th_pg_start(p, NULL) != 0) {
    snprintf(why, len, "the PostgreSQL server did not start");
    return 0;
  }
  return 1;
}

struct dlock_client *th_pg_client(const th_pg *p, const char *schema, const char *more) {
  char url[900];
  snprintf(url, sizeof url, "%s?dlock_schema=%s%s", p->url, schema, more ? more : "");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

int th_pg_wait_active(const th_pg *p, const char *text, long timeout_ms) {
  long long until = th_now_ms() + timeout_ms;
  do {
    char out[64];
    if (th_pg_sql(p, NULL, out, sizeof out,
                  "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
                  "AND position('%s' in query) > 0",
                  text) == 0 &&
        atoi(out) > 0)
      return 0;
    th_sleep_ms(50);
  } while (th_now_ms() < until);
  return -1;
}
