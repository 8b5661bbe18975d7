/*
 * pg_conn.c - the PostgreSQL backend's connections: the URL (dlock's own
 * parameters stripped, the rest passed to libpq unchanged), a small pool of
 * command connections, one statement with a client-side deadline, and the
 * mapping of SQLSTATEs to DLOCK_E* statuses.
 *
 * Statements go out unnamed through the extended protocol (PQsendQueryParams):
 * nothing is left in the session, so a transaction-mode pooler can hand each
 * statement to another server connection.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "pg/pg_internal.h"

/* ---- URL ---- */

int dlock__pg_url_is_pg(const char *url) {
  if (!url) return 0;
  if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0) return 1;
  /* libpq's keyword/value form: "host=... dbname=...", no scheme. */
  return strstr(url, "://") == NULL && strchr(url, '=') != NULL;
}

/* libpq's URI: scheme://[userinfo@]host[:port][/dbname][?query]. libpq
 * takes everything up to the first '@' or '/' as the userinfo, so a password
 * may hold '?' or ':'; the query starts at the first '?' after it. Returns
 * the host part; '*query' the '?' (or NULL), '*at' the '@' (or NULL). */
static const char *uri_parts(const char *url, const char **at, const char **query) {
  const char *host = strstr(url, "://") + 3;
  const char *u = host + strcspn(host, "@/");
  *at = *u == '@' ? u : NULL;
  if (*at) host = u + 1;
  *query = strchr(host, '?');
  return host;
}

/* 1 when a parameter's key names a secret: password, sslpassword, ... */
static int secret_key(const char *k, size_t klen) { return klen >= 8 && memcmp(k + klen - 8, "password", 8) == 0; }

static void put_n(char *out, size_t len, size_t *o, const char *s, size_t n) {
  for (size_t i = 0; i < n && *o + 1 < len; i++) out[(*o)++] = s[i];
}

void dlock__pg_mask_url(const char *url, char *out, size_t len) {
  if (!out || len == 0) return;
  out[0] = '\0';
  if (!url) return;
  size_t o = 0;
  if (strstr(url, "://")) {
    const char *at, *query;
    const char *host = uri_parts(url, &at, &query);
    const char *userinfo = strstr(url, "://") + 3;
    put_n(out, len, &o, url, (size_t)(userinfo - url));
    if (at) {
      const char *colon = memchr(userinfo, ':', (size_t)(at - userinfo));
      put_n(out, len, &o, userinfo, (size_t)((colon ? colon : at) - userinfo));
      if (colon) put_n(out, len, &o, ":***", 4);
      put_n(out, len, &o, "@", 1);
    }
    size_t hlen = query ? (size_t)(query - host) : strlen(host);
    put_n(out, len, &o, host, hlen);
    const char *p = query;
    while (p && *p) {
      put_n(out, len, &o, p, 1); /* '?' or '&' */
      p++;
      size_t plen = strcspn(p, "&");
      const char *eq = memchr(p, '=', plen);
      if (eq && secret_key(p, (size_t)(eq - p))) {
        put_n(out, len, &o, p, (size_t)(eq - p) + 1);
        put_n(out, len, &o, "***", 3);
      } else {
        put_n(out, len, &o, p, plen);
      }
      p += plen;
    }
  } else {
    /* keyword/value: key = value, value optionally 'quoted' */
    const char *p = url;
    while (*p) {
      if (*p == ' ' || *p == '\t' || *p == '\n') {
        put_n(out, len, &o, p++, 1);
        continue;
      }
      const char *k = p;
      while (*p && *p != '=' && *p != ' ' && *p != '\t' && *p != '\n') p++;
      size_t klen = (size_t)(p - k);
      while (*p == ' ' || *p == '\t') p++;
      if (*p != '=') {
        put_n(out, len, &o, k, (size_t)(p - k));
        continue;
      }
      p++;
      while (*p == ' ' || *p == '\t') p++;
      const char *v = p;
      if (*p == '\'') {
        p++;
        while (*p && *p != '\'') p += (*p == '\\' && p[1]) ? 2 : 1;
        if (*p) p++;
      } else {
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
      }
      put_n(out, len, &o, k, klen);
      put_n(out, len, &o, "=", 1);
      if (secret_key(k, klen))
        put_n(out, len, &o, "***", 3);
      else
        put_n(out, len, &o, v, (size_t)(p - v));
    }
  }
  out[o] = '\0';
}

