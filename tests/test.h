/*
 * test.h - a tiny test registry in the spirit of libuv's runner.
 *
 * A test file defines tests with TEST(name) { ... } and ends with TEST_MAIN().
 * Each test is a sentence-like name; ASSERT_* report file, line and values and
 * end that test (the rest still run). The process exits 1 if any test failed.
 * TEST_SKIP(why) ends a test that cannot run here (a missing resource, not a
 * failure) and says why; when every test that ran was skipped the process
 * exits TEST_EXIT_SKIP, which ctest reports as "Skipped" (SKIP_RETURN_CODE).
 * Argument: a substring to run only the matching tests.
 *
 * REVIEW_TEST(name) is a TEST that stands for a review's finding (a
 * regression test since its fix), filed with the tests of its subject. A
 * file that has some is run twice by ctest: "--no-review" runs the others
 * (its integration run), "--review" only these (ctest review/NAME, label
 * review: the plain build only, tools/test.sh); then the substring.
 */
#ifndef DLOCK_TEST_H
#define DLOCK_TEST_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlock.h"

typedef void (*test_fn)(void);
struct test_entry {
  const char *name;
  test_fn fn;
  int review;
};

#define TEST_MAX 256
extern struct test_entry test__list[TEST_MAX];
extern int test__count;
extern jmp_buf test__jmp;
extern int test__failed_here;
extern int test__skipped_here;

/* Exit status of a test binary whose tests were all skipped (automake's 77). */
#define TEST_EXIT_SKIP 77

#define TEST_REGISTER_(name, is_review)                                                                         \
  static void test_##name(void);                                                                                \
  __attribute__((constructor)) static void test__reg_##name(void) {                                             \
    if (test__count < TEST_MAX) test__list[test__count++] = (struct test_entry){#name, test_##name, is_review}; \
  }                                                                                                             \
  static void test_##name(void)
#define TEST(name) TEST_REGISTER_(name, 0)
#define REVIEW_TEST(name) TEST_REGISTER_(name, 1)

#define TEST_FAIL(...)                                     \
  do {                                                     \
    fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                          \
    fprintf(stderr, "\n");                                 \
    test__failed_here = 1;                                 \
    longjmp(test__jmp, 1);                                 \
  } while (0)

#define TEST_SKIP(...)      \
  do {                      \
    printf("  SKIP: ");     \
    printf(__VA_ARGS__);    \
    printf("\n");           \
    test__skipped_here = 1; \
    longjmp(test__jmp, 1);  \
  } while (0)

#define ASSERT(cond)                                       \
  do {                                                     \
    if (!(cond)) TEST_FAIL("assertion failed: %s", #cond); \
  } while (0)
#define ASSERT_EQ(a, b)                                                \
  do {                                                                 \
    long long a_ = (long long)(a), b_ = (long long)(b);                \
    if (a_ != b_) TEST_FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_); \
  } while (0)
#define ASSERT_OK(expr)                                                                                      \
  do {                                                                                                       \
    int rc_ = (expr);                                                                                        \
    if (rc_ != 0) TEST_FAIL("%s returned %d (%s): %s", #expr, rc_, dlock_err_name(rc_), dlock_last_error()); \
  } while (0)
#define ASSERT_STATUS(expr, want)                                                                                \
  do {                                                                                                           \
    int rc_ = (expr);                                                                                            \
    if (rc_ != (want))                                                                                           \
      TEST_FAIL("%s returned %d (%s), want %s: %s", #expr, rc_, dlock_err_name(rc_), #want, dlock_last_error()); \
  } while (0)
#define ASSERT_STR_EQ(a, b)                                                           \
  do {                                                                                \
    const char *a_ = (a), *b_ = (b);                                                  \
    if (strcmp(a_, b_) != 0) TEST_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_, b_); \
  } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                                 \
  do {                                                                                               \
    const char *h_ = (hay), *n_ = (needle);                                                          \
    if (!h_ || !strstr(h_, n_)) TEST_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_); \
  } while (0)

