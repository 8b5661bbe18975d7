/*
 * harness.c - private redis-server processes for the tests (see harness.h).
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX_SERVERS 32
static th_redis *live[TH_MAX_SERVERS];

static void kill_all_live(void) {
  for (int i = 0; i < TH_MAX_SERVERS; i++)
    if (live[i] && live[i]->pid > 0) kill(live[i]->pid, SIGKILL);
}

static void on_fatal_signal(int sig) {
  kill_all_live();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void track(th_redis *r, int add) {
  static int hooked;
  if (!hooked) {
    hooked = 1;
    atexit(kill_all_live);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGALRM, on_fatal_signal);
    signal(SIGABRT, on_fatal_signal);
  }
  for (int i = 0; i < TH_MAX_SERVERS; i++) {
    if (add && !live[i]) {
      live[i] = r;
      return;
    }
    if (!add && live[i] == r) {
      live[i] = NULL;
      return;
    }
  }
}

long th_time_factor(void) {
  const char *f = getenv("DLOCK_TEST_TIME_FACTOR");
  long v = f ? atol(f) : 1;
  return v >= 1 && v <= 100 ? v : 1;
}

long long th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_to_frac(long at_us) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  long long wait = at_us - now.tv_nsec / 1000;
  if (wait <= 0) wait += 1000000LL;
  struct timespec ts = {(time_t)(wait / 1000000LL), (long)(wait % 1000000LL) * 1000L};
  nanosleep(&ts, NULL);
}

long long th_redis_info_num(const th_redis *r, const char *field) {
  char out[8192];
  if (th_redis_cli(r, out, sizeof out, "INFO server") != 0) return -1;
  size_t n = strlen(field);
  for (const char *p = out; (p = strstr(p, field)) != NULL; p += n)
    if ((p == out || p[-1] == '\n') && p[n] == ':') return strtoll(p + n + 1, NULL, 10);
  return -1;
}

dlock_client *th_client_retry(const char *url) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = url;
  o.command_timeout_ms = 4000;
  dlock_client *c = NULL;
  for (int i = 0; i < 40 && !c; i++)
    if (dlock_client_new(&c, &o) != 0) {
      c = NULL;
      th_sleep_ms(100);
    }
  return c;
}

void th_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int th_localhost_resolves(char *why, size_t len) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo("localhost", NULL, &hints, &res);
  if (gai != 0) {
    snprintf(why, len,
             "the name 'localhost' does not resolve here (getaddrinfo: %s); "
             "add '127.0.0.1 localhost' to /etc/hosts to run this test",
             gai_strerror(gai));
    return 0;
  }
  int found = 0;
  for (struct addrinfo *ai = res; ai && !found; ai = ai->ai_next)
    found = ai->ai_family == AF_INET && ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
  freeaddrinfo(res);
  if (!found)
    snprintf(why, len,
             "the name 'localhost' does not resolve to 127.0.0.1 here, where the test "
             "server listens; add '127.0.0.1 localhost' to /etc/hosts to run this test");
  return found;
}

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  socklen_t len = sizeof sa;
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

static int run_cmd(const char *cmd) {
  int st = system(cmd);
  return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

int th_redis_cli(const th_redis *r, char *out, size_t outlen, const char *fmt, ...) {
  char args[4096], cmd[5000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "redis-cli -p %d %s 2>&1", r->port, args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = 0;
  if (out && outlen) {
    n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r')) out[--n] = '\0';
  } else {
    char sink[512];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int wait_ready(th_redis *r) {
  for (int i = 0; i < 500; i++) { /* up to 10 s */
    int st;
    if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
      fprintf(stderr, "harness: redis-server exited at start; see %s/redis.log\n", r->dir);
      r->pid = 0;
      return -1;
    }
    char out[64];
    if (th_redis_cli(r, out, sizeof out, "PING") == 0 && strcmp(out, "PONG") == 0) return 0;
    th_sleep_ms(20);
  }
  fprintf(stderr, "harness: redis-server on port %d not ready after 10 s\n", r->port);
  return -1;
}

