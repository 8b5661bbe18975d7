/*
 * test_interop.c - libdlock and redis-py's Lock on the same key exclude each
 * other in both directions; neither touches the other's key; a C waiter gets
 * a lock released by redis-py (which sends no hand-off message) through its
 * re-check.
 *
 * The python side runs as a separate process: a holder script that acquires,
 * reports, waits for a line on stdin and releases; and one-shot scripts.
 */
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlock.h"
#include "harness.h"
#include "test.h"

static th_redis srv;
static char python[64];
static char holder_py[400], try_py[400];

static const char holder_src[] = "import sys, redis\n"
                                 "port, name, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])\n"
                                 "r = redis.Redis(host='127.0.0.1', port=port)\n"
                                 "lock = r.lock(name, timeout=timeout)\n"
                                 "ok = lock.acquire(blocking=False)\n"
                                 "print('held' if ok else 'busy', flush=True)\n"
                                 "sys.stdin.readline()\n"
                                 "if ok:\n"
                                 "    try:\n"
                                 "        lock.release()\n"
                                 "        print('released', flush=True)\n"
                                 "    except redis.exceptions.LockError as e:\n"
                                 "        print('release failed', type(e).__name__, flush=True)\n";

/* One-shot: try the lock without blocking; then release a Lock object that
 * never acquired (must raise); report whether the key is locked. */
static const char try_src[] = "import sys, redis\n"
                              "port, name = int(sys.argv[1]), sys.argv[2]\n"
                              "r = redis.Redis(host='127.0.0.1', port=port)\n"
                              "lock = r.lock(name, timeout=5)\n"
                              "got = lock.acquire(blocking=False)\n"
                              "print('acquire', got)\n"
                              "other = r.lock(name, timeout=5)\n"
                              "try:\n"
                              "    other.release()\n"
                              "    print('release ok')\n"
                              "except redis.exceptions.LockError as e:\n"
                              "    print('release raised', type(e).__name__)\n"
                              "print('locked', r.lock(name).locked())\n"
                              "if got:\n"
                              "    lock.release()\n"
                              "    print('released')\n";

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

void test_setup(void) {
  if (th_redis_start(&srv, NULL) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    exit(1);
  }
  /* Debian's python3-redis lives with /usr/bin/python3; a python3 earlier on
   * PATH (pyenv, venv) may lack it. */
  const char *candidates[] = {"/usr/bin/python3", "python3"};
  for (size_t i = 0; i < 2 && !python[0]; i++) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "%s -c 'import redis' >/dev/null 2>&1", candidates[i]);
    if (system(cmd) == 0) snprintf(python, sizeof python, "%s", candidates[i]);
  }
  snprintf(holder_py, sizeof holder_py, "%s/holder.py", srv.dir);
  snprintf(try_py, sizeof try_py, "%s/try.py", srv.dir);
  if (write_file(holder_py, holder_src) != 0 || write_file(try_py, try_src) != 0) {
    fprintf(stderr, "cannot write python scripts into %s\n", srv.dir);
    exit(1);
  }
}

void test_teardown(void) { th_redis_stop(&srv); }

static void need_python(void) {
  if (!python[0]) TEST_FAIL("no python3 with the redis module (apt install python3-redis)");
}

/* ---- The python holder process ---- */

struct py_holder {
  FILE *in;           /* its stdin */
  char out_path[400]; /* its stdout */
};

static int read_file(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = '\0';
  fclose(f);
  return 0;
}

/* Wait until the holder's output contains 'word'; 0 when it did. */
static int holder_wait_for(struct py_holder *h, const char *word, long ms) {
  char buf[2048];
  long long deadline = th_now_ms() + ms;
  while (th_now_ms() < deadline) {
    if (read_file(h->out_path, buf, sizeof buf) == 0 && strstr(buf, word)) return 0;
    th_sleep_ms(20);
  }
  return -1;
}

static void holder_start(struct py_holder *h, const char *name, int timeout_s) {
  need_python();
  static int seq;
  snprintf(h->out_path, sizeof h->out_path, "%s/holder-%d.out", srv.dir, seq++);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "exec %s %s %d '%s' %d > '%s' 2>&1", python, holder_py, srv.port, name, timeout_s,
           h->out_path);
  fflush(NULL);
  h->in = popen(cmd, "w");
  if (!h->in) TEST_FAIL("cannot run %s", python);
  if (holder_wait_for(h, "held", 15000) != 0) {
    char buf[2048] = "";
    read_file(h->out_path, buf, sizeof buf);
    pclose(h->in);
    h->in = NULL;
    TEST_FAIL("python holder did not get '%s': %s", name, buf);
  }
}

