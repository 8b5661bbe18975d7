# test_zk.sh - the dlock command on ZooKeeper (zk://) against a real server
# started by tests/zk_server_main.c: "dlock run" exclusion of 4 processes,
# status, list, release --force (the holder notices), --limit and -s/-x,
# doctor. Skips (77)
# when java or ZooKeeper is not installed.
. "$DLOCK_TEST_LIB"
: "${DLOCK_ZK_SERVER:?DLOCK_ZK_SERVER must point to the zk_server helper}"

"$DLOCK_ZK_SERVER" "$TEST_DIR/zk.addr" >"$TEST_DIR/zk.log" 2>&1 &
ZK_PID=$!
bg_track $ZK_PID
for i in $(seq 1 1200); do
  [ -s "$TEST_DIR/zk.addr" ] && break
  if ! kill -0 "$ZK_PID" 2>/dev/null; then
    wait "$ZK_PID"
    rc=$?
    cat "$TEST_DIR/zk.log"
    [ "$rc" = 77 ] && exit 77
    echo "the ZooKeeper server did not start"
    exit 1
  fi
  sleep 0.1
done
[ -s "$TEST_DIR/zk.addr" ] || { echo "the ZooKeeper server did not start in 120 s"; exit 1; }
export DLOCK_URL="zk://$(cat "$TEST_DIR/zk.addr")/clitest"

# ---- init (issue 23 item 2: the CLI does not guess what the backend made) ----

"$DLOCK" init >"$TEST_DIR/out" 2>&1
assert_eq "init on ZooKeeper exits 0" "$?" 0
assert_match "init on ZooKeeper says there is nothing to create" "$(cat "$TEST_DIR/out")" "nothing to create"
check "init on ZooKeeper speaks of no schema, tables or Redis keys" \
  sh -c "! grep -E -q -i 'schema|tables|redis' '$TEST_DIR/out'"

# ---- mutual exclusion ----

incr='n=$(cat "$1"); sleep 0.05; echo $((n + 1)) >"$1"'
race_control 4 3

echo 0 >"$TEST_DIR/counter"
pids=""
for i in 1 2 3 4; do
  # A 30 s session: this is about exclusion, and a JVM starved on a busy
  # machine (load 25) let 10 s sessions lapse (each run then stopped its
  # command, as it must; the loss is tested below and in test_lost).
  "$DLOCK" run --url "$DLOCK_URL?session_timeout=30s" --wait 120s counter -- \
    sh -c "for k in \$(seq 1 15); do $incr; done" sh "$TEST_DIR/counter" &
  pids="$pids $!"
  bg_track $!
done
codes=""
for p in $pids; do
  wait_exit "$p" 180
  codes="$codes$EXIT_CODE "
done
assert_eq "4 concurrent 'dlock run' on zk:// all exit 0" "$codes" "0 0 0 0 "
assert_eq "4 x 15 locked read-sleep-write increments end exact" "$(cat "$TEST_DIR/counter")" 60
assert_match "the fence reaches the command" "$("$DLOCK" run fenced -- sh -c 'echo $DLOCK_FENCE')" '^[1-9][0-9]*$'

# ---- status, list, release --force ----

out=$("$DLOCK" status counter)
assert_match "status of a free lock says free" "$out" "state: +free"
# A long session (30 s asked, 20 s granted by the test server's 200 ms
# ticks): the watchdog's next look is ~5 s after the acquire, so the holder
# exits within 2 s of the forced release only because its node's watch tells it.
"$DLOCK" run --url "$DLOCK_URL?session_timeout=30s" jobs/report -- sleep 600 &
H1=$!
bg_track $H1
check "the holder took its lock" wait_for 20 sh -c "[ \"\$('$DLOCK' list)\" = jobs/report ]"
out=$("$DLOCK" status jobs/report)
assert_match "status: held" "$out" "state: +held"
assert_match "status: the fence" "$out" "fence: +[1-9][0-9]*"
assert_match "status: holder pid" "$out" "holder: +pid $H1 "
"$DLOCK" run --wait 0 jobs/report -- true 2>/dev/null
assert_eq "a second run is busy (75)" "$?" 75
out=$("$DLOCK" release --force jobs/report)
assert_eq "release --force of a held lock" "$?:$out" "0:released 'jobs/report'"
check "its holder is told at once (gone within 2 s; its next look is ~5 s after the acquire)" wait_for 2 pid_gone "$H1"
wait_exit "$H1" 30
assert_eq "its holder notices and exits 79" "$EXIT_CODE" 79
out=$("$DLOCK" release --force jobs/report)
assert_eq "release --force of a free lock says so" "$?:$out" "0:'jobs/report' was not held"
assert_eq "list is empty again" "$("$DLOCK" list)" ""