static int schema_ok(const char *s, size_t n) {
  if (n == 0 || n > DLOCK__PG_SCHEMA_MAX) return 0;
  if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return 0;
  }
  return 1;
}

/* Take one of dlock's own parameters (key=value) out; 1 if it was ours. */
static int own_param(dlock__pg *pg, const char *k, size_t klen, const char *v, size_t vlen, const char *shown) {
  if (klen == 12 && memcmp(k, "dlock_schema", 12) == 0) {
    if (!schema_ok(v, vlen)) {
      pg->parse_rc = dlock__error(DLOCK_EURL,
                                  "PostgreSQL URL %s: dlock_schema '%.*s' must be 1..%d lowercase letters, "
                                  "digits or '_', starting with a letter or '_'",
                                  shown, (int)(vlen > 80 ? 80 : vlen), v, DLOCK__PG_SCHEMA_MAX);
      return 1;
    }
    memcpy(pg->schema, v, vlen);
    pg->schema[vlen] = '\0';
    return 1;
  }
  if (klen == 4 && memcmp(k, "mode", 4) == 0) {
    if (vlen == 8 && memcmp(v, "advisory", 8) == 0) {
      pg->advisory = 1;
    } else if (vlen == 5 && memcmp(v, "lease", 5) == 0) {
      pg->advisory = 0;
    } else {
      pg->parse_rc = dlock__error(DLOCK_EURL, "PostgreSQL URL %s: mode '%.*s' is not 'lease' or 'advisory'", shown,
                                  (int)(vlen > 40 ? 40 : vlen), v);
    }
    return 1;
  }
  return 0;
}

/* Copy 'url' into pg->conninfo without dlock's parameters. */
static int strip_url(dlock__pg *pg, const char *url, const char *shown) {
  size_t n = strlen(url);
  char *out = malloc(n + 1);
  if (!out) return dlock__error(DLOCK_ENOMEM, "out of memory");
  size_t o = 0;
  if (strstr(url, "://")) {
    const char *at, *q;
    (void)uri_parts(url, &at, &q);
    size_t head = q ? (size_t)(q - url) : n;
    memcpy(out, url, head);
    o = head;
    int first = 1;
    const char *p = q ? q + 1 : NULL;
    while (p && *p) {
      size_t plen = strcspn(p, "&");
      const char *eq = memchr(p, '=', plen);
      int mine = 0;
      if (eq) mine = own_param(pg, p, (size_t)(eq - p), eq + 1, plen - (size_t)(eq - p) - 1, shown);
      if (!mine && plen > 0) {
        out[o++] = first ? '?' : '&';
        memcpy(out + o, p, plen);
        o += plen;
        first = 0;
      }
      p += plen;
      if (*p == '&') p++;
    }
  } else {
    const char *p = url;
    while (*p) {
      while (*p == ' ' || *p == '\t' || *p == '\n') p++;
      if (!*p) break;
      const char *k = p;
      while (*p && *p != '=' && *p != ' ' && *p != '\t') p++;
      size_t klen = (size_t)(p - k);
      while (*p == ' ' || *p == '\t') p++;
      const char *v = NULL;
      size_t vlen = 0;
      if (*p == '=') {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        v = p;
        if (*p == '\'') {
          p++;
          while (*p && *p != '\'') p += (*p == '\\' && p[1]) ? 2 : 1;
          if (*p) p++;
        } else {
          while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
        }
        vlen = (size_t)(p - v);
      }
      if (!(v && own_param(pg, k, klen, v, vlen, shown))) {
        if (o) out[o++] = ' ';
        memcpy(out + o, k, (size_t)(p - k));
        o += (size_t)(p - k);
      }
    }
  }
  out[o] = '\0';
  pg->conninfo = out;
  return pg->parse_rc;
}

