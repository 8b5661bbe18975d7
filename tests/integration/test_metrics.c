/*
 * test_metrics.c - a client's metrics and its event hook (docs/metrics.md)
 * after scripted scenarios on one Redis server: acquisitions by outcome,
 * releases, a loss by a forced release, a hand-off, an election's term, a
 * job's runs; the exposition passes `promtool check metrics`; the hook sees
 * the events in order, from a thread that holds no dlock lock (it calls
 * dlock back, which would deadlock otherwise).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"
#include "metrics_text.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) exit(1);
}

void test_teardown(void) { th_redis_stop(&srv); }

static dlock_client *client_with(dlock_event_cb hook, void *arg, const char *names) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = srv.url;
  o.on_event = hook;
  o.on_event_arg = arg;
  o.metrics_names = names;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client of %s: %s", srv.url, dlock_last_error());
  return c;
}

/* The value of the series 'series' (name and labels exactly as written) in
 * 'text'; fails the test when it is not there. */
static double value_of(const char *text, const char *series) {
  int found = 0;
  double v = mt_sum(text, series, 1, &found);
  if (found == 0) TEST_FAIL("no series %s in:\n%s", series, text);
  return v;
}

#define MX(c, series) value_of(mt_exposition(c), series)

TEST(counters_follow_acquire_contend_release_and_a_forced_release) {
  dlock_client *a = client_with(NULL, NULL, NULL), *b = client_with(NULL, NULL, NULL);
  dlock_mutex *ma = test_mutex(a, "mx:one", 0), *mb = test_mutex(b, "mx:one", 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_OK(dlock_mutex_acquire(ma, 0)); /* reentrant */
  ASSERT_EQ(MX(a, "dlock_held{kind=\"mutex\"}"), 1);
  ASSERT_STATUS(dlock_mutex_acquire(mb, 0), DLOCK_EBUSY);
  ASSERT_STATUS(dlock_mutex_acquire(mb, 150), DLOCK_EBUSY);
  ASSERT_OK(dlock_mutex_release(ma));
  ASSERT_EQ(MX(a, "dlock_held{kind=\"mutex\"}"), 1); /* an inner hold: still held */
  ASSERT_OK(dlock_mutex_release(ma));
  const char *t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"acquired\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"reentered\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_releases_total{kind=\"mutex\",outcome=\"ok\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_held{kind=\"mutex\"}"), 0);
  ASSERT_EQ(value_of(t, "dlock_waiting{kind=\"mutex\"}"), 0);
  ASSERT_EQ(value_of(t, "dlock_acquire_wait_seconds_count{kind=\"mutex\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_hold_seconds_count{kind=\"mutex\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_hold_seconds_bucket{kind=\"mutex\",le=\"+Inf\"}"), 1);
  t = mt_exposition(b);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"busy\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"timed_out\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"mutex\",outcome=\"acquired\"}"), 0);

  /* A loss: b takes the lock away (a forced release); a's watchdog, renewing
   * every third of 900 ms, finds it gone. */
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 900;
  dlock_mutex *ml = NULL;
  ASSERT_OK(dlock_mutex_new(&ml, a, "mx:lost", &mo));
  ASSERT_OK(dlock_mutex_acquire(ml, 0));
  int was_held = 0;
  ASSERT_OK(dlock_lock_force_release(b, "mx:lost", &was_held));
  ASSERT_EQ(was_held, 1);
  long long until = th_now_ms() + 10000 * th_time_factor();
  while (dlock_mutex_lost(ml) == DLOCK_LOST_NONE && th_now_ms() < until) th_sleep_ms(20);
  ASSERT_EQ(dlock_mutex_lost(ml), DLOCK_LOST_DELETED);
  t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_losses_total{kind=\"mutex\",reason=\"deleted\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_held{kind=\"mutex\"}"), 0); /* a lost hold is no longer held */
  ASSERT(value_of(t, "dlock_renewals_total{outcome=\"ok\"}") >= 0);
  ASSERT_STATUS(dlock_mutex_release(ml), DLOCK_ENOTHELD);
  t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_releases_total{kind=\"mutex\",outcome=\"not_held\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_hold_seconds_count{kind=\"mutex\"}"), 2); /* ended once, at the loss */
  ASSERT_EQ(value_of(t, "dlock_held{kind=\"mutex\"}"), 0);
  dlock_mutex_free(ml);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

