/*
 * child.c - running a command the way "dlock run" and the scheduler
 * daemons ("dlock cron", "dlock every") do: looked up in PATH like a shell
 * would, built completely before fork() (only async-signal-safe calls after
 * it in a threaded process), in its own process group, and its leftovers
 * stopped when it ends, so that no part of a job outlives its lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* ---- Finding the program ---- */

int cli_resolve_program(const char *file, char *out, size_t len) {
  struct stat st;

  if (strchr(file, '/') != NULL) {
    if (stat(file, &st) != 0) {
      fprintf(stderr, "dlock: %s: %s\n", file, strerror(errno));
      return errno == ENOENT || errno == ENOTDIR ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
    }
    if (S_ISDIR(st.st_mode) || access(file, X_OK) != 0) {
      fprintf(stderr, "dlock: %s: %s\n", file, S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
      return CLI_EXIT_NOEXEC;
    }
    snprintf(out, len, "%s", file);
    return 0;
  }

  const char *path = getenv("PATH");
  if (path == NULL || path[0] == '\0') path = "/usr/local/bin:/usr/bin:/bin";
  int not_executable = 0;
  for (const char *p = path;;) {
    size_t dirlen = strcspn(p, ":");
    char candidate[4096];
    /* An empty PATH element means the current directory. */
    if (dirlen == 0)
      snprintf(candidate, sizeof candidate, "./%s", file);
    else
      snprintf(candidate, sizeof candidate, "%.*s/%s", (int)dirlen, p, file);
    if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(candidate, X_OK) == 0) {
        snprintf(out, len, "%s", candidate);
        return 0;
      }
      not_executable = 1;
    }
    if (p[dirlen] == '\0') break;
    p += dirlen + 1;
  }
  if (not_executable) {
    fprintf(stderr, "dlock: %s: permission denied\n", file);
    return CLI_EXIT_NOEXEC;
  }
  fprintf(stderr, "dlock: %s: command not found\n", file);
  return CLI_EXIT_NOTFOUND;
}

/* ---- What the child gets ---- */

void cli_child_free(cli_child *p) {
  free(p->argv);
  free(p->sh_argv);
  free(p->envp);
  for (int i = 0; p->env_own != NULL && p->env_own[i] != NULL; i++) free(p->env_own[i]);
  free(p->env_own);
  memset(p, 0, sizeof *p);
}

/* 1 when the environment entry 'e' sets a variable that 'env' replaces. */
static int replaced(const char *e, const char *const *env) {
  for (int i = 0; env[i] != NULL; i++) {
    size_t n = strcspn(env[i], "=") + 1;
    if (strncmp(e, env[i], n) == 0) return 1;
  }
  return 0;
}

int cli_child_build(cli_child *p, const char *program, char **cmd, int ncmd, int shell, const char *const *env) {
  size_t nenv = 0;
  size_t nset = 0;

  memset(p, 0, sizeof *p);
  for (char **e = environ; *e != NULL; e++) nenv++;
  while (env[nset] != NULL) nset++;
  p->argv = calloc((size_t)ncmd + 4, sizeof *p->argv);
  p->sh_argv = calloc((size_t)ncmd + 4, sizeof *p->sh_argv);
  p->envp = calloc(nenv + nset + 1, sizeof *p->envp);
  p->env_own = calloc(nset + 1, sizeof *p->env_own);
  if (p->argv == NULL || p->sh_argv == NULL || p->envp == NULL || p->env_own == NULL) return -1;
  for (size_t i = 0; i < nset; i++) {
    p->env_own[i] = strdup(env[i]);
    if (p->env_own[i] == NULL) return -1;
  }

  snprintf(p->path, sizeof p->path, "%s", program);
  if (shell) {
    p->argv[0] = (char *)"sh";
    p->argv[1] = (char *)"-c";
    p->argv[2] = cmd[0];
  } else {
    for (int i = 0; i < ncmd; i++) p->argv[i] = cmd[i];
  }
  /* What a shell does with an executable file that is not a binary. */
  p->sh_argv[0] = (char *)"sh";
  p->sh_argv[1] = p->path;
  for (int i = 1; p->argv[i] != NULL; i++) p->sh_argv[i + 1] = p->argv[i];

  size_t n = 0;
  for (char **e = environ; *e != NULL; e++) {
    if (!replaced(*e, env)) p->envp[n++] = *e;
  }
  for (size_t i = 0; i < nset; i++) p->envp[n++] = p->env_own[i];
  return 0;
}

