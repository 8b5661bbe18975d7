/*
 * jobs.c - operating scheduled jobs (dlock_job_*): pause, resume, trigger,
 * state and list. The state lives on the server under the job's name (the
 * backend's job_* operations, backend.h); the scheduler (sched.c) obeys it
 * when it claims a tick, and claims a pending trigger like a tick.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define DLOCK__JOB_STATE_V1 DLOCK__END_OF(dlock_job_state, last_success_unix_ms)

void dlock_job_state_init(dlock_job_state *st) {
  if (!st) return;
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
}

/* The checks every operation shares; 0 or a status with the error set. */
static int job_args(dlock_client *c, const char *job, const char *what) {
  dlock__error_clear();
  if (!c) return dlock__error(DLOCK_EINVAL, "%s: client is NULL", what);
  int rc = dlock__check_name("job name", job);
  if (rc) return rc;
  if (!c->ops->sched || !c->ops->sched->job_set)
    return dlock__error(DLOCK_EINVAL,
                        "%s: pausing and triggering jobs is not offered by the %s backend (%s); "
                        "docs/scheduler.md lists where it is",
                        what, c->ops->name, c->server);
  return 0;
}

/* 'by' as given, or "<user>@<hostname>". */
static int who(const char *by, char *buf, size_t len) {
  if (by) {
    snprintf(buf, len, "%s", by);
  } else {
    const char *user = getenv("USER");
    struct passwd *pw = user ? NULL : getpwuid(getuid());
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(buf, len, "%s@%s", user ? user : pw ? pw->pw_name : "?", host);
  }
  if (!buf[0] || strpbrk(buf, "|\r\n"))
    return dlock__error(DLOCK_EINVAL, "who operates the job ('%s') is empty or contains '|', CR or LF", buf);
  return 0;
}

static int job_op(dlock_client *c, const char *job, int op, const char *by, const char *reason, const char *what) {
  int rc = job_args(c, job, what);
  if (rc) return rc;
  char name[128], id[DLOCK__TOKEN_HEX + 1];
  if ((rc = who(by, name, sizeof name))) return rc;
  if (reason && strlen(reason) > 200)
    return dlock__error(DLOCK_EINVAL, "%s: the reason is %zu bytes; keep it under 200", what, strlen(reason));
  if (reason && strpbrk(reason, "\r\n"))
    return dlock__error(DLOCK_EINVAL, "%s: the reason contains a line break; give it on one line", what);
  if ((rc = dlock__random_hex(id, DLOCK__TOKEN_HEX / 2))) return rc;
  rc = c->ops->sched->job_set(c, job, op, name, reason ? reason : "", id);
  if (rc < 0) dlock__error_prefix("%s '%s': ", what, job);
  return rc;
}

int dlock_job_pause(dlock_client *c, const char *job, const char *by, const char *reason) {
  return job_op(c, job, DLOCK__JOB_PAUSE, by, reason, "pause job");
}

int dlock_job_resume(dlock_client *c, const char *job, const char *by) {
  return job_op(c, job, DLOCK__JOB_RESUME, by, NULL, "resume job");
}

int dlock_job_trigger(dlock_client *c, const char *job, const char *by) {
  return job_op(c, job, DLOCK__JOB_TRIGGER, by, NULL, "trigger job");
}

int dlock_job_state_get(dlock_client *c, const char *job, dlock_job_state *out) {
  int rc = job_args(c, job, "job state");
  if (rc) return rc;
  if ((rc = dlock__struct_check(out, DLOCK__JOB_STATE_V1, sizeof *out, "dlock_job_state"))) return rc;
  size_t given = out->struct_size;
  dlock_job_state st;
  dlock_job_state_init(&st);
  if ((rc = c->ops->sched->job_get(c, job, &st))) return rc;
  /* The history's part: the newest run, and the newest success. */
  enum { N = 100 };
  dlock_run_record *recs = calloc(N, sizeof *recs);
  if (!recs) return dlock__error(DLOCK_ENOMEM, "out of memory");
  int n = c->ops->sched->history(c, job, recs, N);
  if (n < 0) {
    free(recs);
    return n;
  }
  for (int i = 0; i < n; i++) {
    dlock_run_record *r = &recs[i];
    dlock__outcome_decode(r);
    if (r->duration_ms < 0) continue; /* a skip */
    if (!st.last_run_unix_ms) {
      st.last_run_unix_ms = r->start_unix_ms;
      snprintf(st.last_outcome, sizeof st.last_outcome, "%s", r->outcome);
    }
    if (!strcmp(r->outcome, "ok")) {
      st.last_success_unix_ms = r->start_unix_ms + r->duration_ms;
      break;
    }
  }
  free(recs);
  st.struct_size = given;
  memcpy(out, &st, given);
  return 0;
}

/* The names, each once (a backend may give one twice: from its state and
 * from its ticks). */
typedef struct seen {
  char **names;
  size_t n, cap;
  int nomem;
} seen;

static void collect(const char *name, void *arg) {
  seen *sn = arg;
  for (size_t i = 0; i < sn->n; i++)
    if (!strcmp(sn->names[i], name)) return;
  if (sn->n == sn->cap) {
    size_t cap = sn->cap ? sn->cap * 2 : 64;
    char **p = realloc(sn->names, cap * sizeof *p);
    if (!p) {
      sn->nomem = 1;
      return;
    }
    sn->names = p;
    sn->cap = cap;
  }
  if (!(sn->names[sn->n] = strdup(name)))
    sn->nomem = 1;
  else
    sn->n++;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int dlock_job_list(dlock_client *c, const char *pattern, void (*fn)(const char *job, void *arg), void *arg) {
  dlock__error_clear();
  if (!c || !fn) return dlock__error(DLOCK_EINVAL, "dlock_job_list: NULL argument");
  if (!c->ops->sched || !c->ops->sched->job_list)
    return dlock__error(DLOCK_EINVAL, "listing jobs is not offered by the %s backend (%s)", c->ops->name, c->server);
  seen sn = {0};
  int rc = c->ops->sched->job_list(c, pattern, collect, &sn);
  if (rc >= 0 && sn.nomem) rc = dlock__error(DLOCK_ENOMEM, "out of memory");
  if (rc >= 0) {
    if (sn.n > 1) qsort(sn.names, sn.n, sizeof *sn.names, by_name); /* never qsort(NULL, 0): UB */
    for (size_t i = 0; i < sn.n; i++) fn(sn.names[i], arg);
    rc = (int)sn.n;
  }
  for (size_t i = 0; i < sn.n; i++) free(sn.names[i]);
  free(sn.names);
  return rc;
}
