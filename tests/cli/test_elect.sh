# test_elect.sh - "dlock elect NAME -- CMD" and "dlock leader NAME": CMD runs
# only while its host leads, with its epoch and value in the environment and
# an --active-file; SIGTERM to the leader's dlock resigns and a standby leads
# at once; --evict forces the leader out (its CMD gets SIGTERM, dlock exits
# 79); "leader" answers once (--json, --am-i) or watches every change.
. "$DLOCK_TEST_LIB"
start_redis

# A command that records its environment and the SIGTERM it gets.
leader_cmd() { # leader_cmd TAG
  cat <<SH
trap 'echo term >"$TEST_DIR/$1.term"; exit 0' TERM
echo "\$DLOCK_LEADER_EPOCH \$DLOCK_LEADER_VALUE" >"$TEST_DIR/$1.env"
while :; do sleep 0.1; done
SH
}

"$DLOCK" leader E >"$TEST_DIR/out"
assert_eq "no leader: exit 3" "$?" 3
assert_eq "no leader: said so" "$(cat "$TEST_DIR/out")" "E: no leader"

"$DLOCK" leader E --watch --interval 50ms >"$TEST_DIR/watch" 2>"$TEST_DIR/watch.err" &
W=$!
bg_track $W
check "--watch prints the state found at the start" wait_for 10 file_has "$TEST_DIR/watch"

"$DLOCK" elect --lease 2s --value node-a --active-file "$TEST_DIR/a.active" E -- sh -c "$(leader_cmd a)" \
  2>"$TEST_DIR/a.err" &
A=$!
bg_track $A
check "the first candidate's CMD runs" wait_for 10 file_has "$TEST_DIR/a.env"
read -r epoch_a value_a <"$TEST_DIR/a.env"
assert_eq "CMD gets DLOCK_LEADER_VALUE" "$value_a" node-a
assert_match "CMD gets DLOCK_LEADER_EPOCH" "$epoch_a" '^[1-9][0-9]*$'
assert_eq "--active-file says epoch and value" "$(cat "$TEST_DIR/a.active")" "$epoch_a node-a"

"$DLOCK" leader E >"$TEST_DIR/out"
assert_eq "a leader: exit 0" "$?" 0
assert_match "leader names the value and epoch" "$(cat "$TEST_DIR/out")" "E: led by 'node-a', epoch $epoch_a, since "
"$DLOCK" leader E --json >"$TEST_DIR/out"
check "--json is JSON" is_json <"$TEST_DIR/out"
assert_match "--json has the epoch" "$(cat "$TEST_DIR/out")" "\"leader\":\"node-a\",\"epoch\":$epoch_a,"
"$DLOCK" leader E --am-i --value node-a >"$TEST_DIR/out"
assert_eq "--am-i: this host leads, exit 0" "$?" 0
assert_eq "--am-i prints nothing" "$(cat "$TEST_DIR/out")" ""
"$DLOCK" leader E --am-i --value node-b
assert_eq "--am-i: another leads, exit 1" "$?" 1

"$DLOCK" elect --lease 2s --value node-b E -- sh -c "$(leader_cmd b)" 2>"$TEST_DIR/b.err" &
B=$!
bg_track $B
check "the standby waits in line" wait_for 10 sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $REDIS_PORT ZCARD '{E}:queue')\" = 1 ]"
check "the standby's CMD does not run" sh -c "[ ! -e '$TEST_DIR/b.env' ]"
"$DLOCK" elect --resign --value node-b E 2>"$TEST_DIR/out"
assert_eq "--resign of another host's leadership is refused (exit 1)" "$?" 1
assert_match "--resign says who leads" "$(cat "$TEST_DIR/out")" "led by 'node-a', not by 'node-b'"

# SIGTERM to the leader's dlock: CMD ends, dlock resigns, the standby leads at once.
t0=$(date +%s%N)
kill -TERM $A
wait_exit $A 20
assert_eq "the resigned leader exits with CMD's status" "$EXIT_CODE" 0
check "its CMD got SIGTERM" file_has "$TEST_DIR/a.term"
check "its --active-file is gone" sh -c "[ ! -e '$TEST_DIR/a.active' ]"
check "the standby leads" wait_for 5 file_has "$TEST_DIR/b.env"
t1=$(date +%s%N)
took=$(((t1 - t0) / 1000000))
echo "       (hand-off after SIGTERM: $took ms, including CMD's exit)"
check "the hand-off does not wait for the lease" [ "$took" -lt 1900 ]
read -r epoch_b value_b <"$TEST_DIR/b.env"
check "the new epoch is higher" [ "$epoch_b" -gt "$epoch_a" ]