/* ---- Starting it ---- */

/* The child's side of fork(): async-signal-safe calls only. */
static void child_exec(const cli_child *p, const sigset_t *mask, int tty, int errfd, pid_t parent) {
  setpgid(0, 0);
  /* If dlock itself is killed (SIGKILL, OOM killer) nobody renews the lease
   * any more: the command must not run on unprotected. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(CLI_EXIT_SOFTWARE); /* dlock died before prctl() took effect */
  if (tty >= 0) tcsetpgrp(tty, getpid());            /* as the parent does: whoever runs first */
  sigprocmask(SIG_SETMASK, mask, NULL);
  execve(p->path, p->argv, p->envp);
  int err = errno;
  if (err == ENOEXEC) {
    execve("/bin/sh", p->sh_argv, p->envp);
    err = errno;
  }
  (void)!write(errfd, &err, sizeof err);
  _exit(err == ENOENT ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC);
}

pid_t cli_child_spawn(const cli_child *p, const sigset_t *mask, int tty, const char *shown) {
  int errpipe[2];
  int err = 0;

  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    perror("dlock: pipe");
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("dlock: fork");
    close(errpipe[0]);
    close(errpipe[1]);
    return -1;
  }
  if (pid == 0) child_exec(p, mask, tty, errpipe[1], parent);
  /* Both sides set the group, so that neither a signal we forward nor the
   * child's own exec can run ahead of it. */
  setpgid(pid, pid);
  if (tty >= 0) tcsetpgrp(tty, pid);
  close(errpipe[1]);
  /* EOF: execve() succeeded and closed the pipe (O_CLOEXEC). */
  ssize_t n;
  do {
    n = read(errpipe[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  if (n == (ssize_t)sizeof err) fprintf(stderr, "dlock: %s: %s\n", shown, strerror(err));
  return pid;
}

/* ---- The guardian ---- */

static int64_t guard_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* dlock_mono_now()'s clock */
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The guardian's side of fork(): async-signal-safe calls only. It stops the
 * group (SIGTERM and SIGCONT, then SIGKILL) when dlock dies (EOF on the
 * pipe: SIGKILL after the grace, or at the deadline if that comes first),
 * and, without a word from dlock, at the times of the last deadline dlock
 * told it (SIGTERM at term_at, SIGKILL at kill_at): a stopped or starved
 * dlock renews nothing, and its command must not outlive the lease. */
static void guard_main(int fd, pid_t pgid, int64_t grace_ms) {
  struct sigaction ignore;
  memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  /* Outside dlock's session and deaf to what is aimed at dlock: it must
   * outlive dlock to do its work. */
  static const int deaf[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
  for (size_t i = 0; i < sizeof deaf / sizeof deaf[0]; i++) sigaction(deaf[i], &ignore, NULL);
  setsid();
  /* Hold none of dlock's files: no Redis sockets, and no pipe of a caller
   * that waits for dlock's output to end. */
  int null = open("/dev/null", O_RDWR);
  for (int i = 0; i < 3 && null >= 0; i++) dup2(null, i);
  for (int i = 3; i < 4096; i++)
    if (i != fd) close(i);
  int64_t term_at = 0, kill_at = 0; /* 0: no deadline told */
  int termed = 0, orphaned = 0;
  for (;;) {
    int64_t now = guard_now();
    if (!termed && (orphaned || (term_at != 0 && now >= term_at))) {
      kill(-pgid, SIGTERM);
      kill(-pgid, SIGCONT);
      termed = 1;
    }
    if ((kill_at != 0 && now >= kill_at) || (orphaned && kill(-pgid, 0) != 0)) {
      kill(-pgid, SIGKILL);
      if (orphaned) _exit(0);
      /* dlock lives (stopped, frozen): keep the pipe open for its word. */
      term_at = kill_at = 0;
      continue;
    }
    int64_t wait = -1;
    if (!termed && term_at != 0) wait = term_at - now;
    if (kill_at != 0 && (wait < 0 || kill_at - now < wait)) wait = kill_at - now;
    if (orphaned && (wait < 0 || wait > 50)) wait = 50; /* watching for the group to go */
    if (wait > 60000) wait = 60000;
    if (orphaned) {
      struct timespec ts = {0, (long)(wait > 0 ? wait : 1) * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)(wait < 0 ? -1 : wait + 1)) <= 0) continue;
    int64_t msg[2];
    ssize_t n = read(fd, msg, sizeof msg);
    if (n < 0 && errno == EINTR) continue;
    if (n == (ssize_t)sizeof msg && msg[0] < 0) _exit(0); /* dlock is alive and done with the group */
    if (n == (ssize_t)sizeof msg) {
      term_at = msg[0];
      kill_at = msg[1];
    } else {
      orphaned = 1; /* EOF: dlock died without a word */
      int64_t k = guard_now() + grace_ms;
      if (kill_at == 0 || k < kill_at) kill_at = k;
    }
  }
}

void cli_guard_start(cli_guard *g, pid_t pgid, int64_t grace_ms) {
  int fds[2];
  g->pid = -1;
  g->fd = -1;
  g->told = 0;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    perror("dlock: guardian pipe");
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    guard_main(fds[0], pgid, grace_ms);
  }
  close(fds[0]);
  if (pid < 0) {
    perror("dlock: guardian fork");
    close(fds[1]);
    return;
  }
  g->pid = pid;
  g->fd = fds[1];
}

void cli_guard_deadline(cli_guard *g, int64_t deadline, int64_t grace_ms) {
  if (g->pid <= 0 || deadline == g->told) return;
  /* One write of 16 bytes (less than PIPE_BUF): never torn. */
  int64_t msg[2] = {deadline > 0 ? deadline - grace_ms : 0, deadline > 0 ? deadline : 0};
  if (msg[0] <= 0 && deadline > 0) msg[0] = 1;
  if (write(g->fd, msg, sizeof msg) == (ssize_t)sizeof msg) g->told = deadline;
}

void cli_guard_stop(cli_guard *g) {
  if (g->pid <= 0) return;
  int64_t msg[2] = {-1, -1};
  (void)!write(g->fd, msg, sizeof msg);
  close(g->fd);
  while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  g->pid = -1;
  g->fd = -1;
}

/* ---- When it has ended ---- */

int cli_exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return CLI_EXIT_SOFTWARE;
}

