/*
 * cmd_demo.c - "dlock demo": the seed articles' scenarios, played live.
 * 1. stock deduction by 50 workers, without and with a lock per SKU;
 * 2. a zombie worker frozen past its lease, stopped by the fencing guard;
 * 3. a job every second on 3 scheduler "nodes": each tick runs once.
 * The stock is an in-memory array (the CLI cannot send raw Redis commands);
 * only the locks, the guard and the scheduler's claims live in Redis.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define WORKERS 50
#define ROUNDS 10
#define SKUS 5
#define STOCK_PER_SKU 80 /* 100 attempts per SKU meet 80 units: a sell-out */
#define WORK_US 1000     /* the "work" between reading and writing the stock */
#define NODES 3          /* scheduler scene: schedulers, each its own "node" */
#define TICKS 5          /* ticks shown */
#define PERIOD_MS 1000

static const cli_opt demo_opts[] = {
    {NULL, 0, 0, 0},
};

/* The command descriptor's option tables (help.c), the ones parsed here. */
const cli_opt *const cli_demo_opts[] = {demo_opts, NULL};

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* ---- Ctrl-C ---- */

/* A thread waits for the signals (blocked everywhere else) and, when one
 * comes, stops the private server and leaves. Workers may be blocked in
 * Redis calls; there is nothing of theirs to save. */
typedef struct watcher {
  pthread_t tid;
  sigset_t set;
  demo_server *server;
  atomic_int stop;
} watcher;

static void *watch_signals(void *arg) {
  watcher *w = arg;
  struct timespec tick = {0, 200 * 1000000L};

  while (!atomic_load(&w->stop)) {
    int sig = sigtimedwait(&w->set, NULL, &tick);
    if (sig <= 0) continue;
    fprintf(stderr, "\ndlock: demo interrupted; stopping\n");
    demo_server_stop(w->server);
    fflush(stdout); /* _exit() would drop what is still buffered */
    _exit(128 + sig);
  }
  return NULL;
}

/* ---- The stock ---- */

/* The "database": one number per SKU. Relaxed atomics make each read and
 * each write indivisible, as a database row would, yet read-modify-write
 * stays racy, which is the point. (Plain ints would be a C data race, and
 * the sanitizers would rightly complain about the demo instead.) */
typedef struct store {
  atomic_int stock[SKUS];
  atomic_int sold;
  atomic_int refused; /* deductions that found the stock at zero */
  atomic_int done;    /* deductions finished, for the progress line */
  atomic_int errors;  /* lock calls that failed */
  atomic_int first_error;
} store;

static void store_init(store *s) {
  for (int i = 0; i < SKUS; i++) atomic_init(&s->stock[i], STOCK_PER_SKU);
  atomic_init(&s->sold, 0);
  atomic_init(&s->refused, 0);
  atomic_init(&s->done, 0);
  atomic_init(&s->errors, 0);
  atomic_init(&s->first_error, 0);
}

/* Read, work, write: the lost update waits between the two calls. */
static void deduct(store *s, int sku) {
  int stock = atomic_load_explicit(&s->stock[sku], memory_order_relaxed);
  sleep_us(WORK_US);
  if (stock > 0) {
    atomic_store_explicit(&s->stock[sku], stock - 1, memory_order_relaxed);
    atomic_fetch_add(&s->sold, 1);
  } else {
    atomic_fetch_add(&s->refused, 1);
  }
}

typedef struct worker {
  pthread_t tid;
  int id;
  store *s;
  dlock_mutex *locks[SKUS]; /* NULL: no lock */
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;

  for (int r = 0; r < ROUNDS; r++) {
    int sku = (w->id + r) % SKUS;
    if (w->locks[sku] == NULL) {
      deduct(w->s, sku);
    } else {
      /* Bounded, so that a broken server ends the demo instead of hanging. */
      int rc = dlock_mutex_acquire(w->locks[sku], 60000);
      if (rc == 0) {
        deduct(w->s, sku);
        rc = dlock_mutex_release(w->locks[sku]);
      }
      if (rc != 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&w->s->first_error, &zero, rc);
        atomic_fetch_add(&w->s->errors, 1);
      }
    }
    atomic_fetch_add(&w->s->done, 1);
  }
  return NULL;
}

typedef struct stock_result {
  int sold, refused, left, errors, first_error;
  int64_t ms;
} stock_result;

