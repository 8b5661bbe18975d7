/*
 * validate.c - checks of caller input (names, durations) and of fencing
 * tokens read from the server. Names become keys, paths and hash tags, so braces
 * and line breaks are out.
 */
#include <string.h>

#include "internal.h"

int dlock__check_name(const char *what, const char *name) {
  if (!name) return dlock__error(DLOCK_ENAME, "%s is NULL", what);
  size_t len = strnlen(name, DLOCK_MAX_NAME_LEN + 1);
  if (len == 0) return dlock__error(DLOCK_ENAME, "%s is empty", what);
  if (len > DLOCK_MAX_NAME_LEN)
    return dlock__error(DLOCK_ENAME, "%s is longer than %d bytes", what, DLOCK_MAX_NAME_LEN);
  for (size_t i = 0; i < len; i++) {
    char ch = name[i];
    if (ch == '\r' || ch == '\n')
      return dlock__error(DLOCK_ENAME, "%s '%.40s' contains a line break at byte %zu", what, name, i);
    if (ch == '{' || ch == '}')
      return dlock__error(DLOCK_ENAME,
                          "%s '%.40s' contains '%c' at byte %zu; braces are reserved for "
                          "dlock's hash tags",
                          what, name, ch, i);
  }
  return 0;
}

int dlock__check_duration(const char *what, int64_t ms, int allow_zero) {
  if (ms < 0 || (ms == 0 && !allow_zero) || ms > DLOCK_MAX_DURATION_MS)
    return dlock__error(DLOCK_ERANGE, "%s is %lld ms; it must be %s1..%lld ms", what, (long long)ms,
                        allow_zero ? "0 or " : "", (long long)DLOCK_MAX_DURATION_MS);
  return 0;
}

int dlock__parse_fence(const char *s, size_t len, uint64_t *out) {
  if (!s || len == 0 || len > 19 || (s[0] == '0' && len > 1)) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (uint64_t)(s[i] - '0'); /* 19 digits fit in 64 bits */
  }
  if (v > (uint64_t)INT64_MAX) return -1;
  *out = v;
  return 0;
}
