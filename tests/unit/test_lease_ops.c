/*
 * test_lease_ops.c - the deadline a renewal or extend may set while others
 * of the same hold are in flight (dlock__lease_op_begin/_end, core/mutex.c).
 * Redis may run overlapping calls in either order, whatever order their
 * replies come in, and the last to run sets the expiry: a success may count
 * only on the earliest deadline among the calls it overlapped.
 */
#include "dlock.h"
#include "internal.h"
#include "test.h"

static dlock_mutex *handle(void) {
  dlock_mutex *m = calloc(1, sizeof *m);
  if (!m) TEST_FAIL("out of memory");
  return m;
}

TEST(a_call_alone_sets_its_own_deadline) {
  dlock_mutex *m = handle();
  dlock__lease_op a;
  dlock__lease_op_begin(m, &a, 1000);
  /* Its own deadline, counted from when it really left (later than begin's). */
  ASSERT_EQ(dlock__lease_op_end(m, &a, 1005), 1005);
  ASSERT(m->lease_ops == NULL);
  free(m);
}

/* The watchdog's renewal (short lease) leaves, then the caller's extend (a
 * long one); the extend's reply is read last. Redis may have run the renewal
 * last: the key then ends at the renewal's deadline, not the extend's. */
TEST(a_long_extend_overlapping_a_short_renewal_counts_on_the_renewals_deadline) {
  dlock_mutex *m = handle();
  dlock__lease_op renewal, extend;
  dlock__lease_op_begin(m, &renewal, 1500);
  dlock__lease_op_begin(m, &extend, 60000);
  ASSERT_EQ(dlock__lease_op_end(m, &renewal, 1500), 1500);
  ASSERT_EQ(dlock__lease_op_end(m, &extend, 60000), 1500);
  ASSERT(m->lease_ops == NULL);
  /* Alone again: the next call sets its own deadline. */
  dlock__lease_op next;
  dlock__lease_op_begin(m, &next, 2000);
  ASSERT_EQ(dlock__lease_op_end(m, &next, 2000), 2000);
  free(m);
}

/* Overlap counts whenever it happened during a call's flight, also when the
 * other call ended first, and not for calls that ended before it left. */
TEST(only_calls_in_flight_at_some_moment_of_a_calls_flight_count) {
  dlock_mutex *m = handle();
  dlock__lease_op a, b, c;
  dlock__lease_op_begin(m, &a, 100);
  ASSERT_EQ(dlock__lease_op_end(m, &a, 100), 100);
  dlock__lease_op_begin(m, &b, 5000); /* after a ended: a does not count */
  dlock__lease_op_begin(m, &c, 3000);
  ASSERT_EQ(dlock__lease_op_end(m, &c, 3000), 3000);
  ASSERT_EQ(dlock__lease_op_end(m, &b, 5000), 3000); /* c overlapped b */
  ASSERT(m->lease_ops == NULL);
  free(m);
}

TEST(a_chain_of_overlaps_does_not_carry_an_old_deadline_forward) {
  dlock_mutex *m = handle();
  dlock__lease_op a, b, c;
  dlock__lease_op_begin(m, &a, 1000);
  dlock__lease_op_begin(m, &b, 4000);
  ASSERT_EQ(dlock__lease_op_end(m, &a, 1000), 1000);
  dlock__lease_op_begin(m, &c, 7000); /* overlaps b, never a */
  ASSERT_EQ(dlock__lease_op_end(m, &b, 4000), 1000);
  ASSERT_EQ(dlock__lease_op_end(m, &c, 7000), 4000);
  free(m);
}

/* A call may run before its answer comes (or without one): from the moment
 * it leaves, the key may end at its deadline, so valid_until comes down to
 * it at once when it is earlier; a later one leaves valid_until alone. */
TEST(a_call_in_flight_bounds_the_deadline_from_when_it_leaves) {
  dlock_mutex *m = handle();
  m->valid_until = 60000; /* after an extend to a long lease */
  dlock__lease_op renewal, extend;
  ASSERT_EQ(dlock__lease_op_begin(m, &renewal, 1500), 1);
  ASSERT_EQ(m->valid_until, 1500);
  ASSERT_EQ(dlock__lease_op_begin(m, &extend, 90000), 0);
  ASSERT_EQ(m->valid_until, 1500);
  dlock__lease_op_end(m, &renewal, INT64_MAX);
  dlock__lease_op_end(m, &extend, INT64_MAX);
  m->valid_until = 0; /* not held: no deadline to lower */
  ASSERT_EQ(dlock__lease_op_begin(m, &renewal, 1500), 0);
  ASSERT_EQ(m->valid_until, 0);
  dlock__lease_op_end(m, &renewal, INT64_MAX);
  ASSERT(m->lease_ops == NULL);
  free(m);
}

TEST_MAIN()
