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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BATCH_MAX 512
#define RETRY_MAX_MS 1000
/* A pass stops at a full batch only while every deadline is at least this
 * far off: the floor may be stale (too early) and bounds the pipeline. */
#define STOP_MARGIN_MS 100

struct dlock__watchdog {
  dlock_client *client;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  dlock_mutex *head;
  /* When the thread will look at the list next: 0 while it is awake (it
   * rescans before sleeping). Adding a lock due later need not wake it. */
  dlock_mono_ms wake_at;
  /* No lock in the list has a valid_until before this (exact after a full
   * pass, lowered whenever a valid_until may go down). While it lies ahead,
   * a pass may stop at a full batch without missing a deadline. */
  dlock_mono_ms floor;
  /* dlock__watchdog_poke() calls: one during a renewal's I/O asked for a
   * look at the holds that the renewal's answer must not put off. */
  unsigned pokes;
};

static void unlink_locked(dlock__watchdog *wd, dlock_mutex *m) {
  if (!m->wd_registered) return;
  if (m->wd_prev)
    m->wd_prev->wd_next = m->wd_next;
  else
    wd->head = m->wd_next;
  if (m->wd_next) m->wd_next->wd_prev = m->wd_prev;
  m->wd_prev = m->wd_next = NULL;
  m->wd_registered = 0;
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
    pthread_mutex_unlock(&m->mu);
    if (lost != DLOCK_LOST_NONE) {
      lose(wd, m, lost, losses, nloss);
    } else if (renewed) {
      m->wd_next_renew = poked ? 0 : r->sent + lease / 3;
      if (valid_until < r->valid_until) {
        /* It counts only on the deadline of a shorter call it overlapped (the
         * caller's extend), which may have run last: renew again before that
         * deadline, not a third of our lease on. */
        int64_t half = (valid_until - now) / 2;
        if (now + half < m->wd_next_renew) m->wd_next_renew = now + (half > 0 ? half : 1);
      }
      if (valid_until < wd->floor) wd->floor = valid_until; /* after an extend beyond the lease */
    } else {
      /* The server is unreachable or refused: try again soon, and more often
       * as the deadline nears (at the deadline the scan marks the loss). */
      if (valid_until < wd->floor) wd->floor = valid_until;
      int64_t retry = lease / 10 < RETRY_MAX_MS ? lease / 10 : RETRY_MAX_MS;
      if (retry > (valid_until - now) / 2) retry = (valid_until - now) / 2;
      m->wd_next_renew = now + (retry > 0 ? retry : 1);
    }
  }
  pthread_cond_broadcast(&wd->cv);
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
    /* One pass over every lock: losses first, the renewals that are due,
     * the earliest deadline (the bound of the renewal pipeline) and when to
     * look again. */
    dlock_mono_ms now = dlock_mono_now(), next = INT64_MAX, earliest = INT64_MAX;
    size_t nbatch = 0, nloss = 0;
    /* With thousands of locks, most passes fill a batch early: stop there
     * (the next pass follows at once) unless a deadline may be due among the
     * locks not looked at. */
    int may_stop = wd->floor > now + STOP_MARGIN_MS, stopped = 0;
    for (dlock_mutex *m = wd->head, *following; m; m = following) {
      following = m->wd_next;
      if (nbatch == BATCH_MAX && may_stop) {
        stopped = 1;
        break;
      }
      pthread_mutex_lock(&m->mu);
      dlock_lost_reason lost = dlock__mutex_check_deadline(m, now);
      int held = m->hold_count > 0, watchdog_mode = m->watchdog_mode;
      dlock_mono_ms valid_until = m->valid_until, acquired_at = m->acquired_at;
      int64_t lease = m->lease_ms, claim = m->claim_ms;
      pthread_mutex_unlock(&m->mu);
      if (lost != DLOCK_LOST_NONE) {
        if (nloss < BATCH_MAX)
          lose(wd, m, lost, losses, &nloss);
        else
          earliest = now; /* in the next pass, which must not stop early */
        continue;
      }
      if (!held) continue; /* being released: dlock__watchdog_remove() comes next */
      if (valid_until < earliest) earliest = valid_until;
      if (valid_until < next) next = valid_until;
      int capped = watchdog_mode && m->opts.max_hold_ms && now >= acquired_at + m->opts.max_hold_ms;
      /* Only watched, lost at the deadline; but a hold on a hand-off's claim
       * lease is renewed once to its full lease, even a fixed one. */
      if ((!watchdog_mode && !claim) || capped) continue;
      /* Renew up to a twelfth of the lease in force early, so that locks taken
       * at different moments share pipelines instead of waking us one by one. */
      if (now + (claim ? claim : lease) / 12 < m->wd_next_renew) {
        if (m->wd_next_renew < next) next = m->wd_next_renew;
        continue;
      }
      if (nbatch == BATCH_MAX) continue; /* in the next pass, which follows at once */
      dlock__renewal *rn = &batch[nbatch];
      memset(rn, 0, sizeof *rn);
      rn->m = m;
      rn->token = tokens[nbatch].token;
      rn->lease_ms = lease;
      nbatch++;
    }
    if (stopped) {
      if (wd->floor < earliest) earliest = wd->floor;
    } else {
      wd->floor = earliest;
    }

    if (nloss) {
      /* Report losses before any renewal I/O, which could delay them; the
       * renewals are picked up again by the next pass. */
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
        dlock__lease_op_begin(m, &ops[i], until);
        /* It may run before its answer comes: its deadline (when earlier,
         * after a longer extend) bounds the pipeline and the floor too. */
        if (m->valid_until && m->valid_until < earliest) earliest = m->valid_until;
        if (m->valid_until && m->valid_until < wd->floor) wd->floor = m->valid_until;
        pthread_mutex_unlock(&m->mu);
        m->wd_in_callback = 1; /* in flight: dlock__watchdog_remove() waits */
      }
      renew(wd, batch, ops, nbatch, earliest, losses, &nloss);
      run_callbacks(wd, losses, nloss);
      continue; /* more may be due */
    }
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

