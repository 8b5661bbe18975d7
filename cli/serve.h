/*
 * serve.h - "dlock serve", the local agent: what its request parser
 * (serve_req.c, no I/O, fuzzed by fuzz/fuzz_serve_req.c) gives the server
 * (cmd_serve.c). Every input is bounded, every rejection says why in
 * 'err' (the words of the JSON error's message).
 */
#ifndef DLOCK_CLI_SERVE_H
#define DLOCK_CLI_SERVE_H

#include <stddef.h>
#include <stdint.h>

/* Request bodies larger than this are refused (413). */
#define SERVE_MAX_BODY (64 * 1024)

/* What a request asks for, from its method and path. */
typedef enum serve_route_kind {
  SERVE_NOT_FOUND = 0,
  SERVE_BAD_METHOD,  /* a known path with another method (405) */
  SERVE_BAD_NAME,    /* /v1/locks/NAME/... with a name dlock refuses (400) */
  SERVE_METRICS,     /* GET /metrics */
  SERVE_HEALTH,      /* GET /v1/health */
  SERVE_LOCK_STATUS, /* GET /v1/locks/NAME */
  SERVE_ACQUIRE,     /* POST /v1/locks/NAME/acquire */
  SERVE_RELEASE,     /* POST /v1/locks/NAME/release */
  SERVE_EXTEND       /* POST /v1/locks/NAME/extend */
} serve_route_kind;

typedef struct serve_route {
  serve_route_kind kind;
  int mutating;   /* 1: the call changes state (POST): the token applies */
  char name[513]; /* the lock's name (DLOCK_MAX_NAME_LEN), for the lock routes */
} serve_route;

/* Route 'method' and 'path' (already percent-decoded, as libmicrohttpd gives
 * it; 'path_len' its length: a decoded %00 is refused). For SERVE_BAD_NAME and
 * SERVE_NOT_FOUND, 'err' says what is wrong. */
void serve_route_parse(const char *method, const char *path, size_t path_len, serve_route *out, char *err,
                       size_t errlen);

/* 0 when 'name' (len bytes) is a name the agent passes on: 1..512 bytes of
 * UTF-8 without control characters, braces or a NUL; else -1 and 'err'. */
int serve_name_check(const char *name, size_t len, char *err, size_t errlen);

enum { SERVE_KIND_MUTEX = 0, SERVE_KIND_SEMAPHORE, SERVE_KIND_READ, SERVE_KIND_WRITE };

/* The body of POST .../acquire: a JSON object, every field optional:
 *   "kind": "mutex" | "semaphore" | "read" | "write"   (default mutex)
 *   "permits": 1..1000000                              (semaphore only, required there)
 *   "lease": "30s"   the lease the agent renews while the stream is open
 *   "ttl": "10s"     a fixed lease instead: not renewed, lost at its end
 *   "wait": "5s" | "forever"                           (default 0: try once)
 *   "max_hold": "1h" the renewals stop after this long in all
 *   "owner": "text"  shown as the holder by 'dlock status' (at most 1024 bytes)
 * Durations are strings as dlock takes them ("1m30s", "250ms") or whole
 * numbers of milliseconds. An empty body is {}. */
typedef struct serve_acquire_req {
  int kind;
  int permits;
  int64_t lease_ms; /* 0: the library's default */
  int64_t ttl_ms;   /* 0: none (renewed) */
  int64_t wait_ms;  /* -1: forever */
  int64_t max_hold_ms;
  int has_owner;
  char owner[1025];
} serve_acquire_req;

/* The body of POST .../release and .../extend:
 *   "holder": "<the id the acquired event gave>"     (required)
 *   "lease": "30s"                                   (extend only, required there) */
typedef struct serve_holder_req {
  char holder[33];
  int64_t lease_ms;
} serve_holder_req;

/* 0, or -1 with 'err' (a 400 with that message). */
int serve_parse_acquire(const char *body, size_t len, serve_acquire_req *out, char *err, size_t errlen);
int serve_parse_holder(const char *body, size_t len, int want_lease, serve_holder_req *out, char *err, size_t errlen);

#endif /* DLOCK_CLI_SERVE_H */
