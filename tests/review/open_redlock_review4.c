/*
 * open_redlock_review4.c - the fourth adversarial review of Redlock
 * (docs/redlock.md), branch rev4rl.
 *
 * Promises attacked (docs/redlock.md):
 *  - "Survived: nodes losing their data (restarted empty, flushed,
 *    replaced) at any moment, any number of them short of all, also while
 *    other nodes are frozen or cut off, for every client whatever its key
 *    prefix"; Renewal: "while the hold is valid, so no one else holds a
 *    majority" (the renewal that takes counted nodes without our key);
 *  - "Fences across the quorum": for holders whose holds do not overlap in
 *    time, fences are strictly increasing (with 5 nodes, 2 may lose their
 *    data when all 5 answered).
 *
 * The attack (history_*): 5 real redis-servers; 4 processes, each taking the
 * lock over and over (a new client every other hold, watchdog leases of 1.5
 * and 3 s, so renewals run across the faults, also the renewal that takes
 * free nodes and re-seeds emptied ones), while the parent injects faults on
 * at most one node at a time (the docs survive any minority): kill -9 and
 * restart empty, FLUSHALL, SIGSTOP for 1-3 s then SIGCONT. Each holder
 * appends entry and exit lines (monotonic time, fence, valid_until) to a
 * shared O_APPEND file; a hold counts from the acquire's return to the last
 * moment the holder saw it valid (dlock_mutex_lost() == NONE and now <
 * valid_until). The checker: no two holds overlap while both believed
 * valid, and fences rise strictly in the order of the holds.
 *
 * Findings (each a TEST below, failing on today's code):
 *  finding1_*: nodes emptied a lease apart (4-5 flushed, 1-3 restarted
 *    empty more than a lease later, no acquire between that promotes 4-5)
 *    make the deployment look new: a new client takes the lock while the
 *    holder's hold is valid (high: two holders). finding1b_*: the same
 *    with 4-5 flushed while A holds, their markers written by a contender's
 *    failed attempt before A's renewal re-seeds them (so no renewal's
 *    quarantine is written there).
 *  finding2_*: a crashed contender's keys on two nodes that restarted empty
 *    (not counted) plus two counted ones end a valid hold at once with
 *    DLOCK_LOST_TAKEN ("another owner holds the lock now") although no owner
 *    holds a majority of the counted nodes (low: availability and a wrong
 *    message, no safety loss; arguable, the docs say "on a majority").
 *
 * How to run: cmake -DDLOCK_OPEN_FINDINGS=ON, build, then
 * build/plain/tests/open_redlock_review4 [finding1|finding2].
 *
 * Attacks that held (the history_* tests, skipped unless
 * DLOCK_REV4_HISTORY=1 is set: DLOCK_REV4_HISTORY=1 open_redlock_review4
 * history): 4 processes, watchdog leases 1.5/3 s, a new client every other
 * hold, faults on one, two, or three nodes at a time (kill -9 + restart
 * empty, FLUSHALL; SIGSTOP 1-3 s + SIGCONT of at most two): no two holds
 * overlapped while both believed valid, fences rose strictly. Read and
 * held on inspection:
 * the renewal's take of counted free nodes (seed_absent) counts a node only
 * where its marker counts (rl_extend.lua 3 vs 2), so a flushed node known
 * to a client's stale cache is not counted; the fence needs no record on a
 * seeded node (later fences come from the counters the acquire wrote back
 * to every node that answered); the watchdog's renewal and a release of the
 * same handle do not overlap (dlock__watchdog_remove waits).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "test.h"

#define NN 5
#define NPROC 4
#define RUN_MS 30000

static th_redis srv[NN];
static char url[2048];
static char hist[512];

typedef struct worker_arg {
  int id;
  long long until_ms; /* dlock_mono_now() */
} worker_arg;

