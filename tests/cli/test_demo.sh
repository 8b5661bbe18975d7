# test_demo.sh - "dlock demo": with no Redis configured it starts and stops
# its own redis-server, finishes well under a minute, and reports an exact
# count with the lock and a rejected zombie write; with --url it uses the
# given server; interrupted, it still stops its server.
. "$DLOCK_TEST_LIB"

mkdir "$TEST_DIR/tmp"
demo_servers() { # redis-servers started by a demo under our TMPDIR
  ps -eo args= | grep "redis-server" | grep -c "$TEST_DIR/tmp"
}
no_demo_servers() {
  [ "$(demo_servers)" = 0 ]
}

start=$(date +%s)
TMPDIR="$TEST_DIR/tmp" timeout 90 "$DLOCK" demo >"$TEST_DIR/out" 2>"$TEST_DIR/err"
rc=$?
elapsed=$(($(date +%s) - start))
assert_eq "demo with a private redis-server exits 0" "$rc" 0
check "demo finished in under a minute (${elapsed}s)" test "$elapsed" -lt 60
out=$(cat "$TEST_DIR/out")
assert_match "demo says it started a private redis-server" "$out" "private redis-server on 127.0.0.1:[0-9]+"
assert_match "demo summary: exact count with the lock" "$out" "stock, 500 deductions .*sold 400 of 400, exact"
assert_match "demo table: the locked row is exact" "$out" "dlock +400 +400 +0 +0 +0 +exact"
assert_match "demo summary: zombie write rejected" "$out" "zombie write after lease .*rejected by its fence"
assert_match "demo says the stock is in memory" "$out" "memory"
assert_match "demo mentions the scheduler as later work" "$out" "Scheduler.*later"
check "demo output fits 80 columns" sh -c "awk 'length(\$0) > 80 { exit 1 }' '$TEST_DIR/out'"
assert_eq "the private redis-server is gone" "$(demo_servers)" 0
assert_eq "its temporary directory is removed" "$(ls -A "$TEST_DIR/tmp")" ""
if [ "$rc" != 0 ]; then
  cat "$TEST_DIR/out" "$TEST_DIR/err"
fi

# Interrupted while it runs: the server is still stopped by PID.
TMPDIR="$TEST_DIR/tmp" env --default-signal=INT "$DLOCK" demo >"$TEST_DIR/out2" 2>&1 &
DEMO=$!
bg_track $DEMO
check "interrupted demo: its server came up" wait_for 20 grep -q "private redis-server" "$TEST_DIR/out2"
kill -INT "$DEMO"
wait_exit "$DEMO" 20
assert_eq "interrupted demo exits 130" "$EXIT_CODE" 130
check "interrupted demo: its redis-server is gone" wait_for 10 no_demo_servers
assert_eq "interrupted demo: its temporary directory is removed" "$(ls -A "$TEST_DIR/tmp")" ""

# With a server given, no private one is started.
start_redis
TMPDIR="$TEST_DIR/tmp" timeout 90 "$DLOCK" demo --url "$DLOCK_URL" >"$TEST_DIR/out" 2>&1
assert_eq "demo --url exits 0" "$?" 0
assert_match "demo --url uses the given server" "$(cat "$TEST_DIR/out")" "Redis: redis://127.0.0.1:$REDIS_PORT"
assert_match "demo --url: exact with the lock" "$(cat "$TEST_DIR/out")" "sold 400 of 400, exact"
assert_eq "demo --url left no lock held" "$("$DLOCK" list 'dlock-demo:*')" ""

# No redis-server on PATH: a clear error, exit 69.
mkdir "$TEST_DIR/emptybin"
env -u DLOCK_URL PATH="$TEST_DIR/emptybin" "$DLOCK" demo >/dev/null 2>"$TEST_DIR/err"
assert_eq "demo without redis-server on PATH exits 69" "$?" 69
assert_match "demo without redis-server says what is missing" "$(cat "$TEST_DIR/err")" \
  "redis-server is not on PATH"

finish
