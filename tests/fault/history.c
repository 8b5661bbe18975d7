/*
 * history.c - the fault matrix's history checker (see history.h).
 */
#include "history.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_MUTEX, K_SEM, K_READ, K_WRITE } fh_kind;

typedef struct fh_hold {
  int w;
  long seq;
  char name[128];
  fh_kind kind;
  int permits;
  uint64_t fence;
  int64_t t_call, t_acq, vu;
  int ended;
  int64_t t_end, t_lost;
  int64_t t_releasing; /* X line: the release began (0: none) */
  char lost[32], rc[32];
  int view_late;
  int fixed;
  char b_where[160], e_where[160];
} fh_hold;

typedef struct fh_guard {
  char res[128];
  uint64_t fence;
  int64_t t_call, t_ret;
  int admitted;
  char where[160];
} fh_guard;

typedef struct fh_stop {
  int w;
  int64_t from, to; /* to: INT64_MAX while not thawed */
} fh_stop;

struct fh_history {
  fh_hold *h;
  int n, cap;
  fh_stop *s;
  int ns, scap;
  fh_guard *g;
  int ng, gcap;
  int bad_lines;
  char first_bad[256];
};

void fh_policy_init(fh_policy *p) {
  memset(p, 0, sizeof *p);
  p->late_tol_ns = 2000000000LL;
}

fh_history *fh_new(void) { return calloc(1, sizeof(fh_history)); }

void fh_free(fh_history *h) {
  if (!h) return;
  free(h->h);
  free(h->s);
  free(h->g);
  free(h);
}

int fh_holds(const fh_history *h) { return h->n; }

int fh_open_holds(const fh_history *h) {
  int k = 0;
  for (int i = 0; i < h->n; i++) k += !h->h[i].ended;
  return k;
}

/* The value of 'key=' in 'line' into 'out' (up to a space); 0 or -1. */
static int field(const char *line, const char *key, char *out, size_t len) {
  size_t kl = strlen(key);
  for (const char *p = line; (p = strstr(p, key)) != NULL; p += kl) {
    if ((p == line || p[-1] == ' ') && p[kl] == '=') {
      p += kl + 1;
      size_t n = strcspn(p, " \n");
      if (n >= len) return -1;
      memcpy(out, p, n);
      out[n] = '\0';
      return 0;
    }
  }
  return -1;
}

static int ifield(const char *line, const char *key, int64_t *v) {
  char buf[32], *end;
  if (field(line, key, buf, sizeof buf) != 0 || !buf[0]) return -1;
  *v = strtoll(buf, &end, 10);
  return *end ? -1 : 0;
}

static fh_hold *find(fh_history *h, int w, long seq) {
  for (int i = h->n - 1; i >= 0; i--)
    if (h->h[i].w == w && h->h[i].seq == seq) return &h->h[i];
  return NULL;
}

static int bad(fh_history *h, const char *where, const char *why) {
  if (h->bad_lines++ == 0) snprintf(h->first_bad, sizeof h->first_bad, "%s: %s", where, why);
  return -1;
}

