#!/usr/bin/env bash
# metrics_ab.sh - the metrics' hot-path cost, A/B: bench/metrics_ab.c on
# this build's libdlock.so (metrics always on) and on one built from an
# older commit (without them), in alternating blocks against one private
# redis-server (pinned to CPU 0, the loop to CPU 1), so that drift hits both
# alike. Prints each block and the ratio new/old per pair, with its median
# and range (docs/PERFORMANCE.md, "Metrics").
# Usage: bench/metrics_ab.sh NEW_LIB_DIR OLD_LIB_DIR BENCH_BINARY [PAIRS [SECONDS]]
set -u
new=$1 old=$2 bin=$3 pairs=${4:-6} secs=${5:-3}
. "$(dirname "$0")/private_redis.sh"
run() { LD_LIBRARY_PATH=$1 taskset -c 1 "$bin" "redis://127.0.0.1:$port" "$secs"; }
ratios=()
for p in $(seq 1 "$pairs"); do
  # Alternate which goes first, so that neither always runs on a warmer machine.
  if [ $((p % 2)) -eq 1 ]; then a=$(run "$new"); b=$(run "$old"); else b=$(run "$old"); a=$(run "$new"); fi
  r=$(python3 -c "print(f'{$a / $b:.4f}')")
  echo "pair $p: with metrics $a/s, without $b/s, ratio $r"
  ratios+=("$r")
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
print(f"ratio with/without metrics: median {statistics.median(r):.3f}, range {r[0]:.3f} .. {r[-1]:.3f} ({len(r)} pairs)")
PY
