/*
 * metrics.c - the long-running commands' metrics (cron, every, elect):
 * --metrics-file PATH, rewritten atomically (a temporary file in the same
 * directory, then rename) every --metrics-interval and at the end, for
 * node_exporter's textfile collector; --metrics-listen ADDR:PORT, an HTTP
 * server (libmicrohttpd, its own thread) answering GET /metrics. Both
 * write what dlock_client_metrics_write() gives (docs/metrics.md).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef DLOCK_HAVE_MICROHTTPD
#include <microhttpd.h>
#else
struct MHD_Daemon;
#endif

#include "cli.h"

#define DEFAULT_INTERVAL_MS 10000

const cli_opt cli_metrics_table[] = {
    {"metrics-file", 0, 1, CLI_OPT_METRICS_FILE},
    {"metrics-listen", 0, 1, CLI_OPT_METRICS_LISTEN},
    {"metrics-interval", 0, 1, CLI_OPT_METRICS_INTERVAL},
    {NULL, 0, 0, 0},
};

struct cli_metrics {
  dlock_client *c;
  cli_metrics_opts o;
  struct MHD_Daemon *http;
  pthread_t writer;
  int writer_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  int last_errno; /* of the last failed file write, to say it once */
};

int cli_parse_listen(const char *text, struct sockaddr_storage *sa, socklen_t *len) {
  const char *colon = strrchr(text, ':');
  uint64_t port;
  char host[64];

  if (colon == NULL || cli_parse_u64(colon + 1, 65535, &port) != 0 || port == 0) return -1;
  size_t n = (size_t)(colon - text);
  if (n >= sizeof host) return -1;
  memcpy(host, text, n);
  host[n] = '\0';
  memset(sa, 0, sizeof *sa);
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
    host[n - 1] = '\0';
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    *len = sizeof *s6;
    return inet_pton(AF_INET6, host + 1, &s6->sin6_addr) == 1 ? 0 : -1;
  }
  struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
  s4->sin_family = AF_INET;
  s4->sin_port = htons((uint16_t)port);
  *len = sizeof *s4;
  return inet_pton(AF_INET, host, &s4->sin_addr) == 1 ? 0 : -1;
}

int cli_metrics_opt(const char *cmd, int id, const char *arg, cli_metrics_opts *o) {
  struct sockaddr_storage sa;
  socklen_t len;

  switch (id) {
  case CLI_OPT_METRICS_FILE:
    if (arg[0] == '\0') return cli_usage_error(cmd, "--metrics-file: empty path");
    o->file = arg;
    return 0;
  case CLI_OPT_METRICS_LISTEN:
    if (cli_parse_listen(arg, &sa, &len) != 0)
      return cli_usage_error(cmd,
                             "--metrics-listen: '%s' is not ADDR:PORT (127.0.0.1:9464, "
                             "[::1]:9464; an address, not a host name)",
                             arg);
#ifndef DLOCK_HAVE_MICROHTTPD
    return cli_usage_error(cmd, "--metrics-listen: this dlock was built without libmicrohttpd; install it "
                                "(Debian: libmicrohttpd-dev) and build again, or use --metrics-file");
#endif
    o->listen = arg;
    return 0;
  case CLI_OPT_METRICS_INTERVAL:
    if (cli_parse_duration(arg, &o->interval_ms) != 0)
      return cli_usage_error(cmd, "--metrics-interval: %s", dlock_last_error());
    if (o->interval_ms < 100) return cli_usage_error(cmd, "--metrics-interval: %s is less than 100ms", arg);
    return 0;
  }
  return 0;
}

/* ---- The file ---- */

/* Write the file once: a temporary file next to it, renamed over it, so
 * that a reader sees the old text or the new one, never a part. */
