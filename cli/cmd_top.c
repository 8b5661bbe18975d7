/*
 * cmd_top.c - "dlock top": a live terminal view of the locks, semaphores,
 * read-write locks, latches and jobs under the key prefix, one row per name
 * (kind, age of the hold, lease left, fence, waiters, holder), like top(1).
 *
 * It reads what `dlock list -l` reads (dlock_lock_list, dlock_lock_info_get;
 * dlock_job_list and dlock_job_state_get where the server keeps jobs) and is
 * woken by the change stream of `--watch` (dlock_watch_*): a reading follows
 * a notification, at most five times a second. What publishes nothing (a
 * lease that runs out, a job's state, a new name on Redis) is read again every
 * 2 s at most, or at the end of the earliest lease read; between readings the
 * age and lease columns count on from the last reading, redrawn each second.
 *
 * Plain ANSI sequences (the alternate screen, cursor home, erase to end of
 * line), termios for the keys; the terminal is restored on 'q', on SIGINT,
 * SIGTERM and SIGHUP, and when the server is lost (then with a message).
 * When stdout is not a terminal, or with --once, one snapshot is printed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define READ_GAP_MS 200      /* a notification's reading: at most five a second */
#define REFRESH_MS 2000      /* what publishes nothing is read again this often */
#define RETRY_MS 1000        /* a failed reading is tried again */
#define LOST_GIVE_UP_MS 5000 /* failing this long: the server is lost, top ends */

enum { OPT_ONCE = 1, OPT_SORT };
static const cli_opt top_opts[] = {
    {"once", 0, 0, OPT_ONCE},
    {"sort", 0, 1, OPT_SORT},
    {NULL, 0, 0, 0},
};
const cli_opt *const cli_top_opts[] = {top_opts, NULL};

/* The sort keys, in the order 's' cycles them. */
enum { SORT_NAME, SORT_AGE, SORT_LEASE, SORT_FENCE, SORT_WAITERS, SORT_KIND, SORT_N };
static const char *const sort_names[SORT_N] = {"name", "age", "lease", "fence", "waiters", "kind"};

typedef struct row {
  char *name;
  char kind[8];          /* lock, rw, sem, latch, job */
  char holder[512];      /* in words, short */
  int64_t since_unix_ms; /* when the hold (a job: its last run) began; 0: unknown */
  int64_t ttl_ms;        /* lease left at read_at; -1: none */
  int64_t read_at;       /* CLOCK_MONOTONIC ms of the reading */
  uint64_t fence;        /* 0: none */
  int64_t waiters;       /* -1: not a lock's */
} row;

typedef struct rows {
  row *r;
  size_t n, cap;
} rows;

typedef struct top {
  dlock_client *c;
  dlock_watch *w;
  const char *pattern;
  char server[512];
  rows now;
  cli_names watched; /* given to dlock_watch_add */
  int sort, reverse;
  char filter[128];
  int editing; /* '/' typed: the filter line takes the keys */
  int no_jobs; /* the server keeps no jobs (dlock_job_list refused) */
  int64_t read_at_real;
  int64_t failing_since; /* CLOCK_MONOTONIC ms; 0: the last reading worked */
  char error[512];
  int tty_fd;
  struct termios saved;
  int raw;   /* the terminal's modes are ours: restore them */
  int taken; /* the alternate screen is ours: leave it */
} top;

static int64_t real_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- Reading ---- */

static int names_has(const cli_names *l, const char *name) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->v[i], name) == 0) return 1;
  return 0;
}

static void rows_free(rows *r) {
  for (size_t i = 0; i < r->n; i++) free(r->r[i].name);
  free(r->r);
  memset(r, 0, sizeof *r);
}

static row *rows_add(rows *r, const char *name) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    row *g = realloc(r->r, cap * sizeof *g);
    if (g == NULL) return NULL;
    r->r = g;
    r->cap = cap;
  }
  row *w = &r->r[r->n];
  memset(w, 0, sizeof *w);
  if ((w->name = strdup(name)) == NULL) return NULL;
  w->ttl_ms = -1;
  w->waiters = -1;
  w->read_at = dlock_mono_now();
  r->n++;
  return w;
}

