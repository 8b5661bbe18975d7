/*
 * url.c - parse Redis URLs into an endpoint. Pure: no I/O.
 *
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://...[?cacert=F&cert=F&key=F&sni=NAME&insecure=1]
 *   unix:///path/to/redis.sock[?db=N&user=U&password=P]
 *   redis-cluster://[user[:password]@]host:port,host:port,...[?...]
 *     (rediss-cluster:// for TLS): seeds of a Redis Cluster; the other
 *     nodes are discovered. The credentials and parameters apply to all.
 * User and password may be percent-encoded. IPv6 hosts go in brackets.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static char *dup_range(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out) return NULL;
  memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch = tolower(ch);
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* Percent-decode s[0..n) into a new string; NULL on bad encoding or NUL. */
static char *decode(const char *s, size_t n, int *bad) {
  char *out = malloc(n + 1);
  size_t o = 0;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n) { *bad = 1; free(out); return NULL; }
      int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0 || (h == 0 && l == 0)) { *bad = 1; free(out); return NULL; }
      out[o++] = (char)(h * 16 + l);
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

static int parse_int(const char *s, size_t n, long min, long max, long *out) {
  if (n == 0 || n > 10) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < min || v > max) return -1;
  *out = v;
  return 0;
}

static int bad_url(const char *url, const char *why) {
  return dlock__error(DLOCK_EURL,
                      "bad Redis URL '%.200s': %s (expected redis://[user[:password]@]host[:port][/db], "
                      "rediss://..., unix:///path/to/redis.sock or redis-cluster://host:port,host:port,...)", url, why);
}

/* Apply one ?key=value parameter. */
static int apply_param(dlock__endpoint *ep, const char *url, const char *k, size_t kn,
                       const char *v, size_t vn) {
  int bad = 0;
  char **target = NULL;
  if (kn == 2 && !memcmp(k, "db", 2)) {
    long db;
    if (parse_int(v, vn, 0, 1000000, &db) != 0) return bad_url(url, "db must be a number 0..1000000");
    ep->db = (int)db;
    return 0;
  }
  if (kn == 8 && !memcmp(k, "insecure", 8)) {
    ep->tls_skip_verify = (vn == 1 && v[0] == '1');
    return 0;
  }
  if (kn == 4 && !memcmp(k, "user", 4)) target = &ep->username;
  else if (kn == 8 && !memcmp(k, "password", 8)) target = &ep->password;
  else if (kn == 6 && !memcmp(k, "cacert", 6)) target = &ep->tls_ca_file;
  else if (kn == 4 && !memcmp(k, "cert", 4)) target = &ep->tls_cert_file;
  else if (kn == 3 && !memcmp(k, "key", 3)) target = &ep->tls_key_file;
  else if (kn == 3 && !memcmp(k, "sni", 3)) target = &ep->tls_server_name;
  else return dlock__error(DLOCK_EURL, "bad Redis URL '%.200s': unknown parameter '%.*s' (known: db, user, "
                           "password, cacert, cert, key, sni, insecure)", url, (int)kn, k);
  free(*target);
  *target = decode(v, vn, &bad);
  if (!*target) return bad ? bad_url(url, "bad percent-encoding in a parameter")
                           : dlock__error(DLOCK_ENOMEM, "out of memory parsing URL");
  return 0;
}

static int parse_query(dlock__endpoint *ep, const char *url, const char *q) {
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (!eq) return bad_url(url, "a query parameter has no '='");
    int rc = apply_param(ep, url, q, (size_t)(eq - q), eq + 1, n - (size_t)(eq - q) - 1);
    if (rc) return rc;
    q += n + (amp ? 1 : 0);
  }
  return 0;
}

static int parse_unix(dlock__endpoint *ep, const char *url, const char *rest) {
  const char *qm = strchr(rest, '?');
  size_t n = qm ? (size_t)(qm - rest) : strlen(rest);
  if (n == 0 || rest[0] != '/') return bad_url(url, "unix socket path must be absolute (unix:///path)");
  if (n >= 108) return bad_url(url, "unix socket path longer than 107 bytes");
  ep->is_unix = 1;
  if (!(ep->path = dup_range(rest, n))) return dlock__error(DLOCK_ENOMEM, "out of memory");
  if (qm) {
    int rc = parse_query(ep, url, qm + 1);
    if (rc) return rc;
  }
  snprintf(ep->display, sizeof ep->display, "unix:%s", ep->path);
  return 0;
}

