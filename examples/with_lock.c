/*
 * with_lock.c - the one-call tier: run a function while holding a lock.
 * Build: cc with_lock.c $(pkg-config --cflags --libs dlock) -o with_lock
 */
#include <inttypes.h>
#include <stdio.h>

#include <dlock.h>

static int close_unpaid_orders(uint64_t fence, void *arg) {
  (void)arg;
  printf("closing unpaid orders under fence %" PRIu64 "\n", fence);
  return 0;
}

int main(void) {
  dlock_client *c;
  if (dlock_client_new(&c, NULL) != 0) {
    fprintf(stderr, "with_lock: %s\n", dlock_last_error());
    return 1;
  }
  int rc = dlock_with_lock(c, "jobs:close-unpaid-orders", 0, close_unpaid_orders, NULL);
  if (rc == DLOCK_EBUSY)
    printf("another node is running it\n");
  else if (rc < 0)
    fprintf(stderr, "with_lock: %s: %s\n", dlock_err_name(rc), dlock_last_error());
  dlock_client_free(c);
  return rc < 0 && rc != DLOCK_EBUSY ? 1 : 0;
}
