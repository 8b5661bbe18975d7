/*
 * redis.h - the Redis backend: its declarations, shared by src/redis/ only
 * (and the tests of its parts).
 *
 * Layers, bottom up: url (endpoint) -> conn (one socket or TLS stream
 * speaking RESP, encoded and parsed here: no Redis client library) -> node and topology (pools of
 * connections, routing by key: standalone, Sentinel, Cluster, Redlock) ->
 * scripts (EVALSHA with NOSCRIPT fallback) -> lock, waiters, admin, sched,
 * check: the operations of dlock__redis_ops (backend.h).
 */
#ifndef DLOCK_REDIS_H
#define DLOCK_REDIS_H

/* The whole backend, by module (each .c includes the ones it needs):
 *   redis_resp.h     RESP replies, the reply reader, command encoding
 *   redis_topo.h     endpoints, connections, nodes, topologies
 *   redis_scripts.h  script ids and calls
 *   redis_lock.h     client and handle state, lock keys, subscriber, ops */
#include "redis_lock.h"

#endif /* DLOCK_REDIS_H */
