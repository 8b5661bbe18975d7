/*
 * test_tls.c - rediss:// against a real TLS redis-server: verification by CA
 * and by name (IP and DNS SANs), wrong CA, wrong name, plain talk to a TLS
 * port and TLS talk to a plain port, client certificates, missing files, and
 * the URL query parameters that stand in for the options.
 */
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static char certs[256]; /* our own temp dir with the certificates */
static th_redis srv;    /* tls-auth-clients optional */
static th_redis mtls;   /* tls-auth-clients yes */
static int tls_port, mtls_port;

static int start_tls_server(th_redis *r, int *port, const char *auth_clients) {
  char extra[1500];
  for (int attempt = 0; attempt < 5; attempt++) {
    *port = th_free_port();
    snprintf(extra, sizeof extra,
             "tls-port %d\ntls-cert-file %s/server.crt\ntls-key-file %s/server.key\n"
             "tls-ca-cert-file %s/ca.crt\ntls-auth-clients %s\n",
             *port, certs, certs, certs, auth_clients);
    if (th_redis_start(r, extra) == 0) return 0;
  }
  return -1;
}

void test_setup(void) {
  snprintf(certs, sizeof certs, "%s/dlock-certs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(certs)) {
    perror("mkdtemp");
    exit(1);
  }
  if (th_make_certs(certs) != 0) {
    fprintf(stderr, "cannot make certificates with openssl in %s\n", certs);
    exit(1);
  }
  if (start_tls_server(&srv, &tls_port, "optional") != 0 || start_tls_server(&mtls, &mtls_port, "yes") != 0) {
    fprintf(stderr, "cannot start redis-server with TLS (built without TLS support?)\n");
    exit(1);
  }
}

void test_teardown(void) {
  th_redis_stop(&srv);
  th_redis_stop(&mtls);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", certs);
}

static const char *cert(const char *file) {
  static _Thread_local char path[4][400];
  static _Thread_local int next;
  char *p = path[next++ % 4];
  snprintf(p, 400, "%s/%s", certs, file);
  return p;
}

static void tls_url(char *url, size_t n, const char *host, int port) { snprintf(url, n, "rediss://%s:%d", host, port); }

/* A TLS client for 'url' with 'ca' (and optional name/cert/key). Returns the
 * status; *out is set on success. */
static int tls_client(dlock_client **out, const char *url, const char *ca, const char *name, const char *cert_file,
                      const char *key_file) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.tls_ca_file = ca;
  o.tls_server_name = name;
  o.tls_cert_file = cert_file;
  o.tls_key_file = key_file;
  o.connect_timeout_ms = 3000;
  *out = NULL;
  int rc = dlock_client_new(out, &o);
  if (rc == 0) {
    rc = dlock_client_ping(*out);
    if (rc != 0) {
      dlock_client_free(*out);
      *out = NULL;
    }
  } else if (*out != NULL) {
    return -1000; /* must stay NULL on failure */
  }
  return rc;
}

static dlock_client *client(void) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", tls_port);
  dlock_client *c = NULL;
  int rc = tls_client(&c, url, cert("ca.crt"), NULL, NULL, NULL);
  if (rc != 0) TEST_FAIL("TLS client: %s: %s", dlock_err_name(rc), dlock_last_error());
  return c;
}

static dlock_mutex *mutex(dlock_client *c, const char *name, int64_t lease_ms) { return test_mutex(c, name, lease_ms); }

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

TEST(acquire_and_release_work_over_tls_with_the_ca) {
  dlock_client *c = client();
  ASSERT_CONTAINS(dlock_client_server(c), "tls");
  dlock_mutex *m = mutex(c, "tls:basic", 10000);
  uint64_t last = 0;
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(dlock_mutex_acquire(m, 0));
    ASSERT(dlock_mutex_fence(m) > last);
    last = dlock_mutex_fence(m);
    char out[256];
    cli(out, sizeof out, "EXISTS tls:basic"); /* seen on the plain port too */
    ASSERT_STR_EQ(out, "1");
    ASSERT_EQ(dlock_mutex_is_held(m), 1);
    ASSERT_OK(dlock_mutex_extend(m, 20000));
    int64_t ttl = 0;
    ASSERT_OK(dlock_mutex_remaining(m, &ttl));
    ASSERT(ttl > 15000 && ttl <= 20000);
    ASSERT_OK(dlock_mutex_release(m));
    cli(out, sizeof out, "EXISTS tls:basic");
    ASSERT_STR_EQ(out, "0");
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
}

struct waiter {
  dlock_mutex *m;
  int rc;
  long long acquired_at;
};

