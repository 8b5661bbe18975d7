/* harness_proxy.c - see harness_proxy.h. */
#include "harness_proxy.h"

#include <string.h>

int th_proxy_cache_scripts(fp_proxy *fp) {
  for (int i = 0; i < DLOCK__SCRIPT_COUNT; i++) {
    const char *argv[3] = {"SCRIPT", "LOAD", dlock__script_text((dlock__script_id)i)};
    size_t lens[3] = {6, 4, strlen(argv[2])};
    if (fp_server_command(fp, 3, argv, lens) != 0) return -1;
  }
  return 0;
}

int th_proxy_start(th_redis *srv, fp_proxy **fp) {
  *fp = NULL;
  if (th_redis_start(srv, NULL) != 0) return -1;
  if (fp_start(fp, srv->port) != 0 || th_proxy_cache_scripts(*fp) != 0) {
    if (*fp) fp_stop(*fp);
    *fp = NULL;
    th_redis_stop(srv);
    return -1;
  }
  return 0;
}

void th_proxy_stop(th_redis *srv, fp_proxy *fp) {
  if (fp) fp_stop(fp);
  th_redis_stop(srv);
}

int th_proxy_arm(fp_proxy *fp, dlock__script_id script) {
  fp_pass(fp);
  int before = fp_dropped(fp);
  fp_drop_reply(fp, dlock__script_sha(script), 1);
  return before;
}

dlock_client *th_proxy_client(fp_proxy *fp) {
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = fp_url(fp);
  o.command_timeout_ms = (int)(2000 * th_time_factor());
  dlock_client *c = NULL;
  return dlock_client_new(&c, &o) == 0 ? c : NULL;
}
