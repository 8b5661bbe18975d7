/*
 * pg_lock.c - the PostgreSQL backend's operations: acquire (try, or wait
 * with LISTEN/NOTIFY wake-ups and polling), release, batched renewal,
 * remaining, info, list, force release, the guard, the scheduler's claim,
 * finish and history, init and the doctor's checks; plus advisory mode.
 *
 * The outcome rules of docs/design.md "Lost replies" hold here too: a
 * statement whose connection broke after it was sent is sent once more only
 * when it is safe to run twice (acquire, release, renew, guard, sched); a
 * release whose second answer cannot tell is reported DLOCK_EUNKNOWN; force
 * release is never resent.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "pg/pg_internal.h"

/* 1 when 's' is well-formed UTF-8 (no overlong forms, no surrogates). */
static int utf8_ok(const unsigned char *s) {
  while (*s) {
    unsigned c = *s;
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0 || (n == 1 && c < 0xC2) || c > 0xF4) return 0;
    unsigned cp = n == 0 ? c : c & (0x3F >> n);
    for (int i = 1; i <= n; i++) {
      if ((s[i] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return 0;
    s += n + 1;
  }
  return 1;
}

static int check_name(dlock__pg *pg, const char *what, const char *name) {
  int rc = dlock__check_name(what, name);
  if (rc != 0) return rc;
  if (!utf8_ok((const unsigned char *)name))
    return dlock__error(DLOCK_ENAME,
                        "%s is not valid UTF-8; the PostgreSQL backend stores names as text (%s); use a UTF-8 name",
                        what, pg->display);
  size_t n = strlen(name);
  if (n > DLOCK__PG_NAME_MAX)
    return dlock__error(DLOCK_ENAME,
                        "%s '%.40s...' is %zu bytes; the PostgreSQL backend's tables hold names of at most %d "
                        "bytes (%s); use a shorter name",
                        what, name, n, DLOCK__PG_NAME_MAX, pg->display);
  return 0;
}

int dlock__pg_check_name(dlock__pg *pg, const char *what, const char *name) { return check_name(pg, what, name); }

int dlock__pg_init(dlock__pg *pg) {
  dlock_mono_ms deadline = dlock_mono_now() + pg->opts.command_timeout_ms * 2;
  PGconn *conn = NULL;
  int rc = dlock__pg_get(pg, deadline, &conn);
  if (rc != 0) return rc;
  PGresult *r = NULL;
  int sent = 0;
  rc = dlock__pg_exec_on(pg, conn, pg->sql[DLOCK__PG_SQL_INIT], -1, NULL, deadline, &r, &sent);
  PQclear(r);
  /* A failed init drops its connection: after a timeout the statement is
   * still running there, and PQexec("ROLLBACK") would first wait, without
   * any timeout, for it to end. Closing the connection rolls it back. */
  dlock__pg_put(pg, conn, rc != 0);
  if (rc == DLOCK_ENOPERM || rc == DLOCK_EREADONLY) {
    char prev[600];
    snprintf(prev, sizeof prev, "%s", dlock_last_error());
    return dlock__error(rc,
                        "%s; dlock could not create its schema \"%s\" and tables: run `dlock init --url ...` "
                        "once as a user with CREATE rights on the database (or the schema's owner)%s",
                        prev, pg->schema, rc == DLOCK_EREADONLY ? ", on the primary" : "");
  }
  if (rc == 0) atomic_store(&pg->inited_flag, 1);
  return rc;
}

int dlock__pg_ping(dlock__pg *pg) {
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, "SELECT 1", 0, NULL, 0, 1, &r, NULL, NULL);
  PQclear(r);
  return rc;
}

int64_t dlock__pg_advisory_key(const char *name) {
  unsigned char md[32];
  unsigned int mdlen = 0;
  EVP_Digest(name, strlen(name), md, &mdlen, EVP_sha256(), NULL);
  uint64_t k = 0;
  for (int i = 0; i < 8; i++) k = (k << 8) | md[i];
  return (int64_t)k;
}

/* ---- LISTEN ---- */

/* Wait for the reply to what was sent on 'conn' until 'until' or 'cancel':
 * 1 the command completed, 0 cut short (still in flight: call again to go
 * on), -1 failed. */
static int command_done(PGconn *conn, dlock_mono_ms until, const atomic_int *cancel) {
  int ok = 1;
  for (;;) {
    while (PQisBusy(conn)) {
      dlock_mono_ms now = dlock_mono_now();
      if (now >= until || (cancel && atomic_load(cancel))) return ok ? 0 : -1;
      struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
      poll(&p, 1, until - now > 50 ? 50 : (int)(until - now));
      if (!PQconsumeInput(conn)) return -1;
    }
    PGresult *r = PQgetResult(conn);
    if (!r) return ok ? 1 : -1;
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) ok = 0;
    PQclear(r);
  }
}

/* Start (or restart) the LISTEN connection and check that it hears a
 * notification: through a transaction-mode pooler it would not. Called
 * with ln_mu held, which it lets go while it connects, sends LISTEN and
 * waits for the probe (ln_starting keeps other waiters from starting too;
 * they wait on ln_cv, seeing their deadlines and cancels). The waiter's
 * deadline ('until': the end of its whole wait) and 'cancel' bound it: cut
 * short once connected, the connection is kept where it was (ln_pend: the
 * LISTEN or the probe in flight) and the next start goes on with it, so
 * that short waits do not open a connection each; no verdict on the pooler
 * is drawn then. A connect cut short by the deadline counts as a failure
 * (tried again in 5 s: waits shorter than a connect would otherwise open
 * one each); by a cancel, not. Notifications heard meanwhile go to the ring
 * as the reader's do. 1 when it tried (and let ln_mu go), 0 when a failure
 * is still too recent to try again. */
static int listen_start(dlock__pg *pg, dlock_mono_ms until, const atomic_int *cancel) {
  if (pg->ln_state == -1 && dlock_mono_now() < pg->ln_retry_at) return 0;
  if (pg->listen_conn) {
    PQfinish(pg->listen_conn);
    pg->listen_conn = NULL;
  }
  PGconn *conn = pg->ln_pend;
  int phase = conn ? pg->ln_phase : 0;
  char probe[64];
  snprintf(probe, sizeof probe, "%s", pg->ln_probe);
  dlock_mono_ms probe_until = pg->ln_probe_until;
  pg->ln_pend = NULL;
  pg->ln_state = -1;
  pg->ln_retry_at = dlock_mono_now() + 5000;
  pg->ln_starting = 1;
  pthread_mutex_unlock(&pg->ln_mu);
  int heard = 0, cut = 0, keep = 0;
#define LN_CUT() (dlock_mono_now() >= until || (cancel && atomic_load(cancel)))
  if (!conn) {
    if (dlock__pg_open_cancel(pg, until == INT64_MAX ? 0 : until, cancel, &conn) != 0) {
      conn = NULL;
      cut = cancel && atomic_load(cancel);
    }
  }
  if (conn && phase == 0) {
    char *ch = PQescapeIdentifier(conn, pg->channel, strlen(pg->channel));
    char sql[200];
    snprintf(sql, sizeof sql, "LISTEN %s", ch ? ch : "\"dlock\"");
    PQfreemem(ch);
    /* Not PQexec: through a busy session-mode pooler LISTEN may queue for
     * minutes, and this waiter's deadline and cancel must hold. */
    phase = PQsendQuery(conn, sql) ? 1 : -1;
  }
  if (conn && phase == 1) {
    int done = command_done(conn, until, cancel);
    if (done == 1) {
      phase = 2;
      probe[0] = '\0';
    } else if (done == 0) {
      cut = keep = 1; /* LISTEN still in flight: the next start waits on */
    } else {
      phase = -1;
    }
  }
  if (conn && phase == 2 && !probe[0]) {
    /* The probe: a notification sent on a command connection must arrive. */
    char token[17], p[64];
    dlock__random_hex(token, 8);
    snprintf(p, sizeof p, " probe-%s", token);
    const char *vals[2] = {pg->channel, p};
    PGresult *pr = NULL;
    if (dlock__pg_run(pg, "SELECT pg_notify($1, $2)", 2, vals, until == INT64_MAX ? 0 : until, 1, &pr, NULL, NULL) ==
        0) {
      PQclear(pr);
      snprintf(probe, sizeof probe, "%s", p);
      probe_until = dlock_mono_now() + 2000;
    } else if (LN_CUT()) {
      cut = keep = 1; /* listening, the probe not sent: the next start sends it */
    } else {
      phase = -1;
    }
  }
  if (conn && phase == 2 && probe[0] && !cut) {
    int lost = 0;
    for (;;) {
      /* What arrived first (also after a cut: the probe may be waiting). */
      if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
        lost = 1; /* the connection died: no verdict either */
        break;
      }
      PGnotify *n;
      while ((n = PQnotifies(conn)) != NULL) {
        if (strcmp(n->extra, probe) == 0) {
          heard = 1;
        } else {
          pthread_mutex_lock(&pg->ln_mu);
          snprintf(pg->ln_ring[pg->ln_gen % DLOCK__PG_RING], sizeof pg->ln_ring[0], "%s", n->extra);
          pg->ln_gen++;
          pthread_cond_broadcast(&pg->ln_cv);
          pthread_mutex_unlock(&pg->ln_mu);
        }
        PQfreemem(n);
      }
      if (heard) break;
      dlock_mono_ms now = dlock_mono_now();
      if (now >= probe_until) break;
      if (LN_CUT()) {
        cut = keep = 1;
        break;
      }
      dlock_mono_ms slice = probe_until - now;
      if (until - now < slice) slice = until - now;
      if (slice > 50) slice = 50;
      struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
      poll(&p, 1, (int)slice);
    }
    if (!heard && !cut && !lost) {
      /* The full 2 s without it: a transaction-mode pooler. */
      pthread_mutex_lock(&pg->ln_mu);
      snprintf(pg->warnings, sizeof pg->warnings,
               "PostgreSQL %s: the LISTEN connection received no notification: a transaction-mode pooler "
               "(PgBouncer pool_mode=transaction) cannot carry LISTEN; waiters poll every %d ms instead. Point "
               "the URL at the server or a session-mode pool for prompt wake-ups",
               pg->display, pg->opts.poll_ms);
      pg->ln_retry_at = INT64_MAX;
      pthread_mutex_unlock(&pg->ln_mu);
    }
  }
  int keyed = 0;
  if (heard) {
    /* The client's live key, on this session (a session: the probe was
     * heard): waiter rows that name it count while the session lives
     * (pg_sql.c, WAITER_LIVE). Shared: two clients that drew the same key
     * both hold it (each then looks alive while the other lives; the
     * heartbeat still ends a dead one). Not taken in time: waiters name
     * no key (the heartbeat alone), and a late reply is left unread. */
    char sql[100];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock_shared(%d, %d)", DLOCK__PG_LIVE_CLASS, (int)pg->ln_key);
    dlock_mono_ms by = dlock_mono_now() + 2000;
    if (until < by) by = until;
    keyed = PQsendQuery(conn, sql) && command_done(conn, by, cancel) == 1;
  }