/* A lock's row from what the server said of it. */
static void lock_row(row *w, const dlock_lock_info *info) {
  char who[512];
  cli_owner_brief(info->owner_info, who, sizeof who);
  w->waiters = info->waiters;
  if (!info->held) { /* a latch alone */
    snprintf(w->kind, sizeof w->kind, "latch");
    snprintf(w->holder, sizeof w->holder, "count %lld left", (long long)info->latch_count);
    w->ttl_ms = info->latch_ttl_ms;
    return;
  }
  w->since_unix_ms = info->since_unix_ms;
  w->ttl_ms = info->ttl_ms;
  w->fence = info->foreign ? 0 : info->fence;
  if (info->permits != 0) {
    snprintf(w->kind, sizeof w->kind, "sem");
    snprintf(w->holder, sizeof w->holder, "%lld/%lld, newest %s", (long long)info->permits_used,
             (long long)info->permits, who);
  } else if (info->rwlock) {
    snprintf(w->kind, sizeof w->kind, "rw");
    if (info->writer)
      snprintf(w->holder, sizeof w->holder, "writer %s", who);
    else
      snprintf(w->holder, sizeof w->holder, "%lld reader%s", (long long)info->readers, info->readers == 1 ? "" : "s");
  } else {
    snprintf(w->kind, sizeof w->kind, "lock");
    snprintf(w->holder, sizeof w->holder, "%s", info->foreign ? "a client other than dlock" : who);
  }
}

/* A job's row when its lock is not held: its state and last run. */
static void job_row(row *w, const dlock_job_state *st) {
  snprintf(w->kind, sizeof w->kind, "job");
  w->since_unix_ms = st->last_run_unix_ms;
  if (st->paused)
    snprintf(w->holder, sizeof w->holder, "paused by %s%s%s", st->paused_by, st->paused_reason[0] ? ": " : "",
             st->paused_reason);
  else if (st->last_run_unix_ms == 0)
    snprintf(w->holder, sizeof w->holder, "idle, no run recorded");
  else
    snprintf(w->holder, sizeof w->holder, "idle, last run %s", st->last_outcome);
}

/* Read everything under the pattern into t->now. 0, or a status (the rows
 * read before stay). */
static int reading(top *t) {
  cli_names locks = {0}, jobs = {0};
  rows next = {0};
  int st = dlock_lock_list(t->c, t->pattern, cli_names_add, &locks);
  if (st >= 0 && !t->no_jobs) {
    int n = dlock_job_list(t->c, t->pattern, cli_names_add, &jobs);
    if (n == DLOCK_EINVAL) /* this server keeps no jobs: not an error */
      t->no_jobs = 1;
    else if (n < 0)
      st = n;
  }
  if (st >= 0 && (locks.oom || jobs.oom)) st = DLOCK_ENOMEM;
  for (size_t i = 0; st >= 0 && i < locks.n; i++) {
    dlock_lock_info info;
    dlock_lock_info_init(&info);
    st = dlock_lock_info_get(t->c, locks.v[i], &info);
    if (st != 0) break;
    if (!info.held && !info.latch) continue; /* released since the listing */
    row *w = rows_add(&next, locks.v[i]);
    if (w == NULL) {
      st = DLOCK_ENOMEM;
      break;
    }
    lock_row(w, &info);
    if (names_has(&jobs, locks.v[i]) && strcmp(w->kind, "lock") == 0) {
      /* The job lock: a run is going on. */
      char who[512];
      snprintf(who, sizeof who, "%s", w->holder);
      snprintf(w->kind, sizeof w->kind, "job");
      snprintf(w->holder, sizeof w->holder, "running on %s", who);
    }
    /* A name seen for the first time: its changes wake us from now on (the
     * live view; the snapshot has no watch). */
    if (t->w != NULL && !names_has(&t->watched, locks.v[i])) {
      cli_names_add(locks.v[i], &t->watched);
      if (dlock_watch_add(t->w, locks.v[i]) != 0)
        snprintf(t->error, sizeof t->error, "watching '%s': %s (its changes show at the next reading)", locks.v[i],
                 dlock_last_error());
    }
  }
  for (size_t i = 0; st >= 0 && i < jobs.n; i++) {
    if (names_has(&locks, jobs.v[i])) {
      int shown = 0;
      for (size_t j = 0; j < next.n && !shown; j++) shown = strcmp(next.r[j].name, jobs.v[i]) == 0;
      if (shown) continue;
    }
    dlock_job_state js;
    dlock_job_state_init(&js);
    st = dlock_job_state_get(t->c, jobs.v[i], &js);
    if (st != 0) break;
    row *w = rows_add(&next, jobs.v[i]);
    if (w == NULL) {
      st = DLOCK_ENOMEM;
      break;
    }
    job_row(w, &js);
  }
  cli_names_free(&locks);
  cli_names_free(&jobs);
  if (st < 0) {
    rows_free(&next);
    return st;
  }
  rows_free(&t->now);
  t->now = next;
  t->read_at_real = real_ms();
  return 0;
}