static void progress(const char *label, int done, int total, int tty, int final) {
  if (!tty && !final) return;
  int width = 30;
  int filled = total > 0 ? done * width / total : width;
  fprintf(stderr, "%s   %-14s [", tty ? "\r" : "", label);
  for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
  fprintf(stderr, "] %3d/%d", done, total);
  if (final) fputc('\n', stderr);
  fflush(stderr);
}

/* 'c' NULL: no lock. Returns 0, or -1 when the workers could not start. */
static int stock_run(dlock_client *c, const char *prefix, const char *label, stock_result *res) {
  static worker workers[WORKERS];
  store s;
  int tty = isatty(2);
  int started = 0;
  int rc = 0;

  store_init(&s);
  memset(workers, 0, sizeof workers);
  for (int i = 0; i < WORKERS && rc == 0; i++) {
    workers[i].id = i;
    workers[i].s = &s;
    for (int k = 0; k < SKUS && c != NULL; k++) {
      /* One handle per worker and SKU: they contend through Redis, as
       * separate processes on separate hosts would. */
      char name[256];
      dlock_mutex_options o;
      dlock_mutex_options_init(&o);
      o.lease_ms = 10000;
      snprintf(name, sizeof name, "%s:stock:sku%d", prefix, k + 1);
      int st = dlock_mutex_new(&workers[i].locks[k], c, name, &o);
      if (st != 0) {
        cli_report(st, dlock_last_error(), "demo: lock '%s'", name);
        rc = -1;
        break;
      }
    }
  }

  dlock_mono_ms t0 = dlock_mono_now();
  for (int i = 0; i < WORKERS && rc == 0; i++) {
    if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) != 0) {
      fprintf(stderr, "dlock: demo: cannot start worker threads\n");
      rc = -1;
      break;
    }
    started++;
  }
  int total = WORKERS * ROUNDS;
  while (started == WORKERS && atomic_load(&s.done) < total) {
    progress(label, atomic_load(&s.done), total, tty, 0);
    sleep_us(100 * 1000);
  }
  for (int i = 0; i < started; i++) pthread_join(workers[i].tid, NULL);
  res->ms = dlock_mono_now() - t0;
  if (started == WORKERS) progress(label, atomic_load(&s.done), total, tty, 1);

  res->sold = atomic_load(&s.sold);
  res->refused = atomic_load(&s.refused);
  res->errors = atomic_load(&s.errors);
  res->first_error = atomic_load(&s.first_error);
  res->left = 0;
  for (int k = 0; k < SKUS; k++) res->left += atomic_load(&s.stock[k]);
  for (int i = 0; i < WORKERS; i++) {
    for (int k = 0; k < SKUS; k++) dlock_mutex_free(workers[i].locks[k]);
  }
  return rc;
}

static void stock_row(const char *label, const stock_result *r) {
  int total = SKUS * STOCK_PER_SKU;
  int dropped = total - r->left;
  int lost = r->sold - dropped;
  int oversold = r->sold > total ? r->sold - total : 0;
  int exact = lost == 0 && oversold == 0 && r->errors == 0;

  printf("   %-9s %6d %8d %8d %8d %9d   %s\n", label, r->sold, dropped, r->left, lost, oversold,
         exact ? "exact" : "WRONG");
}

static int stock_exact(const stock_result *r) {
  int total = SKUS * STOCK_PER_SKU;
  return r->errors == 0 && r->sold == total - r->left && r->sold <= total;
}

/* ---- The zombie ---- */

typedef struct zombie_result {
  uint64_t zombie_fence, worker_fence;
  int worker_admitted; /* guard said yes to the newer holder */
  int zombie_rejected; /* guard said ESTALE to the zombie */
  int zombie_held;     /* what Redis said about the zombie's hold */
  int zombie_release;  /* status of the zombie's release */
  dlock_lost_reason zombie_lost;
} zombie_result;

typedef struct newer_holder {
  dlock_client *c;
  const char *lock;
  const char *resource;
  atomic_int done;
  int rc;
  int guard_rc;
  uint64_t fence;
  int64_t waited_ms;
  char ledger[64]; /* the in-memory record both try to write */
} newer_holder;

