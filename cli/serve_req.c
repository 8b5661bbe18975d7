/*
 * serve_req.c - the agent's request parser: routes, lock names and the JSON
 * bodies of "dlock serve" (cmd_serve.c). The bodies are flat JSON objects
 * of strings, whole numbers, booleans and null (RFC 8259, no nesting: no
 * field of the API takes more), read by the small parser below, which is
 * the only one: no input makes it read past its buffer, recurse or
 * allocate. fuzz/fuzz_serve_req.c feeds it anything.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "serve.h"

static void say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* 1 when s[0..len) is UTF-8 (no overlong forms, no surrogates, at most
 * U+10FFFF) without control characters (C0, DEL). */
static int utf8_clean(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    unsigned c = s[i];
    if (c < 0x20 || c == 0x7f) return 0;
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf)
      n = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
      n = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
      n = 3, cp = c & 0x07;
    else
      return 0;
    if (len - i <= n) return 0;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    if (cp >= 0x80 && cp < 0xa0) return 0; /* C1 controls */
    i += n + 1;
  }
  return 1;
}

int serve_name_check(const char *name, size_t len, char *err, size_t errlen) {
  if (len == 0) {
    say(err, errlen, "the lock name is empty");
    return -1;
  }
  if (len > DLOCK_MAX_NAME_LEN) {
    say(err, errlen, "the lock name is %zu bytes long, more than %d", len, DLOCK_MAX_NAME_LEN);
    return -1;
  }
  if (memchr(name, '\0', len) != NULL || !utf8_clean((const unsigned char *)name, len)) {
    say(err, errlen, "the lock name has a byte that is not allowed (a control character or invalid UTF-8)");
    return -1;
  }
  if (memchr(name, '{', len) != NULL || memchr(name, '}', len) != NULL) {
    say(err, errlen, "the lock name has a brace ('{' or '}'), which dlock does not allow in names");
    return -1;
  }
  return 0;
}

void serve_route_parse(const char *method, const char *path, size_t path_len, serve_route *out, char *err,
                       size_t errlen) {
  static const char locks[] = "/v1/locks/";
  int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
  int post = strcmp(method, "POST") == 0;

  memset(out, 0, sizeof *out);
  say(err, errlen, "no such path: the API is under /v1/locks/NAME, plus /v1/health and /metrics");
  if (memchr(path, '\0', path_len) != NULL) return; /* a decoded %00 */
  if (strcmp(path, "/metrics") == 0 || strcmp(path, "/v1/health") == 0) {
    out->kind = get ? (path[1] == 'm' ? SERVE_METRICS : SERVE_HEALTH) : SERVE_BAD_METHOD;
    if (!get) say(err, errlen, "%s takes GET only", path);
    return;
  }
  if (path_len <= sizeof locks - 1 || strncmp(path, locks, sizeof locks - 1) != 0) return;
  const char *name = path + sizeof locks - 1;
  size_t nlen = path_len - (sizeof locks - 1);
  /* The verb is the last segment when it is one of the verbs: a name may hold
   * '/' ("app/db"), so "/v1/locks/a/b" is the status of "a/b". */
  static const struct {
    const char *verb;
    serve_route_kind kind;
  } verbs[] = {{"acquire", SERVE_ACQUIRE}, {"release", SERVE_RELEASE}, {"extend", SERVE_EXTEND}};
  serve_route_kind kind = SERVE_LOCK_STATUS;
  const char *slash = NULL;
  for (size_t i = nlen; i > 0; i--)
    if (name[i - 1] == '/') {
      slash = name + i - 1;
      break;
    }
  if (slash != NULL) {
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
      if (strcmp(slash + 1, verbs[i].verb) == 0) {
        kind = verbs[i].kind;
        nlen = (size_t)(slash - name);
      }
  }
  if (serve_name_check(name, nlen, err, errlen) != 0) {
    out->kind = SERVE_BAD_NAME;
    return;
  }
  memcpy(out->name, name, nlen);
  out->name[nlen] = '\0';
  if (kind == SERVE_LOCK_STATUS) {
    out->kind = get ? kind : SERVE_BAD_METHOD;
    if (!get)
      say(err, errlen, "GET /v1/locks/NAME is the status; the changes are POST .../acquire, .../release, .../extend");
    return;
  }
  out->kind = post ? kind : SERVE_BAD_METHOD;
  out->mutating = post;
  if (!post) say(err, errlen, "%s takes POST only", path);
}

/* ---- The JSON object ---- */

enum { J_STR, J_NUM, J_TRUE, J_FALSE, J_NULL };

typedef struct jvalue {
  int type;
  const char *s; /* J_STR: decoded, NUL-terminated (no NUL inside: \u0000 is refused) */
  size_t slen;
  int64_t num; /* J_NUM */
} jvalue;