int fh_add_line(fh_history *h, const char *line, const char *where) {
  int64_t w, seq, v;
  if (line[0] == '\0' || line[0] == '\n' || line[0] == '#') return 0;
  if (line[0] == 'F') {
    char kind[32];
    if (field(line, "kind", kind, sizeof kind) != 0 || ifield(line, "t", &v) != 0)
      return bad(h, where, "fault line without kind= or t=");
    if (strcmp(kind, "stop") != 0 && strcmp(kind, "cont") != 0) return 0;
    if (ifield(line, "w", &w) != 0) return bad(h, where, "worker fault line without w=");
    if (strcmp(kind, "stop") == 0) {
      if (h->ns == h->scap) {
        int cap = h->scap ? h->scap * 2 : 64;
        fh_stop *s = realloc(h->s, (size_t)cap * sizeof *s);
        if (!s) return bad(h, where, "out of memory");
        h->s = s;
        h->scap = cap;
      }
      h->s[h->ns++] = (fh_stop){(int)w, v, INT64_MAX};
    } else {
      for (int i = h->ns - 1; i >= 0; i--)
        if (h->s[i].w == w && h->s[i].to == INT64_MAX) {
          h->s[i].to = v;
          break;
        }
    }
    return 0;
  }
  if (ifield(line, "w", &w) != 0 || ifield(line, "seq", &seq) != 0) return bad(h, where, "line without w= or seq=");
  if (line[0] == 'G') {
    if (h->ng == h->gcap) {
      int cap = h->gcap ? h->gcap * 2 : 256;
      fh_guard *g = realloc(h->g, (size_t)cap * sizeof *g);
      if (!g) return bad(h, where, "out of memory");
      h->g = g;
      h->gcap = cap;
    }
    fh_guard *g = &h->g[h->ng];
    int64_t fence;
    char rc[32];
    if (field(line, "res", g->res, sizeof g->res) != 0 || ifield(line, "fence", &fence) != 0 ||
        ifield(line, "t_call", &g->t_call) != 0 || ifield(line, "t_ret", &g->t_ret) != 0 ||
        field(line, "rc", rc, sizeof rc) != 0)
      return bad(h, where, "G line without res, fence, t_call, t_ret or rc");
    g->fence = (uint64_t)fence;
    g->admitted = strcmp(rc, "OK") == 0;
    snprintf(g->where, sizeof g->where, "%s", where);
    h->ng++;
    return 0;
  }
  if (line[0] == 'B') {
    if (h->n == h->cap) {
      int cap = h->cap ? h->cap * 2 : 256;
      fh_hold *n = realloc(h->h, (size_t)cap * sizeof *n);
      if (!n) return bad(h, where, "out of memory");
      h->h = n;
      h->cap = cap;
    }
    fh_hold *x = &h->h[h->n];
    memset(x, 0, sizeof *x);
    x->w = (int)w;
    x->seq = (long)seq;
    char kind[16];
    int64_t permits = 1, fence;
    if (field(line, "name", x->name, sizeof x->name) != 0 || field(line, "kind", kind, sizeof kind) != 0 ||
        ifield(line, "fence", &fence) != 0 || ifield(line, "t_call", &x->t_call) != 0 ||
        ifield(line, "t_acq", &x->t_acq) != 0 || ifield(line, "vu", &x->vu) != 0)
      return bad(h, where, "B line without name, kind, fence, t_call, t_acq or vu");
    (void)ifield(line, "permits", &permits);
    int64_t fixed = 0;
    (void)ifield(line, "fixed", &fixed);
    x->fixed = fixed != 0;
    if (!strcmp(kind, "mutex"))
      x->kind = K_MUTEX;
    else if (!strcmp(kind, "sem"))
      x->kind = K_SEM;
    else if (!strcmp(kind, "read"))
      x->kind = K_READ;
    else if (!strcmp(kind, "write"))
      x->kind = K_WRITE;
    else
      return bad(h, where, "B line with an unknown kind");
    x->permits = (int)permits;
    x->fence = (uint64_t)fence;
    snprintf(x->b_where, sizeof x->b_where, "%s", where);
    h->n++;
    return 0;
  }
  fh_hold *x = find(h, (int)w, (long)seq);
  if (!x) return bad(h, where, "R or E line of a hold with no B line");
  if (line[0] == 'X') {
    /* The hold is over and its release under way: nothing more is written
     * under the lock, and the server may free it from now on (a worker
     * killed before its E line). */
    if (ifield(line, "t_end", &x->t_releasing) != 0) return bad(h, where, "X line without t_end=");
    return 0;
  }
  if (line[0] == 'R') {
    if (ifield(line, "vu", &v) != 0) return bad(h, where, "R line without vu=");
    if (v > x->vu) x->vu = v;
    return 0;
  }
  if (line[0] == 'E') {
    char view[16] = "ok";
    if (ifield(line, "t_end", &x->t_end) != 0 || ifield(line, "vu", &v) != 0 ||
        field(line, "lost", x->lost, sizeof x->lost) != 0 || ifield(line, "t_lost", &x->t_lost) != 0 ||
        field(line, "rc", x->rc, sizeof x->rc) != 0)
      return bad(h, where, "E line without t_end, vu, lost, t_lost or rc");
    (void)field(line, "view", view, sizeof view);
    if (v > x->vu) x->vu = v;
    x->view_late = strcmp(view, "late") == 0;
    x->ended = 1;
    snprintf(x->e_where, sizeof x->e_where, "%s", where);
    return 0;
  }
  return bad(h, where, "unknown line tag");
}

int fh_add_file(fh_history *h, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char line[1024], where[160];
  int no = 0;
  while (fgets(line, sizeof line, f)) {
    no++;
    /* A worker killed in the middle of a write leaves a cut last line. */
    if (!strchr(line, '\n') && feof(f)) break;
    snprintf(where, sizeof where, "%s:%d", base, no);
    fh_add_line(h, line, where);
  }
  fclose(f);
  return 0;
}

int fh_add_dir(fh_history *h, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  char path[1024];
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".log") != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    fh_add_file(h, path);
  }
  closedir(d);
  return 0;
}

static int64_t hold_end(const fh_hold *x) {
  int64_t e = x->vu;
  if (x->ended && x->t_end < e) e = x->t_end;
  if (!x->ended && x->t_releasing && x->t_releasing < e) e = x->t_releasing;
  if (x->t_lost && x->t_lost < e) e = x->t_lost;
  return e;
}

