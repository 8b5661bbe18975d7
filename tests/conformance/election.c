/*
 * election.c - the leader election contract (docs/election.md) on every
 * backend that offers it: a standby leads within the lease after kill -9 of
 * the leader; a leader paused (SIGSTOP) past its lease is refused by the
 * guard once the new leader has written; a resign hands over at once;
 * observers see every change in order with rising epochs; terms never
 * overlap in a history written by several candidate processes.
 *
 * Elections need fences (the epoch is the term's fence): a fixture without
 * CONF_FENCE answers "not offered". Changing the value (proclaim) is not
 * offered where the docs say so (PROCLAIM_NOT_OFFERED).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"
#include "harness.h"
#include "test.h"

static long slack_ms(long ms) { return ms * th_time_factor(); }

/* docs/election.md, "Where": the deployments without proclaim. */
static const char *const PROCLAIM_NOT_OFFERED[] = {"redlock", "mysql-lease", "zk"};

#define LEASE_MS 2000

static dlock_election *new_candidate(dlock_client *c, const char *name) {
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = LEASE_MS;
  dlock_election *e = NULL;
  conf_offered(CONF_FENCE, "leader election", dlock_election_new(&e, c, name, &o));
  conf_adopt_election(e);
  return e;
}

/* Is election offered here? Asked through a client that is gone again
 * before any fork: a child forked while a ZooKeeper client's threads run
 * may inherit a lock held in another thread (getaddrinfo's). */
static void probe_offered(void) {
  dlock_client *c = conf_fx->client("probe");
  if (!c) TEST_FAIL("a client of %s: %s", conf_fx->name, dlock_last_error());
  dlock_election *e = NULL;
  int rc = dlock_election_new(&e, c, "probe", NULL);
  char err[512];
  snprintf(err, sizeof err, "%s", dlock_last_error());
  dlock_election_free(e);
  dlock_client_free(c);
  int claimed = (conf_fx->caps & CONF_FENCE) != 0;
  if (rc == DLOCK_EINVAL && strstr(err, "not offered")) {
    if (claimed)
      TEST_FAIL("the docs say %s offers leader election, but the library refuses it: %s", conf_fx->name, err);
    conf_not_offered("leader election: %s", err);
  }
  if (rc) TEST_FAIL("leader election on %s returned %s: %s", conf_fx->name, dlock_err_name(rc), err);
  if (!claimed) TEST_FAIL("leader election works on %s, but the docs say it is not offered there", conf_fx->name);
}

static dlock_leader who(dlock_client *c, const char *name) {
  dlock_leader l;
  dlock_leader_init(&l);
  ASSERT_OK(dlock_election_leader(c, name, &l));
  return l;
}

/* Wait (bounded) until the leader of 'name' is 'value' (NULL: none). */
static int wait_leader(dlock_client *c, const char *name, const char *value, long ms) {
  long long until = th_now_ms() + ms;
  do {
    dlock_leader l = who(c, name);
    if (value ? l.has_leader && strcmp(l.value, value) == 0 : !l.has_leader) return 1;
    th_sleep_ms(20);
  } while (th_now_ms() < until);
  return 0;
}

/* ---- A candidate in another process ---- */

struct child_arg {
  int ready_fd, go_fd; /* writes its epoch to ready_fd; on a byte from go_fd: the guard */
  int parent_fds[2];   /* the parent's ends, closed in the child: EOF on go_fd when it goes */
  char name[64], value[64], resource[64];
};

static int lead_then_wait(void *arg) {
  (void)arg;
  struct child_arg *a = conf_shared(sizeof *a); /* spawn_leader's copy */
  /* A scenario that fails before it kills this process (longjmp) must not
   * leave it leading: it ends with the runner at the latest. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  close(a->parent_fds[0]);
  close(a->parent_fds[1]);
  dlock_client *c = conf_fx->client("elect");
  if (!c) return 1;
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = LEASE_MS;
  dlock_election *e = NULL;
  if (dlock_election_new(&e, c, a->name, &o) || dlock_election_campaign(e, a->value, 0)) {
    fprintf(stderr, "candidate %s: %s\n", a->value, dlock_last_error());
    return 2;
  }
  uint64_t epoch = dlock_election_epoch(e);
  if (write(a->ready_fd, &epoch, sizeof epoch) != sizeof epoch) return 3;
  char ch;
  if (read(a->go_fd, &ch, 1) != 1) return 4;
  /* Resumed after a pause: write as the leader it believes it is. */
  int rc = dlock_guard_check(c, a->resource, epoch);
  int lost = dlock_election_lost(e) != DLOCK_LOST_NONE;
  int out[2] = {rc, lost};
  if (write(a->ready_fd, out, sizeof out) != sizeof out) return 5;
  dlock_election_free(e); /* the child is a program of its own: its leak check runs */
  dlock_client_free(c);
  return 0;
}

