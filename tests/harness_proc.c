/*
 * harness_proc.c - server processes under a service user (harness_proc.h).
 */
#include "harness_proc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

pid_t th_proc_spawn_as(const char *user, const char *const argv[], const char *log, const char *preload) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (log) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  setsid(); /* the terminal's ^C reaches us, and we stop the server */
  /* Preloaded after setpriv, so that what it creates belongs to 'user'. */
  char pre_env[600] = "";
  if (preload) snprintf(pre_env, sizeof pre_env, "LD_PRELOAD=%s", preload);
  if (geteuid() == 0) {
    char reuid[64], regid[64];
    snprintf(reuid, sizeof reuid, "--reuid=%s", user);
    snprintf(regid, sizeof regid, "--regid=%s", user);
    const char *args[64];
    int n = 0;
    args[n++] = "setpriv";
    args[n++] = reuid;
    args[n++] = regid;
    args[n++] = "--init-groups";
    if (pre_env[0]) {
      args[n++] = "env";
      args[n++] = pre_env;
    }
    for (int i = 0; argv[i] && n < 63; i++) args[n++] = argv[i];
    args[n] = NULL;
    execvp("setpriv", (char *const *)args);
  } else {
    if (preload) setenv("LD_PRELOAD", preload, 1);
    execv(argv[0], (char *const *)argv);
  }
  _exit(127);
}

void th_proc_stop(pid_t *pid, int sig, long grace_ms) {
  if (*pid <= 0) return;
  kill(*pid, SIGCONT);
  kill(*pid, sig);
  for (long waited = 0; waited < grace_ms; waited += 20) {
    if (waitpid(*pid, NULL, WNOHANG) == *pid) {
      *pid = 0;
      return;
    }
    th_sleep_ms(20);
  }
  kill(*pid, SIGKILL);
  waitpid(*pid, NULL, 0);
  *pid = 0;
}