#undef LN_CUT
  if (conn && !heard && !keep) {
    PQfinish(conn);
    conn = NULL;
  }
  pthread_mutex_lock(&pg->ln_mu);
  pg->ln_starting = 0;
  if (heard) {
    pg->listen_conn = conn;
    pg->ln_state = 1;
    pg->ln_keyed = keyed;
  } else if (cut) {
    pg->ln_state = 0; /* not a verdict: the next wait goes on */
    if (keep) {
      pg->ln_pend = conn;
      pg->ln_phase = phase;
      snprintf(pg->ln_probe, sizeof pg->ln_probe, "%s", probe);
      pg->ln_probe_until = probe_until;
    }
  }
  pthread_cond_broadcast(&pg->ln_cv);
  return 1;
}

/* Read the LISTEN connection for up to 'slice' ms into the ring, unless
 * another thread reads it (then wait as long for its news). Called and
 * returns with ln_mu held. */
static void read_slice(dlock__pg *pg, dlock_mono_ms now, dlock_mono_ms slice) {
  if (pg->ln_state == 1 && !pg->ln_reader) {
    pg->ln_reader = 1;
    PGconn *conn = pg->listen_conn;
    pthread_mutex_unlock(&pg->ln_mu);
    struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
    poll(&p, 1, (int)slice);
    int ok = PQconsumeInput(conn) && PQstatus(conn) == CONNECTION_OK;
    pthread_mutex_lock(&pg->ln_mu);
    PGnotify *n;
    while ((n = PQnotifies(conn)) != NULL) {
      snprintf(pg->ln_ring[pg->ln_gen % DLOCK__PG_RING], sizeof pg->ln_ring[0], "%s", n->extra);
      pg->ln_gen++;
      PQfreemem(n);
    }
    if (!ok) pg->ln_state = 0; /* reconnect at the next wait; polling covers the gap */
    pg->ln_reader = 0;
    pthread_cond_broadcast(&pg->ln_cv);
  } else {
    struct timespec ts;
    dlock__deadline_timespec(now + slice, &ts);
    pthread_cond_timedwait(&pg->ln_cv, &pg->ln_mu, &ts);
  }
}

/* A notification's parts (pg_sql.c): "NAME TARGET", or "NAME TARGET f"
 * for a forced release, read from the end (a name may hold spaces; a
 * target never does). */
typedef struct note {
  size_t nlen;        /* the name: the first nlen bytes */
  const char *target; /* a waiter's token, "" (every waiter) or "-" (no waiter) */
  size_t tlen;
  int forced;
} note;

static void note_parse(const char *e, note *n) {
  size_t end = strlen(e);
  n->forced = end >= 2 && e[end - 2] == ' ' && e[end - 1] == 'f';
  if (n->forced) end -= 2;
  size_t sp = end;
  while (sp > 0 && e[sp - 1] != ' ') sp--;
  n->nlen = sp > 0 ? sp - 1 : end;
  n->target = sp > 0 ? e + sp : e + end;
  n->tlen = sp > 0 ? end - sp : 0;
}

/* A change that wakes no waiter nor holder (an acquire, a waiter come or
 * gone): for the observers only. */
static int note_is_event(const note *n) { return n->tlen == 1 && n->target[0] == '-'; }

/* A job's state changed ('<job> job', sched_job_set()): for the schedulers. */
static int note_is_job(const note *n) { return n->tlen == 3 && !memcmp(n->target, "job", 3); }

/* Wait until a notification for 'name' (addressed to 'token' or to no one
 * in particular) arrived after 'gen', or 'until', or 'cancel'. 'deadline':
 * the end of the whole wait (until is the next re-check), which bounds
 * (re)starting the LISTEN connection. */
static void listen_wait(dlock__pg *pg, const char *name, const char *token, uint64_t gen, dlock_mono_ms until,
                        dlock_mono_ms deadline, const atomic_int *cancel) {
  size_t nlen = strlen(name), tlen = strlen(token);
  pthread_mutex_lock(&pg->ln_mu);
  for (;;) {
    /* Anything for us since 'gen'? */
    uint64_t from =
        pg->ln_gen > DLOCK__PG_RING && gen < pg->ln_gen - DLOCK__PG_RING ? pg->ln_gen - DLOCK__PG_RING : gen;
    for (uint64_t g = from; g < pg->ln_gen; g++) {
      const char *e = pg->ln_ring[g % DLOCK__PG_RING];
      note n;
      note_parse(e, &n);
      if (n.nlen == nlen && memcmp(e, name, nlen) == 0 &&
          (n.tlen == 0 || (n.tlen == tlen && memcmp(n.target, token, tlen) == 0))) {
        pthread_mutex_unlock(&pg->ln_mu);
        return;
      }
    }
    gen = pg->ln_gen;
    dlock_mono_ms now = dlock_mono_now();
    if (now >= until || (cancel && atomic_load(cancel))) break;
    dlock_mono_ms slice = until - now > 50 ? 50 : until - now;
    if (pg->ln_state != 1 && !pg->ln_starting && listen_start(pg, deadline, cancel)) continue; /* ln_mu was let go */
    read_slice(pg, now, slice);
  }
  pthread_mutex_unlock(&pg->ln_mu);
}

/* ---- The holders' watch ---- */

/* The index of 'name' (up to 'len' bytes) in hw_names, or -1. Under ln_mu. */
static long watched(const dlock__pg *pg, const char *name, size_t len) {
  for (size_t i = 0; i < pg->hw_n; i++)
    if (strlen(pg->hw_names[i]) == len && !memcmp(pg->hw_names[i], name, len)) return (long)i;
  return -1;
}

/* A scheduler's watch of a job's state (dlock__pg_job_watch_add). */
struct dlock__pg_jw {
  struct dlock__pg_jw *next;
  void (*wake)(void *);
  void *arg;
  char name[DLOCK__PG_NAME_MAX + 1];
};

/* Wake the watches of the job 'name' (up to 'len' bytes); NULL: all. Under
 * ln_mu (a wake neither blocks nor calls dlock). */
static void job_wake(dlock__pg *pg, const char *name, size_t len) {
  for (struct dlock__pg_jw *w = pg->jw; w; w = w->next)
    if (!name || (strlen(w->name) == len && !memcmp(w->name, name, len))) w->wake(w->arg);
}

/* An observer (dlock_watch_*): the names it watches. Under ln_mu. */
struct dlock__pg_obs {
  dlock__pg *pg;
  void (*wake)(void *arg, unsigned what);
  void *arg;
  char **names;
  unsigned char *prefix; /* names[i] is a prefix */
  size_t n, cap;
  int up; /* the LISTEN connection was up when last told */
  dlock__pg_obs *next;
};

/* Tell the observers that the LISTEN connection went down or came up.
 * Under ln_mu. */
static void obs_state(dlock__pg *pg) {
  int up = pg->ln_state == 1;
  for (dlock__pg_obs *o = pg->obs; o; o = o->next)
    if (o->up != up) {
      o->up = up;
      o->wake(o->arg, up ? DLOCK__PG_OBS_UP : DLOCK__PG_OBS_DOWN);
    }
}

/* Tell the observers of a notification ('e', or NULL: any may have been
 * missed). Under ln_mu. */
static void obs_tell(dlock__pg *pg, const char *e) {
  note n = {0, "", 0, 0};
  if (e) note_parse(e, &n);
  for (dlock__pg_obs *o = pg->obs; o; o = o->next) {
    int hit = e == NULL;
    for (size_t i = 0; !hit && i < o->n; i++) {
      size_t len = strlen(o->names[i]);
      hit =
          o->prefix[i] ? n.nlen >= len && !memcmp(e, o->names[i], len) : n.nlen == len && !memcmp(e, o->names[i], len);
    }
    if (hit) o->wake(o->arg, DLOCK__PG_OBS_CHANGE | (n.forced ? DLOCK__PG_OBS_FORCED : 0));
  }
}

/* The thread: reads the LISTEN connection (or lets a waiter read it) while
 * names are held or observed, pokes on a notification that names a held
 * one (not on an observer's event) and tells the observers. */
