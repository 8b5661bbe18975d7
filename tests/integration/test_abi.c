/*
 * test_abi.c - the version calls and the ABI rule of the structs the caller
 * allocates (top of dlock.h): struct_size set by each _init, checked by the
 * library; a struct never initialised is a clear DLOCK_EINVAL naming the
 * _init; an older, smaller layout is accepted, only its own bytes are read
 * or written (the buffers here are exactly that long, so ASan catches a byte
 * too far) and the fields it lacks take their defaults.
 */
#include <stdlib.h>

#include "dlock.h"
#include "harness.h"
#include "internal.h"
#include "test.h"

static th_redis srv;

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static int noop_job(const dlock_tick *tick, void *arg) {
  (void)tick;
  (void)arg;
  return 0;
}

/* ---- Version ---- */

TEST(the_runtime_version_is_the_headers_as_string_and_number) {
  ASSERT_STR_EQ(dlock_version(), DLOCK_VERSION);
  ASSERT_EQ(dlock_version_number(), DLOCK_VERSION_NUMBER);
  ASSERT_EQ(DLOCK_VERSION_NUMBER, DLOCK_VERSION_MAJOR * 10000 + DLOCK_VERSION_MINOR * 100 + DLOCK_VERSION_PATCH);
  char text[32];
  snprintf(text, sizeof text, "%d.%d.%d", dlock_version_number() / 10000, dlock_version_number() / 100 % 100,
           dlock_version_number() % 100);
  ASSERT_STR_EQ(text, dlock_version());
}

/* ---- _init sets the size ---- */

TEST(every_init_sets_struct_size_to_the_full_layout) {
  dlock_client_options co;
  dlock_mutex_options mo;
  dlock_lock_info li;
  dlock_sched_options so;
  dlock_job_options jo;
  dlock_run_record rr;
  memset(&co, 0x5a, sizeof co);
  memset(&mo, 0x5a, sizeof mo);
  memset(&li, 0x5a, sizeof li);
  memset(&so, 0x5a, sizeof so);
  memset(&jo, 0x5a, sizeof jo);
  memset(&rr, 0x5a, sizeof rr);
  dlock_client_options_init(&co);
  dlock_mutex_options_init(&mo);
  dlock_lock_info_init(&li);
  dlock_sched_options_init(&so);
  dlock_job_options_init(&jo);
  dlock_run_record_init(&rr);
  ASSERT_EQ(co.struct_size, sizeof co);
  ASSERT_EQ(mo.struct_size, sizeof mo);
  ASSERT_EQ(li.struct_size, sizeof li);
  ASSERT_EQ(so.struct_size, sizeof so);
  ASSERT_EQ(jo.struct_size, sizeof jo);
  ASSERT_EQ(rr.struct_size, sizeof rr);
  ASSERT(co.url == NULL && mo.lease_ms == 0 && li.held == 0 && so.pool_size == 0 && jo.history_len == 0 &&
         rr.fence == 0);
}

/* ---- Never initialised: a clear error, no I/O ---- */

TEST(uninitialised_structs_are_refused_naming_the_init_to_call) {
  dlock_client *c = test_client(srv.url);
  dlock_client *c2 = NULL;
  dlock_client_options co = {0};
  co.url = srv.url;
  ASSERT_STATUS(dlock_client_new(&c2, &co), DLOCK_EINVAL);
  ASSERT(c2 == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "call dlock_client_options_init() on it first");

  dlock_mutex *m = NULL;
  dlock_mutex_options mo;
  memset(&mo, 0xff, sizeof mo); /* garbage, as on the stack */
  ASSERT_STATUS(dlock_mutex_new(&m, c, "abi:m", &mo), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "dlock_mutex_options_init()");

  dlock_lock_info li = {0};
  ASSERT_STATUS(dlock_lock_info_get(c, "abi:m", &li), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "dlock_lock_info_init()");

  dlock_sched *s = NULL;
  dlock_sched_options so = {0};
  ASSERT_STATUS(dlock_sched_new(&s, c, &so), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "dlock_sched_options_init()");

  ASSERT_OK(dlock_sched_new(&s, c, NULL));
  dlock_job_options jo = {0};
  ASSERT_STATUS(dlock_sched_add_fixed_rate(s, "abi:job", 1000, &jo, noop_job, NULL), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "dlock_job_options_init()");
  dlock_sched_free(s);

  dlock_run_record rr[2] = {{0}};
  ASSERT_STATUS(dlock_sched_history(c, "abi:job", rr, 2), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "dlock_run_record_init()");

  char out[64];
  th_redis_cli(&srv, out, sizeof out, "DBSIZE");
  ASSERT_STR_EQ(out, "0"); /* refused before anything reached Redis */
  dlock_client_free(c);
}

TEST(a_struct_from_a_newer_header_is_refused_as_such) {
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = srv.url;
  co.struct_size = sizeof co + 16;
  dlock_client *c = NULL;
  ASSERT_STATUS(dlock_client_new(&c, &co), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "newer dlock.h");
}

/* ---- An older, smaller layout ---- */

/* A copy of 'full' cut to 'size' bytes in a buffer of exactly that size, as
 * a program built against the first dlock.h would pass it. */
static void *older(const void *full, size_t size) {
  void *p = malloc(size);
  if (!p) TEST_FAIL("out of memory");
  memcpy(p, full, size);
  memcpy(p, &size, sizeof size);
  return p;
}

