#!/usr/bin/env bash
# fuzz/run.sh [SECONDS | --build-only]: build the libFuzzer targets with clang
# (ASan+UBSan) in their own build directory and run each for SECONDS
# (default 30; --build-only: build, run nothing) from
# its seed corpus in fuzz/corpus/<target>/. The seed corpus is only read: new
# inputs go to a scratch directory. A crash leaves its input in the build
# directory (crash-<target>-*) and the target counts as failed.
# Ends with "fuzz: N passed, N failed" (one per target).
#   DLOCK_FUZZ_BUILD  build directory (default build/fuzz)
#   DLOCK_FUZZ_RSS_MB memory limit per target (default 2048)
#   DLOCK_FUZZ_JOBS   targets run at once (default: the number of CPUs)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-30}
build_only=0
[ "$secs" = --build-only ] && build_only=1 && secs=0
dir=${DLOCK_FUZZ_BUILD:-$root/build/fuzz}
rss=${DLOCK_FUZZ_RSS_MB:-2048}
jobs=${DLOCK_FUZZ_JOBS:-$(nproc)}
targets=(url cron duration reply serve_req)

case $secs in '' | *[!0-9]*) echo "usage: fuzz/run.sh [SECONDS | --build-only]" >&2; exit 64 ;; esac
case $jobs in '' | *[!0-9]* | 0) echo "fuzz: DLOCK_FUZZ_JOBS must be a number of targets (1 or more)" >&2; exit 64 ;; esac
if ! command -v clang >/dev/null; then
  echo "fuzz: clang is not installed (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S "$root" -B "$dir" -DCMAKE_C_COMPILER=clang -DDLOCK_FUZZ=ON -DDLOCK_BUILD_TESTS=OFF \
     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_WERROR=ON >"$log" 2>&1 ||
   ! cmake --build "$dir" -j "$(nproc)" --target fuzz_all >>"$log" 2>&1; then
  grep -vE '^\[ *[0-9]+%\]' "$log" | tail -n 40
  echo "fuzz: build failed in $dir" >&2
  echo "fuzz: 0 passed, ${#targets[@]} failed"
  exit 1
fi
[ $build_only = 1 ] && exit 0

# Built only with the MySQL backend (DLOCK_WITH_MYSQL).
[ -x "$dir/fuzz/fuzz_url_mysql" ] && targets+=(url_mysql)
# run_target T: one target from its seeds in a scratch directory; its report
# goes to $logs/T.out, its exit status to $logs/T.rc.
run_target() {
  local t=$1 work start rc runs
  work=$(mktemp -d)
  cp "$root/fuzz/corpus/$t/"* "$work/"
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$dir/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb="$rss" -max_len=4096 -timeout=10 \
    -artifact_prefix="$dir/crash-$t-" "$work" >"$logs/$t.log" 2>&1
  rc=$?
  runs=$(grep -oE '^#[0-9]+' "$logs/$t.log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "fuzz_$t: ok, ${runs#\#} runs in $(( $(date +%s) - start )) s" >"$logs/$t.out"
  else
    { echo "fuzz_$t: FAILED (exit $rc)"
      grep -E 'ERROR|SUMMARY|invariant|Test unit written|runtime error' "$logs/$t.log" | head -n 20
      tail -n 30 "$logs/$t.log"; } >"$logs/$t.out"
  fi
  echo $rc >"$logs/$t.rc"
  rm -rf "$work"
}

# The targets are CPU-bound and single-threaded: $jobs of them at a time
# (one per CPU), each for its whole SECONDS of wall time.
logs=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$logs"' EXIT
running=0
for t in "${targets[@]}"; do
  if [ $running -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait
passed=0
failed=0
for t in "${targets[@]}"; do
  cat "$logs/$t.out" 2>/dev/null || echo "fuzz_$t: FAILED (no report)"
  if [ "$(cat "$logs/$t.rc" 2>/dev/null)" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
