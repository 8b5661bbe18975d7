/*
 * client.c - dlock_client: parse the URL and options, set up the topology,
 * check that the server answers, and stop the background threads at free.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define DEFAULT_TIMEOUT_MS 2000
#define DEFAULT_MAX_CONNECTIONS 64
#define MAX_CONNECTIONS 1024

void dlock_client_options_init(dlock_client_options *opts) {
  if (opts) memset(opts, 0, sizeof *opts);
}

/* Replace *field with a copy of 'value' when given. */
static int override(char **field, const char *value) {
  if (!value) return 0;
  char *copy = strdup(value);
  if (!copy) return dlock__error(DLOCK_ENOMEM, "out of memory");
  free(*field);
  *field = copy;
  return 0;
}

static int check_timeout(const char *what, int ms) {
  if (ms < 0 || ms > 3600 * 1000)
    return dlock__error(DLOCK_ERANGE, "%s is %d ms; it must be 0 (default) or 1..3600000", what, ms);
  return 0;
}

static int build_endpoint(const dlock_client_options *o, dlock__endpoint *ep) {
  const char *url = o->url ? o->url : getenv("DLOCK_URL");
  if (!url || !*url) url = DEFAULT_URL;
  int rc;
  if ((rc = check_timeout("connect_timeout_ms", o->connect_timeout_ms)) ||
      (rc = check_timeout("command_timeout_ms", o->command_timeout_ms)))
    return rc;
  if ((rc = dlock__url_parse(url, ep))) return rc;
  if ((rc = override(&ep->username, o->username)) || (rc = override(&ep->password, o->password)) ||
      (rc = override(&ep->tls_ca_file, o->tls_ca_file)) || (rc = override(&ep->tls_cert_file, o->tls_cert_file)) ||
      (rc = override(&ep->tls_key_file, o->tls_key_file)) ||
      (rc = override(&ep->tls_server_name, o->tls_server_name))) {
    dlock__endpoint_clear(ep);
    return rc;
  }
  if (o->tls_skip_verify) ep->tls_skip_verify = 1;
  if (!ep->tls && (ep->tls_ca_file || ep->tls_cert_file || ep->tls_key_file || ep->tls_server_name)) {
    dlock__endpoint_clear(ep);
    return dlock__error(DLOCK_EINVAL, "TLS files or server name given, but the URL '%.200s' is not "
                        "rediss://; use rediss:// for TLS", url);
  }
  ep->connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
  ep->command_timeout_ms = o->command_timeout_ms ? o->command_timeout_ms : DEFAULT_TIMEOUT_MS;
  return 0;
}

int dlock_client_new(dlock_client **out, const dlock_client_options *opts) {
  dlock__error_clear();
  if (!out) return dlock__error(DLOCK_EINVAL, "dlock_client_new: 'out' is NULL");
  *out = NULL;
  dlock_client_options o;
  if (opts) o = *opts; else dlock_client_options_init(&o);
  int rc;
  if (o.key_prefix && *o.key_prefix && (rc = dlock__check_name("key prefix", o.key_prefix))) return rc;
  if (o.max_connections < 0 || o.max_connections > MAX_CONNECTIONS)
    return dlock__error(DLOCK_ERANGE, "max_connections is %d; it must be 0 (default %d) or 1..%d",
                        o.max_connections, DEFAULT_MAX_CONNECTIONS, MAX_CONNECTIONS);

  dlock__endpoint ep;
  if ((rc = build_endpoint(&o, &ep))) return rc;
  dlock_client *c = calloc(1, sizeof *c);
  if (!c) {
    dlock__endpoint_clear(&ep);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  snprintf(c->server, sizeof c->server, "%s", ep.display);
  c->command_timeout_ms = ep.command_timeout_ms;
  c->prefix = strdup(o.key_prefix ? o.key_prefix : "");
  c->prefix_len = c->prefix ? strlen(c->prefix) : 0;
  pthread_mutex_init(&c->lazy_mu, NULL);
  rc = c->prefix ? dlock__random_hex(c->id, 8) : dlock__error(DLOCK_ENOMEM, "out of memory");
  if (rc) {
    dlock__endpoint_clear(&ep);
  } else if (ep.cluster) {
    snprintf(c->server, sizeof c->server, "cluster %s", ep.display);
    rc = dlock__topology_cluster_new(&ep, o.max_connections ? o.max_connections : DEFAULT_MAX_CONNECTIONS, &c->topo);
  } else {
    rc = dlock__topology_standalone_new(&ep, o.max_connections ? o.max_connections : DEFAULT_MAX_CONNECTIONS,
                                        &c->topo);
  }
  if (!rc) rc = dlock_client_ping(c);
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
  dlock__subscriber_stop(c);
  dlock__watchdog_stop(c);
  if (c->topo) c->topo->destroy(c->topo);
  pthread_mutex_destroy(&c->lazy_mu);
  free(c->prefix);
  free(c);
}

const char *dlock_client_server(const dlock_client *c) { return c ? c->server : ""; }

int dlock_client_ping(dlock_client *c) {
  if (!c) return dlock__error(DLOCK_EINVAL, "dlock_client_ping: client is NULL");
  const char *argv[1] = {"PING"};
  size_t lens[1] = {4};
  dlock__cmd cmd = {1, argv, lens};
  dlock__reply *r = NULL;
  int rc = dlock__node_exec(c->topo->route(c->topo, "", 0), &cmd, 1, &r, NULL);
  if (!rc && r->type == DLOCK__REPLY_ERROR) {
    rc = dlock__reply_error_status(r);
    dlock__error(rc, "%s: PING failed: %s", c->server, r->str);
  }
  dlock__reply_free(r);
  return rc;
}
