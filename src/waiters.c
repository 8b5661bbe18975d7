/*
 * waiters.c - the client's subscriber: one pub/sub connection and thread
 * that delivers hand-off messages to the waiting handle they name.
 *
 * A release hands the lock to the first live waiter in Redis and publishes
 * "<waiter id> <fence>" on that waiter's client channel for the lock, so one
 * release wakes one waiter. After a reconnect every waiter is woken to look
 * again, since messages may have been missed meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct channel {
  char *name;
  size_t len;
  int refs;
  int sent;      /* SUBSCRIBE written on the current connection */
  int confirmed; /* 1 subscribed, -1 refused by the server */
} channel;

struct dlock__subscriber {
  dlock_client *client;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int wake[2]; /* self-pipe: new subscriptions, stop */
  channel *channels;
  size_t nchannels, capchannels;
  dlock_mutex **waiters;
  size_t nwaiters, capwaiters;
  int connected;
  char last_error[256];
};

static void poke(dlock__subscriber *s) {
  char b = 1;
  ssize_t n = write(s->wake[1], &b, 1);
  (void)n; /* a full pipe already means "wake up" */
}

static void wake_all_waiters(dlock__subscriber *s) {
  for (size_t i = 0; i < s->nwaiters; i++) {
    dlock_mutex *m = s->waiters[i];
    pthread_mutex_lock(&m->mu);
    m->woken = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
  }
}

/* "id fence" on a channel: wake that waiter if it is ours and still waiting. */
static void deliver(dlock__subscriber *s, const char *payload) {
  const char *space = strchr(payload, ' ');
  size_t idlen = space ? (size_t)(space - payload) : strlen(payload);
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->nwaiters; i++) {
    dlock_mutex *m = s->waiters[i];
    if (strlen(m->waiter_id) == idlen && !memcmp(m->waiter_id, payload, idlen)) {
      pthread_mutex_lock(&m->mu);
      m->woken = 1;
      /* Exact, or 0 (no grant seen): the re-check then finds the lock ours. */
      uint64_t f = 0;
      if (!space || dlock__parse_fence(space + 1, strlen(space + 1), &f) != 0) f = 0;
      m->granted_fence = f;
      pthread_cond_broadcast(&m->cv);
      pthread_mutex_unlock(&m->mu);
      break;
    }
  }
  pthread_mutex_unlock(&s->mu);
}

static void handle_reply(dlock__subscriber *s, const dlock__reply *r) {
  if (r->type == DLOCK__REPLY_ERROR) {
    /* e.g. NOPERM for a channel outside the ACL: those waiters fall back to re-checks. */
    pthread_mutex_lock(&s->mu);
    snprintf(s->last_error, sizeof s->last_error, "%s", r->str);
    for (size_t i = 0; i < s->nchannels; i++)
      if (s->channels[i].sent && !s->channels[i].confirmed) s->channels[i].confirmed = -1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  if (r->type != DLOCK__REPLY_ARRAY || r->elements < 3 || r->element[0]->type != DLOCK__REPLY_STRING ||
      r->element[1]->type != DLOCK__REPLY_STRING)
    return;
  const char *kind = r->element[0]->str;
  if (!strcmp(kind, "message") && r->element[2]->type == DLOCK__REPLY_STRING) {
    deliver(s, r->element[2]->str);
  } else if (!strcmp(kind, "subscribe")) {
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->nchannels; i++)
      if (s->channels[i].len == r->element[1]->len && !memcmp(s->channels[i].name, r->element[1]->str, r->element[1]->len))
        s->channels[i].confirmed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
}

/* Queue SUBSCRIBE for new channels and UNSUBSCRIBE for unused ones. */
static int sync_subscriptions(dlock__subscriber *s, dlock__conn *conn) {
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->nchannels && !rc;) {
    channel *ch = &s->channels[i];
    const char *argv[2] = {ch->refs > 0 ? "SUBSCRIBE" : "UNSUBSCRIBE", ch->name};
    size_t lens[2] = {strlen(argv[0]), ch->len};
    dlock__cmd cmd = {2, argv, lens};
    if (ch->refs > 0 && !ch->sent) {
      rc = dlock__conn_append(conn, &cmd);
      ch->sent = 1;
    } else if (ch->refs == 0) {
      if (ch->sent) rc = dlock__conn_append(conn, &cmd);
      free(ch->name);
      s->channels[i] = s->channels[--s->nchannels];
      continue;
    }
    i++;
  }
  pthread_mutex_unlock(&s->mu);
  if (!rc) rc = dlock__conn_flush(conn, dlock_mono_now() + s->client->command_timeout_ms);
  return rc;
}