static void *newer_main(void *arg) {
  newer_holder *n = arg;
  dlock_mutex *m = NULL;
  dlock_mutex_options o;

  dlock_mutex_options_init(&o);
  o.lease_ms = 10000;
  n->rc = dlock_mutex_new(&m, n->c, n->lock, &o);
  if (n->rc == 0) {
    dlock_mono_ms t0 = dlock_mono_now();
    n->rc = dlock_mutex_acquire(m, 20000);
    n->waited_ms = dlock_mono_now() - t0;
  }
  if (n->rc == 0) {
    n->fence = dlock_mutex_fence(m);
    n->guard_rc = dlock_guard_check(n->c, n->resource, n->fence);
    if (n->guard_rc == 0) snprintf(n->ledger, sizeof n->ledger, "written by fence %llu", (unsigned long long)n->fence);
    dlock_mutex_release(m);
  }
  dlock_mutex_free(m);
  atomic_store(&n->done, 1);
  return NULL;
}

static int zombie_run(dlock_client *c, const char *prefix, zombie_result *z) {
  char lock[256], resource[256];
  dlock_mutex *m = NULL;
  dlock_mutex_options o;
  newer_holder n;
  pthread_t tid;

  memset(z, 0, sizeof *z);
  memset(&n, 0, sizeof n);
  snprintf(lock, sizeof lock, "%s:ledger-lock", prefix);
  snprintf(resource, sizeof resource, "%s:ledger", prefix);
  dlock_mutex_options_init(&o);
  o.lease_ms = 1000; /* fixed lease, no watchdog: the frozen worker's case */
  int st = dlock_mutex_new(&m, c, lock, &o);
  if (st == 0) st = dlock_mutex_acquire(m, 10000);
  if (st != 0) {
    cli_report(st, dlock_last_error(), "demo: zombie lock '%s'", lock);
    dlock_mutex_free(m);
    return -1;
  }
  z->zombie_fence = dlock_mutex_fence(m);
  printf("   zombie  takes the lock with a 1s lease (fence %llu), then\n"
         "           freezes for longer than its lease: a GC pause, a stopped VM\n",
         (unsigned long long)z->zombie_fence);
  fflush(stdout);

  n.c = c;
  n.lock = lock;
  n.resource = resource;
  atomic_init(&n.done, 0);
  if (pthread_create(&tid, NULL, newer_main, &n) != 0) {
    fprintf(stderr, "dlock: demo: cannot start a thread\n");
    dlock_mutex_free(m);
    return -1;
  }
  /* Frozen: at least 1.5 s, and until the other worker has written (at
   * most 30 s on a very slow machine). */
  sleep_us(1500 * 1000);
  for (int i = 0; i < 3000 && !atomic_load(&n.done); i++) sleep_us(10 * 1000);
  pthread_join(tid, NULL);

  char waited[64];
  cli_format_duration(n.waited_ms, waited, sizeof waited);
  if (n.rc != 0) {
    cli_report(n.rc, dlock_last_error(), "demo: second worker on '%s'", lock);
    dlock_mutex_free(m);
    return -1;
  }
  z->worker_fence = n.fence;
  z->worker_admitted = n.guard_rc == 0;
  printf("   worker  waits %s, gets the lock when the lease runs out (fence\n"
         "           %llu); the guard %s\n",
         waited, (unsigned long long)n.fence,
         n.guard_rc == 0 ? "admits it: the ledger is written" : dlock_strerror(n.guard_rc));

  /* The zombie wakes up and carries on as if nothing happened. */
  z->zombie_held = dlock_mutex_is_held(m);
  z->zombie_lost = dlock_mutex_lost(m);
  printf("   zombie  wakes up. Does Redis still hold its token? %s", z->zombie_held == 1   ? "yes"
                                                                     : z->zombie_held == 0 ? "no"
                                                                                           : "(error)");
  printf("\n");
  if (z->zombie_lost != DLOCK_LOST_NONE)
    printf("           its handle says: lost, %s\n", dlock_lost_reason_str(z->zombie_lost));
  int g = dlock_guard_check(c, resource, z->zombie_fence);
  z->zombie_rejected = g == DLOCK_ESTALE;
  printf("   zombie  writes anyway with fence %llu:\n           the guard says %s\n",
         (unsigned long long)z->zombie_fence,
         g == 0              ? "admitted (the newer write would be lost!)"
         : g == DLOCK_ESTALE ? "ESTALE: stale token, the write is rejected"
                             : dlock_strerror(g));
  z->zombie_release = dlock_mutex_release(m);
  printf("   zombie  releases: %s\n", z->zombie_release == DLOCK_ENOTHELD
                                          ? "ENOTHELD, nothing deleted (compare-and-delete)"
                                      : z->zombie_release == 0 ? "ok"
                                                               : dlock_strerror(z->zombie_release));
  dlock_mutex_free(m);
  return 0;
}