static void *watch_main(void *arg) {
  dlock__pg *pg = arg;
  pthread_mutex_lock(&pg->ln_mu);
  uint64_t gen = pg->ln_gen;
  while (!atomic_load(&pg->hw_stop)) {
    if (pg->hw_n == 0 && !pg->obs && !pg->jw) {
      gen = pg->ln_gen;
      pthread_cond_wait(&pg->ln_cv, &pg->ln_mu);
      continue;
    }
    int poke = 0;
    if (pg->ln_gen - gen > DLOCK__PG_RING) {
      gen = pg->ln_gen - DLOCK__PG_RING;
      obs_tell(pg, NULL); /* the ring went round: some were missed */
      job_wake(pg, NULL, 0);
    }
    for (; gen < pg->ln_gen; gen++) {
      const char *e = pg->ln_ring[gen % DLOCK__PG_RING];
      note n;
      note_parse(e, &n);
      if (note_is_job(&n))
        job_wake(pg, e, n.nlen);
      else if (!note_is_event(&n) && watched(pg, e, n.nlen) >= 0)
        poke = 1;
      obs_tell(pg, e);
    }
    obs_state(pg);
    if (poke) {
      pthread_mutex_unlock(&pg->ln_mu);
      pg->hw_poke(pg->hw_arg);
      pthread_mutex_lock(&pg->ln_mu);
      continue;
    }
    if (pg->ln_state != 1 && !pg->ln_starting && listen_start(pg, dlock_mono_now() + 5000, &pg->hw_stop)) {
      if (pg->ln_state == 1) job_wake(pg, NULL, 0); /* (re)connected: a change may have gone unheard */
      continue;
    }
    read_slice(pg, dlock_mono_now(), 500);
  }
  pthread_mutex_unlock(&pg->ln_mu);
  return NULL;
}

/* Start the thread if it is not running, and the LISTEN connection if it
 * is not up, waiting for it until 'until'. Under ln_mu. */
static void watch_listen(dlock__pg *pg, dlock_mono_ms until) {
  if (!pg->hw_started && pthread_create(&pg->hw_thread, NULL, watch_main, pg) == 0) pg->hw_started = 1;
  if (pg->ln_state != 1 && !pg->ln_starting) listen_start(pg, until, NULL);
  while (pg->ln_starting && dlock_mono_now() < until) {
    struct timespec ts;
    dlock__deadline_timespec(dlock_mono_now() + 50, &ts);
    pthread_cond_timedwait(&pg->ln_cv, &pg->ln_mu, &ts);
  }
  pthread_cond_broadcast(&pg->ln_cv);
}

void dlock__pg_watch_add(dlock__pg *pg, const char *name, void (*poke)(void *), void *arg, dlock_mono_ms until) {
  if (pg->advisory) return;
  pthread_mutex_lock(&pg->ln_mu);
  if (pg->hw_n == pg->hw_cap) {
    size_t cap = pg->hw_cap ? pg->hw_cap * 2 : 8;
    void *grown = realloc(pg->hw_names, cap * sizeof *pg->hw_names);
    if (!grown) { /* the news then waits for the next renewal */
      pthread_mutex_unlock(&pg->ln_mu);
      return;
    }
    pg->hw_names = grown;
    pg->hw_cap = cap;
  }
  snprintf(pg->hw_names[pg->hw_n++], sizeof pg->hw_names[0], "%s", name);
  pg->hw_poke = poke;
  pg->hw_arg = arg;
  /* The first hold waits for the LISTEN connection, so that a forced
   * release right after the acquire is heard too. */
  watch_listen(pg, until);
  pthread_mutex_unlock(&pg->ln_mu);
}

int dlock__pg_job_watch_add(dlock__pg *pg, const char *job, void (*wake)(void *), void *arg, dlock_mono_ms until,
                            void **handle) {
  *handle = NULL;
  struct dlock__pg_jw *w = calloc(1, sizeof *w);
  if (!w) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(w->name, sizeof w->name, "%s", job);
  w->wake = wake;
  w->arg = arg;
  pthread_mutex_lock(&pg->ln_mu);
  w->next = pg->jw;
  pg->jw = w;
  watch_listen(pg, until);
  pthread_mutex_unlock(&pg->ln_mu);
  *handle = w;
  return 0;
}

void dlock__pg_job_watch_remove(dlock__pg *pg, void *handle) {
  pthread_mutex_lock(&pg->ln_mu);
  for (struct dlock__pg_jw **p = &pg->jw; *p; p = &(*p)->next)
    if (*p == handle) {
      *p = (*p)->next;
      free(handle);
      break;
    }
  pthread_mutex_unlock(&pg->ln_mu);
}

void dlock__pg_watch_remove(dlock__pg *pg, const char *name) {
  if (pg->advisory) return;
  pthread_mutex_lock(&pg->ln_mu);
  long i = watched(pg, name, strlen(name));
  if (i >= 0) memcpy(pg->hw_names[i], pg->hw_names[--pg->hw_n], sizeof pg->hw_names[0]);
  pthread_mutex_unlock(&pg->ln_mu);
}

int dlock__pg_obs_open(dlock__pg *pg, void (*wake)(void *arg, unsigned what), void *arg, dlock__pg_obs **out) {
  dlock__pg_obs *o = calloc(1, sizeof *o);
  if (!o) return dlock__error(DLOCK_ENOMEM, "out of memory");
  o->pg = pg;
  o->wake = wake;
  o->arg = arg;
  *out = o;
  return 0;
}