static void make_display(dlock__pg *pg, PQconninfoOption *opts) {
  const char *host = NULL, *port = NULL, *db = NULL, *user = NULL;
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    if (!o->val || !*o->val) continue;
    if (strcmp(o->keyword, "host") == 0 || (!host && strcmp(o->keyword, "hostaddr") == 0))
      host = o->val;
    else if (strcmp(o->keyword, "port") == 0)
      port = o->val;
    else if (strcmp(o->keyword, "dbname") == 0)
      db = o->val;
    else if (strcmp(o->keyword, "user") == 0)
      user = o->val;
  }
  snprintf(pg->display, sizeof pg->display, "postgresql://%s%s%s%s%s/%s (schema %s%s)", user ? user : "",
           user ? "@" : "", host ? host : "(libpq default host)", port ? ":" : "", port ? port : "", db ? db : "",
           pg->schema, pg->advisory ? ", advisory mode" : "");
}

/* ---- Errors ---- */

static int sqlstate_status(const char *st) {
  if (!st) return DLOCK_ESERVER;
  if (strcmp(st, "25006") == 0) return DLOCK_EREADONLY; /* read_only_sql_transaction */
  if (strcmp(st, "42501") == 0) return DLOCK_ENOPERM;   /* insufficient_privilege */
  if (strcmp(st, "57014") == 0) return DLOCK_ETIMEDOUT; /* query_canceled (statement_timeout) */
  if (strcmp(st, "55P03") == 0) return DLOCK_ETIMEDOUT; /* lock_not_available (lock_timeout) */
  if (strcmp(st, "22001") == 0) return DLOCK_ENAME;     /* string_data_right_truncation */
  if (strcmp(st, "57P03") == 0) return DLOCK_ENOTREADY; /* cannot_connect_now: starting up */
  if (strncmp(st, "57P", 3) == 0) return DLOCK_EIO;     /* shutdown, terminated */
  if (strncmp(st, "08", 2) == 0) return DLOCK_EIO;      /* connection exceptions */
  if (strncmp(st, "28", 2) == 0) return DLOCK_EAUTH;
  if (strcmp(st, "53200") == 0) return DLOCK_ESERVEROOM; /* out_of_memory */
  return DLOCK_ESERVER;
}

static int missing_object(const char *st) {
  /* A table, schema or function, or a column added later (waiters.side):
   * an older schema that `dlock init` brings up to date. */
  return st &&
         (strcmp(st, "42P01") == 0 || strcmp(st, "3F000") == 0 || strcmp(st, "42883") == 0 || strcmp(st, "42703") == 0);
}

/* libpq's messages span lines ("server closed the connection
 * unexpectedly\n\tThis probably means..."): fold every run of white space
 * into one space, so that each error is one line (logs, the CLI). */
static void one_line(char *s) {
  char *out = s;
  for (const char *p = s; *p; p++) {
    if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
      if (out > s && out[-1] != ' ') *out++ = ' ';
    } else {
      *out++ = *p;
    }
  }
  while (out > s && out[-1] == ' ') out--;
  *out = '\0';
}

static const char *advice(int status) {
  switch (status) {
  case DLOCK_EREADONLY:
    return "the server is a read-only standby or has default_transaction_read_only on; point the URL at the primary";
  case DLOCK_ENOPERM:
    return "GRANT this user SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA, USAGE, UPDATE ON ALL "
           "SEQUENCES IN SCHEMA and USAGE on the schema (docs/postgres.md), or run `dlock init` as the schema's "
           "owner";
  case DLOCK_ETIMEDOUT:
    return "the server is slow or a transaction holds the row; check pg_stat_activity";
  case DLOCK_ENAME:
    return "use a shorter name";
  case DLOCK_EIO:
    return "the connection was closed (server restart, pg_terminate_backend, a proxy)";
  default:
    return "see the server's log";
  }
}

/* Set by the last failed statement of this thread: dlock's tables (or
 * functions) do not exist. */
static _Thread_local int missing_tables;
/* Set by the last failed statement of this thread: the server answered it
 * with an error (a SQLSTATE, the session still up), so it was rolled back:
 * e.g. statement_timeout (57014) or lock_timeout (55P03) is exact. */
static _Thread_local int server_refused;