/* ---- Sorting ---- */

static int sort_key; /* for qsort's comparison */

static int64_t age_of(const row *r, int64_t now_real) {
  return r->since_unix_ms > 0 && now_real > r->since_unix_ms ? now_real - r->since_unix_ms : -1;
}

static int64_t left_of(const row *r, int64_t now_mono) {
  if (r->ttl_ms < 0) return -1;
  int64_t left = r->ttl_ms - (now_mono - r->read_at);
  return left > 0 ? left : 0;
}

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

static int cmp_rows(const void *pa, const void *pb) {
  const row *a = pa, *b = pb;
  int64_t now_real = real_ms(), now_mono = dlock_mono_now();
  int c = 0;
  switch (sort_key) {
  case SORT_AGE: /* the longest hold first */
    c = cmp_i64(age_of(b, now_real), age_of(a, now_real));
    break;
  case SORT_LEASE: /* the least lease left first; none last */
  {
    int64_t la = left_of(a, now_mono), lb = left_of(b, now_mono);
    c = cmp_i64(la < 0 ? INT64_MAX : la, lb < 0 ? INT64_MAX : lb);
    break;
  }
  case SORT_FENCE: /* the highest first */
    c = a->fence < b->fence ? 1 : a->fence > b->fence ? -1 : 0;
    break;
  case SORT_WAITERS: /* the most first */
    c = cmp_i64(b->waiters, a->waiters);
    break;
  case SORT_KIND:
    c = strcmp(a->kind, b->kind);
    break;
  }
  return c != 0 ? c : strcmp(a->name, b->name);
}

/* The rows to show, sorted and filtered: pointers into t->now. */
static size_t shown_rows(top *t, const row **out) {
  sort_key = t->sort;
  if (t->now.n > 1) qsort(t->now.r, t->now.n, sizeof *t->now.r, cmp_rows);
  size_t n = 0;
  for (size_t i = 0; i < t->now.n; i++) {
    size_t k = t->reverse ? t->now.n - 1 - i : i;
    if (t->filter[0] != '\0' && strstr(t->now.r[k].name, t->filter) == NULL) continue;
    out[n++] = &t->now.r[k];
  }
  return n;
}

/* ---- Drawing ---- */

/* 'text' into 'f' in exactly 'width' columns (left- or right-aligned):
 * control bytes and broken UTF-8 shown as '?' (a name may hold any byte and
 * must not drive the terminal), cut with a '+' at the end when too long.
 * width < 0: as it is, no padding (the snapshot). */
static void cell(FILE *f, const char *text, int width, int right) {
  const unsigned char *p = (const unsigned char *)text;
  int cols = 0;
  for (const unsigned char *q = p; *q != '\0'; cols++) {
    int n = cli_utf8_sequence(q);
    q += n > 0 ? n : 1;
  }
  int cut = width >= 0 && cols > width;
  int take = cut ? width - 1 : cols;
  if (right && width >= 0)
    for (int i = cols; i < width; i++) fputc(' ', f);
  for (int i = 0; i < take && *p != '\0'; i++) {
    int n = cli_utf8_sequence(p);
    if (n == 0 || *p < 0x20 || *p == 0x7f)
      fputc('?', f);
    else
      fwrite(p, 1, (size_t)n, f);
    p += n > 0 ? n : 1;
  }
  if (cut && width > 0) fputc('+', f);
  if (!right && width >= 0)
    for (int i = cols; i < width; i++) fputc(' ', f);
}