/* ---- The scheduler ---- */

/* What the three nodes reported about one tick. */
typedef struct tick_row {
  int64_t tick_ms;
  int runs;    /* job callbacks that ran for it, on any node */
  int skipped; /* nodes that found it claimed */
  char ran_on[16];
  uint64_t fence;
  char skipped_by[64];
} tick_row;

typedef struct sched_scene {
  pthread_mutex_t mu;
  int64_t first_tick_ms; /* ticks before this were not seen by all nodes */
  tick_row rows[64];
  int nrows;
  int errors;
  int first_error;
} sched_scene;

/* The row of 'tick_ms', made on first sight; NULL when full or too early.
 * Caller holds sc->mu. */
static tick_row *row_of(sched_scene *sc, int64_t tick_ms) {
  if (tick_ms < sc->first_tick_ms) return NULL;
  for (int i = 0; i < sc->nrows; i++) {
    if (sc->rows[i].tick_ms == tick_ms) return &sc->rows[i];
  }
  if (sc->nrows == (int)(sizeof sc->rows / sizeof sc->rows[0])) return NULL;
  tick_row *r = &sc->rows[sc->nrows++];
  memset(r, 0, sizeof *r);
  r->tick_ms = tick_ms;
  return r;
}

/* The job: "close the unpaid orders of the last second". What matters
 * here is that it is counted once per run. */
static int close_unpaid_orders(const dlock_tick *t, void *arg) {
  sched_scene *sc = arg;

  sleep_us(20 * 1000);
  pthread_mutex_lock(&sc->mu);
  tick_row *r = row_of(sc, t->scheduled_unix_ms);
  if (r != NULL) {
    r->runs++;
    r->fence = t->fence;
    snprintf(r->ran_on, sizeof r->ran_on, "%s", t->node);
  }
  pthread_mutex_unlock(&sc->mu);
  return 0;
}

typedef struct node_arg {
  sched_scene *sc;
  const char *node;
} node_arg;

static void sched_event(const dlock_sched_event *ev, void *arg) {
  const node_arg *na = arg;
  sched_scene *sc = na->sc;

  pthread_mutex_lock(&sc->mu);
  switch (ev->kind) {
  case DLOCK_SCHED_RAN:
    if (ev->status != 0 && sc->errors++ == 0) sc->first_error = DLOCK_EUNKNOWN;
    break;
  case DLOCK_SCHED_SKIPPED:
  case DLOCK_SCHED_SKIPPED_BUSY: {
    tick_row *r = row_of(sc, ev->scheduled_unix_ms);
    if (r != NULL) {
      size_t used = strlen(r->skipped_by);
      snprintf(r->skipped_by + used, sizeof r->skipped_by - used, "%s%s", used > 0 ? ", " : "", na->node);
      r->skipped++;
    }
    break;
  }
  case DLOCK_SCHED_SKIPPED_POOL:
  case DLOCK_SCHED_MISFIRED:
  case DLOCK_SCHED_SKIPPED_PAUSED:
    break;
  case DLOCK_SCHED_ERROR:
    if (sc->errors++ == 0) sc->first_error = ev->status;
    break;
  case DLOCK_SCHED_CLOCK_SKEW: /* cannot happen on one machine's clock */
    if (sc->errors++ == 0) sc->first_error = DLOCK_ETIME;
    break;
  }
  pthread_mutex_unlock(&sc->mu);
}

/* 1 when the first TICKS ticks have been reported by every node. */
static int sched_seen_all(sched_scene *sc) {
  int done = 0;
  pthread_mutex_lock(&sc->mu);
  for (int i = 0; i < sc->nrows; i++) {
    if (sc->rows[i].runs + sc->rows[i].skipped >= NODES) done++;
  }
  pthread_mutex_unlock(&sc->mu);
  return done >= TICKS;
}

static int cmp_rows(const void *a, const void *b) {
  const tick_row *x = a, *y = b;
  return x->tick_ms < y->tick_ms ? -1 : x->tick_ms > y->tick_ms;
}

typedef struct sched_result {
  int ticks; /* ticks shown */
  int runs;  /* runs of those ticks */
  int once;  /* ticks that ran exactly once */
  int errors;
} sched_result;