/* A client of the server at 'url' with default options; fails the test if
 * it cannot connect. */
static inline dlock_client *test_client(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  dlock_client *c = NULL;
  if (dlock_client_new(&c, &o) != 0) TEST_FAIL("client of %s: %s", url, dlock_last_error());
  return c;
}

/* A mutex handle with a fixed lease ('lease_ms' 0: watchdog mode). */
static inline dlock_mutex *test_mutex(dlock_client *c, const char *name, int64_t lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(&m, c, name, &mo) != 0) TEST_FAIL("mutex '%s': %s", name, dlock_last_error());
  return m;
}

/* A semaphore handle of 'permits' with a fixed lease ('lease_ms' 0: watchdog mode). */
static inline dlock_semaphore *test_semaphore(dlock_client *c, const char *name, int permits, int64_t lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  dlock_semaphore *s = NULL;
  if (dlock_semaphore_new(&s, c, name, permits, &mo) != 0) TEST_FAIL("semaphore '%s': %s", name, dlock_last_error());
  return s;
}

/* A read-write lock handle on 'side' (DLOCK_RW_READ or _WRITE), likewise. */
static inline dlock_rwlock *test_rwlock(dlock_client *c, const char *name, int side, int64_t lease_ms) {
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = lease_ms;
  dlock_rwlock *rw = NULL;
  if (dlock_rwlock_new(&rw, c, name, side, &mo) != 0) TEST_FAIL("rwlock '%s': %s", name, dlock_last_error());
  return rw;
}

/* Hooks a test file may define (weak): run once around all tests. */
void test_setup(void) __attribute__((weak));
void test_teardown(void) __attribute__((weak));

#define TEST_MAIN()                                                                           \
  struct test_entry test__list[TEST_MAX];                                                     \
  int test__count;                                                                            \
  jmp_buf test__jmp;                                                                          \
  int test__failed_here;                                                                      \
  int test__skipped_here;                                                                     \
  int main(int argc, char **argv) {                                                           \
    volatile int failed = 0, ran = 0, skipped = 0, review = -1;                               \
    setvbuf(stdout, NULL, _IONBF, 0);                                                         \
    const char *volatile only = argc > 1 ? argv[1] : NULL;                                    \
    if (only && (!strcmp(only, "--review") || !strcmp(only, "--no-review"))) {                \
      review = !strcmp(only, "--review");                                                     \
      only = argc > 2 ? argv[2] : NULL;                                                       \
    }                                                                                         \
    void (*volatile setup_)(void) = test_setup;                                               \
    void (*volatile teardown_)(void) = test_teardown;                                         \
    if (setup_) setup_();                                                                     \
    for (volatile int i = 0; i < test__count; i++) {                                          \
      if (only && !strstr(test__list[i].name, only)) continue;                                \
      if (review >= 0 && test__list[i].review != review) continue;                            \
      printf("test %s ...\n", test__list[i].name);                                            \
      test__failed_here = 0;                                                                  \
      test__skipped_here = 0;                                                                 \
      if (setjmp(test__jmp) == 0) test__list[i].fn();                                         \
      ran++;                                                                                  \
      if (test__failed_here)                                                                  \
        failed++;                                                                             \
      else if (test__skipped_here)                                                            \
        skipped++;                                                                            \
      printf("  %s\n", test__failed_here ? "FAILED" : test__skipped_here ? "skipped" : "ok"); \
    }                                                                                         \
    if (teardown_) teardown_();                                                               \
    if (skipped)                                                                              \
      printf("%d passed, %d failed, %d skipped\n", ran - failed - skipped, failed, skipped);  \
    else                                                                                      \
      printf("%d passed, %d failed\n", ran - failed, failed);                                 \
    if (failed || ran == 0) return 1;                                                         \
    return skipped == ran ? TEST_EXIT_SKIP : 0;                                               \
  }

#endif
