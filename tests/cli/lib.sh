# lib.sh - shared helpers of the dlock command's shell tests.
#
# Sourced by tests/cli/test_*.sh (through $DLOCK_TEST_LIB). Gives each test a
# temporary directory, its own redis-server on a free loopback port (stopped
# by PID on every exit path), bounded waiting helpers and assertions that
# count, so that each script ends with "N passed, N failed".

set -u

: "${DLOCK_BIN:?DLOCK_BIN must point to the dlock binary}"
# Absolute, so that tests may cd.
DLOCK="$(cd "$(dirname "$DLOCK_BIN")" && pwd)/$(basename "$DLOCK_BIN")"
PASSED=0
FAILED=0
REDIS_PID=""
REDIS_PORT=""
# Processes a test started in the background, killed at exit (by PID).
BG_PIDS=""

TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-test.XXXXXX") || exit 1

# Background dlock runs get SIGTERM first, so that they stop their commands
# and release their locks; SIGKILL only for what is left after 10 s.
stop_bg() {
  local pid i
  for pid in $BG_PIDS; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in $BG_PIDS; do
    for i in $(seq 1 200); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
  done
  BG_PIDS=""
}

cleanup() {
  stop_bg
  if [ -n "$REDIS_PID" ]; then
    kill -TERM "$REDIS_PID" 2>/dev/null
    # Bounded: redis-server stops within milliseconds when it has nothing to save.
    local i
    for i in $(seq 1 100); do
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$REDIS_PID" 2>/dev/null
    REDIS_PID=""
  fi
  rm -rf "$TEST_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The lock name, DLOCK_URL and the settings a test gets must not come from
# the caller: no DLOCK_PREFIX, and config files only where the test puts them.
unset DLOCK_URL DLOCK_NAME DLOCK_FENCE DLOCK_PREFIX DLOCK_KIND DLOCK_PERMIT
export XDG_CONFIG_HOME="$TEST_DIR/xdg" DLOCK_SYSTEM_CONFIG="$TEST_DIR/system.conf"

# ---- Redis ----

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

rcli() {
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# Start redis-server in the test's directory; sets REDIS_PORT, REDIS_PID and
# exports DLOCK_URL. Retries on another port if the one chosen was taken.
start_redis() {
  local attempt i
  for attempt in 1 2 3; do
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$TEST_DIR" --daemonize no --logfile "$TEST_DIR/redis.log" \
      --enable-debug-command local >/dev/null 2>&1 &
    REDIS_PID=$!
    for i in $(seq 1 200); do
      if [ "$(rcli PING 2>/dev/null)" = "PONG" ]; then
        export DLOCK_URL="redis://127.0.0.1:$REDIS_PORT"
        return 0
      fi
      kill -0 "$REDIS_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$REDIS_PID" 2>/dev/null
    REDIS_PID=""
  done
  echo "could not start redis-server (log: $TEST_DIR/redis.log)" >&2
  cat "$TEST_DIR/redis.log" >&2 2>/dev/null
  exit 1
}

# ---- Waiting ----

# wait_for SECONDS COMMAND...: poll COMMAND every 50ms until it succeeds.
wait_for() {
  local limit=$1 i
  shift
  for i in $(seq 1 $((limit * 20))); do
    if "$@"; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

pid_alive() {
  kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != "Z" ]
}

pid_gone() {
  ! pid_alive "$1"
}

file_has() {
  [ -s "$1" ]
}

key_exists() {
  [ "$(rcli EXISTS "$1")" = "1" ]
}

key_gone() {
  [ "$(rcli EXISTS "$1")" = "0" ]
}

# wait_exit PID SECONDS: wait for a background job of this shell, bounded;
# sets EXIT_CODE (or 999 when it did not end in time).
wait_exit() {
  local pid=$1 limit=$2
  if wait_for "$limit" pid_gone "$pid"; then
    wait "$pid"
    EXIT_CODE=$?
  else
    EXIT_CODE=999
  fi
}

bg_track() {
  BG_PIDS="$BG_PIDS $1"
}

# ---- Assertions ----

pass() {
  PASSED=$((PASSED + 1))
  echo "ok   - $1"
}

fail() {
  FAILED=$((FAILED + 1))
  echo "FAIL - $1"
  shift
  local line
  for line in "$@"; do
    echo "       $line"
  done
}

# check "sentence" COMMAND...: passes when COMMAND succeeds.
check() {
  local what=$1
  shift
  if "$@"; then
    pass "$what"
  else
    fail "$what" "command failed: $*"
  fi
}

assert_eq() {
  if [ "$2" = "$3" ]; then
    pass "$1"
  else
    fail "$1" "expected: $3" "got:      $2"
  fi
}

assert_match() {
  if printf '%s' "$2" | grep -Eq -- "$3"; then
    pass "$1"
  else
    fail "$1" "expected to match: $3" "got: $2"
  fi
}

race_control() { # race_control PROCS ROUNDS: the control of a mutual exclusion test
  # PROCS shells, started together (a go file), each adding ROUNDS to a
  # counter by read, sleep, write, without a lock: updates must be lost, or
  # the locked run that follows would prove nothing.
  local procs=$1 rounds=$2 f=$TEST_DIR/unguarded go=$TEST_DIR/unguarded.go pids="" i
  echo 0 >"$f"
  rm -f "$go"
  for i in $(seq 1 "$procs"); do
    sh -c 'i=0; while [ ! -e "$2" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i + 1)); done
           for k in $(seq 1 "$3"); do n=$(cat "$1"); sleep 0.2; echo $((n + 1)) >"$1"; done' \
      sh "$f" "$go" "$rounds" &
    pids="$pids $!"
  done
  touch "$go"
  # shellcheck disable=SC2086 # a list of pids
  wait $pids
  local want=$((procs * rounds)) got
  got=$(cat "$f")
  if [ "$got" -lt "$want" ]; then
    pass "control: without a lock the counter loses updates ($got/$want)"
  else
    fail "control: without a lock the counter loses updates" "got $want/$want: the race did not show"
  fi
}

is_json() {
  python3 -c 'import json,sys; json.load(sys.stdin)'
}

# A usage error: exit 64 and exactly one line on stderr, matching PATTERN
# and pointing at the help.
usage_error() { # usage_error "what" PATTERN ARGS...
  local what=$1 pattern=$2 err rc lines
  shift 2
  "$DLOCK" "$@" >"$TEST_DIR/out" 2>"$TEST_DIR/err" </dev/null
  rc=$?
  err=$(cat "$TEST_DIR/err")
  lines=$(wc -l <"$TEST_DIR/err")
  if [ "$rc" = 64 ] && [ "$lines" = 1 ] && printf '%s' "$err" | grep -Eq -- "$pattern" &&
     printf '%s' "$err" | grep -q "see 'dlock"; then
    pass "$what"
  else
    fail "$what" "exit $rc (want 64), $lines stderr lines (want 1)" "stderr: $err"
  fi
}

# ---- Watchers (dlock status --watch, dlock list --watch) ----

# The lines a watcher wrote are read in order: each expect_line looks for the
# next line matching after the one the last expect_line found.
WOUT=""
W_LAST=0
watch_start() { # watch_start OUTFILE ARGS...: a watcher in the background
  WOUT=$1
  W_LAST=0
  shift
  "$DLOCK" "$@" >"$WOUT" 2>"$WOUT.err" &
  W_PID=$!
  bg_track $W_PID
}
expect_line() { # expect_line "what" PATTERN [SECONDS]
  local what=$1 pat=$2 limit=${3:-5} i n
  for i in $(seq 1 $((limit * 20))); do
    n=$(tail -n +$((W_LAST + 1)) "$WOUT" | grep -n -E -m1 -- "$pat" | cut -d: -f1)
    if [ -n "$n" ]; then
      W_LAST=$((W_LAST + n))
      pass "$what"
      return 0
    fi
    sleep 0.05
  done
  fail "$what" "no line matching '$pat' after line $W_LAST within $limit s" "output:" "$(cat "$WOUT")" \
    "stderr: $(cat "$WOUT.err")"
  return 1
}
# watch_stop: SIGTERM ends a watcher with exit 0.
watch_stop() { # watch_stop "what" [SIGNAL]
  kill -"${2:-TERM}" "$W_PID" 2>/dev/null
  wait_exit "$W_PID" 10
  assert_eq "$1" "$EXIT_CODE" 0
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  if [ "$FAILED" -ne 0 ] || [ "$PASSED" -eq 0 ]; then
    exit 1
  fi
  exit 0
}

# job_ops_notified "backend" [--url URL]: dlock job on a backend other than
# Redis (tests/cli/test_job.sh has the whole story on Redis): a trigger
# reaches a node whose next tick is an hour away within 5 s (the backend's
# notification: no tick claim could tell of it), exactly once; pause and
# resume say what they did, and list shows the job.
job_ops_notified() {
  local what=$1 runs="$TEST_DIR/hourly.$1" pid out
  shift
  "$DLOCK" every 1h --name hourly --node hourly-node "$@" -- sh -c "echo run >> '$runs'" \
    2>"$TEST_DIR/hourly.$what.log" &
  pid=$!
  bg_track $pid
  sleep 2 # listening (a trigger made before would run at its start: no race, but not the notification)
  out=$("$DLOCK" job trigger hourly "$@")
  assert_match "$what: job trigger says what it did" "$out" "job 'hourly' triggered"
  check "$what: a trigger reaches a node whose next tick is an hour away (within 5 s)" wait_for 5 file_has "$runs"
  sleep 1
  assert_eq "$what: the trigger ran exactly once" "$(wc -l <"$runs")" 1
  out=$("$DLOCK" job pause hourly --reason "maintenance" --by ops "$@")
  assert_match "$what: job pause says what it did" "$out" "job 'hourly' paused"
  out=$("$DLOCK" job list "$@")
  assert_match "$what: job list shows it paused, with who and why" "$out" "hourly +yes .*
  paused by ops: maintenance"
  out=$("$DLOCK" job history hourly "$@")
  assert_match "$what: job history has the manual run" "$out" "hourly-node .* ok \(manual\)"
  out=$("$DLOCK" job resume hourly "$@")
  assert_match "$what: job resume says what it did" "$out" "job 'hourly' resumed"
  kill -TERM "$pid"
  wait_exit "$pid" 15
  assert_eq "$what: the node exits 143 after SIGTERM" "$EXIT_CODE" 143
}
