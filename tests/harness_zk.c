/*
 * harness_zk.c - private ZooKeeper servers and the Curator helper for tests
 * (see harness_zk.h).
 */
#include "harness_zk.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define ZK_JAR "/usr/share/java/zookeeper.jar"
#define ZK_CONF_DIR "/etc/zookeeper/conf"
#define CURATOR_CP                                                                                                \
  "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:" \
  "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:"                   \
  "/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar"

#define TH_ZK_MAX 16
static th_zk *live[TH_ZK_MAX];
static pid_t helpers[TH_ZK_MAX];
static char curator_dir[256];
static struct sigaction old_act[32];

static void kill_all(void) {
  for (int i = 0; i < TH_ZK_MAX; i++) {
    if (live[i] && live[i]->pid > 0) {
      kill(live[i]->pid, SIGCONT);
      kill(live[i]->pid, SIGKILL);
    }
    if (helpers[i] > 0) kill(helpers[i], SIGKILL);
  }
}

static void on_signal(int sig) {
  kill_all();
  /* Then whatever was there before (the Redis harness kills its servers). */
  sigaction(sig, &old_act[sig], NULL);
  raise(sig);
}

static void hook(void) {
  static int hooked;
  if (hooked) return;
  hooked = 1;
  atexit(kill_all);
  int sigs[] = {SIGINT, SIGTERM, SIGALRM, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(sigs[i], &sa, &old_act[sigs[i]]);
  }
}

static void track(th_zk *z, int add) {
  hook();
  for (int i = 0; i < TH_ZK_MAX; i++) {
    if (add && !live[i]) {
      live[i] = z;
      return;
    }
    if (!add && live[i] == z) {
      live[i] = NULL;
      return;
    }
  }
}

static void track_helper(pid_t pid, int add) {
  hook();
  for (int i = 0; i < TH_ZK_MAX; i++) {
    if (add && helpers[i] <= 0) {
      helpers[i] = pid;
      return;
    }
    if (!add && helpers[i] == pid) {
      helpers[i] = 0;
      return;
    }
  }
}

int th_zk_available(char *why, size_t len) {
  if (access(ZK_JAR, R_OK) != 0) {
    snprintf(why, len, "%s is missing (apt-get install zookeeper)", ZK_JAR);
    return 0;
  }
  if (system("command -v java >/dev/null 2>&1") != 0) {
    snprintf(why, len, "java is not installed (apt-get install default-jdk-headless)");
    return 0;
  }
  return 1;
}

/* The answer to one srvr command into 'buf' ("" if none). */
static void srvr(const th_zk *z, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)z->port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && write(fd, "srvr", 4) == 4) {
    ssize_t r;
    while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0) n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
}

long long th_zk_received(const th_zk *z) {
  char buf[4096];
  srvr(z, buf, sizeof buf);
  const char *m = strstr(buf, "Received: ");
  return m ? atoll(m + 10) : -1;
}

/* One srvr command: the "Mode: ..." line's value. */
void th_zk_mode(const th_zk *z, char *out, size_t len) {
  out[0] = '\0';
  char buf[4096];
  srvr(z, buf, sizeof buf);
  const char *m = strstr(buf, "Mode: ");
  if (m) {
    m += 6;
    size_t k = strcspn(m, "\r\n");
    snprintf(out, len, "%.*s", (int)k, m);
  }
}

