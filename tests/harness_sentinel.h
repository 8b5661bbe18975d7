/*
 * harness_sentinel.h - a Redis Sentinel deployment for tests: one master,
 * one replica and three sentinels on loopback free ports (harness.h servers,
 * so each is stopped by PID on every exit path).
 */
#ifndef DLOCK_TEST_HARNESS_SENTINEL_H
#define DLOCK_TEST_HARNESS_SENTINEL_H

#include "harness.h"

#define TH_SENTINELS 3

typedef struct th_sentinel_set {
  th_redis master; /* as started: after a failover, the replica may be master */
  th_redis replica;
  th_redis sentinel[TH_SENTINELS];
  char service[64];
  char url[512]; /* redis-sentinel://127.0.0.1:P1,...,127.0.0.1:P3/SERVICE */
} th_sentinel_set;

/* Start the set for 'service' (down-after-milliseconds 1000, failover-timeout
 * 3000, quorum 2) and wait until every sentinel knows the replica and the
 * other sentinels, so that a failover can happen. 0, or -1 (all stopped). */
int th_sentinel_set_start(th_sentinel_set *s, const char *service);
void th_sentinel_set_stop(th_sentinel_set *s);
/* One more sentinel that monitors the server on 'master_port' as 'service'. */
int th_sentinel_start_one(th_redis *r, const char *service, int master_port, int quorum);
/* Wait until every sentinel of the set names 'port' as the master and that
 * server answers ROLE master. 0, or -1 after 'timeout_ms'. */
int th_sentinel_wait_master(th_sentinel_set *s, int port, long timeout_ms);
/* Freeze the replica's intake so that the next writes on the master cannot
 * reach it: stop the replica (SIGSTOP; it is left stopped) and fill the
 * replication link with a value larger than the socket buffers. Writes
 * after this are lost when the master dies. 0, or -1 with a message on
 * stderr. */
int th_sentinel_block_replication(th_sentinel_set *s);

#endif
