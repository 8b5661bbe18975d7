/*
 * fuzz.h - what the libFuzzer targets in this directory share.
 *
 * Each target is one LLVMFuzzerTestOneInput() over an internal entry point
 * of libdlock (or the CLI's duration parser). A broken invariant calls
 * FUZZ_CHECK, which aborts so that libFuzzer records the input as a crash.
 */
#ifndef DLOCK_FUZZ_H
#define DLOCK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "fuzz: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

/* 'data' as a NUL-terminated string (malloc'd: ASan sees overreads). */
static inline char *fuzz_string(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return NULL;
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

#endif
