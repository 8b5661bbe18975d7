/*
 * harness_cluster.h - a private Redis Cluster for tests: N masters (and R
 * replicas each) on free loopback ports, built with `redis-cli --cluster
 * create`, every node stopped by PID (th_redis_stop) on every exit path.
 */
#ifndef DLOCK_TEST_HARNESS_CLUSTER_H
#define DLOCK_TEST_HARNESS_CLUSTER_H

#include "harness.h"

#define TH_CLUSTER_MAX 6

typedef struct th_cluster {
  int n;                 /* nodes started */
  int masters, replicas; /* replicas per master */
  th_redis node[TH_CLUSTER_MAX];
  char url[1024]; /* redis-cluster://127.0.0.1:P1,127.0.0.1:P2,... (masters) */
} th_cluster;

/* Start 'masters' nodes (+ 'replicas' per master) with a small node timeout
 * and create the cluster; waits until every node says cluster_state:ok.
 * Returns 0, or -1 with a message on stderr (everything started is stopped). */
int th_cluster_start(th_cluster *c, int masters, int replicas);
void th_cluster_stop(th_cluster *c);
/* Index of the node that serves 'key' as master now (-1 if none answers). */
int th_cluster_owner(th_cluster *c, const char *key);
/* Wait until every running node reports cluster_state:ok (replicas: synced)
 * and agrees on the
 * owner of 'key' (NULL: no key check). 0 or -1 after 'timeout_ms'. */
int th_cluster_wait_ok(th_cluster *c, const char *key, long timeout_ms);

#endif
