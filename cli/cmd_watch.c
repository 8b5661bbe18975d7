/*
 * cmd_watch.c - the observe mode: "dlock status NAME --watch" and "dlock
 * list --watch": one line per change (acquired, released, expired, forced
 * release, a waiter come or gone), until SIGINT, SIGTERM or SIGHUP (exit 0).
 *
 * The library's watch (dlock_watch_*) wakes us on the server's
 * notifications; each wake-up reads the locks again and prints what differs
 * from the last reading. A lease that runs out is notified by no server: the
 * only timer is set at the moment the earliest lease read ends (a renewed
 * hold is found renewed then, and the timer moves on). Where a backend
 * cannot notify a change, the watch's bound (dlock_watch_bound_ms) wakes us
 * as often as that. A failed reading says so on stderr, is tried again every
 * second, and "reconnected" follows when a reading works again.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define RETRY_MS 1000
#define MAX_HOLDS 256

typedef struct hold {
  uint64_t fence;
  int64_t ttl_ms;
  char owner[1025];
} hold;

/* One lock as last read. */
typedef struct snap {
  char *name;
  int known;       /* read at least once */
  int64_t read_at; /* CLOCK_MONOTONIC ms of the reading */
  int64_t waiters;
  size_t n;
  hold h[MAX_HOLDS];
} snap;

typedef struct watcher {
  dlock_client *c;
  dlock_watch *w;
  int json;
  snap *s;
  size_t ns, caps;
  int failing; /* the last reading failed */
  int started; /* the first reading is done: a name seen from now on is new */
} watcher;

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void collect_hold(const dlock_holder *h, void *arg) {
  snap *s = arg;
  if (s->n == MAX_HOLDS) return;
  hold *d = &s->h[s->n++];
  d->fence = h->fence;
  d->ttl_ms = h->ttl_ms;
  snprintf(d->owner, sizeof d->owner, "%s", h->owner_info);
}

static const hold *find_hold(const snap *s, uint64_t fence) {
  for (size_t i = 0; i < s->n; i++)
    if (s->h[i].fence == fence) return &s->h[i];
  return NULL;
}

/* One line: time, name, event, holder, fence (text or JSON). */
static void event(const watcher *wt, const char *name, const char *what, const hold *h, int64_t waiters) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  char who[1200] = "";
  if (h != NULL) cli_owner_describe(h->owner, who, sizeof who);
  if (wt->json) {
    printf("{\"time_unix_ms\": %lld, \"name\": ", (long long)ms);
    cli_json_string(stdout, name);
    printf(", \"event\": \"%s\"", what);
    if (h != NULL) {
      printf(", \"fence\": %llu, \"ttl_ms\": %lld, \"holder\": ", (unsigned long long)h->fence, (long long)h->ttl_ms);
      cli_json_string(stdout, who);
      fputs(", \"owner_info\": ", stdout);
      cli_json_string(stdout, h->owner);
    }
    printf(", \"waiters\": %lld}\n", (long long)waiters);
  } else {
    struct tm tm;
    time_t secs = now.tv_sec;
    char when[32] = "";
    if (localtime_r(&secs, &tm) != NULL) strftime(when, sizeof when, "%H:%M:%S", &tm);
    printf("%s.%03ld  %s  %s", when, now.tv_nsec / 1000000, name, what);
    if (h != NULL) printf("  fence %llu  %s", (unsigned long long)h->fence, who);
    if (h == NULL || strcmp(what, "waiter") == 0 || strcmp(what, "waiter-left") == 0)
      printf("  (%lld waiting)", (long long)waiters);
    putchar('\n');
  }
  fflush(stdout);
}

/* Read 'name' into 'out' (holds and waiters). 0 or a status. */
static int read_snap(watcher *wt, snap *out) {
  dlock_lock_info info;
  dlock_lock_info_init(&info);
  int st = dlock_lock_info_get(wt->c, out->name, &info);
  if (st != 0) return st;
  out->n = 0;
  out->waiters = info.waiters;
  out->read_at = mono_ms();
  if (info.held && !info.foreign) {
    int n = dlock_lock_holders(wt->c, out->name, collect_hold, out);
    if (n < 0) return n;
  }
  return 0;
}

/* Compare a new reading with the last and print the differences. */
static void diff(const watcher *wt, const snap *old, const snap *now, int forced) {
  if (!old->known) {
    if (now->n == 0) event(wt, now->name, "free", NULL, now->waiters);
    for (size_t i = 0; i < now->n; i++) event(wt, now->name, "held", &now->h[i], now->waiters);
    return;
  }
  for (size_t i = 0; i < old->n; i++) {
    const hold *h = &old->h[i];
    if (find_hold(now, h->fence) != NULL) continue;
    /* Gone: its lease had run out by now (give a renewal in flight 50 ms),
     * or the server said a forced release happened, or it was released. */
    const char *how = "released";
    if (forced)
      how = "force-released";
    else if (h->ttl_ms >= 0 && now->read_at >= old->read_at + h->ttl_ms - 50)
      how = "expired";
    event(wt, now->name, how, h, now->waiters);
  }
  for (size_t i = 0; i < now->n; i++)
    if (find_hold(old, now->h[i].fence) == NULL) event(wt, now->name, "acquired", &now->h[i], now->waiters);
  if (now->waiters > old->waiters)
    event(wt, now->name, "waiter", NULL, now->waiters);
  else if (now->waiters < old->waiters)
    event(wt, now->name, "waiter-left", NULL, now->waiters);
}

