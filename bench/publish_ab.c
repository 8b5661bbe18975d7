/*
 * publish_ab.c - the cost of the watch event (issue 27: every lock script
 * SPUBLISHes "ev" on {K}:ev) on the uncontended cycle, A/B in one process
 * against one redis-server (docs/PERFORMANCE.md, "Issue 27, item 5"). One
 * connection, one name, the library's own acquire (a try, fixed lease) and
 * release scripts, sent as EVALSHA with the KEYS and ARGV the library sends:
 *   A  the scripts as built (the publish on the hot path),
 *   B  the same text with the hot path's publish taken out,
 *   C  the publish only when the key {K}:watched exists (one EXISTS more: what
 *      a publish-only-when-watched design would cost while nobody watches).
 * Blocks of --block cycles alternate A B C, C B A, ... (so that none always
 * runs first), --blocks each after a warm-up; a block's mean is one sample,
 * of two figures: the cycle as the client sees it (two round trips), and
 * the server process's CPU time per cycle (/proc/PID/schedstat, ns: the
 * server runs on this machine), which is where the publish costs and which
 * a busy machine blurs far less than round trips (time spent preempted is
 * not in it). Prints each variant's
 * median block mean, its range, and B's and C's difference from A. The
 * library's own work per cycle (the same in all three) is not in these
 * cycles: compare the difference with dlock-bench's uncontended cycle too.
 * With --depth D, D cycles are sent before their replies are read: the
 * server then runs the scripts back to back, and its CPU per cycle is the
 * scripts' work rather than its wake-ups.
 * Usage: dlock-publish-ab HOST PORT [--blocks N] [--block N] [--depth D]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

extern const char dlock__lua_acquire[];
extern const char dlock__lua_release[];

#define HOT_PUBLISH "redis.pcall('SPUBLISH', '{' .. KEYS[1] .. '}:ev', 'ev')"
#define GUARDED                                                                                                 \
  "if redis.call('EXISTS', '{' .. KEYS[1] .. '}:watched') == 1 then redis.pcall('SPUBLISH', '{' .. KEYS[1] .. " \
  "'}:ev', 'ev') end"
#define NVAR 3
#define MAX_BLOCKS 1000

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* 'src' with each HOT_PUBLISH replaced by 'with' (malloc'd); how many. */
static char *replace_all(const char *src, const char *with, int *count) {
  size_t hl = strlen(HOT_PUBLISH), wl = strlen(with), n = 0;
  for (const char *p = src; (p = strstr(p, HOT_PUBLISH)) != NULL; p += hl) n++;
  char *out = malloc(strlen(src) + n * wl + 1), *o = out;
  if (!out) return NULL;
  const char *p = src, *q;
  while ((q = strstr(p, HOT_PUBLISH)) != NULL) {
    memcpy(o, p, (size_t)(q - p));
    o += q - p;
    memcpy(o, with, wl);
    o += wl;
    p = q + hl;
  }
  strcpy(o, p);
  *count = (int)n;
  return out;
}

static int load(redisContext *rc, const char *text, char sha[41]) {
  redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", text);
  int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
  if (ok) memcpy(sha, r->str, 41);
  if (!ok) fprintf(stderr, "dlock-publish-ab: SCRIPT LOAD: %s\n", r && r->str ? r->str : rc->errstr);
  freeReplyObject(r);
  return ok ? 0 : -1;
}

static long server_pid;

/* The server process's CPU time so far in µs (every thread's: it is in
 * /proc/PID/schedstat only for the main one, which runs the scripts), or -1. */
static double server_cpu_us(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/schedstat", server_pid);
  FILE *f = fopen(path, "r");
  unsigned long long ns = 0;
  int ok = f && fscanf(f, "%llu", &ns) == 1;
  if (f) fclose(f);
  return ok ? (double)ns / 1e3 : -1;
}

/* One block of 'n' cycles with the scripts 'acq' and 'rel': the mean cycle
 * in µs (and the server's share in '*srv'), or -1. */
static int depth = 1; /* cycles sent before their replies are read */