static pid_t spawn_leader(struct child_arg *a, int p[2], int go[2], uint64_t *epoch) {
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(pipe(go), 0);
  a->ready_fd = p[1];
  a->go_fd = go[0];
  a->parent_fds[0] = p[0];
  a->parent_fds[1] = go[1];
  *(struct child_arg *)conf_shared(sizeof *a) = *a;
  pid_t pid = conf_spawn(lead_then_wait, 0);
  close(p[1]);
  close(go[0]);
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  if (poll(&pfd, 1, (int)slack_ms(30000)) != 1 || read(p[0], epoch, sizeof *epoch) != sizeof *epoch) {
    kill(pid, SIGKILL);
    th_wait(pid, 10000);
    close(p[0]);
    close(go[1]);
    TEST_FAIL("the candidate process did not become leader (see its stderr)");
  }
  return pid;
}

static void election_a_standby_leads_within_the_lease_after_kill_9_of_the_leader(void) {
  probe_offered();
  struct child_arg a = {.name = "e-kill", .value = "node-a", .resource = "r-kill"};
  int p[2], go[2];
  uint64_t first = 0;
  pid_t pid = spawn_leader(&a, p, go, &first);
  dlock_client *c = conf_client("elect");
  dlock_election *b = new_candidate(c, "e-kill");
  dlock_leader l = who(c, "e-kill");
  ASSERT_EQ(l.has_leader, 1);
  ASSERT_STR_EQ(l.value, "node-a");
  ASSERT_EQ(l.epoch, first);
  ASSERT_STATUS(dlock_election_campaign(b, "node-b", 0), DLOCK_EBUSY);
  long long t0 = th_now_ms();
  kill(pid, SIGKILL);
  th_wait(pid, 10000);
  close(p[0]);
  close(go[1]);
  ASSERT_OK(dlock_election_campaign(b, "node-b", conf_fx->kill_free_ms + slack_ms(20000)));
  long long took = th_now_ms() - t0;
  printf("  the standby led %lld ms after the kill (lease: %lld ms)\n", took, (long long)conf_fx->kill_free_ms);
  if (took > conf_fx->kill_free_ms + slack_ms(10000))
    TEST_FAIL("the standby waited %lld ms, the lease is %lld ms", took, (long long)conf_fx->kill_free_ms);
  ASSERT(dlock_election_epoch(b) > first);
  l = who(c, "e-kill");
  ASSERT_STR_EQ(l.value, "node-b");
  ASSERT_EQ(l.epoch, dlock_election_epoch(b));
  ASSERT_OK(dlock_election_resign(b));
  ASSERT(wait_leader(c, "e-kill", NULL, slack_ms(5000)));
}

static void election_a_paused_leader_is_refused_by_the_guard_after_the_new_leader_writes(void) {
  if (!(conf_fx->caps & CONF_GUARD)) conf_not_offered("the guard is not offered on %s", conf_fx->name);
  probe_offered();
  struct child_arg a = {.name = "e-stop", .value = "paused", .resource = "r-stop"};
  int p[2], go[2];
  uint64_t old = 0;
  pid_t pid = spawn_leader(&a, p, go, &old);
  kill(pid, SIGSTOP); /* its watchdog stops renewing: the lease runs out */
  dlock_client *c = conf_client("elect");
  dlock_election *b = new_candidate(c, "e-stop");
  int rc = dlock_election_campaign(b, "successor", conf_fx->kill_free_ms + slack_ms(20000));
  if (rc) {
    kill(pid, SIGKILL);
    th_wait(pid, 10000);
    TEST_FAIL("the successor did not lead while the leader was paused: %s", dlock_last_error());
  }
  uint64_t now = dlock_election_epoch(b);
  ASSERT(now > old);
  ASSERT_OK(dlock_guard_check(c, "r-stop", now)); /* the new leader writes */
  kill(pid, SIGCONT);
  char ch = 'g';
  int out[2] = {0, 0};
  struct pollfd pfd = {.fd = p[0], .events = POLLIN};
  int got = write(go[1], &ch, 1) == 1 && poll(&pfd, 1, (int)slack_ms(30000)) == 1 &&
            read(p[0], out, sizeof out) == sizeof out;
  close(p[0]);
  close(go[1]);
  th_wait(pid, 10000);
  if (!got) TEST_FAIL("the resumed leader did not report its guard check");
  printf("  the resumed leader's write with epoch %llu: %s (new epoch %llu); it %s its loss\n", (unsigned long long)old,
         dlock_err_name(out[0]), (unsigned long long)now, out[1] ? "saw" : "did not see");
  ASSERT_STATUS(out[0], DLOCK_ESTALE);
  ASSERT_EQ(out[1], 1); /* past its local deadline, lost() says so by itself */
  ASSERT_OK(dlock_election_resign(b));
}

