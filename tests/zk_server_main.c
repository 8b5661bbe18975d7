/*
 * zk_server_main.c - a ZooKeeper server for the shell tests
 * (tests/cli/test_zk.sh): starts one standalone server with the harness
 * (tests/harness_zk.*), writes "127.0.0.1:PORT" to the file argv[1], and
 * runs until SIGTERM/SIGINT, when the harness stops the server by PID.
 * Exits 77 (skip) when java or ZooKeeper is not installed.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "harness_zk.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: zk_server ADDRESS_FILE\n");
    return 64;
  }
  char why[256];
  if (!th_zk_available(why, sizeof why)) {
    fprintf(stderr, "zk_server: %s\n", why);
    return 77;
  }
  th_zk z;
  if (th_zk_start(&z, 200) != 0) return 1;
  struct sigaction sa;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  FILE *f = fopen(argv[1], "w");
  if (!f || fprintf(f, "%s\n", z.hostport) < 0 || fclose(f) != 0) {
    th_zk_stop(&z);
    return 1;
  }
  while (!stop) pause();
  th_zk_stop(&z);
  return 0;
}