typedef struct jparser {
  const char *p, *end;
  char *err;
  size_t errlen;
} jparser;

static void ws(jparser *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

/* A string at j->p (its opening quote) into buf[cap]: 0, or -1 and the error. */
static int jstring(jparser *j, char *buf, size_t cap, size_t *outlen, const char *what) {
  size_t n = 0;
  j->p++; /* the quote */
  for (;;) {
    if (j->p >= j->end) {
      say(j->err, j->errlen, "bad JSON: %s has no closing quote", what);
      return -1;
    }
    unsigned char c = (unsigned char)*j->p++;
    unsigned cp;
    if (c == '"') break;
    if (c < 0x20) {
      say(j->err, j->errlen, "bad JSON: a control character inside %s (escape it)", what);
      return -1;
    }
    if (c != '\\') {
      cp = c; /* a raw byte: UTF-8 is checked on the whole below */
      if (n + 1 >= cap) goto too_long;
      buf[n++] = (char)c;
      continue;
    }
    if (j->p >= j->end) {
      say(j->err, j->errlen, "bad JSON: %s ends inside an escape", what);
      return -1;
    }
    char e = *j->p++;
    switch (e) {
    case '"':
      cp = '"';
      break;
    case '\\':
      cp = '\\';
      break;
    case '/':
      cp = '/';
      break;
    case 'b':
      cp = '\b';
      break;
    case 'f':
      cp = '\f';
      break;
    case 'n':
      cp = '\n';
      break;
    case 'r':
      cp = '\r';
      break;
    case 't':
      cp = '\t';
      break;
    case 'u':
      if (j->end - j->p < 4 || hex4(j->p, &cp) != 0) goto bad_escape;
      j->p += 4;
      if (cp >= 0xdc00 && cp <= 0xdfff) goto bad_escape;
      if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair */
        unsigned lo;
        if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) != 0 || lo < 0xdc00 ||
            lo > 0xdfff)
          goto bad_escape;
        j->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0) {
        say(j->err, j->errlen, "%s holds \\u0000, which dlock does not take", what);
        return -1;
      }
      break;
    default:
      goto bad_escape;
    }
    /* cp as UTF-8 */
    unsigned char u[4];
    size_t k;
    if (cp < 0x80)
      u[0] = (unsigned char)cp, k = 1;
    else if (cp < 0x800)
      u[0] = (unsigned char)(0xc0 | (cp >> 6)), u[1] = (unsigned char)(0x80 | (cp & 0x3f)), k = 2;
    else if (cp < 0x10000)
      u[0] = (unsigned char)(0xe0 | (cp >> 12)), u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)),
      u[2] = (unsigned char)(0x80 | (cp & 0x3f)), k = 3;
    else
      u[0] = (unsigned char)(0xf0 | (cp >> 18)), u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f)),
      u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (unsigned char)(0x80 | (cp & 0x3f)), k = 4;
    if (n + k >= cap) goto too_long;
    memcpy(buf + n, u, k);
    n += k;
  }
  buf[n] = '\0';
  /* Raw bytes must be UTF-8; escaped control characters stay out of values too. */
  if (!utf8_clean((const unsigned char *)buf, n)) {
    say(j->err, j->errlen, "%s is not clean UTF-8 text (invalid bytes or a control character)", what);
    return -1;
  }
  *outlen = n;
  return 0;
too_long:
  say(j->err, j->errlen, "%s is longer than %zu bytes", what, cap - 1);
  return -1;
bad_escape:
  say(j->err, j->errlen, "bad JSON: a bad escape inside %s", what);
  return -1;
}

/* A whole number (no fraction, no exponent) into v->num. */
static int jnumber(jparser *j, jvalue *v, const char *key) {
  int neg = 0;
  uint64_t n = 0;
  if (*j->p == '-') neg = 1, j->p++;
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') {
    say(j->err, j->errlen, "bad JSON: field '%s' has a malformed number", key);
    return -1;
  }
  if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9') {
    say(j->err, j->errlen, "bad JSON: field '%s' has a number with a leading zero", key);
    return -1;
  }
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    if (n > (UINT64_MAX - 9) / 10 || n * 10 + (uint64_t)(*j->p - '0') > (uint64_t)INT64_MAX) {
      say(j->err, j->errlen, "field '%s': the number is too large", key);
      return -1;
    }
    n = n * 10 + (uint64_t)(*j->p++ - '0');
  }
  if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) {
    say(j->err, j->errlen, "field '%s' must be a whole number", key);
    return -1;
  }
  v->type = J_NUM;
  v->num = neg ? -(int64_t)n : (int64_t)n;
  return 0;
}