int dlock__pg_obs_add(dlock__pg_obs *o, const char *name, int prefix) {
  dlock__pg *pg = o->pg;
  if (pg->advisory) return 1; /* its acquires leave no row and send nothing */
  char *copy = strdup(name);
  if (!copy) return dlock__error(DLOCK_ENOMEM, "out of memory");
  pthread_mutex_lock(&pg->ln_mu); /* the thread reads the names */
  if (o->n == o->cap) {
    size_t cap = o->cap ? o->cap * 2 : 4;
    char **names = realloc(o->names, cap * sizeof *names);
    if (names) o->names = names;
    unsigned char *pre = names ? realloc(o->prefix, cap) : NULL;
    if (!pre) {
      pthread_mutex_unlock(&pg->ln_mu);
      free(copy);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    o->prefix = pre;
    o->cap = cap;
  }
  o->names[o->n] = copy;
  o->prefix[o->n++] = (unsigned char)(prefix != 0);
  if (o->n == 1) {
    /* The first name: the LISTEN connection up before the caller's first
     * reading, so that no change after it goes unheard (the connect, and
     * the probe, 2 s, that tells a pooler); then the observer joins the
     * thread's list, told the state it found. */
    watch_listen(pg, dlock_mono_now() + pg->opts.connect_timeout_ms + 3000);
    o->up = pg->ln_state == 1;
    o->next = pg->obs;
    pg->obs = o;
    pthread_cond_broadcast(&pg->ln_cv);
  }
  int up = o->up;
  pthread_mutex_unlock(&pg->ln_mu);
  return up ? 0 : 1;
}

void dlock__pg_obs_close(dlock__pg_obs *o) {
  if (!o) return;
  dlock__pg *pg = o->pg;
  pthread_mutex_lock(&pg->ln_mu);
  for (dlock__pg_obs **p = &pg->obs; *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  pthread_mutex_unlock(&pg->ln_mu);
  for (size_t i = 0; i < o->n; i++) free(o->names[i]);
  free(o->names);
  free(o->prefix);
  free(o);
}

void dlock__pg_watch_stop(dlock__pg *pg) {
  pthread_mutex_lock(&pg->ln_mu);
  int started = pg->hw_started;
  atomic_store(&pg->hw_stop, 1);
  pthread_cond_broadcast(&pg->ln_cv);
  pthread_mutex_unlock(&pg->ln_mu);
  if (started) pthread_join(pg->hw_thread, NULL);
  free(pg->hw_names);
  pg->hw_names = NULL;
  while (pg->jw) { /* a scheduler not freed before its client */
    struct dlock__pg_jw *next = pg->jw->next;
    free(pg->jw);
    pg->jw = next;
  }
}

/* ---- Acquire ---- */

static const char *kind_word(const dlock__pg_hold *h) { return dlock__pg_kind_of(h)->word; }

/* The error of a family acquire that found the name held as another kind
 * ("mutex", "kind <kind>") or with another limit ("limit <n>"). */
static int family_refused(dlock__pg *pg, const dlock__pg_hold *h, const char *err) {
  if (!strncmp(err, "limit ", 6))
    return dlock__error(DLOCK_ELIMIT,
                        "semaphore '%s' on %s has %s permits (stored by its holders), but this caller asks for %d: "
                        "all callers must give the same number; the stored limit goes with the last permit",
                        h->name, pg->display, err + 6, h->permits);
  const char *other = !strcmp(err, "mutex")            ? "mutex"
                      : !strcmp(err, "kind semaphore") ? "semaphore"
                                                       : "read-write lock";
  return dlock__error(DLOCK_EWRONGTYPE,
                      "'%s' on %s is held as a %s, not as a %s: a name is one kind of lock at a time; use that "
                      "kind's calls, or another name",
                      h->name, pg->display, other, kind_word(h));
}

/* The live key waiter rows of this client name now: its LISTEN
 * connection's (0 while it is not up). */
static int64_t live_key(dlock__pg *pg) {
  pthread_mutex_lock(&pg->ln_mu);
  int64_t k = pg->ln_state == 1 && pg->ln_keyed ? pg->ln_key : 0;
  pthread_mutex_unlock(&pg->ln_mu);
  return k;
}

/* Have the LISTEN connection up (and its live key held) before a wait
 * queues, so that the waiter row names the key from the start: a waiter
 * killed early is then seen dead at once too. Bounded by 'deadline' and
 * 'cancel'; when another thread is starting it, or a failure is recent,
 * the wait goes on without (the key comes with a later heartbeat). */
static void listen_ensure(dlock__pg *pg, dlock_mono_ms deadline, const atomic_int *cancel) {
  pthread_mutex_lock(&pg->ln_mu);
  if (pg->ln_state != 1 && !pg->ln_starting) listen_start(pg, deadline, cancel);
  pthread_mutex_unlock(&pg->ln_mu);
}

/* One acquire statement, the kind's. 1 acquired (h->fence, h->valid_until
 * set), 0 busy ('*seen' says why), <0 an error. */
static int acquire_once(dlock__pg *pg, dlock__pg_hold *h, const char *owner_info, int64_t heartbeat_ms,
                        dlock__pg_seen *seen) {
  const dlock__pg_kind *k = dlock__pg_kind_of(h);
  char lease[24], hb[24], permits[16], live[24];
  NUM(lease, h->lease_ms);
  NUM(hb, heartbeat_ms);
  NUM(permits, h->permits);
  NUM(live, heartbeat_ms > 0 ? live_key(pg) : 0);
  dlock__pg_try t = {lease, owner_info ? owner_info : "", hb, live, permits};
  const char *vals[9];
  int n = k->acquire_args(h, &t, vals);
  dlock_mono_ms sent = dlock_mono_now();
  PGresult *r = NULL;
  int maybe_ran = 0;
  int rc = dlock__pg_run(pg, pg->sql[k->sql_acquire], n, vals, 0, 1, &r, &h->resent, &maybe_ran);
  if (rc != 0) {
    if (!maybe_ran) return rc;
    /* It may have taken the row: give it back (safe to run twice: marks
     * our token's row released, nothing else). */
    char saved[700];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    char ch[80];
    snprintf(ch, sizeof ch, "%s", pg->channel);
    const char *rv[3] = {h->name, h->token, ch};
    PGresult *rr = NULL;
    int wrc = dlock__pg_run(pg, pg->sql[k->sql_release], 3, rv, 0, 1, &rr, NULL, NULL);
    PQclear(rr);
    if (wrc != 0)
      return dlock__error(DLOCK_EUNKNOWN,
                          "%s; acquire '%s': the statement may have run and taking it back failed too: the lock "
                          "may be held by this attempt until its lease (%lld ms) ends",
                          saved, h->name, (long long)h->lease_ms);
    return dlock__error(rc, "%s; acquire '%s' was taken back, the lock is not held", saved, h->name);
  }
  int got = !PQgetisnull(r, 0, 0);
  if (got) {
    h->fence = (uint64_t)col_i64(r, 0, 0);
    h->valid_until = dlock__valid_until(sent, h->lease_ms);
  } else if (!PQgetisnull(r, 0, k->col_refused)) {
    char err[64];
    snprintf(err, sizeof err, "%s%s", k->refused_prefix, PQgetvalue(r, 0, k->col_refused));
    PQclear(r);
    return family_refused(pg, h, err);
  }
  if (seen) {
    seen->holder_ms = PQgetisnull(r, 0, 1) ? -1 : col_i64(r, 0, 1);
    seen->held = k->col_held >= 0 ? col_i64(r, 0, k->col_held) : -1;
    seen->ahead = col_i64(r, 0, k->col_ahead);
    seen->queued = col_i64(r, 0, k->col_queued) > 0;
  }
  PQclear(r);
  return got;
}

/* Advisory mode: a hold is a transaction-level advisory lock
 * (pg_try_advisory_xact_lock) inside a transaction kept open on the hold's
 * connection, and every statement of the hold (the try, each check, the
 * release) runs inside that one transaction. A transaction is the unit
 * every pooler pins to one server session (PgBouncer in transaction mode
 * keeps its server for the client until the transaction ends, and closes
 * that server when the client goes away inside it), so the lock cannot be
 * taken in one server session and checked or freed in another, nor be left
 * in a server session the pooler hands to another client: it ends with the
 * transaction, whoever ends it. */
#define ADV_HELD                                                                                           \
  "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND " \
  "objsubid = 1 AND classid::bigint = (((%lld)::bigint >> 32) & 4294967295) AND "                          \
  "objid::bigint = ((%lld)::bigint & 4294967295))"

static int hconn_exec(dlock__pg *pg, dlock__pg_hconn *hc, const char *sql, int n, const char *const *vals,
                      PGresult **r) {
  int sent = 0;
  return dlock__pg_exec_on(pg, hc->conn, sql, n, vals, dlock_mono_now() + pg->opts.command_timeout_ms, r, &sent);
}

static void hconn_free(dlock__pg_hconn *hc) {
  if (!hc) return;
  if (hc->conn) PQfinish(hc->conn); /* inside a transaction: it ends, and its lock with it */
  free(hc);
}

/* Back to the pool when 'reusable' (no transaction open: nothing held),
 * else closed. */
static void hconn_put(dlock__pg *pg, dlock__pg_hconn *hc, int reusable) {
  if (!hc) return;
  if (reusable && PQstatus(hc->conn) == CONNECTION_OK && PQtransactionStatus(hc->conn) == PQTRANS_IDLE) {
    pthread_mutex_lock(&pg->mu);
    if (pg->nhidle < pg->opts.max_connections) {
      pg->hidle[pg->nhidle++] = hc;
      hc = NULL;
    }
    pthread_mutex_unlock(&pg->mu);
  }
  hconn_free(hc);
}

static int hconn_open(dlock__pg *pg, dlock__pg_hconn **out) {
  *out = NULL;
  dlock__pg_hconn *hc = calloc(1, sizeof *hc);
  if (!hc) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__pg_open(pg, &hc->conn);
  if (rc != 0) {
    hconn_free(hc);
    return rc;
  }
  *out = hc;
  return 0;
}

/* A hold connection: an idle one of the pool (still up), else a new one. */
static int hconn_get(dlock__pg *pg, dlock__pg_hconn **out, int *reused) {
  *reused = 0;
  pthread_mutex_lock(&pg->mu);
  while (pg->nhidle > 0) {
    dlock__pg_hconn *hc = pg->hidle[--pg->nhidle];
    if (!dlock__pg_idle_closed(hc->conn)) {
      pthread_mutex_unlock(&pg->mu);
      *out = hc;
      *reused = 1;
      return 0;
    }
    hconn_free(hc);
  }
  pthread_mutex_unlock(&pg->mu);
  return hconn_open(pg, out);
}

/* One try, one round trip: BEGIN and the transaction-level lock in one
 * simple query. 0 with '*got' (then the transaction stays open: the hold;
 * else it was rolled back), or an error (the caller closes the
 * connection, which ends whatever the transaction took). */
static int advisory_try(dlock__pg *pg, dlock__pg_hconn *hc, int64_t key, int *got) {
  *got = 0;
  if (PQtransactionStatus(hc->conn) != PQTRANS_IDLE)
    return dlock__error(DLOCK_EIO, "PostgreSQL %s: a hold connection was not idle before an acquire", pg->display);
  /* Read committed: no snapshot kept between statements (a role's
   * default of repeatable read would hold back vacuum for the whole hold);
   * no idle-in-transaction timeout of the server's ends the hold. */
  char sql[240];
  snprintf(sql, sizeof sql,
           "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL idle_in_transaction_session_timeout = 0; "
           "SELECT pg_try_advisory_xact_lock((%lld)::bigint)",
           (long long)key);
  PGresult *r = NULL;
  int rc = hconn_exec(pg, hc, sql, -1, NULL, &r);
  if (rc != 0) return rc;
  int ok = PQntuples(r) == 1 && col_bool(r, 0, 0);
  PQclear(r);
  if (PQtransactionStatus(hc->conn) != PQTRANS_INTRANS)
    return dlock__error(DLOCK_EPROTO,
                        "PostgreSQL %s: the acquire's transaction did not stay open (a pooler in "
                        "statement mode?); advisory mode needs transactions",
                        pg->display);
  if (ok) {
    *got = 1;
    return 0;
  }
  r = NULL;
  rc = hconn_exec(pg, hc, "ROLLBACK", -1, NULL, &r);
  PQclear(r);
  return rc;
}

static int acquire_advisory(dlock__pg *pg, dlock__pg_hold *h, int64_t wait_ms, const atomic_int *cancel) {
  dlock__pg_hconn *hc = NULL;
  int reused = 0;
  int rc = hconn_get(pg, &hc, &reused);
  if (rc != 0) return rc;
  int64_t key = dlock__pg_advisory_key(h->name);
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  for (;;) {
    int got = 0;
    rc = advisory_try(pg, hc, key, &got);
    if (rc == DLOCK_EIO && reused) {
      /* A pooled connection whose session ended while idle (a restart,
       * pg_terminate_backend, an idle timeout) and was not seen closed
       * before use: whatever the try did died with that session; once
       * more on a new connection. */
      hconn_put(pg, hc, 0);
      hc = NULL;
      reused = 0;
      rc = hconn_open(pg, &hc);
      if (rc != 0) return rc;
      continue;
    }
    if (rc != 0) {
      /* A session lock lives and dies with its connection: nothing held. */
      hconn_put(pg, hc, 0);
      return rc;
    }
    if (got) {
      h->session = hc;
      h->fence = 0;
      h->valid_until = INT64_MAX;
      return 0;
    }
    dlock_mono_ms now = dlock_mono_now();
    if (now >= deadline) break;
    if (cancel && atomic_load(cancel)) {
      hconn_put(pg, hc, 1);
      return dlock__error(DLOCK_ECANCELED, "acquire '%s' on %s was canceled", h->name, pg->display);
    }
    dlock_mono_ms until = now + pg->opts.poll_ms < deadline ? now + pg->opts.poll_ms : deadline;
    uint64_t gen;
    pthread_mutex_lock(&pg->ln_mu);
    gen = pg->ln_gen;
    pthread_mutex_unlock(&pg->ln_mu);
    listen_wait(pg, h->name, "", gen, until, deadline, cancel);
  }
  hconn_put(pg, hc, 1);
  return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another session on %s (advisory mode)", h->name, pg->display);
}

int dlock__pg_acquire(dlock__pg *pg, const char *name, int64_t lease_ms, const char *owner_info, int64_t wait_ms,
                      const atomic_int *cancel, dlock__pg_hold *h) {
  return dlock__pg_acquire_as(pg, name, NULL, lease_ms, owner_info, wait_ms, cancel, h);
}

int dlock__pg_acquire_as(dlock__pg *pg, const char *name, const char *token, int64_t lease_ms, const char *owner_info,
                         int64_t wait_ms, const atomic_int *cancel, dlock__pg_hold *h) {
  return dlock__pg_acquire_kind(pg, name, token, "", 0, NULL, lease_ms, owner_info, wait_ms, cancel, h);
}

int dlock__pg_acquire_kind(dlock__pg *pg, const char *name, const char *token, const char *side, int permits,
                           const char *shadow, int64_t lease_ms, const char *owner_info, int64_t wait_ms,
                           const atomic_int *cancel, dlock__pg_hold *h) {
  memset(h, 0, sizeof *h);
  int rc = check_name(pg, "lock name", name);
  if (rc != 0) return rc;
  snprintf(h->name, sizeof h->name, "%s", name);
  if (token && strlen(token) == DLOCK__TOKEN_HEX)
    memcpy(h->token, token, DLOCK__TOKEN_HEX + 1);
  else if ((rc = dlock__random_hex(h->token, DLOCK__TOKEN_HEX / 2)) != 0)
    return rc;
  h->side[0] = side && (side[0] == 'p' || side[0] == 'r' || side[0] == 'w') ? side[0] : '\0';
  h->permits = permits;
  snprintf(h->shadow, sizeof h->shadow, "%s", shadow ? shadow : "");
  if (pg->advisory && h->side[0])
    return dlock__error(DLOCK_EINVAL,
                        "a %s is not offered in advisory mode (%s): drop ?mode=advisory from the "
                        "URL to use the lease tables",
                        kind_word(h), pg->display);
  if (pg->advisory) return acquire_advisory(pg, h, wait_ms, cancel);
  rc = dlock__check_duration("lease", lease_ms, 0);
  if (rc != 0) return rc;
  h->lease_ms = lease_ms;

  const dlock__pg_kind *k = dlock__pg_kind_of(h);
  dlock__pg_seen seen = {-1, -1, 0, 0};
  rc = acquire_once(pg, h, owner_info, 0, &seen);
  if (rc == 1) return 0;
  if (rc < 0) return rc;
  int64_t holder_ms = seen.holder_ms;
  long long ahead = seen.ahead > 0 ? (long long)seen.ahead : 0;
  if (wait_ms == 0 && k->busy_free && (rc = k->busy_free(pg, h, &seen)) != 0) return rc;
  if (wait_ms == 0 && holder_ms < 0 && ahead == 0)
    return dlock__error(DLOCK_EBUSY,
                        "%s '%s' on %s is being granted as another kind of lock (a semaphore or "
                        "read-write lock) at this moment: a name is one kind of lock at a time; try again",
                        kind_word(h), name, pg->display);
  if (wait_ms == 0 && holder_ms < 0)
    return dlock__error(DLOCK_EBUSY,
                        "%s '%s' on %s is free but %lld other process%s waiting for it; a try does not go ahead "
                        "of them (first come, first served)",
                        kind_word(h), name, pg->display, ahead, ahead == 1 ? " is" : "es are");
  if (wait_ms == 0) return k->busy_held(pg, h, &seen);

  /* Wait: queue by arrival, wake on NOTIFY, re-check at least every poll_ms
   * and when the holder's lease runs out. No transaction stays open. */
  dlock_mono_ms deadline = wait_ms < 0 ? INT64_MAX : dlock_mono_now() + wait_ms;
  int64_t hb = 3 * (int64_t)pg->opts.poll_ms + 2000;
  listen_ensure(pg, deadline, cancel);
  char hbs[24], lks[24];
  NUM(hbs, hb);
  NUM(lks, live_key(pg));
  const char *wv[5] = {h->name, h->token, hbs, h->side, lks};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_WAITER_ADD], 5, wv, 0, 1, &r, NULL, NULL);
  PQclear(r);
  if (rc != 0) return rc;
  int result;
  for (;;) {
    uint64_t gen;
    pthread_mutex_lock(&pg->ln_mu);
    gen = pg->ln_gen;
    pthread_mutex_unlock(&pg->ln_mu);
    rc = acquire_once(pg, h, owner_info, hb, &seen);
    if (rc == 1) {
      result = 0;
      break;
    }
    if (rc < 0) {
      result = rc;
      break;
    }
    holder_ms = seen.holder_ms;
    if (!seen.queued) {
      /* Our row is gone (its heartbeat had lapsed and a prune deleted it):
       * queue again, at the back. */
      NUM(lks, live_key(pg));
      r = NULL;
      rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_WAITER_ADD], 5, wv, 0, 1, &r, NULL, NULL);
      PQclear(r);
      if (rc != 0) {
        result = rc;
        break;
      }
    }
    dlock_mono_ms now = dlock_mono_now();
    if (cancel && atomic_load(cancel)) {
      result = dlock__error(DLOCK_ECANCELED, "waiting for lock '%s' on %s was canceled", name, pg->display);
      break;
    }
    if (now >= deadline) {
      ahead = seen.ahead > 0 ? (long long)seen.ahead : 0;
      if (ahead > 0)
        result =
            dlock__error(DLOCK_EBUSY,
                         "%s '%s' on %s stayed held by others for %lld ms (%lld waiter%s still "
                         "ahead of this caller)",
                         kind_word(h), name, pg->display, (long long)wait_ms, ahead, ahead == 1 ? " was" : "s were");
      else
        result = dlock__error(DLOCK_EBUSY, "%s '%s' on %s stayed held by others for %lld ms", kind_word(h), name,
                              pg->display, (long long)wait_ms);
      break;
    }
    dlock_mono_ms until = now + pg->opts.poll_ms;
    if (holder_ms >= 0 && now + holder_ms + 5 < until) until = now + holder_ms + 5;
    if (until > deadline) until = deadline;
    listen_wait(pg, name, h->token, gen, until, deadline, cancel);
  }
  /* Leave the queue (after success too: the acquire does not delete it). */
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  const char *dv[2] = {h->name, h->token};
  r = NULL;
  int drc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_WAITER_DEL], 2, dv, 0, 1, &r, NULL, NULL);
  PQclear(r);
  (void)drc; /* a row left behind expires after its heartbeat */
  if (result != 0)
    dlock__error(result, "%s", saved);
  else
    dlock__error_clear();
  return result;
}