static pid_t launch_java(const char *dir, const char *main_class, const char *cfg) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[400];
    snprintf(log, sizeof log, "%s/server.log", dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    if (chdir(dir) != 0) _exit(127);
    execlp("java", "java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
           "-Dzookeeper.admin.enableServer=false", "-cp", ZK_CONF_DIR ":" ZK_JAR, main_class, cfg, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int write_cfg(th_zk *z, int tick_ms, const char *servers) {
  char path[400];
  snprintf(path, sizeof path, "%s/data", z->dir);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
  if (z->myid) {
    snprintf(path, sizeof path, "%s/data/myid", z->dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "%d\n", z->myid);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/zoo.cfg", z->dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "tickTime=%d\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
          "admin.enableServer=false\nminSessionTimeout=%d\nmaxSessionTimeout=60000\n"
          "4lw.commands.whitelist=srvr\nsnapCount=1000000\nautopurge.purgeInterval=0\n%s",
          tick_ms, z->dir, z->port, 2 * tick_ms, servers ? servers : "");
  fclose(f);
  snprintf(z->hostport, sizeof z->hostport, "127.0.0.1:%d", z->port);
  return 0;
}

static int start_node(th_zk *z, const char *main_class) {
  char cfg[400];
  snprintf(cfg, sizeof cfg, "%s/zoo.cfg", z->dir);
  z->pid = launch_java(z->dir, main_class, cfg);
  if (z->pid <= 0) return -1;
  track(z, 1);
  return 0;
}

static int make_dir(th_zk *z) {
  snprintf(z->dir, sizeof z->dir, "/tmp/dlock-zk-XXXXXX");
  return mkdtemp(z->dir) ? 0 : -1;
}

static void dump_log(const th_zk *z) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "tail -n 20 '%s/server.log' >&2", z->dir);
  if (system(cmd) != 0) {
  }
}

int th_zk_start(th_zk *z, int tick_ms) {
  memset(z, 0, sizeof *z);
  if (make_dir(z) != 0) return -1;
  z->port = th_free_port();
  if (write_cfg(z, tick_ms, NULL) != 0 || start_node(z, "org.apache.zookeeper.server.ZooKeeperServerMain") != 0) {
    fprintf(stderr, "harness_zk: cannot start a ZooKeeper server in %s\n", z->dir);
    return -1;
  }
  long long until = th_now_ms() + 60000 * th_time_factor();
  char mode[64];
  while (th_now_ms() < until) {
    th_zk_mode(z, mode, sizeof mode);
    if (!strcmp(mode, "standalone")) return 0;
    if (waitpid(z->pid, NULL, WNOHANG) == z->pid) {
      z->pid = 0;
      break;
    }
    th_sleep_ms(100);
  }
  fprintf(stderr, "harness_zk: ZooKeeper on port %d did not start; its log:\n", z->port);
  dump_log(z);
  th_zk_stop(z);
  return -1;
}

int th_zk_ensemble_start(th_zk_ensemble *e, int tick_ms) {
  memset(e, 0, sizeof *e);
  char servers[512] = "";
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
    th_zk *z = &e->node[i];
    if (make_dir(z) != 0) return -1;
    z->myid = i + 1;
    z->port = th_free_port();
    size_t o = strlen(servers);
    snprintf(servers + o, sizeof servers - o, "server.%d=127.0.0.1:%d:%d\n", i + 1, th_free_port(), th_free_port());
    size_t h = strlen(e->hosts);
    snprintf(e->hosts + h, sizeof e->hosts - h, "%s127.0.0.1:%d", i ? "," : "", z->port);
  }
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
    if (write_cfg(&e->node[i], tick_ms, servers) != 0 ||
        start_node(&e->node[i], "org.apache.zookeeper.server.quorum.QuorumPeerMain") != 0) {
      th_zk_ensemble_stop(e);
      return -1;
    }
  }
  long long until = th_now_ms() + 90000 * th_time_factor();
  while (th_now_ms() < until) {
    int leaders = 0, followers = 0;
    char mode[64];
    for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
      th_zk_mode(&e->node[i], mode, sizeof mode);
      if (!strcmp(mode, "leader")) leaders++;
      if (!strcmp(mode, "follower")) followers++;
    }
    if (leaders == 1 && followers == TH_ZK_ENSEMBLE - 1) return 0;
    th_sleep_ms(200);
  }
  fprintf(stderr, "harness_zk: the ensemble did not form; logs:\n");
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) dump_log(&e->node[i]);
  th_zk_ensemble_stop(e);
  return -1;
}

void th_zk_kill9(th_zk *z) {
  if (z->pid > 0) {
    kill(z->pid, SIGCONT);
    kill(z->pid, SIGKILL);
    waitpid(z->pid, NULL, 0);
    track(z, 0);
    z->pid = 0;
  }
  z->stopped = 0;
}

