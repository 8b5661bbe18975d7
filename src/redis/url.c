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

#include "redis_topo.h"
#ifdef DLOCK_WITH_ZOOKEEPER
#endif

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
      if (i + 2 >= n) {
        *bad = 1;
        free(out);
        return NULL;
      }
      int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0 || (h == 0 && l == 0)) {
        *bad = 1;
        free(out);
        return NULL;
      }
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

/* Append s[0..n) to buf[*o..len) as far as it fits (always NUL-terminated). */
static void put(char *buf, size_t len, size_t *o, const char *s, size_t n) {
  while (n-- > 0 && *o + 1 < len) buf[(*o)++] = *s++;
  buf[*o] = '\0';
}

/* Length of a "password=" value at 'p': up to the '&' that starts a known
 * parameter, since a password may hold an unencoded '&'. */
static size_t password_len(const char *p) {
  static const char *const known[] = {"db=", "user=", "password=", "cacert=", "cert=", "key=", "sni=", "insecure="};
  size_t n = 0;
  for (; p[n]; n++) {
    if (p[n] != '&') continue;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
      if (!strncmp(p + n + 1, known[i], strlen(known[i]))) return n;
  }
  return n;
}

/* Messages show URLs, and logs keep messages: never the password. The URL
 * may be malformed (that is when it gets printed), so this does not trust
 * the grammar: everything before the last '@' after the scheme counts as
 * userinfo (a password may hold an unencoded '/', '?' or '@'), and every
 * "password=" value is masked up to the next known parameter. Over-masking
 * is the safe error. */
void dlock__redis_redact(const char *url, char *buf, size_t len) {
  size_t o = 0;
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!url) return;
  const char *start = strstr(url, "://");
  start = start ? start + 3 : url;
  const char *at = strrchr(start, '@');
  if (!strncmp(url, "unix://", 7)) {
    /* A socket path has no userinfo, and its query holds file names that may
     * contain '@': only an '@' before the query can be a stray "user:pw@". */
    const char *qm = strchr(start, '?');
    at = NULL;
    for (const char *p = start; *p && p != qm; p++)
      if (*p == '@') at = p;
  }
  if (dlock__url_is_redlock(url)) { /* one userinfo per node */
    dlock__redlock_redact(url, buf, len);
    return;
  }
  const char *rest = start;
  put(buf, len, &o, url, (size_t)(start - url));
  if (at) {
    const char *colon = memchr(start, ':', (size_t)(at - start));
    if (colon) put(buf, len, &o, start, (size_t)(colon - start) + 1);
    put(buf, len, &o, "***", 3);
    rest = at;
  }
  /* In the query, only the values of known parameters that hold no secret
   * are shown: a mistyped name ("PASSWORD=", "pass=") may carry one. */
  static const char *const plain[] = {"db=", "user=", "cacert=", "cert=", "key=", "sni=", "insecure="};
  const char *query = strchr(rest, '?');
  for (const char *p = rest; *p;) {
    if (query && p > query && (p[-1] == '?' || p[-1] == '&') && strncmp(p, "password=", 9) != 0) {
      int shown = 0;
      for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (!strncmp(p, plain[i], strlen(plain[i]))) shown = 1;
      const char *eq = strchr(p, '=');
      const char *amp = strchr(p, '&');
      if (!shown && eq && (!amp || eq < amp)) {
        put(buf, len, &o, p, (size_t)(eq - p) + 1);
        p = eq + 1;
        size_t n = password_len(p);
        if (n) put(buf, len, &o, "***", 3);
        p += n;
        continue;
      }
    }
    if (!strncmp(p, "password=", 9)) {
      put(buf, len, &o, p, 9);
      p += 9;
      size_t n = password_len(p);
      if (n) put(buf, len, &o, "***", 3);
      p += n;
    } else {
      put(buf, len, &o, p++, 1);
    }
  }
}

static int bad_url(const char *url, const char *why) {
  char shown[256];
  dlock_url_redact(url, shown, sizeof shown);
  return dlock__error(DLOCK_EURL,
                      "bad Redis URL '%.200s': %s (expected redis://[user[:password]@]host[:port][/db], "
                      "rediss://..., unix:///path/to/redis.sock, redis-sentinel://host:port,.../SERVICE "
                      "or redis-cluster://host:port,host:port,...)",
                      shown, why);
}