/* "1m 3s", compact: a column is narrow. */
static void short_duration(int64_t ms, char *buf, size_t len) {
  if (ms < 0)
    snprintf(buf, len, "-");
  else if (ms < 10000)
    snprintf(buf, len, "%lld.%llds", (long long)(ms / 1000), (long long)(ms % 1000 / 100));
  else if (ms < 60000)
    snprintf(buf, len, "%llds", (long long)(ms / 1000));
  else if (ms < 3600000)
    snprintf(buf, len, "%lldm%02llds", (long long)(ms / 60000), (long long)(ms % 60000 / 1000));
  else if (ms < 86400000)
    snprintf(buf, len, "%lldh%02lldm", (long long)(ms / 3600000), (long long)(ms % 3600000 / 60000));
  else
    snprintf(buf, len, "%lldd%02lldh", (long long)(ms / 86400000), (long long)(ms % 86400000 / 3600000));
}

/* The counts line: "5 names: 2 locks, 1 sem, 1 rw, 1 job; 3 waiting". */
static void counts(const top *t, char *buf, size_t len) {
  static const char *const kinds[] = {"lock", "rw", "sem", "latch", "job"};
  static const char *const words[][2] = {
      {"lock", "locks"}, {"rw lock", "rw locks"}, {"semaphore", "semaphores"}, {"latch", "latches"}, {"job", "jobs"}};
  size_t used = (size_t)snprintf(buf, len, "%zu name%s", t->now.n, t->now.n == 1 ? "" : "s");
  int64_t waiting = 0;
  const char *sep = ": ";
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    size_t n = 0;
    for (size_t i = 0; i < t->now.n; i++) n += strcmp(t->now.r[i].kind, kinds[k]) == 0;
    if (n == 0 || used >= len) continue;
    used += (size_t)snprintf(buf + used, len - used, "%s%zu %s", sep, n, words[k][n != 1]);
    sep = ", ";
  }
  for (size_t i = 0; i < t->now.n; i++) waiting += t->now.r[i].waiters > 0 ? t->now.r[i].waiters : 0;
  if (used < len) used += (size_t)snprintf(buf + used, len - used, "; %lld waiting", (long long)waiting);
  if (t->no_jobs && used < len) snprintf(buf + used, len - used, "; no jobs on this server");
}

/* "dlock top - 10:42:07 - redis://host:6379 prefix 'app:'": the time first,
 * so that a long URL cut at the edge does not hide it. */
static void header(const top *t, char *buf, size_t len) {
  char clock[16] = "";
  time_t secs = time(NULL);
  struct tm tm;
  if (localtime_r(&secs, &tm) != NULL) strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  const char *prefix = cli_config_prefix();
  snprintf(buf, len, "dlock top - %s - %s%s%s%s", clock, t->server, prefix[0] ? " prefix '" : "", prefix,
           prefix[0] ? "'" : "");
}

/* One table line. width < 0: the snapshot's (tab-free, aligned by the
 * caller's widths, nothing cut). */
typedef struct widths {
  int name, fence, holder;
} widths;

static void table_line(FILE *f, const widths *w, const char *name, const char *kind, const char *age, const char *lease,
                       const char *fence, const char *wait, const char *holder) {
  cell(f, name, w->name, 0);
  fputc(' ', f);
  cell(f, kind, 5, 0);
  fputc(' ', f);
  cell(f, age, 6, 1);
  fputc(' ', f);
  cell(f, lease, 6, 1);
  fputc(' ', f);
  cell(f, fence, w->fence, 1);
  fputc(' ', f);
  cell(f, wait, 4, 1);
  fputs("  ", f);
  cell(f, holder, w->holder, 0);
}

static void row_line(FILE *f, const widths *w, const row *r, int64_t now_real, int64_t now_mono) {
  char age[16], lease[16], fence[24] = "-", wait[24] = "-";
  short_duration(age_of(r, now_real), age, sizeof age);
  short_duration(left_of(r, now_mono), lease, sizeof lease);
  if (r->fence != 0) snprintf(fence, sizeof fence, "%llu", (unsigned long long)r->fence);
  if (r->waiters >= 0) snprintf(wait, sizeof wait, "%lld", (long long)r->waiters);
  table_line(f, w, r->name, r->kind, age, lease, fence, wait, r->holder);
}