/* ---- Resign ---- */

struct campaigner {
  dlock_election *e;
  const char *value;
  int rc;
  long long at;
};

static void *campaign_thread(void *arg) {
  struct campaigner *k = arg;
  k->rc = dlock_election_campaign(k->e, k->value, slack_ms(30000));
  k->at = th_now_ms();
  return NULL;
}

static void election_a_resign_hands_over_at_once_and_proclaim_keeps_the_epoch(void) {
  dlock_client *c = conf_client("resign"), *c2 = conf_client("resign");
  dlock_election *a = new_candidate(c, "e-resign"), *b = new_candidate(c2, "e-resign");
  ASSERT_OK(dlock_election_campaign(a, "first", 0));
  uint64_t ea = dlock_election_epoch(a);
  ASSERT(ea > 0);
  ASSERT_STATUS(dlock_election_campaign(a, "again", 0), DLOCK_EINVAL); /* leads already */
  struct campaigner k = {.e = b, .value = "second"};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, campaign_thread, &k), 0);
  if (conf_fx->caps & CONF_QUEUE) {
    if (!conf_wait_waiters(c, "e-resign", 1, slack_ms(10000))) {
      dlock_election_cancel(b);
      pthread_join(t, NULL);
      TEST_FAIL("the second candidate never showed as waiting");
    }
  } else {
    th_sleep_ms(300);
  }
  /* proclaim: a new value, the same term. */
  int prc = dlock_election_proclaim(a, "first-v2");
  char perr[512];
  snprintf(perr, sizeof perr, "%s", dlock_last_error());
  dlock_leader l;
  dlock_leader_init(&l);
  int lrc = dlock_election_leader(c2, "e-resign", &l);
  long long t0 = th_now_ms();
  int rrc = dlock_election_resign(a);
  if (rrc) dlock_election_cancel(b);
  pthread_join(t, NULL); /* before any assertion: the thread uses 'b' */
  ASSERT_OK(rrc);
  ASSERT_OK(k.rc);
  int refused = 0;
  for (size_t i = 0; i < sizeof PROCLAIM_NOT_OFFERED / sizeof PROCLAIM_NOT_OFFERED[0]; i++)
    refused |= strcmp(conf_fx->name, PROCLAIM_NOT_OFFERED[i]) == 0;
  if (refused) {
    if (prc != DLOCK_EINVAL || !strstr(perr, "not offered"))
      TEST_FAIL("the docs say proclaim is not offered on %s, but it answered %s: %s", conf_fx->name,
                dlock_err_name(prc), perr);
  } else {
    if (prc) TEST_FAIL("proclaim: %s: %s", dlock_err_name(prc), perr);
    ASSERT_OK(lrc);
    ASSERT_STR_EQ(l.value, "first-v2");
    ASSERT_EQ(l.epoch, ea);
  }
  printf("  hand-off after resign: %lld ms\n", k.at - t0);
  if (k.at - t0 > slack_ms(2000)) TEST_FAIL("the hand-off took %lld ms after the resign", k.at - t0);
  ASSERT(dlock_election_epoch(b) > ea);
  ASSERT_STATUS(dlock_election_proclaim(a, "late"), DLOCK_ENOTHELD);
  ASSERT_STATUS(dlock_election_resign(a), DLOCK_ENOTHELD);
  ASSERT_OK(dlock_election_resign(b));
}

/* ---- Observers ---- */

#define TERMS 4

