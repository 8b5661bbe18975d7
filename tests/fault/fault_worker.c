/*
 * fault_worker.c - one process of the fault matrix (issue 22 item 12): takes
 * and releases locks through the public API only (dlock.h) and writes every
 * hold to its own append-only log, in the format history.h reads.
 *
 *   fault_worker --url URL --id N --log FILE [--seconds S] [--seed X]
 *                [--kinds mutex,sem,rw] [--names K] [--permits P]
 *                [--lease-min MS] [--lease-max MS] [--hold-max MS]
 *                [--no-lease] [--prefix P] [--timeout MS] [--fresh-client] [--guard]
 *
 * Loops until S seconds have passed (or SIGTERM): picks a kind and one of K
 * names of that kind (few names, so workers contend), acquires with a random
 * wait, holds a random time, watching the loss fd, then releases. A third
 * of the holds have a fixed lease, some of them held past it (the loss must
 * come at valid_until); the rest are in watchdog mode, some held over
 * several renewals. --no-lease (ZooKeeper: the session is the lease) leaves
 * the lease options unset. --fresh-client: a new client for every hold, as
 * each `dlock run` is (what a client learned about the servers is gone).
 * --guard: at the start and at the end of each hold, a write through the
 * fencing guard (dlock_guard_check on the resource "g-NAME") with the
 * hold's fence, logged as a G line: a frozen holder's late write must be
 * refused once a newer fence was admitted.
 * Each line is one write(2) on an O_APPEND fd, so
 * a kill -9 loses at most the line being written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlock.h"

static volatile sig_atomic_t stop_flag;
static int log_fd = -1;

static void on_term(int sig) {
  (void)sig;
  stop_flag = 1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void logf_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_line(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  /* One record per line, whatever a message carries (the history checker
   * reads lines); a message of more lines is a library bug test_pg finds. */
  for (int i = 0; i < n; i++)
    if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
  buf[n++] = '\n';
  ssize_t w;
  do w = write(log_fd, buf, (size_t)n);
  while (w < 0 && errno == EINTR);
}

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static int64_t rnd_between(int64_t lo, int64_t hi) {
  return hi <= lo ? lo : lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static const char *lost_name(dlock_lost_reason r) {
  static const char *s[] = {"NONE", "EXPIRED", "TAKEN", "UNREACHABLE", "MAX_HOLD", "DEADLINE", "FAILOVER", "DELETED"};
  return (unsigned)r < sizeof s / sizeof *s ? s[r] : "OTHER";
}

static const char *rc_name(int rc) { return rc == 0 ? "OK" : dlock_err_name(rc); }

/* A write through the guard, logged as a G line. */

/* valid_until in ns; a hold with no deadline of its own (PostgreSQL's advisory
 * mode: it lives with its session, dlock_mutex_valid_until() is INT64_MAX)
 * stays INT64_MAX rather than overflow. */
static int64_t vu_ns(dlock_mutex *m) {
  dlock_mono_ms v = dlock_mutex_valid_until(m);
  return v >= INT64_MAX / 1000000LL ? INT64_MAX : (int64_t)v * 1000000LL;
}

static void guard_write(dlock_client *c, int id, long seq, const char *name, uint64_t fence) {
  char res[80];
  snprintf(res, sizeof res, "g-%s", name);
  int64_t t_call = now_ns();
  int rc = dlock_guard_check(c, res, fence);
  logf_line("G w=%d seq=%ld res=%s fence=%" PRIu64 " t_call=%" PRId64 " t_ret=%" PRId64 " rc=%s", id, seq, res, fence,
            t_call, now_ns(), rc_name(rc));
}

int main(int argc, char **argv) {
  const char *url = NULL, *logpath = NULL, *kinds = "mutex", *prefix = NULL;
  int id = 0, names = 2, permits = 2, no_lease = 0, timeout = 1000, fresh = 0, guard = 0;
  long seconds = 20;
  int64_t lease_min = 1500, lease_max = 6000, hold_max = 3000;
  uint64_t seed = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-lease")) {
      no_lease = 1;
      continue;
    }
    if (!strcmp(a, "--fresh-client")) {
      fresh = 1;
      continue;
    }
    if (!strcmp(a, "--guard")) {
      guard = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "fault_worker: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--url"))
      url = v;
    else if (!strcmp(a, "--id"))
      id = atoi(v);
    else if (!strcmp(a, "--log"))
      logpath = v;
    else if (!strcmp(a, "--seconds"))
      seconds = atol(v);
    else if (!strcmp(a, "--seed"))
      seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--kinds"))
      kinds = v;
    else if (!strcmp(a, "--names"))
      names = atoi(v);
    else if (!strcmp(a, "--permits"))
      permits = atoi(v);
    else if (!strcmp(a, "--lease-min"))
      lease_min = atoll(v);
    else if (!strcmp(a, "--lease-max"))
      lease_max = atoll(v);
    else if (!strcmp(a, "--hold-max"))
      hold_max = atoll(v);
    else if (!strcmp(a, "--prefix"))
      prefix = v;
    else if (!strcmp(a, "--timeout"))
      timeout = atoi(v);
    else {
      fprintf(stderr, "fault_worker: unknown option %s\n", a);
      return 2;
    }
  }
  if (!url || !logpath || names < 1) {
    fprintf(stderr, "fault_worker: --url and --log are required\n");
    return 2;
  }
  log_fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    fprintf(stderr, "fault_worker %d: cannot open the log %s: %s\n", id, logpath, strerror(errno));
    return 2;
  }
  signal(SIGTERM, on_term);
  signal(SIGPIPE, SIG_IGN);
  rng = (seed ? seed : (uint64_t)now_ns()) * 2654435761u + (uint64_t)id * 40503u + 1;

  const char *kind_list[4];
  int nkinds = 0;
  if (strstr(kinds, "mutex")) kind_list[nkinds++] = "mutex";
  if (strstr(kinds, "sem")) kind_list[nkinds++] = "sem";
  if (strstr(kinds, "rw")) {
    kind_list[nkinds++] = "read";
    kind_list[nkinds++] = "write";
  }
  if (!nkinds) kind_list[nkinds++] = "mutex";

  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = url;
  co.key_prefix = prefix;
  co.connect_timeout_ms = timeout;
  co.command_timeout_ms = timeout;
  dlock_client *c = NULL;
  int64_t end = now_ns() + (int64_t)seconds * 1000000000LL;
  /* The deployment may be in the middle of a fault when a worker starts. */
  for (int tries = 0; dlock_client_new(&c, &co) != 0; tries++) {
    if (tries > 100 || now_ns() > end || stop_flag) {
      fprintf(stderr, "fault_worker %d: no client of %s: %s\n", id, url, dlock_last_error());
      logf_line("# w=%d no client: %s", id, dlock_last_error());
      return 3;
    }
    usleep(200000);
  }
  /* PostgreSQL: its tables (nothing to do elsewhere); several workers
   * racing here is fine (IF NOT EXISTS), a failure shows at acquire. */
  (void)dlock_client_setup(c);

  long seq = 0, attempts = 0, errors = 0;
  while (!stop_flag && now_ns() < end) {
    if (fresh) {
      dlock_client *nc = NULL;
      if (dlock_client_new(&nc, &co) != 0) {
        logf_line("# w=%d no fresh client: %s", id, dlock_last_error());
        usleep(200000);
        continue;
      }
      dlock_client_free(c);
      c = nc;
    }
    const char *kind = kind_list[rnd() % (unsigned)nkinds];
    char name[64];
    const char *stem = !strcmp(kind, "mutex") ? "fm" : !strcmp(kind, "sem") ? "fs" : "frw";
    snprintf(name, sizeof name, "%s%d", stem, (int)(rnd() % (unsigned)names));

    dlock_mutex_options mo;
    dlock_mutex_options_init(&mo);
    int64_t lease = rnd_between(lease_min, lease_max);
    int fixed = !no_lease && rnd() % 3 == 0;
    if (!no_lease) {
      if (fixed)
        mo.lease_ms = lease;
      else
        mo.watchdog_lease_ms = lease;
    }
    /* Most holds short; some over renewals (watchdog) or past a fixed lease. */
    int64_t hold;
    unsigned r = (unsigned)(rnd() % 10);
    if (r < 5)
      hold = rnd_between(0, hold_max / 6);
    else if (r < 8)
      hold = rnd_between(0, hold_max);
    else
      hold = rnd_between(lease, lease + hold_max);

    dlock_mutex *m = NULL;
    dlock_semaphore *s = NULL;
    dlock_rwlock *rw = NULL;
    int rc;
    if (!strcmp(kind, "mutex")) {
      rc = dlock_mutex_new(&m, c, name, &mo);
    } else if (!strcmp(kind, "sem")) {
      rc = dlock_semaphore_new(&s, c, name, permits, &mo);
      m = s ? dlock_semaphore_mutex(s) : NULL;
    } else {
      rc = dlock_rwlock_new(&rw, c, name, !strcmp(kind, "read") ? DLOCK_RW_READ : DLOCK_RW_WRITE, &mo);
      m = rw ? dlock_rwlock_mutex(rw) : NULL;
    }
    if (rc != 0) {
      fprintf(stderr, "fault_worker %d: handle on %s: %s\n", id, name, dlock_last_error());
      return 3;
    }
    seq++;
    attempts++;
    int64_t t_call = now_ns();
    rc = dlock_mutex_acquire(m, rnd_between(0, 3000));
    int64_t t_acq = now_ns();
    if (rc != 0) {
      if (rc != DLOCK_EBUSY) {
        errors++;
        /* Errors are expected while servers are down; say which. */
        logf_line("# w=%d seq=%ld acquire %s %s: %s", id, seq, name, rc_name(rc), dlock_mutex_errmsg(m));
        usleep(100000);
      }
      dlock_mutex_free(m);
      continue;
    }
    uint64_t fence = dlock_mutex_fence(m);
    int64_t vu = vu_ns(m);
    logf_line("B w=%d seq=%ld name=%s kind=%s permits=%d fence=%" PRIu64 " t_call=%" PRId64 " t_acq=%" PRId64
              " vu=%" PRId64 " lease=%" PRId64 " fixed=%d hold=%" PRId64,
              id, seq, name, kind, !strcmp(kind, "sem") ? permits : 1, fence, t_call, t_acq, vu,
              no_lease ? (int64_t)0 : lease, fixed, hold);
    if (guard) guard_write(c, id, seq, name, fence);
    int64_t until = t_acq + hold * 1000000LL, t_lost = 0;
    int fd = dlock_mutex_lost_fd(m);
    while (!stop_flag) {
      int64_t now = now_ns();
      if (now >= until) break;
      int64_t wait = (until - now) / 1000000LL;
      if (wait > 100) wait = 100;
      struct pollfd p = {.fd = fd, .events = POLLIN};
      int pr = poll(&p, 1, (int)wait + 1);
      if (pr > 0) {
        t_lost = now_ns();
        break;
      }
      int64_t v = vu_ns(m);
      if (v > vu) {
        vu = v;
        logf_line("R w=%d seq=%ld vu=%" PRId64, id, seq, vu);
      }
    }
    /* The local view at the end: lost() must not say NONE past valid_until. */
    int64_t t_end = now_ns();
    dlock_lost_reason lost = dlock_mutex_lost(m);
    int64_t v = vu_ns(m);
    if (v > vu) vu = v;
    int late = lost == DLOCK_LOST_NONE && vu && vu < INT64_MAX - 5000000LL && t_end > vu + 5000000LL;
    if (lost != DLOCK_LOST_NONE && !t_lost) t_lost = t_end;
    /* The hold is over: a kill from here on may find the lock freed by our
     * release, and the checker must not count the hold past t_end. */
    logf_line("X w=%d seq=%ld t_end=%" PRId64, id, seq, t_end);
    /* Written after t_end: the hold no longer counts, the guard decides. */
    if (guard) guard_write(c, id, seq, name, fence);
    rc = dlock_mutex_release(m);
    logf_line("E w=%d seq=%ld t_end=%" PRId64 " vu=%" PRId64 " lost=%s t_lost=%" PRId64
              " rc=%s view=%s t_done=%" PRId64,
              id, seq, t_end, vu, lost_name(lost), t_lost, rc_name(rc), late ? "late" : "ok", now_ns());
    if (rc != 0 && rc != DLOCK_ENOTHELD)
      logf_line("# w=%d seq=%ld release %s: %s", id, seq, rc_name(rc), dlock_mutex_errmsg(m));
    dlock_mutex_free(m);
  }
  logf_line("# w=%d done: %ld attempts, %ld errors", id, attempts, errors);
  dlock_client_free(c);
  return 0;
}