static void *wait_for_lock(void *arg) {
  struct waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, 10000);
  w->acquired_at = th_now_ms();
  if (w->rc == 0) dlock_mutex_release(w->m);
  return NULL;
}

TEST(a_waiter_is_woken_by_the_hand_off_over_tls) {
  dlock_client *c1 = client(), *c2 = client();
  /* Watchdog mode (30 s lease): without the message the waiter would only
   * look again after its 5 s re-check. */
  dlock_mutex *a = mutex(c1, "tls:wake", 0), *b = mutex(c2, "tls:wake", 0);
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  uint64_t fa = dlock_mutex_fence(a);
  struct waiter w = {b, -99, 0};
  pthread_t th;
  pthread_create(&th, NULL, wait_for_lock, &w);
  th_sleep_ms(500);
  char out[64];
  cli(out, sizeof out, "ZCARD {tls:wake}:queue");
  ASSERT_STR_EQ(out, "1");
  long long released = th_now_ms();
  ASSERT_OK(dlock_mutex_release(a));
  pthread_join(th, NULL);
  ASSERT_OK(w.rc);
  ASSERT(w.acquired_at - released < 2500);
  /* The next hold has a higher fence. */
  ASSERT_OK(dlock_mutex_acquire(a, 0));
  ASSERT(dlock_mutex_fence(a) > fa);
  ASSERT_OK(dlock_mutex_release(a));
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
}

TEST(a_server_certificate_from_another_ca_gives_etls) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", tls_port);
  dlock_client *c = NULL;
  long long t0 = th_now_ms();
  ASSERT_STATUS(tls_client(&c, url, cert("other-ca.crt"), NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT(th_now_ms() - t0 < 3000);
  ASSERT(c == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "certificate");
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", tls_port);
  ASSERT_CONTAINS(dlock_last_error(), where);
}

TEST(a_server_name_mismatch_gives_etls) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", tls_port);
  dlock_client *c = NULL;
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), "wrong.example", NULL, NULL), DLOCK_ETLS);
  ASSERT(c == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "wrong.example");
  ASSERT_CONTAINS(dlock_last_error(), "certificate");
  /* The certificate has no SAN for this IP either. */
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), "127.0.0.2", NULL, NULL), DLOCK_ETLS);
  /* The right name given explicitly works. */
  ASSERT_OK(tls_client(&c, url, cert("ca.crt"), "localhost", NULL, NULL));
  dlock_client_free(c);
}

TEST(localhost_is_verified_by_its_dns_san) {
  char why[300];
  if (!th_localhost_resolves(why, sizeof why)) TEST_SKIP("needs name resolution: %s", why);
  char url[128];
  tls_url(url, sizeof url, "localhost", tls_port);
  dlock_client *c = NULL;
  int rc = tls_client(&c, url, cert("ca.crt"), NULL, NULL, NULL);
  ASSERT_OK(rc);
  dlock_mutex *m = mutex(c, "tls:localhost", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(tls_skip_verify_accepts_an_unknown_ca) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", tls_port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.tls_ca_file = cert("other-ca.crt");
  o.tls_skip_verify = 1;
  dlock_client *c = NULL;
  ASSERT_OK(dlock_client_new(&c, &o));
  ASSERT_OK(dlock_client_ping(c));
  dlock_client_free(c);
  /* ... and so does ?insecure=1 */
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?insecure=1", tls_port);
  dlock_client_options_init(&o);
  o.url = url;
  ASSERT_OK(dlock_client_new(&c, &o));
  dlock_client_free(c);
}

TEST(plain_redis_to_the_tls_port_fails_quickly_instead_of_hanging) {
  char url[128];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", tls_port);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 1500;
  o.command_timeout_ms = 1500;
  dlock_client *c = NULL;
  long long t0 = th_now_ms();
  int rc = dlock_client_new(&c, &o);
  long long took = th_now_ms() - t0;
  if (rc == 0) {
    dlock_client_free(c);
    TEST_FAIL("a plain client on the TLS port succeeded");
  }
  ASSERT(c == NULL);
  ASSERT(took < 1500 + 2000);
  char where[64];
  snprintf(where, sizeof where, "127.0.0.1:%d", tls_port);
  ASSERT_CONTAINS(dlock_last_error(), where);
}

TEST(tls_to_the_plain_port_gives_etls_quickly) {
  char url[128];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d", srv.port);
  dlock_client *c = NULL;
  long long t0 = th_now_ms();
  int rc = tls_client(&c, url, cert("ca.crt"), NULL, NULL, NULL);
  long long took = th_now_ms() - t0;
  ASSERT(rc != 0);
  ASSERT(rc == DLOCK_ETLS || rc == DLOCK_ETIMEDOUT || rc == DLOCK_EIO);
  ASSERT(took < 3000 + 2000);
  ASSERT(c == NULL);
}

TEST(a_server_requiring_client_certificates_refuses_a_client_without_one) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", mtls_port);
  dlock_client *c = NULL;
  long long t0 = th_now_ms();
  int rc = tls_client(&c, url, cert("ca.crt"), NULL, NULL, NULL);
  long long took = th_now_ms() - t0;
  if (rc == 0) {
    dlock_client_free(c);
    TEST_FAIL("a client without a certificate was let in");
  }
  printf("  no client certificate: %s: %s\n", dlock_err_name(rc), dlock_last_error());
  ASSERT(rc == DLOCK_ETLS || rc == DLOCK_EIO);
  ASSERT(took < 3000 + 2000);
  ASSERT(c == NULL);
}