int dlock__pg_result_error(dlock__pg *pg, const PGresult *res, PGconn *conn) {
  const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  missing_tables = missing_object(st);
  server_refused = st != NULL && conn && PQstatus(conn) == CONNECTION_OK;
  char msg[400];
  snprintf(msg, sizeof msg, "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
  one_line(msg);
  int status = sqlstate_status(st);
  if (!st && conn && PQstatus(conn) != CONNECTION_OK) status = DLOCK_EIO;
  if (missing_object(st)) {
    return dlock__error(DLOCK_ENOPERM,
                        "PostgreSQL %s: %s [%s]; dlock's tables are missing and this user cannot create them: "
                        "run `dlock init --url ...` as a user with CREATE rights on the database",
                        pg->display, msg, st);
  }
  return dlock__error(status, "PostgreSQL %s: %s%s%s%s; %s", pg->display, msg, st ? " [" : "", st ? st : "",
                      st ? "]" : "", advice(status));
}

/* ---- Connections ---- */

/* libpq prints NOTICEs (CREATE ... IF NOT EXISTS) and FATALs of killed
 * sessions to stderr by default; a library keeps quiet, errors come back
 * through the statement's result. */
static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

int dlock__pg_open_until(dlock__pg *pg, dlock_mono_ms limit, PGconn **out) {
  return dlock__pg_open_cancel(pg, limit, NULL, out);
}

int dlock__pg_open_cancel(dlock__pg *pg, dlock_mono_ms limit, const atomic_int *cancel, PGconn **out) {
  char ct[16];
  int secs = (pg->opts.connect_timeout_ms + 999) / 1000;
  snprintf(ct, sizeof ct, "%d", secs < 2 ? 2 : secs);
  /* Ours first, so that the user's URL overrides them. */
  const char *keys[] = {"connect_timeout", "fallback_application_name", "dbname", "password", NULL};
  const char *vals[] = {ct, "dlock", pg->conninfo, pg->opts.password, NULL};
  if (!pg->opts.password[0]) keys[3] = NULL; /* the URL's, PGPASSWORD or ~/.pgpass */
  dlock_mono_ms start = dlock_mono_now();
  dlock_mono_ms deadline = start + pg->opts.connect_timeout_ms;
  if (limit > 0 && limit < deadline) deadline = limit;
  /* Non-blocking, so that our deadline (a renewal's, bounded by the
   * earliest validity deadline) holds through DNS, TCP, TLS and auth. */
  PGconn *conn = PQconnectStartParams(keys, vals, 1);
  if (!conn) return dlock__error(DLOCK_ENOMEM, "PostgreSQL %s: out of memory connecting", pg->display);
  PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
  int timed_out = 0;
  while (PQstatus(conn) != CONNECTION_BAD && ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED) {
    dlock_mono_ms left = deadline - dlock_mono_now();
    if (left <= 0) {
      timed_out = 1;
      break;
    }
    if (cancel && atomic_load(cancel)) {
      PQfinish(conn);
      return dlock__error(DLOCK_ECANCELED, "PostgreSQL %s: connecting was canceled", pg->display);
    }
    dlock_mono_ms slice = cancel ? 50 : 1000;
    struct pollfd p = {.fd = PQsocket(conn), .events = ps == PGRES_POLLING_READING ? POLLIN : POLLOUT};
    int r = p.fd >= 0 ? poll(&p, 1, left > slice ? (int)slice : (int)left) : 1;
    if (r == 0) continue;
    if (r < 0 && errno == EINTR) continue;
    ps = PQconnectPoll(conn);
  }
  if (timed_out) {
    PQfinish(conn);
    return dlock__error(DLOCK_ECONNECT,
                        "PostgreSQL %s: cannot connect: no PostgreSQL handshake within %lld ms; is the server up "
                        "(not frozen), and is this port a PostgreSQL server?",
                        pg->display, (long long)(dlock_mono_now() - start));
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
    one_line(msg);
    int status = DLOCK_ECONNECT;
    const char *what = "check that the server runs and the URL's host, port and database";
    if (strstr(msg, "password authentication failed") || strstr(msg, "no password supplied") ||
        strstr(msg, "authentication failed")) {
      status = DLOCK_EAUTH;
      what = "check the user and password (URL, PGPASSWORD or ~/.pgpass)";
    } else if (strstr(msg, "timeout expired")) {
      what = "no PostgreSQL handshake in time: is the server up, and is this port a PostgreSQL server?";
    } else if (strstr(msg, "invalid response") || strstr(msg, "expected authentication request") ||
               strstr(msg, "unexpected message") || strstr(msg, "invalid length") ||
               strstr(msg, "server closed the connection unexpectedly") || strstr(msg, "received invalid")) {
      status = DLOCK_EPROTO;
      what = "the server did not answer as PostgreSQL does: is this port a PostgreSQL server?";
    }
    PQfinish(conn);
    return dlock__error(status, "PostgreSQL %s: cannot connect: %s; %s", pg->display, msg, what);
  }
  PQsetNoticeProcessor(conn, quiet, NULL);
  if (PQserverVersion(conn) < 90500) {
    int v = PQserverVersion(conn);
    PQfinish(conn);
    return dlock__error(DLOCK_EPROTO, "PostgreSQL %s: server version %d is too old; dlock needs 9.5 or newer",
                        pg->display, v);
  }
  *out = conn;
  return 0;
}

int dlock__pg_open(dlock__pg *pg, PGconn **out) { return dlock__pg_open_until(pg, 0, out); }

/* An idle connection has nothing to read unless the server closed it
 * (restart, pg_terminate_backend, idle timeout): 1 if so. */
int dlock__pg_idle_closed(PGconn *conn) {
  if (PQstatus(conn) != CONNECTION_OK) return 1;
  struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
  if (p.fd < 0) return 1;
  if (poll(&p, 1, 0) <= 0) return 0;
  if (!PQconsumeInput(conn)) return 1;
  PGnotify *n;
  while ((n = PQnotifies(conn)) != NULL) PQfreemem(n);
  return PQstatus(conn) != CONNECTION_OK || PQisBusy(conn);
}

int dlock__pg_get(dlock__pg *pg, dlock_mono_ms deadline, PGconn **out) {
  pthread_mutex_lock(&pg->mu);
  for (;;) {
    while (pg->nidle > 0) {
      PGconn *c = pg->idle[--pg->nidle];
      if (!dlock__pg_idle_closed(c)) {
        pthread_mutex_unlock(&pg->mu);
        *out = c;
        return 0;
      }
      PQfinish(c);
      pg->nopen--;
    }
    if (pg->nopen < pg->opts.max_connections) {
      pg->nopen++;
      pthread_mutex_unlock(&pg->mu);
      int rc = dlock__pg_open_until(pg, deadline, out);
      if (rc != 0) {
        pthread_mutex_lock(&pg->mu);
        pg->nopen--;
        pthread_cond_signal(&pg->cv);
        pthread_mutex_unlock(&pg->mu);
      }
      return rc;
    }
    if (dlock_mono_now() >= deadline) {
      pthread_mutex_unlock(&pg->mu);
      return dlock__error(DLOCK_ETIMEDOUT, "PostgreSQL %s: all %d pooled connections stayed busy until the timeout",
                          pg->display, pg->opts.max_connections);
    }
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    pthread_cond_timedwait(&pg->cv, &pg->mu, &ts);
  }
}

void dlock__pg_put(dlock__pg *pg, PGconn *conn, int broken) {
  if (!conn) return;
  if (!broken && (PQstatus(conn) != CONNECTION_OK || PQtransactionStatus(conn) != PQTRANS_IDLE)) broken = 1;
  pthread_mutex_lock(&pg->mu);
  if (broken || pg->nidle >= DLOCK__PG_POOL_MAX) {
    PQfinish(conn);
    pg->nopen--;
  } else {
    pg->idle[pg->nidle++] = conn;
  }
  pthread_cond_signal(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
}

/* Wait for 'events' on the connection's socket until 'deadline': 1 ready,
 * 0 timed out. */
static int wait_sock(PGconn *conn, short events, dlock_mono_ms deadline) {
  for (;;) {
    dlock_mono_ms left = deadline - dlock_mono_now();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = PQsocket(conn), .events = events};
    int r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return 1; /* let libpq see the error */
  }
}

int dlock__pg_exec_on(dlock__pg *pg, PGconn *conn, const char *sql, int n, const char *const *vals,
                      dlock_mono_ms deadline, PGresult **out, int *sent) {
  *out = NULL;
  *sent = 0;
  missing_tables = 0;
  server_refused = 0;
  int ok = n < 0 ? PQsendQuery(conn, sql) : PQsendQueryParams(conn, sql, n, NULL, vals, NULL, NULL, 0);
  if (!ok) {
    /* Nothing left: the connection was already unusable. */
    return dlock__pg_result_error(pg, NULL, conn);
  }
  *sent = 1;
  int f;
  while ((f = PQflush(conn)) == 1) {
    if (!wait_sock(conn, POLLOUT | POLLIN, deadline)) goto timeout;
    if (!PQconsumeInput(conn)) return dlock__pg_result_error(pg, NULL, conn);
  }
  if (f < 0) return dlock__pg_result_error(pg, NULL, conn);
  PGresult *first = NULL, *err = NULL;
  for (;;) {
    while (PQisBusy(conn)) {
      if (!wait_sock(conn, POLLIN, deadline)) {
        PQclear(first);
        PQclear(err);
        goto timeout;
      }
      if (!PQconsumeInput(conn)) {
        PQclear(first);
        PQclear(err);
        return dlock__pg_result_error(pg, NULL, conn);
      }
    }
    PGresult *r = PQgetResult(conn);
    if (!r) break;
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
      if (!err)
        err = r;
      else
        PQclear(r);
    } else if (st == PGRES_TUPLES_OK && (!first || PQresultStatus(first) != PGRES_TUPLES_OK)) {
      PQclear(first); /* the first rows win over an earlier command's status ("BEGIN; SELECT ...") */
      first = r;
    } else {
      if (!first)
        first = r;
      else
        PQclear(r);
    }
  }
  if (err) {
    int rc = dlock__pg_result_error(pg, err, conn);
    PQclear(err);
    PQclear(first);
    return rc;
  }
  if (!first) return dlock__error(DLOCK_EPROTO, "PostgreSQL %s: no result for a statement", pg->display);
  *out = first;
  return 0;
timeout:
  /* The connection is dropped (the caller does), and whether the statement
   * ran is unknown. No PQcancel(): it waits for the server without a
   * timeout, and a frozen server would hold us past our deadline. */
  return dlock__error(DLOCK_ETIMEDOUT,
                      "PostgreSQL %s: no answer within the command timeout (%d ms) or the caller's deadline; the "
                      "connection was dropped; a slow server, or a transaction holding the row (see "
                      "pg_stat_activity)",
                      pg->display, pg->opts.command_timeout_ms);
}