static int launch(th_redis *r) {
  char conf[512];
  snprintf(conf, sizeof conf, "%s/redis.conf", r->dir);
  FILE *f = fopen(conf, "w");
  if (!f) return -1;
  fprintf(f,
          "bind 127.0.0.1\nport %d\ndir %s\nunixsocket %s\nunixsocketperm 700\n"
          "save \"\"\nappendonly no\ndaemonize no\nlogfile %s/redis.log\n"
          "enable-debug-command local\nmaxmemory-policy noeviction\n%s\n",
          r->port, r->dir, r->sock, r->dir, r->extra);
  fclose(f);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    /* Own process group: a Ctrl-C aimed at the test does not hit the server
     * before the test has stopped it by PID. */
    setpgid(0, 0);
    execlp("redis-server", "redis-server", conf, r->sentinel ? "--sentinel" : (char *)NULL, (char *)NULL);
    _exit(127);
  }
  r->pid = pid;
  track(r, 1);
  return wait_ready(r);
}

static int start(th_redis *r, const char *extra_conf, int sentinel) {
  memset(r, 0, sizeof *r);
  r->sentinel = sentinel;
  snprintf(r->dir, sizeof r->dir, "%s/dlock-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(r->dir)) {
    perror("harness: mkdtemp");
    return -1;
  }
  snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
  snprintf(r->extra, sizeof r->extra, "%s", extra_conf ? extra_conf : "");
  for (int attempt = 0; attempt < 5; attempt++) {
    r->port = th_free_port();
    snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
    if (launch(r) == 0) return 0;
    if (r->pid > 0) {
      kill(r->pid, SIGKILL);
      waitpid(r->pid, NULL, 0);
      r->pid = 0;
    }
  }
  return -1;
}

int th_redis_start(th_redis *r, const char *extra_conf) { return start(r, extra_conf, 0); }
int th_sentinel_start(th_redis *r, const char *conf) { return start(r, conf, 1); }

static void stop_pid(th_redis *r) {
  if (r->pid <= 0) return;
  kill(r->pid, SIGCONT); /* a test may have left it stopped */
  kill(r->pid, SIGTERM);
  for (int i = 0; i < 250; i++) {
    if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
      r->pid = 0;
      break;
    }
    th_sleep_ms(20);
  }
  if (r->pid > 0) {
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
  }
}

void th_redis_stop(th_redis *r) {
  stop_pid(r);
  track(r, 0);
  if (r->dir[0]) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    run_cmd(cmd);
    r->dir[0] = '\0';
  }
}

void th_redis_crash(th_redis *r) {
  if (r->pid <= 0) return;
  kill(r->pid, SIGKILL);
  waitpid(r->pid, NULL, 0);
  r->pid = 0;
}

int th_redis_restart(th_redis *r) {
  th_redis_crash(r);
  track(r, 0);
  unlink(r->sock);
  for (int i = 0; i < 100; i++) { /* the port may linger a moment */
    if (launch(r) == 0) return 0;
    th_redis_crash(r);
    th_sleep_ms(50);
  }
  return -1;
}

int th_redis_start_n(th_redis *r, int n, const char *extra_conf) {
  for (int i = 0; i < n; i++)
    if (th_redis_start(&r[i], extra_conf) != 0) {
      th_redis_stop_n(r, i);
      return -1;
    }
  return 0;
}

void th_redis_stop_n(th_redis *r, int n) {
  for (int i = 0; i < n; i++) th_redis_stop(&r[i]);
}

void th_redlock_url(const th_redis *r, int n, char *url, size_t len) {
  size_t o = (size_t)snprintf(url, len, "redlock://");
  for (int i = 0; i < n && o < len; i++)
    o += (size_t)snprintf(url + o, len - o, "%s127.0.0.1:%d", i ? "," : "", r[i].port);
}