/* ---- Pruning ---- */

int dlock__pg_prune(dlock__pg *pg, int64_t older_than_ms, int limit, int64_t *pruned) {
  if (pruned) *pruned = 0;
  if (pg->advisory)
    return dlock__error(DLOCK_EINVAL,
                        "nothing to prune on %s in advisory mode: its locks are held by sessions "
                        "and leave no rows",
                        pg->display);
  char age[24], lim[16];
  NUM(age, older_than_ms);
  NUM(lim, limit);
  const char *vals[2] = {age, lim};
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_PRUNE], 2, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  int64_t n = 0;
  for (int i = 0; i < 4; i++) n += col_i64(r, 0, i) > 0 ? col_i64(r, 0, i) : 0;
  PQclear(r);
  if (pruned) *pruned = n;
  pthread_mutex_lock(&pg->ln_mu);
  pg->prune_warning[0] = '\0'; /* a prune worked: the release's failed one is past */
  pthread_mutex_unlock(&pg->ln_mu);
  return 0;
}

/* After a release, now and then (a client's first release, then at most
 * once a minute): prune rows that ended more than an hour ago, 100 per
 * table, so that the tables do not grow with every name ever locked and
 * every waiter that died. Its failure is not the release's. */
#define PRUNE_EVERY_MS 60000
#define PRUNE_AGE_MS 3600000
#define PRUNE_LIMIT 100

static void prune_now_and_then(dlock__pg *pg) {
  long long now = (long long)dlock_mono_now(), last = atomic_load(&pg->pruned_at);
  if (last != 0 && now - last < PRUNE_EVERY_MS) return;
  if (!atomic_compare_exchange_strong(&pg->pruned_at, &last, now)) return; /* another thread does it */
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int rc = dlock__pg_prune(pg, PRUNE_AGE_MS, PRUNE_LIMIT, NULL);
  /* Not the release's failure, but not silent either: a warning
   * (dlock_client_topology_warning(), the doctor) until a prune succeeds. */
  if (rc != 0) {
    pthread_mutex_lock(&pg->ln_mu);
    snprintf(pg->prune_warning, sizeof pg->prune_warning,
             "the release's prune of old rows failed, the tables grow until it works: %s", dlock_last_error());
    for (char *nl = pg->prune_warning; (nl = strchr(nl, '\n')) != NULL;) *nl = ' '; /* one line of a report */
    pthread_mutex_unlock(&pg->ln_mu);
  }
  if (saved[0])
    dlock__error(0, "%s", saved);
  else
    dlock__error_clear();
}

/* ---- Release ---- */

