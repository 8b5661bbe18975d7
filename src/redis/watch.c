/*
 * watch.c - dlock_watch_* on Redis: the lock scripts publish "ev" on the
 * sharded channel {K}:ev whenever a lock changes (taken, released, a waiter
 * come or gone; "ev 1 1" for a forced release; SPUBLISH, Redis 7 and
 * later), and a watch is one
 * subscriber target (waiters.c) per watched name on that channel. The
 * client's one subscriber thread and connection carry them, with its
 * reconnects and failovers (a reconnect wakes the watch: a change may have
 * been missed). Before Redis 7 nothing is published, and a channel cannot
 * be subscribed by prefix: every lock of a prefix, like a refused
 * subscription, is bounded by the core's timer (docs/cli.md, "Watching").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_lock.h"

typedef struct rwatch {
  dlock__sub_target *targets;
  size_t n, cap;
} rwatch;

/* The subscriber's wake-up (its thread, under its lock). */
static void wake_watch(dlock__sub_target *t, uint64_t fence, uint64_t nonce, int all) {
  (void)all;
  /* "ev 1 1" (force_release.lua): parsed as a grant's fence and nonce. */
  dlock__watch_wake(t->arg, fence == 1 && nonce == 1 ? DLOCK_WATCH_FORCED : 1);
}

int dlock__redis_watch_open(dlock_watch *w) {
  rwatch *r = calloc(1, sizeof *r);
  if (!r) return dlock__error(DLOCK_ENOMEM, "out of memory");
  w->be = r;
  return 0;
}

int dlock__redis_watch_add(dlock_watch *w, const char *name) {
  rwatch *r = w->be;
  dlock_client *c = w->client;
  if (!name) return 1; /* no prefix subscription for sharded channels */
  if (r->n == r->cap) {
    /* Targets are registered by address: grow only before the first one. */
    if (r->n) return 1;
    r->cap = 1024;
    if (!(r->targets = calloc(r->cap, sizeof *r->targets))) {
      r->cap = 0;
      return dlock__error(DLOCK_ENOMEM, "out of memory");
    }
  }
  dlock__sub_target *t = &r->targets[r->n];
  memset(t, 0, sizeof *t);
  t->channel_len = c->prefix_len + strlen(name) + strlen("{}:ev");
  if (!(t->channel = malloc(t->channel_len + 1))) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(t->channel, t->channel_len + 1, "{%s%s}:ev", c->prefix, name);
  t->waiter_id = "ev";
  t->wake = wake_watch;
  t->arg = w;
  t->shard = 1;
  r->n++;
  dlock__subscriber_add_waiter(c, t);
  /* A refused subscription (Redis before 7, an ACL without the channel):
   * the core's timer then bounds the changes of this name. */
  if (dlock__subscriber_watch(c, t) != 0) {
    dlock__error_clear();
    return 1;
  }
  return 0;
}

void dlock__redis_watch_close(dlock_watch *w) {
  rwatch *r = w->be;
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) {
    dlock__subscriber_remove_waiter(w->client, &r->targets[i]);
    dlock__subscriber_unwatch(w->client, &r->targets[i]);
    free(r->targets[i].channel);
  }
  free(r->targets);
  free(r);
  w->be = NULL;
}