# --evict: whoever leads is out; its dlock stops CMD and exits 79.
"$DLOCK" elect --evict E 2>"$TEST_DIR/out"
assert_eq "--evict exits 0" "$?" 0
wait_exit $B 20
assert_eq "the evicted leader's dlock exits 79" "$EXIT_CODE" 79
check "the evicted leader's CMD got SIGTERM" file_has "$TEST_DIR/b.term"
assert_match "it says it lost the leadership" "$(cat "$TEST_DIR/b.err")" "leadership of 'E' lost"
"$DLOCK" elect --evict E 2>/dev/null
assert_eq "--evict without a leader: exit 3" "$?" 3

# The watch saw: no leader, node-a, node-b, no leader - in order, epochs rising.
check "--watch saw the last change" wait_for 10 sh -c "[ \$(wc -l <'$TEST_DIR/watch') -ge 4 ]"
kill -TERM $W
wait_exit $W 10
assert_eq "--watch ends with exit 0 on SIGTERM" "$EXIT_CODE" 0
got=$(sed -E 's/, since .*//' "$TEST_DIR/watch" | tr '\n' '|')
assert_eq "--watch: every change, in order" "$got" \
  "E: no leader|E: led by 'node-a', epoch $epoch_a|E: led by 'node-b', epoch $epoch_b|E: no leader|"

# --on-elected / --on-lost: a long-lived command, told; on loss dlock stands again.
told_cmd() {
  cat <<SH
trap 'echo elected >>"$TEST_DIR/told.log"' USR1
trap 'echo lost >>"$TEST_DIR/told.log"' USR2
trap 'exit 7' TERM
echo "\$DLOCK_LEADER_EPOCH" >"$TEST_DIR/told.env"
while :; do sleep 0.1; done
SH
}
"$DLOCK" elect --lease 2s --on-elected USR1 --on-lost USR2 --active-file "$TEST_DIR/t.active" T -- \
  sh -c "$(told_cmd)" 2>"$TEST_DIR/t.err" &
T=$!
bg_track $T
check "told: COMMAND starts as a standby with epoch 0" wait_for 10 sh -c "[ \"\$(cat '$TEST_DIR/told.env' 2>/dev/null)\" = 0 ]"
check "told: COMMAND gets --on-elected" wait_for 10 sh -c "grep -q elected '$TEST_DIR/told.log' 2>/dev/null"
read -r t_epoch1 _ <"$TEST_DIR/t.active"
"$DLOCK" elect --evict T 2>/dev/null
# USR2 then USR1, sent a moment apart (dlock stands again at once), may
# both be pending when sh wakes from its sleep, and sh runs the traps of
# pending signals in signal-number order: the log has one of each, in
# either order (dlock sends USR2 on the loss before it stands again).
check "told: COMMAND gets --on-lost, then --on-elected again" wait_for 20 sh -c \
  "[ \"\$(sort '$TEST_DIR/told.log' | tr '\n' ' ')\" = 'elected elected lost ' ]"
check "told: the active file comes back" wait_for 10 file_has "$TEST_DIR/t.active"
read -r t_epoch2 _ <"$TEST_DIR/t.active"
check "told: the new term has a higher epoch" [ "$t_epoch2" -gt "$t_epoch1" ]
check "told: dlock still runs" pid_alive $T
kill -TERM $T
wait_exit $T 20
assert_eq "told: dlock exits with COMMAND's status" "$EXIT_CODE" 7
"$DLOCK" leader T >/dev/null
assert_eq "told: it resigned on the way out" "$?" 3
usage_error "--on-elected needs a signal" "is not a signal" elect --on-elected NOPE T -- true

usage_error "elect without a name" "missing election NAME" elect
usage_error "elect without a command" "missing COMMAND" elect E
usage_error "--evict with a command" "take an election NAME and no COMMAND" elect --evict E -- true
usage_error "leader without a name" "missing election NAME" leader

finish