typedef struct waiter {
  dlock_mutex *m;
  int rc;
  atomic_int done;
} waiter;

static void *wait_acquire(void *arg) {
  waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, 10000 * th_time_factor());
  atomic_store(&w->done, 1);
  return NULL;
}

TEST(a_hand_off_and_a_waiter_are_counted) {
  dlock_client *a = client_with(NULL, NULL, NULL), *b = client_with(NULL, NULL, NULL);
  dlock_mutex *ma = test_mutex(a, "mx:handoff", 0), *mb = test_mutex(b, "mx:handoff", 0);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  static waiter w;
  memset(&w, 0, sizeof w);
  w.m = mb;
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, wait_acquire, &w), 0);
  long long until = th_now_ms() + 10000 * th_time_factor();
  while (MX(b, "dlock_waiting{kind=\"mutex\"}") != 1 && th_now_ms() < until) th_sleep_ms(10);
  ASSERT_EQ(MX(b, "dlock_waiting{kind=\"mutex\"}"), 1);
  th_sleep_ms(100); /* let it queue on the server */
  ASSERT_OK(dlock_mutex_release(ma));
  pthread_join(th, NULL);
  ASSERT_OK(w.rc);
  const char *t = mt_exposition(b);
  ASSERT_EQ(value_of(t, "dlock_handoffs_total{kind=\"mutex\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_waiting{kind=\"mutex\"}"), 0);
  ASSERT_EQ(value_of(t, "dlock_held{kind=\"mutex\"}"), 1);
  /* the wait lasted 100 ms at least: not in the 50 ms bucket */
  ASSERT_EQ(value_of(t, "dlock_acquire_wait_seconds_bucket{kind=\"mutex\",le=\"0.050000\"}"), 0);
  dlock_mutex_free(ma);
  dlock_mutex_free(mb); /* releases the waiter's hold */
  dlock_client_free(a);
  dlock_client_free(b);
}

TEST(elections_are_counted_by_name_only_when_allowed) {
  dlock_client *a = client_with(NULL, NULL, "el:named,other");
  dlock_election *named = NULL, *anon = NULL;
  ASSERT_OK(dlock_election_new(&named, a, "el:named", NULL));
  ASSERT_OK(dlock_election_new(&anon, a, "el:anon", NULL));
  ASSERT_OK(dlock_election_campaign(named, "me", 0));
  ASSERT_OK(dlock_election_campaign(anon, "me", 0));
  const char *t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_election_leader{name=\"el:named\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_election_leader"), 1); /* every name not allowed, together */
  ASSERT(!strstr(t, "el:anon"));
  ASSERT_EQ(value_of(t, "dlock_held{kind=\"election\"}"), 2);
  ASSERT_EQ(value_of(t, "dlock_acquisitions_total{kind=\"election\",outcome=\"acquired\"}"), 2);
  ASSERT_OK(dlock_election_resign(named));
  t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_election_leader{name=\"el:named\"}"), 0);
  ASSERT_EQ(value_of(t, "dlock_election_transitions_total{name=\"el:named\",to=\"leader\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_election_transitions_total{name=\"el:named\",to=\"follower\"}"), 1);
  ASSERT(!strstr(t, "dlock_lock_held{name=\"el:named\"}")); /* an election is not a lock here */
  /* A lock named in the list has series of its own; another has none. */
  dlock_client *b = client_with(NULL, NULL, "other");
  dlock_mutex *named_lock = test_mutex(a, "other", 0), *plain = test_mutex(a, "plain", 0);
  dlock_mutex *rival = test_mutex(b, "other", 0);
  ASSERT_OK(dlock_mutex_acquire(named_lock, 0));
  ASSERT_OK(dlock_mutex_acquire(plain, 0));
  ASSERT_STATUS(dlock_mutex_acquire(rival, 0), DLOCK_EBUSY);
  t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_lock_held{name=\"other\"}"), 1);
  ASSERT_EQ(value_of(t, "dlock_lock_acquisitions_total{name=\"other\",outcome=\"acquired\"}"), 1);
  ASSERT(!strstr(t, "\"plain\""));
  ASSERT_EQ(MX(b, "dlock_lock_acquisitions_total{name=\"other\",outcome=\"busy\"}"), 1);
  ASSERT_OK(dlock_mutex_release(named_lock));
  ASSERT_EQ(MX(a, "dlock_lock_held{name=\"other\"}"), 0);
  ASSERT_EQ(MX(a, "dlock_lock_losses_total{name=\"other\"}"), 0);
  dlock_mutex_free(rival);
  dlock_mutex_free(plain);
  dlock_mutex_free(named_lock);
  dlock_client_free(b);
  dlock_election_free(named);
  dlock_election_free(anon);
  dlock_client_free(a);
}

