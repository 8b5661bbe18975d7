/*
 * my_conn.c - the MySQL/MariaDB backend's URL, connections and statements
 * (docs/mysql.md): mysql://user[:password]@host[:port]/db[?mode=lease],
 * a small pool of connections, one statement at a time with the command
 * timeout, errors in the user's words, the tables of `dlock init`.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <errmsg.h>

#include "mysql/my_internal.h"

/* The authority of 'url' (after "://"): [userinfo@]host[:port], up to the
 * path or the query. '*at' the '@' ending the userinfo, or NULL. */
static const char *authority(const char *url, const char **end, const char **at) {
  const char *a = strstr(url, "://");
  a = a ? a + 3 : url;
  const char *e = a + strcspn(a, "/?#");
  *end = e;
  *at = NULL;
  for (const char *p = a; p < e; p++)
    if (*p == '@') *at = p; /* the last one: a password's '@' should be %40, but may not be */
  return a;
}

/* 'in' appended to 'out' with the value of every query parameter named
 * password (or ending so: master_password) as "***", its name kept. */
static void redact_params(const char *in, char *out, size_t len) {
  size_t o = strlen(out);
  for (const char *p = in; *p && o + 1 < len;) {
    size_t k = p > in && (p[-1] == '?' || p[-1] == '&') ? strcspn(p, "=&#") : 0;
    if (k >= 8 && p[k] == '=' && !strncasecmp(p + k - 8, "password", 8)) {
      o += (size_t)snprintf(out + o, len - o, "%.*s=***", (int)k, p);
      p += k + 1 + strcspn(p + k + 1, "&");
      continue;
    }
    out[o++] = *p++;
    out[o] = '\0';
  }
}

/* The password is everything between the URL's first ':' (after the user
 * name, as the parser reads it) and its last '@': one the user forgot to
 * percent-encode may hold '/', '?', '#' or '@' (which the parser then
 * refuses, by a message that shows this form). A ':' with no '@' after it
 * is the port's. */
void dlock__my_redact(const char *url, char *buf, size_t len) {
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!url) return;
  const char *a = strstr(url, "://");
  a = a ? a + 3 : url;
  const char *colon = strchr(a, ':');
  const char *at = strrchr(a, '@');
  const char *rest = url;
  if (colon && at && at > colon) {
    snprintf(buf, len, "%.*s:***", (int)(colon - url), url);
    rest = at;
  }
  if (strlen(buf) + 1 < len) redact_params(rest, buf, len);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decode 'n' bytes of 's' into 'out' ('len' bytes); -1 when it does not fit or is malformed. */
static int decode(const char *s, size_t n, char *out, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)s[i];
    if (c == '%') {
      if (i + 2 >= n) return -1;
      int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
      if (h < 0 || l < 0) return -1;
      c = h * 16 + l;
      i += 2;
    }
    if (c == 0 || o + 1 >= len) return -1;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  return 0;
}

