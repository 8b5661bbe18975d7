/*
 * review_sentinel.c - issue 22, items 5 and 6: what the guard and a holder
 * are told across a Sentinel failover. One test per finding, each FAILED on
 * the code as reviewed (base 8894107). Real servers (harness_sentinel.h: a
 * master, a replica, three sentinels), real faults (SIGSTOP, SIGKILL, a
 * failover), public API only. Registered as ctest "review/review_sentinel",
 * labels "review;deployment" (a failover's timing: not under valgrind).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness_sentinel.h"
#include "test.h"

static th_sentinel_set set; /* the tests that do not fail over */
static th_sentinel_set fo;  /* started by each failover test */

void test_setup(void) {
  if (th_sentinel_set_start(&set, "rvsvc") != 0) exit(1);
}

void test_teardown(void) {
  th_sentinel_set_stop(&set);
  th_sentinel_set_stop(&fo);
}

static dlock_client *client_of(const char *url) { return test_client(url); }

/* Freeze the replica's intake so that the next writes on the master cannot
 * reach it: stop it and fill the replication link with a value larger than
 * the socket buffers (as test_sentinel.c). The replica is left stopped. */
static void block_replication(th_sentinel_set *s) {
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/big", s->master.dir);
  FILE *f = fopen(path, "w");
  if (!f) TEST_FAIL("cannot write %s", path);
  static char chunk[1 << 16];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < 512; i++) fwrite(chunk, 1, sizeof chunk, f); /* 32 MiB */
  fclose(f);
  kill(s->replica.pid, SIGSTOP);
  snprintf(cmd, sizeof cmd, "redis-cli -p %d -x SET big < '%s' > /dev/null", s->master.port, path);
  if (system(cmd) != 0) TEST_FAIL("SET big failed");
}

/* Issue 22 item 5 (with WAIT): a guard admission is a write like an acquire.
 * With wait_replicas=1 the guard did not WAIT: with the only replica stopped
 * it answered "admitted" for a write no replica had, which a failover then
 * forgets. It must fail closed with DLOCK_EREPLICAS, as the acquire does. */
TEST(issue22_item5_the_guard_with_wait_replicas_refuses_an_admission_no_replica_acknowledged) {
  char url[700];
  snprintf(url, sizeof url, "%s?wait_replicas=1&wait_timeout=300", set.url);
  dlock_client *c = client_of(url);
  ASSERT_OK(dlock_guard_check(c, "rv:res", 100));
  kill(set.replica.pid, SIGSTOP);
  int rc = dlock_guard_check(c, "rv:res", 200);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  kill(set.replica.pid, SIGCONT);
  ASSERT_STATUS(rc, DLOCK_EREPLICAS);
  ASSERT_CONTAINS(msg, "rv:res");
  ASSERT_CONTAINS(msg, "do not write");
  /* With the replica back, the same token is admitted (and acknowledged). */
  ASSERT_OK(dlock_guard_check(c, "rv:res", 200));
  dlock_client_free(c);
}

/* Issue 22 item 5 (without WAIT): the guard admits token T2 on the master,
 * the write does not reach the replica, the master dies and the replica is
 * promoted with the guard at T1 < T2. The holder of T1 (whose writes T2's
 * admission had fenced off) was admitted again. After a change of master
 * the guard must not admit a token issued before the failover. */