void th_zk_stop(th_zk *z) {
  if (z->pid > 0) {
    kill(z->pid, SIGCONT);
    kill(z->pid, SIGTERM);
    long long until = th_now_ms() + 5000;
    while (waitpid(z->pid, NULL, WNOHANG) == 0) {
      if (th_now_ms() > until) {
        kill(z->pid, SIGKILL);
        waitpid(z->pid, NULL, 0);
        break;
      }
      th_sleep_ms(20);
    }
    track(z, 0);
    z->pid = 0;
  }
  if (z->dir[0]) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", z->dir);
    if (system(cmd) != 0) {
    }
    z->dir[0] = '\0';
  }
}

void th_zk_ensemble_stop(th_zk_ensemble *e) {
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) th_zk_stop(&e->node[i]);
}

void th_zk_freeze(th_zk *z) {
  if (z->pid > 0) kill(z->pid, SIGSTOP);
  z->stopped = 1;
}

void th_zk_thaw(th_zk *z) {
  if (z->pid > 0) kill(z->pid, SIGCONT);
  z->stopped = 0;
}

int th_zk_leader(const th_zk_ensemble *e) {
  char mode[64];
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
    if (e->node[i].pid <= 0) continue;
    th_zk_mode(&e->node[i], mode, sizeof mode);
    if (!strcmp(mode, "leader")) return i;
  }
  return -1;
}

/* ---- Curator helper ---- */

static void remove_curator_dir(void) {
  if (curator_dir[0]) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", curator_dir);
    if (system(cmd) != 0) {
    }
  }
}

int th_curator_build(const char *src, char *why, size_t len) {
  if (curator_dir[0]) return 0;
  if (access("/usr/share/java/curator-recipes.jar", R_OK) != 0) {
    snprintf(why, len, "the Curator jars are missing (apt-get install libcurator-recipes-java)");
    return -1;
  }
  if (system("command -v javac >/dev/null 2>&1") != 0) {
    snprintf(why, len, "javac is not installed (apt-get install default-jdk-headless)");
    return -1;
  }
  snprintf(curator_dir, sizeof curator_dir, "/tmp/dlock-curator-XXXXXX");
  if (!mkdtemp(curator_dir)) {
    curator_dir[0] = '\0';
    snprintf(why, len, "mkdtemp: %s", strerror(errno));
    return -1;
  }
  atexit(remove_curator_dir);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "javac -nowarn -cp '%s' -d '%s' '%s' >'%s/javac.log' 2>&1", CURATOR_CP, curator_dir, src,
           curator_dir);
  if (system(cmd) != 0) {
    snprintf(why, len, "javac failed on %s (see %s/javac.log)", src, curator_dir);
    return -1;
  }
  return 0;
}

pid_t th_curator_spawn(int *out_fd, const char *connect, const char *path, const char *a1, const char *a2) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    char cp[1400];
    snprintf(cp, sizeof cp, "%s:%s", curator_dir, CURATOR_CP);
    execlp("java", "java", "-Xmx96m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "CuratorLock", connect,
           path, a1, a2 ? a2 : (char *)NULL, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  track_helper(pid, 1);
  *out_fd = p[0];
  return pid;
}

int th_read_line(int fd, char *buf, size_t len, long timeout_ms) {
  size_t n = 0;
  long long until = th_now_ms() + timeout_ms;
  while (n + 1 < len) {
    long left = (long)(until - th_now_ms());
    if (left <= 0) break;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)left) <= 0) continue;
    char ch;
    ssize_t r = read(fd, &ch, 1);
    if (r <= 0) break;
    if (ch == '\n') {
      buf[n] = '\0';
      return 0;
    }
    buf[n++] = ch;
  }
  buf[n] = '\0';
  return -1;
}

