/*
 * fuzz_duration.c - the CLI's duration and number parsers (cli/duration.c,
 * compiled into this target).
 *
 * A parsed duration lies in 0..DLOCK_MAX_DURATION_MS, and writing it back
 * with cli_format_duration() fits its buffer; cli_parse_u64 stays within
 * its maximum and agrees with strtoull on what it accepts.
 */
#include <errno.h>

#include "cli.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_string(data, size);
  if (!text) return 0;
  int64_t ms = -12345;
  if (cli_parse_duration(text, &ms) == 0) {
    FUZZ_CHECK(ms >= 0 && ms <= DLOCK_MAX_DURATION_MS);
    char buf[32];
    cli_format_duration(ms, buf, sizeof buf);
    FUZZ_CHECK(strlen(buf) < sizeof buf);
    /* Whole seconds read back as the same number of milliseconds. */
    if (ms % 1000 == 0) {
      char again[32];
      int64_t back = -1;
      snprintf(again, sizeof again, "%llds", (long long)(ms / 1000));
      FUZZ_CHECK(cli_parse_duration(again, &back) == 0 && back == ms);
    }
  } else {
    FUZZ_CHECK(ms == -12345); /* untouched on failure */
  }
  static const uint64_t maxes[] = {0, 9, 10, 65535, UINT64_MAX};
  for (size_t i = 0; i < sizeof maxes / sizeof maxes[0]; i++) {
    uint64_t v = 0;
    if (cli_parse_u64(text, maxes[i], &v) == 0) {
      FUZZ_CHECK(v <= maxes[i]);
      errno = 0;
      FUZZ_CHECK(strtoull(text, NULL, 10) == v && errno == 0);
    }
  }
  free(text);
  return 0;
}
