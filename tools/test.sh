#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: install what is
# missing, build with -Werror, then run every test in three builds and
# under valgrind:
#   plain, AddressSanitizer+UBSan, ThreadSanitizer, and valgrind memcheck
#   (on the plain build's programs),
# then the libFuzzer targets (clang, ASan+UBSan) for DLOCK_FUZZ_TIME seconds
# each (default 30; each target that runs clean counts as one pass).
# Ends with one line "N passed, N failed" over all of them.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
dlock_install_packages
# Each stage's wall time, repeated in one line at the end (CI shows the tail).
stage_times="packages $SECONDS s"

passed=0
failed=0
status=0

# The whole ctest output of a stage stays in the build directory: what a
# failing test printed is shown by report_suite, and the file keeps the rest.
suite_log() { echo "$2/ctest-$(echo "$1" | tr -c 'A-Za-z0-9\n' '-').log"; }
PROGRESS='^ *[0-9]+/[0-9]+ (Test|MemCheck)|tests passed|FAIL|Defects'

# run_ctest NAME BUILD_DIR [ctest args...]: run the stage, its progress lines
# on stdout, its wall time into the log's .secs file.
run_ctest() {
  local name=$1 dir=$2 start=$SECONDS log
  shift 2
  log=$(suite_log "$name" "$dir")
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$log" | grep -E "$PROGRESS" || true
  echo $((SECONDS - start)) >"$log.secs"
}

# report_suite NAME BUILD_DIR: count the stage's tests into passed/failed and
# print what its failing tests printed.
report_suite() {
  local name=$1 dir=$2 log line
  log=$(suite_log "$name" "$dir")
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n 1)
  if [ -z "$line" ]; then
    echo "dlock: $name ran no test" >&2
    tail -n 30 "$log"
    failed=$((failed + 1))
    status=1
  else
    local f t
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
    t=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/')
    passed=$((passed + t - f))
    failed=$((failed + f))
    if [ "$f" -ne 0 ]; then
      status=1
      # What each failing test printed (--output-on-failure puts it after
      # the test's status line), then the list of them.
      echo "--- what the failing tests printed (all of it: $log):"
      awk '/^ *[0-9]+\/[0-9]+ (Test|MemCheck) +#/ { show = ($0 !~ / Passed /) }
           show && !/^ +Start +[0-9]+: /' "$log" | head -n 600
      sed -n '/The following tests FAILED/,$p' "$log"
    fi
  fi
  local secs
  secs=$(cat "$log.secs" 2>/dev/null || echo "?")
  echo "=== $name: $secs s"
  stage_times+=", $name $secs s"
}

# run_suite NAME BUILD_DIR [ctest args...]: one stage, in the foreground.
run_suite() {
  echo "=== $1"
  run_ctest "$@"
  report_suite "$1" "$2"
}

B=$DLOCK_ROOT/build

# Which tests run in which build (README, "Tests"; each choice is explained
# where its stage runs below). The sanitizer builds build only what their
# tests need (tools/test-targets.sh: each selected test's program
# and the helpers it names), not the benchmarks, the examples or the review,
# fault and conformance programs that they do not run.
ASAN_TESTS=(-LE 'fault|model|review|check|bench'
  -E '^(zk/test_zk_(api|family)|conformance/(tls|sentinel|cluster|redlock)|cli/test_(pg|redlock|cluster|sentinel|zk))$')
TSAN_TESTS=(-L 'unit|integration')
VALGRIND_TESTS=(-L 'unit|integration' -LE 'deployment|pg|mysql' -E 'integration/(test_deadline|test_sched|test_watchdog)$')