static double block(redisContext *rc, const char *acq, const char *rel, int n, double *srv) {
  double cpu0 = server_cpu_us();
  static const char *const keys[] = {"bench:pub", "{bench:pub}:fence", "{bench:pub}:meta", "{bench:pub}:queue",
                                     "{bench:pub}:waiters"};
  const char *token = "0123456789abcdef0123456789abcdef";
  const char *a[] = {"EVALSHA", acq, "3", keys[0], keys[1], keys[2], token, "30000", "", "0", "0", "bench"};
  const char *b[] = {"EVALSHA", rel, "5", keys[0], keys[1], keys[2], keys[3], keys[4], token};
  double t0 = now_us();
  for (int i = 0; i < n; i += depth) {
    int k = n - i < depth ? n - i : depth;
    for (int j = 0; j < k; j++) {
      redisAppendCommandArgv(rc, 12, a, NULL);
      redisAppendCommandArgv(rc, 9, b, NULL);
    }
    int ok = 1;
    for (int j = 0; j < k; j++) {
      redisReply *r = NULL;
      ok = ok && redisGetReply(rc, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[0]->integer == 1;
      freeReplyObject(r);
      r = NULL;
      ok = ok && redisGetReply(rc, (void **)&r) == REDIS_OK && r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      freeReplyObject(r);
    }
    if (!ok) {
      fprintf(stderr, "dlock-publish-ab: a cycle failed (%s)\n", rc->err ? rc->errstr : "unexpected answer");
      return -1;
    }
  }
  double cycle = (now_us() - t0) / n;
  *srv = (server_cpu_us() - cpu0) / n;
  return cycle;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: dlock-publish-ab HOST PORT [--blocks N] [--block N] [--depth D]\n");
    return 64;
  }
  int blocks = 20, per = 2000;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--blocks")) blocks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--block")) per = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--depth")) depth = atoi(argv[i + 1]);
  }
  if (blocks < 1 || blocks > MAX_BLOCKS || per < 1 || depth < 1 || depth > 1000) {
    fprintf(stderr, "dlock-publish-ab: --blocks 1..%d, --block 1 or more, --depth 1..1000\n", MAX_BLOCKS);
    return 64;
  }
  redisContext *rc = redisConnect(argv[1], atoi(argv[2]));
  if (!rc || rc->err) {
    fprintf(stderr, "dlock-publish-ab: cannot connect to Redis at %s:%s\n", argv[1], argv[2]);
    return 69;
  }
  redisReply *info = redisCommand(rc, "INFO server");
  const char *pid = info && info->type == REDIS_REPLY_STRING ? strstr(info->str, "process_id:") : NULL;
  server_pid = pid ? atol(pid + 11) : 0;
  freeReplyObject(info);
  if (server_cpu_us() < 0) {
    fprintf(stderr,
            "dlock-publish-ab: cannot read the server's CPU time (/proc/%ld/schedstat): run it on the "
            "server's machine\n",
            server_pid);
    return 69;
  }
  const char *name[NVAR] = {"A with the publish (as built)", "B without it", "C publish if {K}:watched exists"};
  char acq[NVAR][41], rel[NVAR][41];
  const char *with[NVAR] = {HOT_PUBLISH, "", GUARDED};
  for (int v = 0; v < NVAR; v++) {
    int na = 0, nr = 0;
    char *a = replace_all(dlock__lua_acquire, with[v], &na), *r = replace_all(dlock__lua_release, with[v], &nr);
    if (!a || !r || na != 1 || nr != 1 || load(rc, a, acq[v]) || load(rc, r, rel[v])) {
      fprintf(stderr, "dlock-publish-ab: the scripts' hot-path publish was not found once each (%d, %d)\n", na, nr);
      return 70;
    }
    free(a);
    free(r);
  }
  double srv;
  for (int v = 0; v < NVAR; v++) /* warm-up */
    if (block(rc, acq[v], rel[v], per, &srv) < 0) return 70;
  static double s[NVAR][MAX_BLOCKS], sv[NVAR][MAX_BLOCKS];
  for (int b = 0; b < blocks; b++)
    for (int k = 0; k < NVAR; k++) {
      int v = b % 2 ? NVAR - 1 - k : k;
      if ((s[v][b] = block(rc, acq[v], rel[v], per, &sv[v][b])) < 0) return 70;
    }
  double med[NVAR], smed[NVAR];
  for (int v = 0; v < NVAR; v++) {
    qsort(s[v], (size_t)blocks, sizeof s[v][0], cmp);
    qsort(sv[v], (size_t)blocks, sizeof sv[v][0], cmp);
    med[v] = s[v][blocks / 2];
    smed[v] = sv[v][blocks / 2];
    printf("%-32s cycle %8.2f us (%.2f..%.2f)", name[v], med[v], s[v][0], s[v][blocks - 1]);
    if (v > 0) printf(" %+.2f us %+.1f%%", med[v] - med[0], 100.0 * (med[v] - med[0]) / med[0]);
    printf("; server CPU %6.2f us (%.2f..%.2f)", smed[v], sv[v][0], sv[v][blocks - 1]);
    if (v > 0) printf(" %+.2f us", smed[v] - smed[0]);
    printf("\n");
  }
  printf("%d blocks x %d cycles per variant, %d cycle%s in flight\n", blocks, per, depth, depth == 1 ? "" : "s");
  redisFree(rc);
  return 0;
}