static int parse_url(dlock__my *my, const char *url, const char *shown) {
  const char *end, *at;
  const char *a = authority(url, &end, &at);
  const char *hostp = a;
  if (at) {
    const char *colon = memchr(a, ':', (size_t)(at - a));
    size_t ulen = (size_t)((colon ? colon : at) - a);
    if (decode(a, ulen, my->user, sizeof my->user) != 0)
      return dlock__error(DLOCK_EURL,
                          "'%s': the user name is malformed or longer than %zu bytes (percent-encode "
                          "special characters: %%40 for '@')",
                          shown, sizeof my->user - 1);
    if (colon && decode(colon + 1, (size_t)(at - colon - 1), my->password, sizeof my->password) != 0)
      return dlock__error(DLOCK_EURL,
                          "'%s': the password is malformed or longer than %zu bytes (percent-encode "
                          "special characters)",
                          shown, sizeof my->password - 1);
    hostp = at + 1;
  }
  const char *pe = end;
  const char *portp = NULL;
  if (*hostp == '[') { /* [IPv6] */
    const char *rb = memchr(hostp, ']', (size_t)(end - hostp));
    if (!rb) return dlock__error(DLOCK_EURL, "'%s': '[' without ']' in the host", shown);
    snprintf(my->host, sizeof my->host, "%.*s", (int)(rb - hostp - 1), hostp + 1);
    if (rb + 1 < end && rb[1] == ':') portp = rb + 2;
  } else {
    const char *colon = memchr(hostp, ':', (size_t)(end - hostp));
    if (colon) {
      portp = colon + 1;
      pe = colon;
    }
    if ((size_t)(pe - hostp) >= sizeof my->host)
      return dlock__error(DLOCK_EURL, "'%s': the host name is too long", shown);
    snprintf(my->host, sizeof my->host, "%.*s", (int)(pe - hostp), hostp);
  }
  if (!my->host[0]) return dlock__error(DLOCK_EURL, "'%s': no host: write mysql://user@HOST:3306/db", shown);
  my->port = 3306;
  if (portp) {
    char *e;
    long p = strtol(portp, &e, 10);
    if ((e == portp || e != end || p < 1 || p > 65535) && !at && strchr(end, '@'))
      return dlock__error(DLOCK_EURL,
                          "'%s': the password seems to hold a '/', '?' or '#': percent-encode it "
                          "(%%2F, %%3F, %%23)",
                          shown);
    if (e == portp || e != end || p < 1 || p > 65535)
      return dlock__error(DLOCK_EURL, "'%s': the port must be a number 1..65535", shown);
    my->port = (unsigned)p;
  }
  if (*end != '/' || end[1] == '\0' || end[1] == '?' || end[1] == '#')
    return dlock__error(DLOCK_EURL, "'%s': no database: write mysql://user@host/DB (dlock's tables go in it)", shown);
  const char *db = end + 1;
  size_t dlen = strcspn(db, "?#");
  if (dlen >= sizeof my->db) return dlock__error(DLOCK_EURL, "'%s': the database name is longer than 64 bytes", shown);
  for (size_t i = 0; i < dlen; i++) {
    char ch = db[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '$' ||
          ch == '-'))
      return dlock__error(DLOCK_EURL, "'%s': the database name may hold letters, digits, '_', '$' and '-' only", shown);
  }
  snprintf(my->db, sizeof my->db, "%.*s", (int)dlen, db);
  const char *q = db + dlen;
  if (*q == '?') q++;
  while (*q && *q != '#') {
    size_t n = strcspn(q, "&#");
    if (n == 10 && !strncmp(q, "mode=lease", 10)) {
      my->advisory = 0;
    } else if (n == 13 && !strncmp(q, "mode=advisory", 13)) {
      my->advisory = 1;
    } else if (n > 0) {
      /* The option's name only: its value may be a secret (password=). */
      size_t k = strcspn(q, "=&#");
      if (k == 8 && !strncasecmp(q, "password", 8))
        return dlock__error(DLOCK_EURL,
                            "'%s': the MySQL URL takes no password option: write it as "
                            "mysql://user:PASSWORD@host/db (percent-encoded) or set the client's password option",
                            shown);
      return dlock__error(DLOCK_EURL,
                          "'%s': unknown option '%.*s': the MySQL URL takes mode=lease (the default) "
                          "or mode=advisory (docs/mysql.md)",
                          shown, (int)(k > 60 ? 60 : k), q);
    }
    q += n;
    if (*q == '&') q++;
  }
  return 0;
}

int dlock__my_url_parse(const char *url, dlock__my_url *out) {
  memset(out, 0, sizeof *out);
  dlock__my_redact(url, out->display, sizeof out->display);
  dlock__my my;
  memset(&my, 0, sizeof my);
  int rc = parse_url(&my, url, out->display);
  if (rc == 0) {
    memcpy(out->host, my.host, sizeof out->host);
    memcpy(out->user, my.user, sizeof out->user);
    memcpy(out->password, my.password, sizeof out->password);
    memcpy(out->db, my.db, sizeof out->db);
    out->port = my.port;
    out->advisory = my.advisory;
  }
  memset(my.password, 0, sizeof my.password);
  return rc;
}

