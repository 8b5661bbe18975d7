# test_run.sh - "dlock run" against a real redis-server: mutual exclusion of
# 8 processes, busy exits (75, -E), exit statuses and signal deaths passed
# through, the child's environment, --shell, arguments and stdin passed
# unchanged, the lock released afterwards, and leftover processes stopped.
. "$DLOCK_TEST_LIB"
start_redis

# ---- mutual exclusion ----

# Read, sleep, write: without a lock, concurrent runs lose increments.
incr='n=$(cat "$1"); sleep 0.1; echo $((n + 1)) >"$1"'
race_control 8 1

echo 0 >"$TEST_DIR/counter"
pids=""
for i in 1 2 3 4 5 6 7 8; do
  "$DLOCK" run --wait 60s counter -- sh -c "for k in 1 2 3; do $incr; done" sh \
    "$TEST_DIR/counter" &
  pids="$pids $!"
  bg_track $!
done
codes=""
for p in $pids; do
  wait_exit "$p" 90
  codes="$codes$EXIT_CODE "
done
assert_eq "8 concurrent 'dlock run' all exit 0" "$codes" "0 0 0 0 0 0 0 0 "
assert_eq "8 x 3 locked read-sleep-write increments end exact" "$(cat "$TEST_DIR/counter")" 24
check "the lock key is gone after the runs" key_gone counter

# ---- exit statuses ----

"$DLOCK" run name -- true
assert_eq "exit 0 passes through" "$?" 0
"$DLOCK" run name -- sh -c 'exit 3'
assert_eq "exit 3 passes through" "$?" 3
"$DLOCK" run name -- sh -c 'exit 255'
assert_eq "exit 255 passes through" "$?" 255
"$DLOCK" run name -- sh -c 'kill -KILL $$'
assert_eq "a child killed by SIGKILL gives 137" "$?" 137
"$DLOCK" run name -- sh -c 'kill -TERM $$'
assert_eq "a child killed by SIGTERM gives 143" "$?" 143
check "the lock is free after a child died by signal" key_gone name

# ---- busy ----

"$DLOCK" run holder -- sh -c "echo \$\$ >'$TEST_DIR/holder.pid'; exec sleep 600" &
HOLDER=$!
bg_track $HOLDER
check "holder took the lock" wait_for 10 key_exists holder
"$DLOCK" run --wait 0 holder -- touch "$TEST_DIR/ran" 2>"$TEST_DIR/err"
assert_eq "--wait 0 exits 75 while the lock is held" "$?" 75
assert_match "busy names the holder: pid, host, command, since, lease left" "$(cat "$TEST_DIR/err")" \
  "^dlock: 'holder' is held by pid $HOLDER on [^ ]+ user [^ ]+, command: sh -c .*sleep 600.*; since [0-9.]+m?s ago; lease [0-9.]+s left$"
"$DLOCK" run -q --wait 0 holder -- true 2>"$TEST_DIR/err"
assert_eq "-q: busy still exits 75" "$?" 75
assert_eq "-q: busy prints nothing" "$(cat "$TEST_DIR/err")" ""
"$DLOCK" run --wait 0 --conflict-exit-code 9 holder -- true 2>/dev/null
assert_eq "--conflict-exit-code 9" "$?" 9
"$DLOCK" run -w0 -E0 holder -- true 2>/dev/null
assert_eq "-E0 (short options, glued values)" "$?" 0
start=$(date +%s%N)
"$DLOCK" run --wait 700ms holder -- true 2>/dev/null
rc=$?
elapsed=$((($(date +%s%N) - start) / 1000000))
assert_eq "--wait 700ms exits 75" "$rc" 75
check "--wait 700ms waited at least 700ms (took ${elapsed}ms)" test "$elapsed" -ge 650
check "busy runs did not run their command" test ! -e "$TEST_DIR/ran"

# A waiter gets the lock when the holder ends.
"$DLOCK" run --wait 60s holder -- sh -c "echo got >'$TEST_DIR/waited'" &
WAITER=$!
bg_track $WAITER
sleep 0.5
kill -TERM "$HOLDER"
wait_exit "$HOLDER" 15
assert_eq "holder stopped by SIGTERM exits 143" "$EXIT_CODE" 143
wait_exit "$WAITER" 30
assert_eq "the waiter runs once the holder is gone" "$EXIT_CODE:$(cat "$TEST_DIR/waited" 2>/dev/null)" "0:got"

