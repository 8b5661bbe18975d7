/*
 * fixture_zk.c - ZooKeeper in the conformance suite: one standalone server
 * (tick 200 ms), clients with a 4 s session (its most: 20 ticks; a busy machine
 * delays the pings that keep a shorter one valid); a space is a namespace.
 * Freezing stops the server with SIGSTOP. No fault proxy (the replies are
 * ZooKeeper's binary protocol).
 */
#include <stdio.h>

#include "conformance.h"
#include "harness.h"
#include "harness_zk.h"

static th_zk zk;

static int zk_start(char *why, size_t len) { return th_zk_suite_start(&zk, 200, why, len); }
static void zk_stop(void) { th_zk_stop(&zk); }

static dlock_client *zk_client(const char *space) {
  char url[512];
  snprintf(url, sizeof url, "zk://%s/%s?session_timeout=4s", zk.hostport, space);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}

static const char *zk_state(void) { return zk.hostport; }
static void zk_adopt(const char *state) { snprintf(zk.hostport, sizeof zk.hostport, "%s", state); }

static void zk_freeze(void) { th_zk_freeze(&zk); }
static void zk_thaw(void) { th_zk_thaw(&zk); }

/* No countdown latches (docs/latch.md, docs/zookeeper.md). */
const conf_fixture conf_fx_zk = {
    .name = "zk",
    .caps = CONF_FORCE_NOTIFY | CONF_QUEUE | CONF_DEADLINE | CONF_FENCE | CONF_SEMAPHORE | CONF_RWLOCK | CONF_SCHED |
            CONF_GUARD | CONF_ADMIN | CONF_JOBS | CONF_WATCH_NOTIFY,
    .start = zk_start,
    .stop = zk_stop,
    .client = zk_client,
    .state = zk_state,
    .adopt = zk_adopt,
    .freeze = zk_freeze,
    .thaw = zk_thaw,
    .kill_free_ms = 4000,
};
