/*
 * backend.c - the list of backends this build has, and the choice among
 * them by the URL's scheme.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const dlock__backend_ops *const backends[] = {
    &dlock__redis_ops,
#ifdef DLOCK_WITH_ZOOKEEPER
    &dlock__zk_ops,
#endif
#ifdef DLOCK_WITH_POSTGRES
    &dlock__pg_ops,
#endif
#ifdef DLOCK_WITH_MYSQL
    &dlock__mysql_ops,
#endif
};

/* Schemes of backends a build may leave out, and the option that adds them. */
static const struct {
  const char *prefix, *backend, *option, *package;
} optional[] = {
    {"zk://", "ZooKeeper", "DLOCK_WITH_ZOOKEEPER", "libzookeeper-mt-dev"},
    {"postgres://", "PostgreSQL", "DLOCK_WITH_POSTGRES", "libpq-dev"},
    {"postgresql://", "PostgreSQL", "DLOCK_WITH_POSTGRES", "libpq-dev"},
    {"mysql://", "MySQL", "DLOCK_WITH_MYSQL", "libmariadb-dev"},
    {"mariadb://", "MySQL", "DLOCK_WITH_MYSQL", "libmariadb-dev"},
};

static const dlock__backend_ops *find(const char *url) {
  if (!url) return &dlock__redis_ops;
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
    if (backends[i]->url_is(url)) return backends[i];
  return NULL;
}

const dlock__backend_ops *dlock__backend_for(const char *url, int *rc) {
  const dlock__backend_ops *ops = find(url);
  if (ops) return ops;
  char shown[512];
  dlock_url_redact(url, shown, sizeof shown);
  for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
    if (!strncmp(url, optional[i].prefix, strlen(optional[i].prefix))) {
      *rc = dlock__error(DLOCK_EURL, "'%.200s' is a %s URL, but this libdlock was built without the %s backend: "
                         "rebuild with -D%s=ON (it needs %s)", shown, optional[i].backend, optional[i].backend,
                         optional[i].option, optional[i].package);
      return NULL;
    }
  /* Anything else is parsed as Redis, whose parser says what is wrong. */
  return &dlock__redis_ops;
}

void dlock_url_redact(const char *url, char *buf, size_t len) {
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!url) return;
  const dlock__backend_ops *ops = find(url);
  if (ops) {
    ops->redact(url, buf, len);
    return;
  }
  if (!strncmp(url, "zk://", 5)) {
    /* A backend this build leaves out: hide everything after the scheme's
     * secrets could be in (ZooKeeper's ?digest=user:password). */
    const char *d = strstr(url, "digest=");
    snprintf(buf, len, "%.*s%s", d ? (int)(d - url) + 7 : (int)strlen(url), url, d ? "***" : "");
    return;
  }
  dlock__redis_ops.redact(url, buf, len);
}
