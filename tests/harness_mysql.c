/*
 * harness_mysql.c - a private MariaDB server per test (see harness_mysql.h).
 */
#include "harness_mysql.h"

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

#define THM_MAX 4
static th_my *live[THM_MAX];
static void (*prev_handler[NSIG])(int);

static void kill_live(void) {
  for (int i = 0; i < THM_MAX; i++) {
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

static void on_signal(int sig) {
  for (int i = 0; i < THM_MAX; i++)
    if (live[i] && live[i]->pid > 0) kill(live[i]->pid, SIGKILL);
  void (*prev)(int) = prev_handler[sig];
  if (prev && prev != SIG_DFL && prev != SIG_IGN && prev != SIG_ERR) {
    prev(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void track(th_my *p, int add) {
  static int hooked;
  if (!hooked) {
    hooked = 1;
    atexit(kill_live);
    int sigs[] = {SIGINT, SIGTERM, SIGALRM, SIGABRT};
    for (int i = 0; i < 4; i++) prev_handler[sigs[i]] = signal(sigs[i], on_signal);
  }
  for (int i = 0; i < THM_MAX; i++)
    if (add && live[i] == p) return;
  for (int i = 0; i < THM_MAX; i++) {
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

int th_my_available(char *why, size_t len) {
  if (access("/usr/sbin/mariadbd", X_OK) != 0 || access("/usr/bin/mariadb-install-db", X_OK) != 0 ||
      access("/usr/bin/mariadb", X_OK) != 0) {
    snprintf(why, len, "mariadbd, mariadb-install-db or mariadb is not installed (Debian: mariadb-server)");
    return 0;
  }
  if (geteuid() == 0 && !getpwnam("mysql")) {
    snprintf(why, len, "running as root and there is no 'mysql' user to run the server as");
    return 0;
  }
  return 1;
}

/* argv[0] run as the mysql user when we are root. TH_MY_PRELOAD (a test's
 * libfaketime): preloaded into mariadbd alone. */
static pid_t spawn(const char *const argv[], const char *log) {
  const char *pre = getenv("TH_MY_PRELOAD");
  size_t a0 = strlen(argv[0]);
  int server = a0 >= 9 && !strcmp(argv[0] + a0 - 9, "/mariadbd");
  return th_proc_spawn_as("mysql", argv, log, pre && server ? pre : NULL);
}

int th_my_sql(const th_my *p, char *out, size_t outlen, const char *fmt, ...) {
  char sql[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sql, sizeof sql, fmt, ap);
  va_end(ap);
  char path[300];
  snprintf(path, sizeof path, "%s/q.sql", p->dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(sql, f);
  fclose(f);
  char cmd[800];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/mariadb --no-defaults -h127.0.0.1 -P%d -uroot -N -B --connect-timeout=5 < '%s' 2>&1", p->port,
           path);
  FILE *pp = popen(cmd, "r");
  if (!pp) return -1;
  size_t n = 0;
  if (out && outlen) {
    n = fread(out, 1, outlen - 1, pp);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
  } else {
    char buf[512];
    while (fread(buf, 1, sizeof buf, pp) > 0) {
    }
  }
  int st = pclose(pp);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int launch(th_my *p) {
  char data[300], sock[300], port[32], log[300], pidf[300], out[300];
  snprintf(data, sizeof data, "--datadir=%s/data", p->dir);
  snprintf(sock, sizeof sock, "--socket=%s/s", p->dir);
  snprintf(port, sizeof port, "--port=%d", p->port);
  snprintf(log, sizeof log, "--log-error=%s/server.log", p->dir);
  snprintf(pidf, sizeof pidf, "--pid-file=%s/pid", p->dir);
  const char *argv[] = {"/usr/sbin/mariadbd",
                        "--no-defaults",
                        data,
                        sock,
                        port,
                        "--bind-address=127.0.0.1",
                        log,
                        pidf,
                        "--skip-name-resolve",
                        "--innodb-buffer-pool-size=16M",
                        "--innodb-log-file-size=8M",
                        "--max-connections=100",
                        "--performance-schema=OFF",
                        NULL};
  snprintf(out, sizeof out, "%s/stderr.log", p->dir);
  p->pid = spawn(argv, out);
  if (p->pid < 0) return -1;
  track(p, 1);
  for (int i = 0; i < 300; i++) { /* up to 30 s */
    if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
      p->pid = 0;
      return -1;
    }
    char one[64];
    if (th_my_sql(p, one, sizeof one, "SELECT 1") == 0 && !strcmp(one, "1")) return 0;
    th_sleep_ms(100);
  }
  return -1;
}

int th_my_start(th_my *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->dir, sizeof p->dir, "/tmp/dlock-my-XXXXXX");
  if (!mkdtemp(p->dir)) {
    fprintf(stderr, "harness_mysql: mkdtemp: %s\n", strerror(errno));
    p->dir[0] = '\0';
    return -1;
  }
  track(p, 1);
  if (geteuid() == 0) {
    struct passwd *pw = getpwnam("mysql");
    if (!pw || chown(p->dir, pw->pw_uid, pw->pw_gid) != 0) {
      fprintf(stderr, "harness_mysql: cannot hand %s to the mysql user\n", p->dir);
      th_my_stop(p);
      return -1;
    }
  }
  chmod(p->dir, 0700);
  char data[300], log[300];
  snprintf(data, sizeof data, "--datadir=%s/data", p->dir);
  snprintf(log, sizeof log, "%s/install.log", p->dir);
  const char *argv[] = {"/usr/bin/mariadb-install-db",
                        "--no-defaults",
                        data,
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                        "--user=mysql",
                        NULL};
  pid_t pid = spawn(argv, log);
  int st = -1;
  if (pid > 0) {
    for (int i = 0; i < 1200; i++) { /* up to 120 s */
      if (waitpid(pid, &st, WNOHANG) == pid) break;
      if (i == 1199) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
      }
      th_sleep_ms(100);
    }
  }
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    /* Its log goes with the temp dir: show its end first. */
    fprintf(stderr, "harness_mysql: mariadb-install-db failed (%s %d); the end of %s:\n",
            WIFEXITED(st) ? "exit" : "signal",
            WIFEXITED(st)     ? WEXITSTATUS(st)
            : WIFSIGNALED(st) ? WTERMSIG(st)
                              : -1,
            log);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "tail -n 15 '%s' >&2", log);
    if (system(cmd) != 0) {
    }
    th_my_stop(p);
    return -1;
  }
  for (int tries = 0; tries < 10; tries++) {
    p->port = th_free_port();
    if (launch(p) == 0) break;
    if (p->pid > 0) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      p->pid = 0;
    }
  }
  if (p->pid <= 0) {
    fprintf(stderr, "harness_mysql: mariadbd did not start, log:\n");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "tail -20 '%s/server.log' >&2", p->dir);
    if (system(cmd) != 0) {
    }
    th_my_stop(p);
    return -1;
  }
  char out[512];
  if (th_my_sql(p, out, sizeof out,
                "CREATE DATABASE dlock; CREATE USER 'dlock'@'127.0.0.1' IDENTIFIED BY '%s'; "
                "GRANT ALL ON dlock.* TO 'dlock'@'127.0.0.1';",
                TH_MY_PASSWORD) != 0) {
    fprintf(stderr, "harness_mysql: creating the test user failed: %s\n", out);
    th_my_stop(p);
    return -1;
  }
  snprintf(p->url, sizeof p->url, "mysql://dlock:%s@127.0.0.1:%d/dlock", TH_MY_PASSWORD_URL, p->port);
  return 0;
}

int th_my_suite_start(th_my *p, char *why, size_t len) {
  if (!th_my_available(why, len)) return 0;
  if (th_my_start(p) != 0) {
    snprintf(why, len, "the MariaDB server did not start (see above)");
    return 0;
  }
  return 1;
}

struct dlock_client *th_my_client(const th_my *p, const char *more) {
  char url[900];
  snprintf(url, sizeof url, "%s%s", p->url, more ? more : "");
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) return NULL;
  return c;
}

static void stop_pid(th_my *p, int sig) { th_proc_stop(&p->pid, sig, 20000); }

void th_my_stop(th_my *p) {
  stop_pid(p, SIGTERM);
  if (p->dir[0]) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
    if (system(cmd) != 0) {
    }
    p->dir[0] = '\0';
  }
  track(p, 0);
}

void th_my_halt(th_my *p, int kill9) { stop_pid(p, kill9 ? SIGKILL : SIGTERM); }

int th_my_relaunch(th_my *p) {
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