# ---- semaphore (--limit) and read-write lock (-s/-x) ----

"$DLOCK" run --limit 2 pool -- sleep 600 &
S1=$!
bg_track $S1
"$DLOCK" run --limit 2 pool -- sleep 600 &
S2=$!
bg_track $S2
check "two holders take the two permits" wait_for 20 sh -c "'$DLOCK' status pool | grep -Eq 'permits: +2 of 2|2/2'"
"$DLOCK" run --limit 2 --wait 0 pool -- true 2>/dev/null
assert_eq "a third --limit 2 run is busy (75)" "$?" 75
out=$("$DLOCK" status pool)
assert_eq "status shows both permit holders (fence, pid), not the newest only" \
  "$(printf '%s\n' "$out" | grep -E "^  fence [0-9]+, lease [^:]+: pid ($S1|$S2) on " | wc -l)" 2
assert_eq "the child sees DLOCK_KIND" "$("$DLOCK" run --limit 3 other -- sh -c 'echo $DLOCK_KIND')" semaphore
kill $S1 $S2 2>/dev/null
wait_exit "$S1" 30
wait_exit "$S2" 30
"$DLOCK" run -s shared -- sleep 600 &
R1=$!
bg_track $R1
check "a shared holder took its side" wait_for 20 sh -c "'$DLOCK' status shared | grep -q reader"
"$DLOCK" run -s --wait 0 shared -- true
assert_eq "a second -s run shares (0)" "$?" 0
"$DLOCK" run -x --wait 0 shared -- true 2>/dev/null
assert_eq "an -x run is busy while a reader holds (75)" "$?" 75
kill $R1 2>/dev/null
wait_exit "$R1" 30

# ---- status --watch (issue 27 item 5): ZooKeeper's child watches ----

watch_start "$TEST_DIR/wz" status watched --watch
expect_line "zk watch: the first line is the state" "watched +free" 10
"$DLOCK" run watched -- sleep 4 >/dev/null 2>&1 &
WA=$!
bg_track $WA
expect_line "zk watch: an acquire is one line with its pid" "watched +acquired +fence [0-9]+ +pid $WA "
"$DLOCK" run -w 60 watched -- sleep 1 >/dev/null 2>&1 &
WB=$!
bg_track $WB
expect_line "zk watch: a new waiter is one line" "watched +waiter"
expect_line "zk watch: the release is one line" "watched +released +fence [0-9]+ +pid $WA " 10
expect_line "zk watch: the waiter's acquire follows" "watched +acquired +fence [0-9]+ +pid $WB "
wait_exit "$WB" 20
expect_line "zk watch: its release" "watched +released +fence [0-9]+ +pid $WB " 10
watch_stop "zk watch: SIGTERM ends it with exit 0"
wait_exit "$WA" 10

# ---- dlock job (docs/scheduler.md, "Operations"): a trigger heard by a watch ----

job_ops_notified "zk"

# ---- doctor, bad URLs ----

"$DLOCK" doctor >"$TEST_DIR/out" 2>&1
assert_eq "doctor on a live server exits 0" "$?" 0
port=$(free_port)
"$DLOCK" doctor --url "zk://127.0.0.1:$port/x?connect_timeout=1s" >"$TEST_DIR/out" 2>&1
rc=$?
check "doctor on an unreachable ensemble fails ($rc)" test "$rc" -ne 0
assert_match "it names the server" "$(cat "$TEST_DIR/out")" "127.0.0.1:$port"
"$DLOCK" run --url "zk://127.0.0.1:$port/a//b" x -- true 2>"$TEST_DIR/err"
check "a bad namespace fails" test "$?" -ne 0
assert_match "it names the path" "$(cat "$TEST_DIR/err")" "/a//b"

finish
