/*
 * advisory.c - the MySQL/MariaDB backend's advisory mode (?mode=advisory,
 * docs/mysql.md): a hold is GET_LOCK on a connection of its own, kept open
 * while held. No fence, no lease: the lock lives exactly as long as that
 * session; the watchdog looks at the session every ADVISORY_CHECK_MS / 3
 * and reports the hold lost as soon as it is gone. The weaker choice.
 *
 * GET_LOCK's name is "dlock:" and the first 160 bits of SHA-256 of the lock
 * name in hex (46 characters, under MySQL's limit of 64), so any name is a
 * valid key; it goes into SQL as a quoted hex string, nothing else.
 *
 * The hold must be its own server session: a proxy that shares sessions
 * (consecutive statements of one connection on other server sessions)
 * would leave the lock on a session other clients' statements run on. So
 * the acquire first marks its session (@dlock_hold = "<CONNECTION_ID()>:
 * <nonce>"), and GET_LOCK runs only in a statement that finds the mark on
 * the session that runs it (no row otherwise: refused, nothing taken); the
 * server session's id is kept, and every later statement of the hold (each
 * wait slice, the watchdog's look, the release) checks that it runs on it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "mysql/my_internal.h"

void dlock__my_adv_key(const char *name, char *out) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  EVP_Digest(name, strlen(name), md, &mdlen, EVP_sha256(), NULL);
  static const char hx[] = "0123456789abcdef";
  memcpy(out, "dlock:", 6);
  for (int i = 0; i < 20; i++) {
    out[6 + 2 * i] = hx[md[i] >> 4];
    out[7 + 2 * i] = hx[md[i] & 15];
  }
  out[46] = '\0';
}

int64_t dlock__my_session_value(dlock__my *my, MYSQL *s, const char *sql, int *rc) {
  int64_t v = -1;
  *rc = dlock__my_session_row(my, s, sql, &v, 1);
  if (*rc == 1) *rc = dlock__error(DLOCK_EIO, "%s: no answer on the advisory lock's session", my->display);
  return v;
}

int dlock__my_session_row(dlock__my *my, MYSQL *s, const char *sql, int64_t *vals, int n) {
  if (mysql_real_query(s, sql, strlen(sql)) != 0)
    return dlock__error(DLOCK_EIO, "%s: the session holding the advisory lock failed: %s", my->display, mysql_error(s));
  MYSQL_RES *res = mysql_store_result(s);
  if (!res) return dlock__error(DLOCK_EIO, "%s: no answer on the advisory lock's session", my->display);
  MYSQL_ROW row = mysql_fetch_row(res);
  unsigned cols = mysql_num_fields(res);
  for (int i = 0; row && i < n; i++) vals[i] = (unsigned)i < cols && row[i] ? strtoll(row[i], NULL, 10) : -1;
  mysql_free_result(res);
  return row ? 0 : 1;
}

/* The refusal: the hold's statements ran on more than one server session. */
static int shared_session(dlock__my *my, int code, const char *what) {
  return dlock__error(code,
                      "%s: advisory mode needs its own server session; a proxy at %s:%u shares "
                      "sessions (%s): point the advisory URL at the server itself, or use lease mode (drop "
                      "mode=advisory from the URL)",
                      my->display, my->host, my->port, what);
}

/* The session 'thread' (mysql_thread_id) failed while a GET_LOCK of 'key'
 * may have run on it: the server frees its locks when it ends the session,
 * which it notices when it next reads the connection, not at once. End it
 * (KILL, from a new session of the same user: allowed without privileges)
 * and wait until 'key' is not its, so that "nothing is held" is true when
 * said. 0: not held by it; -1: not confirmed by 'until'. */
static int end_lost_session(dlock__my *my, unsigned long thread, const char *key, dlock_mono_ms until) {
  MYSQL *k = NULL;
  if (dlock__my_open_session(my, &k) != 0) return -1;
  char sql[200];
  snprintf(sql, sizeof sql, "KILL CONNECTION %lu", thread);
  (void)mysql_real_query(k, sql, strlen(sql)); /* "unknown thread": already gone */
  snprintf(sql, sizeof sql, "SELECT IS_USED_LOCK('%s')", key);
  int freed = -1;
  do {
    int64_t v = -1;
    if (dlock__my_session_row(my, k, sql, &v, 1) < 0) break;
    if (v != (int64_t)thread) {
      freed = 0;
      break;
    }
    dlock__sleep_ms(20);
  } while (dlock_mono_now() < until);
  mysql_close(k);
  return freed;
}

