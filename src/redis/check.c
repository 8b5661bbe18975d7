/*
 * check.c - what a lock relies on in the server, checked: the eviction
 * policy at connect (dlock_client_warnings) and the full examination behind
 * "dlock doctor" (dlock_client_check): eviction, persistence, replication,
 * clock skew, and the ACL rights for scripts and pub/sub.
 *
 * Only commands a plain user may have are needed: INFO (not CONFIG) for the
 * settings where INFO shows them; CONFIG GET is tried for the rest and its
 * refusal is reported, not treated as a failure.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_lock.h"

#define PROBE_NAME "dlock-doctor"
#define NOEVICTION_FIX \
  "run 'CONFIG SET maxmemory-policy noeviction' and put 'maxmemory-policy noeviction' in redis.conf"

/* One command to the server (not to a key's node); an error reply is
 * returned as a reply, transport failures as a status. */
static int server_cmd(dlock_client *c, dlock__node *at, dlock__reply **out, int argc, const char **argv) {
  size_t lens[8];
  for (int i = 0; i < argc && i < 8; i++) lens[i] = strlen(argv[i]);
  dlock__cmd cmd = {argc, argv, lens};
  *out = NULL;
  return dlock__node_exec(at ? at : dlock__topo(c)->route(dlock__topo(c), "", 0), &cmd, 1, out, NULL);
}

/* The value of 'field' in an INFO text, into 'buf'; 0 when found. */
static int info_field(const char *info, const char *field, char *buf, size_t len) {
  size_t n = strlen(field);
  for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (!strncmp(p, field, n) && p[n] == ':') {
      size_t v = strcspn(p + n + 1, "\r\n");
      snprintf(buf, len, "%.*s", (int)v, p + n + 1);
      return 0;
    }
  }
  return -1;
}

/* INFO 'section' as text (caller frees the reply), or NULL with the reason
 * (an error reply, a transport failure) in 'why'. */
static dlock__reply *info(dlock_client *c, dlock__node *at, const char *section, char *why, size_t len) {
  const char *argv[2] = {"INFO", section};
  dlock__reply *r;
  int rc = server_cmd(c, at, &r, 2, argv);
  if (rc) {
    snprintf(why, len, "INFO %s failed: %s", section, dlock_last_error());
    return NULL;
  }
  if (r->type != DLOCK__REPLY_STRING) {
    snprintf(why, len, "INFO %s: %s", section, r->type == DLOCK__REPLY_ERROR ? r->str : "unexpected reply");
    dlock__reply_free(r);
    return NULL;
  }
  return r;
}

/* CONFIG GET 'param' into 'buf'; 0 when read, else the reason in 'buf'. */
static int config_get(dlock_client *c, dlock__node *at, const char *param, char *buf, size_t len) {
  const char *argv[3] = {"CONFIG", "GET", param};
  dlock__reply *r;
  int rc = server_cmd(c, at, &r, 3, argv);
  if (rc) {
    snprintf(buf, len, "CONFIG GET failed: %s", dlock_last_error());
    return -1;
  }
  rc = -1;
  if (r->type == DLOCK__REPLY_ERROR) {
    snprintf(buf, len, "%s", r->str);
  } else if (r->type == DLOCK__REPLY_ARRAY && r->elements == 2 && r->element[1]->type == DLOCK__REPLY_STRING) {
    snprintf(buf, len, "%s", r->element[1]->str);
    rc = 0;
  } else {
    snprintf(buf, len, "no such setting");
  }
  dlock__reply_free(r);
  return rc;
}

