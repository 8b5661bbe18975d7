#!/usr/bin/env bash
# publish_ab.sh - the watch event's cost (bench/publish_ab.c) against a
# private redis-server pinned to CPU 0, the loop on CPU 1, RUNS times, with
# the machine's load before and after (docs/PERFORMANCE.md, "Issue 27, item 5").
# Usage: bench/publish_ab.sh BENCH_BINARY [RUNS [BLOCKS [CYCLES_PER_BLOCK [DEPTH]]]]
set -u
bin=$1 runs=${2:-3} blocks=${3:-20} per=${4:-2000} depth=${5:-1}
. "$(dirname "$0")/private_redis.sh"
echo "redis $(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^redis_version://p'), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  echo "run $r:"
  taskset -c 1 "$bin" 127.0.0.1 "$port" --blocks "$blocks" --block "$per" --depth "$depth" || exit 1
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
