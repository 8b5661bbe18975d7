/*
 * zk/url.c - zk:// URLs and ZooKeeper path names: parsing, validation, and
 * the masked form of a URL for messages. No I/O.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "zk/zk.h"

/* Parameters we know. The digest's password may contain '&': its value
 * runs to the next "&<known parameter>=" or the end, in parsing and masking
 * alike, so that no part of a password ever shows. */
static const char *const known_params[] = {"session_timeout=", "connect_timeout=", "digest=", NULL};

static size_t digest_value_len(const char *v) {
  const char *best = NULL;
  for (int i = 0; known_params[i]; i++) {
    for (const char *p = strchr(v, '&'); p; p = strchr(p + 1, '&')) {
      if (!strncmp(p + 1, known_params[i], strlen(known_params[i]))) {
        if (!best || p < best) best = p;
        break;
      }
    }
  }
  return best ? (size_t)(best - v) : strlen(v);
}

static void put(char *buf, size_t len, size_t *o, const char *s, size_t n) {
  for (size_t i = 0; i < n && *o + 1 < len; i++) buf[(*o)++] = s[i];
  buf[*o] = '\0';
}

int dlock__zk_url_is(const char *url) { return url && !strncmp(url, "zk://", 5); }

void dlock__zk_url_redact(const char *url, char *buf, size_t len) {
  size_t o = 0;
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!url) return;
  /* A stray "user:pass@" in the authority is masked as dlock_url_redact does. */
  const char *start = strstr(url, "://");
  start = start ? start + 3 : url;
  const char *q = strchr(start, '?');
  const char *at = NULL;
  for (const char *p = start; *p && p != q; p++)
    if (*p == '@') at = p;
  put(buf, len, &o, url, (size_t)(start - url));
  const char *rest = start;
  if (at) {
    const char *colon = memchr(start, ':', (size_t)(at - start));
    if (colon) put(buf, len, &o, start, (size_t)(colon - start) + 1);
    put(buf, len, &o, "***", 3);
    rest = at;
  }
  for (const char *p = rest; *p;) {
    if ((p > url && (p[-1] == '?' || p[-1] == '&')) && !strncmp(p, "digest=", 7)) {
      put(buf, len, &o, p, 7);
      p += 7;
      size_t n = digest_value_len(p);
      const char *colon = memchr(p, ':', n);
      if (colon) {
        put(buf, len, &o, p, (size_t)(colon - p) + 1);
        put(buf, len, &o, "***", 3);
      } else if (n) {
        put(buf, len, &o, "***", 3);
      }
      p += n;
    } else {
      put(buf, len, &o, p++, 1);
    }
  }
}

static int bad_url(const char *url, const char *why) {
  char shown[256];
  dlock__zk_url_redact(url, shown, sizeof shown);
  return dlock__error(DLOCK_EURL,
                      "bad ZooKeeper URL '%.200s': %s (expected "
                      "zk://host1:2181[,host2:2181...][/namespace][?session_timeout=10s&digest=user:pass])",
                      shown, why);
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Percent-decode 'n' bytes of 's' into a new string; NULL on a bad escape
 * or a NUL byte. */
static char *decode(const char *s, size_t n) {
  char *out = malloc(n + 1);
  size_t o = 0;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n) {
        free(out);
        return NULL;
      }
      int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
      if (a < 0 || b < 0 || (a == 0 && b == 0)) {
        free(out);
        return NULL;
      }
      out[o++] = (char)(a * 16 + b);
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

static int parse_duration_param(const char *url, const char *what, const char *v, size_t n, int min_ms, int max_ms,
                                int *out) {
  char text[64], why[200];
  int64_t ms;
  if (n == 0 || n >= sizeof text) {
    snprintf(why, sizeof why, "%s needs a duration such as 10s or 1500ms", what);
    return bad_url(url, why);
  }
  memcpy(text, v, n);
  text[n] = '\0';
  if (dlock_duration_parse(text, &ms) != 0 || ms < min_ms || ms > max_ms) {
    snprintf(why, sizeof why, "%s '%s' must be a duration from %d ms to %d s", what, text, min_ms, max_ms / 1000);
    return bad_url(url, why);
  }
  *out = (int)ms;
  return 0;
}

static int check_hosts(const char *url, const char *h, size_t n) {
  char why[300];
  if (n == 0) return bad_url(url, "no host");
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && h[j] != ',') j++;
    const char *e = h + i;
    size_t en = j - i;
    const char *colon = memchr(e, ':', en);
    if (en == 0) return bad_url(url, "an empty host in the host list");
    if (!colon || colon == e) {
      snprintf(why, sizeof why, "host '%.*s' needs host:port", (int)(en > 100 ? 100 : en), e);
      return bad_url(url, why);
    }
    for (const char *p = e; p < colon; p++)
      if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_') {
        snprintf(why, sizeof why, "bad character in host '%.*s'", (int)(colon - e > 100 ? 100 : colon - e), e);
        return bad_url(url, why);
      }
    size_t pn = (size_t)(e + en - colon - 1);
    long port = 0;
    if (pn == 0 || pn > 5) return bad_url(url, "port must be a number 1..65535");
    for (size_t k = 0; k < pn; k++) {
      if (!isdigit((unsigned char)colon[1 + k])) return bad_url(url, "port must be a number 1..65535");
      port = port * 10 + (colon[1 + k] - '0');
    }
    if (port < 1 || port > 65535) return bad_url(url, "port must be a number 1..65535");
    i = j + 1;
    if (j < n && j + 1 == n) return bad_url(url, "an empty host in the host list");
  }
  return 0;
}