static int job_ok(const dlock_tick *t, void *arg) {
  (void)t;
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

TEST(job_runs_are_counted_with_their_last_success) {
  dlock_client *a = client_with(NULL, NULL, "*");
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, a, NULL));
  static atomic_int runs;
  atomic_store(&runs, 0);
  ASSERT_OK(dlock_sched_add_fixed_rate(s, "mx:job", 200, NULL, job_ok, &runs));
  ASSERT_OK(dlock_sched_start(s));
  long long until = th_now_ms() + 15000 * th_time_factor();
  while (atomic_load(&runs) < 2 && th_now_ms() < until) th_sleep_ms(20);
  ASSERT_OK(dlock_sched_stop(s, 10000));
  int n = atomic_load(&runs);
  ASSERT(n >= 2);
  const char *t = mt_exposition(a);
  ASSERT_EQ(value_of(t, "dlock_job_runs_total{name=\"mx:job\",outcome=\"ok\"}"), n);
  ASSERT_EQ(value_of(t, "dlock_job_running{name=\"mx:job\"}"), 0);
  double last = value_of(t, "dlock_job_last_success_timestamp_seconds{name=\"mx:job\"}");
  ASSERT(last > (double)time(NULL) - 60 && last <= (double)time(NULL) + 1);
  dlock_sched_free(s);
  dlock_client_free(a);
}

/* `promtool check metrics` on the Prometheus text of a client that did a
 * little of everything (every family present). */
TEST(promtool_accepts_the_exposition) {
  if (system("command -v promtool >/dev/null 2>&1") != 0)
    TEST_SKIP("promtool missing: apt-get install prometheus (tools/setup.sh does)");
  dlock_client *a = client_with(NULL, NULL, "*");
  dlock_mutex *m = test_mutex(a, "mx:\"quoted\\name", 0);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  dlock_election *e = NULL;
  ASSERT_OK(dlock_election_new(&e, a, "el:\"quoted\\name", NULL));
  ASSERT_OK(dlock_election_campaign(e, "x", 0));
  char path[] = "/tmp/dlock-metrics-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  FILE *f = fdopen(fd, "w");
  ASSERT_OK(dlock_client_metrics_write(a, f, DLOCK_METRICS_PROMETHEUS));
  fclose(f);
  char cmd[256], out[4096] = "";
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int rc = pclose(p);
  unlink(path);
  if (rc != 0) TEST_FAIL("promtool check metrics failed:\n%s", out);
  /* OpenMetrics: a counter's family has no _total; the text ends in # EOF. */
  static char om[1 << 17];
  ASSERT(dlock_client_metrics_snprint(a, om, sizeof om, DLOCK_METRICS_OPENMETRICS) > 0);
  ASSERT_CONTAINS(om, "# TYPE dlock_acquisitions counter\n");
  ASSERT_CONTAINS(om, "\ndlock_acquisitions_total{kind=\"mutex\",outcome=\"acquired\"} 1\n");
  ASSERT(strlen(om) > 6 && strcmp(om + strlen(om) - 6, "# EOF\n") == 0);
  dlock_election_free(e);
  dlock_mutex_free(m);
  dlock_client_free(a);
}