int dlock__pg_run(dlock__pg *pg, const char *sql, int n, const char *const *vals, dlock_mono_ms limit, int twice_safe,
                  PGresult **out, int *resent, int *maybe_ran) {
  dlock_mono_ms deadline = dlock_mono_now() + pg->opts.command_timeout_ms;
  if (limit > 0 && limit < deadline) deadline = limit;
  if (resent) *resent = 0;
  if (maybe_ran) *maybe_ran = 0;
  int inited_here = 0;
  for (int attempt = 0;; attempt++) {
    PGconn *conn = NULL;
    int rc = dlock__pg_get(pg, deadline, &conn);
    if (rc != 0) {
      if (attempt > 0 && maybe_ran) *maybe_ran = 1;
      return rc;
    }
    int sent = 0;
    rc = dlock__pg_exec_on(pg, conn, sql, n, vals, deadline, out, &sent);
    int conn_lost = PQstatus(conn) != CONNECTION_OK;
    dlock__pg_put(pg, conn, rc != 0 && (conn_lost || rc == DLOCK_ETIMEDOUT || rc == DLOCK_EIO));
    if (rc == 0) return 0;
    /* A statement that failed at planning (missing tables) ran nothing. */
    if (rc == DLOCK_ENOPERM && missing_tables && !inited_here) {
      inited_here = 1;
      int irc = dlock__pg_init(pg);
      if (irc != 0) return irc;
      attempt = -1;
      continue;
    }
    int may_have_run = sent && !server_refused && (conn_lost || rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT);
    if (!may_have_run) {
      if (attempt > 0 && maybe_ran) *maybe_ran = 1;
      return rc;
    }
    if (twice_safe && attempt == 0 && rc == DLOCK_EIO && dlock_mono_now() < deadline) {
      if (resent) *resent = 1;
      continue;
    }
    if (maybe_ran) *maybe_ran = 1;
    return rc;
  }
}