int th_curator_run(char *out, size_t len, long timeout_ms, const char *connect, const char *path, const char *a1,
                   const char *a2) {
  int fd;
  pid_t pid = th_curator_spawn(&fd, connect, path, a1, a2);
  if (pid < 0) return -1;
  out[0] = '\0';
  th_read_line(fd, out, len, timeout_ms);
  close(fd);
  int st = th_wait(pid, timeout_ms);
  track_helper(pid, 0);
  return (st >= 0 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

int th_zk_suite_start(th_zk *z, int tick_ms, char *why, size_t len) {
  if (!th_zk_available(why, len)) return 0;
  if (th_zk_start(z, tick_ms) == 0) return 1;
  snprintf(why, len, "the ZooKeeper server did not start (see above)");
  return 0;
}

/* ---- An ensemble with its quorum links routed (review: partitioned follower) ---- */

int th_zk_ensemble_start_via(th_zk_ensemble *e, int tick_ms, int sync_limit, const int quorum_port[TH_ZK_ENSEMBLE],
                             const int quorum_via[TH_ZK_ENSEMBLE][TH_ZK_ENSEMBLE]) {
  memset(e, 0, sizeof *e);
  int election[TH_ZK_ENSEMBLE];
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
    th_zk *z = &e->node[i];
    if (make_dir(z) != 0) return -1;
    z->myid = i + 1;
    z->port = th_free_port();
    election[i] = th_free_port();
    size_t h = strlen(e->hosts);
    snprintf(e->hosts + h, sizeof e->hosts - h, "%s127.0.0.1:%d", i ? "," : "", z->port);
  }
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
    th_zk *z = &e->node[i];
    /* Server i's own view: the others' quorum ports through quorum_via[i]. */
    char servers[512] = "";
    for (int j = 0; j < TH_ZK_ENSEMBLE; j++) {
      int q = i != j && quorum_via[i][j] ? quorum_via[i][j] : quorum_port[j];
      size_t o = strlen(servers);
      snprintf(servers + o, sizeof servers - o, "server.%d=127.0.0.1:%d:%d\n", j + 1, q, election[j]);
    }
    char path[400];
    snprintf(path, sizeof path, "%s/data", z->dir);
    FILE *f = NULL;
    if (mkdir(path, 0755) == 0) {
      snprintf(path, sizeof path, "%s/data/myid", z->dir);
      if ((f = fopen(path, "w"))) {
        fprintf(f, "%d\n", z->myid);
        fclose(f);
        snprintf(path, sizeof path, "%s/zoo.cfg", z->dir);
        f = fopen(path, "w");
      }
    }
    if (!f) {
      th_zk_ensemble_stop(e);
      return -1;
    }
    fprintf(f,
            "tickTime=%d\ninitLimit=%d\nsyncLimit=%d\ndataDir=%s/data\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nminSessionTimeout=%d\nmaxSessionTimeout=60000\n"
            "4lw.commands.whitelist=srvr\nsnapCount=1000000\nautopurge.purgeInterval=0\n%s",
            tick_ms, sync_limit > 10 ? sync_limit : 10, sync_limit, z->dir, z->port, 2 * tick_ms, servers);
    fclose(f);
    snprintf(z->hostport, sizeof z->hostport, "127.0.0.1:%d", z->port);
    if (start_node(z, "org.apache.zookeeper.server.quorum.QuorumPeerMain") != 0) {
      th_zk_ensemble_stop(e);
      return -1;
    }
  }
  long long until = th_now_ms() + 90000 * th_time_factor();
  while (th_now_ms() < until) {
    int leaders = 0, followers = 0;
    char mode[64];
    for (int i = 0; i < TH_ZK_ENSEMBLE; i++) {
      th_zk_mode(&e->node[i], mode, sizeof mode);
      if (!strcmp(mode, "leader")) leaders++;
      if (!strcmp(mode, "follower")) followers++;
    }
    if (leaders == 1 && followers == TH_ZK_ENSEMBLE - 1) return 0;
    th_sleep_ms(200);
  }
  fprintf(stderr, "harness_zk: the ensemble (quorum links routed) did not form; logs:\n");
  for (int i = 0; i < TH_ZK_ENSEMBLE; i++) dump_log(&e->node[i]);
  th_zk_ensemble_stop(e);
  return -1;
}