static int64_t wall_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sched_run(dlock_client *c, const char *prefix, sched_result *res) {
  static sched_scene sc;
  static const char *const names[NODES] = {"node-1", "node-2", "node-3"};
  node_arg args[NODES];
  dlock_sched *s[NODES] = {NULL, NULL, NULL};
  char job[256];
  int rc = 0;

  memset(res, 0, sizeof *res);
  memset(&sc, 0, sizeof sc);
  pthread_mutex_init(&sc.mu, NULL);
  sc.first_tick_ms = INT64_MAX; /* nothing counts until all have started */
  snprintf(job, sizeof job, "%s:close-unpaid-orders", prefix);
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.lock_at_most_for_ms = 10000;
  for (int i = 0; i < NODES && rc == 0; i++) {
    dlock_sched_options so;
    dlock_sched_options_init(&so);
    so.node_name = names[i];
    args[i].sc = &sc;
    args[i].node = names[i];
    so.on_event = sched_event;
    so.on_event_arg = &args[i];
    int st = dlock_sched_new(&s[i], c, &so);
    if (st == 0) st = dlock_sched_add_fixed_rate(s[i], job, PERIOD_MS, &jo, close_unpaid_orders, &sc);
    if (st == 0) st = dlock_sched_start(s[i]);
    if (st != 0) {
      cli_report(st, dlock_last_error(), "demo: scheduler %s", names[i]);
      rc = -1;
    }
  }
  /* Ticks from the next whole period on were fired by all three nodes. */
  pthread_mutex_lock(&sc.mu);
  sc.first_tick_ms = (wall_now_ms() / PERIOD_MS + 1) * PERIOD_MS;
  pthread_mutex_unlock(&sc.mu);
  /* Bounded: TICKS periods and a margin for a slow machine. */
  for (int i = 0; rc == 0 && i < (TICKS + 10) * 20 && !sched_seen_all(&sc); i++) sleep_us(50 * 1000);
  for (int i = 0; i < NODES; i++) {
    if (s[i] != NULL) dlock_sched_stop(s[i], 10000);
  }
  for (int i = 0; i < NODES; i++) dlock_sched_free(s[i]);

  qsort(sc.rows, (size_t)sc.nrows, sizeof sc.rows[0], cmp_rows);
  res->errors = sc.errors;
  printf("\n   %-10s %-8s %-18s %s\n", "tick (UTC)", "ran on", "fence", "skipped by");
  for (int i = 0; i < sc.nrows && i < TICKS; i++) {
    const tick_row *r = &sc.rows[i];
    char iso[64];
    if (dlock_time_format(r->tick_ms / 1000, NULL, iso, sizeof iso) != 0)
      snprintf(iso, sizeof iso, "@%lld", (long long)(r->tick_ms / 1000));
    printf("   %-10.8s %-8s %-18llu %s\n", iso + 11, r->runs > 0 ? r->ran_on : "-", (unsigned long long)r->fence,
           r->skipped_by);
    if (r->runs > 1) printf("   %-10s ran %d times!\n", "", r->runs);
    res->ticks++;
    res->runs += r->runs;
    res->once += r->runs == 1;
  }
  if (sc.errors > 0) printf("   (%d scheduler errors: %s)\n", sc.errors, dlock_strerror(sc.first_error));
  pthread_mutex_destroy(&sc.mu);
  return rc;
}

/* ---- The command ---- */