static void election_observers_see_every_change_in_order_with_rising_epochs(void) {
  dlock_client *c = conf_client("observe"), *w = conf_client("observe");
  dlock_observer_options oo;
  dlock_observer_options_init(&oo);
  oo.interval_ms = 25;
  dlock_observer *o = NULL;
  ASSERT_OK(dlock_observer_new(&o, w, "e-obs", &oo));
  conf_adopt_observer(o);
  dlock_election *e[TERMS];
  uint64_t epochs[TERMS];
  char values[TERMS][16];
  for (int i = 0; i < TERMS; i++) e[i] = new_candidate(c, "e-obs");
  /* The first change is the state found at the start: no leader. */
  struct pollfd pfd = {.fd = dlock_observer_fd(o), .events = POLLIN};
  if (poll(&pfd, 1, (int)slack_ms(10000)) != 1) TEST_FAIL("the observer queued nothing: %s", dlock_observer_errmsg(o));
  for (int i = 0; i < TERMS; i++) {
    snprintf(values[i], sizeof values[i], "term-%d", i);
    ASSERT_OK(dlock_election_campaign(e[i], values[i], slack_ms(10000)));
    epochs[i] = dlock_election_epoch(e[i]);
    th_sleep_ms(slack_ms(300));
    ASSERT_OK(dlock_election_resign(e[i]));
    ASSERT(wait_leader(c, "e-obs", NULL, slack_ms(5000)));
    th_sleep_ms(slack_ms(300));
  }
  /* Expected: no leader, then for each term its leader and no leader. */
  ASSERT_EQ(poll(&pfd, 1, 0), 1);
  int seen = 0, none = 0;
  uint64_t last = 0;
  dlock_leader l;
  for (int n = 0; n < 4 * TERMS + 4; n++) {
    dlock_leader_init(&l);
    if (dlock_observer_next(o, &l) != 0) break;
    if (!l.has_leader) {
      none++;
      continue;
    }
    if (seen >= TERMS) TEST_FAIL("more terms observed than there were: epoch %llu", (unsigned long long)l.epoch);
    if (l.epoch != epochs[seen] || strcmp(l.value, values[seen]) != 0)
      TEST_FAIL("change %d: observed epoch %llu '%s', expected %llu '%s'", seen, (unsigned long long)l.epoch, l.value,
                (unsigned long long)epochs[seen], values[seen]);
    ASSERT(l.epoch > last);
    last = l.epoch;
    seen++;
  }
  ASSERT_EQ(seen, TERMS);
  ASSERT_EQ(none, TERMS + 1);
  ASSERT_EQ(poll(&pfd, 1, 0), 0); /* drained: not readable */
  dlock_leader_init(&l);
  ASSERT_STATUS(dlock_observer_next(o, &l), DLOCK_EBUSY);
}

/* ---- No overlap ---- */

#define HIST_PROCS 3
#define HIST_TERMS 3

static int term_taker(void *arg) {
  int fd = (int)(intptr_t)arg;
  dlock_client *c = conf_fx->client("hist");
  if (!c) return 10;
  dlock_election_options o;
  dlock_election_options_init(&o);
  o.lease_ms = LEASE_MS;
  dlock_election *e = NULL;
  if (dlock_election_new(&e, c, "e-hist", &o)) return 11;
  char v[32];
  snprintf(v, sizeof v, "pid-%d", (int)getpid());
  for (int t = 0; t < HIST_TERMS; t++) {
    if (dlock_election_campaign(e, v, slack_ms(60000))) {
      fprintf(stderr, "candidate %d: %s\n", (int)getpid(), dlock_last_error());
      return 12;
    }
    char line[64];
    int n = snprintf(line, sizeof line, "E %d %llu\n", (int)getpid(), (unsigned long long)dlock_election_epoch(e));
    if (write(fd, line, (size_t)n) != n) return 13;
    th_sleep_ms(20);
    n = snprintf(line, sizeof line, "X %d %llu\n", (int)getpid(), (unsigned long long)dlock_election_epoch(e));
    if (write(fd, line, (size_t)n) != n) return 13;
    if (dlock_election_resign(e)) return 14;
  }
  dlock_election_free(e);
  dlock_client_free(c);
  return 0;
}

static void election_terms_never_overlap_in_a_history_of_several_candidates(void) {
  probe_offered();
  char path[] = "/tmp/dlock-elect-hist-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  close(fd);
  fd = open(path, O_WRONLY | O_APPEND);
  pid_t pids[HIST_PROCS];
  for (int i = 0; i < HIST_PROCS; i++) pids[i] = conf_spawn(term_taker, fd);
  int bad = 0;
  for (int i = 0; i < HIST_PROCS; i++) bad |= th_wait(pids[i], slack_ms(120000)) != 0;
  close(fd);
  FILE *f = fopen(path, "r");
  unlink(path);
  ASSERT(f != NULL);
  char what;
  int pid, inside = 0, last_pid = 0, entries = 0;
  unsigned long long epoch, last = 0;
  while (fscanf(f, " %c %d %llu", &what, &pid, &epoch) == 3) {
    if (what == 'E') {
      if (inside) {
        fclose(f);
        TEST_FAIL("two leaders at once: %d (epoch %llu) while %d led (epoch %llu)", pid, epoch, last_pid, last);
      }
      if (epoch <= last) {
        fclose(f);
        TEST_FAIL("epoch %llu of %d does not rise above %llu", epoch, pid, last);
      }
      inside = 1, last_pid = pid, last = epoch, entries++;
    } else {
      if (!inside || pid != last_pid || epoch != last) {
        fclose(f);
        TEST_FAIL("an end of term by %d (epoch %llu) that was not the leader's", pid, epoch);
      }
      inside = 0;
    }
  }
  fclose(f);
  if (bad) TEST_FAIL("a candidate process failed (see its stderr)");
  ASSERT_EQ(entries, HIST_PROCS * HIST_TERMS);
}