TEST(structs_of_the_first_layout_work_and_only_their_bytes_are_touched) {
  dlock_client_options co;
  dlock_client_options_init(&co);
  co.url = srv.url;
  co.key_prefix = "abi:";
  dlock_client_options *old_co = older(&co, DLOCK__CLIENT_OPTIONS_V1);
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, old_co));
  free(old_co);

  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = 60000;
  mo.owner_info = "old layout";
  dlock_mutex_options *old_mo = older(&mo, DLOCK__MUTEX_OPTIONS_V1);
  dlock_mutex *m = NULL;
  ASSERT_OK(dlock_mutex_new(&m, c, "lock", old_mo));
  free(old_mo);
  ASSERT_OK(dlock_mutex_acquire(m, 0));

  dlock_lock_info li;
  dlock_lock_info_init(&li);
  dlock_lock_info *old_li = older(&li, DLOCK__LOCK_INFO_V1);
  ASSERT_OK(dlock_lock_info_get(c, "lock", old_li));
  dlock_lock_info got; /* what the old program sees: its bytes only */
  memset(&got, 0, sizeof got);
  memcpy(&got, old_li, DLOCK__LOCK_INFO_V1);
  free(old_li);
  ASSERT_EQ(got.struct_size, DLOCK__LOCK_INFO_V1);
  ASSERT_EQ(got.held, 1);
  ASSERT_EQ(got.fence, dlock_mutex_fence(m));
  ASSERT_STR_EQ(got.owner_info, "old layout");
  ASSERT(got.ttl_ms > 50000 && got.ttl_ms <= 60000);
  dlock_mutex_free(m);

  dlock_sched_options so;
  dlock_sched_options_init(&so);
  so.node_name = "old-node";
  dlock_sched_options *old_so = older(&so, DLOCK__SCHED_OPTIONS_V1);
  dlock_sched *s = NULL;
  ASSERT_OK(dlock_sched_new(&s, c, old_so));
  free(old_so);
  dlock_job_options jo;
  dlock_job_options_init(&jo);
  jo.time_zone = "UTC";
  dlock_job_options *old_jo = older(&jo, DLOCK__JOB_OPTIONS_V1);
  ASSERT_OK(dlock_sched_add_cron(s, "job", "0 0 0 1 1 ? 2099", old_jo, noop_job, NULL));
  free(old_jo);
  dlock_sched_free(s);
  dlock_client_free(c);
}

/* The library steps through the array by the caller's struct_size and
 * writes only that much of each record: a buffer of exactly three records
 * of the first layout (no room for a field added later) is filled right. */
TEST(history_records_are_written_with_the_callers_stride) {
  dlock_client *c = test_client(srv.url);
  /* Three runs recorded as the scheduler does. */
  for (int i = 0; i < 3; i++) {
    char out[64];
    th_redis_cli(&srv, out, sizeof out, "LPUSH {abi:hist}:history 'node-%d|%d|%d000|%d000|5|ok'", i, i + 1, i + 10,
                 i + 10);
  }
  dlock_run_record full[3];
  for (int i = 0; i < 3; i++) dlock_run_record_init(&full[i]);
  ASSERT_EQ(dlock_sched_history(c, "abi:hist", full, 3), 3);
  ASSERT_STR_EQ(full[0].node, "node-2");
  ASSERT_EQ(full[2].fence, 1);

  /* Same records at the stride of the first layout: exactly 3 * V1 bytes. */
  size_t v1 = DLOCK__RUN_RECORD_V1;
  char *buf = malloc(3 * v1);
  ASSERT(buf != NULL);
  memset(buf, 0x5a, 3 * v1);
  memcpy(buf, &v1, sizeof v1);
  ASSERT_EQ(dlock_sched_history(c, "abi:hist", (dlock_run_record *)buf, 3), 3);
  for (int i = 0; i < 3; i++) {
    dlock_run_record r;
    memcpy(&r, buf + (size_t)i * v1, v1);
    ASSERT_EQ(r.struct_size, v1);
    ASSERT_STR_EQ(r.node, full[i].node);
    ASSERT_EQ(r.fence, full[i].fence);
    ASSERT_EQ(r.scheduled_unix_ms, full[i].scheduled_unix_ms);
    ASSERT_STR_EQ(r.outcome, "ok");
  }
  free(buf);
  dlock_client_free(c);
}

/* The copy-in of options: a smaller layout keeps the defaults of the
 * fields it lacks (a layout with a field after the first one's end, as the
 * public structs will have once they grow). */
typedef struct fake_options {
  size_t struct_size;
  int old_field;
  int new_field; /* added later: not in the first layout */
} fake_options;

TEST(fields_an_older_layout_lacks_keep_their_defaults) {
  fake_options dst = {sizeof dst, 1, 42};
  struct {
    size_t struct_size;
    int old_field;
  } old = {DLOCK__END_OF(fake_options, old_field), 7};
  ASSERT_OK(dlock__options_in(&dst, sizeof dst, &old, DLOCK__END_OF(fake_options, old_field), "fake_options"));
  ASSERT_EQ(dst.struct_size, sizeof dst);
  ASSERT_EQ(dst.old_field, 7);
  ASSERT_EQ(dst.new_field, 42);

  fake_options cut = {4, 7, 7}; /* shorter than any layout */
  ASSERT_STATUS(dlock__options_in(&dst, sizeof dst, &cut, DLOCK__END_OF(fake_options, old_field), "fake_options"),
                DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "fake_options.struct_size is 4");
}

TEST_MAIN()