# ---- what the child gets ----

out=$("$DLOCK" run -v envlock -- sh -c 'echo "$DLOCK_NAME|$DLOCK_FENCE|$DLOCK_URL"' 2>"$TEST_DIR/err")
assert_match "child sees DLOCK_NAME, DLOCK_FENCE, DLOCK_URL" "$out" "^envlock\|[0-9]+\|redis://127.0.0.1:$REDIS_PORT\$"
fence=$(printf '%s' "$out" | cut -d'|' -f2)
assert_match "-v reports the wait and the same fence" "$(cat "$TEST_DIR/err")" \
  "acquired 'envlock' after [0-9.]+m?s, fence $fence"
out=$(DLOCK_NAME=bogus DLOCK_FENCE=7 "$DLOCK" run envlock -- sh -c 'echo "$DLOCK_NAME $DLOCK_FENCE"')
assert_match "inherited DLOCK_* values are replaced" "$out" '^envlock [0-9]+$'
out=$("$DLOCK" run --url "$DLOCK_URL" envlock -- sh -c 'echo $DLOCK_URL' </dev/null)
assert_eq "--url is passed on as DLOCK_URL" "$out" "$DLOCK_URL"
out=$("$DLOCK" run args -- printf '%s|' 'a b' '$HOME' '' '--wait' 2>&1)
assert_eq "arguments pass unchanged, no shell" "$out" 'a b|$HOME||--wait|'
out=$("$DLOCK" run --shell args -- 'echo abc | tr b x')
assert_eq "--shell runs the string with /bin/sh -c" "$out" "axc"
out=$(echo piped | "$DLOCK" run args -- cat)
assert_eq "stdin passes through" "$out" "piped"
out=$("$DLOCK" run args -- sh -c 'ps -o pgid= -p $$ | tr -d " "; echo $$')
assert_eq "the child leads its own process group" "$(echo "$out" | sed -n 1p)" "$(echo "$out" | sed -n 2p)"
fds=$("$DLOCK" run fds -- sh -c 'ls -l /proc/$$/fd' | grep -E 'socket:|anon_inode:' || true)
assert_eq "no socket, eventfd or signalfd of dlock leaks into the command" "$fds" ""
printf '#!/bin/sh\necho script-ran\n' >"$TEST_DIR/script.sh"
printf 'echo no-shebang-ran\n' >"$TEST_DIR/noshebang.sh"
chmod +x "$TEST_DIR/script.sh" "$TEST_DIR/noshebang.sh"
assert_eq "a script runs" "$("$DLOCK" run s -- "$TEST_DIR/script.sh")" "script-ran"
assert_eq "a script without #! runs with /bin/sh, as in a shell" \
  "$("$DLOCK" run s -- "$TEST_DIR/noshebang.sh")" "no-shebang-ran"
out=$(cd "$TEST_DIR" && PATH="$TEST_DIR:$PATH" "$DLOCK" run s -- script.sh)
assert_eq "the command is looked up in PATH" "$out" "script-ran"

# ---- no orphans ----

"$DLOCK" run orphans --grace 2s -- sh -c "sleep 600 & echo \$! >'$TEST_DIR/gc.pid'; exit 5" \
  2>"$TEST_DIR/err"
rc=$?
assert_eq "child's status kept when it leaves a process behind" "$rc" 5
check "the left-behind grandchild was stopped" pid_gone "$(cat "$TEST_DIR/gc.pid")"
assert_match "dlock says it stopped leftovers" "$(cat "$TEST_DIR/err")" "left processes in its group"
"$DLOCK" run orphans --grace 1s -- sh -c "sh -c 'trap \"\" TERM; sleep 600' & echo \$! >'$TEST_DIR/gc2.pid'; sleep 0.3; exit 0" \
  2>/dev/null
assert_eq "exit status kept when a leftover ignores SIGTERM" "$?" 0
check "a leftover that ignores SIGTERM gets SIGKILL after --grace" pid_gone "$(cat "$TEST_DIR/gc2.pid")"
check "the lock is free after leftovers are gone" key_gone orphans

finish