int th_make_certs(const char *dir) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "set -e; cd '%s'; "
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=dlock test CA' "
           "  -keyout ca.key -out ca.crt; "
           "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext; "
           "openssl req -newkey rsa:2048 -nodes -subj '/CN=localhost' -keyout server.key -out server.csr; "
           "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
           "  -extfile san.ext -out server.crt; "
           "openssl req -newkey rsa:2048 -nodes -subj '/CN=dlock client' -keyout client.key -out client.csr; "
           "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt; "
           "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=other CA' "
           "  -keyout other-ca.key -out other-ca.crt",
           dir);
  char full[4200];
  snprintf(full, sizeof full, "( %s ) >/dev/null 2>&1", cmd);
  return run_cmd(full) == 0 ? 0 : -1;
}

void *th_wait_for_lock(void *arg) {
  th_waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, w->wait_ms);
  w->acquired_at = th_now_ms();
  w->fence = dlock_mutex_fence(w->m);
  if (w->rc == 0) dlock_mutex_release(w->m);
  __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

pid_t th_spawn(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(fn(arg));
  return pid;
}

pid_t th_spawn_argv(const char *const argv[]) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

int th_wait(pid_t pid, long timeout_ms) {
  long long deadline = th_now_ms() + timeout_ms;
  int st;
  while (th_now_ms() < deadline) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return st;
    if (w < 0) return -1;
    th_sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

/* ---- a mutex and a semaphore racing on one name ---- */

typedef struct th_racer {
  dlock_client *c;
  pthread_barrier_t *go;
  char name[64];
  int64_t lease_ms;
  int rc;
} th_racer;

/* Both racers: create, meet, acquire, meet (both answered: the caller
 * looks), meet, let go. A handle that could not be made still meets. */
static void *th_race_mutex(void *arg) {
  th_racer *x = arg;
  dlock_mutex *m = NULL;
  x->rc = -100;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = x->lease_ms;
  int ok = dlock_mutex_new(&m, x->c, x->name, x->lease_ms ? &mo : NULL) == 0;
  pthread_barrier_wait(x->go);
  if (ok) x->rc = dlock_mutex_acquire(m, 0);
  pthread_barrier_wait(x->go);
  pthread_barrier_wait(x->go);
  if (x->rc == 0) dlock_mutex_release(m);
  dlock_mutex_free(m);
  return NULL;
}

static void *th_race_sem(void *arg) {
  th_racer *x = arg;
  dlock_semaphore *s = NULL;
  x->rc = -100;
  dlock_mutex_options mo;
  dlock_mutex_options_init(&mo);
  mo.lease_ms = x->lease_ms;
  int ok = dlock_semaphore_new(&s, x->c, x->name, 2, x->lease_ms ? &mo : NULL) == 0;
  pthread_barrier_wait(x->go);
  if (ok) x->rc = dlock_semaphore_acquire(s, 0);
  pthread_barrier_wait(x->go);
  pthread_barrier_wait(x->go);
  if (x->rc == 0) dlock_semaphore_release(s);
  dlock_semaphore_free(s);
  return NULL;
}

int th_race_mutex_and_semaphore(dlock_client *a, dlock_client *b, int max_rounds, long ms, int64_t lease_ms,
                                int *rounds) {
  long long until = th_now_ms() + ms;
  int both = -1;
  *rounds = 0;
  for (int i = 0; i < max_rounds && th_now_ms() < until && both < 0; i++, (*rounds)++) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    th_racer rm = {.c = a, .go = &go, .lease_ms = lease_ms}, rs = {.c = b, .go = &go, .lease_ms = lease_ms};
    snprintf(rm.name, sizeof rm.name, "race-%d", i);
    snprintf(rs.name, sizeof rs.name, "race-%d", i);
    pthread_t tm, ts;
    pthread_create(&tm, NULL, th_race_mutex, &rm);
    pthread_create(&ts, NULL, th_race_sem, &rs);
    pthread_barrier_wait(&go);
    pthread_barrier_wait(&go);
    if (rm.rc == 0 && rs.rc == 0) both = i;
    pthread_barrier_wait(&go);
    pthread_join(tm, NULL);
    pthread_join(ts, NULL);
    pthread_barrier_destroy(&go);
  }
  return both;
}