/* ---- The event hook ---- */

#define EVENTS_MAX 256
typedef struct seen {
  dlock_client *c; /* set once the client exists */
  pthread_mutex_t mu;
  int n;
  dlock_event ev[EVENTS_MAX];
  char name[EVENTS_MAX][64];
  int reentered; /* the hook's own call into dlock worked */
  pthread_t hook_thread;
} seen;

static int inner_fn(uint64_t fence, void *arg) {
  (void)fence, (void)arg;
  return 0;
}

static void record(const dlock_event *ev, void *arg) {
  seen *s = arg;
  pthread_mutex_lock(&s->mu);
  if (s->n < EVENTS_MAX) {
    s->ev[s->n] = *ev;
    snprintf(s->name[s->n], sizeof s->name[0], "%s", ev->name);
    s->n++;
  }
  s->hook_thread = pthread_self();
  dlock_client *c = s->c;
  pthread_mutex_unlock(&s->mu);
  /* Back into dlock from the hook, on the same client: a lock and the
   * metrics. Were a dlock lock held around the hook (the queue's, a
   * handle's), this would deadlock. */
  if (ev->kind == DLOCK_EVENT_RELEASED && strcmp(ev->name, "ev:a") == 0 && c) {
    char text[256];
    int ok = dlock_with_lock(c, "ev:inner", 5000, inner_fn, NULL) == 0 &&
             dlock_client_metrics_snprint(c, text, sizeof text, DLOCK_METRICS_PROMETHEUS) > 0;
    pthread_mutex_lock(&s->mu);
    s->reentered = ok ? 1 : -1;
    pthread_mutex_unlock(&s->mu);
  }
}