static void *subscriber_main(void *arg) {
  dlock__subscriber *s = arg;
  dlock_client *c = s->client;
  dlock__node *node = c->topo->route(c->topo, "", 0);
  dlock__conn *conn = NULL;
  int64_t backoff = 50;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    if (!conn) {
      pthread_mutex_unlock(&s->mu);
      int rc = dlock__conn_open(&node->ep, node->ssl_ctx, &conn);
      pthread_mutex_lock(&s->mu);
      if (rc) {
        snprintf(s->last_error, sizeof s->last_error, "%s", dlock_last_error());
        conn = NULL;
        struct timespec ts;
        dlock__deadline_timespec(dlock_mono_now() + backoff, &ts);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
        continue;
      }
      backoff = 50;
      s->connected = 1;
      for (size_t i = 0; i < s->nchannels; i++) s->channels[i].sent = s->channels[i].confirmed = 0;
      wake_all_waiters(s);
    }
    pthread_mutex_unlock(&s->mu);

    int rc = sync_subscriptions(s, conn);
    if (!rc) {
      struct pollfd p[2] = {{dlock__conn_fd(conn), POLLIN, 0}, {s->wake[0], POLLIN, 0}};
      int n = dlock__conn_has_buffered(conn) ? 1 : poll(p, 2, 1000);
      if (n > 0 && (p[1].revents & POLLIN)) {
        char buf[64];
        while (read(s->wake[0], buf, sizeof buf) > 0) {}
      }
      if (n > 0 && (dlock__conn_has_buffered(conn) || (p[0].revents & (POLLIN | POLLHUP | POLLERR)))) {
        dlock__reply *r = NULL;
        rc = dlock__conn_read(conn, dlock_mono_now() + c->command_timeout_ms, &r);
        if (!rc) {
          handle_reply(s, r);
          dlock__reply_free(r);
        }
      }
    }
    pthread_mutex_lock(&s->mu);
    if (rc) {
      snprintf(s->last_error, sizeof s->last_error, "%s", dlock_last_error());
      dlock__conn_close(conn);
      conn = NULL;
      s->connected = 0;
      for (size_t i = 0; i < s->nchannels; i++) s->channels[i].sent = s->channels[i].confirmed = 0;
      pthread_cond_broadcast(&s->cv);
    }
  }
  pthread_mutex_unlock(&s->mu);
  dlock__conn_close(conn);
  return NULL;
}

static int start(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  int rc = 0;
  if (!c->subscriber) {
    dlock__subscriber *s = calloc(1, sizeof *s);
    if (!s) {
      rc = dlock__error(DLOCK_ENOMEM, "out of memory");
    } else if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
      free(s);
      rc = dlock__error(DLOCK_ESYS, "pipe: %s", strerror(errno));
    } else {
      s->client = c;
      pthread_mutex_init(&s->mu, NULL);
      dlock__cond_init(&s->cv);
      if (pthread_create(&s->thread, NULL, subscriber_main, s) != 0) {
        close(s->wake[0]);
        close(s->wake[1]);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        rc = dlock__error(DLOCK_ESYS, "cannot start the subscriber thread");
      } else {
        c->subscriber = s;
      }
    }
  }
  pthread_mutex_unlock(&c->lazy_mu);
  return rc;
}

