/*
 * watchdog.c - one thread per client that keeps held locks alive and notices
 * when they are lost.
 *
 * Watchdog-mode locks are renewed every third of their lease, all that are
 * due in one batch of the backend's renew() (e.g. one pipeline of
 * compare-and-extend scripts; an expired or re-taken lock is never
 * revived; a session backend reads the session's validity). Fixed-lease
 * locks are only watched, except that a hold taken on a hand-off's shorter
 * claim lease (dlock__grant.claim_ms) is renewed once to its lease. The
 * loss rule (docs/design.md): a hold is lost when renewal finds it gone or
 * taken, and at the latest when its valid_until passes without a successful
 * renewal. The thread sleeps until the earliest renewal or deadline, and a
 * renewal pipeline gives up at the earliest deadline it watches, so that no
 * deadline waits for a server that does not answer.
 *
 * Two min-heaps find both at O(log n) a hold, whatever the number of holds:
 * one keyed by the next renewal (wd_next_renew), one by the deadline
 * (valid_until). A key may be early (a deadline moved on without telling
 * us): the hold is looked at then, and put back with its key read again. It
 * is never late: whatever lowers a deadline or a renewal time outside this
 * thread calls dlock__watchdog_rearm(), which updates both keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BATCH_MAX 512
#define RETRY_MAX_MS 1000
#define NOWHERE SIZE_MAX

enum { RENEWALS, DEADLINES }; /* the two heaps */

typedef struct wd_heap {
  dlock_mutex **at; /* a min-heap on at[i]->wd_key[which] */
  size_t n, cap;
} wd_heap;

struct dlock__watchdog {
  dlock_client *client;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  /* Every registered hold is in heaps[DEADLINES], and in heaps[RENEWALS]
   * unless its renewal is in flight; 'registered' counts them (the heaps'
   * capacity, grown by dlock__watchdog_add, never by a renewal). */
  wd_heap heaps[2];
  size_t registered;
  /* When the thread will look at the heaps next: 0 while it is awake (it
   * looks again before sleeping). Adding a lock due later need not wake it. */
  dlock_mono_ms wake_at;
  /* dlock__watchdog_poke() calls: one during a renewal's I/O asked for a
   * look at the holds that the renewal's answer must not put off. */
  unsigned pokes;
};

/* ---- The heaps (under wd->mu) ---- */

static void heap_place(wd_heap *h, int which, size_t i, dlock_mutex *m) {
  h->at[i] = m;
  m->wd_slot[which] = i;
}

