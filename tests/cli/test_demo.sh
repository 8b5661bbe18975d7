# test_demo.sh - "dlock demo": with no Redis configured it starts and stops
# its own redis-server, finishes well under a minute, and reports an exact
# count with the lock, a rejected zombie write and a job on 3 scheduler
# nodes that runs each tick once; with --url it uses the given server;
# interrupted, it still stops its server.
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
assert_match "demo summary: the job ran once per tick on 3 nodes" "$out" \
  "job on 3 nodes, 5 ticks +15 runs \(3 per tick\) +5 runs, once per tick"
# One table row per tick: the node that ran it, its fence, the two that skipped it.
rows=$(printf '%s\n' "$out" | grep -E '^   [0-9]{2}:[0-9]{2}:[0-9]{2} +node-[123] +[0-9]+ +node-[123], node-[123]$')
assert_eq "demo scheduler table: 5 ticks, each ran on one node, skipped by two" \
  "$(printf '%s\n' "$rows" | grep -c .)" 5
assert_eq "demo scheduler table: no node both ran and skipped a tick" \
  "$(printf '%s\n' "$rows" | awk '{ if (index($4 $5, $2)) print }')" ""
assert_eq "demo scheduler table: ticks 1 s apart" \
  "$(printf '%s\n' "$rows" | awk '{ split($1, t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3]; if (NR > 1 && (s - p + 86400) % 86400 != 1) print; p = s }')" ""
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
assert_match "demo --url: the job ran once per tick" "$(cat "$TEST_DIR/out")" "5 runs, once per tick"
assert_eq "demo --url left no lock held" "$("$DLOCK" list 'dlock-demo:*')" ""

# No redis-server on PATH: a clear error, exit 69.
mkdir "$TEST_DIR/emptybin"
env -u DLOCK_URL PATH="$TEST_DIR/emptybin" "$DLOCK" demo >/dev/null 2>"$TEST_DIR/err"
assert_eq "demo without redis-server on PATH exits 69" "$?" 69
assert_match "demo without redis-server says what is missing" "$(cat "$TEST_DIR/err")" \
  "redis-server is not on PATH"

finish