# build_for NAME DIR SELECTION_ARRAY [cmake args...]: configure DIR, then
# build the targets the selected tests need (all of them without a selection).
build_for() {
  local name=$1 dir=$2 start=$SECONDS targets=""
  local -n sel=$3
  shift 3
  if [ ${#sel[@]} -gt 0 ]; then
    cmake -S "$DLOCK_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_WERROR=ON "$@" >/dev/null || return 1
    targets=$(bash "$DLOCK_ROOT/tools/test-targets.sh" "$dir" "${sel[@]}") || targets=all
  fi
  DLOCK_BUILD_TARGETS=$targets dlock_build "$dir" "$@" || return 1
  echo "=== built $name: $((SECONDS - start)) s${targets:+ ($(echo "$targets" | wc -w) targets)}"
  stage_times+=", built $name $((SECONDS - start)) s"
}

# shellcheck disable=SC2034 # read by build_for (a nameref)
ALL_TESTS=()
echo "=== building plain; ASan+UBSan, TSan and the fuzz targets build beside the plain suite"
build_for plain "$B/plain" ALL_TESTS || exit 1
# The sanitizer and fuzz builds are CPU-bound; the plain suite mostly waits on
# servers, leases and ticks (its tests keep the two CPUs about a third busy).
# So they build while it runs, at the lowest CPU priority (nice 19), which
# takes the idle CPU time and little else from the tests: the suite's timing
# bounds are made for a busy machine anyway. This saves most of the builds'
# wall time (10-15 minutes of CI's 25).
bg_log=$B/sanitizer-builds.log
mkdir -p "$B"
(
  renice -n 19 -p $BASHPID >/dev/null
  # -O1, as the sanitizers' documentation suggests: a third less compile time
  # than -O2 (the builds compete with the plain suite for the CPU), and the
  # reports' stacks stay close to the source.
  build_for "ASan+UBSan" "$B/asan" ASAN_TESTS -DDLOCK_SANITIZE=address "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" || exit 1
  build_for TSan "$B/tsan" TSAN_TESTS -DDLOCK_SANITIZE=thread "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" || exit 1
  start=$SECONDS
  DLOCK_FUZZ_BUILD=$B/fuzz bash "$DLOCK_ROOT/fuzz/run.sh" --build-only || exit 1
  echo "=== built the fuzz targets: $((SECONDS - start)) s"
) >"$bg_log" 2>&1 &
bg_pid=$!

# Most tests wait on servers, leases and ticks rather than compute (a -j 2
# run keeps the two CPUs about a third busy), so the plain build runs five
# at a time and the sanitizer builds four; their timing bounds are generous.
# At five (and with the builds beside it) the two CPUs are busy: a higher -j
# would only take CPU from the builds. Valgrind is CPU-bound: two.
# The model's bitstate search is bounded to 60 s here (CPU-bound, beside the
# other tests); DLOCK_MODEL_SECONDS / DLOCK_MODEL_FULL=1 search longer.
DLOCK_MODEL_SECONDS=${DLOCK_MODEL_SECONDS:-60} run_suite "plain build" "$B/plain" -j 5
start=$SECONDS
wait "$bg_pid"
bg_status=$?
cat "$bg_log"
echo "=== waited for the sanitizer builds: $((SECONDS - start)) s more"
stage_times+=", $(sed -nE 's/^=== (built [^:]+): ([0-9]+ s).*/\1 \2 (beside the plain suite)/p' "$bg_log" | paste -sd, | sed 's/,/, /g'), waited for them $((SECONDS - start)) s"
[ $bg_status -eq 0 ] || { echo "dlock: a sanitizer or fuzz build failed (above; whole log: $bg_log)" >&2; exit 1; }
# The fault matrix (label fault: whole deployments under faults for a bounded
# time) and the SPIN model (label model: no library code runs) only in the
# plain build, where they take minutes; the review tests (whole deployments
# under failovers, each a finding fixed since) too: the sanitizers see the
# same code paths in the integration and conformance tests, and CI's time is
# bounded (README, "Tests"). Nor the checks of the tree (label check: docs,
# format, ABI, install; no library code of interest runs), the benchmark's
# smoke run, or what runs the same code under ASan elsewhere: the ZooKeeper
# API and family tests (conformance/zk; zk/test_zk, the backend's own,
# stays), the contract on the Redis deployments (their integration tests;
# conformance/redis stays), the CLI on each deployment (the same CLI code as
# on one server; the backends' code in their integration tests). The ASan
# stage keeps both CPUs busy (ASan's process starts and leak checks): what
# it leaves out is CI time saved one for one.
# The TSan stage runs beside the ASan stage (two at a time; its report
# follows the ASan stage's): their tests' waits overlap, though together
# they keep the two CPUs busy.
TSAN_OPTIONS="halt_on_error=1 second_deadly_signal=1" \
  run_ctest "ThreadSanitizer" "$B/tsan" -j 2 "${TSAN_TESTS[@]}" >/dev/null &
tsan_pid=$!
# libFuzzer (fuzz/run.sh, clang, ASan+UBSan) is CPU-bound for a fixed time
# per target: it runs beside these two stages at the lowest CPU priority and
# takes their idle CPU (fewer runs on a busy machine, the same wall time).
fuzz_start=$SECONDS
flog=$(mktemp)
(
  renice -n 19 -p $BASHPID >/dev/null
  DLOCK_FUZZ_BUILD=$B/fuzz bash "$DLOCK_ROOT/fuzz/run.sh" "${DLOCK_FUZZ_TIME:-20}" >"$flog" 2>&1
  echo "=== libFuzzer finished after $((SECONDS - fuzz_start)) s" >>"$flog"
) &
fuzz_pid=$!
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite "AddressSanitizer + UBSan" "$B/asan" -j 4 "${ASAN_TESTS[@]}"
start=$SECONDS
wait "$tsan_pid"
echo "=== ThreadSanitizer (beside the ASan+UBSan stage; waited $((SECONDS - start)) s more)"
grep -E "$PROGRESS" "$(suite_log ThreadSanitizer "$B/tsan")"
report_suite "ThreadSanitizer" "$B/tsan"
# Valgrind slows everything ~20x: timing bounds in the tests scale with this.
# test_deadline, test_sched and test_watchdog wait out leases and ticks (90,
# 75 and about 50 s under valgrind): they run in the three other builds.
# Valgrind needs no build of its own: ctest's memcheck runs the plain build's
# programs (optimised, with debug information) under it, each with its own
# report in Testing/Temporary/MemoryChecker.<test number>.log (an error fails
# the test: --error-exitcode). Here each report's errors and definite leaks
# with their stacks; a test that failed also leaks what it had not freed.
VALGRIND_OPTIONS="--quiet --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --trace-children=no"
rm -f "$B/plain"/Testing/Temporary/MemoryChecker.*.log
DLOCK_TEST_TIME_FACTOR=8 run_suite "valgrind memcheck" "$B/plain" -T memcheck -j 2 "${VALGRIND_TESTS[@]}" \
  --overwrite "MemoryCheckCommand=$(command -v valgrind)" --overwrite "MemoryCheckCommandOptions=$VALGRIND_OPTIONS"
for f in "$B/plain"/Testing/Temporary/MemoryChecker.*.log; do
  [ -s "$f" ] || continue
  echo "--- valgrind's report (whole: $f):"
  grep -E -A 14 'definitely lost|Invalid|uninitialised|Mismatched|overlap|Syscall param|unaddressable' "$f" | head -n 150
done

# libFuzzer ran beside the ASan+UBSan and TSan stages (above).
start=$SECONDS
wait "$fuzz_pid"
echo "=== libFuzzer (clang, ASan+UBSan), ${DLOCK_FUZZ_TIME:-20} s per target, beside the sanitizer stages (waited $((SECONDS - start)) s more)"
cat "$flog"
fline=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' "$flog" | tail -n 1)
if [ -z "$fline" ]; then
  echo "dlock: the fuzz suite ran no target" >&2
  failed=$((failed + 1))
  status=1
else
  fp=$(echo "$fline" | sed -E 's/^fuzz: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
  ff=$(echo "$fline" | sed -E 's/^fuzz: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
  passed=$((passed + fp))
  failed=$((failed + ff))
  [ "$ff" -eq 0 ] || status=1
fi
stage_times+=", fuzz $(sed -nE 's/^=== libFuzzer finished after ([0-9]+ s)/\1/p' "$flog" | head -n 1) (beside the sanitizer stages; waited $((SECONDS - start)) s more)"
rm -f "$flog"
echo "=== stage times: $stage_times; whole run $SECONDS s"
echo "$passed passed, $failed failed"
exit $status