/* ---- Client ---- */

int dlock__pg_connect(const char *url, const dlock__pg_options *opts, dlock__pg **out) {
  *out = NULL;
  if (!url) return dlock__error(DLOCK_EURL, "PostgreSQL URL is NULL");
  dlock__pg *pg = calloc(1, sizeof *pg);
  if (!pg) return dlock__error(DLOCK_ENOMEM, "out of memory");
  char shown[512];
  dlock__pg_mask_url(url, shown, sizeof shown);
  snprintf(pg->schema, sizeof pg->schema, "dlock");
  if (opts) pg->opts = *opts;
  if (pg->opts.max_connections <= 0) pg->opts.max_connections = 4;
  if (pg->opts.max_connections > DLOCK__PG_POOL_MAX) pg->opts.max_connections = DLOCK__PG_POOL_MAX;
  if (pg->opts.command_timeout_ms <= 0) pg->opts.command_timeout_ms = 5000;
  if (pg->opts.connect_timeout_ms <= 0) pg->opts.connect_timeout_ms = 5000;
  if (pg->opts.poll_ms <= 0) pg->opts.poll_ms = 1000;
  pthread_mutex_init(&pg->mu, NULL);
  dlock__cond_init(&pg->cv);
  pthread_mutex_init(&pg->ln_mu, NULL);
  dlock__cond_init(&pg->ln_cv);
  snprintf(pg->display, sizeof pg->display, "%s", shown);
  int rc = strip_url(pg, url, shown);
  if (rc != 0) {
    dlock__pg_close(pg);
    return rc;
  }
  char *perr = NULL;
  PQconninfoOption *co = PQconninfoParse(pg->conninfo, &perr);
  if (!co) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s", perr ? perr : "out of memory");
    one_line(msg);
    if (perr) PQfreemem(perr);
    dlock__pg_close(pg);
    return dlock__error(DLOCK_EURL,
                        "PostgreSQL URL %s: libpq rejects it: %s; use postgresql://user@host:port/db or "
                        "'host=... dbname=...'",
                        shown, msg);
  }
  make_display(pg, co);
  /* The URL's connect_timeout (seconds) wins over ours, as libpq's would:
   * connections are made non-blocking, and we enforce it. */
  for (PQconninfoOption *o = co; o->keyword; o++) {
    if (strcmp(o->keyword, "connect_timeout") == 0 && o->val && atoi(o->val) > 0)
      pg->opts.connect_timeout_ms = atoi(o->val) * 1000;
  }
  PQconninfoFree(co);
  snprintf(pg->channel, sizeof pg->channel, "dlock.%s", pg->schema);
  char key[9];
  pg->ln_key = dlock__random_hex(key, 4) == 0 ? (int32_t)(strtoul(key, NULL, 16) & 0x7fffffffu) : 0;
  if (pg->ln_key == 0) pg->ln_key = 1;
  dlock__pg_sql_build(pg);
  PGconn *conn = NULL;
  rc = dlock__pg_open(pg, &conn);
  if (rc != 0) {
    dlock__pg_close(pg);
    return rc;
  }
  pg->nopen = 1;
  dlock__pg_put(pg, conn, 0);
  *out = pg;
  return 0;
}