static int count_seen(seen *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void wait_seen(seen *s, int n) {
  long long until = th_now_ms() + 10000 * th_time_factor();
  while (count_seen(s) < n && th_now_ms() < until) th_sleep_ms(10);
}

/* The index of the first event of 'kind' on 'name' at or after 'from'; -1.
 * Under the lock: the hook may still be adding events. */
static int find(seen *s, int from, dlock_event_kind kind, const char *name) {
  int at = -1;
  pthread_mutex_lock(&s->mu);
  for (int i = from; i < s->n && at < 0; i++)
    if (s->ev[i].kind == kind && strcmp(s->name[i], name) == 0) at = i;
  pthread_mutex_unlock(&s->mu);
  return at;
}

TEST(the_hook_sees_a_scripted_scenario_in_order_and_may_call_dlock) {
  static seen s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL);
  dlock_client *c = client_with(record, &s, NULL);
  pthread_mutex_lock(&s.mu);
  s.c = c;
  pthread_mutex_unlock(&s.mu);
  dlock_client *other = client_with(NULL, NULL, NULL);

  /* acquire, release (the hook then takes ev:inner itself) */
  dlock_mutex *a = test_mutex(c, "ev:a", 0);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fence = dlock_mutex_fence(a);
  ASSERT_OK(dlock_mutex_release(a));
  wait_seen(&s, 6); /* 3 of ev:a, then 3 of ev:inner */
  /* a loss by a forced release, then the release of the lost hold */
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 900;
  dlock_mutex *l = NULL;
  ASSERT_OK(dlock_mutex_new(&l, c, "ev:lost", &mo));
  ASSERT_OK(dlock_mutex_acquire(l, 0));
  ASSERT_OK(dlock_lock_force_release(other, "ev:lost", NULL));
  long long until = th_now_ms() + 10000 * th_time_factor();
  while (dlock_mutex_lost(l) == DLOCK_LOST_NONE && th_now_ms() < until) th_sleep_ms(20);
  ASSERT_EQ(dlock_mutex_lost(l), DLOCK_LOST_DELETED);
  ASSERT_STATUS(dlock_mutex_release(l), DLOCK_ENOTHELD);
  /* an election's term */
  dlock_election *e = NULL;
  ASSERT_OK(dlock_election_new(&e, c, "ev:el", NULL));
  ASSERT_OK(dlock_election_campaign(e, "v", 0));
  uint64_t epoch = dlock_election_epoch(e);
  ASSERT_OK(dlock_election_resign(e));
  wait_seen(&s, 6 + 4 + 5);

  pthread_mutex_lock(&s.mu);
  int n = s.n;
  for (int i = 0; i < n; i++) /* the order is seq's, and none was dropped */
    if (s.ev[i].seq != (uint64_t)i + 1) {
      pthread_mutex_unlock(&s.mu);
      TEST_FAIL("event %d has seq %llu", i, (unsigned long long)s.ev[i].seq);
    }
  pthread_mutex_unlock(&s.mu);
  ASSERT_EQ(n, 15);
  ASSERT_EQ(s.reentered, 1);
  ASSERT(!pthread_equal(s.hook_thread, pthread_self()));
  int i = find(&s, 0, DLOCK_EVENT_ACQUIRE_STARTED, "ev:a");
  ASSERT_EQ(i, 0);
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_ACQUIRE_FINISHED, "ev:a"), 1);
  ASSERT_EQ(s.ev[1].status, 0);
  ASSERT_EQ(s.ev[1].fence, fence);
  ASSERT(s.ev[1].duration_us >= 0);
  ASSERT_STR_EQ(s.ev[1].lock_kind, "mutex");
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_RELEASED, "ev:a"), 2);
  ASSERT_EQ(s.ev[2].status, 0);
  ASSERT(s.ev[2].duration_us >= 0);
  /* the hook's own lock, after it */
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_ACQUIRE_STARTED, "ev:inner"), 3);
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_RELEASED, "ev:inner"), 5);
  int lost = find(&s, 0, DLOCK_EVENT_LOST, "ev:lost");
  ASSERT(lost > find(&s, 0, DLOCK_EVENT_ACQUIRE_FINISHED, "ev:lost"));
  ASSERT_EQ(s.ev[lost].reason, DLOCK_LOST_DELETED);
  ASSERT_EQ(find(&s, lost, DLOCK_EVENT_RELEASED, "ev:lost"), lost + 1);
  ASSERT_EQ(s.ev[lost + 1].status, DLOCK_ENOTHELD);
  int el = find(&s, 0, DLOCK_EVENT_ELECTED, "ev:el");
  ASSERT(el > lost);
  ASSERT_EQ(s.ev[el].fence, epoch);
  ASSERT_STR_EQ(s.ev[el].lock_kind, "election");
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_ACQUIRE_FINISHED, "ev:el"), el + 1);
  int dep = find(&s, el, DLOCK_EVENT_DEPOSED, "ev:el");
  ASSERT(dep > el + 1);
  ASSERT_EQ(s.ev[dep].reason, DLOCK_LOST_NONE);
  ASSERT_STR_EQ(dlock_event_kind_str(s.ev[dep].kind), "deposed");
  dlock_election_free(e);
  dlock_mutex_free(l);
  dlock_mutex_free(a);
  dlock_client_free(c);
  dlock_client_free(other);
  pthread_mutex_destroy(&s.mu);
}

/* A server frozen (SIGSTOP) for 3/4 of a 6 s lease: the renewal due at a
 * third of it waits (or fails and is tried again) until the thaw, then
 * succeeds with under a third of the lease left: a late renewal, counted
 * and told to the hook, and no loss. */
