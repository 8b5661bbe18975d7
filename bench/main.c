/*
 * main.c - dlock-bench: options, the scenario table, and the results
 * (a table on stdout, JSON with --json). Progress goes to stderr.
 *
 * Exit status: 0 all selected scenarios ran and their correctness checks
 * held; 1 a scenario failed; 64 bad usage (as dlock); 69 no server.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench.h"

bench_opts bench_options;
bench_server bench_redis;

typedef struct result_row {
  char scenario[24];
  char impl[24];
  char metric[64];
  double value;
  char unit[16];
  char note[160];
  int is_target; /* a target line: value is 1 met / 0 missed */
} result_row;

#define MAX_ROWS 512
static result_row rows[MAX_ROWS];
static int row_count;

typedef struct scenario_entry {
  const char *name;
  bench_status (*run)(void);
  const char *what;
} scenario_entry;

static const scenario_entry scenarios[] = {
    {"floor", bench_scenario_floor, "PING round trip on one connection (hiredis)"},
    {"uncontended", bench_scenario_uncontended, "acquire+release on one thread vs bare hiredis"},
    {"throughput", bench_scenario_throughput, "1/8/64 threads, one client, vs redis-benchmark"},
    {"contended", bench_scenario_contended, "K processes on one name: hand-off, fairness, cost"},
    {"peers", bench_scenario_peers, "redis-py and node-redlock on the same server, ratios"},
    {"watchdog", bench_scenario_watchdog, "N held locks renewed by the watchdog"},
    {"scheduler", bench_scenario_scheduler, "cron next-fire computations per second"},
    {"redlock", bench_scenario_redlock, "acquire+release on 3 and 5 Redlock nodes vs one node"},
    {"cluster", bench_scenario_cluster, "3-master Redis Cluster vs one node: uncontended, contended"},
    {"rwlock", bench_scenario_rwlock, "read-write lock vs mutex: uncontended cycles, hand-off"},
    {"semaphore", bench_scenario_semaphore, "semaphore vs mutex: uncontended cycle, hand-off latency"},
};
#define SCENARIO_COUNT ((int)(sizeof scenarios / sizeof scenarios[0]))