static void heap_sift(wd_heap *h, int which, size_t i) {
  dlock_mutex *m = h->at[i];
  dlock_mono_ms key = m->wd_key[which];
  while (i > 0 && h->at[(i - 1) / 2]->wd_key[which] > key) { /* up */
    heap_place(h, which, i, h->at[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  for (size_t child; (child = 2 * i + 1) < h->n; i = child) { /* down */
    if (child + 1 < h->n && h->at[child + 1]->wd_key[which] < h->at[child]->wd_key[which]) child++;
    if (h->at[child]->wd_key[which] >= key) break;
    heap_place(h, which, i, h->at[child]);
  }
  heap_place(h, which, i, m);
}

/* Room is there: the capacity is the number of registered holds. */
static void heap_push(dlock__watchdog *wd, int which, dlock_mutex *m, dlock_mono_ms key) {
  wd_heap *h = &wd->heaps[which];
  m->wd_key[which] = key;
  h->at[h->n] = m;
  m->wd_slot[which] = h->n++;
  heap_sift(h, which, h->n - 1);
}

static void heap_remove(dlock__watchdog *wd, int which, dlock_mutex *m) {
  wd_heap *h = &wd->heaps[which];
  size_t i = m->wd_slot[which];
  if (i == NOWHERE) return;
  m->wd_slot[which] = NOWHERE;
  dlock_mutex *last = h->at[--h->n];
  if (i == h->n) return;
  heap_place(h, which, i, last);
  heap_sift(h, which, i);
}

/* A new key, up or down; only the key while 'm' is not in the heap. */
static void heap_rekey(dlock__watchdog *wd, int which, dlock_mutex *m, dlock_mono_ms key) {
  m->wd_key[which] = key;
  if (m->wd_slot[which] != NOWHERE) heap_sift(&wd->heaps[which], which, m->wd_slot[which]);
}

static dlock_mutex *heap_top(const dlock__watchdog *wd, int which) {
  return wd->heaps[which].n ? wd->heaps[which].at[0] : NULL;
}

/* The deadline key of 'm' from its hold (under m->mu): none while it is not
 * held or has no deadline (being released). */
static dlock_mono_ms deadline_key(const dlock_mutex *m) {
  return m->hold_count > 0 && m->valid_until ? m->valid_until : INT64_MAX;
}

/* The renewal key (under m->mu): wd_next_renew for a hold that is renewed (a
 * watchdog lease, or a hand-off's claim lease renewed once to its lease);
 * renewed up to a twelfth of the lease in force early, so that locks taken
 * at different moments share pipelines instead of waking us one by one. */
static dlock_mono_ms renewal_key(dlock_mutex *m) {
  int64_t in_force = m->claim_ms ? m->claim_ms : m->lease_ms;
  m->wd_early = in_force / 12;
  return m->hold_count > 0 && (m->watchdog_mode || m->claim_ms) ? m->wd_next_renew : INT64_MAX;
}

static void unlink_locked(dlock__watchdog *wd, dlock_mutex *m) {
  if (!m->wd_registered) return;
  heap_remove(wd, RENEWALS, m);
  heap_remove(wd, DEADLINES, m);
  m->wd_registered = 0;
  wd->registered--;
}

typedef struct pending_loss {
  dlock_mutex *m;
  dlock_lost_reason reason;
} pending_loss;

/* Mark lost under both locks (order: watchdog, then mutex) and queue the
 * callback, which runs later without locks held. The callback reports the
 * reason stored on the handle: dlock_mutex_lost() may have marked the loss
 * first (at the deadline), and all three signals must agree. */
static void lose(dlock__watchdog *wd, dlock_mutex *m, dlock_lost_reason reason, pending_loss *out, size_t *n) {
  pthread_mutex_lock(&m->mu);
  dlock__mutex_mark_lost(m, reason);
  reason = (dlock_lost_reason)atomic_load(&m->lost);
  pthread_mutex_unlock(&m->mu);
  unlink_locked(wd, m);
  m->wd_in_callback = 1;
  out[(*n)++] = (pending_loss){m, reason};
}

typedef struct renewal {
  char token[DLOCK__TOKEN_HEX + 1];
} renewal;

/* Run the queued lost-callbacks, without the watchdog's lock. */
static void run_callbacks(dlock__watchdog *wd, pending_loss *losses, size_t nloss) {
  for (size_t i = 0; i < nloss; i++) {
    dlock_mutex *m = losses[i].m;
    if (m->opts.on_lost) {
      pthread_mutex_unlock(&wd->mu);
      m->opts.on_lost(m, m->name, losses[i].reason, m->opts.on_lost_arg);
      pthread_mutex_lock(&wd->mu);
    }
    m->wd_in_callback = 0;
    pthread_cond_broadcast(&wd->cv);
  }
}

/* Renew the holds of 'batch' through the backend (one batch) that
 * gives up at 'limit' (the earliest deadline watched), then apply the
 * answers. Called and returns with wd->mu held; drops it for the I/O. */
static void renew(dlock__watchdog *wd, dlock__renewal *batch, dlock__lease_op *ops, size_t nbatch, dlock_mono_ms limit,
                  pending_loss *losses, size_t *nloss) {
  unsigned pokes = wd->pokes;
  pthread_mutex_unlock(&wd->mu);
  int64_t began = dlock__mono_ns();
  wd->client->ops->renew(wd->client, batch, nbatch, limit);
  dlock__metrics_renew_batch(wd->client, nbatch, dlock__mono_ns() - began);
  pthread_mutex_lock(&wd->mu);
  /* Poked meanwhile (a forced release heard while the renewal was in
   * flight; the renewal may have run just before it): look again at once. */
  int poked = wd->pokes != pokes;
  dlock_mono_ms now = dlock_mono_now();
  for (size_t i = 0; i < nbatch; i++) {
    dlock__renewal *r = &batch[i];
    dlock_mutex *m = r->m;
    int64_t lease = r->lease_ms;
    m->wd_in_callback = 0;
    int renewed = 0;
    pthread_mutex_lock(&m->mu);
    int64_t left = m->valid_until - now; /* before this renewal moves it */
    dlock_mono_ms safe = dlock__lease_op_end(m, &ops[i], r->status == 0 ? r->valid_until : INT64_MAX);
    if (r->status == 0 && (renewed = dlock__mutex_renewed(m, safe, now))) {
      m->claim_ms = 0;                     /* a hand-off's claim: the full lease is set now */
    } else if (r->status == DLOCK_ELOST) { /* unless the deadline was seen passing first */
      dlock__mutex_mark_lost(m, r->lost);
    } else if (r->sent && m->valid_until && !(wd->client->caps & DLOCK__CAP_SESSION)) {
      /* Not renewed, but it may have run (a lost reply, replicas short): the
       * server may then end the hold 'lease' after it, sooner than our
       * deadline when the caller's extend had set a longer one. A session
       * backend's renewal sets no lease: the session's deadline stands. */
      dlock_mono_ms own = dlock__valid_until(r->sent, lease);
      if (own < m->valid_until) m->valid_until = own;
    }
    dlock_lost_reason lost = dlock__mutex_check_deadline(m, now);
    dlock_mono_ms valid_until = m->valid_until;
    /* A reply after the deadline is a loss; a session backend's renewal
     * reads the session: no lease to be late on. */
    dlock__metrics_renewed(m,
                           renewed     ? 0
                           : r->status ? r->status
                                       : DLOCK_ELOST,
                           left, wd->client->caps & DLOCK__CAP_SESSION ? 0 : lease);
    if (lost == DLOCK_LOST_NONE) {
      if (renewed) {
        m->wd_next_renew = poked ? 0 : r->sent + lease / 3;
        if (valid_until < r->valid_until) {
          /* It counts only on the deadline of a shorter call it overlapped (the
           * caller's extend), which may have run last: renew again before that
           * deadline, not a third of our lease on. */
          int64_t half = (valid_until - now) / 2;
          if (now + half < m->wd_next_renew) m->wd_next_renew = now + (half > 0 ? half : 1);
        }
      } else {
        /* The server is unreachable or refused: try again soon, and more often
         * as the deadline nears (at the deadline the scan marks the loss). */
        int64_t retry = lease / 10 < RETRY_MAX_MS ? lease / 10 : RETRY_MAX_MS;
        if (retry > (valid_until - now) / 2) retry = (valid_until - now) / 2;
        m->wd_next_renew = now + (retry > 0 ? retry : 1);
      }
      heap_rekey(wd, DEADLINES, m, deadline_key(m));
      heap_push(wd, RENEWALS, m, renewal_key(m));
    }
    pthread_mutex_unlock(&m->mu);
    if (lost != DLOCK_LOST_NONE) lose(wd, m, lost, losses, nloss);
  }
  pthread_cond_broadcast(&wd->cv);
}

/* Look at the holds whose deadline key has come: losses into 'losses'
 * (at most BATCH_MAX), the others back with their deadline read again. */
static void scan_deadlines(dlock__watchdog *wd, dlock_mono_ms now, pending_loss *losses, size_t *nloss) {
  for (dlock_mutex *m; *nloss < BATCH_MAX && (m = heap_top(wd, DEADLINES)) && m->wd_key[DEADLINES] <= now;) {
    pthread_mutex_lock(&m->mu);
    dlock_lost_reason lost = dlock__mutex_check_deadline(m, now);
    if (lost == DLOCK_LOST_NONE) heap_rekey(wd, DEADLINES, m, deadline_key(m)); /* later, or none */
    pthread_mutex_unlock(&m->mu);
    if (lost != DLOCK_LOST_NONE) lose(wd, m, lost, losses, nloss);
  }
}

/* Take the renewals that are due off their heap into 'batch' (at most
 * BATCH_MAX); a hold found lost goes to 'losses' instead. */
static size_t take_renewals(dlock__watchdog *wd, dlock_mono_ms now, dlock__renewal *batch, renewal *tokens,
                            pending_loss *losses, size_t *nloss) {
  size_t nbatch = 0;
  for (dlock_mutex *m; nbatch < BATCH_MAX && *nloss < BATCH_MAX && (m = heap_top(wd, RENEWALS)) &&
                       m->wd_key[RENEWALS] <= now + m->wd_early;) {
    pthread_mutex_lock(&m->mu);
    dlock_lost_reason lost = dlock__mutex_check_deadline(m, now);
    dlock_mono_ms key = renewal_key(m); /* read again: the lease in force may have changed */
    /* A capped hold is only watched from now on: lost at its deadline. */
    int capped = m->watchdog_mode && m->opts.max_hold_ms && now >= m->acquired_at + m->opts.max_hold_ms;
    int64_t lease = m->lease_ms;
    pthread_mutex_unlock(&m->mu);
    if (lost != DLOCK_LOST_NONE) {
      lose(wd, m, lost, losses, nloss);
    } else if (capped || key > now + m->wd_early) {
      heap_rekey(wd, RENEWALS, m, capped ? INT64_MAX : key);
    } else {
      heap_remove(wd, RENEWALS, m); /* back with its next key once renewed */
      dlock__renewal *rn = &batch[nbatch];
      memset(rn, 0, sizeof *rn);
      rn->m = m;
      rn->token = tokens[nbatch].token;
      rn->lease_ms = lease;
      nbatch++;
    }
  }
  return nbatch;
}

static void *watchdog_main(void *arg) {
  dlock__watchdog *wd = arg;
  dlock__renewal *batch = malloc(BATCH_MAX * sizeof *batch);
  renewal *tokens = malloc(BATCH_MAX * sizeof *tokens);
  dlock__lease_op *ops = malloc(BATCH_MAX * sizeof *ops);
  pending_loss *losses = malloc(BATCH_MAX * sizeof *losses);
  pthread_mutex_lock(&wd->mu);
  while (!wd->stop) {
    if (!batch || !tokens || !ops || !losses) {
      /* No memory for the loop: dlock_mutex_lost() still answers from the
       * deadline; try again a little later. */
      struct timespec ts;
      dlock__deadline_timespec(dlock_mono_now() + 100, &ts);
      pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
      continue;
    }
    /* Losses first, then the renewals that are due, each from its heap:
     * O(log n) a hold looked at, none looked at before its time. */
    dlock_mono_ms now = dlock_mono_now();
    size_t nloss = 0;
    scan_deadlines(wd, now, losses, &nloss);
    size_t nbatch = take_renewals(wd, now, batch, tokens, losses, &nloss);
    if (nloss) {
      /* Report losses before any renewal I/O, which could delay them; the
       * renewals taken wait for the next pass, which follows at once. */
      for (size_t i = 0; i < nbatch; i++) {
        pthread_mutex_lock(&batch[i].m->mu);
        heap_push(wd, RENEWALS, batch[i].m, renewal_key(batch[i].m));
        pthread_mutex_unlock(&batch[i].m->mu);
      }
      run_callbacks(wd, losses, nloss);
      continue;
    }
    if (nbatch) {
      for (size_t i = 0; i < nbatch; i++) {
        dlock_mutex *m = batch[i].m;
        pthread_mutex_lock(&m->mu);
        memcpy(tokens[i].token, m->token, sizeof tokens[i].token);
        m->renew_tried = 1;
        /* A session backend's renewal sets no lease: it bounds nothing. */
        dlock_mono_ms until =
            m->client->caps & DLOCK__CAP_SESSION ? INT64_MAX : dlock__valid_until(dlock_mono_now(), batch[i].lease_ms);
        /* It may run before its answer comes: its deadline (when earlier,
         * after a longer extend) bounds the pipeline too. */
        if (dlock__lease_op_begin(m, &ops[i], until)) heap_rekey(wd, DEADLINES, m, deadline_key(m));
        pthread_mutex_unlock(&m->mu);
        m->wd_in_callback = 1; /* in flight: dlock__watchdog_remove() waits */
      }
      /* The pipeline gives up at the earliest deadline of any hold. */
      dlock_mutex *first = heap_top(wd, DEADLINES);
      renew(wd, batch, ops, nbatch, first ? first->wd_key[DEADLINES] : INT64_MAX, losses, &nloss);
      run_callbacks(wd, losses, nloss);
      continue; /* more may be due */
    }
    dlock_mutex *to_renew = heap_top(wd, RENEWALS), *deadline = heap_top(wd, DEADLINES);
    dlock_mono_ms next = to_renew ? to_renew->wd_key[RENEWALS] : INT64_MAX;
    if (deadline && deadline->wd_key[DEADLINES] < next) next = deadline->wd_key[DEADLINES];
    wd->wake_at = next;
    if (next == INT64_MAX) {
      pthread_cond_wait(&wd->cv, &wd->mu);
    } else {
      struct timespec ts;
      dlock__deadline_timespec(next, &ts);
      pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    }
    wd->wake_at = 0;
  }
  pthread_mutex_unlock(&wd->mu);
  free(batch);
  free(tokens);
  free(ops);
  free(losses);
  return NULL;
}

static int start(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  int rc = 0;
  if (!c->watchdog) {
    dlock__watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) {
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else {
      wd->client = c;
      pthread_mutex_init(&wd->mu, NULL);
      dlock__cond_init(&wd->cv);
      if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        pthread_mutex_destroy(&wd->mu);
        pthread_cond_destroy(&wd->cv);
        free(wd);
        rc = dlock__error(DLOCK_ESYS, "cannot start the watchdog thread");
      } else {
        c->watchdog = wd;
      }
    }
  }
  pthread_mutex_unlock(&c->lazy_mu);
  return rc;
}

/* Room in both heaps for one more hold (under wd->mu). */
static int reserve(dlock__watchdog *wd) {
  for (int which = 0; which < 2; which++) {
    wd_heap *h = &wd->heaps[which];
    if (wd->registered < h->cap) continue;
    size_t cap = h->cap ? 2 * h->cap : 64;
    dlock_mutex **at = realloc(h->at, cap * sizeof *at);
    if (!at) return dlock__error(DLOCK_ENOMEM, "out of memory: the watchdog cannot watch one more hold");
    h->at = at;
    h->cap = cap;
  }
  return 0;
}

int dlock__watchdog_add(dlock_client *c, dlock_mutex *m) {
  int rc = start(c);
  if (rc) return rc;
  dlock__watchdog *wd = c->watchdog;
  pthread_mutex_lock(&wd->mu);
  rc = reserve(wd);
  if (rc) {
    pthread_mutex_unlock(&wd->mu);
    return rc;
  }
  pthread_mutex_lock(&m->mu);
  /* A hold on a hand-off's claim lease: its first renewal (to the full
   * lease) is due at a third of the claim, as any renewal is. */
  int64_t in_force = m->claim_ms ? m->claim_ms : m->lease_ms;
  m->wd_next_renew = m->acquired_at + in_force / 3;
  m->wd_slot[RENEWALS] = m->wd_slot[DEADLINES] = NOWHERE;
  heap_push(wd, RENEWALS, m, renewal_key(m));
  heap_push(wd, DEADLINES, m, deadline_key(m));
  pthread_mutex_unlock(&m->mu);
  m->wd_registered = 1;
  wd->registered++;
  /* Waking the thread costs a context switch per acquire: only when it
   * would otherwise sleep past this lock's first renewal or deadline. */
  dlock_mono_ms due = m->wd_key[RENEWALS] < m->wd_key[DEADLINES] ? m->wd_key[RENEWALS] : m->wd_key[DEADLINES];
  if (due < wd->wake_at) pthread_cond_broadcast(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  return 0;
}

void dlock__watchdog_remove(dlock_client *c, dlock_mutex *m) {
  pthread_mutex_lock(&c->lazy_mu);
  dlock__watchdog *wd = c->watchdog;
  pthread_mutex_unlock(&c->lazy_mu);
  if (!wd) return;
  pthread_mutex_lock(&wd->mu);
  /* From a lost-callback on the watchdog thread itself, waiting would deadlock. */
  if (!pthread_equal(pthread_self(), wd->thread))
    while (m->wd_in_callback) pthread_cond_wait(&wd->cv, &wd->mu);
  unlink_locked(wd, m);
  pthread_mutex_unlock(&wd->mu);
}

void dlock__watchdog_rearm(dlock_client *c, dlock_mutex *m, dlock_mono_ms start, int64_t lease_ms) {
  pthread_mutex_lock(&c->lazy_mu);
  dlock__watchdog *wd = c->watchdog;
  pthread_mutex_unlock(&c->lazy_mu);
  if (!wd) return;
  pthread_mutex_lock(&wd->mu);
  if (m->wd_registered) {
    if (start + lease_ms / 3 < m->wd_next_renew) m->wd_next_renew = start + lease_ms / 3;
    pthread_mutex_lock(&m->mu);
    heap_rekey(wd, RENEWALS, m, renewal_key(m)); /* only the key while its renewal is in flight */
    heap_rekey(wd, DEADLINES, m, deadline_key(m));
    pthread_mutex_unlock(&m->mu);
  }
  pthread_cond_broadcast(&wd->cv); /* fixed leases: the new deadline counts from now on */
  pthread_mutex_unlock(&wd->mu);
}

void dlock__watchdog_stop(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu); /* a backend's session thread may poke it */
  dlock__watchdog *wd = c->watchdog;
  c->watchdog = NULL;
  pthread_mutex_unlock(&c->lazy_mu);
  if (!wd) return;
  pthread_mutex_lock(&wd->mu);
  wd->stop = 1;
  pthread_cond_broadcast(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  pthread_join(wd->thread, NULL);
  free(wd->heaps[RENEWALS].at);
  free(wd->heaps[DEADLINES].at);
  pthread_mutex_destroy(&wd->mu);
  pthread_cond_destroy(&wd->cv);
  free(wd);
}

void dlock__watchdog_poke(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu); /* held throughout: dlock__watchdog_stop() waits */
  dlock__watchdog *wd = c->watchdog;
  if (!wd) {
    pthread_mutex_unlock(&c->lazy_mu);
    return;
  }
  pthread_mutex_lock(&wd->mu);
  /* A session event (lost, suspended, back): every hold is looked at again
   * at once, through renew(), which reads the session's state. */
  wd_heap *h = &wd->heaps[RENEWALS];
  for (size_t i = 0; i < h->n; i++) h->at[i]->wd_next_renew = h->at[i]->wd_key[RENEWALS] = 0; /* still a heap */
  wd->pokes++;
  pthread_cond_broadcast(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  pthread_mutex_unlock(&c->lazy_mu);
}