/* 1 when 't' is more than 'tol' ns past 'vu'; a hold with no deadline of
 * its own (vu INT64_MAX: PostgreSQL's advisory mode) is never past it. */
static int past(int64_t t, int64_t vu, int64_t tol) { return vu <= INT64_MAX - tol && t > vu + tol; }

static const char *kind_str(fh_kind k) {
  static const char *s[] = {"mutex", "sem", "read", "write"};
  return s[k];
}

/* 1 when the runner froze worker 'w' at some time in [from, to]. */
static int was_frozen(const fh_history *h, int w, int64_t from, int64_t to) {
  for (int i = 0; i < h->ns; i++)
    if (h->s[i].w == w && h->s[i].from <= to && h->s[i].to >= from) return 1;
  return 0;
}

static void describe(FILE *r, const char *tag, const fh_hold *x) {
  if (!r) return;
  fprintf(r, "    %s w%d seq %ld %s '%s' fence %" PRIu64 " held [%.3f, %.3f] s (vu %.3f%s%s%s) at %s%s%s\n", tag, x->w,
          x->seq, kind_str(x->kind), x->name, x->fence, x->t_acq / 1e9, hold_end(x) / 1e9, x->vu / 1e9,
          x->ended ? ", release " : ", never released (worker killed)", x->ended ? x->rc : "",
          x->t_lost ? ", loss signalled" : "", x->b_where, x->ended ? " and " : "", x->e_where);
}

typedef struct ev {
  int64_t t;
  int start; /* 1 start, 0 end: ends first at the same time (half-open) */
  int i;
} ev;

static int ev_cmp(const void *a, const void *b) {
  const ev *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->start - y->start;
}

static int excluded(const fh_hold *x, const fh_policy *p) {
  if (!p->allow_reported_failover) return 0;
  return x->t_lost != 0 || (x->ended && strcmp(x->rc, "OK") != 0);
}

/* The overlap check of one name: a sweep over the holds' intervals. */
static int check_overlap(const fh_history *h, const fh_policy *p, const int *idx, int n, FILE *r) {
  int bad = 0;
  ev *evs = malloc(sizeof(ev) * (size_t)n * 2 + 1);
  int *active = malloc(sizeof(int) * (size_t)n + 1);
  if (!evs || !active) {
    free(evs);
    free(active);
    if (r) fprintf(r, "VIOLATION checker: out of memory\n");
    return 1;
  }
  int ne = 0, na = 0;
  for (int k = 0; k < n; k++) {
    const fh_hold *x = &h->h[idx[k]];
    if (excluded(x, p) || hold_end(x) <= x->t_acq) continue;
    evs[ne++] = (ev){x->t_acq, 1, idx[k]};
    evs[ne++] = (ev){hold_end(x), 0, idx[k]};
  }
  qsort(evs, (size_t)ne, sizeof *evs, ev_cmp);
  for (int e = 0; e < ne; e++) {
    if (!evs[e].start) {
      for (int a = 0; a < na; a++)
        if (active[a] == evs[e].i) {
          active[a] = active[--na];
          break;
        }
      continue;
    }
    const fh_hold *x = &h->h[evs[e].i];
    int readers = 0, writers = 0, others = 0;
    for (int a = 0; a < na; a++) {
      fh_kind k = h->h[active[a]].kind;
      if (k == K_READ)
        readers++;
      else if (k == K_WRITE)
        writers++;
      else
        others++;
    }
    const char *why = NULL;
    if (x->kind == K_MUTEX && na > 0)
      why = "two holders of one mutex";
    else if (x->kind == K_SEM && na + 1 > x->permits)
      why = "more holders than the semaphore's permits";
    else if (x->kind == K_WRITE && na > 0)
      why = "a writer while the lock was held";
    else if (x->kind == K_READ && writers > 0)
      why = "a reader while a writer held the lock";
    else if (others > 0 && (x->kind == K_READ || x->kind == K_WRITE))
      why = "one name held as two kinds";
    if (why) {
      bad++;
      if (r) {
        fprintf(r, "VIOLATION overlap on '%s': %s (%d held already)\n", x->name, why, na);
        describe(r, "new ", x);
        for (int a = 0; a < na; a++) describe(r, "held", &h->h[active[a]]);
      }
    }
    active[na++] = evs[e].i;
  }
  free(evs);
  free(active);
  return bad;
}

/* Fences of one name: a hold whose acquire was called after another hold
 * had ended (counted end) has a larger fence. */
static int check_fences(const fh_history *h, const int *idx, int n, FILE *r) {
  int bad = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      const fh_hold *x = &h->h[idx[a]], *y = &h->h[idx[b]];
      if (a == b || hold_end(x) >= y->t_call || y->fence > x->fence) continue;
      bad++;
      if (r) {
        fprintf(r, "VIOLATION fence order on '%s': fence %" PRIu64 " was issued after %" PRIu64 " had ended\n", x->name,
                y->fence, x->fence);
        describe(r, "earlier", x);
        describe(r, "later  ", y);
      }
    }
  return bad;
}