/* The columns for 'cols' terminal columns (cols < 0: nothing cut). */
static widths layout(const row *const *v, size_t n, int cols) {
  widths w = {4, 5, -1};
  for (size_t i = 0; i < n; i++) {
    int len = (int)strlen(v[i]->name);
    if (len > w.name) w.name = len;
    char fence[24];
    len = snprintf(fence, sizeof fence, "%llu", (unsigned long long)v[i]->fence);
    if (len > w.fence) w.fence = len;
  }
  if (cols < 0) return w;
  /* kind 5, age 6, lease 6, wait 4 and the spaces between: 28 + fence; the
   * name and the holder share the rest, but the last column (a line too
   * long is cut at the edge). */
  int rest = cols - 1 - (28 + w.fence);
  if (rest < 20) rest = 20;
  int cap = rest * 2 / 5 > 10 ? rest * 2 / 5 : 10;
  if (w.name > cap) w.name = cap;
  w.holder = rest - w.name;
  return w;
}

static void terminal_size(const top *t, int *cols, int *lines) {
  struct winsize ws;
  *cols = 80;
  *lines = 24;
  if (ioctl(t->tty_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    *cols = ws.ws_col;
    *lines = ws.ws_row;
  }
  if (*cols < 40) *cols = 40;
  if (*lines < 8) *lines = 8;
}

/* One line of the screen: text cut to the width, the rest erased. */
static void screen_line(FILE *f, const char *text, int cols, int inverse) {
  if (inverse) fputs("\033[7m", f);
  cell(f, text, cols, 0);
  if (inverse) fputs("\033[m", f);
  fputs("\033[K\r\n", f);
}

/* Row 'r' (NULL: the column titles, inverse) as one screen line. */
static void table_screen_line(FILE *f, const widths *w, const row *r, int cols, int64_t now_real, int64_t now_mono) {
  char *line = NULL;
  size_t len = 0;
  FILE *lf = open_memstream(&line, &len);
  if (lf == NULL) return;
  if (r == NULL)
    table_line(lf, w, "NAME", "KIND", "AGE", "LEASE", "FENCE", "WAIT", "HOLDER");
  else
    row_line(lf, w, r, now_real, now_mono);
  if (fclose(lf) == 0) screen_line(f, line, cols, r == NULL);
  free(line);
}

static void draw(top *t) {
  int cols, lines;
  terminal_size(t, &cols, &lines);
  const row **v = malloc((t->now.n + 1) * sizeof *v);
  if (v == NULL) return;
  size_t n = shown_rows(t, v);
  int64_t now_real = real_ms(), now_mono = dlock_mono_now();
  char *text = NULL, buf[1024];
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) {
    free(v);
    return;
  }
  fputs("\033[H", f);
  header(t, buf, sizeof buf);
  screen_line(f, buf, cols, 0);
  counts(t, buf, sizeof buf);
  screen_line(f, buf, cols, 0);
  if (t->failing_since != 0)
    snprintf(buf, sizeof buf, "! %s", t->error);
  else
    snprintf(buf, sizeof buf, "sorted by %s%s%s%s%s; read %.1fs ago", sort_names[t->sort],
             t->reverse ? " (reversed)" : "", t->filter[0] ? "; filter '" : "", t->filter, t->filter[0] ? "'" : "",
             (double)(now_real - t->read_at_real) / 1000.0);
  screen_line(f, buf, cols, 0);
  widths w = layout(v, n, cols);
  table_screen_line(f, &w, NULL, cols, now_real, now_mono);
  int room = lines - 6; /* 4 above, the keys line below, one to spare */
  for (size_t i = 0; i < n && (int)i < room; i++) {
    if ((int)i == room - 1 && n > (size_t)room) {
      snprintf(buf, sizeof buf, "... %zu more (a larger terminal, or / to filter)", n - i);
      screen_line(f, buf, cols, 0);
      break;
    }
    table_screen_line(f, &w, v[i], cols, now_real, now_mono);
  }
  if (n == 0) screen_line(f, t->filter[0] ? "(no name matches the filter)" : "(nothing held)", cols, 0);
  fputs("\033[J", f);
  fprintf(f, "\033[%d;1H", lines);
  if (t->editing)
    snprintf(buf, sizeof buf, "filter (names containing; Enter to keep, Esc to clear): %s", t->filter);
  else
    snprintf(buf, sizeof buf, "q quit  s sort (%s)  r reverse  / filter", sort_names[t->sort]);
  if (t->editing) fputs("\033[?25h", f);
  cell(f, buf, cols - 1, 0);
  if (!t->editing) fputs("\033[?25l", f);
  fclose(f);
  free(v);
  size_t off = 0;
  while (off < len) {
    ssize_t k = write(STDOUT_FILENO, text + off, len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    off += (size_t)k;
  }
  free(text);
}

/* ---- The terminal ---- */

static int terminal_take(top *t) {
  t->tty_fd = STDOUT_FILENO;
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
    struct termios raw = t->saved;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    raw.c_cc[VSUSP] = _POSIX_VDISABLE; /* Ctrl-Z would leave the screen ours */
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) return -1;
    t->raw = 1;
  }
  /* The alternate screen, cursor hidden: the shell's screen comes back. */
  (void)!write(STDOUT_FILENO, "\033[?1049h\033[H\033[2J\033[?25l", 22);
  t->taken = 1;
  return 0;
}