int dlock__pg_release(dlock__pg *pg, dlock__pg_hold *h) {
  if (pg->advisory) {
    dlock__pg_hconn *hc = h->session;
    h->session = NULL;
    if (!hc) return dlock__error(DLOCK_ENOTHELD, "lock '%s' is not held", h->name);
    /* One round trip: whether the hold's transaction still has the lock,
     * the notification (sent at commit, when the lock is free), and the
     * commit that frees it. */
    long long key = (long long)dlock__pg_advisory_key(h->name);
    char *ch = PQescapeLiteral(hc->conn, pg->channel, strlen(pg->channel));
    size_t nlen = strlen(h->name);
    char *nm = malloc(nlen + 2);
    if (nm) {
      memcpy(nm, h->name, nlen);
      memcpy(nm + nlen, " ", 2);
    }
    char *name = nm ? PQescapeLiteral(hc->conn, nm, nlen + 1) : NULL;
    free(nm);
    char *sql = NULL;
    if (ch && name) {
      size_t len = strlen(ch) + strlen(name) + 512;
      sql = malloc(len);
      if (sql) snprintf(sql, len, "SELECT " ADV_HELD ", pg_notify(%s, %s); COMMIT", key, key, ch, name);
    }
    PQfreemem(ch);
    PQfreemem(name);
    if (!sql) {
      hconn_put(pg, hc, 0); /* ends the transaction and the lock */
      return dlock__error(DLOCK_ENOMEM, "out of memory releasing '%s' (the connection was closed, which frees it)",
                          h->name);
    }
    PGresult *r = NULL;
    int rc = PQtransactionStatus(hc->conn) == PQTRANS_INTRANS ? hconn_exec(pg, hc, sql, -1, NULL, &r) : DLOCK_EIO;
    free(sql);
    int held = rc == 0 && PQntuples(r) == 1 && col_i64(r, 0, 0) > 0;
    PQclear(r);
    int committed = rc == 0 && PQtransactionStatus(hc->conn) == PQTRANS_IDLE;
    /* Committed: the session holds nothing now, and the connection serves
     * the next acquire. Else it is closed: the transaction ends with it,
     * and the lock whatever happened. */
    hconn_put(pg, hc, committed);
    if (!held)
      return dlock__error(DLOCK_ENOTHELD,
                          "lock '%s' on %s was not held by its transaction any more (the connection was lost or "
                          "the transaction ended: advisory locks end with it)",
                          h->name, pg->display);
    if (h->lost != DLOCK_LOST_NONE)
      return dlock__error(DLOCK_ENOTHELD,
                          "lock '%s' on %s: the hold had been lost before this release (%s); its transaction still "
                          "held it and ended",
                          h->name, pg->display, dlock_lost_reason_str((dlock_lost_reason)h->lost));
    return 0;
  }
  char ch[80];
  snprintf(ch, sizeof ch, "%s", pg->channel);
  const char *vals[3] = {h->name, h->token, ch};
  PGresult *r = NULL;
  int resent = 0, maybe_ran = 0;
  int rc = dlock__pg_run(pg, pg->sql[dlock__pg_kind_of(h)->sql_release], 3, vals, 0, 1, &r, &resent, &maybe_ran);
  dlock_mono_ms now = dlock_mono_now();
  h->resent = resent;
  if (rc != 0) {
    if (maybe_ran) {
      /* A copy: dlock__error() writes the buffer dlock_last_error() reads. */
      char saved[700];
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      return dlock__error(DLOCK_EUNKNOWN,
                          "%s; release of '%s': it may have run, whether it did is unknown; the "
                          "lock is free at the latest when its lease ends",
                          saved, h->name);
    }
    return rc; /* exact: the statement did not run, or the server refused it (rolled back) */
  }
  int now_released = col_i64(r, 0, 0) > 0;
  int ours = col_bool(r, 0, 1);
  int released = col_bool(r, 0, 2);
  PQclear(r);
  prune_now_and_then(pg);
  if (h->lost != DLOCK_LOST_NONE) {
    /* The core saw the hold lost (e.g. at its local deadline): the row may
     * still have carried our token and been deleted, but the hold was not
     * ours to trust any more; the caller learns it. */
    return dlock__error(DLOCK_ENOTHELD, "lock '%s' on %s: the hold had been lost before this release (%s)%s", h->name,
                        pg->display, dlock_lost_reason_str((dlock_lost_reason)h->lost),
                        now_released || (ours && released) ? "; the row still held our token and was deleted"
                                                           : "; nothing was deleted");
  }
  if (now_released) return 0;
  if (ours && released) return 0; /* our first run (before a lost reply) released it */
  if (resent) {
    /* The first run may have released it and another owner taken it since;
     * that is certain while our lease could not have run out yet. */
    if (now < h->valid_until) return 0;
    return dlock__error(DLOCK_EUNKNOWN,
                        "release of '%s' on %s: the reply was lost and the lock is no longer ours; whether our "
                        "release or the end of the lease freed it cannot be told",
                        h->name, pg->display);
  }
  return dlock__error(DLOCK_ENOTHELD, "lock '%s' on %s is not held by this owner (%s)", h->name, pg->display,
                      ours ? "its lease ran out" : "the lease ran out and another owner has it, or it was freed");
}

/* ---- Renewal ---- */

/* Append 's' to a PostgreSQL array literal element list. */
static int arr_add(char **buf, size_t *len, size_t *cap, const char *s) {
  size_t need = *len + 2 * strlen(s) + 4;
  if (need > *cap) {
    size_t nc = need * 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return -1;
    *buf = nb;
    *cap = nc;
  }
  char *o = *buf + *len;
  if (*len > 1) *o++ = ',';
  *o++ = '"';
  for (const char *p = s; *p; p++) {
    if (*p == '"' || *p == '\\') *o++ = '\\';
    *o++ = *p;
  }
  *o++ = '"';
  *len = (size_t)(o - *buf);
  return 0;
}

static int renew_advisory(dlock__pg *pg, dlock__pg_renewal *r, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dlock__pg_hconn *hc = r[i].h->session;
    r[i].status = 0;
    r[i].lost = DLOCK_LOST_NONE;
    PGresult *res = NULL;
    long long key = (long long)dlock__pg_advisory_key(r[i].h->name);
    char sql[400];
    snprintf(sql, sizeof sql, "SELECT " ADV_HELD, key, key);
    /* Inside the hold's transaction (a pooler keeps it on one server
     * session): a transaction that ended or failed is a lost hold. */
    int rc =
        hc && PQtransactionStatus(hc->conn) == PQTRANS_INTRANS ? hconn_exec(pg, hc, sql, -1, NULL, &res) : DLOCK_EIO;
    if (rc != 0 || PQntuples(res) != 1 || col_i64(res, 0, 0) < 1 || PQtransactionStatus(hc->conn) != PQTRANS_INTRANS) {
      r[i].status = DLOCK_ELOST;
      r[i].lost = DLOCK_LOST_EXPIRED;
    }
    PQclear(res);
  }
  return 0;
}

int dlock__pg_renew(dlock__pg *pg, dlock__pg_renewal *r, size_t n, dlock_mono_ms limit) {
  if (n == 0) return 0;
  if (pg->advisory) return renew_advisory(pg, r, n);
  char *a[3] = {NULL, NULL, NULL};
  size_t len[3] = {0, 0, 0}, cap[3] = {0, 0, 0};
  int rc = 0;
  for (int k = 0; k < 3 && rc == 0; k++) {
    a[k] = malloc(64);
    if (!a[k])
      rc = DLOCK_ENOMEM;
    else {
      cap[k] = 64;
      a[k][0] = '{';
      len[k] = 1;
    }
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    char lease[24];
    NUM(lease, r[i].lease_ms);
    if (arr_add(&a[0], &len[0], &cap[0], r[i].h->name) || arr_add(&a[1], &len[1], &cap[1], r[i].h->token) ||
        arr_add(&a[2], &len[2], &cap[2], lease))
      rc = DLOCK_ENOMEM;
  }
  for (int k = 0; k < 3 && rc == 0; k++) {
    a[k][len[k]++] = '}';
    a[k][len[k]] = '\0';
  }
  PGresult *res = NULL;
  dlock_mono_ms sent = dlock_mono_now();
  if (rc == 0) {
    const char *vals[3] = {a[0], a[1], a[2]};
    /* Compare-and-extend never revives a lost hold: safe to run twice. */
    rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_RENEW], 3, vals, limit, 1, &res, NULL, NULL);
  } else {
    dlock__error(rc, "out of memory");
  }
  for (int k = 0; k < 3; k++) free(a[k]);
  if (rc != 0) {
    for (size_t i = 0; i < n; i++) {
      r[i].status = rc;
      r[i].lost = DLOCK_LOST_NONE;
    }
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    r[i].status = DLOCK_ELOST;
    r[i].lost = DLOCK_LOST_EXPIRED;
  }
  for (int row = 0; row < PQntuples(res); row++) {
    int64_t i = col_i64(res, row, 0) - 1;
    if (i < 0 || (size_t)i >= n) continue;
    if (col_bool(res, row, 1)) {
      r[i].status = 0;
      r[i].lost = DLOCK_LOST_NONE;
      r[i].h->lease_ms = r[i].lease_ms;
      r[i].h->valid_until = dlock__valid_until(sent, r[i].lease_ms);
    } else if (col_bool(res, row, 3)) {
      r[i].lost = DLOCK_LOST_DELETED;
    } else if (col_bool(res, row, 2)) {
      r[i].lost = DLOCK_LOST_TAKEN;
    }
  }
  PQclear(res);
  return 0;
}

int dlock__pg_remaining(dlock__pg *pg, const dlock__pg_hold *h, int64_t *remaining_ms, dlock_lost_reason *lost) {
  *remaining_ms = 0;
  *lost = DLOCK_LOST_NONE;
  if (pg->advisory) {
    dlock__pg_renewal one = {.h = (dlock__pg_hold *)h};
    renew_advisory(pg, &one, 1);
    *lost = one.lost;
    *remaining_ms = -1;
    if (one.status != 0)
      return dlock__error(DLOCK_ELOST, "lock '%s' on %s: its session ended (advisory mode)", h->name, pg->display);
    return 0;
  }
  const char *vals[2] = {h->name, h->token};
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_REMAINING], 2, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  int ours = PQntuples(r) > 0 && col_bool(r, 0, 0);
  int other = PQntuples(r) > 0 && col_bool(r, 0, 2);
  if (ours) *remaining_ms = col_i64(r, 0, 1);
  PQclear(r);
  if (ours) return 0;
  *lost = other ? DLOCK_LOST_TAKEN : DLOCK_LOST_EXPIRED;
  return dlock__error(DLOCK_ELOST, "lock '%s' on %s is no longer held by this owner (%s)", h->name, pg->display,
                      other ? "another owner has it" : "its lease ran out");
}