static snap *find_snap(watcher *wt, const char *name) {
  for (size_t i = 0; i < wt->ns; i++)
    if (strcmp(wt->s[i].name, name) == 0) return &wt->s[i];
  return NULL;
}

/* Watch one more name (list --watch: a name seen for the first time). */
static snap *add_name(watcher *wt, const char *name) {
  snap *s = find_snap(wt, name);
  if (s != NULL) return s;
  if (wt->ns == wt->caps) {
    size_t cap = wt->caps ? wt->caps * 2 : 8;
    snap *g = realloc(wt->s, cap * sizeof *g);
    if (g == NULL) return NULL;
    wt->s = g;
    wt->caps = cap;
  }
  s = &wt->s[wt->ns];
  memset(s, 0, sizeof *s);
  if ((s->name = strdup(name)) == NULL) return NULL;
  s->known = wt->started; /* list: a name that appears later was free before */
  if (dlock_watch_add(wt->w, name) != 0)
    fprintf(stderr, "dlock: watching '%s': %s (its changes are seen at the next reading)\n", name, dlock_last_error());
  wt->ns++;
  return s;
}

static void add_listed(const char *name, void *arg) {
  snap *s = add_name(arg, name);
  (void)s;
}

/* Read every watched lock again; print the changes. 0, or -1 when a
 * reading failed (said on stderr once per failure run). */
static int refresh(watcher *wt, const char *pattern, int listing, int forced) {
  int rc = 0;
  if (listing && dlock_lock_list(wt->c, pattern, add_listed, wt) < 0) rc = -1;
  for (size_t i = 0; rc == 0 && i < wt->ns; i++) {
    snap *now = malloc(sizeof *now);
    if (now == NULL) return -1;
    memset(now, 0, sizeof *now);
    now->name = wt->s[i].name;
    if (read_snap(wt, now) != 0) {
      free(now);
      rc = -1;
      break;
    }
    diff(wt, &wt->s[i], now, forced);
    now->known = 1;
    wt->s[i] = *now;
    free(now);
  }
  if (rc != 0 && !wt->failing)
    fprintf(stderr, "dlock: lost the connection to the server (%s); reconnecting\n", dlock_last_error());
  else if (rc == 0 && wt->failing)
    fprintf(stderr, "dlock: reconnected; the lines above the gap may have missed changes made meanwhile\n");
  wt->failing = rc != 0;
  if (rc == 0) wt->started = 1;
  return rc;
}

/* When the next lease read ends (the one timer), else -1. */
static int64_t next_expiry(const watcher *wt) {
  int64_t at = -1;
  for (size_t i = 0; i < wt->ns; i++)
    for (size_t j = 0; j < wt->s[i].n; j++) {
      const hold *h = &wt->s[i].h[j];
      if (h->ttl_ms < 0) continue;
      int64_t end = wt->s[i].read_at + h->ttl_ms + 20;
      if (at < 0 || end < at) at = end;
    }
  return at;
}

int cli_watch(dlock_client *c, const char *name, const char *pattern, int json, int sfd) {
  int listing = name == NULL;
  watcher wt;
  memset(&wt, 0, sizeof wt);
  wt.c = c;
  wt.json = json;
  int st = dlock_watch_new(&wt.w, c);
  if (st == 0 && listing) st = dlock_watch_add(wt.w, NULL);
  if (st == 0 && !listing && add_name(&wt, name) == NULL) st = -1;
  if (st != 0) {
    dlock_watch_free(wt.w);
    return cli_report(st, dlock_last_error(), "watching '%s'", listing ? "the locks" : name);
  }
  int64_t bound = dlock_watch_bound_ms(wt.w);
  if (bound > 0)
    fprintf(stderr, "dlock: the server does not tell every change: the locks are read again every %lld ms\n",
            (long long)bound);
  refresh(&wt, pattern, listing, 0);
  for (;;) {
    int64_t now = mono_ms(), timeout = -1;
    int64_t exp = next_expiry(&wt);
    if (exp >= 0) timeout = exp > now ? exp - now : 0;
    if (wt.failing && (timeout < 0 || timeout > RETRY_MS)) timeout = RETRY_MS;
    bound = dlock_watch_bound_ms(wt.w);
    if (bound > 0 && (timeout < 0 || timeout > bound)) timeout = bound;
    struct pollfd p[2] = {{sfd, POLLIN, 0}, {dlock_watch_fd(wt.w), POLLIN, 0}};
    int n = poll(p, 2, timeout < 0 ? -1 : timeout > 3600000 ? 3600000 : (int)timeout);
    if (n < 0 && errno != EINTR) break;
    if (p[0].revents & POLLIN) break;
    int woke = dlock_watch_wait(wt.w, 0);
    if (woke == 0 && n == 0 && timeout < 0) continue;
    refresh(&wt, pattern, listing, (woke & DLOCK_WATCH_FORCED) != 0);
  }
  for (size_t i = 0; i < wt.ns; i++) free(wt.s[i].name);
  free(wt.s);
  dlock_watch_free(wt.w);
  return CLI_EXIT_OK;
}
