/*
 * backend.c - the scheme registry: every URL scheme libdlock knows, the
 * backend that takes it, and the choice among them. It is the one place of
 * the core that names a server technology; everyone else asks it
 * (dlock__backend_for, dlock_url_backend, dlock_url_redact). A new backend
 * adds its rows to 'schemes' (and its ops below), nothing else here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The backends' tables; a backend this build leaves out is NULL. */
extern const dlock__backend_ops dlock__redis_ops;
#define REDIS_OPS (&dlock__redis_ops)
#ifdef DLOCK_WITH_ZOOKEEPER
extern const dlock__backend_ops dlock__zk_ops;
#define ZK_OPS (&dlock__zk_ops)
#else
#define ZK_OPS NULL
#endif
#ifdef DLOCK_WITH_POSTGRES
extern const dlock__backend_ops dlock__pg_ops;
#define PG_OPS (&dlock__pg_ops)
#else
#define PG_OPS NULL
#endif
#ifdef DLOCK_WITH_MYSQL
extern const dlock__backend_ops dlock__mysql_ops;
#define MYSQL_OPS (&dlock__mysql_ops)
#else
#define MYSQL_OPS NULL
#endif

/* A prefix "" stands for libpq's keyword/value form: no "://", a '='. */
#define KEYWORD_VALUE ""

static const struct scheme {
  const char *prefix;            /* "zk://" */
  const char *display;           /* the backend's name in messages */
  const dlock__backend_ops *ops; /* NULL: this build leaves the backend out */
  const char *option, *package;  /* the CMake option that builds it in, and what that needs */
} schemes[] = {
    /* The first row is the default backend's (no URL: redis://127.0.0.1:6379). */
    {"redis://", "Redis", REDIS_OPS, NULL, NULL},
    {"rediss://", "Redis", REDIS_OPS, NULL, NULL},
    {"unix://", "Redis", REDIS_OPS, NULL, NULL},
    {"redis-sentinel://", "Redis", REDIS_OPS, NULL, NULL},
    {"redis-cluster://", "Redis", REDIS_OPS, NULL, NULL},
    {"rediss-cluster://", "Redis", REDIS_OPS, NULL, NULL},
    {"redlock://", "Redis", REDIS_OPS, NULL, NULL},
    {"zk://", "ZooKeeper", ZK_OPS, "DLOCK_WITH_ZOOKEEPER", "libzookeeper-mt-dev"},
    {"postgres://", "PostgreSQL", PG_OPS, "DLOCK_WITH_POSTGRES", "libpq-dev"},
    {"postgresql://", "PostgreSQL", PG_OPS, "DLOCK_WITH_POSTGRES", "libpq-dev"},
    {KEYWORD_VALUE, "PostgreSQL", PG_OPS, "DLOCK_WITH_POSTGRES", "libpq-dev"},
    {"mysql://", "MySQL", MYSQL_OPS, "DLOCK_WITH_MYSQL", "libmariadb-dev"},
    {"mariadb://", "MySQL", MYSQL_OPS, "DLOCK_WITH_MYSQL", "libmariadb-dev"},
};
#define NSCHEMES (sizeof schemes / sizeof schemes[0])

static int matches(const struct scheme *s, const char *url) {
  if (!*s->prefix) return !strstr(url, "://") && strchr(url, '=');
  return !strncmp(url, s->prefix, strlen(s->prefix));
}

/* The row for 'url' (NULL or "": the default), or NULL. */
static const struct scheme *lookup(const char *url) {
  if (!url || !*url) return &schemes[0];
  for (size_t i = 0; i < NSCHEMES; i++)
    if (matches(&schemes[i], url)) return &schemes[i];
  return NULL;
}

/* EURL for a URL no row takes, listing the schemes. */
static int unknown_scheme(const char *url) {
  char shown[512], known[512];
  size_t k = 0;
  dlock_url_redact(url, shown, sizeof shown);
  known[0] = '\0';
  for (size_t i = 0; i < NSCHEMES && k < sizeof known; i++)
    k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                          *schemes[i].prefix ? schemes[i].prefix : "key=value (libpq)");
  return dlock__error(DLOCK_EURL, "bad URL '%.200s': unknown scheme; libdlock takes %s (README.md, Connecting)", shown,
                      known);
}

const dlock__backend_ops *dlock__backend_for(const char *url, int *rc) {
  const struct scheme *s = lookup(url);
  if (!s) {
    *rc = unknown_scheme(url);
    return NULL;
  }
  if (s->ops) return s->ops;
  char shown[512];
  dlock_url_redact(url, shown, sizeof shown);
  *rc = dlock__error(DLOCK_EURL,
                     "'%.200s' is a %s URL, but this libdlock was built without the %s backend: "
                     "rebuild with -D%s=ON (it needs %s)",
                     shown, s->display, s->display, s->option, s->package);
  return NULL;
}

const dlock__backend_ops *dlock__backend_for_options(const dlock_client_options *o, const char *url, int *rc) {
  for (size_t i = 0; i < NSCHEMES; i++)
    if (schemes[i].ops && schemes[i].ops->takes_options && schemes[i].ops->takes_options(o)) return schemes[i].ops;
  return dlock__backend_for(url, rc);
}

/* Leaves dlock_last_error() alone unless the scheme is unknown: callers ask
 * it while reporting another call's failure. */
const char *dlock_url_backend(const char *url) {
  if (!url || !*url) url = getenv("DLOCK_URL");
  const struct scheme *s = lookup(url);
  if (!s) {
    unknown_scheme(url);
    return NULL;
  }
  return s->display;
}

void dlock_url_redact(const char *url, char *buf, size_t len) {
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!url) return;
  const struct scheme *s = lookup(url);
  if (s && s->ops) {
    s->ops->redact(url, buf, len);
    return;
  }
  if (s && strstr(url, "digest=")) {
    /* A backend this build leaves out: hide everything after the first
     * place a secret could be in (?digest=user:password). */
    const char *d = strstr(url, "digest=");
    snprintf(buf, len, "%.*s***", (int)(d - url) + 7, url);
    return;
  }
  /* The default backend's redaction masks userinfo and password parameters,
   * also in a URL it cannot parse. */
  schemes[0].ops->redact(url, buf, len);
}