/* docs/election.md, "Where": the deployments whose evict cannot check the epoch. */
static const char *const EVICT_NOT_OFFERED[] = {"redlock", "mysql-lease"};

/* An admin read who leads (epoch ea), then that term ended and another
 * began before the eviction was sent (dlock elect --evict's race): the
 * eviction carries ea and leaves the new term alone; with the new term's
 * epoch it ends it. */
static void election_an_eviction_with_an_old_epoch_leaves_the_new_leader_alone(void) {
  dlock_client *c = conf_client("evict"), *c2 = conf_client("evict"), *admin = conf_client("evict");
  dlock_election *a = new_candidate(c, "e-evict"), *b = new_candidate(c2, "e-evict");
  ASSERT_OK(dlock_election_campaign(a, "old", 0));
  dlock_leader l;
  dlock_leader_init(&l);
  ASSERT_OK(dlock_election_leader(admin, "e-evict", &l));
  uint64_t ea = l.epoch;
  ASSERT_EQ(ea, dlock_election_epoch(a));
  ASSERT_OK(dlock_election_resign(a));
  ASSERT_OK(dlock_election_campaign(b, "new", slack_ms(10000)));
  uint64_t eb = dlock_election_epoch(b);
  ASSERT(eb > ea);
  int evicted = -1;
  int rc = dlock_election_evict(admin, "e-evict", ea, &evicted);
  int refused = 0;
  for (size_t i = 0; i < sizeof EVICT_NOT_OFFERED / sizeof EVICT_NOT_OFFERED[0]; i++)
    refused |= strcmp(conf_fx->name, EVICT_NOT_OFFERED[i]) == 0;
  if (refused) {
    if (rc != DLOCK_EINVAL || !strstr(dlock_last_error(), "not offered"))
      TEST_FAIL("the docs say an epoch-checked eviction is not offered on %s, but it answered %s: %s", conf_fx->name,
                dlock_err_name(rc), dlock_last_error());
    ASSERT_OK(dlock_election_resign(b));
    return;
  }
  ASSERT_OK(rc);
  ASSERT_EQ(evicted, 0);
  dlock_leader_init(&l);
  ASSERT_OK(dlock_election_leader(admin, "e-evict", &l));
  ASSERT_EQ(l.has_leader, 1);
  ASSERT_EQ(l.epoch, eb);
  ASSERT_STR_EQ(l.value, "new");
  /* With the new term's epoch: it goes, and its holder learns it. */
  ASSERT_OK(dlock_election_evict(admin, "e-evict", eb, &evicted));
  ASSERT_EQ(evicted, 1);
  dlock_leader_init(&l);
  ASSERT_OK(dlock_election_leader(admin, "e-evict", &l));
  ASSERT_EQ(l.has_leader, 0);
  long long until = th_now_ms() + slack_ms(3 * LEASE_MS);
  while (dlock_election_lost(b) == DLOCK_LOST_NONE && th_now_ms() < until) th_sleep_ms(20);
  ASSERT(dlock_election_lost(b) != DLOCK_LOST_NONE);
  ASSERT_OK(dlock_election_evict(admin, "e-evict", eb, &evicted)); /* again: nothing left to end */
  ASSERT_EQ(evicted, 0);
}

#define SCENARIO(fn) \
  { #fn, fn }
const conf_scenario conf_election[] = {
    SCENARIO(election_a_resign_hands_over_at_once_and_proclaim_keeps_the_epoch),
    SCENARIO(election_observers_see_every_change_in_order_with_rising_epochs),
    SCENARIO(election_terms_never_overlap_in_a_history_of_several_candidates),
    SCENARIO(election_a_standby_leads_within_the_lease_after_kill_9_of_the_leader),
    SCENARIO(election_a_paused_leader_is_refused_by_the_guard_after_the_new_leader_writes),
    SCENARIO(election_an_eviction_with_an_old_epoch_leaves_the_new_leader_alone),
};
const size_t conf_election_len = sizeof conf_election / sizeof conf_election[0];
