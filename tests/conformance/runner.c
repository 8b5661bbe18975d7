/*
 * runner.c - runs the contract (contract.c, kinds.c) on one fixture and
 * prints its column of the matrix: "conformance: FIXTURE SCENARIO RESULT",
 * RESULT one of pass, FAIL, "not offered" (the docs and the library say
 * so), "n/a" (the fixture cannot inject the fault the scenario needs),
 * "known FAIL" (a finding listed below: printed, but it does not fail the
 * run). tests/conformance/matrix.sh
 * gathers the columns into the matrix of docs/conformance.md.
 *
 * Usage: conformance FIXTURE [SCENARIO-SUBSTRING]. Exit 0 when every cell
 * passed, was not offered or is a known failure; 1 otherwise; 77 when the
 * fixture cannot run here (its servers are not installed).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conformance.h"
#include "harness.h"
#include "test.h"

struct test_entry test__list[TEST_MAX];
int test__count;
jmp_buf test__jmp;
int test__failed_here;
int test__skipped_here;

const conf_fixture *conf_fx;
static int not_offered_here;

/* The findings: a cell that fails today, with what it found. Each is listed
 * in docs/conformance.md; remove it with its fix. */
static const struct known {
  const char *fixture, *scenario, *finding;
} known[] = {
    {NULL, NULL, NULL},
};

static const char *known_finding(const char *fixture, const char *scenario) {
  for (size_t i = 0; known[i].fixture; i++)
    if (strcmp(known[i].fixture, fixture) == 0 && strcmp(known[i].scenario, scenario) == 0) return known[i].finding;
  return NULL;
}

static const conf_fixture *const fixtures[] = {
    &conf_fx_redis,       &conf_fx_tls,
    &conf_fx_sentinel,    &conf_fx_cluster,
    &conf_fx_redlock,
#ifdef CONF_WITH_ZK
    &conf_fx_zk,
#endif
#ifdef CONF_WITH_PG
    &conf_fx_pg_lease,    &conf_fx_pg_advisory,
#endif
#ifdef CONF_WITH_MYSQL
    &conf_fx_mysql_lease, &conf_fx_mysql_advisory,
#endif
};

__attribute__((noreturn)) static void end_as(int how, const char *label, const char *fmt, va_list ap) {
  printf("  %s: ", label);
  vprintf(fmt, ap);
  va_end(ap); /* the caller's va_start: it never returns to end it */
  printf("\n");
  not_offered_here = how;
  longjmp(test__jmp, 1);
}

void conf_not_offered(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  end_as(1, "not offered", fmt, ap);
}

void conf_not_applicable(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  end_as(2, "n/a", fmt, ap);
}

/* The library's "not offered" error: DLOCK_EINVAL, in one of the wordings
 * its backends use today. */
static int is_refusal(int rc) {
  if (rc != DLOCK_EINVAL) return 0;
  static const char *const words[] = {"not offered", "not supported", "has none", "needs lease mode"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strstr(dlock_last_error(), words[i])) return 1;
  return 0;
}

void conf_offered(unsigned cap, const char *what, int rc) {
  int claimed = (conf_fx->caps & cap) != 0;
  if (is_refusal(rc)) {
    if (claimed)
      TEST_FAIL("the docs say %s offers %s, but the library refuses it: %s", conf_fx->name, what, dlock_last_error());
    conf_not_offered("%s: %s", what, dlock_last_error());
  }
  if (rc != 0) TEST_FAIL("%s on %s returned %s: %s", what, conf_fx->name, dlock_err_name(rc), dlock_last_error());
  if (!claimed)
    TEST_FAIL("%s works on %s, but the docs say it is not offered there (fix the fixture's caps or the docs)", what,
              conf_fx->name);
}

/* ---- Children ---- */

extern char **environ;
int main(int argc, char **argv);
static void *shared_area;
static size_t shared_size;
static int shared_fd = -1;

void *conf_shared(size_t size) {
  if (shared_area) return shared_area;
  shared_fd = memfd_create("dlock-conformance", 0); /* not close-on-exec: children map it */
  if (shared_fd < 0 || ftruncate(shared_fd, (off_t)size) != 0) TEST_FAIL("cannot make shared memory: %m");
  shared_area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0);
  if (shared_area == MAP_FAILED) TEST_FAIL("cannot map shared memory: %m");
  shared_size = size;
  return shared_area;
}

static void shared_end(void) {
  if (shared_area) munmap(shared_area, shared_size);
  if (shared_fd >= 0) close(shared_fd);
  shared_area = NULL;
  shared_fd = -1;
}

/* The child finds fn by its distance from main: one executable, the same
 * layout in every image of it. Everything the exec needs is made before the
 * fork: a forked copy of a threaded process must not allocate. */