/* ---- Admin ---- */

int dlock__pg_holders(dlock__pg *pg, const char *name, void (*fn)(const dlock_holder *, void *), void *arg) {
  if (pg->advisory) return 0; /* no family rows: the CLI shows what info knows */
  const char *vals[1] = {name};
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_FAM_HOLDERS], 1, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  int n = PQntuples(r);
  for (int i = 0; i < n; i++) {
    dlock_holder h = {(uint64_t)col_i64(r, i, 0), col_i64(r, i, 1), col_i64(r, i, 2), PQgetvalue(r, i, 3)};
    fn(&h, arg);
  }
  PQclear(r);
  return n;
}

int dlock__pg_info(dlock__pg *pg, const char *name, dlock_lock_info *out) {
  int rc = check_name(pg, "lock name", name);
  if (rc != 0) return rc;
  rc = dlock__struct_check(out, DLOCK__LOCK_INFO_V1, sizeof *out, "dlock_lock_info");
  if (rc != 0) return rc;
  size_t sz = out->struct_size;
  memset(out, 0, sz);
  out->struct_size = sz;
  if (pg->advisory) {
    char k[24];
    NUM(k, dlock__pg_advisory_key(name));
    const char *vals[1] = {k};
    PGresult *r = NULL;
    rc = dlock__pg_run(pg,
                       "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                       "database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND "
                       "objsubid = 1 AND classid::bigint = (($1::bigint >> 32) & 4294967295) AND "
                       "objid::bigint = ($1::bigint & 4294967295)",
                       1, vals, 0, 1, &r, NULL, NULL);
    if (rc != 0) return rc;
    out->held = col_i64(r, 0, 0) > 0;
    out->ttl_ms = out->held ? -1 : 0;
    PQclear(r);
    return 0;
  }
  const char *vals[1] = {name};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_INFO], 1, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  out->held = col_bool(r, 0, 0);
  out->ttl_ms = out->held ? col_i64(r, 0, 1) : 0;
  out->fence = PQgetisnull(r, 0, 2) ? 0 : (uint64_t)col_i64(r, 0, 2);
  out->since_unix_ms = out->held ? col_i64(r, 0, 3) : 0;
  out->waiters = col_i64(r, 0, 5);
  if (out->held && !PQgetisnull(r, 0, 4)) snprintf(out->owner_info, sizeof out->owner_info, "%s", PQgetvalue(r, 0, 4));
  PQclear(r);
  if (out->held) return 0; /* (the core hands over a whole dlock_lock_info) */
  /* Not a held mutex: a semaphore or a read-write lock? */
  r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_FAM_INFO], 1, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  if (PQntuples(r) > 0) {
    int semaphore = !strcmp(PQgetvalue(r, 0, 0), "semaphore");
    int64_t holds = col_i64(r, 0, 2);
    out->held = holds > 0;
    if (semaphore) {
      out->permits = col_i64(r, 0, 1);
      out->permits_used = holds;
    } else if (holds > 0 || col_i64(r, 0, 9) > 0) {
      out->rwlock = 1;
      out->readers = col_i64(r, 0, 3);
      out->writer = col_bool(r, 0, 4);
      out->waiting_writers = col_i64(r, 0, 10);
    }
    if (out->held) {
      out->fence = (uint64_t)col_i64(r, 0, 5);
      out->since_unix_ms = col_i64(r, 0, 6);
      snprintf(out->owner_info, sizeof out->owner_info, "%s", PQgetvalue(r, 0, 7));
      out->ttl_ms = col_i64(r, 0, 8);
    }
    out->waiters = col_i64(r, 0, 9);
  }
  PQclear(r);
  return 0;
}

char *dlock__pg_like(const char *pattern) {
  const char *pat = pattern ? pattern : "*";
  char *like = malloc(2 * strlen(pat) + 1);
  if (!like) return NULL;
  char *o = like;
  for (const char *p = pat; *p; p++) {
    if (*p == '*')
      *o++ = '%';
    else if (*p == '?')
      *o++ = '_';
    else {
      if (*p == '%' || *p == '_' || *p == '\\') *o++ = '\\';
      *o++ = *p;
    }
  }
  *o = '\0';
  return like;
}

int dlock__pg_list(dlock__pg *pg, const char *pattern, void (*fn)(const char *name, void *arg), void *arg) {
  if (pg->advisory)
    return dlock__error(DLOCK_EINVAL,
                        "%s: advisory locks have only 64-bit keys in pg_locks, not names; list needs lease mode",
                        pg->display);
  char *like = dlock__pg_like(pattern);
  if (!like) return dlock__error(DLOCK_ENOMEM, "out of memory");
  const char *vals[1] = {like};
  PGresult *r = NULL;
  int rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_LIST], 1, vals, 0, 1, &r, NULL, NULL);
  free(like);
  if (rc != 0) return rc;
  for (int i = 0; i < PQntuples(r); i++) fn(PQgetvalue(r, i, 0), arg);
  PQclear(r);
  return 0;
}

int dlock__pg_force_release(dlock__pg *pg, const char *name, int *was_held) {
  return dlock__pg_force_release_fence(pg, name, 0, was_held);
}

int dlock__pg_force_release_fence(dlock__pg *pg, const char *name, uint64_t fence, int *was_held) {
  if (was_held) *was_held = 0;
  int rc = check_name(pg, "lock name", name);
  if (rc != 0) return rc;
  if (pg->advisory)
    return dlock__error(DLOCK_EINVAL,
                        "%s: an advisory lock belongs to its session; end that session with "
                        "pg_terminate_backend() to free it",
                        pg->display);
  char ch[80];
  snprintf(ch, sizeof ch, "%s", pg->channel);
  char f[24];
  snprintf(f, sizeof f, "%" PRIu64, fence);
  const char *vals[3] = {name, ch, f};
  PGresult *r = NULL;
  int maybe_ran = 0;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_FORCE], 3, vals, 0, 0, &r, NULL, &maybe_ran);
  if (rc != 0) {
    if (maybe_ran) {
      char saved[700]; /* a copy: dlock__error() writes the buffer dlock_last_error() reads */
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      return dlock__error(DLOCK_EUNKNOWN,
                          "%s; force release of '%s' may have run; look (dlock status) before "
                          "trying again",
                          saved, name);
    }
    return rc;
  }
  if (was_held) *was_held = col_i64(r, 0, 0) > 0;
  PQclear(r);
  return 0;
}

int dlock__pg_guard_check(dlock__pg *pg, const char *resource, uint64_t fence) {
  return dlock__pg_guard_check_highest(pg, resource, fence, NULL);
}

int dlock__pg_guard_check_highest(dlock__pg *pg, const char *resource, uint64_t fence, uint64_t *highest) {
  if (highest) *highest = 0;
  int rc = check_name(pg, "resource name", resource);
  if (rc != 0) return rc;
  if (fence == 0 || fence > (uint64_t)INT64_MAX)
    return dlock__error(DLOCK_ERANGE, "fencing token %" PRIu64 " is out of range 1..2^63-1", fence);
  char f[24];
  snprintf(f, sizeof f, "%" PRIu64, fence);
  const char *vals[2] = {resource, f};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_GUARD], 2, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  int ok = col_i64(r, 0, 0) > 0;
  int64_t seen = col_i64(r, 0, 1);
  PQclear(r);
  /* 'seen' is the row as it was before this statement (0 for a new one). */
  if (highest) *highest = ok ? fence : (seen > 0 ? (uint64_t)seen : 0);
  if (!ok)
    return dlock__error(DLOCK_ESTALE, "guard '%s' on %s: token %" PRIu64 " is older than %lld, already admitted",
                        resource, pg->display, fence, (long long)seen);
  return 0;
}

/* ---- Scheduler ---- */

int dlock__pg_sched_claim(dlock__pg *pg, const char *job, int64_t tick_unix_ms, const char *run_token, const char *node,
                          int64_t lock_ms, int64_t tolerance_ms, int *outcome, uint64_t *fence, int64_t *start_unix_ms,
                          int64_t *skew_ms) {
  int rc = check_name(pg, "job name", job);
  if (rc != 0) return rc;
  char tick[24], lk[24], tol[24];
  NUM(tick, tick_unix_ms);
  NUM(lk, lock_ms);
  NUM(tol, tolerance_ms);
  const char *vals[6] = {job, tick, run_token, node ? node : "", lk, tol};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_CLAIM], 6, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  *outcome = (int)col_i64(r, 0, 0);
  *fence = PQgetisnull(r, 0, 1) ? 0 : (uint64_t)col_i64(r, 0, 1);
  *start_unix_ms = col_i64(r, 0, 2);
  *skew_ms = col_i64(r, 0, 3);
  PQclear(r);
  return 0;
}

int dlock__pg_sched_finish(dlock__pg *pg, const char *job, const char *run_token, const dlock_run_record *rec,
                           int history_len) {
  int rc = check_name(pg, "job name", job);
  if (rc != 0) return rc;
  char f[24], s[24], st[24], d[24], keep[24];
  snprintf(f, sizeof f, "%" PRIu64, rec->fence);
  NUM(s, rec->scheduled_unix_ms);
  NUM(st, rec->start_unix_ms);
  NUM(d, rec->duration_ms);
  NUM(keep, history_len > 0 ? history_len : 100);
  const char *vals[9] = {job, run_token, rec->node, f, s, st, d, rec->outcome, keep};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_FINISH], 9, vals, 0, 1, &r, NULL, NULL);
  PQclear(r);
  return rc;
}