static dlock__subscriber *get(dlock_client *c) {
  pthread_mutex_lock(&c->lazy_mu);
  dlock__subscriber *s = c->subscriber;
  pthread_mutex_unlock(&c->lazy_mu);
  return s;
}

static channel *find_channel(dlock__subscriber *s, const char *name, size_t len) {
  for (size_t i = 0; i < s->nchannels; i++)
    if (s->channels[i].len == len && !memcmp(s->channels[i].name, name, len)) return &s->channels[i];
  return NULL;
}

int dlock__subscriber_watch(dlock_client *c, dlock_mutex *m) {
  /* Tried once per handle: if it fails, the waiter goes on with re-checks. */
  m->watch_tried = 1;
  int rc = start(c);
  if (rc) return rc;
  dlock__subscriber *s = c->subscriber;
  pthread_mutex_lock(&s->mu);
  channel *ch = find_channel(s, m->channel, m->channel_len);
  if (!ch) {
    if (s->nchannels == s->capchannels) {
      size_t cap = s->capchannels ? s->capchannels * 2 : 16;
      channel *grown = realloc(s->channels, cap * sizeof *grown);
      if (!grown) {
        pthread_mutex_unlock(&s->mu);
        return dlock__error(DLOCK_ENOMEM, "out of memory");
      }
      s->channels = grown;
      s->capchannels = cap;
    }
    ch = &s->channels[s->nchannels];
    memset(ch, 0, sizeof *ch);
    if (!(ch->name = malloc(m->channel_len + 1))) {
      pthread_mutex_unlock(&s->mu);
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
    memcpy(ch->name, m->channel, m->channel_len + 1);
    ch->len = m->channel_len;
    s->nchannels++;
  }
  ch->refs++;
  m->subscribed = 1;
  poke(s);
  dlock_mono_ms deadline = dlock_mono_now() + c->command_timeout_ms;
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  for (;;) {
    ch = find_channel(s, m->channel, m->channel_len);
    if (!ch || ch->confirmed != 0) break;
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT) break;
  }
  rc = ch && ch->confirmed == 1 ? 0 : DLOCK_EIO;
  if (rc) dlock__error(rc, "subscribe to %s failed (%s); waiting falls back to re-checks", m->channel,
                       s->last_error[0] ? s->last_error : "no confirmation in time");
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void dlock__subscriber_unwatch(dlock_client *c, dlock_mutex *m) {
  if (!m->subscribed) return;
  m->subscribed = 0;
  dlock__subscriber *s = get(c);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  channel *ch = find_channel(s, m->channel, m->channel_len);
  if (ch && ch->refs > 0) ch->refs--;
  poke(s);
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_add_waiter(dlock_client *c, dlock_mutex *m) {
  if (start(c) != 0) return; /* no subscriber: re-checks only */
  dlock__subscriber *s = c->subscriber;
  pthread_mutex_lock(&s->mu);
  if (s->nwaiters == s->capwaiters) {
    size_t cap = s->capwaiters ? s->capwaiters * 2 : 16;
    dlock_mutex **grown = realloc(s->waiters, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&s->mu);
      return;
    }
    s->waiters = grown;
    s->capwaiters = cap;
  }
  s->waiters[s->nwaiters++] = m;
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_remove_waiter(dlock_client *c, dlock_mutex *m) {
  dlock__subscriber *s = get(c);
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  for (size_t i = 0; i < s->nwaiters; i++)
    if (s->waiters[i] == m) {
      s->waiters[i] = s->waiters[--s->nwaiters];
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

void dlock__subscriber_stop(dlock_client *c) {
  dlock__subscriber *s = c->subscriber;
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  poke(s);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  for (size_t i = 0; i < s->nchannels; i++) free(s->channels[i].name);
  free(s->channels);
  free(s->waiters);
  close(s->wake[0]);
  close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  c->subscriber = NULL;
}
