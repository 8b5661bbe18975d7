/*
 * family_scenarios.h - semaphore and read-write lock scenarios shared by the
 * backends' tests (family_scenarios.c). Each ends the test (TEST_FAIL) on a
 * failure, as ASSERT does in a TEST body.
 */
#ifndef DLOCK_FAMILY_SCENARIOS_H
#define DLOCK_FAMILY_SCENARIOS_H

#include "dlock.h"

/* Defined by the test file: a new client on this backend, in 'space' (a
 * namespace or schema of the test's server), or NULL with the error set.
 * Also called in forked children. */
dlock_client *fam_client_or_null(const char *space);

void fam_permits_are_counted_fences_rise_and_status_shows_them(void);
void fam_a_limit_other_than_the_stored_one_is_an_error_naming_both(void);
void fam_a_name_is_one_kind_of_lock_at_a_time(void);
void fam_eight_processes_on_three_permits_hold_at_most_three_and_reach_three(void);
void fam_readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out(void);
void fam_upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends(void);
void fam_mixed_readers_and_writers_keep_a_writers_only_counter_exact(void);
void fam_a_waiter_that_gives_up_or_is_canceled_leaves_nothing_queued(void);

/* A semaphore (2 permits, a waiter woken by a release), a read-write lock
 * and a countdown latch on names starting with 'name', through clients 'a'
 * and 'b' of any topology. */
void fam_every_kind_on(dlock_client *a, dlock_client *b, const char *name);

/* A semaphore and one side of a read-write lock with the default options. */
dlock_semaphore *fam_sem(dlock_client *c, const char *name, int permits);
dlock_rwlock *fam_rw(dlock_client *c, const char *name, int side);

/* One TEST per scenario, each starting with the test file's NEED_SERVER(). */
#define FAM_SCENARIO_TEST(name) \
  TEST(name) {                  \
    NEED_SERVER();              \
    fam_##name();               \
  }
#define FAM_SCENARIO_TESTS()                                                                    \
  FAM_SCENARIO_TEST(permits_are_counted_fences_rise_and_status_shows_them) \
  FAM_SCENARIO_TEST(a_limit_other_than_the_stored_one_is_an_error_naming_both) \
  FAM_SCENARIO_TEST(a_name_is_one_kind_of_lock_at_a_time) \
  FAM_SCENARIO_TEST(eight_processes_on_three_permits_hold_at_most_three_and_reach_three) \
  FAM_SCENARIO_TEST(readers_overlap_a_writer_holds_alone_and_a_waiting_writer_keeps_later_readers_out) \
  FAM_SCENARIO_TEST(upgrade_is_refused_and_a_read_taken_under_a_write_keeps_others_out_until_it_ends) \
  FAM_SCENARIO_TEST(mixed_readers_and_writers_keep_a_writers_only_counter_exact) \
  FAM_SCENARIO_TEST(a_waiter_that_gives_up_or_is_canceled_leaves_nothing_queued)

#endif