/* Apply one ?key=value parameter. */
static int apply_param(dlock__endpoint *ep, const char *url, const char *k, size_t kn, const char *v, size_t vn) {
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
  if (kn == 4 && !memcmp(k, "user", 4))
    target = &ep->username;
  else if (kn == 8 && !memcmp(k, "password", 8))
    target = &ep->password;
  else if (kn == 6 && !memcmp(k, "cacert", 6))
    target = &ep->tls_ca_file;
  else if (kn == 4 && !memcmp(k, "cert", 4))
    target = &ep->tls_cert_file;
  else if (kn == 3 && !memcmp(k, "key", 3))
    target = &ep->tls_key_file;
  else if (kn == 3 && !memcmp(k, "sni", 3))
    target = &ep->tls_server_name;
  else {
    char shown[256];
    dlock_url_redact(url, shown, sizeof shown);
    return dlock__error(DLOCK_EURL,
                        "bad Redis URL '%.200s': unknown parameter '%.*s' (known: db, user, "
                        "password, cacert, cert, key, sni, insecure)",
                        shown, (int)kn, k);
  }
  free(*target);
  *target = decode(v, vn, &bad);
  if (!*target)
    return bad ? bad_url(url, "bad percent-encoding in a parameter")
               : dlock__error(DLOCK_ENOMEM, "out of memory parsing URL");
  return 0;
}

static int parse_query(dlock__endpoint *ep, const char *url, const char *q) {
  int after_password = 0;
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (!eq) return bad_url(url, "a query parameter has no '='");
    int rc = apply_param(ep, url, q, (size_t)(eq - q), eq + 1, n - (size_t)(eq - q) - 1);
    /* The "parameter" may be the rest of a password with an unencoded '&':
     * do not quote its name. */
    if (rc == DLOCK_EURL && after_password)
      return bad_url(url, "bad parameter after 'password' (write '&' in a password as %26)");
    if (rc) return rc;
    after_password = (size_t)(eq - q) == 8 && !memcmp(q, "password", 8);
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
  snprintf(ep->display, sizeof ep->display, "%s%s%s%s:%d", ep->tls ? "tls " : "", strchr(ep->host, ':') ? "[" : "",
           ep->host, strchr(ep->host, ':') ? "]" : "", ep->port);
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

/* ---- Sentinel URLs ----
 *
 *   redis-sentinel://[user[:password]@]host[:port][,host[:port]...]/SERVICE[?params]
 *
 * The userinfo authenticates to the sentinels; the master's own credentials
 * are the parameters master_user and master_password. Ports default to 26379.
 * Other parameters: db, wait_replicas, wait_timeout (ms). */

#define SENTINEL_SCHEME "redis-sentinel://"

int dlock__url_is_sentinel(const char *url) { return url && !strncmp(url, SENTINEL_SCHEME, strlen(SENTINEL_SCHEME)); }

/* 'url' with the passwords (userinfo, master_password=) replaced by "****". */
static void mask_sentinel_url(const char *url, char *out, size_t outlen) {
  const char *rest = url + strlen(SENTINEL_SCHEME);
  const char *slash = strchr(rest, '/'), *at = NULL;
  for (const char *p = rest; *p && p != slash; p++)
    if (*p == '@') at = p;
  size_t o = 0;
  out[0] = '\0';
#define PUT(s, n)                              \
  do {                                         \
    size_t n_ = (n);                           \
    if (o + n_ >= outlen) n_ = outlen - 1 - o; \
    memcpy(out + o, (s), n_);                  \
    o += n_;                                   \
    out[o] = '\0';                             \
  } while (0)
  PUT(url, strlen(SENTINEL_SCHEME));
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (colon) PUT(rest, (size_t)(colon - rest) + 1);
    PUT("****", 4);
    rest = at;
  }
  /* Copy the rest. In the query, only the values of the parameters that
   * hold no secret are shown: master_password's is masked, and so is that of
   * a mistyped name ("MASTER_PASSWORD=", "master%5Fpassword="). */
  static const char *const plain[] = {"db=", "master_user=", "wait_replicas=", "wait_timeout="};
  const char *query = strchr(rest, '?');
  if (!query) query = rest + strlen(rest);
  PUT(rest, (size_t)(query - rest));
  rest = query;
  while (*rest && o + 1 < outlen) {
    PUT(rest, 1); /* '?' or '&' */
    rest++;
    size_t n = strcspn(rest, "&"), name = strcspn(rest, "=&");
    int shown = rest[name] != '=';
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
      if (!strncmp(rest, plain[i], strlen(plain[i]))) shown = 1;
    if (shown) {
      PUT(rest, n);
    } else {
      PUT(rest, name + 1);
      PUT("****", 4);
    }
    rest += n;
  }
#undef PUT
}