pid_t conf_spawn(int (*fn)(void *), intptr_t arg) {
  char self[] = "conformance", mode[] = "--child", fixture[64], offset[32], argtext[32], shm[48], state[1200];
  snprintf(fixture, sizeof fixture, "%s", conf_fx->name);
  snprintf(offset, sizeof offset, "%lld", (long long)((intptr_t)fn - (intptr_t)main));
  snprintf(argtext, sizeof argtext, "%lld", (long long)arg);
  snprintf(shm, sizeof shm, "%d:%zu", shared_fd, shared_size);
  snprintf(state, sizeof state, "DLOCK_CONF_STATE=%s", conf_fx->state());
  char *argv[] = {self, mode, fixture, offset, argtext, shm, NULL};
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 2, sizeof *envp);
  if (!envp) return -1;
  envp[0] = state;
  memcpy(envp + 1, environ, n * sizeof *envp);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execve("/proc/self/exe", argv, envp);
    _exit(127);
  }
  free(envp);
  return pid;
}

/* conformance --child FIXTURE OFFSET ARG SHM-FD:SIZE */
static int child_main(char **argv) {
  const char *state = getenv("DLOCK_CONF_STATE");
  if (!state) return 126;
  conf_fx->adopt(state);
  int fd = -1;
  size_t size = 0;
  if (sscanf(argv[5], "%d:%zu", &fd, &size) == 2 && fd >= 0) {
    shared_area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shared_area == MAP_FAILED) return 125;
    shared_fd = fd;
    shared_size = size;
  }
  int (*fn)(void *) = (int (*)(void *))((intptr_t)main + (intptr_t)strtoll(argv[3], NULL, 10));
  return fn((void *)(intptr_t)strtoll(argv[4], NULL, 10));
}

enum result { PASS, FAIL, NOT_OFFERED, NOT_APPLICABLE, KNOWN };
static const char *const result_text[] = {"pass", "FAIL", "not offered", "n/a", "known FAIL"};

static enum result run_one(const conf_scenario *s) {
  printf("scenario %s on %s ...\n", s->name, conf_fx->name);
  test__failed_here = 0;
  not_offered_here = 0;
  long long t0 = th_now_ms();
  if (setjmp(test__jmp) == 0) s->fn();
  conf_free_all();
  shared_end();
  printf("  %.1f s\n", (th_now_ms() - t0) / 1000.0);
  if (not_offered_here) return not_offered_here == 1 ? NOT_OFFERED : NOT_APPLICABLE;
  if (!test__failed_here) {
    if (known_finding(conf_fx->name, s->name))
      printf("  note: listed as a known failure, but passed this time (its fix may have come)\n");
    return PASS;
  }
  const char *finding = known_finding(conf_fx->name, s->name);
  if (finding) {
    printf("  known failure: %s\n", finding);
    return KNOWN;
  }
  return FAIL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURE [SCENARIO-SUBSTRING]; fixtures:", argv[0]);
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) fprintf(stderr, " %s", fixtures[i]->name);
    fprintf(stderr, "\n");
    return 2;
  }
  int child = argc == 6 && strcmp(argv[1], "--child") == 0;
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
    if (strcmp(fixtures[i]->name, argv[child ? 2 : 1]) == 0) conf_fx = fixtures[i];
  if (conf_fx && child) return child_main(argv);
  if (!conf_fx) {
    fprintf(stderr, "no fixture named '%s' (run without arguments for the list)\n", argv[1]);
    return 2;
  }
  char why[256] = "";
  long long t0 = th_now_ms();
  if (!conf_fx->start(why, sizeof why)) {
    printf("SKIP: the %s fixture cannot run here: %s\n", conf_fx->name, why);
    return TEST_EXIT_SKIP;
  }
  printf("%s: servers up in %.1f s\n", conf_fx->name, (th_now_ms() - t0) / 1000.0);
  const struct {
    const conf_scenario *list;
    size_t n;
  } parts[] = {{conf_contract, conf_contract_len},
               {conf_kinds, conf_kinds_len},
               {conf_election, conf_election_len},
               {conf_last, conf_last_len}};
  enum result res[128];
  const char *names[128];
  int n = 0, failed = 0;
  for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
    for (size_t i = 0; i < parts[p].n && n < 128; i++) {
      const conf_scenario *s = &parts[p].list[i];
      if (argc > 2 && !strstr(s->name, argv[2])) continue;
      names[n] = s->name;
      res[n] = run_one(s);
      failed += res[n] == FAIL;
      n++;
    }
  conf_fx->stop();
  printf("\nThe %s column (%.1f s in all):\n", conf_fx->name, (th_now_ms() - t0) / 1000.0);
  for (int i = 0; i < n; i++) printf("conformance: %s %s %s\n", conf_fx->name, names[i], result_text[res[i]]);
  return failed ? 1 : 0;
}
