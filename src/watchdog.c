/*
 * watchdog.c - one thread per client that keeps held locks alive and notices
 * when they are lost.
 *
 * Watchdog-mode locks are renewed every third of their lease, all that are
 * due in one pipeline of extend scripts (compare-and-pexpire: an expired or
 * re-taken lock is never revived). Fixed-lease locks are only watched: when
 * their local deadline passes they are marked lost. A lock is marked lost
 * when renewal finds it gone or taken, or cannot reach Redis in time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define BATCH_MAX 512
#define RETRY_MAX_MS 1000

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
};

static void unlink_locked(dlock__watchdog *wd, dlock_mutex *m) {
  if (!m->wd_registered) return;
  if (m->wd_prev) m->wd_prev->wd_next = m->wd_next; else wd->head = m->wd_next;
  if (m->wd_next) m->wd_next->wd_prev = m->wd_prev;
  m->wd_prev = m->wd_next = NULL;
  m->wd_registered = 0;
}

typedef struct pending_loss {
  dlock_mutex *m;
  dlock_lost_reason reason;
} pending_loss;

/* Mark lost under both locks (order: watchdog, then mutex) and queue the
 * callback, which runs later without locks held. */
static void lose(dlock__watchdog *wd, dlock_mutex *m, dlock_lost_reason reason, pending_loss *out, size_t *n) {
  pthread_mutex_lock(&m->mu);
  dlock__mutex_mark_lost(m, reason);
  pthread_mutex_unlock(&m->mu);
  unlink_locked(wd, m);
  m->wd_in_callback = 1;
  out[(*n)++] = (pending_loss){m, reason};
}

typedef struct renewal {
  dlock_mutex *m;
  char token[DLOCK__TOKEN_HEX + 1];
  char lease[24];
} renewal;