static int bad_sentinel_url(const dlock__sentinel_url *u, const char *why) {
  return dlock__error(DLOCK_EURL,
                      "bad Redis Sentinel URL '%s': %s (expected redis-sentinel://[user[:password]@]"
                      "host[:port][,host[:port]...]/SERVICE[?db=N&master_user=U&master_password=P"
                      "&wait_replicas=N&wait_timeout=MS])",
                      u->shown, why);
}

/* One "host[:port]" of the sentinel list into 'ep' (port 26379 by default). */
static int parse_sentinel_host(dlock__sentinel_url *u, const char *s, size_t n, dlock__endpoint *ep) {
  const char *end = s + n, *port = NULL, *hstart = s, *hend;
  if (n == 0) return bad_sentinel_url(u, "an empty sentinel address in the list");
  if (*s == '[') {
    const char *rb = memchr(s, ']', n);
    if (!rb) return bad_sentinel_url(u, "IPv6 host without ']'");
    hstart = s + 1;
    hend = rb;
    if (rb + 1 < end) {
      if (rb[1] != ':') return bad_sentinel_url(u, "junk after an IPv6 host");
      port = rb + 2;
    }
  } else {
    const char *colon = memchr(s, ':', n);
    hend = colon ? colon : end;
    if (colon) port = colon + 1;
  }
  if (hend == hstart) return bad_sentinel_url(u, "a sentinel address without a host");
  for (const char *p = hstart; p < hend; p++)
    if (!isalnum((unsigned char)*p) && !strchr(".-_:", *p))
      return bad_sentinel_url(u, "bad character in a sentinel host");
  if (!(ep->host = dup_range(hstart, (size_t)(hend - hstart)))) return DLOCK_ENOMEM;
  ep->port = 26379;
  if (port) {
    long v;
    if (parse_int(port, (size_t)(end - port), 1, 65535, &v) != 0)
      return bad_sentinel_url(u, "a sentinel port must be a number 1..65535");
    ep->port = (int)v;
  }
  snprintf(ep->display, sizeof ep->display, "%s%s%s:%d", strchr(ep->host, ':') ? "[" : "", ep->host,
           strchr(ep->host, ':') ? "]" : "", ep->port);
  return 0;
}

static int apply_sentinel_param(dlock__sentinel_url *u, const char *k, size_t kn, const char *v, size_t vn) {
  int bad = 0;
  char **target = NULL;
  long num;
#define KEY_IS(lit) (kn == strlen(lit) && !memcmp(k, lit, kn))
  if (KEY_IS("db")) {
    if (parse_int(v, vn, 0, 1000000, &num) != 0) return bad_sentinel_url(u, "db must be a number 0..1000000");
    u->master.db = (int)num;
    return 0;
  }
  if (KEY_IS("wait_replicas")) {
    if (parse_int(v, vn, 0, 100, &num) != 0) return bad_sentinel_url(u, "wait_replicas must be a number 0..100");
    u->wait_replicas = (int)num;
    return 0;
  }
  if (KEY_IS("wait_timeout")) {
    /* Milliseconds; a trailing "ms" is accepted. */
    if (vn > 2 && !memcmp(v + vn - 2, "ms", 2)) vn -= 2;
    if (parse_int(v, vn, 1, 3600000, &num) != 0)
      return bad_sentinel_url(u, "wait_timeout must be a number of milliseconds 1..3600000");
    u->wait_timeout_ms = (int)num;
    return 0;
  }
  if (KEY_IS("master_user"))
    target = &u->master.username;
  else if (KEY_IS("master_password"))
    target = &u->master.password;
  else
    return dlock__error(DLOCK_EURL,
                        "bad Redis Sentinel URL '%s': unknown parameter '%.*s' (known: db, "
                        "master_user, master_password, wait_replicas, wait_timeout)",
                        u->shown, (int)kn, k);
#undef KEY_IS
  free(*target);
  *target = decode(v, vn, &bad);
  if (!*target) return bad ? bad_sentinel_url(u, "bad percent-encoding in a parameter") : DLOCK_ENOMEM;
  return 0;
}