/* The guard: a write admitted after another was admitted (the first call
 * began after the other returned) has a fence no lower (dlock.h,
 * dlock_guard_check: "0: admitted (token >= highest seen)"). */
static int check_guard(const fh_history *h, FILE *r) {
  int bad = 0;
  for (int a = 0; a < h->ng; a++)
    for (int b = 0; b < h->ng; b++) {
      const fh_guard *x = &h->g[a], *y = &h->g[b];
      if (!x->admitted || !y->admitted || x->t_ret >= y->t_call || y->fence >= x->fence || strcmp(x->res, y->res) != 0)
        continue;
      bad++;
      if (r)
        fprintf(r,
                "VIOLATION guard on '%s': fence %" PRIu64 " admitted at %.3f s (%s) after fence %" PRIu64
                " was admitted at %.3f s (%s)\n",
                y->res, y->fence, y->t_call / 1e9, y->where, x->fence, x->t_ret / 1e9, x->where);
    }
  return bad;
}

static int check_outcomes(const fh_history *h, const fh_policy *p, const fh_hold *x, FILE *r) {
  int bad = 0;
  const char *why = NULL;
  if (x->fence == 0 && !p->no_fence)
    why = "acquire returned OK with no fence";
  else if (x->ended && strcmp(x->rc, "OK") == 0 && x->t_lost)
    why = "release returned OK for a hold whose loss had been signalled";
  else if (x->ended && strcmp(x->rc, "OK") == 0 && past(x->t_end, x->vu, 5000000))
    why = "release returned OK after the hold's valid_until";
  else if (x->view_late)
    why = "dlock_mutex_lost() said NONE after valid_until";
  if (why) {
    bad++;
    if (r) {
      fprintf(r, "VIOLATION wrong outcome: %s\n", why);
      describe(r, "hold", x);
    }
  }
  if (p->no_loss && x->t_lost && !was_frozen(h, x->w, x->t_acq, x->t_lost) &&
      (!x->fixed || x->t_lost < x->vu - 50000000)) {
    bad++;
    if (r) {
      fprintf(r, "VIOLATION lost hold: %s, under faults the deployment survives\n", x->lost);
      describe(r, "hold", x);
    }
  }
  /* The loss signal by the local deadline: the fd and lost() fire at
   * valid_until at the latest (dlock.h, dlock_mutex_lost). */
  if (x->ended) {
    int64_t seen = x->t_lost ? x->t_lost : x->t_end;
    if (past(seen, x->vu, p->late_tol_ns) && !was_frozen(h, x->w, x->vu, seen)) {
      bad++;
      if (r) {
        fprintf(r, "VIOLATION late loss: %s %.3f s after valid_until\n",
                x->t_lost ? "the loss was signalled" : "the hold ended with no loss signalled",
                (double)(seen - x->vu) / 1e9);
        describe(r, "hold", x);
      }
    }
  }
  return bad;
}

/* qsort has no argument for the history: fh_check sets it (one thread). */
static const fh_history *sort_h;
static int name_cmp(const void *a, const void *b) {
  return strcmp(sort_h->h[*(const int *)a].name, sort_h->h[*(const int *)b].name);
}

int fh_check(fh_history *h, const fh_policy *p, FILE *r) {
  int bad = 0;
  if (h->bad_lines) {
    bad += h->bad_lines;
    if (r) fprintf(r, "VIOLATION unreadable history: %d lines, first %s\n", h->bad_lines, h->first_bad);
  }
  int *idx = malloc(sizeof(int) * (size_t)h->n + 1);
  if (!idx) return bad + 1;
  for (int i = 0; i < h->n; i++) idx[i] = i;
  sort_h = h;
  qsort(idx, (size_t)h->n, sizeof *idx, name_cmp);
  for (int a = 0; a < h->n;) {
    int b = a;
    while (b < h->n && strcmp(h->h[idx[a]].name, h->h[idx[b]].name) == 0) b++;
    bad += check_overlap(h, p, idx + a, b - a, r);
    if (!p->no_fence) bad += check_fences(h, idx + a, b - a, r);
    a = b;
  }
  for (int i = 0; i < h->n; i++) bad += check_outcomes(h, p, &h->h[i], r);
  bad += check_guard(h, r);
  int lost = 0;
  for (int i = 0; i < h->n; i++) lost += h->h[i].t_lost != 0;
  if (r)
    fprintf(r,
            "history: %d holds (%d never released: worker killed), %d lost and signalled, %d worker freezes, "
            "%d guarded writes: %d violations\n",
            h->n, fh_open_holds(h), lost, h->ns, h->ng, bad);
  free(idx);
  return bad;
}