static int parse_tcp(dlock__endpoint *ep, const char *url, const char *rest) {
  const char *qm = strchr(rest, '?');
  const char *end = qm ? qm : rest + strlen(rest);
  const char *slash = memchr(rest, '/', (size_t)(end - rest));
  const char *auth_end = NULL;
  /* The last '@' before the path ends the userinfo (passwords may hold '@'
   * only percent-encoded, but be lenient). */
  for (const char *p = rest; p < (slash ? slash : end); p++)
    if (*p == '@') auth_end = p;
  const char *host = rest;
  if (auth_end) {
    const char *colon = memchr(rest, ':', (size_t)(auth_end - rest));
    int bad = 0;
    if (colon) {
      if (colon > rest && !(ep->username = decode(rest, (size_t)(colon - rest), &bad)))
        return bad ? bad_url(url, "bad percent-encoding in the user name") : DLOCK_ENOMEM;
      if (!(ep->password = decode(colon + 1, (size_t)(auth_end - colon - 1), &bad)))
        return bad ? bad_url(url, "bad percent-encoding in the password") : DLOCK_ENOMEM;
    } else if (auth_end > rest) {
      /* redis://secret@host: a lone userinfo is the password (as redis-cli and redis-py read it). */
      if (!(ep->password = decode(rest, (size_t)(auth_end - rest), &bad)))
        return bad ? bad_url(url, "bad percent-encoding in the password") : DLOCK_ENOMEM;
    }
    host = auth_end + 1;
  }
  const char *hostend = slash ? slash : end;
  const char *port = NULL;
  const char *hstart = host, *hend;
  if (*host == '[') {
    const char *rb = memchr(host, ']', (size_t)(hostend - host));
    if (!rb) return bad_url(url, "IPv6 host without ']'");
    hstart = host + 1;
    hend = rb;
    if (rb + 1 < hostend) {
      if (rb[1] != ':') return bad_url(url, "junk after IPv6 host");
      port = rb + 2;
    }
  } else {
    const char *colon = memchr(host, ':', (size_t)(hostend - host));
    hend = colon ? colon : hostend;
    if (colon) port = colon + 1;
  }
  if (hend == hstart) return bad_url(url, "no host");
  for (const char *p = hstart; p < hend; p++)
    if (!isalnum((unsigned char)*p) && !strchr(".-_:", *p)) return bad_url(url, "bad character in host");
  if (!(ep->host = dup_range(hstart, (size_t)(hend - hstart)))) return DLOCK_ENOMEM;
  ep->port = 6379;
  if (port) {
    long v;
    if (parse_int(port, (size_t)(hostend - port), 1, 65535, &v) != 0)
      return bad_url(url, "port must be a number 1..65535");
    ep->port = (int)v;
  }
  if (slash && slash + 1 < end) {
    long db;
    if (parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1000000, &db) != 0)
      return bad_url(url, "database must be a number after '/'");
    ep->db = (int)db;
  }
  if (qm) {
    int rc = parse_query(ep, url, qm + 1);
    if (rc) return rc;
  }
  snprintf(ep->display, sizeof ep->display, "%s%s%s%s:%d", ep->tls ? "tls " : "",
           strchr(ep->host, ':') ? "[" : "", ep->host, strchr(ep->host, ':') ? "]" : "", ep->port);
  return 0;
}

/* redis-cluster://[userinfo@]h1:p1,h2:p2[/0][?query]: seeds[0] is parsed with
 * the userinfo and query into 'ep' itself; every seed also into ep->seeds. */