int dlock__pg_sched_history(dlock__pg *pg, const char *job, dlock_run_record *out, int max) {
  int rc = check_name(pg, "job name", job);
  if (rc != 0) return rc;
  if (max <= 0) return 0;
  rc = dlock__struct_check(out, DLOCK__RUN_RECORD_V1, sizeof *out, "dlock_run_record");
  if (rc != 0) return rc;
  size_t step = out->struct_size;
  char m[24];
  NUM(m, max);
  const char *vals[2] = {job, m};
  PGresult *r = NULL;
  rc = dlock__pg_run(pg, pg->sql[DLOCK__PG_SQL_HISTORY], 2, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  int n = PQntuples(r);
  for (int i = 0; i < n && i < max; i++) {
    dlock_run_record *rec = (dlock_run_record *)((char *)out + (size_t)i * step);
    memset(rec, 0, step);
    rec->struct_size = step;
    snprintf(rec->node, sizeof rec->node, "%s", PQgetvalue(r, i, 0));
    rec->fence = (uint64_t)col_i64(r, i, 1);
    rec->scheduled_unix_ms = col_i64(r, i, 2);
    rec->start_unix_ms = col_i64(r, i, 3);
    rec->duration_ms = col_i64(r, i, 4);
    snprintf(rec->outcome, sizeof rec->outcome, "%s", PQgetvalue(r, i, 5));
  }
  PQclear(r);
  return n < max ? n : max;
}

/* ---- Doctor ---- */

static void add_line(char *report, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_line(char *report, size_t len, const char *fmt, ...) {
  size_t used = strlen(report);
  if (used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(report + used, len - used, fmt, ap);
  va_end(ap);
  used = strlen(report);
  if (used + 1 < len) {
    report[used] = '\n';
    report[used + 1] = '\0';
  }
}

int dlock__pg_doctor(dlock__pg *pg, char *report, size_t len) {
  if (report && len) report[0] = '\0';
  char qs[DLOCK__PG_SCHEMA_MAX + 1];
  snprintf(qs, sizeof qs, "%s", pg->schema);
  const char *vals[1] = {qs};
  PGresult *r = NULL;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t sent_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  int rc = dlock__pg_run(
      pg,
      "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'),\n"
      "  floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, current_setting('server_version'),\n"
      "  has_database_privilege(current_database(), 'CREATE'),\n"
      "  EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),\n"
      "  (SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = $1),\n"
      /* A list of rights asks for any of them: each is asked alone. */
      "  (SELECT has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')\n"
      "     AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE') FROM pg_class c\n"
      "     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'locks'),\n"
      "  current_user, current_setting('synchronous_commit'),\n"
      "  (SELECT count(*) FROM pg_stat_replication),\n"
      "  (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('async', 'potential')),\n"
      "  (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL),\n"
      "  (SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'quorum'),\n"
      "  coalesce(substring(current_setting('synchronous_standby_names') FROM '(?i)^\\s*any\\s+([0-9]+)')::int, 0),\n"
      /* prune() raises fence_seq (nextval: USAGE, setval: UPDATE). */
      "  (SELECT has_sequence_privilege(c.oid, 'USAGE') AND has_sequence_privilege(c.oid, 'UPDATE') FROM pg_class c\n"
      "     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'fence_seq')",
      1, vals, 0, 1, &r, NULL, NULL);
  if (rc != 0) return rc;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* Our clock at the middle of the round trip: the drift, not the latency. */
  int64_t ours = (sent_ms + (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000) / 2;
  int problems = 0;
  int standby = col_bool(r, 0, 0);
  int ro = strcmp(PQgetvalue(r, 0, 1), "on") == 0;
  int64_t theirs = col_i64(r, 0, 2);
  add_line(report, len, "ok: %s answers, PostgreSQL %s, user %s", pg->display, PQgetvalue(r, 0, 3),
           PQgetvalue(r, 0, 8));
  if (standby) {
    problems++;
    add_line(report, len, "problem: the server is a read-only standby (in recovery): locks need the primary");
  } else if (ro) {
    problems++;
    add_line(report, len,
             "problem: default_transaction_read_only is on for this user or database: dlock's writes fail; "
             "turn it off for dlock's user (ALTER ROLE ... SET default_transaction_read_only = off)");
  }
  int has_schema = col_bool(r, 0, 5);
  if (!has_schema) {
    if (!col_bool(r, 0, 4)) {
      problems++;
      add_line(report, len,
               "problem: schema \"%s\" does not exist and this user cannot create it: run `dlock init --url ...` "
               "as a user with CREATE on the database",
               pg->schema);
    } else {
      add_line(report, len, "ok: schema \"%s\" does not exist yet; it is created on first use", pg->schema);
    }
  } else if (!col_bool(r, 0, 6)) {
    problems++;
    add_line(report, len, "problem: this user has no USAGE on schema \"%s\": GRANT USAGE ON SCHEMA %s TO ...",
             pg->schema, pg->schema);
  } else if (PQgetisnull(r, 0, 7)) {
    add_line(report, len, "ok: schema \"%s\" exists; its tables are created on first use", pg->schema);
  } else if (!col_bool(r, 0, 7)) {
    problems++;
    add_line(report, len,
             "problem: this user lacks SELECT, INSERT, UPDATE or DELETE on %s.locks: GRANT them (and USAGE on the "
             "schema's sequences)",
             pg->schema);
  } else if (!PQgetisnull(r, 0, 15) && !col_bool(r, 0, 15)) {
    problems++;
    add_line(report, len,
             "problem: this user lacks USAGE or UPDATE on %s.fence_seq: acquires work, but pruning (`dlock "
             "prune`, and the release's own) fails and the tables grow; GRANT USAGE, UPDATE ON ALL SEQUENCES IN "
             "SCHEMA %s TO ...",
             pg->schema, pg->schema);
  } else {
    add_line(report, len, "ok: schema \"%s\" and its tables are usable", pg->schema);
  }
  const char *sync = PQgetvalue(r, 0, 9);
  if (strcmp(sync, "off") == 0 || strcmp(sync, "local") == 0) {
    add_line(report, len,
             "warning: synchronous_commit is %s for this user or database: a crash can lose commits; dlock's "
             "acquire, release, guard and tick claim turn it on for their own transactions (fences never go back), "
             "but set it to on (ALTER ROLE/DATABASE ... SET synchronous_commit = on) if other writers rely on it",
             sync);
  } else {
    add_line(report, len, "ok: synchronous_commit is %s", sync);
  }
  /* Issue 22 item 8: a failover to an asynchronous standby loses the last
   * commits: holds, releases and guard rows roll back (fences still rise,
   * floored at the database clock). */
  long standbys = (long)col_i64(r, 0, 10), async = (long)col_i64(r, 0, 11), hidden = (long)col_i64(r, 0, 12);
  long quorum = (long)col_i64(r, 0, 13), need = (long)col_i64(r, 0, 14);
  if (async > 0) {
    add_line(report, len,
             "warning: replication: %ld asynchronous standby%s (pg_stat_replication sync_state async or "
             "potential) stream%s from this server: after a failover to one the last commits are lost (a lock "
             "taken or released just before may be free or held again, guard rows roll back, fences still rise "
             "as they are floored at the database clock unless the new primary's clock is behind); make them "
             "synchronous (synchronous_standby_names, synchronous_commit on) or fail over only to a synchronous "
             "one",
             async, async == 1 ? "" : "s", async == 1 ? "s" : "");
  } else if (quorum > need) {
    /* ANY k (...): a commit waits for k of the quorum standbys, not all. */
    add_line(report, len,
             "warning: replication: %ld standbys form a quorum (synchronous_standby_names ANY %ld): a commit waits "
             "for %ld of them only, so after a failover to one that had not received it the last commits are lost "
             "(a lock taken or released just before may be free or held again, guard rows roll back); promote "
             "only the standby that received the most WAL (pg_last_wal_receive_lsn()), or set ANY %ld so that "
             "every standby has every commit",
             quorum, need, need, quorum);
  } else if (hidden > 0) {
    add_line(report, len,
             "warning: replication: %ld standby%s stream%s from this server but this user cannot see whether they "
             "are synchronous (a failover to an asynchronous one loses the last commits, locks and guard rows roll "
             "back); grant this user pg_monitor (or pg_read_all_stats), or ask the DBA",
             hidden, hidden == 1 ? "" : "s", hidden == 1 ? "s" : "");
  } else if (standbys > 0) {
    add_line(report, len, "ok: replication: %ld standby%s, all synchronous", standbys, standbys == 1 ? "" : "s");
  } else {
    add_line(report, len, "ok: replication: no standby streams from this server");
  }
  int64_t skew = theirs - ours;
  if (skew > 2000 || skew < -2000) {
    add_line(report, len,
             "warning: the database clock differs from this host's by %lld ms; leases use the database clock "
             "alone (a step of it ends or stretches every lease at once), but scheduled ticks are planned on "
             "this host's: run NTP on both",
             (long long)skew);
  } else {
    add_line(report, len, "ok: the database clock is within %lld ms of this host's",
             (long long)(skew < 0 ? -skew : skew));
  }
  pthread_mutex_lock(&pg->ln_mu);
  if (pg->warnings[0]) {
    problems++;
    add_line(report, len, "problem: %s", pg->warnings);
  }
  if (pg->prune_warning[0]) add_line(report, len, "warning: %s", pg->prune_warning);
  pthread_mutex_unlock(&pg->ln_mu);
  PQclear(r);
  return problems;
}