static int parse_sentinel(const char *url, dlock__sentinel_url *u) {
  const char *rest = url + strlen(SENTINEL_SCHEME);
  const char *qm = strchr(rest, '?');
  const char *end = qm ? qm : rest + strlen(rest);
  const char *slash = memchr(rest, '/', (size_t)(end - rest));
  const char *hosts_end = slash ? slash : end;
  const char *at = NULL;
  for (const char *p = rest; p < hosts_end; p++)
    if (*p == '@') at = p;
  char *user = NULL, *pass = NULL;
  int bad = 0;
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    const char *pstart = colon ? colon + 1 : rest;
    if (colon && colon > rest && !(user = decode(rest, (size_t)(colon - rest), &bad)))
      return bad ? bad_sentinel_url(u, "bad percent-encoding in the user name") : DLOCK_ENOMEM;
    if (at > pstart && !(pass = decode(pstart, (size_t)(at - pstart), &bad))) {
      free(user);
      return bad ? bad_sentinel_url(u, "bad percent-encoding in the password") : DLOCK_ENOMEM;
    }
    rest = at + 1;
  }
  int rc = 0;
  for (const char *p = rest; p <= hosts_end && !rc;) {
    const char *comma = memchr(p, ',', (size_t)(hosts_end - p));
    const char *item_end = comma ? comma : hosts_end;
    if (u->nsentinels == DLOCK__SENTINEL_MAX) {
      rc = bad_sentinel_url(u, "more than 16 sentinels");
      break;
    }
    dlock__endpoint *ep = &u->sentinel[u->nsentinels];
    rc = parse_sentinel_host(u, p, (size_t)(item_end - p), ep);
    if (rc) break;
    u->nsentinels++;
    for (int i = 0; i + 1 < u->nsentinels && !rc; i++)
      if (!strcmp(u->sentinel[i].host, ep->host) && u->sentinel[i].port == ep->port) {
        char why[400];
        snprintf(why, sizeof why, "sentinel %s is listed twice", ep->display);
        rc = bad_sentinel_url(u, why);
      }
    if (rc) break;
    if (user && !(ep->username = strdup(user))) rc = DLOCK_ENOMEM;
    if (pass && !(ep->password = strdup(pass))) rc = DLOCK_ENOMEM;
    p = item_end + 1;
  }
  free(user);
  if (pass) {
    memset(pass, 0, strlen(pass));
    free(pass);
  }
  if (rc) return rc;
  if (!slash || slash + 1 >= end) return bad_sentinel_url(u, "no service name after the sentinel list ('/SERVICE')");
  if (memchr(slash + 1, '/', (size_t)(end - slash - 1)))
    return bad_sentinel_url(u, "the service name may not contain '/' (use ?db=N for the database)");
  if (!(u->service = decode(slash + 1, (size_t)(end - slash - 1), &bad)))
    return bad ? bad_sentinel_url(u, "bad percent-encoding in the service name") : DLOCK_ENOMEM;
  for (const char *q = qm ? qm + 1 : NULL; q && *q;) {
    const char *amp = strchr(q, '&');
    size_t n = amp ? (size_t)(amp - q) : strlen(q);
    const char *eq = memchr(q, '=', n);
    if (!eq) return bad_sentinel_url(u, "a query parameter has no '='");
    if ((rc = apply_sentinel_param(u, q, (size_t)(eq - q), eq + 1, n - (size_t)(eq - q) - 1))) return rc;
    q += n + (amp ? 1 : 0);
  }
  return 0;
}

int dlock__url_parse_sentinel(const char *url, dlock__sentinel_url *u) {
  memset(u, 0, sizeof *u);
  if (!dlock__url_is_sentinel(url)) return bad_url(url ? url : "(null)", "not a redis-sentinel:// URL");
  mask_sentinel_url(url, u->shown, sizeof u->shown);
  for (const char *p = url; *p; p++)
    if ((unsigned char)*p <= ' ') return bad_sentinel_url(u, "contains whitespace or a control character");
  int rc = parse_sentinel(url, u);
  if (rc == DLOCK_ENOMEM) dlock__error(DLOCK_ENOMEM, "out of memory parsing URL");
  if (rc) dlock__sentinel_url_clear(u);
  return rc;
}

void dlock__sentinel_url_clear(dlock__sentinel_url *u) {
  for (int i = 0; i < u->nsentinels; i++) dlock__endpoint_clear(&u->sentinel[i]);
  /* A failed parse may leave a half-filled entry past the count. */
  if (u->nsentinels < DLOCK__SENTINEL_MAX) dlock__endpoint_clear(&u->sentinel[u->nsentinels]);
  free(u->service);
  dlock__endpoint_clear(&u->master);
  memset(u, 0, sizeof *u);
}