static int parse_cluster(dlock__endpoint *ep, const char *url, const char *rest) {
  const char *qm = strchr(rest, '?');
  const char *end = qm ? qm : rest + strlen(rest);
  const char *slash = memchr(rest, '/', (size_t)(end - rest));
  const char *hosts_end = slash ? slash : end;
  const char *hosts = rest;
  for (const char *p = rest; p < hosts_end; p++)
    if (*p == '@') hosts = p + 1;
  if (hosts == hosts_end) return bad_url(url, "a cluster URL needs at least one seed host:port");
  size_t n = 1;
  for (const char *p = hosts; p < hosts_end; p++) n += *p == ',';
  if (n > 64) return bad_url(url, "more than 64 cluster seeds");
  if (!(ep->seeds = calloc(n, sizeof *ep->seeds))) return DLOCK_ENOMEM;
  ep->cluster = 1;
  for (const char *s = hosts; ep->nseeds < (int)n;) {
    const char *comma = memchr(s, ',', (size_t)(hosts_end - s));
    const char *e = comma ? comma : hosts_end;
    if (e == s) return bad_url(url, "an empty seed between commas");
    char *one = dup_range(s, (size_t)(e - s));
    if (!one) return DLOCK_ENOMEM;
    dlock__endpoint tmp;
    memset(&tmp, 0, sizeof tmp);
    int rc = parse_tcp(&tmp, url, one);
    free(one);
    if (rc) {
      dlock__endpoint_clear(&tmp);
      return rc;
    }
    for (int i = 0; i < ep->nseeds; i++)
      if (ep->seeds[i].port == tmp.port && !strcmp(ep->seeds[i].host, tmp.host)) {
        dlock__endpoint_clear(&tmp);
        return bad_url(url, "a cluster seed is listed twice");
      }
    ep->seeds[ep->nseeds].host = tmp.host;
    ep->seeds[ep->nseeds].port = tmp.port;
    ep->nseeds++;
    tmp.host = NULL;
    dlock__endpoint_clear(&tmp);
    s = e + 1;
  }
  /* The first seed with the userinfo, path and query: "userinfo@seed1/db?q". */
  const char *first_end = memchr(hosts, ',', (size_t)(hosts_end - hosts));
  if (!first_end) first_end = hosts_end;
  size_t len = (size_t)(first_end - rest) + strlen(hosts_end);
  char *one = malloc(len + 1);
  if (!one) return DLOCK_ENOMEM;
  memcpy(one, rest, (size_t)(first_end - rest));
  strcpy(one + (first_end - rest), hosts_end);
  int rc = parse_tcp(ep, url, one);
  memset(one, 0, len); /* it holds the password */
  free(one);
  if (rc) return rc;
  if (ep->db != 0) return bad_url(url, "Redis Cluster has only database 0");
  return 0;
}

int dlock__url_parse(const char *url, dlock__endpoint *ep) {
  memset(ep, 0, sizeof *ep);
  if (!url) return bad_url("(null)", "no URL");
  for (const char *p = url; *p; p++)
    if ((unsigned char)*p <= ' ') return bad_url(url, "contains whitespace or a control character");
  int rc;
  if (!strncmp(url, "redis://", 8)) {
    rc = parse_tcp(ep, url, url + 8);
  } else if (!strncmp(url, "rediss://", 9)) {
    ep->tls = 1;
    rc = parse_tcp(ep, url, url + 9);
  } else if (!strncmp(url, "redis-cluster://", 16)) {
    rc = parse_cluster(ep, url, url + 16);
  } else if (!strncmp(url, "rediss-cluster://", 17)) {
    ep->tls = 1;
    rc = parse_cluster(ep, url, url + 17);
  } else if (!strncmp(url, "unix://", 7)) {
    rc = parse_unix(ep, url, url + 7);
  } else {
    rc = bad_url(url, "unknown scheme");
  }
  if (rc == DLOCK_ENOMEM) dlock__error(DLOCK_ENOMEM, "out of memory parsing URL");
  if (rc) dlock__endpoint_clear(ep);
  return rc;
}

void dlock__endpoint_clear(dlock__endpoint *ep) {
  free(ep->host);
  free(ep->path);
  free(ep->username);
  if (ep->password) {
    /* Do not leave the secret in freed memory. */
    memset(ep->password, 0, strlen(ep->password));
    free(ep->password);
  }
  free(ep->tls_ca_file);
  free(ep->tls_cert_file);
  free(ep->tls_key_file);
  free(ep->tls_server_name);
  for (int i = 0; i < ep->nseeds; i++) free(ep->seeds[i].host);
  free(ep->seeds);
  memset(ep, 0, sizeof *ep);
}