static int jword(jparser *j, const char *w, int type, jvalue *v) {
  size_t n = strlen(w);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0) return -1;
  j->p += n;
  v->type = type;
  return 0;
}

/* Call fn(key, value, arg) for each member of the object 'body'; fn returns
 * 0, or -1 having said why. Duplicate keys are refused. 0, or -1 and 'err'. */
typedef int (*jmember_fn)(const char *key, const jvalue *v, void *arg, char *err, size_t errlen);

static int json_object(const char *body, size_t len, jmember_fn fn, void *arg, char *err, size_t errlen) {
  jparser j = {body, body + len, err, errlen};
  char seen[16][24];
  int nseen = 0;
  char sbuf[1100];

  ws(&j);
  if (j.p == j.end) return 0; /* an empty body is {} */
  if (*j.p != '{') {
    say(err, errlen, "bad JSON: the body must be an object ({...})");
    return -1;
  }
  j.p++;
  ws(&j);
  if (j.p < j.end && *j.p == '}') {
    j.p++;
    goto end;
  }
  for (;;) {
    char key[24];
    size_t klen;
    ws(&j);
    if (j.p >= j.end || *j.p != '"') {
      say(err, errlen, "bad JSON: expected a field name in quotes at byte %zu", (size_t)(j.p - body));
      return -1;
    }
    if (jstring(&j, key, sizeof key, &klen, "a field name") != 0) {
      if (strstr(err, "longer than") != NULL) say(err, errlen, "unknown field (a name this long is none of the API's)");
      return -1;
    }
    for (int i = 0; i < nseen; i++)
      if (strcmp(seen[i], key) == 0) {
        say(err, errlen, "field '%s' is given twice", key);
        return -1;
      }
    if (nseen == 16) {
      say(err, errlen, "too many fields");
      return -1;
    }
    snprintf(seen[nseen++], sizeof seen[0], "%s", key);
    ws(&j);
    if (j.p >= j.end || *j.p != ':') {
      say(err, errlen, "bad JSON: expected ':' after field '%s'", key);
      return -1;
    }
    j.p++;
    ws(&j);
    jvalue v = {0};
    char what[64];
    snprintf(what, sizeof what, "field '%s'", key);
    if (j.p >= j.end) {
      say(err, errlen, "bad JSON: field '%s' has no value", key);
      return -1;
    }
    int rc;
    if (*j.p == '"') {
      rc = jstring(&j, sbuf, sizeof sbuf, &v.slen, what);
      v.type = J_STR, v.s = sbuf;
    } else if (*j.p == '-' || (*j.p >= '0' && *j.p <= '9')) {
      rc = jnumber(&j, &v, key);
    } else if (*j.p == '{' || *j.p == '[') {
      say(err, errlen, "field '%s' must be a string or a number, not an %s", key, *j.p == '{' ? "object" : "array");
      return -1;
    } else if (jword(&j, "true", J_TRUE, &v) == 0 || jword(&j, "false", J_FALSE, &v) == 0 ||
               jword(&j, "null", J_NULL, &v) == 0) {
      rc = 0;
    } else {
      say(err, errlen, "bad JSON: field '%s' has a value that is not JSON", key);
      return -1;
    }
    if (rc != 0 || fn(key, &v, arg, err, errlen) != 0) return -1;
    ws(&j);
    if (j.p < j.end && *j.p == ',') {
      j.p++;
      continue;
    }
    if (j.p < j.end && *j.p == '}') {
      j.p++;
      break;
    }
    say(err, errlen, "bad JSON: expected ',' or '}' after field '%s'", key);
    return -1;
  }
end:
  ws(&j);
  if (j.p != j.end) {
    say(err, errlen, "bad JSON: text after the object at byte %zu", (size_t)(j.p - body));
    return -1;
  }
  return 0;
}

/* A duration field: "1m30s" or whole milliseconds; 'forever' allows "forever" (-1). */
static int jduration(const char *key, const jvalue *v, int forever, int64_t *ms, char *err, size_t errlen) {
  if (v->type == J_NUM) {
    if (v->num < 0 || v->num > DLOCK_MAX_DURATION_MS) {
      say(err, errlen, "field '%s': %lld ms is out of range (0 to 30 days)", key, (long long)v->num);
      return -1;
    }
    *ms = v->num;
    return 0;
  }
  if (v->type == J_STR) {
    if (forever && strcmp(v->s, "forever") == 0) {
      *ms = -1;
      return 0;
    }
    if (cli_parse_duration(v->s, ms) != 0) {
      say(err, errlen, "field '%s': %s", key, dlock_last_error());
      return -1;
    }
    return 0;
  }
  say(err, errlen, "field '%s' must be a duration: a string such as \"30s\"%s, or whole milliseconds", key,
      forever ? " or \"forever\"" : "");
  return -1;
}

