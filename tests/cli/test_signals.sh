# test_signals.sh - signals to "dlock run": SIGTERM while it waits for the
# lock (it stops waiting, exits 143, runs nothing and leaves the holder
# alone) and while the command runs (passed to the command's whole process
# group; child and grandchild gone, lock free); SIGINT and SIGHUP too.
. "$DLOCK_TEST_LIB"
start_redis

waiters_of() {
  "$DLOCK" status --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["waiters"])'
}
has_waiter() {
  [ "$(waiters_of "$1" 2>/dev/null)" -ge 1 ] 2>/dev/null
}

# ---- SIGTERM while waiting ----

"$DLOCK" run L -- sh -c "echo \$\$ >'$TEST_DIR/holder.pid'; exec sleep 600" &
HOLDER=$!
bg_track $HOLDER
check "holder took the lock" wait_for 10 key_exists L
token=$(rcli GET L)
"$DLOCK" run L -- touch "$TEST_DIR/ran" 2>"$TEST_DIR/err" &
WAITER=$!
bg_track $WAITER
# The waiter registers with the lock; fall back to a pause if it cannot be seen.
wait_for 10 has_waiter L || sleep 2
kill -TERM "$WAITER"
wait_exit "$WAITER" 15
assert_eq "SIGTERM while waiting: exit 143" "$EXIT_CODE" 143
check "SIGTERM while waiting: the command did not run" test ! -e "$TEST_DIR/ran"
assert_match "SIGTERM while waiting: says so" "$(cat "$TEST_DIR/err")" "SIGTERM while waiting for 'L'"
assert_eq "SIGTERM while waiting: the holder's key is untouched" "$(rcli GET L)" "$token"
check "SIGTERM while waiting: the holder still runs" pid_alive "$(cat "$TEST_DIR/holder.pid")"
check "SIGTERM while waiting: no waiter left registered" wait_for 10 sh -c "[ \"\$('$DLOCK' status --json L | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"waiters\"])')\" = 0 ]"

# ---- SIGTERM while the command runs ----

kill -TERM "$HOLDER"
wait_exit "$HOLDER" 15
assert_eq "SIGTERM to a holder whose command is 'sleep': exit 143" "$EXIT_CODE" 143
check "the holder's command is gone" pid_gone "$(cat "$TEST_DIR/holder.pid")"
check "the lock is free after SIGTERM" key_gone L

# A child with a grandchild in its group; neither handles SIGTERM.
rm -f "$TEST_DIR"/*.pid
"$DLOCK" run G -- sh -c "echo \$\$ >'$TEST_DIR/child.pid'; sleep 600 & echo \$! >'$TEST_DIR/gc.pid'; wait" &
DL=$!
bg_track $DL
check "child and grandchild started" wait_for 10 file_has "$TEST_DIR/gc.pid"
kill -TERM "$DL"
wait_exit "$DL" 15
assert_eq "SIGTERM while running: dlock exits as the child died (143)" "$EXIT_CODE" 143
check "SIGTERM while running: the child is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
check "SIGTERM while running: the grandchild is gone" pid_gone "$(cat "$TEST_DIR/gc.pid")"
check "SIGTERM while running: the lock is free" key_gone G
out=$("$DLOCK" status G)
assert_match "SIGTERM while running: dlock status says free" "$out" "state: +free"

# A child that handles SIGTERM and exits on its own terms.
rm -f "$TEST_DIR"/*.pid
"$DLOCK" run G -- sh -c "trap 'echo handled >\"$TEST_DIR/handled\"; exit 7' TERM; echo \$\$ >'$TEST_DIR/child.pid'; while :; do sleep 0.1; done" &
DL=$!
bg_track $DL
check "trapping child started" wait_for 10 file_has "$TEST_DIR/child.pid"
kill -TERM "$DL"
wait_exit "$DL" 15
assert_eq "a child that traps SIGTERM decides the exit status (7)" "$EXIT_CODE" 7
check "the child saw the forwarded SIGTERM" file_has "$TEST_DIR/handled"
check "the lock is free" key_gone G

# ---- SIGINT and SIGHUP ----

# Background jobs of a script start with SIGINT ignored (and dlock keeps an
# ignored signal ignored); env --default-signal gives it back.
for sig in INT HUP; do
  rm -f "$TEST_DIR"/*.pid
  env --default-signal=INT "$DLOCK" run S -- sh -c "echo \$\$ >'$TEST_DIR/child.pid'; exec sleep 600" &
  DL=$!
  bg_track $DL
  check "SIG$sig: child started" wait_for 10 file_has "$TEST_DIR/child.pid"
  kill -$sig "$DL"
  wait_exit "$DL" 15
  want=$((128 + $(kill -l $sig)))
  assert_eq "SIG$sig while running: exit $want" "$EXIT_CODE" "$want"
  check "SIG$sig while running: the child is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
  check "SIG$sig while running: the lock is free" key_gone S
done

# nohup: an ignored SIGHUP stays ignored, for dlock and the command.
rm -f "$TEST_DIR"/*.pid
nohup "$DLOCK" run S -- sh -c "echo \$\$ >'$TEST_DIR/child.pid'; sleep 1.5" >/dev/null 2>&1 &
DL=$!
bg_track $DL
check "nohup: child started" wait_for 10 file_has "$TEST_DIR/child.pid"
kill -HUP "$DL"
wait_exit "$DL" 15
assert_eq "nohup: SIGHUP is ignored, the command finishes (0)" "$EXIT_CODE" 0

# ---- two different signals at once: both reach the command ----

rm -f "$TEST_DIR"/*.pid "$TEST_DIR"/got.*
env --default-signal=INT "$DLOCK" run B -- sh -c "trap 'echo >\"$TEST_DIR/got.int\"' INT; trap 'echo >\"$TEST_DIR/got.term\"; exit 5' TERM; echo \$\$ >'$TEST_DIR/child.pid'; while :; do sleep 0.1; done" &
DL=$!
bg_track $DL
check "two signals: child started" wait_for 10 file_has "$TEST_DIR/child.pid"
kill -INT "$DL"; kill -TERM "$DL"
wait_exit "$DL" 15
check "two signals: the command got SIGINT" test -e "$TEST_DIR/got.int"
check "two signals: the command got SIGTERM" test -e "$TEST_DIR/got.term"

# ---- dlock killed with SIGKILL: its guardian stops the whole group ----

rm -f "$TEST_DIR"/*.pid
"$DLOCK" run --grace 1s K -- sh -c "sleep 600 & echo \$! >'$TEST_DIR/bg.pid'; sleep 600 & echo \$! >'$TEST_DIR/fg.pid'; wait" &
DL=$!
check "SIGKILL: the command's processes started" wait_for 10 file_has "$TEST_DIR/fg.pid"
kill -KILL "$DL"
wait "$DL" 2>/dev/null
check "SIGKILL to dlock: the command's background process is stopped" wait_for 10 pid_gone "$(cat "$TEST_DIR/bg.pid")"
check "SIGKILL to dlock: the command's foreground process is stopped" wait_for 10 pid_gone "$(cat "$TEST_DIR/fg.pid")"

finish