/* The connection's socket has something to read or was closed: the server
 * ended an idle connection (KILL, a restart, wait_timeout). */
static int idle_closed(MYSQL *conn) {
  struct pollfd p = {.fd = (int)mysql_get_socket(conn), .events = POLLIN | POLLRDHUP};
  if (p.fd < 0) return 1;
  return poll(&p, 1, 0) != 0;
}

/* mysql_init() initialises the library on first use, which is not
 * thread-safe: do it once, before any client connects. */
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;
static void lib_init(void) { lib_rc = mysql_library_init(0, NULL, NULL); }

static int conn_lost(unsigned e);

/* A new connection with its session set up; '*setup_lost' (when given) 1
 * when it was lost while setting up the session (a KILL at that moment:
 * nothing of the caller's ran, another one may be tried). */
static int connect_one(dlock__my *my, MYSQL **out, int *setup_lost) {
  *out = NULL;
  pthread_once(&lib_once, lib_init);
  if (lib_rc != 0) return dlock__error(DLOCK_ESYS, "the MariaDB client library could not initialise");
  MYSQL *conn = mysql_init(NULL);
  if (!conn) return dlock__error(DLOCK_ENOMEM, "out of memory (mysql_init)");
  unsigned ct = (unsigned)((my->connect_timeout_ms + 999) / 1000);
  unsigned rt = (unsigned)((my->command_timeout_ms + 999) / 1000);
  my_bool off = 0;
  mysql_options(conn, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
  mysql_options(conn, MYSQL_OPT_READ_TIMEOUT, &rt);
  mysql_options(conn, MYSQL_OPT_WRITE_TIMEOUT, &rt);
  mysql_options(conn, MYSQL_OPT_RECONNECT, &off); /* never resend behind our back */
  mysql_options(conn, MYSQL_OPT_LOCAL_INFILE, &off);
  mysql_options(conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  if (!mysql_real_connect(conn, my->host, my->user[0] ? my->user : NULL, my->password, my->db, my->port, NULL,
                          CLIENT_FOUND_ROWS)) {
    unsigned e = mysql_errno(conn);
    char msg[300];
    snprintf(msg, sizeof msg, "%s", mysql_error(conn));
    mysql_close(conn);
    if (e == 1045 || e == 1698)
      return dlock__error(DLOCK_EAUTH, "%s refused user '%s' (%s): check the user and password in the URL", my->display,
                          my->user, msg);
    if (e == 1049)
      return dlock__error(DLOCK_EDB, "%s has no database '%s': create it (CREATE DATABASE %s) or name another",
                          my->display, my->db, my->db);
    if (e == 1044)
      return dlock__error(DLOCK_ENOPERM,
                          "%s: user '%s' may not use database '%s': GRANT it the rights "
                          "docs/mysql.md lists",
                          my->display, my->user, my->db);
    return dlock__error(DLOCK_ECONNECT, "cannot connect to %s: %s: is the server up and the host and port right?",
                        my->display, msg);
  }
  /* Single statements, each its own transaction; a row lock never waits
   * longer than the command timeout. */
  char set[200];
  snprintf(set, sizeof set, "SET SESSION autocommit = 1, innodb_lock_wait_timeout = %u", rt ? rt : 1);
  if (mysql_real_query(conn, set, strlen(set)) != 0) {
    if (setup_lost) *setup_lost = conn_lost(mysql_errno(conn));
    int rc = dlock__error(DLOCK_ESERVER, "%s: setting up the session failed: %s", my->display, mysql_error(conn));
    mysql_close(conn);
    return rc;
  }
  *out = conn;
  return 0;
}

int dlock__my_open_session(dlock__my *my, MYSQL **out) { return connect_one(my, out, NULL); }

int dlock__my_bell_get(dlock__my *my, MYSQL **out) {
  pthread_mutex_lock(&my->mu);
  while (my->nbells > 0) {
    MYSQL *s = my->bells[--my->nbells];
    if (!idle_closed(s)) {
      my->bells_out++;
      pthread_mutex_unlock(&my->mu);
      *out = s;
      return 0;
    }
    mysql_close(s);
  }
  if (my->bells_out >= DLOCK__MY_BELLS) {
    pthread_mutex_unlock(&my->mu);
    return DLOCK_EBUSY;
  }
  my->bells_out++;
  pthread_mutex_unlock(&my->mu);
  int rc = connect_one(my, out, NULL);
  if (rc) {
    pthread_mutex_lock(&my->mu);
    my->bells_out--;
    pthread_mutex_unlock(&my->mu);
  }
  return rc;
}

void dlock__my_bell_put(dlock__my *my, MYSQL *s, int broken) {
  pthread_mutex_lock(&my->mu);
  my->bells_out--;
  if (!broken && my->nbells < DLOCK__MY_BELLS) s = (my->bells[my->nbells++] = s, NULL);
  pthread_mutex_unlock(&my->mu);
  if (s) mysql_close(s);
}

int dlock__my_connect(const char *url, const dlock_client_options *o, dlock__my **out) {
  *out = NULL;
  char shown[512];
  dlock__my_redact(url, shown, sizeof shown);
  if (o->tls_ca_file || o->tls_cert_file || o->tls_key_file || o->tls_server_name || o->tls_skip_verify)
    return dlock__error(DLOCK_EINVAL,
                        "'%s': TLS to MySQL/MariaDB is not offered yet (issue 31): use a loopback or "
                        "private network, or a TLS tunnel",
                        shown);
  if (o->wait_replicas || o->wait_timeout_ms)
    return dlock__error(DLOCK_EINVAL, "wait_replicas/wait_timeout_ms are Redis options; on MySQL use semi-"
                                      "synchronous replication on the server");
  if (o->connect_timeout_ms < 0 || o->connect_timeout_ms > 3600 * 1000 || o->command_timeout_ms < 0 ||
      o->command_timeout_ms > 3600 * 1000)
    return dlock__error(DLOCK_ERANGE,
                        "connect_timeout_ms %d / command_timeout_ms %d: each must be 0 (default) or "
                        "1..3600000",
                        o->connect_timeout_ms, o->command_timeout_ms);
  dlock__my *my = calloc(1, sizeof *my);
  if (!my) return dlock__error(DLOCK_ENOMEM, "out of memory");
  pthread_mutex_init(&my->mu, NULL);
  dlock__cond_init(&my->cv);
  snprintf(my->display, sizeof my->display, "%s", shown);
  my->command_timeout_ms = o->command_timeout_ms > 0 ? o->command_timeout_ms : 5000;
  my->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
  my->max_connections = o->max_connections > 0 && o->max_connections < DLOCK__MY_POOL_MAX ? o->max_connections : 4;
  int rc = parse_url(my, url, shown);
  if (!rc && o->username) snprintf(my->user, sizeof my->user, "%s", o->username);
  if (!rc && o->password) snprintf(my->password, sizeof my->password, "%s", o->password);
  MYSQL *conn = NULL;
  if (!rc) rc = connect_one(my, &conn, NULL);
  if (rc) {
    dlock__my_close(my);
    return rc;
  }
  my->idle[my->nidle++] = conn;
  my->nopen = 1;
  *out = my;
  return 0;
}

void dlock__my_close(dlock__my *my) {
  if (!my) return;
  for (int i = 0; i < my->nidle; i++) mysql_close(my->idle[i]);
  for (int i = 0; i < my->nbells; i++) mysql_close(my->bells[i]);
  pthread_mutex_destroy(&my->mu);
  pthread_cond_destroy(&my->cv);
  memset(my->password, 0, sizeof my->password);
  free(my);
}

/* A connection from the pool by 'deadline'. */
static int get_conn(dlock__my *my, dlock_mono_ms deadline, MYSQL **out, int *setup_lost) {
  pthread_mutex_lock(&my->mu);
  for (;;) {
    while (my->nidle > 0) {
      MYSQL *c = my->idle[--my->nidle];
      if (!idle_closed(c)) {
        pthread_mutex_unlock(&my->mu);
        *out = c;
        return 0;
      }
      mysql_close(c); /* ended by the server while idle: the statement was never sent on it */
      my->nopen--;
    }
    if (my->nopen < my->max_connections) {
      my->nopen++;
      pthread_mutex_unlock(&my->mu);
      int rc = connect_one(my, out, setup_lost);
      if (rc) {
        pthread_mutex_lock(&my->mu);
        my->nopen--;
        pthread_cond_signal(&my->cv);
        pthread_mutex_unlock(&my->mu);
      }
      return rc;
    }
    if (dlock_mono_now() >= deadline) {
      pthread_mutex_unlock(&my->mu);
      return dlock__error(DLOCK_ETIMEDOUT,
                          "%s: all %d connections stayed busy for the command timeout (%d ms): "
                          "raise max_connections",
                          my->display, my->max_connections, my->command_timeout_ms);
    }
    struct timespec ts;
    dlock__deadline_timespec(deadline, &ts);
    pthread_cond_timedwait(&my->cv, &my->mu, &ts);
  }
}

/* 'conn' back to the pool, or closed when 'broken' (lost): then the idle
 * ones go too, as whatever ended it (a KILL of the user's connections, a
 * restart) has likely ended them, maybe not yet visibly to idle_closed(). */
static void put_conn(dlock__my *my, MYSQL *conn, int broken) {
  MYSQL *drop[DLOCK__MY_POOL_MAX + 1];
  int ndrop = 0;
  pthread_mutex_lock(&my->mu);
  if (broken || my->nidle >= DLOCK__MY_POOL_MAX) {
    drop[ndrop++] = conn;
    my->nopen--;
  } else {
    my->idle[my->nidle++] = conn;
  }
  if (broken)
    while (my->nidle > 0) {
      drop[ndrop++] = my->idle[--my->nidle];
      my->nopen--;
    }
  pthread_cond_broadcast(&my->cv);
  pthread_mutex_unlock(&my->mu);
  for (int i = 0; i < ndrop; i++) mysql_close(drop[i]);
}

/* The connection is gone or its reply was lost (the statement may have run). */
static int conn_lost(unsigned e) {
  return (e >= 2000 && e < 3000) || e == 1053 /* shutdown */ || e == 1927 /* killed */ || e == 1317 /* interrupted */;
}

static int server_error(dlock__my *my, unsigned e, const char *msg) {
  switch (e) {
  case 1290:
  case 1836:
  case 1792:
  case 1015:
    return dlock__error(DLOCK_EREADONLY,
                        "%s is read-only (%s): point the URL at the primary, or turn read_only "
                        "off",
                        my->display, msg);
  case 1142:
  case 1143:
  case 1044:
  case 1227:
  case 1370:
    return dlock__error(DLOCK_ENOPERM,
                        "%s: user '%s' lacks a right dlock needs (%s): GRANT SELECT, INSERT, UPDATE "
                        "ON %s.dlock_locks, dlock_guards and dlock_sched, and SELECT, INSERT, UPDATE, DELETE on "
                        "dlock_holds, dlock_waiters and dlock_sched_runs (docs/mysql.md), and run `dlock init` as "
                        "a user that may CREATE",
                        my->display, my->user, msg, my->db);
  case 1205:
  case 1213:
    return dlock__error(DLOCK_ETIMEDOUT,
                        "%s: the statement waited too long for a row lock (%s): another "
                        "session holds dlock's row; try again",
                        my->display, msg);
  default:
    return dlock__error(DLOCK_ESERVER, "%s answered error %u: %s", my->display, e, msg);
  }
}

static const char sql_tables[][640] = {
    "CREATE TABLE IF NOT EXISTS dlock_locks ("
    " name VARBINARY(255) NOT NULL PRIMARY KEY,"
    " token VARBINARY(32) NOT NULL DEFAULT '',"
    " fence BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " expires DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',"
    " since DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',"
    " owner_info VARBINARY(1024) NOT NULL DEFAULT '',"
    " last VARBINARY(33) NOT NULL DEFAULT '') ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS dlock_guards ("
    " resource VARBINARY(255) NOT NULL PRIMARY KEY,"
    " fence BIGINT UNSIGNED NOT NULL,"
    " updated DATETIME(6) NOT NULL) ENGINE=InnoDB",
    /* Semaphores and read-write locks (family.c): one row per hold (a
     * permit, a reader, the writer; 'released' 1 while its lease ran, 2
     * after, 3 forced), one per live waiter (a heartbeat in 'expires'),
     * queued by 'seq'. Kept a minute after they end, then deleted. */
    "CREATE TABLE IF NOT EXISTS dlock_holds ("
    " name VARBINARY(255) NOT NULL,"
    " token VARBINARY(32) NOT NULL,"
    " side CHAR(1) NOT NULL,"
    " fence BIGINT UNSIGNED NOT NULL,"
    " expires DATETIME(6) NOT NULL,"
    " since DATETIME(6) NOT NULL,"
    " released TINYINT NOT NULL DEFAULT 0,"
    " owner_info VARBINARY(1024) NOT NULL DEFAULT '',"
    " PRIMARY KEY (name, token)) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS dlock_waiters ("
    " name VARBINARY(255) NOT NULL,"
    " token VARBINARY(32) NOT NULL,"
    " side CHAR(1) NOT NULL,"
    " seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
    " expires DATETIME(6) NOT NULL,"
    " PRIMARY KEY (name, token), KEY (seq)) ENGINE=InnoDB",
    /* The scheduler (sched.c): one row per job (its last tick, the run
     * that has it, the job lock's end), and the runs' history. */
    "CREATE TABLE IF NOT EXISTS dlock_sched ("
    " job VARBINARY(255) NOT NULL PRIMARY KEY,"
    " tick BIGINT NOT NULL DEFAULT -1,"
    " claimed BIGINT NOT NULL DEFAULT 0,"
    " run_token VARBINARY(32) NOT NULL DEFAULT '',"
    " node VARBINARY(128) NOT NULL DEFAULT '',"
    " fence BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " start_ms BIGINT NOT NULL DEFAULT 0,"
    " lock_expires DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00') ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS dlock_sched_runs ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " job VARBINARY(255) NOT NULL,"
    " run_token VARBINARY(32) NOT NULL,"
    " node VARBINARY(128) NOT NULL,"
    " fence BIGINT UNSIGNED NOT NULL,"
    " scheduled_ms BIGINT NOT NULL,"
    " start_ms BIGINT NOT NULL,"
    " duration_ms BIGINT NOT NULL,"
    " outcome VARBINARY(64) NOT NULL,"
    " UNIQUE KEY (job, run_token)) ENGINE=InnoDB",
    /* A job's state (jobs.c): its pause, the pending manual trigger, the
     * last one claimed. */
    "CREATE TABLE IF NOT EXISTS dlock_sched_jobs ("
    " job VARBINARY(255) NOT NULL PRIMARY KEY,"
    " paused_by VARBINARY(128) NULL, paused_reason VARBINARY(256) NULL, paused_ms BIGINT NULL,"
    " trig_by VARBINARY(128) NULL, trig_id VARBINARY(32) NULL, trig_ms BIGINT NULL,"
    " manual_id VARBINARY(32) NULL, manual_token VARBINARY(32) NULL, manual_fence BIGINT UNSIGNED NULL,"
    " manual_start BIGINT NULL, manual_ms BIGINT NULL) ENGINE=InnoDB",
};

static int run_once(dlock__my *my, MYSQL *conn, const char *sql, dlock__my_res *res, unsigned *err) {
  *err = 0;
  if (mysql_real_query(conn, sql, strlen(sql)) != 0) {
    *err = mysql_errno(conn);
    return -1;
  }
  res->affected = mysql_affected_rows(conn);
  res->insert_id = mysql_insert_id(conn);
  if (mysql_field_count(conn) > 0) {
    res->rows = mysql_store_result(conn);
    if (!res->rows) {
      *err = mysql_errno(conn);
      if (!*err) *err = CR_SERVER_LOST;
      return -1;
    }
  }
  (void)my;
  return 0;
}

int dlock__my_init(dlock__my *my) {
  for (size_t i = 0; i < sizeof sql_tables / sizeof sql_tables[0]; i++) {
    dlock__my_res r = {0};
    int rc = dlock__my_run(my, sql_tables[i], 1, &r);
    if (r.rows) mysql_free_result(r.rows);
    if (rc) {
      if (rc == DLOCK_ENOPERM)
        dlock__error(DLOCK_ENOPERM,
                     "%s: user '%s' may not create dlock's tables in '%s': run `dlock init --url "
                     "...` once as a user with CREATE on it, then grant this one the rights docs/mysql.md lists "
                     "on dlock's tables in %s",
                     my->display, my->user, my->db, my->db);
      return rc;
    }
  }
  my->created = 1;
  return 0;
}

/* A transaction's connection and the error of its last failed statement. */
struct dlock__my_tx {
  dlock__my *my;
  MYSQL *conn;
  unsigned err;
  int unstarted; /* it failed before its first statement of the body: nothing ran */
};

/* The body of one try: a statement, or a transaction. 0 done; 1 a server
 * or connection error in tx->err; < 0 the transaction's own answer (a
 * DLOCK_E* status with its message set). */
typedef int (*body_fn)(dlock__my_tx *tx, void *arg, dlock__my_res *res);

/* Run 'body' on a pooled connection: a lost connection sends it once more
 * when 'twice_safe' (res->resent), missing tables are made once, a deadlock
 * or lock wait timeout (rolled back) is tried once more. A connection lost
 * before a transaction began (nothing of it ran) is replaced and the
 * transaction tried again, a few times. A lost connection never goes back
 * to the pool. */
static int run_loop(dlock__my *my, const char *what, int twice_safe, body_fn body, void *arg, dlock__my_res *res) {
  memset(res, 0, sizeof *res);
  int made = 0, retried = 0, fresh = 0;
  for (int attempt = 0; attempt < 8; attempt++) {
    dlock__my_tx tx = {.my = my};
    int setup_lost = 0;
    int rc = get_conn(my, dlock_mono_now() + my->command_timeout_ms, &tx.conn, &setup_lost);
    if (rc && setup_lost && fresh < 3) { /* nothing was sent on it */
      fresh++;
      continue;
    }
    if (rc && res->resent) {
      res->maybe_ran = 1;
      return dlock__error(rc, "%s; the reply to the first copy had been lost: the statement may have run",
                          dlock_last_error());
    }
    if (rc) return rc;
    int got = body(&tx, arg, res);
    if (got != 1) {
      put_conn(my, tx.conn, conn_lost(tx.err));
      return got;
    }
    unsigned e = tx.err;
    char msg[300];
    snprintf(msg, sizeof msg, "%s", mysql_error(tx.conn));
    if (conn_lost(e)) {
      put_conn(my, tx.conn, 1);
      if (tx.unstarted && fresh < 3) { /* nothing ran on it: not a second copy */
        fresh++;
        continue;
      }
      if (tx.unstarted && !res->resent)
        return dlock__error(DLOCK_EIO,
                            "%s: the connection was lost %d times before the transaction began (%s): "
                            "nothing ran; is the server up, or is something ending its connections?",
                            my->display, fresh + 1, msg);
      if (twice_safe && !res->resent) {
        res->resent = 1; /* the same statement: it decides the same way by its token */
        continue;
      }
      res->maybe_ran = 1;
      int st = strstr(msg, "timeout") || strstr(msg, "timed out") ? DLOCK_ETIMEDOUT : DLOCK_EIO;
      return dlock__error(st,
                          "%s: the connection was lost or timed out before the reply (%s): the statement may "
                          "have run",
                          my->display, msg);
    }
    put_conn(my, tx.conn, 0);
    if (e == 1146 && !made && strncmp(what, "CREATE", 6) != 0) { /* the tables are missing: make them, once */
      made = 1;
      rc = dlock__my_init(my);
      if (rc) return rc;
      continue;
    }
    if ((e == 1213 || e == 1205) && !retried) { /* rolled back whole: safe to send again */
      retried = 1;
      continue;
    }
    if (e == 1146)
      return dlock__error(DLOCK_ESERVER, "%s: dlock's tables are missing in '%s': run `dlock init --url ...`",
                          my->display, my->db);
    return server_error(my, e, msg);
  }
  if (res->resent) res->maybe_ran = 1;
  return dlock__error(DLOCK_EIO, "%s: the statement failed again and again", my->display);
}

static int one_statement(dlock__my_tx *tx, void *sql, dlock__my_res *res) {
  return run_once(tx->my, tx->conn, sql, res, &tx->err) == 0 ? 0 : 1;
}

int dlock__my_run(dlock__my *my, const char *sql, int twice_safe, dlock__my_res *res) {
  return run_loop(my, sql, twice_safe, one_statement, (void *)sql, res);
}

int dlock__my_tx_run(dlock__my_tx *tx, const char *sql, dlock__my_res *res) {
  memset(res, 0, sizeof *res);
  return run_once(tx->my, tx->conn, sql, res, &tx->err) == 0 ? 0 : 1;
}

typedef struct tx_call {
  int (*fn)(dlock__my_tx *tx, void *arg);
  void *arg;
} tx_call;

/* READ COMMITTED: every statement sees what committed before it (the name's
 * row, locked first, orders the writers). A failed statement or an answer
 * of the body's own rolls the whole back (a lock wait timeout alone would
 * keep the rest of the transaction). */
static int transaction(dlock__my_tx *tx, void *arg, dlock__my_res *res) {
  tx_call *call = arg;
  static const char begin[] = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";
  dlock__my_res r;
  if (dlock__my_tx_run(tx, begin, &r) != 0 || dlock__my_tx_run(tx, "START TRANSACTION", &r) != 0) {
    tx->unstarted = 1; /* a server error is answered as one; a lost connection is tried again */
    return 1;
  }
  int got = call->fn(tx, call->arg);
  if (got == 0 && dlock__my_tx_run(tx, "COMMIT", &r) == 0) return 0;
  unsigned e = tx->err;
  if (!conn_lost(e)) {
    dlock__my_res rb;
    (void)dlock__my_tx_run(tx, "ROLLBACK", &rb);
    tx->err = e;
  }
  (void)res;
  return got < 0 ? got : 1;
}

int dlock__my_txn(dlock__my *my, int (*fn)(dlock__my_tx *tx, void *arg), void *arg, int *resent, int *maybe_ran) {
  tx_call call = {fn, arg};
  dlock__my_res res;
  int rc = run_loop(my, "", 1, transaction, &call, &res);
  if (resent) *resent = res.resent;
  if (maybe_ran) *maybe_ran = res.maybe_ran;
  return rc;
}

void dlock__my_hex(const char *s, size_t n, char *out) {
  static const char hx[] = "0123456789abcdef";
  size_t o = 0;
  out[o++] = 'X';
  out[o++] = '\'';
  for (size_t i = 0; i < n; i++) {
    out[o++] = hx[(unsigned char)s[i] >> 4];
    out[o++] = hx[(unsigned char)s[i] & 15];
  }
  out[o++] = '\'';
  out[o] = '\0';
}

const char *dlock__my_cell(dlock__my_res *r, unsigned col) {
  if (!r->rows || col >= mysql_num_fields(r->rows)) return "";
  mysql_data_seek(r->rows, 0);
  MYSQL_ROW row = mysql_fetch_row(r->rows);
  return row && row[col] ? row[col] : "";
}
