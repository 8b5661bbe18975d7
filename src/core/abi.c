/*
 * abi.c - the library's version at run time, and the ABI rule of the
 * structs the caller allocates (see the top of dlock.h): each begins with
 * struct_size, set by its _init, and the library uses only that many bytes,
 * so that programs built against an older dlock.h keep working.
 */
#include <string.h>

#include "internal.h"

const char *dlock_version(void) { return DLOCK_VERSION; }

int dlock_version_number(void) { return DLOCK_VERSION_NUMBER; }

int dlock__struct_check(const void *given, size_t min, size_t full, const char *type) {
  size_t size;
  memcpy(&size, given, sizeof size); /* struct_size is the first member */
  if (size >= min && size <= full) return 0;
  if (size > full && size <= 64 * 1024)
    return dlock__error(DLOCK_EINVAL,
                        "%s.struct_size is %zu, larger than this libdlock %s knows (%zu): the program "
                        "was built against a newer dlock.h; link it with that libdlock",
                        type, size, DLOCK_VERSION, full);
  return dlock__error(DLOCK_EINVAL,
                      "%s.struct_size is %zu, not a size of this struct (%zu..%zu): call %s_init() "
                      "on it first, then set its fields",
                      type, size, min, full, type);
}

int dlock__options_in(void *dst, size_t full, const void *src, size_t min, const char *type) {
  if (src == NULL) return 0;
  int rc = dlock__struct_check(src, min, full, type);
  if (rc) return rc;
  size_t size;
  memcpy(&size, src, sizeof size);
  memcpy(dst, src, size);
  memcpy(dst, &full, sizeof full); /* the copy is of the full layout */
  return 0;
}