static void *watchdog_main(void *arg) {
  dlock__watchdog *wd = arg;
  renewal *batch = malloc(BATCH_MAX * sizeof *batch);
  dlock__script_call *calls = malloc(BATCH_MAX * sizeof *calls);
  dlock__reply **replies = malloc(BATCH_MAX * sizeof *replies);
  pending_loss *losses = malloc(BATCH_MAX * sizeof *losses);
  pthread_mutex_lock(&wd->mu);
  while (!wd->stop) {
    if (!batch || !calls || !replies || !losses) {
      /* No memory for the loop: fall back to noticing deadlines only. */
      struct timespec ts;
      dlock__deadline_timespec(dlock_mono_now() + 100, &ts);
      pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
      continue;
    }
    dlock_mono_ms now = dlock_mono_now(), next = INT64_MAX;
    size_t nbatch = 0, nloss = 0;
    /* Each renewal may turn into a loss after the reply, so renewals and
     * losses share the BATCH_MAX slots of 'losses'. */
    for (dlock_mutex *m = wd->head, *following; m && nbatch + nloss < BATCH_MAX; m = following) {
      following = m->wd_next;
      pthread_mutex_lock(&m->mu);
      int watchdog_mode = m->watchdog_mode;
      dlock_mono_ms valid_until = m->valid_until, acquired_at = m->acquired_at;
      int64_t lease = m->lease_ms;
      pthread_mutex_unlock(&m->mu);
      int capped = watchdog_mode && m->opts.max_hold_ms && now >= acquired_at + m->opts.max_hold_ms;
      if (!watchdog_mode || capped) {
        if (now >= valid_until) {
          lose(wd, m, capped ? DLOCK_LOST_MAX_HOLD : DLOCK_LOST_DEADLINE, losses, &nloss);
        } else if (valid_until < next) {
          next = valid_until;
        }
        continue;
      }
      /* Renew up to a twelfth of the lease early, so that locks taken at
       * different moments share pipelines instead of waking us one by one. */
      if (now + lease / 12 < m->wd_next_renew) {
        if (m->wd_next_renew < next) next = m->wd_next_renew;
        continue;
      }
      renewal *rn = &batch[nbatch++];
      rn->m = m;
      pthread_mutex_lock(&m->mu);
      memcpy(rn->token, m->token, sizeof rn->token);
      pthread_mutex_unlock(&m->mu);
      snprintf(rn->lease, sizeof rn->lease, "%lld", (long long)lease);
      m->wd_in_callback = 1; /* in flight: dlock__watchdog_remove() waits */
    }

    if (nbatch) {
      pthread_mutex_unlock(&wd->mu);
      for (size_t i = 0; i < nbatch; i++) {
        dlock__script_call *call = &calls[i];
        memset(call, 0, sizeof *call);
        call->script = DLOCK__SCRIPT_EXTEND;
        dlock__script_call_keys(call, &batch[i].m->keys);
        call->args[0] = batch[i].token;
        call->arglens[0] = strlen(batch[i].token);
        call->args[1] = batch[i].lease;
        call->arglens[1] = strlen(batch[i].lease);
        call->nargs = 2;
      }
      dlock_mono_ms sent = dlock_mono_now();
      int rc = dlock__script_run(wd->client, calls, nbatch, replies);
      pthread_mutex_lock(&wd->mu);
      now = dlock_mono_now();
      for (size_t i = 0; i < nbatch; i++) {
        dlock_mutex *m = batch[i].m;
        m->wd_in_callback = 0;
        const dlock__reply *r = rc ? NULL : replies[i];
        pthread_mutex_lock(&m->mu);
        int64_t lease = m->lease_ms;
        dlock_mono_ms valid_until = m->valid_until;
        pthread_mutex_unlock(&m->mu);
        if (r && r->type == DLOCK__REPLY_INTEGER && r->integer == 1) {
          pthread_mutex_lock(&m->mu);
          m->valid_until = dlock__valid_until(sent, lease);
          pthread_mutex_unlock(&m->mu);
          m->wd_next_renew = sent + lease / 3;
        } else if (r && r->type == DLOCK__REPLY_INTEGER) {
          lose(wd, m, dlock__loss_reason(m, r->integer == 0 ? DLOCK_LOST_EXPIRED : DLOCK_LOST_TAKEN), losses,
               &nloss);
        } else if (now >= valid_until) {
          lose(wd, m, DLOCK_LOST_UNREACHABLE, losses, &nloss);
        } else {
          /* Redis is unreachable or refused: try again soon, until the lease is spent. */
          int64_t retry = lease / 10 < RETRY_MAX_MS ? lease / 10 : RETRY_MAX_MS;
          m->wd_next_renew = now + (retry > 0 ? retry : 1);
          if (m->wd_next_renew > valid_until) m->wd_next_renew = valid_until;
        }
        if (!rc) dlock__reply_free(replies[i]);
      }
      pthread_cond_broadcast(&wd->cv);
    }

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
    if (nbatch || nloss) continue; /* more may be due */
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
  free(calls);
  free(replies);
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
  m->wd_next_renew = m->acquired_at + m->lease_ms / 3;
  /* The first moment the watchdog must act on 'm' (see watchdog_main). */
  dlock_mono_ms due = m->watchdog_mode ? m->wd_next_renew - m->lease_ms / 12 : m->valid_until;
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
  pthread_cond_broadcast(&wd->cv); /* fixed leases: the new deadline counts from now on */
  pthread_mutex_unlock(&wd->mu);
}

void dlock__watchdog_stop(dlock_client *c) {
  dlock__watchdog *wd = c->watchdog;
  if (!wd) return;
  pthread_mutex_lock(&wd->mu);
  wd->stop = 1;
  pthread_cond_broadcast(&wd->cv);
  pthread_mutex_unlock(&wd->mu);
  pthread_join(wd->thread, NULL);
  pthread_mutex_destroy(&wd->mu);
  pthread_cond_destroy(&wd->cv);
  free(wd);
  c->watchdog = NULL;
}
