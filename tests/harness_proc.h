/*
 * harness_proc.h - the server processes of the test harnesses that run
 * under a service user (PostgreSQL, MariaDB): started through setpriv(1)
 * as that user when the tests run as root, stopped by PID.
 */
#ifndef DLOCK_TEST_HARNESS_PROC_H
#define DLOCK_TEST_HARNESS_PROC_H

#include <sys/types.h>

/* Fork and exec argv (argv[0] a full path) in a new session, stdin from
 * /dev/null, stdout and stderr appended to 'log' (NULL: inherited); as
 * 'user' through setpriv when we are root; with LD_PRELOAD='preload' in the
 * server alone (NULL: none; e.g. a test's libfaketime). The child's pid, or -1. */
pid_t th_proc_spawn_as(const char *user, const char *const argv[], const char *log, const char *preload);
/* Stop '*pid' (SIGCONT, then 'sig'; SIGKILL after 'grace_ms'), reap it and
 * set '*pid' to 0. Nothing when '*pid' <= 0. */
void th_proc_stop(pid_t *pid, int sig, long grace_ms);

#endif