const char *cli_signame(int sig) {
  switch (sig) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  case SIGKILL:
    return "SIGKILL";
  }
  return "a signal";
}

/* Reap what has ended of ours: any child when we have only the one job
 * ('any'), else only members of the group 'pgid', so that the children of
 * other threads keep their statuses for them. */
static void reap_quietly(pid_t pgid, int any) {
  int st;
  while (waitpid(any ? -1 : -pgid, &st, WNOHANG) > 0)
    ;
}

/* Wait up to 'ms': on the signalfd when there is one (reading away what
 * comes, SIGCHLD included), else just sleep. */
static void pause_ms(int sigfd, int ms) {
  struct signalfd_siginfo si;

  if (sigfd < 0) {
    poll(NULL, 0, ms);
    return;
  }
  struct pollfd pfd = {sigfd, POLLIN, 0};
  poll(&pfd, 1, ms);
  while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
    ;
}

void cli_stop_group(pid_t pgid, int64_t grace_ms, int quiet, int sigfd) {
  int any = sigfd >= 0;

  /* Members that got the same signal as the child may still be on their
   * way out (or be orphans waiting for us to reap them): a moment first. */
  for (int i = 0; i < 20; i++) {
    reap_quietly(pgid, any);
    if (kill(-pgid, 0) != 0) return;
    pause_ms(sigfd, 10);
  }
  if (!quiet) cli_log("warning", "group_left", NULL, "the command left processes in its group; sending SIGTERM");
  kill(-pgid, SIGTERM);
  kill(-pgid, SIGCONT); /* a stopped process would never see the SIGTERM */
  dlock_mono_ms kill_at = dlock_mono_now() + grace_ms;
  dlock_mono_ms give_up = kill_at + 10000;
  int killed = 0;
  while (kill(-pgid, 0) == 0) {
    if (!killed && dlock_mono_now() >= kill_at) {
      kill(-pgid, SIGKILL);
      killed = 1;
    }
    if (dlock_mono_now() >= give_up) {
      cli_log("error", "error", NULL, "processes of group %ld survive SIGKILL; giving up", (long)pgid);
      return;
    }
    pause_ms(sigfd, 20);
    reap_quietly(pgid, any);
  }
}
