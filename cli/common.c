/*
 * common.c - what every subcommand that talks to the server needs: connecting,
 * mapping library statuses to exit codes, reporting errors with the
 * library's detail, and writing JSON strings. URLs are shown with the
 * password masked, since error messages end up in logs.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>

#include "cli.h"

const char *cli_effective_url(const char *url) {
  if (url != NULL && url[0] != '\0') cli_config_set_flag("url", url);
  return cli_config_url();
}

const char *cli_server_kind(const char *url) {
  const char *kind = dlock_url_backend(url);
  return kind != NULL ? kind : "the server";
}

void cli_redact_url(const char *url, char *buf, size_t len) { dlock_url_redact(url, buf, len); }

char *cli_child_env_url(const char *url) {
  /* A password given on the command line or in a config file is not handed
   * to the command (nor to /proc/PID/environ): DLOCK_URL shows it as ***.
   * One that came in dlock's own $DLOCK_URL is the caller's to hand on. */
  size_t len = strlen("DLOCK_URL=") + strlen(url) + 16;
  char *env = malloc(len);
  if (env == NULL) return NULL;
  const char *own = getenv("DLOCK_URL");
  int n = snprintf(env, len, "DLOCK_URL=");
  if (own != NULL && strcmp(own, url) == 0)
    snprintf(env + n, len - (size_t)n, "%s", url);
  else
    cli_redact_url(url, env + n, len - (size_t)n);
  return env;
}

int cli_exit_for_status(int status) {
  switch ((dlock_status)status) {
  case DLOCK_OK:
    return CLI_EXIT_OK;
  case DLOCK_EBUSY:
    return CLI_EXIT_BUSY;
  case DLOCK_ELOST:
  case DLOCK_ENOTHELD:
  case DLOCK_ENOLATCH: /* the latch is gone (expired) or was never set */
    return CLI_EXIT_LOST;
  case DLOCK_ESTALE:
    return CLI_EXIT_STALE;
  case DLOCK_EINVAL:
  case DLOCK_ENAME:
  case DLOCK_ERANGE:
  case DLOCK_EURL:
  case DLOCK_ECRON:
  case DLOCK_ETZ:
  case DLOCK_ETIME:
  case DLOCK_EFOREIGN: /* release --force without --foreign; run on an application key */
  case DLOCK_EDB:
  case DLOCK_ELIMIT:     /* run --limit N with another limit than the holders gave */
  case DLOCK_EWRONGTYPE: /* the name is another key's: pick another name or --prefix */
  case DLOCK_EUPGRADE:
    return CLI_EXIT_USAGE;
  /* The service is not there for us: sysexits' EX_UNAVAILABLE. */
  case DLOCK_ECONNECT:
  case DLOCK_EAUTH:
  case DLOCK_ETIMEDOUT:
  case DLOCK_EIO:
  case DLOCK_ETLS:
  case DLOCK_ENOPERM:
  case DLOCK_EREADONLY:
  case DLOCK_ESERVEROOM:
  case DLOCK_ETOPOLOGY:
  case DLOCK_EREPLICAS:
  case DLOCK_EQUORUM:
  case DLOCK_ECLUSTER:
  case DLOCK_ENOTREADY:
  /* An answer dlock cannot read: most often a port where another server
   * listens (the message names what was expected), not dlock's bug. */
  case DLOCK_EPROTO:
  /* The server stopped answering in the middle of a call (or of its
   * cleanup): what is left is the server's doing, not a bug; the detail
   * says what may be left (a hold until its lease ends, a count). */
  case DLOCK_EUNKNOWN:
    return CLI_EXIT_UNAVAILABLE;
  case DLOCK_ESERVER:
  case DLOCK_EFENCE:
  case DLOCK_ENOMEM:
  case DLOCK_ESYS:
  case DLOCK_ECLOSED:
  case DLOCK_ECANCELED:
    return CLI_EXIT_SOFTWARE;
  }
  return CLI_EXIT_SOFTWARE;
}