/* Once: leaving the alternate screen again would move the cursor back over
 * what was written since (the reason the view ended). */
static void terminal_restore(top *t) {
  if (t->taken) (void)!write(STDOUT_FILENO, "\033[?25h\033[?1049l", 14);
  t->taken = 0;
  if (t->raw) tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
  t->raw = 0;
}

/* A key: 1 to quit, 0 to go on (redraw). */
static int key(top *t, unsigned char k) {
  if (t->editing) {
    size_t n = strlen(t->filter);
    if (k == '\r' || k == '\n') {
      t->editing = 0;
    } else if (k == 27) { /* Esc: no filter */
      t->editing = 0;
      t->filter[0] = '\0';
    } else if (k == 127 || k == 8) {
      if (n > 0) t->filter[n - 1] = '\0';
    } else if (k >= 0x20 && n + 1 < sizeof t->filter) {
      t->filter[n] = (char)k;
      t->filter[n + 1] = '\0';
    }
    return 0;
  }
  switch (k) {
  case 'q':
  case 'Q':
    return 1;
  case 's':
    t->sort = (t->sort + 1) % SORT_N;
    break;
  case 'S':
    t->sort = (t->sort + SORT_N - 1) % SORT_N;
    break;
  case 'r':
    t->reverse = !t->reverse;
    break;
  case '/':
    t->editing = 1;
    t->filter[0] = '\0';
    break;
  }
  return 0;
}

/* When the earliest lease read ends (CLOCK_MONOTONIC ms), else -1. */
static int64_t next_expiry(const top *t) {
  int64_t at = -1;
  for (size_t i = 0; i < t->now.n; i++) {
    const row *r = &t->now.r[i];
    if (r->ttl_ms < 0) continue;
    int64_t end = r->read_at + r->ttl_ms + 20;
    if (at < 0 || end < at) at = end;
  }
  return at;
}

/* ---- The snapshot (stdout not a terminal, or --once) ---- */

static int snapshot(top *t) {
  int st = reading(t);
  if (st != 0) return cli_report(st, dlock_last_error(), "reading the locks of %s", t->server);
  const row **v = malloc((t->now.n + 1) * sizeof *v);
  if (v == NULL) return cli_report(DLOCK_ENOMEM, NULL, "top");
  size_t n = shown_rows(t, v);
  char buf[1024];
  counts(t, buf, sizeof buf);
  char head[1024];
  header(t, head, sizeof head);
  printf("%s\n%s\n", head, buf);
  widths w = layout(v, n, -1);
  int64_t now_real = real_ms(), now_mono = dlock_mono_now();
  table_line(stdout, &w, "NAME", "KIND", "AGE", "LEASE", "FENCE", "WAIT", "HOLDER");
  putchar('\n');
  for (size_t i = 0; i < n; i++) {
    row_line(stdout, &w, v[i], now_real, now_mono);
    putchar('\n');
  }
  free(v);
  return CLI_EXIT_OK;
}

/* ---- The live view ---- */