static void put(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(int fd, const char *fmt, ...) {
  char b[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  if (n > 0) (void)!write(fd, b, (size_t)n);
}

static int worker(void *arg) {
  worker_arg *w = arg;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(hist, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (fd < 0) return 2;
  srand((unsigned)getpid());
  dlock_client *c = NULL;
  int holds = 0;
  for (int round = 0; round < 400 && dlock_mono_now() < w->until_ms; round++) {
    if (!c || round % 2 == 0) {
      dlock_client_free(c);
      c = NULL;
      dlock_client_options o;
      dlock_client_options_init(&o);
      o.url = url;
      o.command_timeout_ms = 1000;
      if (dlock_client_new(&c, &o) != 0) {
        c = NULL;
        usleep(100000);
        continue;
      }
    }
    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    mo.watchdog_lease_ms = (w->id % 2) ? 1500 : 3000;
    dlock_mutex *m = NULL;
    if (dlock_mutex_new(&m, c, "rev4-history", &mo) != 0) continue;
    int rc = dlock_mutex_acquire(m, 2000);
    if (rc == 0) {
      dlock_mono_ms t0 = dlock_mono_now();
      uint64_t f = dlock_mutex_fence(m);
      put(fd, "E %d %lld %llu %lld\n", w->id, (long long)t0, (unsigned long long)f,
          (long long)dlock_mutex_valid_until(m));
      /* Hold 20..1220 ms (longer than a watchdog period for some), watching validity. */
      long hold = 20 + rand() % 1200;
      dlock_mono_ms last_ok = t0;
      for (int k = 0; k < 1000; k++) {
        dlock_mono_ms now = dlock_mono_now();
        if (dlock_mutex_lost(m) != DLOCK_LOST_NONE || now >= dlock_mutex_valid_until(m)) break;
        last_ok = now;
        if (now - t0 >= hold) break;
        usleep(10000);
      }
      put(fd, "X %d %lld %llu %d\n", w->id, (long long)last_ok, (unsigned long long)f, (int)dlock_mutex_lost(m));
      dlock_mutex_release(m);
      holds++;
    }
    dlock_mutex_free(m);
    usleep((useconds_t)(rand() % 30000));
  }
  dlock_client_free(c);
  close(fd);
  return holds > 0 ? 0 : 3;
}

typedef struct hold {
  int id;
  long long start, end;
  unsigned long long fence;
  int ended;
} hold;

static int by_start(const void *a, const void *b) {
  const hold *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* The history check: returns the number of violations, described in 'why'. */
static int check_history(char *why, size_t len, int *nholds) {
  FILE *f = fopen(hist, "r");
  if (!f) {
    snprintf(why, len, "no history file %s", hist);
    return 1;
  }
  static hold h[4096];
  int n = 0;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char k;
    int id;
    long long t;
    unsigned long long fe;
    long long extra;
    if (sscanf(line, "%c %d %lld %llu %lld", &k, &id, &t, &fe, &extra) != 5) continue;
    if (k == 'E' && n < 4096) {
      h[n++] = (hold){id, t, 0, fe, 0};
    } else if (k == 'X') {
      for (int i = n - 1; i >= 0; i--)
        if (h[i].id == id && !h[i].ended && h[i].fence == fe) {
          h[i].end = t;
          h[i].ended = 1;
          break;
        }
    }
  }
  fclose(f);
  *nholds = n;
  for (int i = 0; i < n; i++)
    if (!h[i].ended) h[i].end = h[i].start; /* killed mid-hold: cannot happen here */
  qsort(h, (size_t)n, sizeof h[0], by_start);
  int bad = 0;
  size_t o = 0;
  why[0] = 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n && h[j].start <= h[i].end + 5000; j++) {
      int overlap = h[j].start < h[i].end;
      int fence_bad = h[j].fence <= h[i].fence;
      if (overlap || fence_bad) {
        bad++;
        if (o < len)
          o += (size_t)snprintf(why + o, len - o,
                                "[%s%s: p%d [%lld,%lld] fence %llu vs p%d [%lld,%lld] fence %llu] ",
                                overlap ? "overlap" : "", fence_bad ? " fence-not-rising" : "", h[i].id, h[i].start,
                                h[i].end, h[i].fence, h[j].id, h[j].start, h[j].end, h[j].fence);
      }
    }
  return bad;
}

/* One run: 'width' nodes faulted at a time (1..3; at most 2 frozen). */
static void run_history(int width, unsigned seed) {
  /* These held (no violation in repeated runs): an open_ file's tests fail
   * on today's code, so they run only when asked (35 s each). */
  if (!getenv("DLOCK_REV4_HISTORY")) TEST_SKIP("held in review 4; set DLOCK_REV4_HISTORY=1 to run the history check");
  signal(SIGPIPE, SIG_IGN);
  if (th_redis_start_n(srv, NN, NULL) != 0) TEST_SKIP("cannot start %d redis-servers", NN);
  th_redlock_url(srv, NN, url, sizeof url);
  snprintf(hist, sizeof hist, "%s/history.log", srv[0].dir);
  unlink(hist);
  worker_arg wa[NPROC];
  pid_t pid[NPROC];
  long long until = dlock_mono_now() + RUN_MS;
  for (int i = 0; i < NPROC; i++) {
    wa[i] = (worker_arg){i, until};
    pid[i] = th_spawn(worker, &wa[i]);
  }
  /* Faults on 'width' distinct nodes at a time, bounded in count and time. */
  srand(seed);
  int nfaults = 0;
  for (int k = 0; k < 60 && dlock_mono_now() < until - 1500; k++) {
    int v[3];
    v[0] = rand() % NN;
    v[1] = (v[0] + 1 + rand() % (NN - 1)) % NN;
    do v[2] = rand() % NN;
    while (v[2] == v[0] || v[2] == v[1]);
    int kind = rand() % 3;
    char out[128];
    for (int q = 0; q < width && !(kind == 2 && q == 2); q++) { /* at most 2 frozen */
      if (kind == 0) (void)th_redis_restart(&srv[v[q]]);
      else if (kind == 1) (void)th_redis_cli(&srv[v[q]], out, sizeof out, "FLUSHALL");
      else kill(srv[v[q]].pid, SIGSTOP);
    }
    if (kind == 2) {
      th_sleep_ms(1000 + rand() % 2000);
      for (int q = 0; q < width && q < 2; q++) kill(srv[v[q]].pid, SIGCONT);
    }
    nfaults++;
    th_sleep_ms(700 + rand() % 800);
  }
  int failed_children = 0;
  for (int i = 0; i < NPROC; i++) {
    int st = th_wait(pid[i], RUN_MS + 20000);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 2) failed_children++;
  }
  char why[4096];
  int nholds = 0;
  int bad = check_history(why, sizeof why, &nholds);
  th_redis_stop_n(srv, NN);
  printf("  %d holds, %d faults (width %d), %d violations\n", nholds, nfaults, width, bad);
  ASSERT(failed_children == 0);
  ASSERT(nholds > 10);
  if (bad) TEST_FAIL("the history has %d violations: %s", bad, why);
}

TEST(history_one_node_faulted_at_a_time_watchdog_renewals_new_clients) { run_history(1, 12345); }

TEST(history_two_nodes_faulted_at_a_time_watchdog_renewals_new_clients) { run_history(2, 777); }

/* Three of five lose their data at once (short of all: survived, says
 * docs/redlock.md), or two are frozen. */
TEST(history_three_nodes_lose_data_at_a_time_watchdog_renewals_new_clients) { run_history(3, 4242); }

/*
 * Finding 1: nodes emptied a lease apart make the deployment look new.
 *
 * Promise (docs/redlock.md, "Restarts"): "Survived: nodes losing their data
 * (restarted empty, flushed, replaced) at any moment, any number of them
 * short of all ...: one node that kept its marker (answering, ...) ...
 * stops the deployment from looking new (so nodes emptied a lease apart, as
 * in a rolling restart without persistence, do not)".
 *
 * Attack: a deployment in use (every marker counts). Nodes 4 and 5 are
 * flushed; A acquires (nodes 1-3 count; its marker read writes "held out
 * since now" on 4 and 5) and holds with its watchdog (6 s lease). No other
 * acquire runs, so 4 and 5 are never promoted: they kept their data from
 * then on, but their markers say "counts 0" (written by a read, not by a
 * renewal). More than a lease later, nodes 1-3 are restarted empty (kill -9;
 * three of five, short of all; the losses are a lease apart). A new client
 * B reads the markers: 1-3 have none, 4-5 have one that does not count and
 * is not a renewal's, so judge_markers() finds no marker that counts
 * ('any' = 0), every node answered, and the deployment is taken as NEW:
 * every node is promoted at once. B takes 1-3 (empty) and holds 3 of 5
 * while A's hold is still valid (A's key is on 4 and 5, renewed).
 *
 * What happened: B acquired while A believed its hold valid (see the
 * assertion's message): two holders at once.
 */
static void emptied_a_lease_apart(int flush_while_held) {
  signal(SIGPIPE, SIG_IGN);
  if (th_redis_start_n(srv, NN, NULL) != 0) TEST_SKIP("cannot start %d redis-servers", NN);
  th_redlock_url(srv, NN, url, sizeof url);
  dlock_client *s = NULL, *a = NULL, *b = NULL;
  dlock_mutex *ms = NULL, *ma = NULL, *mb = NULL;
  char out[256];
  int b_rc = -1000;
  long long a_left = 0;
  dlock_lost_reason a_lost = DLOCK_LOST_NONE;
  char msg[1500] = "";
  /* Setup: a deployment in use, every marker counts. */
  s = th_client_retry(url);
  if (!s || dlock_mutex_new(&ms, s, "rev4-setup", NULL) != 0 || dlock_mutex_acquire(ms, 0) != 0) {
    snprintf(msg, sizeof msg, "setup acquire failed");
    goto done;
  }
  dlock_mutex_release(ms);
  /* Nodes 4 and 5 lose their data (before A's acquire, or while A holds). */
  if (!flush_while_held) {
    th_redis_cli(&srv[3], out, sizeof out, "FLUSHALL");
    th_redis_cli(&srv[4], out, sizeof out, "FLUSHALL");
  }
  a = th_client_retry(url);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 6000;
  if (!a || dlock_mutex_new(&ma, a, "rev4-roll", &mo) != 0 || dlock_mutex_acquire(ma, 0) != 0) {
    snprintf(msg, sizeof msg, "A's acquire failed: %s", ma ? dlock_mutex_errmsg(ma) : "no client");
    goto done;
  }
  if (flush_while_held) {
    /* A holds on all five; 4 and 5 are flushed, and a contender's attempt
     * reads their markers first (writing "held out since now", counts 0),
     * so A's renewal re-seeds them without a renewal's quarantine. */
    th_redis_cli(&srv[3], out, sizeof out, "FLUSHALL");
    th_redis_cli(&srv[4], out, sizeof out, "FLUSHALL");
    dlock_client *k = th_client_retry(url);
    dlock_mutex *mk = NULL;
    if (k && dlock_mutex_new(&mk, k, "rev4-roll", NULL) == 0) (void)dlock_mutex_acquire(mk, 0);
    dlock_mutex_free(mk);
    dlock_client_free(k);
  }
  /* More than a lease passes (A renews); no other acquire runs. */
  th_sleep_ms(7000);
  if (dlock_mutex_lost(ma) != DLOCK_LOST_NONE) {
    snprintf(msg, sizeof msg, "A lost its hold before the attack (%d)", (int)dlock_mutex_lost(ma));
    goto done;
  }
  /* Nodes 1-3 restart empty, a lease after 4 and 5 lost theirs. */
  for (int i = 0; i < 3; i++) th_redis_restart(&srv[i]);
  b = th_client_retry(url);
  if (!b || dlock_mutex_new(&mb, b, "rev4-roll", &mo) != 0) {
    snprintf(msg, sizeof msg, "client B failed");
    goto done;
  }
  b_rc = dlock_mutex_acquire(mb, 0);
  a_lost = dlock_mutex_lost(ma);
  a_left = (long long)(dlock_mutex_valid_until(ma) - dlock_mono_now());
  snprintf(msg, sizeof msg, "B's acquire: %d (%s); A: lost %d, valid for %lld ms more, fence A %llu B %llu", b_rc,
           dlock_mutex_errmsg(mb), (int)a_lost, a_left, (unsigned long long)dlock_mutex_fence(ma),
           (unsigned long long)dlock_mutex_fence(mb));
done:
  if (mb) dlock_mutex_free(mb);
  if (ma) dlock_mutex_free(ma);
  if (ms) dlock_mutex_free(ms);
  dlock_client_free(b);
  dlock_client_free(a);
  dlock_client_free(s);
  th_redis_stop_n(srv, NN);
  printf("  %s\n", msg);
  if (b_rc == -1000) TEST_FAIL("the scenario did not run: %s", msg);
  if (b_rc == 0 && a_lost == DLOCK_LOST_NONE && a_left > 0)
    TEST_FAIL("two holders at once: %s", msg);
}

TEST(finding1_nodes_emptied_a_lease_apart_make_the_deployment_look_new) { emptied_a_lease_apart(0); }

/* Finding 1, by another road: 4 and 5 are flushed while A holds, a
 * contender's failed attempt writes their markers (counts 0), A's renewal
 * re-seeds them (no renewal's quarantine: the marker exists); a lease later
 * 1-3 restart empty and a new client takes the lock while A's hold is valid. */
TEST(finding1b_flushed_while_held_then_the_others_a_lease_later) { emptied_a_lease_apart(1); }

/*
 * Finding 2 (low: a hold given up early, no safety loss): a crashed
 * contender's keys on restarted nodes that are not counted end a valid hold.
 *
 * Promise (docs/redlock.md, Renewal): "Before the local deadline the hold is
 * lost at once only when another owner's key ... is on a majority ...:
 * another owner's key on a minority (a contender's failed attempt, given
 * back at once or at its lease's end) and a key gone on a node that is not
 * counted (restarted, held out) are not final, the renewal answers
 * DLOCK_EQUORUM and the watchdog tries again within the validity."
 *
 * Attack: a contender that crashed mid-attempt left its key (8 s lease) on
 * nodes 4 and 5 (a minority); A takes 1-3 (15 s watchdog lease). Nodes 1
 * and 2 restart empty (A's client holds them out: run_id changed), and the
 * crashed contender's attempt had also reached them (its key there, SET NX
 * as its acquire would). The contender holds 2 of the 3 counted nodes, no
 * majority (3 of 5 needed); nobody can hold the lock. A's next renewal
 * counts another owner on 4 of 5 (rl_extend: 'neg' counts nodes that are
 * not counted) and reports DLOCK_LOST_TAKEN at once, 10 s before its
 * deadline, although the contender's keys end in 8 s and A could then take
 * 4 and 5 again. (Arguable: the docs say "on a majority" of the nodes,
 * but treat a node that is not counted as no evidence elsewhere.)
 */
TEST(finding2_a_crashed_contenders_keys_on_uncounted_nodes_end_a_valid_hold) {
  signal(SIGPIPE, SIG_IGN);
  if (th_redis_start_n(srv, NN, NULL) != 0) TEST_SKIP("cannot start %d redis-servers", NN);
  th_redlock_url(srv, NN, url, sizeof url);
  dlock_client *s = NULL, *a = NULL;
  dlock_mutex *ms = NULL, *ma = NULL;
  char out[256], msg[1500] = "";
  int ran = 0;
  dlock_lost_reason lost = DLOCK_LOST_NONE;
  long long left = 0;
  s = th_client_retry(url);
  if (!s || dlock_mutex_new(&ms, s, "rev4-setup", NULL) != 0 || dlock_mutex_acquire(ms, 0) != 0) {
    snprintf(msg, sizeof msg, "setup acquire failed");
    goto done;
  }
  dlock_mutex_release(ms);
  for (int i = 3; i < 5; i++) th_redis_cli(&srv[i], out, sizeof out, "SET rev4-early crashedcontender NX PX 12000");
  a = th_client_retry(url);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 15000;
  if (!a || dlock_mutex_new(&ma, a, "rev4-early", &mo) != 0 || dlock_mutex_acquire(ma, 0) != 0) {
    snprintf(msg, sizeof msg, "A's acquire failed: %s", ma ? dlock_mutex_errmsg(ma) : "no client");
    goto done;
  }
  for (int i = 0; i < 2; i++) {
    th_redis_restart(&srv[i]);
    th_redis_cli(&srv[i], out, sizeof out, "SET rev4-early crashedcontender NX PX 12000");
  }
  /* A's renewals (every 5 s) run; watch up to 7 s, well before its deadline. */
  long long t0 = th_now_ms();
  while (th_now_ms() - t0 < 7000 && dlock_mutex_lost(ma) == DLOCK_LOST_NONE) th_sleep_ms(50);
  lost = dlock_mutex_lost(ma);
  left = (long long)(dlock_mutex_valid_until(ma) - dlock_mono_now());
  ran = 1;
  snprintf(msg, sizeof msg, "A: lost %d (%s) with %lld ms of validity left; %s", (int)lost,
           dlock_lost_reason_str(lost), left, dlock_mutex_errmsg(ma));
done:
  if (ma) dlock_mutex_free(ma);
  if (ms) dlock_mutex_free(ms);
  dlock_client_free(a);
  dlock_client_free(s);
  th_redis_stop_n(srv, NN);
  printf("  %s\n", msg);
  if (!ran) TEST_FAIL("the scenario did not run: %s", msg);
  if (lost != DLOCK_LOST_NONE) TEST_FAIL("a hold lost before its deadline while no owner held a majority: %s", msg);
}

TEST_MAIN()