int cmd_demo(int argc, char **argv) {
  cli_args args;
  const char *arg;
  const char *url = NULL;
  int id;

  cli_args_init(&args, argc, argv, "demo", CLI_COMMON_SERVER);
  while ((id = cli_next_opt(&args, demo_opts, &arg)) != CLI_OPT_DONE) {
    if (id == CLI_OPT_ERROR) return CLI_EXIT_USAGE;
    if (!cli_common_opt(id, arg, &url))
      return cli_usage_error("demo", "unexpected argument '%s'", arg != NULL ? arg : "--");
  }
  const char *env = getenv("DLOCK_URL");
  int private_server = (url == NULL || url[0] == '\0') && (env == NULL || env[0] == '\0');

  /* Block the signals before any thread exists; the watcher takes them. */
  static demo_server server;
  static watcher w;
  memset(&server, 0, sizeof server);
  sigemptyset(&w.set);
  sigaddset(&w.set, SIGINT);
  sigaddset(&w.set, SIGTERM);
  sigaddset(&w.set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &w.set, NULL);
  w.server = &server;
  atomic_init(&w.stop, 0);
  if (pthread_create(&w.tid, NULL, watch_signals, &w) != 0) {
    fprintf(stderr, "dlock: demo: cannot start a thread\n");
    return CLI_EXIT_SOFTWARE;
  }

  int rc = CLI_EXIT_OK;
  char shown[512];
  printf("dlock demo: what a distributed lock and a fencing token are for\n");
  if (private_server) {
    rc = demo_server_start(&server);
    if (rc != 0) goto out;
    url = server.url;
    printf("Redis: a private redis-server on 127.0.0.1:%d (temporary, no persistence)\n", server.port);
  } else {
    cli_redact_url(cli_effective_url(url), shown, sizeof shown);
    printf("Redis: %s\n", shown);
  }
  dlock_client *c = NULL;
  rc = cli_connect(url, &c);
  if (rc != 0) goto out;

  char prefix[64];
  snprintf(prefix, sizeof prefix, "dlock-demo:%ld", (long)getpid());
  stock_result nolock, locked;
  zombie_result z;
  memset(&nolock, 0, sizeof nolock);
  memset(&locked, 0, sizeof locked);

  printf("\n1. Stock deduction: %d workers x %d deductions over %d SKUs, %d in stock\n"
         "   each. A deduction reads the stock, works %dms, writes stock-1 and counts\n"
         "   a sale. The stock is kept in this process's memory; locks are in Redis.\n",
         WORKERS, ROUNDS, SKUS, STOCK_PER_SKU, WORK_US / 1000);
  fflush(stdout);
  int bad = 0;
  if (stock_run(NULL, prefix, "without lock", &nolock) != 0 || stock_run(c, prefix, "with dlock", &locked) != 0) {
    bad = 1;
  }
  printf("\n   %-9s %6s %8s %8s %8s %9s\n", "", "sold", "dropped", "left", "lost", "oversold");
  stock_row("no lock", &nolock);
  stock_row("dlock", &locked);
  if (locked.errors > 0) {
    printf("   (%d lock calls failed: %s)\n", locked.errors, dlock_strerror(locked.first_error));
  }
  printf("   sold = sales counted; dropped = how much the stock went down;\n"
         "   lost = sales whose write was overwritten (sold - dropped).\n");

  printf("\n2. Zombie: a worker frozen past its lease, then a fenced write\n");
  fflush(stdout);
  if (zombie_run(c, prefix, &z) != 0) bad = 1;

  printf("\n3. Scheduler: \"close unpaid orders\" every second, deployed on %d nodes\n"
         "   (%d schedulers in this process, node-1..%d, each firing by its own clock).\n"
         "   Without coordination every node would run every tick.\n",
         NODES, NODES, NODES);
  fflush(stdout);
  sched_result sr;
  if (sched_run(c, prefix, &sr) != 0) bad = 1;

  int stock_ok = !bad && stock_exact(&locked);
  int zombie_ok = !bad && z.worker_admitted && z.zombie_rejected && z.worker_fence > z.zombie_fence;
  int sched_ok = !bad && sr.ticks == TICKS && sr.once == TICKS && sr.runs == TICKS && sr.errors == 0;
  int total = SKUS * STOCK_PER_SKU;
  char a[96], b[96];
  printf("\nSummary\n");
  printf("   %-28s %-24s %s\n", "scenario", "without dlock", "with dlock");
  snprintf(a, sizeof a, "sold %d, %d lost", nolock.sold, nolock.sold - (total - nolock.left));
  snprintf(b, sizeof b, "sold %d of %d, %s", locked.sold, total, stock_ok ? "exact" : "NOT EXACT");
  printf("   %-28s %-24s %s\n", "stock, 500 deductions", a, b);
  snprintf(b, sizeof b, "%s", zombie_ok ? "rejected by its fence" : "NOT REJECTED");
  printf("   %-28s %-24s %s\n", "zombie write after lease", "overwrites newer data", b);
  snprintf(a, sizeof a, "%d runs (%d per tick)", sr.ticks * NODES, NODES);
  snprintf(b, sizeof b, "%d runs, %s", sr.runs, sched_ok ? "once per tick" : "NOT ONCE PER TICK");
  printf("   %-28s %-24s %s\n", "job on 3 nodes, 5 ticks", a, b);
  printf("   times: without lock %.1fs, with dlock %.1fs\n", nolock.ms / 1000.0, locked.ms / 1000.0);

  if (!stock_ok || !zombie_ok || !sched_ok) rc = CLI_EXIT_SOFTWARE;
  dlock_client_free(c);
out:
  fflush(stdout);
  atomic_store(&w.stop, 1);
  pthread_join(w.tid, NULL);
  demo_server_stop(&server);
  return rc;
}
