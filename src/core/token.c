/*
 * token.c - unguessable owner tokens and ids from the OS (getrandom(2)).
 * Never derived from time, pid or thread id: a token proves ownership.
 *
 * One getrandom(2) per token cost about 1% of an uncontended lock cycle, so
 * bytes are drawn a page at a time into a buffer that the kernel wipes in a
 * forked child (MADV_WIPEONFORK): a child can never hand out its parent's
 * next tokens, whatever way it was forked. Where the kernel cannot wipe on
 * fork, every token comes from its own getrandom(2), as before.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "internal.h"

#define POOL_BYTES 4096

/* The pool's first word counts the unused bytes at its end; zero in a
 * forked child (wiped), which refills before use. */
typedef struct pool {
  size_t left;
  unsigned char bytes[POOL_BYTES - sizeof(size_t)];
} pool;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pool *the_pool; /* NULL: no wipe-on-fork here, no pool */

/* A fork while another thread draws must not leave the child's lock held. */
static void fork_prepare(void) { pthread_mutex_lock(&pool_mu); }
static void fork_done(void) { pthread_mutex_unlock(&pool_mu); }

static void pool_map(void) {
#ifdef MADV_WIPEONFORK
  if (pthread_atfork(fork_prepare, fork_done, fork_done) != 0) return;
  void *p = mmap(NULL, sizeof(pool), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  if (madvise(p, sizeof(pool), MADV_WIPEONFORK) != 0) {
    munmap(p, sizeof(pool));
    return;
  }
  the_pool = p;
#endif
}

static int fill(unsigned char *buf, size_t nbytes) {
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = getrandom(buf + got, nbytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return dlock__error(DLOCK_ESYS, "getrandom failed: %s", strerror(errno));
    }
    got += (size_t)n;
  }
  return 0;
}

/* 'nbytes' random bytes into 'buf': from the pool, refilled when short. */
static int draw(unsigned char *buf, size_t nbytes) {
  pthread_once(&pool_once, pool_map);
  if (!the_pool || nbytes > sizeof the_pool->bytes) return fill(buf, nbytes);
  pthread_mutex_lock(&pool_mu);
  int rc = 0;
  if (the_pool->left < nbytes || the_pool->left > sizeof the_pool->bytes) {
    rc = fill(the_pool->bytes, sizeof the_pool->bytes);
    the_pool->left = rc ? 0 : sizeof the_pool->bytes;
  }
  if (!rc) {
    /* Taken from the end, and wiped here: no byte is handed out twice. */
    the_pool->left -= nbytes;
    memcpy(buf, the_pool->bytes + the_pool->left, nbytes);
    memset(the_pool->bytes + the_pool->left, 0, nbytes);
  }
  pthread_mutex_unlock(&pool_mu);
  return rc;
}

int dlock__random_hex(char *out, size_t nbytes) {
  static const char hex[] = "0123456789abcdef";
  unsigned char buf[64];
  if (nbytes > sizeof buf) return dlock__error(DLOCK_EINVAL, "token too long");
  int rc = draw(buf, nbytes);
  if (rc) return rc;
  for (size_t i = 0; i < nbytes; i++) {
    out[2 * i] = hex[buf[i] >> 4];
    out[2 * i + 1] = hex[buf[i] & 15];
  }
  out[2 * nbytes] = '\0';
  return 0;
}