/* Tell the holder to release; returns its whole output. */
static void holder_release(struct py_holder *h, char *out, size_t n) {
  if (!h->in) return;
  fputs("go\n", h->in);
  fflush(h->in);
  pclose(h->in);
  h->in = NULL;
  if (read_file(h->out_path, out, n) != 0) out[0] = '\0';
}

/* Run try.py on 'name'; its output into 'out'. */
static void python_try(const char *name, char *out, size_t n) {
  need_python();
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "%s %s %d '%s' 2>&1", python, try_py, srv.port, name);
  fflush(NULL);
  FILE *p = popen(cmd, "r");
  if (!p) TEST_FAIL("cannot run %s", python);
  size_t k = fread(out, 1, n - 1, p);
  out[k] = '\0';
  pclose(p);
}

/* ---- C side ---- */

static dlock_client *client(void) { return test_client(srv.url); }

static dlock_mutex *mutex(dlock_client *c, const char *name, int64_t lease_ms) { return test_mutex(c, name, lease_ms); }

static void cli(char *out, size_t n, const char *args) { th_redis_cli(&srv, out, n, "%s", args); }

TEST(a_lock_held_by_redis_py_gives_ebusy_in_c_until_python_releases) {
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:a", 10000);
  struct py_holder h = {0};
  holder_start(&h, "interop:a", 10);
  char before[256], after[256];
  cli(before, sizeof before, "GET interop:a");
  int rc1 = dlock_mutex_acquire(m, 0);
  int rc2 = dlock_mutex_acquire(m, 300);
  cli(after, sizeof after, "GET interop:a");
  char pyout[2048];
  holder_release(&h, pyout, sizeof pyout);
  ASSERT_STATUS(rc1, DLOCK_EBUSY);
  ASSERT_STATUS(rc2, DLOCK_EBUSY);
  ASSERT_STR_EQ(after, before);       /* python's token untouched */
  ASSERT_CONTAINS(pyout, "released"); /* python's own release still worked */
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  ASSERT(dlock_mutex_fence(m) > 0);
  ASSERT_OK(dlock_mutex_release(m));
  char out[64];
  cli(out, sizeof out, "EXISTS interop:a");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_lock_held_in_c_is_busy_for_redis_py_and_python_cannot_release_it) {
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:b", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char before[256], after[256], out[2048];
  cli(before, sizeof before, "GET interop:b");
  python_try("interop:b", out, sizeof out);
  cli(after, sizeof after, "GET interop:b");
  ASSERT_CONTAINS(out, "acquire False");
  ASSERT_CONTAINS(out, "release raised");
  ASSERT_CONTAINS(out, "locked True");
  ASSERT_STR_EQ(after, before);
  ASSERT_EQ(dlock_mutex_is_held(m), 1);
  cli(out, sizeof out, "PTTL interop:b");
  ASSERT(atoll(out) > 3000);
  ASSERT_OK(dlock_mutex_release(m));
  python_try("interop:b", out, sizeof out);
  ASSERT_CONTAINS(out, "acquire True");
  ASSERT_CONTAINS(out, "released");
  cli(out, sizeof out, "EXISTS interop:b");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

struct waiter {
  dlock_mutex *m;
  int rc;
  long long acquired_at;
  int done;
  int key_existed;
};

static void *wait_for_lock(void *arg) {
  struct waiter *w = arg;
  w->rc = dlock_mutex_acquire(w->m, 15000);
  w->acquired_at = th_now_ms();
  if (w->rc == 0) {
    char out[64];
    cli(out, sizeof out, "EXISTS interop:c");
    w->key_existed = !strcmp(out, "1");
    w->rc = dlock_mutex_release(w->m);
  }
  __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TEST(a_c_waiter_gets_the_lock_soon_after_redis_py_releases_it) {
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:c", 10000);
  struct py_holder h = {0};
  holder_start(&h, "interop:c", 10);
  struct waiter w = {m, -99, 0, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, wait_for_lock, &w);
  th_sleep_ms(700);
  int done_early = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
  long long released = th_now_ms();
  char pyout[2048];
  holder_release(&h, pyout, sizeof pyout);
  pthread_join(th, NULL); /* bounded by the 15 s wait */
  ASSERT_EQ(done_early, 0);
  ASSERT_CONTAINS(pyout, "released");
  ASSERT_OK(w.rc);
  long long took = w.acquired_at - released;
  printf("  C waiter got the lock %lld ms after python released it\n", took);
  ASSERT(took < 6500); /* its re-check comes at most 5 s apart */
  ASSERT_EQ(w.key_existed, 1);
  char out[64];
  cli(out, sizeof out, "ZCARD {interop:c}:queue");
  ASSERT_STR_EQ(out, "0");
  cli(out, sizeof out, "EXISTS interop:c");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST(a_c_waiter_gets_a_lock_whose_python_holder_died_when_its_lease_ends) {
  need_python();
  /* Python takes a 2 s lock and exits without releasing. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "%s -c \"import redis; print(redis.Redis(host='127.0.0.1', port=%d).lock('interop:d', "
           "timeout=2).acquire(blocking=False))\" 2>&1",
           python, srv.port);
  FILE *p = popen(cmd, "r");
  ASSERT(p != NULL);
  char out[256];
  size_t k = fread(out, 1, sizeof out - 1, p);
  out[k] = '\0';
  pclose(p);
  ASSERT_CONTAINS(out, "True");
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:d", 10000);
  int busy = dlock_mutex_acquire(m, 0);
  long long t0 = th_now_ms();
  int rc = dlock_mutex_acquire(m, 10000);
  long long took = th_now_ms() - t0;
  printf("  C waiter got the lock %lld ms after it began to wait\n", took);
  if (rc == 0) rc = dlock_mutex_release(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  ASSERT_STATUS(busy, DLOCK_EBUSY);
  ASSERT_OK(rc);
  ASSERT(took < 4000); /* re-check at the holder's TTL, not 5 s later */
}

TEST(a_c_waiter_behind_any_foreign_key_rechecks_right_when_its_ttl_ends) {
  /* Any other client's SET NX PX lock (redis-py, redlock-py, a shell script)
   * looks the same. The waiter must look again when the TTL runs out, also
   * when its re-check lands in the very millisecond of the expiry (PTTL 0),
   * and not only after the 5 s re-check cap. Several rounds, since that
   * millisecond is hit only some of the time. */
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:f", 10000);
  int rc = 0;
  long long took = 0;
  char out[64] = "";
  for (int round = 0; round < 5; round++) {
    cli(out, sizeof out, "SET interop:f foreign-owner NX PX 800");
    if (strcmp(out, "OK") != 0) break;
    long long t0 = th_now_ms();
    rc = dlock_mutex_acquire(m, 10000);
    took = th_now_ms() - t0;
    printf("  round %d: acquired %lld ms after a foreign 800 ms lock was set\n", round, took);
    if (rc != 0 || took >= 2500) break;
    if ((rc = dlock_mutex_release(m)) != 0) break;
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  ASSERT_STR_EQ(out, "OK");
  ASSERT_OK(rc);
  if (took >= 2500)
    TEST_FAIL("the waiter took %lld ms behind an 800 ms lock: a re-check that saw PTTL 0 waited for "
              "the 5 s re-check cap",
              took);
}

TEST(redis_py_waits_for_a_c_holder_and_gets_the_lock_after_the_release) {
  need_python();
  dlock_client *c = client();
  dlock_mutex *m = mutex(c, "interop:e", 10000);
  ASSERT_OK(dlock_mutex_acquire(m, 0));
  char cmd[1200], out_path[400];
  snprintf(out_path, sizeof out_path, "%s/blocking.out", srv.dir);
  snprintf(cmd, sizeof cmd,
           "%s -c \"import redis,time; l=redis.Redis(host='127.0.0.1', port=%d).lock('interop:e', timeout=5, "
           "sleep=0.05); t=time.time(); print(l.acquire(blocking=True, blocking_timeout=10), "
           "round(time.time()-t, 2)); l.release()\" > '%s' 2>&1 &",
           python, srv.port, out_path);
  ASSERT_EQ(system(cmd), 0);
  th_sleep_ms(800);
  ASSERT_OK(dlock_mutex_release(m));
  char buf[512] = "";
  long long deadline = th_now_ms() + 12000;
  while (th_now_ms() < deadline) {
    if (read_file(out_path, buf, sizeof buf) == 0 && strchr(buf, '\n')) break;
    th_sleep_ms(50);
  }
  ASSERT_CONTAINS(buf, "True");
  th_sleep_ms(200); /* its release */
  char out[64];
  cli(out, sizeof out, "EXISTS interop:e");
  ASSERT_STR_EQ(out, "0");
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TEST_MAIN()
