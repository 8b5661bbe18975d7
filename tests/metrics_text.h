/*
 * metrics_text.h - reading a client's metrics in the tests: the Prometheus
 * text (dlock_client_metrics_snprint) and the value of a series in it. One
 * helper for the conformance contract (tests/conformance/contract.c) and the
 * metrics test (tests/integration/test_metrics.c). Needs test.h first.
 */
#ifndef DLOCK_TEST_METRICS_TEXT_H
#define DLOCK_TEST_METRICS_TEXT_H

#include <stdlib.h>
#include <string.h>

#include "dlock.h"

/* The exposition of 'c' (Prometheus format), in a static buffer; fails the
 * test when the call fails or the text does not fit. */
static inline const char *mt_exposition(dlock_client *c) {
  static char buf[1 << 17];
  int n = dlock_client_metrics_snprint(c, buf, sizeof buf, DLOCK_METRICS_PROMETHEUS);
  if (n < 0 || (size_t)n >= sizeof buf) TEST_FAIL("metrics_snprint: %d: %s", n, dlock_last_error());
  return buf;
}

/* The sum of the values of the series of 'text' whose name and labels begin
 * with 'prefix' ("dlock_losses_total{kind=\"mutex\","); with 'exact', only the
 * series written exactly so. '*found' (may be NULL): how many were summed. */
static inline double mt_sum(const char *text, const char *prefix, int exact, int *found) {
  size_t len = strlen(prefix);
  double sum = 0;
  int n = 0;
  for (const char *line = text; *line != '\0';) {
    const char *sp = strchr(line, ' ');
    if (strncmp(line, prefix, len) == 0 && sp != NULL && (!exact || sp == line + len)) {
      sum += atof(sp + 1);
      n++;
    }
    const char *nl = strchr(line, '\n');
    if (nl == NULL) break;
    line = nl + 1;
  }
  if (found != NULL) *found = n;
  return sum;
}

#endif /* DLOCK_TEST_METRICS_TEXT_H */