int dlock__my_adv_acquire(dlock__my *my, const char *key, const char *shown, int64_t wait_ms, dlock_mono_ms deadline,
                          int (*canceled)(void *), void *arg, void **session, int64_t *session_id) {
  MYSQL *s = NULL;
  char nonce[33];
  int rc = dlock__random_hex(nonce, 16);
  if (!rc) rc = dlock__my_open_session(my, &s);
  if (rc) return rc;
  char sql[400];
  snprintf(sql, sizeof sql, "SET @dlock_hold = CONCAT(CONNECTION_ID(), ':%s')", nonce);
  if (mysql_real_query(s, sql, strlen(sql)) != 0) {
    rc = dlock__error(DLOCK_EIO, "%s: the advisory lock's session failed: %s; nothing is held", my->display,
                      mysql_error(s));
    mysql_close(s);
    return rc;
  }
  int64_t id = 0;
  for (;;) {
    /* Waits run on the server, in slices of at most half a second, so that
     * a cancel or the deadline is seen. */
    int64_t slice = 0;
    if (wait_ms != 0) {
      int64_t left = deadline == INT64_MAX ? 500 : deadline - dlock_mono_now();
      slice = left < 0 ? 0 : left > 500 ? 500 : left;
    }
    /* GET_LOCK only on the session that set the mark (the WHERE is
     * evaluated first: no row, nothing taken). */
    snprintf(sql, sizeof sql,
             "SELECT GET_LOCK('%s', %" PRId64 ".%03" PRId64 "), CONNECTION_ID(), IS_USED_LOCK('%s') FROM DUAL "
             "WHERE @dlock_hold <=> CONCAT(CONNECTION_ID(), ':%s')",
             key, slice / 1000, slice % 1000, key, nonce);
    int64_t v[3] = {-1, -1, -1};
    rc = dlock__my_session_row(my, s, sql, v, 3);
    if (rc < 0) {
      unsigned long thread = mysql_thread_id(s);
      mysql_close(s); /* the session's end frees whatever it took */
      char why[600];
      snprintf(why, sizeof why, "%s", dlock_last_error());
      if (end_lost_session(my, thread, key, dlock_mono_now() + my->command_timeout_ms) != 0)
        return dlock__error(DLOCK_EUNKNOWN,
                            "%s; the lock may stay held until the server ends that session (it was not "
                            "confirmed within the command timeout)",
                            why);
      /* The message names the server first (the core adds the lock). */
      return dlock__error(rc, "%s; nothing is held (the lock went with its session)", why);
    }
    if (rc == 1 || (id != 0 && v[1] != id) || (v[0] == 1 && v[2] != v[1])) {
      /* Not the marked session, or not the one of the slice before. A row
       * with GET_LOCK's 1 cannot come from a session without the mark, so
       * nothing was taken on another session. */
      mysql_close(s);
      return shared_session(my, DLOCK_EINVAL,
                            "a statement of this connection ran on a server session other than the one "
                            "its first statement ran on; nothing is held");
    }
    id = v[1];
    if (v[0] == 1) {
      *session = s;
      *session_id = id;
      return 0;
    }
    if (v[0] != 0) {
      mysql_close(s);
      return dlock__error(DLOCK_ESERVER,
                          "lock '%s' on %s: the server could not take the advisory lock (an error "
                          "on the server)",
                          shown, my->display);
    }
    if (canceled(arg)) {
      mysql_close(s);
      return dlock__error(DLOCK_ECANCELED, "the wait was canceled");
    }
    if (wait_ms == 0 || dlock_mono_now() >= deadline) {
      mysql_close(s);
      return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another session (%s, advisory mode)", shown, my->display);
    }
  }
}

int dlock__my_adv_check(dlock__my *my, void *session, const char *key, int64_t session_id, int *moved) {
  char sql[300];
  /* Both, on the one session: it holds the lock, and it is the hold's. */
  snprintf(sql, sizeof sql, "SELECT IS_USED_LOCK('%s') <=> %" PRId64 ", CONNECTION_ID()", key, session_id);
  int64_t v[2] = {-1, -1};
  int rc = dlock__my_session_row(my, session, sql, v, 2);
  *moved = rc == 0 && v[1] != session_id;
  dlock__error_clear();
  return rc == 0 && v[0] == 1 && !*moved ? 0 : DLOCK_ELOST;
}

int dlock__my_adv_release(dlock__my *my, void *session, const char *key, int64_t session_id, const char *shown) {
  char sql[300];
  snprintf(sql, sizeof sql, "SELECT RELEASE_LOCK('%s'), CONNECTION_ID()", key);
  int64_t v[2] = {-1, -1};
  int rc = dlock__my_session_row(my, session, sql, v, 2);
  mysql_close(session);
  if (rc == 0 && v[1] != session_id) {
    dlock__error_clear();
    return shared_session(my, DLOCK_ENOTHELD,
                          "the release ran on another server session than the hold's; the lock ends when the "
                          "proxy ends that session");
  }
  if (rc || v[0] != 1)
    return dlock__error(DLOCK_ENOTHELD,
                        "lock '%s' on %s: the session that held it had ended, and the lock with "
                        "it (advisory mode)",
                        shown, my->display);
  return 0;
}

void dlock__my_adv_close(void *session) {
  if (session) mysql_close(session);
}
