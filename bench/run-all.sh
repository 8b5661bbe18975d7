#!/usr/bin/env bash
# run-all.sh - build dlock-bench, install the node peer's packages, start one
# private redis-server, run dlock-bench against it (which runs the redis-py and
# node-redlock peers in the same run, pinned like itself), and print one
# combined table (bench/merge.py). Results land in $OUT (default
# build-bench/results). Stops the server by PID on every exit.
# usage: bash bench/run-all.sh [--quick] [--layout cross|same|none] [--markdown]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${DLOCK_BENCH_BUILD:-$ROOT/build-bench}
OUT=${OUT:-$BUILD/results}
QUICK=()
LAYOUT=cross
MARKDOWN=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick) ;;
    --layout) LAYOUT=${2:?--layout needs cross, same or none}; shift ;;
    --markdown) MARKDOWN=(--markdown) ;;
    *) echo "usage: $0 [--quick] [--layout cross|same|none] [--markdown]" >&2; exit 2 ;;
  esac
  shift
done
case "$LAYOUT" in cross|same|none) ;; *) echo "--layout: cross, same or none" >&2; exit 2 ;; esac

echo "=== building dlock-bench in $BUILD" >&2
# Release build (-O3) for the figures, warnings as errors as in every build.
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDLOCK_WERROR=ON >/dev/null
cmake --build "$BUILD" -j2 --target dlock-bench >/dev/null
BENCH=$BUILD/bench/dlock-bench

echo "=== installing the node peer's packages (npm ci)" >&2
NODE_OK=0
if command -v node >/dev/null && command -v npm >/dev/null &&
   (cd "$ROOT/bench/peers" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >&2); then
  NODE_OK=1
else
  echo "node-redlock peer unavailable (node/npm missing or npm ci failed)" >&2
fi
PY=/usr/bin/python3
PY_OK=0
if "$PY" -c 'import redis' 2>/dev/null; then PY_OK=1; else
  echo "redis-py peer unavailable (apt-get install python3-redis)" >&2
fi

TMP=$(mktemp -d /tmp/dlock-bench-all.XXXXXX)
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# redis-server on CPU 0; dlock-bench re-pins it by PID for its own layout.
SERVER_CPU=()
CLIENT_CPU=()
if [ "$LAYOUT" != none ] && [ "$(nproc)" -ge 2 ] && taskset -c 0 true 2>/dev/null; then
  SERVER_CPU=(taskset -c 0)
  if [ "$LAYOUT" = cross ]; then CLIENT_CPU=(taskset -c 1); else CLIENT_CPU=(taskset -c 0); fi
  PEER_LAYOUT=$LAYOUT
elif [ "$LAYOUT" != none ]; then
  PEER_LAYOUT="none (pinning unavailable)"
else
  PEER_LAYOUT=none
fi
"${SERVER_CPU[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --dir "$TMP" --save "" \
  --appendonly no --daemonize no --maxclients 10000 --logfile "$TMP/redis.log" &
SERVER_PID=$!
for _ in $(seq 1 100); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
  sleep 0.05
done
URL=redis://127.0.0.1:$PORT
mkdir -p "$OUT"
rm -f "$OUT/dlock.json" "$OUT/peers.jsonl"

echo "=== dlock-bench ${QUICK[*]} --url $URL --layout $LAYOUT" >&2
set +e
"$BENCH" "${QUICK[@]}" --url "$URL" --layout "$LAYOUT" --json "$OUT/dlock.json" >"$OUT/dlock.txt"
BENCH_RC=$?
set -e
: >"$OUT/peers.jsonl" # the peers now run inside dlock-bench (its peers scenario)
if [ -s "$OUT/dlock.json" ]; then
  "$PY" "$ROOT/bench/merge.py" "$OUT/dlock.json" "$OUT/peers.jsonl" --out "$OUT/combined.json" \
    "${MARKDOWN[@]}" | tee "$OUT/table.txt"
else
  cat "$OUT/dlock.txt"
fi
echo "results in $OUT (dlock.json, peers.jsonl, combined.json, table.txt)" >&2
exit "$BENCH_RC"
