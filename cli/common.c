/*
 * common.c - what every subcommand that talks to Redis needs: connecting,
 * mapping library statuses to exit codes, reporting errors with the
 * library's detail, and writing JSON strings. URLs are shown with the
 * password masked, since error messages end up in logs.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CLI_DEFAULT_URL "redis://127.0.0.1:6379"

const char *cli_effective_url(const char *url)
{
  if (url != NULL && url[0] != '\0')
    return url;
  const char *env = getenv("DLOCK_URL");
  if (env != NULL && env[0] != '\0')
    return env;
  return CLI_DEFAULT_URL;
}

void cli_redact_url(const char *url, char *buf, size_t len)
{
  /* scheme://user:password@host -> scheme://user:***@host. Only the part
   * before the first '/' after "://" can hold credentials. */
  const char *start = strstr(url, "://");
  const char *at = NULL;
  const char *colon = NULL;

  if (start != NULL) {
    start += 3;
    const char *end = start + strcspn(start, "/?");
    for (const char *p = start; p < end; p++) {
      if (*p == '@')
        at = p;
    }
    if (at != NULL)
      colon = memchr(start, ':', (size_t)(at - start));
  }
  if (colon == NULL) {
    snprintf(buf, len, "%s", url);
  } else {
    snprintf(buf, len, "%.*s:***%s", (int)(colon - url), url, at);
  }
  /* A password may also sit in the query of a unix:// URL. */
  char *pw = strstr(buf, "password=");
  if (pw != NULL) {
    pw += strlen("password=");
    size_t n = strcspn(pw, "&");
    if (n > 0 && (size_t)(pw - buf) + 3 < len) {
      memmove(pw + 3, pw + n, strlen(pw + n) + 1);
      memcpy(pw, "***", 3);
    }
  }
}

int cli_exit_for_status(int status)
{
  switch ((dlock_status)status) {
  case DLOCK_OK:
    return CLI_EXIT_OK;
  case DLOCK_EBUSY:
    return CLI_EXIT_BUSY;
  case DLOCK_ELOST:
  case DLOCK_ENOTHELD:
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
    return CLI_EXIT_UNAVAILABLE;
  case DLOCK_EPROTO:
  case DLOCK_ESERVER:
  case DLOCK_EWRONGTYPE:
  case DLOCK_ENOMEM:
  case DLOCK_EUNKNOWN:
  case DLOCK_ESYS:
  case DLOCK_ECLOSED:
  case DLOCK_ECANCELED:
    return CLI_EXIT_SOFTWARE;
  }
  return CLI_EXIT_SOFTWARE;
}

int cli_report(int status, const char *detail, const char *fmt, ...)
{
  va_list ap;

  fputs("dlock: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, ": %s", dlock_strerror(status));
  /* The detail usually repeats the short text with more context; show it
   * alone on its own line so that long server names stay readable. */
  if (detail != NULL && detail[0] != '\0')
    fprintf(stderr, "\ndlock:   %s", detail);
  fputc('\n', stderr);
  return cli_exit_for_status(status);
}

int cli_connect(const char *url, dlock_client **out)
{
  dlock_client_options opts;
  char shown[512];

  dlock_client_options_init(&opts);
  opts.url = url; /* NULL: the library reads $DLOCK_URL itself */
  *out = NULL;
  int rc = dlock_client_new(out, &opts);
  if (rc == 0)
    return 0;
  cli_redact_url(cli_effective_url(url), shown, sizeof shown);
  return cli_report(rc, dlock_last_error(), "cannot use Redis at %s", shown);
}

void cli_json_string(FILE *out, const char *s)
{
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
      /* Other control bytes are escaped; bytes >= 0x80 pass through, as
       * owner_info and names are expected to be UTF-8. */
      if (*p < 0x20)
        fprintf(out, "\\u%04x", *p);
      else
        fputc(*p, out);
      break;
    }
  }
  fputc('"', out);
}
