/*
 * harness_sentinel.c - a master, a replica and three sentinels for the tests
 * (see harness_sentinel.h).
 */
#include "harness_sentinel.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int th_sentinel_start_one(th_redis *r, const char *service, int master_port, int quorum) {
  char conf[1024];
  snprintf(conf, sizeof conf,
           "sentinel resolve-hostnames no\n"
           "sentinel announce-ip 127.0.0.1\n"
           "sentinel monitor %s 127.0.0.1 %d %d\n"
           "sentinel down-after-milliseconds %s 1000\n"
           "sentinel failover-timeout %s 3000\n"
           "sentinel parallel-syncs %s 1\n",
           service, master_port, quorum, service, service, service);
  return th_sentinel_start(r, conf);
}

/* The value of 'field' in the flat field/value output of `redis-cli SENTINEL master`. */
static long field(const char *out, const char *name) {
  char key[80];
  snprintf(key, sizeof key, "%s\n", name);
  const char *p = strstr(out, key);
  return p ? atol(p + strlen(key)) : -1;
}

static int ready(th_sentinel_set *s) {
  for (int i = 0; i < TH_SENTINELS; i++) {
    char out[4096];
    if (th_redis_cli(&s->sentinel[i], out, sizeof out, "SENTINEL master %s", s->service) != 0) return 0;
    if (field(out, "num-slaves") < 1 || field(out, "num-other-sentinels") < TH_SENTINELS - 1) return 0;
  }
  return 1;
}

int th_sentinel_set_start(th_sentinel_set *s, const char *service) {
  memset(s, 0, sizeof *s);
  snprintf(s->service, sizeof s->service, "%s", service);
  if (th_redis_start(&s->master, NULL) != 0) return -1;
  char conf[256];
  snprintf(conf, sizeof conf, "replicaof 127.0.0.1 %d\n", s->master.port);
  if (th_redis_start(&s->replica, conf) != 0) goto fail;
  for (int i = 0; i < 500; i++) { /* the replica in sync: up to 10 s */
    char out[4096];
    th_redis_cli(&s->replica, out, sizeof out, "INFO replication");
    if (strstr(out, "master_link_status:up")) break;
    if (i == 499) {
      fprintf(stderr, "harness: replica never synced\n");
      goto fail;
    }
    th_sleep_ms(20);
  }
  size_t n = (size_t)snprintf(s->url, sizeof s->url, "redis-sentinel://");
  for (int i = 0; i < TH_SENTINELS; i++) {
    if (th_sentinel_start_one(&s->sentinel[i], service, s->master.port, 2) != 0) goto fail;
    n += (size_t)snprintf(s->url + n, sizeof s->url - n, "%s127.0.0.1:%d", i ? "," : "", s->sentinel[i].port);
  }
  snprintf(s->url + n, sizeof s->url - n, "/%s", service);
  for (int i = 0; i < 1500; i++) { /* hello messages every 2 s, INFO every 10 s: up to 30 s */
    if (ready(s)) return 0;
    th_sleep_ms(20);
  }
  fprintf(stderr, "harness: the sentinels never found each other and the replica\n");
fail:
  th_sentinel_set_stop(s);
  return -1;
}

void th_sentinel_set_stop(th_sentinel_set *s) {
  for (int i = 0; i < TH_SENTINELS; i++) th_redis_stop(&s->sentinel[i]);
  th_redis_stop(&s->replica);
  th_redis_stop(&s->master);
}

int th_sentinel_wait_master(th_sentinel_set *s, int port, long timeout_ms) {
  long long deadline = th_now_ms() + timeout_ms;
  th_redis *srv = port == s->master.port ? &s->master : &s->replica;
  while (th_now_ms() < deadline) {
    int agree = 1;
    for (int i = 0; i < TH_SENTINELS && agree; i++) {
      char out[256], want[32];
      th_redis_cli(&s->sentinel[i], out, sizeof out, "SENTINEL get-master-addr-by-name %s", s->service);
      snprintf(want, sizeof want, "127.0.0.1\n%d", port);
      agree = strcmp(out, want) == 0;
    }
    char role[256] = "";
    if (agree && th_redis_cli(srv, role, sizeof role, "ROLE") == 0 && !strncmp(role, "master", 6)) return 0;
    th_sleep_ms(50);
  }
  return -1;
}

int th_sentinel_block_replication(th_sentinel_set *s) {
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/big", s->master.dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    return -1;
  }
  static char chunk[1 << 16];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < 512; i++) fwrite(chunk, 1, sizeof chunk, f); /* 32 MiB */
  fclose(f);
  kill(s->replica.pid, SIGSTOP);
  snprintf(cmd, sizeof cmd, "redis-cli -p %d -x SET big < '%s' > /dev/null", s->master.port, path);
  if (system(cmd) != 0) {
    fprintf(stderr, "SET big on the master (port %d) failed\n", s->master.port);
    return -1;
  }
  return 0;
}