void bench_progress(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("  .. ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static result_row *new_row(const char *scenario, const char *impl, const char *metric) {
  if (row_count >= MAX_ROWS) return NULL;
  result_row *r = &rows[row_count++];
  memset(r, 0, sizeof *r);
  snprintf(r->scenario, sizeof r->scenario, "%s", scenario);
  snprintf(r->impl, sizeof r->impl, "%s", impl);
  snprintf(r->metric, sizeof r->metric, "%s", metric);
  return r;
}

void bench_row(const char *scenario, const char *impl, const char *metric, double value, const char *unit,
               const char *note) {
  result_row *r = new_row(scenario, impl, metric);
  if (!r) return;
  r->value = value;
  snprintf(r->unit, sizeof r->unit, "%s", unit ? unit : "");
  snprintf(r->note, sizeof r->note, "%s", note ? note : "");
}

double bench_row_value(const char *scenario, const char *impl, const char *metric, int *found) {
  for (int i = 0; i < row_count; i++) {
    const result_row *r = &rows[i];
    if (!r->is_target && !strcmp(r->scenario, scenario) && !strcmp(r->impl, impl) && !strcmp(r->metric, metric)) {
      if (found) *found = 1;
      return r->value;
    }
  }
  if (found) *found = 0;
  return 0;
}

void bench_target(const char *scenario, const char *target, int met, const char *detail) {
  result_row *r = new_row(scenario, "target", target);
  if (!r) return;
  r->value = met;
  r->is_target = 1;
  snprintf(r->note, sizeof r->note, "%s", detail ? detail : "");
}

static void format_value(const result_row *r, char *buf, size_t len) {
  if (r->is_target) {
    snprintf(buf, len, "%s", r->value != 0 ? "MET" : "MISSED");
  } else if (r->value >= 100000 || r->value == (double)(long long)r->value) {
    snprintf(buf, len, "%.0f %s", r->value, r->unit);
  } else if (r->value >= 100) {
    snprintf(buf, len, "%.1f %s", r->value, r->unit);
  } else {
    snprintf(buf, len, "%.3g %s", r->value, r->unit);
  }
}

static void print_table(FILE *out, const char *statuses[]) {
  fprintf(out, "\nlayout: %s   redis %s at %s:%d%s\n", bench_redis.layout_used, bench_redis.version, bench_redis.host,
          bench_redis.port, bench_options.quick ? "   (--quick: short runs, figures are rough)" : "");
  for (int s = 0; s < SCENARIO_COUNT; s++) {
    if (!statuses[s]) continue;
    fprintf(out, "\n== %s (%s): %s\n", scenarios[s].name, scenarios[s].what, statuses[s]);
    fprintf(out, "  %-16s %-44s %-18s %s\n", "impl", "metric", "value", "note");
    for (int i = 0; i < row_count; i++) {
      if (strcmp(rows[i].scenario, scenarios[s].name) != 0) continue;
      char value[48];
      format_value(&rows[i], value, sizeof value);
      fprintf(out, "  %-16s %-44s %-18s %s\n", rows[i].impl, rows[i].metric, value, rows[i].note);
    }
  }
  fputc('\n', out);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (size_t i = 0; s[i] && i < 4096; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  for (int n = 0; n < 10000 && fgets(line, sizeof line, f); n++) {
    if (strncmp(line, "model name", 10) == 0) {
      const char *colon = strchr(line, ':');
      if (colon) {
        snprintf(buf, len, "%s", colon + 2);
        buf[strcspn(buf, "\n")] = '\0';
      }
      break;
    }
  }
  fclose(f);
}

static int write_json(const char *path, const char *statuses[]) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  struct utsname u;
  char model[256];
  cpu_model(model, sizeof model);
  if (uname(&u) != 0) snprintf(u.release, sizeof u.release, "unknown");
  fprintf(f,
          "{\n  \"tool\": \"dlock-bench\",\n  \"quick\": %s,\n  \"layout\": ", bench_options.quick ? "true" : "false");
  json_string(f, bench_redis.layout_used);
  fprintf(f, ",\n  \"machine\": {\"nproc\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
  json_string(f, model);
  fputs(", \"kernel\": ", f);
  json_string(f, u.release);
  fputs(", \"redis\": ", f);
  json_string(f, bench_redis.version);
  fputs("},\n  \"scenarios\": {", f);
  int first = 1;
  for (int s = 0; s < SCENARIO_COUNT; s++) {
    if (!statuses[s]) continue;
    fprintf(f, "%s\n    ", first ? "" : ",");
    json_string(f, scenarios[s].name);
    fputs(": ", f);
    json_string(f, statuses[s]);
    first = 0;
  }
  fputs("\n  },\n  \"results\": [", f);
  for (int i = 0; i < row_count; i++) {
    const result_row *r = &rows[i];
    fprintf(f, "%s\n    {\"scenario\": ", i ? "," : "");
    json_string(f, r->scenario);
    fputs(", \"impl\": ", f);
    json_string(f, r->impl);
    fputs(", \"metric\": ", f);
    json_string(f, r->metric);
    if (r->is_target)
      fprintf(f, ", \"met\": %s", r->value != 0 ? "true" : "false");
    else
      fprintf(f, ", \"value\": %.6g", r->value);
    fputs(", \"unit\": ", f);
    json_string(f, r->unit);
    fputs(", \"layout\": ", f);
    json_string(f, bench_redis.layout_used);
    fputs(", \"note\": ", f);
    json_string(f, r->note);
    fputc('}', f);
  }
  fputs("\n  ]\n}\n", f);
  return fclose(f) == 0 ? 0 : -1;
}

static void usage(FILE *out) {
  fprintf(out, "usage: dlock-bench [--quick] [--scenario NAME[,NAME...]] [--json FILE]\n"
               "                   [--url redis://127.0.0.1:PORT | --sentinel]\n"
               "                   [--layout cross|same|none]\n"
               "                   [--watchdog-locks N] [--watchdog-lease MS] [--watchdog-hold MS]\n"
               "                   [--no-peers] [--peers-dir DIR]\n"
               "\n"
               "Without --url a private redis-server is started (temp dir, free port, no\n"
               "persistence) and stopped on exit. --layout cross (default) pins redis-server to\n"
               "CPU 0 and the bench to CPU 1; same puts both on CPU 0. --sentinel adds a\n"
               "sentinel monitoring the private server: libdlock resolves it through the\n"
               "sentinel (redis-sentinel:// URL), the bare clients connect directly.\n"
               "The peers scenario runs with uncontended or contended (unless --no-peers):\n"
               "redis-py (/usr/bin/python3, or $DLOCK_BENCH_PYTHON) and node-redlock ('npm ci'\n"
               "in the peers dir first) run the same loops against the same server, pinned\n"
               "like the bench, and the ratios dlock / bare floor / peers are printed.\n"
               "Scenarios:\n");
  for (int s = 0; s < SCENARIO_COUNT; s++) fprintf(out, "  %-12s %s\n", scenarios[s].name, scenarios[s].what);
}

static int selected(const char *list, const char *name) {
  if (!list) return 1;
  size_t n = strlen(name);
  const char *p = list;
  for (int guard = 0; guard < 64 && *p; guard++) {
    size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, name, n) == 0) return 1;
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

/* The peers run along with the scenarios they repeat, unless --no-peers. */
static int want(const bench_opts *o, const char *name) {
  if (strcmp(name, "peers") != 0) return selected(o->scenario, name);
  return !o->no_peers &&
         (selected(o->scenario, "peers") || selected(o->scenario, "uncontended") || selected(o->scenario, "contended"));
}

static int parse_long(const char *text, long long min, long long max, long long *out) {
  char *end;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end || v < min || v > max) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  int pg = bench_pg_main(argc, argv);
  if (pg >= 0) return pg;
  bench_opts *o = &bench_options;
  o->layout = BENCH_LAYOUT_CROSS;
  long long locks = -1, lease = -1, hold = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(a, "--no-peers") == 0) {
      o->no_peers = 1;
    } else if (v && strcmp(a, "--peers-dir") == 0) {
      o->peers_dir = v, i++;
    } else if (strcmp(a, "--sentinel") == 0) {
      o->sentinel = 1;
    } else if (v && strcmp(a, "--url") == 0) {
      o->url = v, i++;
    } else if (v && strcmp(a, "--json") == 0) {
      o->json_path = v, i++;
    } else if (v && strcmp(a, "--scenario") == 0) {
      o->scenario = v, i++;
    } else if (v && strcmp(a, "--layout") == 0) {
      i++;
      if (strcmp(v, "cross") == 0)
        o->layout = BENCH_LAYOUT_CROSS;
      else if (strcmp(v, "same") == 0)
        o->layout = BENCH_LAYOUT_SAME;
      else if (strcmp(v, "none") == 0)
        o->layout = BENCH_LAYOUT_NONE;
      else
        return fprintf(stderr, "dlock-bench: --layout is cross, same or none; see 'dlock bench --help'\n"), 64;
    } else if (v && strcmp(a, "--watchdog-locks") == 0) {
      if (parse_long(v, 1, 1000000, &locks))
        return fprintf(stderr, "dlock-bench: --watchdog-locks: 1..1000000; see 'dlock bench --help'\n"), 64;
      i++;
    } else if (v && strcmp(a, "--watchdog-lease") == 0) {
      if (parse_long(v, 300, 3600000, &lease))
        return fprintf(stderr, "dlock-bench: --watchdog-lease: 300..3600000 ms; see 'dlock bench --help'\n"), 64;
      i++;
    } else if (v && strcmp(a, "--watchdog-hold") == 0) {
      if (parse_long(v, 100, 3600000, &hold))
        return fprintf(stderr, "dlock-bench: --watchdog-hold: 100..3600000 ms; see 'dlock bench --help'\n"), 64;
      i++;
    } else {
      fprintf(stderr, "dlock-bench: unknown or incomplete option '%s'; see 'dlock bench --help'\n", a);
      return 64;
    }
  }
  o->watchdog_locks = locks > 0 ? (int)locks : o->quick ? 1000 : 10000;
  /* --quick runs in the test suite, also under ASan on a busy machine: a
   * lease long enough that only a stall of seconds loses a lock. */
  o->watchdog_lease_ms = lease > 0 ? lease : o->quick ? 6000 : 30000;
  o->watchdog_hold_ms = hold > 0 ? hold : o->quick ? 3000 : 120000;
  if (!o->peers_dir) o->peers_dir = DLOCK_BENCH_PEERS_DIR;
  int any = 0;
  for (int s = 0; s < SCENARIO_COUNT; s++) any |= want(o, scenarios[s].name);
  if (!any) {
    fprintf(stderr, "dlock-bench: no scenario matches '%s'; see 'dlock bench --help'\n", o->scenario);
    return 64;
  }

  if (bench_server_setup(o, &bench_redis) != 0) return 69;
  fprintf(stderr, "dlock-bench: redis %s at %s, layout %s%s\n", bench_redis.version, bench_redis.url,
          bench_redis.layout_used, o->quick ? ", quick" : "");

  const char *statuses[SCENARIO_COUNT] = {0};
  int failed = 0;
  for (int s = 0; s < SCENARIO_COUNT; s++) {
    if (!want(o, scenarios[s].name)) continue;
    fprintf(stderr, "[%s] %s\n", scenarios[s].name, scenarios[s].what);
    int64_t t0 = bench_now_ns();
    bench_status st = scenarios[s].run();
    switch (st) {
    case BENCH_OK:
      statuses[s] = "ok";
      break;
    case BENCH_FAILED:
      statuses[s] = "FAILED";
      failed = 1;
      break;
    case BENCH_UNAVAILABLE:
      statuses[s] = "not available";
      break;
    }
    fprintf(stderr, "[%s] %s in %.1f s\n", scenarios[s].name, statuses[s], (double)(bench_now_ns() - t0) / 1e9);
  }
  print_table(stdout, statuses);
  if (o->json_path && write_json(o->json_path, statuses) != 0) failed = 1;
  bench_server_teardown(&bench_redis);
  return failed ? 1 : 0;
}