TEST(a_renewal_after_a_frozen_server_is_counted_late_and_told_to_the_hook) {
  static seen s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL);
  long f = th_time_factor();
  if (f > 2) /* 36 s and more under valgrind: the other builds run it */
    TEST_SKIP("DLOCK_TEST_TIME_FACTOR %ld: a frozen server for %ld s is left to the builds that run at speed", f,
              (long)(4500 * f / 1000));
  dlock_client *c = client_with(record, &s, NULL);
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.watchdog_lease_ms = 6000 * f;
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "ev:late", &mo));
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  kill(srv.pid, SIGSTOP);
  th_sleep_ms(4500 * f); /* the scenario: the server answers nothing this long */
  kill(srv.pid, SIGCONT);
  long long until = th_now_ms() + 10000 * f;
  while (MX(c, "dlock_renewals_total{outcome=\"late\"}") < 1 && th_now_ms() < until) th_sleep_ms(20);
  const char *t = mt_exposition(c);
  ASSERT_EQ(value_of(t, "dlock_renewals_total{outcome=\"late\"}"), 1);
  ASSERT(value_of(t, "dlock_renewals_total{outcome=\"ok\"}") >= 1);
  ASSERT(value_of(t, "dlock_watchdog_round_trip_seconds_count") >= 1);
  ASSERT_EQ(value_of(t, "dlock_losses_total{kind=\"mutex\",reason=\"unreachable\"}"), 0);
  ASSERT_EQ(dlock_mutex_lost(m), DLOCK_LOST_NONE);
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c); /* every event delivered */
  int late = find(&s, 0, DLOCK_EVENT_RENEWED_LATE, "ev:late");
  ASSERT(late > find(&s, 0, DLOCK_EVENT_ACQUIRE_FINISHED, "ev:late"));
  ASSERT(s.ev[late].duration_us >= 0 && s.ev[late].duration_us < 2000 * f * 1000); /* under a third left */
  ASSERT(find(&s, late, DLOCK_EVENT_RELEASED, "ev:late") > late);
  ASSERT_EQ(find(&s, 0, DLOCK_EVENT_LOST, "ev:late"), -1);
  pthread_mutex_destroy(&s.mu);
}

static int job_fails(const dlock_tick *t, void *arg) {
  (void)t, (void)arg;
  return 3;
}

TEST(the_hook_sees_job_runs_and_every_queued_event_before_free_returns) {
  static seen s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL);
  dlock_client *c = client_with(record, &s, NULL);
  dlock_sched *sc = NULL;
  ASSERT_OK(dlock_sched_new(&sc, c, NULL));
  ASSERT_OK(dlock_sched_add_fixed_rate(sc, "ev:job", 200, NULL, job_fails, NULL));
  ASSERT_OK(dlock_sched_start(sc));
  long long until = th_now_ms() + 15000 * th_time_factor();
  while (find(&s, 0, DLOCK_EVENT_JOB_FINISHED, "ev:job") < 0 && th_now_ms() < until) th_sleep_ms(20);
  dlock_sched_free(sc);
  /* A burst queued just before the free: all delivered by the time it returns. */
  dlock_mutex *m = test_mutex(c, "ev:burst", 0);
  for (int i = 0; i < 20; i++) {
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    ASSERT_OK(dlock_mutex_release(m));
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  int start = find(&s, 0, DLOCK_EVENT_JOB_STARTED, "ev:job");
  int end = find(&s, 0, DLOCK_EVENT_JOB_FINISHED, "ev:job");
  ASSERT(start >= 0 && end > start);
  ASSERT_EQ(s.ev[end].status, 3);
  ASSERT_EQ(s.ev[end].scheduled_unix_ms, s.ev[start].scheduled_unix_ms);
  ASSERT(s.ev[end].scheduled_unix_ms % 200 == 0);
  ASSERT_STR_EQ(s.ev[end].lock_kind, "job");
  int bursts = 0;
  for (int i = 0; i < s.n; i++) bursts += s.ev[i].kind == DLOCK_EVENT_RELEASED && !strcmp(s.name[i], "ev:burst");
  ASSERT_EQ(bursts, 20);
  pthread_mutex_destroy(&s.mu);
}

TEST_MAIN()
