/*
 * client.c - dlock_client: pick the backend by the URL's scheme, let it
 * connect, and stop the background threads at free. Backend-neutral: the
 * backends are in backend.c's list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DEFAULT_MAX_CONNECTIONS 64
#define MAX_CONNECTIONS 1024

void dlock_client_options_init(dlock_client_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

/* A prefix is a whole key segment: "app" is used as "app:", so that no name
 * under "app" can spell a key of "app2:" (docs/keys.md). Whatever the
 * topology. Also the client's random id. */
static int set_prefix(dlock_client *c, const char *pre) {
  if (!pre) pre = "";
  size_t plen = strlen(pre);
  int colon = plen > 0 && pre[plen - 1] != ':';
  if (!(c->prefix = malloc(plen + 2))) return dlock__error(DLOCK_ENOMEM, "out of memory");
  snprintf(c->prefix, plen + 2, "%s%s", pre, colon ? ":" : "");
  c->prefix_len = plen + (size_t)colon;
  return dlock__random_hex(c->id, 8);
}

int dlock_client_new(dlock_client **out, const dlock_client_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_client_new: 'out' is NULL");
  *out = NULL;
  dlock_client_options o;
  dlock_client_options_init(&o);
  int rc = dlock__options_in(&o, sizeof o, opts, DLOCK__CLIENT_OPTIONS_V1, "dlock_client_options");
  if (rc) return rc;
  if (o.key_prefix && *o.key_prefix && (rc = dlock__check_name("key prefix", o.key_prefix))) return rc;
  if (o.max_connections < 0 || o.max_connections > MAX_CONNECTIONS)
    return dlock__error(DLOCK_ERANGE, "max_connections is %d; it must be 0 (default %d) or 1..%d", o.max_connections,
                        DEFAULT_MAX_CONNECTIONS, MAX_CONNECTIONS);

  const char *url = o.url ? o.url : getenv("DLOCK_URL");
  if (url && !*url) url = NULL;
  const dlock__backend_ops *ops = dlock__backend_for_options(&o, url, &rc);
  if (!ops) return rc;
  dlock_client *c = calloc(1, sizeof *c);
  if (!c) return dlock__error(DLOCK_ENOMEM, "out of memory");
  c->ops = ops;
  pthread_mutex_init(&c->lazy_mu, NULL);
  rc = set_prefix(c, o.key_prefix);
  if (!rc) rc = dlock__metrics_new(c, &o);
  if (!rc) rc = ops->open(c, &o, url);
  if (rc) {
    dlock_client_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void dlock_client_free(dlock_client *c) {
  if (!c) return;
  atomic_store(&c->closing, 1);
  dlock__watchdog_stop(c);
  dlock__metrics_stop(c); /* the events queued are delivered first */
  if (c->ops) c->ops->close(c);
  dlock__metrics_free(c);
  pthread_mutex_destroy(&c->lazy_mu);
  free(c->prefix);
  free(c);
}

const char *dlock_client_server(const dlock_client *c) { return c ? c->server : ""; }
const char *dlock_client_warnings(const dlock_client *c) { return c ? c->warnings : ""; }

int dlock_client_topology_warning(dlock_client *c, char *buf, size_t len) {
  if (!buf || !len) return 0;
  buf[0] = '\0';
  if (!c) return 0;
  int rc = dlock__query(c, DLOCK__Q_TOPOLOGY_WARNING, 0, buf, len);
  return rc > 0 ? rc : 0;
}

int dlock__query_none(dlock_client *c, int what, int node, void *out, size_t len) {
  (void)c, (void)what, (void)node, (void)out, (void)len;
  return DLOCK__QUERY_NOT_OFFERED;
}

int dlock__query(dlock_client *c, int what, int node, void *out, size_t len) {
  return c->ops->query(c, what, node, out, len);
}

const char *dlock__deployment_suffix(dlock_client *c, char *buf, size_t len) {
  char name[64] = "";
  if (dlock__query(c, DLOCK__Q_DEPLOYMENT, 0, name, sizeof name) > 0)
    snprintf(buf, len, ", %s", name);
  else if (len)
    buf[0] = 0;
  return buf;
}

int dlock_client_ping(dlock_client *c) {
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_client_ping: client is NULL");
  return c->ops->ping(c);
}

int dlock_client_setup(dlock_client *c) {
  dlock__error_clear();
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_client_setup: client is NULL");
  if (c->ops->admin && c->ops->admin->setup) {
    int rc = c->ops->admin->setup(c);
    if (!rc) dlock__error_clear();
    return rc;
  }
  /* Success, and dlock_last_error() says why nothing was made. */
  dlock__error(0, "nothing to create on %s (the %s backend): what it keeps is made as locks are taken", c->server,
               c->ops->name);
  return 0;
}

const char *dlock_client_backend(const dlock_client *c) { return c ? c->ops->name : ""; }