void dlock__pg_close(dlock__pg *pg) {
  if (!pg) return;
  for (int i = 0; i < pg->nidle; i++) PQfinish(pg->idle[i]);
  for (int i = 0; i < pg->nhidle; i++) {
    PQfinish(pg->hidle[i]->conn);
    free(pg->hidle[i]);
  }
  dlock__pg_watch_stop(pg); /* it reads the LISTEN connection */
  if (pg->listen_conn) PQfinish(pg->listen_conn);
  if (pg->ln_pend) PQfinish(pg->ln_pend);
  pthread_mutex_destroy(&pg->mu);
  pthread_cond_destroy(&pg->cv);
  pthread_mutex_destroy(&pg->ln_mu);
  pthread_cond_destroy(&pg->ln_cv);
  dlock__pg_sql_free(pg);
  free(pg->conninfo);
  free(pg);
}

const char *dlock__pg_display(const dlock__pg *pg) { return pg->display; }
const char *dlock__pg_schema(const dlock__pg *pg) { return pg->schema; }
int dlock__pg_is_advisory(const dlock__pg *pg) { return pg->advisory; }

const char *dlock__pg_warnings(dlock__pg *pg) { return pg->warnings; }

unsigned dlock__pg_caps(const dlock__pg *pg) {
  return pg->advisory ? DLOCK__PG_CAP_SESSION : (DLOCK__PG_CAP_WATCHDOG | DLOCK__PG_CAP_FENCE);
}