static int live(top *t, int sfd) {
  int rc = CLI_EXIT_OK, stdin_open = 1;
  int64_t next_read = 0, wanted = 0, last_read = 0;
  if (terminal_take(t) != 0) return cli_report(DLOCK_EINVAL, strerror(errno), "taking the terminal");
  for (;;) {
    int64_t now = dlock_mono_now();
    if (now >= next_read || (wanted && now >= last_read + READ_GAP_MS)) {
      int st = reading(t);
      last_read = dlock_mono_now();
      wanted = 0;
      int64_t bound = dlock_watch_bound_ms(t->w);
      next_read = last_read + (bound > 0 && bound < REFRESH_MS ? bound : REFRESH_MS);
      if (st == 0) {
        t->failing_since = 0;
        t->error[0] = '\0';
        int64_t exp = next_expiry(t);
        if (exp >= 0 && exp < next_read) next_read = exp;
      } else {
        if (t->failing_since == 0) t->failing_since = last_read;
        snprintf(t->error, sizeof t->error, "lost the connection to %s (%s); retrying", t->server, dlock_last_error());
        if (last_read - t->failing_since >= LOST_GIVE_UP_MS) {
          terminal_restore(t);
          rc = cli_report(st, dlock_last_error(),
                          "top: lost the connection to %s for %d s; run 'dlock top' again once it is back", t->server,
                          LOST_GIVE_UP_MS / 1000);
          break;
        }
        next_read = last_read + RETRY_MS;
      }
    }
    draw(t);
    /* Wake for the next second's redraw, the next reading, or sooner. */
    now = dlock_mono_now();
    int64_t timeout = 1000 - real_ms() % 1000;
    int64_t until_read = (wanted ? last_read + READ_GAP_MS : next_read) - now;
    if (until_read < timeout) timeout = until_read > 0 ? until_read : 0;
    struct pollfd p[3] = {{sfd, POLLIN, 0}, {dlock_watch_fd(t->w), POLLIN, 0}, {stdin_open ? 0 : -1, POLLIN, 0}};
    int n = poll(p, 3, (int)timeout);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (p[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo == SIGWINCH) {
        (void)!write(STDOUT_FILENO, "\033[2J", 4);
      } else {
        break; /* SIGINT, SIGTERM, SIGHUP: leave as after 'q' */
      }
    }
    if (p[1].revents & POLLIN) {
      if (dlock_watch_wait(t->w, 0) > 0) wanted = 1;
    }
    if (p[2].revents & (POLLIN | POLLHUP)) {
      unsigned char keys[64];
      ssize_t k = read(STDIN_FILENO, keys, sizeof keys);
      if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) stdin_open = 0;
      int quit = 0;
      for (ssize_t i = 0; i < k && !quit; i++) quit = key(t, keys[i]);
      if (quit) break;
    }
  }
  terminal_restore(t);
  return rc;
}

int cmd_top(int argc, char **argv) {
  cli_args args;
  const char *arg, *url = NULL;
  int id, once = 0;
  top t;
  memset(&t, 0, sizeof t);
  cli_args_init(&args, argc, argv, "top", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, top_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (cli_common_opt(id, arg, &url)) continue;
    if (id == OPT_ONCE) {
      once = 1;
    } else if (id == OPT_SORT) {
      int k = 0;
      while (k < SORT_N && strcmp(arg, sort_names[k]) != 0) k++;
      if (k == SORT_N)
        return cli_usage_error("top", "--sort: '%s' is not a column (name, age, lease, fence, waiters, kind)", arg);
      t.sort = k;
    } else if (id == CLI_OPT_POSITIONAL && t.pattern == NULL) {
      t.pattern = arg;
    } else if (id == CLI_OPT_POSITIONAL) {
      return cli_usage_error("top", "unexpected argument '%s' (one PATTERN at most)", arg);
    }
  }
  int interactive = !once && isatty(STDOUT_FILENO);
  /* The stop signals (and SIGWINCH) are read from a descriptor: blocked
   * before the client starts the threads that would inherit the mask. */
  int sfd = -1;
  if (interactive) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGWINCH);
    sigprocmask(SIG_BLOCK, &set, NULL);
    sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
      fprintf(stderr, "dlock: top: cannot watch for signals: %s\n", strerror(errno));
      return CLI_EXIT_SOFTWARE;
    }
  }
  int rc = cli_connect(url, &t.c);
  if (rc != 0) {
    if (sfd >= 0) close(sfd);
    return rc;
  }
  cli_redact_url(cli_effective_url(url), t.server, sizeof t.server);
  if (!interactive) {
    rc = snapshot(&t);
  } else {
    int st = dlock_watch_new(&t.w, t.c);
    if (st == 0) st = dlock_watch_add(t.w, NULL);
    if (st != 0)
      rc = cli_report(st, dlock_last_error(), "watching the locks of %s", t.server);
    else
      rc = live(&t, sfd);
    dlock_watch_free(t.w);
  }
  rows_free(&t.now);
  cli_names_free(&t.watched);
  dlock_client_free(t.c);
  if (sfd >= 0) close(sfd);
  return rc;
}
