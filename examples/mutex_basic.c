/*
 * mutex_basic.c - acquire a lock, use its fencing token, release it.
 * Build: cc mutex_basic.c $(pkg-config --cflags --libs dlock) -o mutex_basic
 * Run:   DLOCK_URL=redis://127.0.0.1:6379 ./mutex_basic
 */
#include <inttypes.h>
#include <stdio.h>

#include <dlock.h>

int main(void) {
  dlock_client *c;
  if (dlock_client_new(&c, NULL) != 0) {
    fprintf(stderr, "mutex_basic: %s\n", dlock_last_error());
    return 1;
  }
  dlock_mutex *m;
  if (dlock_mutex_new(&m, c, "example:stock", NULL) != 0) {
    fprintf(stderr, "mutex_basic: %s\n", dlock_last_error());
    dlock_client_free(c);
    return 1;
  }
  int rc = dlock_mutex_acquire(m, 5000);
  if (rc == 0) {
    uint64_t fence = dlock_mutex_fence(m);
    printf("acquired with fence %" PRIu64 "\n", fence);
    if (dlock_guard_check(c, "example:stock", fence) == DLOCK_ESTALE)
      printf("a newer holder has written: skip the write\n");
    rc = dlock_mutex_release(m);
  }
  if (rc != 0) fprintf(stderr, "mutex_basic: %s: %s\n", dlock_err_name(rc), dlock_mutex_errmsg(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
  return rc == 0 ? 0 : 1;
}