static void set(dlock_check *k, const char *name, dlock_check_level level, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void set(dlock_check *k, const char *name, dlock_check_level level, const char *fix, const char *fmt, ...) {
  va_list ap;
  k->name = name;
  k->level = level;
  va_start(ap, fmt);
  vsnprintf(k->found, sizeof k->found, fmt, ap);
  va_end(ap);
  snprintf(k->fix, sizeof k->fix, "%s", fix ? fix : "");
}

/* The policy and the limit from INFO memory; -1 when INFO is denied. */
static int eviction_policy(dlock_client *c, dlock__node *at, char *policy, size_t plen, long long *maxmemory, char *why,
                           size_t wlen) {
  dlock__reply *r = info(c, at, "memory", why, wlen);
  if (!r) return -1;
  char mm[32] = "0";
  int rc = info_field(r->str, "maxmemory_policy", policy, plen);
  info_field(r->str, "maxmemory", mm, sizeof mm);
  *maxmemory = strtoll(mm, NULL, 10);
  if (rc) snprintf(why, wlen, "INFO memory has no maxmemory_policy");
  dlock__reply_free(r);
  return rc;
}

void dlock__check_at_connect(dlock_client *c) {
  char policy[64], why[256];
  long long maxmemory = 0;
  c->warnings[0] = '\0';
  /* A failure here (ACL, timeout) must not fail a connect that worked, nor
   * leave its message as the thread's last error. */
  if (eviction_policy(c, NULL, policy, sizeof policy, &maxmemory, why, sizeof why) == 0 &&
      strcmp(policy, "noeviction") != 0) {
    snprintf(c->warnings, sizeof c->warnings,
             "%s: maxmemory-policy is %s: Redis may evict keys with a TTL, and every dlock key has one, so a "
             "held lock can vanish and another client acquire it%s; %s",
             c->server, policy, maxmemory ? "" : " (maxmemory is 0 today: nothing is evicted until a limit is set)",
             NOEVICTION_FIX);
  }
  dlock__error_clear();
}

static void check_eviction(dlock_client *c, dlock__node *at, dlock_check *k) {
  char policy[64], why[256];
  long long maxmemory = 0;
  if (eviction_policy(c, at, policy, sizeof policy, &maxmemory, why, sizeof why) != 0) {
    set(k, "eviction", DLOCK_CHECK_WARN,
        "grant the user INFO (+info), or check 'maxmemory-policy' by hand: it "
        "must be noeviction",
        "cannot read maxmemory-policy on %s: %s", c->server, why);
  } else if (!strcmp(policy, "noeviction")) {
    set(k, "eviction", DLOCK_CHECK_OK, NULL,
        "maxmemory-policy noeviction: lock keys are never evicted "
        "(a full server refuses writes instead: DLOCK_ESERVEROOM)");
  } else if (maxmemory == 0) {
    set(k, "eviction", DLOCK_CHECK_WARN, NOEVICTION_FIX,
        "maxmemory-policy %s, but maxmemory is 0: nothing is "
        "evicted today; once a limit is set, held lock keys (all with a TTL) may be evicted",
        policy);
  } else {
    set(k, "eviction", DLOCK_CHECK_FAIL, NOEVICTION_FIX,
        "maxmemory-policy %s with maxmemory %lld bytes: "
        "keys with a TTL may be evicted, and every dlock key has one: a held lock can vanish and another "
        "client acquire it",
        policy, maxmemory);
  }
}

static void check_persistence(dlock_client *c, dlock__node *at, dlock_check *k) {
  char why[256], aof[16] = "", save[256];
  static const char fix[] = "run 'CONFIG SET appendonly yes' and put 'appendonly yes' in redis.conf";
  dlock__reply *r = info(c, at, "persistence", why, sizeof why);
  if (!r) {
    set(k, "persistence", DLOCK_CHECK_WARN, "grant the user INFO (+info), or check 'appendonly' by hand",
        "cannot read the persistence settings on %s: %s", c->server, why);
    return;
  }
  info_field(r->str, "aof_enabled", aof, sizeof aof);
  dlock__reply_free(r);
  if (!strcmp(aof, "1")) {
    set(k, "persistence", DLOCK_CHECK_OK, NULL,
        "AOF on: held locks and fence counters survive a restart "
        "(up to the last fsync)");
  } else if (config_get(c, at, "save", save, sizeof save) != 0) {
    set(k, "persistence", DLOCK_CHECK_WARN, fix,
        "AOF off, and the RDB 'save' rules cannot be read (%s): "
        "a restart may free held locks; fences keep rising by the server clock",
        save);
  } else if (save[0]) {
    set(k, "persistence", DLOCK_CHECK_WARN, fix,
        "RDB snapshots only (save %s): a restart frees the locks "
        "taken since the last snapshot; fences keep rising by the server clock",
        save);
  } else {
    set(k, "persistence", DLOCK_CHECK_WARN, fix,
        "no persistence (AOF off, no RDB 'save' rules): a restart "
        "frees every held lock; fences keep rising by the server clock");
  }
  dlock__error_clear();
}

static void check_replication(dlock_client *c, dlock__node *at, dlock_check *k) {
  char why[256], role[32] = "", slaves[32] = "0", good[32], minrep[64], master[128] = "?", mport[16] = "?";
  dlock__reply *r = info(c, at, "replication", why, sizeof why);
  if (!r) {
    set(k, "replication", DLOCK_CHECK_WARN,
        "grant the user INFO (+info), or check the replicas and "
        "'min-replicas-to-write' by hand",
        "cannot read the replication state on %s: %s", c->server, why);
    return;
  }
  info_field(r->str, "role", role, sizeof role);
  info_field(r->str, "connected_slaves", slaves, sizeof slaves);
  info_field(r->str, "master_host", master, sizeof master);
  info_field(r->str, "master_port", mport, sizeof mport);
  /* Redis shows this field only while min-replicas-to-write is in force. */
  int have_min = info_field(r->str, "min_slaves_good_slaves", good, sizeof good) == 0;
  dlock__reply_free(r);
  long n = strtol(slaves, NULL, 10);
  if (!strcmp(role, "slave")) {
    set(k, "replication", DLOCK_CHECK_FAIL, "point the URL at the master (or use a Sentinel URL)",
        "%s is a replica of %s:%s: it refuses the writes every lock needs", c->server, master, mport);
  } else if (n == 0) {
    set(k, "replication", DLOCK_CHECK_OK, NULL,
        "a master without replicas: no failover can lose a lock "
        "(the server is a single point of failure)");
  } else if (have_min || (config_get(c, at, "min-replicas-to-write", minrep, sizeof minrep) == 0 && atoi(minrep) > 0)) {
    set(k, "replication", DLOCK_CHECK_OK, NULL,
        "%ld replica(s), and min-replicas-to-write is in force: "
        "writes stop when no replica keeps up",
        n);
  } else {
    set(k, "replication", DLOCK_CHECK_WARN,
        "run 'CONFIG SET min-replicas-to-write 1' and "
        "'CONFIG SET min-replicas-max-lag 10' (and put both in redis.conf); guard writes with the fence",
        "%ld replica(s), min-replicas-to-write 0: replication is asynchronous, so a failover to a replica "
        "that missed a new lock lets a second holder in",
        n);
  }
  dlock__error_clear();
}

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void check_clock(dlock_client *c, dlock__node *at, dlock_check *k) {
  static const char fix[] = "synchronise this host and the Redis host with NTP (chrony or systemd-timesyncd), "
                            "slewing rather than stepping";
  const char *argv[1] = {"TIME"};
  dlock__reply *r;
  int64_t before = wall_us();
  int rc = server_cmd(c, at, &r, 1, argv);
  int64_t after = wall_us();
  if (rc || r->type != DLOCK__REPLY_ARRAY || r->elements != 2 || r->element[0]->type != DLOCK__REPLY_STRING ||
      r->element[1]->type != DLOCK__REPLY_STRING) {
    set(k, "clock", DLOCK_CHECK_WARN, "grant the user TIME (+time): the lock scripts need it too",
        "cannot read the server clock on %s: %s", c->server,
        rc                              ? dlock_last_error()
        : r->type == DLOCK__REPLY_ERROR ? r->str
                                        : "unexpected reply to TIME");
    dlock__reply_free(r);
    dlock__error_clear();
    return;
  }
  int64_t server = strtoll(r->element[0]->str, NULL, 10) * 1000000 + strtoll(r->element[1]->str, NULL, 10);
  dlock__reply_free(r);
  int64_t skew_us = server - (before + after) / 2, rtt_ms = (after - before) / 1000;
  int64_t skew = skew_us / 1000, mag = skew < 0 ? -skew : skew;
  k->skew_ms = skew;
  if (mag <= 1000) {
    set(k, "clock", DLOCK_CHECK_OK, NULL, "server clock %+lld ms from ours (round trip %lld ms)", (long long)skew,
        (long long)rtt_ms);
  } else if (mag <= 60000) {
    set(k, "clock", DLOCK_CHECK_WARN, fix,
        "server clock %+lld ms from ours (round trip %lld ms): the "
        "scheduler fires ticks by this host's clock and shows run times by the server's",
        (long long)skew, (long long)rtt_ms);
  } else {
    set(k, "clock", DLOCK_CHECK_FAIL, fix,
        "server clock %+lld ms from ours (round trip %lld ms): "
        "scheduled jobs on this host run at the wrong time or are refused",
        (long long)skew, (long long)rtt_ms);
  }
}

static void check_scripts(dlock_client *c, dlock__node *at, dlock_check *k, char *user, size_t ulen) {
  static const char fix[] = "grant the user +evalsha +eval and the commands the scripts call, on the keys "
                            "~PREFIX* and ~{PREFIX* (docs/keys.md, 'ACL for a prefix')";
  const char *argv[2] = {"ACL", "WHOAMI"};
  dlock__reply *r;
  snprintf(user, ulen, "?");
  if (server_cmd(c, at, &r, 2, argv) == 0 && r->type == DLOCK__REPLY_STRING) snprintf(user, ulen, "%s", r->str);
  dlock__reply_free(r);

  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 10000;
  mo.owner_info = "dlock doctor";
  dlock_mutex *m = NULL;
  int rc = dlock_mutex_new(&m, c, PROBE_NAME, &mo);
  if (!rc) dlock__rm(m)->node = at; /* a node's own check: the probe runs there alone */
  if (!rc) rc = dlock_mutex_acquire(m, 2000);
  if (!rc) rc = dlock_mutex_release(m);
  if (!rc) {
    set(k, "scripts", DLOCK_CHECK_OK, NULL,
        "user '%s' took and released the lock '%s%s' (EVALSHA, EVAL and "
        "the commands the scripts call)",
        user, c->prefix, PROBE_NAME);
  } else if (rc == DLOCK_EBUSY) {
    set(k, "scripts", DLOCK_CHECK_WARN, "run the check again",
        "the probe lock '%s%s' was held by someone "
        "else for 2 s (another dlock doctor?): scripts not tested",
        c->prefix, PROBE_NAME);
  } else {
    set(k, "scripts",
        rc == DLOCK_ENOPERM || rc == DLOCK_ESERVER || rc == DLOCK_EREADONLY || rc == DLOCK_ESERVEROOM ||
                rc == DLOCK_EWRONGTYPE
            ? DLOCK_CHECK_FAIL
            : DLOCK_CHECK_WARN,
        rc == DLOCK_ENOPERM ? fix : "read the message", "user '%s' cannot take the lock '%s%s': %s: %s", user,
        c->prefix, PROBE_NAME, dlock_err_name(rc), m ? dlock_mutex_errmsg(m) : dlock_last_error());
  }
  dlock_mutex_free(m);
  dlock__error_clear();
}

/* SUBSCRIBE needs a connection of its own: it turns the connection into a
 * subscriber. The pooled connections are left alone. On a cluster, as the
 * waiters do: SSUBSCRIBE on the master of the channel's slot. */
static int try_subscribe(dlock_client *c, dlock__node *at, const char *channel, char *why, size_t len) {
  int sharded = dlock__sharded_pubsub(c), rc;
  dlock__node *node = at        ? at
                      : sharded ? dlock__topo(c)->route(dlock__topo(c), channel, strlen(channel))
                                : dlock__route(c, "", 0, INT64_MAX, &rc);
  if (!node) {
    snprintf(why, len, "%s", dlock_last_error());
    return rc;
  }
  dlock__conn *conn = NULL;
  rc = dlock__conn_open(&node->ep, node->ssl_ctx, &conn);
  if (rc) {
    snprintf(why, len, "%s", dlock_last_error());
    return rc;
  }
  const char *verb = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  const char *argv[2] = {verb, channel};
  size_t lens[2] = {strlen(verb), strlen(channel)};
  dlock__cmd cmd = {2, argv, lens};
  dlock__reply *r = NULL;
  dlock_mono_ms deadline = dlock_mono_now() + c->command_timeout_ms;
  rc = dlock__conn_append(conn, &cmd);
  if (!rc) rc = dlock__conn_flush(conn, deadline);
  if (!rc) rc = dlock__conn_read(conn, deadline, &r);
  if (rc) {
    snprintf(why, len, "%s", dlock_last_error());
  } else if (r->type == DLOCK__REPLY_ERROR) {
    snprintf(why, len, "%s: %s", verb, r->str);
    rc = dlock__reply_error_status(r);
  } else if (r->type != DLOCK__REPLY_ARRAY) {
    snprintf(why, len, "%s: unexpected reply", verb);
    rc = DLOCK_EPROTO;
  }
  dlock__reply_free(r);
  dlock__conn_close(conn);
  return rc;
}

static void check_pubsub(dlock_client *c, dlock__node *at, dlock_check *k, const char *user) {
  int sharded = dlock__sharded_pubsub(c);
  const char *fix = sharded ? "grant the user +spublish +ssubscribe +sunsubscribe and the channels &{PREFIX* "
                              "(docs/keys.md); without them waiters notice a release only at their re-check"
                            : "grant the user +publish +subscribe +unsubscribe and the channels &{PREFIX* "
                              "(docs/keys.md); without them waiters notice a release only at their re-check";
  const char *pub = sharded ? "SPUBLISH" : "PUBLISH", *sub = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  char channel[DLOCK_MAX_NAME_LEN + 64], why[512];
  snprintf(channel, sizeof channel, "{%s%s}:w:%s", c->prefix, PROBE_NAME, c->id);
  const char *argv[3] = {pub, channel, ""};
  size_t lens[3] = {strlen(pub), strlen(channel), 0};
  dlock__cmd cmd = {3, argv, lens};
  dlock__reply *r = NULL;
  /* To the channel's node: on a cluster SPUBLISH goes to the slot's master. */
  int rc = dlock__topology_exec(c, channel, lens[1], &cmd, 1, &r, NULL, INT64_MAX);
  if (rc || r->type == DLOCK__REPLY_ERROR) {
    set(k, "pubsub", DLOCK_CHECK_WARN, fix, "user '%s' cannot %s on '%s': %s", user, pub, channel,
        rc ? dlock_last_error() : r->str);
  } else if (try_subscribe(c, at, channel, why, sizeof why) != 0) {
    set(k, "pubsub", DLOCK_CHECK_WARN, fix, "user '%s' cannot %s to '%s': %s", user, sub, channel, why);
  } else {
    set(k, "pubsub", DLOCK_CHECK_OK, NULL,
        "user '%s' may %s and %s on the hand-off channels "
        "(waiters are woken at once)",
        user, pub, sub);
  }
  dlock__reply_free(r);
  dlock__error_clear();
}

int dlock__redis_check(dlock_client *c, dlock_check *out, int max) { return dlock__redis_check_at(c, NULL, out, max); }

/* PING 'at' alone, as redis_ping (backend.c) pings the topology's node. */
static int ping_node(dlock_client *c, dlock__node *at) {
  const char *argv[1] = {"PING"};
  dlock__reply *r = NULL;
  int rc = server_cmd(c, at, &r, 1, argv);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "%s: PING failed: %s", at->ep.display, r->str);
  }
  dlock__reply_free(r);
  return rc;
}

int dlock__redis_check_at(dlock_client *c, dlock__node *at, dlock_check *out, int max) {
  int rc = at ? ping_node(c, at) : dlock_client_ping(c);
  if (rc) return rc;
  dlock_check all[DLOCK_CHECK_MAX];
  char user[128];
  memset(all, 0, sizeof all);
  check_eviction(c, at, &all[0]);
  check_persistence(c, at, &all[1]);
  check_replication(c, at, &all[2]);
  check_clock(c, at, &all[3]);
  check_scripts(c, at, &all[4], user, sizeof user);
  check_pubsub(c, at, &all[5], user);
  int n = 6 < max ? 6 : max;
  memcpy(out, all, (size_t)n * sizeof *out);
  dlock__error_clear();
  return n;
}