static int acquire_member(const char *key, const jvalue *v, void *arg, char *err, size_t errlen) {
  serve_acquire_req *r = arg;
  if (strcmp(key, "kind") == 0) {
    static const char *const kinds[] = {"mutex", "semaphore", "read", "write"};
    if (v->type == J_STR)
      for (int i = 0; i < 4; i++)
        if (strcmp(v->s, kinds[i]) == 0) {
          r->kind = i;
          return 0;
        }
    say(err, errlen, "field 'kind' must be \"mutex\", \"semaphore\", \"read\" or \"write\"");
    return -1;
  }
  if (strcmp(key, "permits") == 0) {
    if (v->type != J_NUM || v->num < 1 || v->num > DLOCK_SEMAPHORE_MAX_PERMITS) {
      say(err, errlen, "field 'permits' must be a whole number from 1 to %d", DLOCK_SEMAPHORE_MAX_PERMITS);
      return -1;
    }
    r->permits = (int)v->num;
    return 0;
  }
  if (strcmp(key, "lease") == 0) return jduration(key, v, 0, &r->lease_ms, err, errlen);
  if (strcmp(key, "ttl") == 0) return jduration(key, v, 0, &r->ttl_ms, err, errlen);
  if (strcmp(key, "wait") == 0) return jduration(key, v, 1, &r->wait_ms, err, errlen);
  if (strcmp(key, "max_hold") == 0) return jduration(key, v, 0, &r->max_hold_ms, err, errlen);
  if (strcmp(key, "owner") == 0) {
    if (v->type != J_STR || v->slen > 1024) {
      say(err, errlen, "field 'owner' must be a string of at most 1024 bytes");
      return -1;
    }
    memcpy(r->owner, v->s, v->slen + 1);
    r->has_owner = 1;
    return 0;
  }
  say(err, errlen, "unknown field '%s' (acquire takes kind, permits, lease, ttl, wait, max_hold, owner)", key);
  return -1;
}

int serve_parse_acquire(const char *body, size_t len, serve_acquire_req *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (json_object(body, len, acquire_member, out, err, errlen) != 0) return -1;
  if (out->kind == SERVE_KIND_SEMAPHORE && out->permits == 0) {
    say(err, errlen, "a semaphore needs 'permits' (its number of permits, the same for every holder)");
    return -1;
  }
  if (out->kind != SERVE_KIND_SEMAPHORE && out->permits != 0) {
    say(err, errlen, "'permits' is for \"kind\": \"semaphore\" only");
    return -1;
  }
  if (out->ttl_ms != 0 && (out->lease_ms != 0 || out->max_hold_ms != 0)) {
    say(err, errlen, "'ttl' (a fixed lease) and 'lease' or 'max_hold' (a renewed one) exclude each other");
    return -1;
  }
  if ((out->lease_ms != 0 && out->lease_ms < 1000) || (out->ttl_ms != 0 && out->ttl_ms < 100)) {
    say(err, errlen, "the lease is too short: 'lease' at least 1s, 'ttl' at least 100ms");
    return -1;
  }
  return 0;
}

typedef struct holder_ctx {
  serve_holder_req *r;
  int want_lease;
} holder_ctx;

static int holder_member(const char *key, const jvalue *v, void *arg, char *err, size_t errlen) {
  holder_ctx *h = arg;
  if (strcmp(key, "holder") == 0) {
    size_t n = v->type == J_STR ? v->slen : 0;
    int ok = n == 32;
    for (size_t i = 0; ok && i < n; i++) ok = (v->s[i] >= '0' && v->s[i] <= '9') || (v->s[i] >= 'a' && v->s[i] <= 'f');
    if (!ok) {
      say(err, errlen, "field 'holder' must be the holder id the acquire gave (32 hex digits)");
      return -1;
    }
    memcpy(h->r->holder, v->s, 33);
    return 0;
  }
  if (h->want_lease && strcmp(key, "lease") == 0) return jduration(key, v, 0, &h->r->lease_ms, err, errlen);
  say(err, errlen, "unknown field '%s' (this call takes holder%s)", key, h->want_lease ? " and lease" : "");
  return -1;
}

int serve_parse_holder(const char *body, size_t len, int want_lease, serve_holder_req *out, char *err, size_t errlen) {
  holder_ctx h = {out, want_lease};
  memset(out, 0, sizeof *out);
  if (json_object(body, len, holder_member, &h, err, errlen) != 0) return -1;
  if (out->holder[0] == '\0') {
    say(err, errlen, "field 'holder' is missing: give the holder id the acquire gave");
    return -1;
  }
  if (want_lease && out->lease_ms < 100) {
    say(err, errlen, "field 'lease' is missing or under 100ms: the lease to set from now");
    return -1;
  }
  return 0;
}