TEST(issue22_item5_a_guard_admission_lost_at_a_failover_does_not_let_a_lower_token_in) {
  if (th_sentinel_set_start(&fo, "rvguard") != 0) TEST_FAIL("sentinel set");
  dlock_client *c = client_of(fo.url);
  dlock_mutex *m = test_mutex(c, "rv:g:lock", 60000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t t1 = dlock_mutex_fence(m);
  ASSERT_OK(dlock_guard_check(c, "rv:g", t1));
  ASSERT_OK(dlock_mutex_release(m));
  /* Let the replica have T1's admission, then cut it off. */
  char out[256] = "";
  for (int i = 0; i < 200 && strcmp(out, "1"); i++) {
    th_sleep_ms(20);
    th_redis_cli(&fo.replica, out, sizeof out, "EXISTS {rv:g}:guard");
  }
  ASSERT_STR_EQ(out, "1");
  block_replication(&fo);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  uint64_t t2 = dlock_mutex_fence(m);
  ASSERT(t2 > t1);
  ASSERT_OK(dlock_guard_check(c, "rv:g", t2)); /* admitted on the master only */
  kill(fo.master.pid, SIGKILL);
  kill(fo.replica.pid, SIGCONT);
  if (th_sentinel_wait_master(&fo, fo.replica.port, 30000 * th_time_factor()) != 0)
    TEST_FAIL("no failover to the replica within 30 s");
  /* A writer with T1 (its hold ended before T2's): it must be refused. */
  dlock_client *w = client_of(fo.url);
  uint64_t highest = 0;
  int rc = dlock_guard_check_highest(w, "rv:g", t1, &highest);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  if (rc == 0) TEST_FAIL("token %llu admitted after the failover lost the admission of %llu",
                         (unsigned long long)t1, (unsigned long long)t2);
  ASSERT_STATUS(rc, DLOCK_ESTALE);
  ASSERT(highest > t2);
  ASSERT_CONTAINS(msg, "master changed");
  /* A token issued on the new master is admitted. */
  dlock_mutex_release(m);
  dlock_mutex *m2 = test_mutex(w, "rv:g:lock", 60000);
  ASSERT_OK(dlock_mutex_acquire(m2, 5000));
  ASSERT(dlock_mutex_fence(m2) > t2);
  ASSERT_OK(dlock_guard_check(w, "rv:g", dlock_mutex_fence(m2)));
  ASSERT_OK(dlock_mutex_release(m2));
  dlock_mutex_free(m2);
  dlock_mutex_free(m);
  dlock_client_free(w);
  dlock_client_free(c);
  th_sentinel_set_stop(&fo);
}

/* Issue 22 item 5: the guard tells a change of master by the master's
 * replication id (INFO, in @dangerous). A user without INFO is refused
 * with DLOCK_ENOPERM and told what to grant, never admitted blindly. */
TEST(issue22_item5_the_guard_without_the_right_to_info_is_refused_with_what_to_grant) {
  char out[256], url[800];
  th_redis_cli(&set.master, out, sizeof out,
               "ACL SETUSER rvnoinfo on '>rvpw' '~*' '&*' +@all -@dangerous +role");
  snprintf(url, sizeof url, "%s?master_user=rvnoinfo&master_password=rvpw", set.url);
  dlock_client *c = client_of(url);
  ASSERT_STATUS(dlock_guard_check(c, "rv:acl", 5), DLOCK_ENOPERM);
  ASSERT_CONTAINS(dlock_last_error(), "+info");
  th_redis_cli(&set.master, out, sizeof out, "EXISTS {rv:acl}:guard");
  ASSERT_STR_EQ(out, "0");
  th_redis_cli(&set.master, out, sizeof out, "ACL SETUSER rvnoinfo +info");
  ASSERT_OK(dlock_guard_check(c, "rv:acl", 5));
  ASSERT_STATUS(dlock_guard_check(c, "rv:acl", 4), DLOCK_ESTALE);
  dlock_client_free(c);
  th_redis_cli(&set.master, out, sizeof out, "ACL DELUSER rvnoinfo");
}

/* Issue 22 item 6: a frozen old master. A holds a lock (a fixed lease, no
 * renewal) whose write had not reached the replica; the master is frozen
 * (SIGSTOP), the sentinels promote the replica, B takes the lock there, the
 * old master comes back (SIGCONT). A's release found B's key and said
 * "another owner holds it now (our lease had expired)" with no loss
 * reason: its lease had not expired, a failover took the hold. The table in
 * docs/topologies.md promises DLOCK_LOST_FAILOVER. */
TEST(issue22_item6_a_hold_lost_to_a_frozen_masters_failover_is_reported_as_failover_at_release) {
  if (th_sentinel_set_start(&fo, "rvfrozen") != 0) TEST_FAIL("sentinel set");
  long f = th_time_factor();
  dlock_client *a = client_of(fo.url);
  dlock_mutex *ma = test_mutex(a, "rv:frozen", 120000 * f);
  dlock_mutex *mx = test_mutex(a, "rv:frozen2", 120000 * f);
  block_replication(&fo);
  ASSERT_OK(dlock_mutex_acquire(ma, 0));
  ASSERT_OK(dlock_mutex_acquire(mx, 0));
  kill(fo.master.pid, SIGSTOP);
  kill(fo.replica.pid, SIGCONT);
  int failed_over = th_sentinel_wait_master(&fo, fo.replica.port, 30000 * f);
  if (failed_over != 0) {
    kill(fo.master.pid, SIGCONT);
    TEST_FAIL("no failover to the replica within 30 s");
  }
  /* B takes both locks on the new master: A's writes never reached it. */
  dlock_client *b = client_of(fo.url);
  dlock_mutex *mb = test_mutex(b, "rv:frozen", 60000);
  dlock_mutex *mbx = test_mutex(b, "rv:frozen2", 60000);
  int rb = dlock_mutex_acquire(mb, 0), rbx = dlock_mutex_acquire(mbx, 0);
  kill(fo.master.pid, SIGCONT);
  ASSERT_OK(rb);
  ASSERT_OK(rbx);
  /* A's client learns of the switch from the sentinels (a poll a second). */
  th_sleep_ms(2500 * f);
  /* Extend: the hold is lost, and the reason is the failover. */
  ASSERT_STATUS(dlock_mutex_extend(mx, 60000), DLOCK_ENOTHELD);
  ASSERT_EQ(dlock_mutex_lost(mx), DLOCK_LOST_FAILOVER);
  dlock_mutex_release(mx);
  /* Release: B's key is untouched, and A is told why its hold ended. */
  ASSERT_STATUS(dlock_mutex_release(ma), DLOCK_ENOTHELD);
  ASSERT_CONTAINS(dlock_mutex_errmsg(ma), "failover");
  if (strstr(dlock_mutex_errmsg(ma), "lease had expired"))
    TEST_FAIL("the release blames the lease: %s", dlock_mutex_errmsg(ma));
  ASSERT_EQ(dlock_mutex_lost(ma), DLOCK_LOST_FAILOVER);
  ASSERT_EQ(dlock_mutex_is_held(mb), 1);
  ASSERT_OK(dlock_mutex_release(mb));
  ASSERT_OK(dlock_mutex_release(mbx));
  dlock_mutex_free(ma);
  dlock_mutex_free(mx);
  dlock_mutex_free(mb);
  dlock_mutex_free(mbx);
  dlock_client_free(a);
  dlock_client_free(b);
  th_sentinel_set_stop(&fo);
}

TEST_MAIN()
