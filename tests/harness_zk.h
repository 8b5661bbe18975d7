/*
 * harness_zk.h - private ZooKeeper servers for tests: a standalone server or
 * a 3-node ensemble on loopback (Debian's `zookeeper` package, run with
 * java), each in its own temp dir on free ports, with a short tickTime so
 * that sessions can be 1-2 s, and the admin server off. Servers are stopped
 * by PID (never by name) from th_zk_stop(), at exit, on SIGINT/SIGTERM/
 * SIGALRM/SIGABRT, and (PR_SET_PDEATHSIG) when the test process dies.
 *
 * Also the Curator helper (tests/interop/CuratorLock.java), compiled once per
 * run with javac against Debian's curator and zookeeper jars.
 */
#ifndef DLOCK_TEST_HARNESS_ZK_H
#define DLOCK_TEST_HARNESS_ZK_H

#include <stddef.h>
#include <sys/types.h>

typedef struct th_zk {
  pid_t pid;
  int myid;          /* 0 for a standalone server */
  int port;          /* client port on 127.0.0.1 */
  char dir[256];     /* temp dir: zoo.cfg, data/, log */
  char hostport[64]; /* "127.0.0.1:PORT" */
  int stopped;       /* SIGSTOP sent and not yet SIGCONT */
} th_zk;

#define TH_ZK_ENSEMBLE 3

typedef struct th_zk_ensemble {
  th_zk node[TH_ZK_ENSEMBLE];
  char hosts[256]; /* "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" */
} th_zk_ensemble;

/* 1 when java and the ZooKeeper jar are installed, else 0 with why. */
int th_zk_available(char *why, size_t len);
/* Start a standalone server with 'tick_ms' ticks (sessions may be 2 to 100
 * ticks). Waits until it serves. 0, or -1 with a message on stderr. */
int th_zk_start(th_zk *z, int tick_ms);
/* Start three servers as one ensemble; waits until one leads and two follow. */
int th_zk_ensemble_start(th_zk_ensemble *e, int tick_ms);
/* As th_zk_ensemble_start(), with 'sync_limit' ticks (how long a follower
 * serves without hearing from its leader) and server i reaching server j's
 * quorum port (listening on quorum_port[j]) at quorum_via[i][j] (0: directly),
 * so that a test can route each quorum link through a fault proxy and cut a
 * follower off while its client port stays up. Election ports are direct. */
int th_zk_ensemble_start_via(th_zk_ensemble *e, int tick_ms, int sync_limit, const int quorum_port[TH_ZK_ENSEMBLE],
                             const int quorum_via[TH_ZK_ENSEMBLE][TH_ZK_ENSEMBLE]);
/* Stop by PID (SIGCONT first if frozen, SIGTERM, SIGKILL after 5 s) and
 * remove the temp dir. */
/* A test file's server: th_zk_available() and th_zk_start(z, tick_ms). 1
 * when it runs; else 0, with why in 'why' (for TEST_SKIP). */
int th_zk_suite_start(th_zk *z, int tick_ms, char *why, size_t len);
void th_zk_stop(th_zk *z);
void th_zk_ensemble_stop(th_zk_ensemble *e);
/* kill -9, keeping the temp dir (th_zk_stop cleans up). */
void th_zk_kill9(th_zk *z);
/* SIGSTOP / SIGCONT. */
void th_zk_freeze(th_zk *z);
void th_zk_thaw(th_zk *z);
/* "leader", "follower", "standalone" (from the srvr command), or "" when
 * it does not answer. */
void th_zk_mode(const th_zk *z, char *out, size_t len);
/* The packets the server received from clients so far (srvr's "Received"), -1 if unknown. */
long long th_zk_received(const th_zk *z);
/* Index of the ensemble's leader, or -1. */
int th_zk_leader(const th_zk_ensemble *e);

/* Compile tests/interop/CuratorLock.java ('src') once into a temp dir.
 * 0, or -1 with why (javac or the curator jars missing). */
int th_curator_build(const char *src, char *why, size_t len);
/* Start "CuratorLock connect path args..." with its stdout on a pipe;
 * '*out_fd' is the pipe's read end. Returns the pid or -1. */
pid_t th_curator_spawn(int *out_fd, const char *connect, const char *path, const char *a1, const char *a2);
/* Read one line from 'fd' within 'timeout_ms' (without the newline).
 * 0, or -1 on timeout or EOF. */
int th_read_line(int fd, char *buf, size_t len, long timeout_ms);
/* Run CuratorLock to the end; its exit status, or -1. Its output into 'out'. */
int th_curator_run(char *out, size_t len, long timeout_ms, const char *connect, const char *path, const char *a1,
                   const char *a2);

#endif
