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
  *rc = 0;
  if (mysql_real_query(s, sql, strlen(sql)) != 0) {
    *rc = dlock__error(DLOCK_EIO, "%s: the session holding the advisory lock failed: %s", my->display,
                       mysql_error(s));
    return 0;
  }
  MYSQL_RES *res = mysql_store_result(s);
  MYSQL_ROW row = res ? mysql_fetch_row(res) : NULL;
  int64_t v = row && row[0] ? strtoll(row[0], NULL, 10) : -1;
  if (!res) *rc = dlock__error(DLOCK_EIO, "%s: no answer on the advisory lock's session", my->display);
  if (res) mysql_free_result(res);
  return v;
}

int dlock__my_adv_acquire(dlock__my *my, const char *key, const char *shown, int64_t wait_ms, dlock_mono_ms deadline,
                          int (*canceled)(void *), void *arg, void **session) {
  MYSQL *s = NULL;
  int rc = dlock__my_open_session(my, &s);
  if (rc) return rc;
  for (;;) {
    /* Waits run on the server, in slices of at most half a second, so that
     * a cancel or the deadline is seen. */
    int64_t slice = 0;
    if (wait_ms != 0) {
      int64_t left = deadline == INT64_MAX ? 500 : deadline - dlock_mono_now();
      slice = left < 0 ? 0 : left > 500 ? 500 : left;
    }
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', %" PRId64 ".%03" PRId64 ")", key, slice / 1000, slice % 1000);
    int64_t got = dlock__my_session_value(my, s, sql, &rc);
    if (rc) {
      mysql_close(s); /* the session's end frees whatever it took */
      /* The message names the server first (the core adds the lock). */
      return dlock__error(rc, "%s; nothing is held (the lock goes with its session)", dlock_last_error());
    }
    if (got == 1) {
      *session = s;
      return 0;
    }
    if (got != 0) {
      mysql_close(s);
      return dlock__error(DLOCK_ESERVER, "lock '%s' on %s: GET_LOCK answered NULL (an error on the server)", shown,
                          my->display);
    }
    if (canceled(arg)) {
      mysql_close(s);
      return dlock__error(DLOCK_ECANCELED, "the wait was canceled");
    }
    if (wait_ms == 0 || dlock_mono_now() >= deadline) {
      mysql_close(s);
      return dlock__error(DLOCK_EBUSY, "lock '%s' is held by another session (%s, advisory mode)", shown,
                          my->display);
    }
  }
}

int dlock__my_adv_check(dlock__my *my, void *session, const char *key) {
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT IS_USED_LOCK('%s') = CONNECTION_ID()", key);
  int rc;
  int64_t v = dlock__my_session_value(my, session, sql, &rc);
  if (rc || v != 1) {
    dlock__error_clear();
    return DLOCK_ELOST;
  }
  return 0;
}

int dlock__my_adv_release(dlock__my *my, void *session, const char *key, const char *shown) {
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT RELEASE_LOCK('%s')", key);
  int rc;
  int64_t v = dlock__my_session_value(my, session, sql, &rc);
  mysql_close(session);
  if (rc || v != 1)
    return dlock__error(DLOCK_ENOTHELD, "lock '%s' on %s: the session that held it had ended, and the lock with "
                        "it (advisory mode)", shown, my->display);
  return 0;
}

void dlock__my_adv_close(void *session) {
  if (session) mysql_close(session);
}
