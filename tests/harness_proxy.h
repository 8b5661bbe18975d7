/*
 * harness_proxy.h - a test redis-server behind the fault proxy
 * (faultproxy.h), ready for lost-reply tests: every dlock script is in the
 * server's cache, so the EVALSHA the proxy matches by SHA1 runs at once
 * rather than being answered NOSCRIPT and sent again as EVAL.
 */
#ifndef DLOCK_TEST_HARNESS_PROXY_H
#define DLOCK_TEST_HARNESS_PROXY_H

#include "dlock.h"
#include "faultproxy.h"
#include "harness.h"
#include "redis.h"

/* Load every dlock script through the proxy's own server connection. 0 or -1. */
int th_proxy_cache_scripts(fp_proxy *fp);
/* Start a redis-server, the proxy in front of it, and cache the scripts. 0 or -1. */
int th_proxy_start(th_redis *srv, fp_proxy **fp);
void th_proxy_stop(th_redis *srv, fp_proxy *fp);
/* Forward everything again, then drop the next reply to 'script'. Returns
 * fp_dropped() before, to compare with afterwards. */
int th_proxy_arm(fp_proxy *fp, dlock__script_id script);
/* A client through the proxy, command timeout 2 s (scaled by
 * th_time_factor()); NULL on failure, with dlock_last_error(). */
dlock_client *th_proxy_client(fp_proxy *fp);

#endif