static void write_file(cli_metrics *m) {
  char tmp[4096];
  int e = 0;

  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", m->o.file, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (f == NULL) {
    e = errno;
  } else {
    int rc = dlock_client_metrics_write(m->c, f, DLOCK_METRICS_PROMETHEUS);
    if (rc != 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) e = errno ? errno : EIO;
    if (fclose(f) != 0 && e == 0) e = errno;
    if (e == 0 && rename(tmp, m->o.file) != 0) e = errno;
    if (e != 0) unlink(tmp);
  }
  if (e != 0 && e != m->last_errno)
    fprintf(stderr,
            "dlock: cannot write the metrics to %s: %s; check that its directory exists "
            "and is writable (trying again every interval)\n",
            m->o.file, strerror(e));
  else if (e == 0 && m->last_errno != 0)
    fprintf(stderr, "dlock: metrics written to %s again\n", m->o.file);
  m->last_errno = e;
}

static void *writer_main(void *arg) {
  cli_metrics *m = arg;
  pthread_mutex_lock(&m->mu);
  while (!m->stop) {
    pthread_mutex_unlock(&m->mu);
    write_file(m);
    pthread_mutex_lock(&m->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (m->o.interval_ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(m->o.interval_ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &ts) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&m->mu);
  write_file(m); /* the last state, at exit */
  return NULL;
}

/* ---- HTTP ---- */

#ifdef DLOCK_HAVE_MICROHTTPD

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
  cli_metrics *m = cls;
  (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
  int status = MHD_HTTP_OK;
  const char *type = "text/plain; version=0.0.4; charset=utf-8";
  char *text = NULL;
  size_t len = 0;

  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    status = MHD_HTTP_METHOD_NOT_ALLOWED;
    text = strdup("only GET /metrics here\n");
  } else if (strcmp(url, "/metrics") != 0) {
    status = MHD_HTTP_NOT_FOUND;
    text = strdup("not found: the metrics are at /metrics\n");
  } else {
    const char *accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    int om = accept != NULL && strstr(accept, "application/openmetrics-text") != NULL;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL ||
        dlock_client_metrics_write(m->c, f, om ? DLOCK_METRICS_OPENMETRICS : DLOCK_METRICS_PROMETHEUS) != 0) {
      status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (f != NULL) fclose(f);
    if (om) type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
  }
  if (text == NULL) return MHD_NO; /* out of memory: the connection is closed */
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (r == NULL) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, status == MHD_HTTP_OK ? type : "text/plain");
  enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
  MHD_destroy_response(r);
  return ret;
}

#endif

/* ---- Start, stop ---- */

int cli_metrics_start(cli_metrics **out, dlock_client *c, const cli_metrics_opts *o) {
  *out = NULL;
  if (o->file == NULL && o->listen == NULL) return 0;
  cli_metrics *m = calloc(1, sizeof *m);
  if (m == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EXIT_SOFTWARE;
  }
  m->c = c;
  m->o = *o;
  if (m->o.interval_ms == 0) m->o.interval_ms = DEFAULT_INTERVAL_MS;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
#ifdef DLOCK_HAVE_MICROHTTPD
  if (o->listen != NULL) {
    struct sockaddr_storage sa;
    socklen_t len;
    cli_parse_listen(o->listen, &sa, &len); /* checked when parsed */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    m->http = MHD_start_daemon(flags, 0, NULL, NULL, answer, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (m->http == NULL) {
      int e = errno;
      fprintf(stderr,
              "dlock: --metrics-listen: cannot listen on %s: %s; give a free port of an "
              "address of this host\n",
              o->listen, e ? strerror(e) : "refused");
      cli_metrics_stop(m);
      return CLI_EXIT_UNAVAILABLE;
    }
  }
#endif
  if (o->file != NULL) {
    if (pthread_create(&m->writer, NULL, writer_main, m) != 0) {
      fprintf(stderr, "dlock: cannot start a thread\n");
      cli_metrics_stop(m);
      return CLI_EXIT_SOFTWARE;
    }
    m->writer_started = 1;
  }
  *out = m;
  return 0;
}

void cli_metrics_stop(cli_metrics *m) {
  if (m == NULL) return;
#ifdef DLOCK_HAVE_MICROHTTPD
  if (m->http != NULL) MHD_stop_daemon(m->http);
#endif
  pthread_mutex_lock(&m->mu);
  m->stop = 1;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  if (m->writer_started) pthread_join(m->writer, NULL);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m);
}