int cli_report(int status, const char *detail, const char *fmt, ...) {
  va_list ap;
  char *text = NULL;
  size_t len = 0;
  /* Written whole at the end: one write(), or one JSON line (log.c). */
  FILE *out = open_memstream(&text, &len);
  if (out == NULL) return cli_exit_for_status(status);

  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  /* A name in use as another kind: the first line names the kind ("the
   * name is a semaphore, not a mutex"), as the detail says it. */
  const char *kind = NULL;
  size_t kind_len = 0;
  if (status == DLOCK_EWRONGTYPE && detail != NULL) {
    /* "X is in use as a semaphore, not ..." or "X is a semaphore, not ..." */
    const char *p = strstr(detail, " is in use as a");
    if (p != NULL)
      kind = p + strlen(" is in use as ");
    else if ((p = strstr(detail, " is a")) != NULL)
      kind = p + strlen(" is ");
    if (kind != NULL) kind_len = strcspn(kind, ":;(");
  }
  if (kind != NULL && kind_len > 0 && kind_len < 120)
    fprintf(out, ": the name is %.*s", (int)kind_len, kind);
  else
    fprintf(out, ": %s", dlock_strerror(status));
  /* The detail usually repeats the short text with more context; show it
   * alone on its own line so that long server names stay readable. */
  const char *more = cli_log_json() ? "; " : "\ndlock:   ";
  if (detail != NULL && detail[0] != '\0') fprintf(out, "%s%s", more, detail);
  int code = cli_exit_for_status(status);
  /* A newcomer's first run: say where the server came from. */
  if (code == CLI_EXIT_UNAVAILABLE && cli_config_url_defaulted())
    fprintf(out, "%sno --url, $DLOCK_URL or config file named a server, so the default %s was used", more,
            cli_config_url());
  if (fclose(out) == 0) cli_log_line("error", "error", NULL, text);
  free(text);
  return code;
}

void cli_print_warnings(const dlock_client *c) {
  const char *w = dlock_client_warnings(c);
  /* One "dlock: warning:" line per warning; the library separates them by '\n'. */
  while (w != NULL && *w != '\0') {
    size_t n = strcspn(w, "\n");
    cli_log("warning", "warning", NULL, "warning: %.*s", (int)n, w);
    w += n + (w[n] == '\n');
  }
}

static const char *metrics_names;

void cli_connect_metrics_names(const char *names) { metrics_names = names; }

int cli_connect(const char *url, dlock_client **out) {
  dlock_client_options opts;
  char shown[512];

  *out = NULL;
  dlock_client_options_init(&opts);
  /* --url '' counts as not given: $DLOCK_URL, the config files, the default. */
  if (url != NULL && url[0] != '\0') cli_config_set_flag("url", url);
  int rc = cli_config_load();
  if (rc != 0) return rc;
  cli_config_apply(&opts);
  opts.metrics_names = metrics_names;
  rc = dlock_client_new(out, &opts);
  if (rc == 0) {
    cli_print_warnings(*out);
    return 0;
  }
  cli_redact_url(cli_effective_url(url), shown, sizeof shown);
  return cli_report(rc, dlock_last_error(), "cannot use %s at %s", cli_server_kind(shown), shown);
}

int cli_utf8_sequence(const unsigned char *p) {
  int n = p[0] < 0x80                    ? 1
          : p[0] >= 0xc2 && p[0] <= 0xdf ? 2
          : p[0] >= 0xe0 && p[0] <= 0xef ? 3
          : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                         : 0;
  for (int i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  /* Overlong forms, surrogates and code points above U+10FFFF. */
  if ((n == 3 && p[0] == 0xe0 && p[1] < 0xa0) || (n == 3 && p[0] == 0xed && p[1] >= 0xa0) ||
      (n == 4 && p[0] == 0xf0 && p[1] < 0x90) || (n == 4 && p[0] == 0xf4 && p[1] >= 0x90))
    return 0;
  return n;
}

void cli_json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", out);
      break;
    case '\\':
      fputs("\\\\", out);
      break;
    case '\n':
      fputs("\\n", out);
      break;
    case '\r':
      fputs("\\r", out);
      break;
    case '\t':
      fputs("\\t", out);
      break;
    default:
      /* Other control bytes are escaped. Names may hold any byte, but JSON
       * must be UTF-8: a byte that starts no well-formed sequence becomes
       * U+FFFD, so that every parser accepts the output. */
      if (*p < 0x20) {
        fprintf(out, "\\u%04x", *p);
      } else {
        int n = cli_utf8_sequence(p);
        if (n == 0) {
          fputs("\\ufffd", out);
        } else {
          fwrite(p, 1, (size_t)n, out);
          p += n - 1;
        }
      }
      break;
    }
  }
  fputc('"', out);
}

void cli_names_add(const char *name, void *list) {
  cli_names *l = list;
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (v == NULL) {
      l->oom = 1;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  if ((l->v[l->n] = strdup(name)) == NULL)
    l->oom = 1;
  else
    l->n++;
}

void cli_names_free(cli_names *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

int cli_stop_signalfd(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  return signalfd(-1, &set, SFD_CLOEXEC);
}