int dlock__zk_check_name(const char *what, const char *name) {
  if (!name || !*name) return dlock__error(DLOCK_ENAME, "%s is empty", what);
  size_t n = strlen(name);
  if (n > DLOCK_MAX_NAME_LEN)
    return dlock__error(DLOCK_ENAME, "%s is %zu bytes long (at most %d)", what, n, DLOCK_MAX_NAME_LEN);
  if (!strncmp(name, "_dlock_", 7))
    return dlock__error(DLOCK_ENAME, "%s '%.100s' starts with '_dlock_', which dlock reserves for its own nodes", what,
                        name);
  const char *p = name;
  while (1) {
    const char *slash = strchr(p, '/');
    size_t cn = slash ? (size_t)(slash - p) : strlen(p);
    if (cn == 0)
      return dlock__error(DLOCK_ENAME, "%s '%.100s' has an empty path component (a leading, trailing or double '/')",
                          what, name);
    if ((cn == 1 && p[0] == '.') || (cn == 2 && p[0] == '.' && p[1] == '.'))
      return dlock__error(DLOCK_ENAME, "%s '%.100s' has a '.' or '..' component, which ZooKeeper refuses", what, name);
    for (size_t i = 0; i < cn; i++) {
      unsigned char ch = (unsigned char)p[i];
      if (ch < 0x20 || ch == 0x7f)
        return dlock__error(DLOCK_ENAME, "%s '%.100s' contains a control character", what, name);
    }
    if (!slash) break;
    p = slash + 1;
  }
  return 0;
}

static int check_namespace(const char *url, const char *ns) {
  char why[300];
  if (!*ns) return 0;
  if (!strcmp(ns, "/zookeeper") || !strncmp(ns, "/zookeeper/", 11))
    return bad_url(url, "the namespace /zookeeper belongs to ZooKeeper itself");
  if (dlock__zk_check_name("namespace", ns + 1) != 0) {
    snprintf(why, sizeof why, "bad namespace: %s", dlock_last_error());
    return bad_url(url, why);
  }
  return 0;
}

int dlock__zk_url_parse(const char *url, dlock__zk_url *u) {
  memset(u, 0, sizeof *u);
  u->session_timeout_ms = DLOCK__ZK_DEFAULT_SESSION_MS;
  u->connect_timeout_ms = DLOCK__ZK_DEFAULT_CONNECT_MS;
  if (!url) return dlock__error(DLOCK_EURL, "no ZooKeeper URL given");
  dlock__zk_url_redact(url, u->shown, sizeof u->shown);
  if (!dlock__zk_url_is(url)) return bad_url(url, "it does not start with zk://");
  const char *h = url + 5;
  size_t hn = strcspn(h, "/?");
  int rc = check_hosts(url, h, hn);
  if (rc) return rc;
  const char *p = h + hn;
  const char *q = strchr(p, '?');
  size_t pn = q ? (size_t)(q - p) : strlen(p);
  char *ns = decode(p, pn);
  if (!ns) return bad_url(url, "bad percent-escape in the namespace");
  while (strlen(ns) > 1 && ns[strlen(ns) - 1] == '/') ns[strlen(ns) - 1] = '\0';
  if (!strcmp(ns, "/")) ns[0] = '\0';
  u->ns = ns;
  u->hosts = strndup(h, hn);
  if (!u->hosts) {
    dlock__zk_url_clear(u);
    return dlock__error(DLOCK_ENOMEM, "out of memory");
  }
  rc = check_namespace(url, ns);
  if (rc) {
    dlock__zk_url_clear(u);
    return rc;
  }
  for (const char *a = q ? q + 1 : NULL; a && *a;) {
    size_t n;
    if (!strncmp(a, "digest=", 7)) {
      const char *v = a + 7;
      size_t vn = digest_value_len(v);
      char *d = decode(v, vn);
      if (!d || !strchr(d, ':') || d[0] == ':') {
        free(d);
        dlock__zk_url_clear(u);
        return bad_url(url, "digest must be user:password");
      }
      free(u->digest);
      u->digest = d;
      n = 7 + vn;
    } else {
      n = strcspn(a, "&");
      const char *eq = memchr(a, '=', n);
      size_t kn = eq ? (size_t)(eq - a) : n;
      const char *v = eq ? eq + 1 : a + n;
      size_t vn = eq ? n - kn - 1 : 0;
      if (kn == 15 && !memcmp(a, "session_timeout", 15)) {
        rc = parse_duration_param(url, "session_timeout", v, vn, 400, 600000, &u->session_timeout_ms);
      } else if (kn == 15 && !memcmp(a, "connect_timeout", 15)) {
        rc = parse_duration_param(url, "connect_timeout", v, vn, 1, 600000, &u->connect_timeout_ms);
      } else {
        char why[200];
        snprintf(why, sizeof why, "unknown parameter '%.*s' (known: session_timeout, connect_timeout, digest)",
                 (int)(kn > 60 ? 60 : kn), a);
        rc = bad_url(url, why);
      }
      if (rc) {
        dlock__zk_url_clear(u);
        return rc;
      }
    }
    a += n;
    if (*a == '&') a++;
  }
  return 0;
}

void dlock__zk_url_clear(dlock__zk_url *u) {
  if (!u) return;
  free(u->hosts);
  free(u->ns);
  if (u->digest) {
    memset(u->digest, 0, strlen(u->digest));
    free(u->digest);
  }
  u->hosts = u->ns = u->digest = NULL;
}
