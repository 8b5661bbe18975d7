/*
 * demo_server.c - the private redis-server of "dlock demo": a temporary
 * directory, a free loopback port, no persistence, and a stop by PID. The
 * server also gets PR_SET_PDEATHSIG, so that it goes away even when dlock
 * itself is killed with SIGKILL and cannot clean up.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* demo_server_stop() may be called by the signal watcher and by the main
 * thread at once. */
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER;

static int find_on_path(const char *file, char *out, size_t len) {
  const char *path = getenv("PATH");
  if (path == NULL || path[0] == '\0') path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;;) {
    size_t dirlen = strcspn(p, ":");
    struct stat st;
    if (dirlen == 0)
      snprintf(out, len, "./%s", file);
    else
      snprintf(out, len, "%.*s/%s", (int)dirlen, p, file);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 0;
    if (p[dirlen] == '\0') return -1;
    p += dirlen + 1;
  }
}

/* Ask the kernel for a free port. Another process could take it before
 * redis-server binds it; the caller retries then. */
static int free_port(void) {
  struct sockaddr_in a;
  socklen_t alen = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0) return -1;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* One attempt on one port: 0 when it answers, 1 when it died (try another
 * port), -1 when it neither answers nor dies. */
static int try_port(demo_server *s, const char *exe) {
  char port[16];
  char log[600];

  s->port = free_port();
  if (s->port < 0) return -1;
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(log, sizeof log, "%s/redis.log", s->dir);
  snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
  char *argv[] = {(char *)exe,         (char *)"--port",    port,       (char *)"--bind",
                  (char *)"127.0.0.1", (char *)"--save",    (char *)"", (char *)"--appendonly",
                  (char *)"no",        (char *)"--dir",     s->dir,     (char *)"--daemonize",
                  (char *)"no",        (char *)"--logfile", log,        NULL};

  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    /* Its own group, so that a Ctrl-C in the terminal reaches dlock only
     * and dlock stops the server in order. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
    }
    execv(exe, argv);
    _exit(127);
  }
  s->pid = (int)pid;

  /* Up to 10 s: a loaded machine can be slow to start a process. */
  for (int i = 0; i < 200; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      s->pid = 0;
      return 1;
    }
    dlock_client_options o;
    dlock_client *c = NULL;
    dlock_client_options_init(&o);
    o.url = s->url;
    o.connect_timeout_ms = 500;
    if (dlock_client_new(&c, &o) == 0) {
      dlock_client_free(c);
      return 0;
    }
    sleep_ms(50);
  }
  return -1;
}

int demo_server_start(demo_server *s) {
  char exe[4096];
  const char *tmp = getenv("TMPDIR");

  memset(s, 0, sizeof *s);
  if (find_on_path("redis-server", exe, sizeof exe) != 0) {
    fprintf(stderr, "dlock: demo: redis-server is not on PATH; install it (Debian: "
                    "apt-get install redis-server) or pass --url\n");
    return CLI_EXIT_UNAVAILABLE;
  }
  snprintf(s->dir, sizeof s->dir, "%s/dlock-demo.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(s->dir) == NULL) {
    fprintf(stderr, "dlock: demo: cannot create a temporary directory: %s\n", strerror(errno));
    s->dir[0] = '\0';
    return CLI_EXIT_SOFTWARE;
  }
  for (int attempt = 0; attempt < 3; attempt++) {
    int r = try_port(s, exe);
    if (r == 0) return 0;
    if (r < 0) break;
  }
  fprintf(stderr, "dlock: demo: %s did not start on 127.0.0.1 (log: %s/redis.log)\n", exe, s->dir);
  /* Keep the log for a look: stop the process, leave the directory. */
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  s->dir[0] = '\0';
  return CLI_EXIT_UNAVAILABLE;
}

void demo_server_stop(demo_server *s) {
  pthread_mutex_lock(&stop_mu);
  if (s->pid > 0) {
    pid_t pid = s->pid;
    int done = 0;
    kill(pid, SIGTERM);
    /* redis-server exits within milliseconds with no data to save; give
     * it 5 s before SIGKILL. */
    for (int i = 0; i < 250 && !done; i++) {
      if (waitpid(pid, NULL, WNOHANG) == pid)
        done = 1;
      else
        sleep_ms(20);
    }
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    s->pid = 0;
  }
  if (s->dir[0] != '\0') {
    remove_dir(s->dir);
    s->dir[0] = '\0';
  }
  pthread_mutex_unlock(&stop_mu);
}