TEST(a_client_certificate_and_key_are_accepted_by_that_server) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", mtls_port);
  dlock_client *c = NULL;
  ASSERT_OK(tls_client(&c, url, cert("ca.crt"), NULL, cert("client.crt"), cert("client.key")));
  dlock_mutex *m = mutex(c, "tls:mtls", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char out[64];
  th_redis_cli(&mtls, out, sizeof out, "EXISTS tls:mtls");
  ASSERT_STR_EQ(out, "1");
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_certificate_without_its_key_gives_etls) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", mtls_port);
  dlock_client *c = NULL;
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), NULL, cert("client.crt"), NULL), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "key");
  /* A key that does not match the certificate. */
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), NULL, cert("client.crt"), cert("server.key")), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "server.key");
}

TEST(missing_tls_files_give_etls_naming_the_file) {
  char url[128];
  tls_url(url, sizeof url, "127.0.0.1", tls_port);
  dlock_client *c = NULL;
  const char *missing = cert("no-such-ca.crt");
  ASSERT_STATUS(tls_client(&c, url, missing, NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT(c == NULL);
  ASSERT_CONTAINS(dlock_last_error(), "no-such-ca.crt");
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), NULL, cert("no-such-client.crt"), cert("client.key")), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "no-such-client.crt");
  ASSERT_STATUS(tls_client(&c, url, cert("ca.crt"), NULL, cert("client.crt"), cert("no-such-client.key")), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "no-such-client.key");
  /* A file that is not PEM at all. */
  ASSERT_STATUS(tls_client(&c, url, cert("san.ext"), NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "san.ext");
}

TEST(url_query_parameters_work_like_the_options) {
  char url[1024];
  dlock_client *c = NULL;
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", tls_port, cert("ca.crt"));
  ASSERT_OK(tls_client(&c, url, NULL, NULL, NULL, NULL));
  dlock_mutex *m = mutex(c, "tls:query", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT_OK(dlock_mutex_release(m));
  dlock_mutex_free(m);
  dlock_client_free(c);

  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", tls_port, cert("other-ca.crt"));
  ASSERT_STATUS(tls_client(&c, url, NULL, NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "certificate");

  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&sni=wrong.example", tls_port, cert("ca.crt"));
  ASSERT_STATUS(tls_client(&c, url, NULL, NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "wrong.example");

  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&sni=localhost", tls_port, cert("ca.crt"));
  ASSERT_OK(tls_client(&c, url, NULL, NULL, NULL, NULL));
  dlock_client_free(c);

  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", tls_port, cert("no-such-ca.crt"));
  ASSERT_STATUS(tls_client(&c, url, NULL, NULL, NULL, NULL), DLOCK_ETLS);
  ASSERT_CONTAINS(dlock_last_error(), "no-such-ca.crt");

  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&cert=%s&key=%s", mtls_port, cert("ca.crt"),
           cert("client.crt"), cert("client.key"));
  ASSERT_OK(tls_client(&c, url, NULL, NULL, NULL, NULL));
  dlock_client_free(c);

  /* An option overrides the URL's parameter. */
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", tls_port, cert("other-ca.crt"));
  ASSERT_OK(tls_client(&c, url, cert("ca.crt"), NULL, NULL, NULL));
  dlock_client_free(c);
}

TEST(tls_query_parameters_on_a_plain_url_give_einval) {
  char url[1024];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d?cacert=%s", srv.port, cert("ca.crt"));
  dlock_client *c = NULL;
  ASSERT_STATUS(tls_client(&c, url, NULL, NULL, NULL, NULL), DLOCK_EINVAL);
  ASSERT_CONTAINS(dlock_last_error(), "rediss://");
}

TEST_MAIN()