int dlock__watchdog_add(dlock_client *c, dlock_mutex *m) {
  int rc = start(c);
  if (rc) return rc;
  dlock__watchdog *wd = c->watchdog;
  pthread_mutex_lock(&wd->mu);
  pthread_mutex_lock(&m->mu);
  /* A hold on a hand-off's claim lease: its first renewal (to the full
   * lease) is due at a third of the claim, as any renewal is. */
  int64_t in_force = m->claim_ms ? m->claim_ms : m->lease_ms;
  m->wd_next_renew = m->acquired_at + in_force / 3;
  /* The first moment the watchdog must act on 'm' (see watchdog_main). */
  dlock_mono_ms due = m->watchdog_mode || m->claim_ms ? m->wd_next_renew - in_force / 12 : m->valid_until;
  if (m->valid_until < wd->floor) wd->floor = m->valid_until;
  pthread_mutex_unlock(&m->mu);
  m->wd_prev = NULL;
  m->wd_next = wd->head;
  if (wd->head) wd->head->wd_prev = m;
  wd->head = m;
  m->wd_registered = 1;
  /* Waking the thread costs a context switch per acquire: only when it
   * would otherwise sleep past this lock's first renewal or deadline. */
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
  if (m->wd_registered && start + lease_ms / 3 < m->wd_next_renew) m->wd_next_renew = start + lease_ms / 3;
  pthread_mutex_lock(&m->mu);
  if (m->wd_registered && m->valid_until < wd->floor) wd->floor = m->valid_until;
  pthread_mutex_unlock(&m->mu);
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
  for (dlock_mutex *m = wd->head; m; m = m->wd_next) m->wd_next_renew = 0;
  wd->floor = 0;
  wd->pokes++;
  pthread_cond_broadcast(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  pthread_mutex_unlock(&c->lazy_mu);
}
