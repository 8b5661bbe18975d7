# test_flock.sh - flock(1)'s habits in "dlock run" (-n, -w SECONDS, -E, -c
# COMMAND, COMMAND without '--', DLOCK_KIND), "dlock run --multi" (all or
# nothing: two runs naming {a,b,c} and {c,b,a} never deadlock nor overlap;
# a busy name leaves nothing held) and "dlock latch" against a real
# redis-server.
. "$DLOCK_TEST_LIB"
start_redis

# ---- a holder to be busy against ----

"$DLOCK" run held -- sleep 30 &
holder=$!
bg_track $holder
check "the holder has the lock" wait_for 10 key_exists held

# -n: try once. flock's order: options, NAME, COMMAND.
start=$(date +%s%N)
"$DLOCK" run -n held -- true 2>"$TEST_DIR/err"
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
assert_eq "-n on a busy lock exits 75" "$rc" 75
check "-n gives up at once (${took} ms)" test "$took" -lt 3000
"$DLOCK" run --nonblock held -- true 2>/dev/null
assert_eq "--nonblock on a busy lock exits 75" "$?" 75
"$DLOCK" run -n -E 3 held -- true 2>/dev/null
assert_eq "-n -E 3: flock's conflict exit code" "$?" 3

# -w SECONDS: a bare number counts seconds, fractions too.
start=$(date +%s%N)
"$DLOCK" run -w 1 held -- true 2>/dev/null
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
assert_eq "-w 1 on a busy lock exits 75" "$rc" 75
check "-w 1 waits about a second (${took} ms)" test "$took" -ge 900 -a "$took" -lt 10000
"$DLOCK" run -w 0.3 -E 4 held -- true 2>/dev/null
assert_eq "-w 0.3 -E 4" "$?" 4

# -c COMMAND: one string for the shell, after NAME as flock has it.
out=$("$DLOCK" run free -c 'echo "$DLOCK_NAME:$DLOCK_KIND" | tr a-z A-Z; exit 7')
rc=$?
assert_eq "-c runs the string with the shell" "$out" "FREE:MUTEX"
assert_eq "-c: the shell's exit status" "$rc" 7
out=$("$DLOCK" run -c 'echo before-name' free)
assert_eq "-c before NAME works too" "$out" "before-name"
"$DLOCK" run -n held -c 'echo ran' >"$TEST_DIR/out" 2>/dev/null
assert_eq "-n -c on a busy lock exits 75" "$?" 75
assert_eq "... without running the command" "$(cat "$TEST_DIR/out")" ""

# COMMAND without '--' when it does not start with '-': the rest is its own.
out=$("$DLOCK" run free echo -n hello -w 5)
assert_eq "NAME CMD ARGS without --: options after CMD are CMD's" "$out" "hello -w 5"
out=$("$DLOCK" run free sh -c 'echo "$DLOCK_KIND $DLOCK_FENCE"')
assert_match "DLOCK_KIND=mutex and a fence in the environment" "$out" "^mutex [0-9]+$"
check "the lock is released after the run" key_gone free

kill -TERM $holder
wait_exit $holder 20
check "holder gone" key_gone held

# ---- --multi ----

# Read, sleep, write under {a,b,c} and {c,b,a}: exact, no overlap, no deadlock.
incr='n=$(cat "$1"); sleep 0.02; echo $((n + 1)) >"$1"'
echo 0 >"$TEST_DIR/counter"
: >"$TEST_DIR/overlap"
body='if ! mkdir "$2/in" 2>/dev/null; then echo overlap >>"$2/overlap"; fi; '"$incr"'; rmdir "$2/in"'
run_many() { # run_many N ARGS...: N runs one after the other
  local n=$1 i
  shift
  for i in $(seq 1 "$n"); do
    "$DLOCK" run --wait 60s "$@" -- sh -c "$body" sh "$TEST_DIR/counter" "$TEST_DIR" || return 1
  done
}
run_many 25 --multi m:a,m:b,m:c &
p1=$!
bg_track $p1
run_many 25 --multi m:c --multi m:b,m:a &
p2=$!
bg_track $p2
wait_exit $p1 240
c1=$EXIT_CODE
wait_exit $p2 240
c2=$EXIT_CODE
assert_eq "two loops of 25 runs in opposite orders end (no deadlock)" "$c1 $c2" "0 0"
assert_eq "... and exact: 50 locked read-sleep-write increments" "$(cat "$TEST_DIR/counter")" 50
assert_eq "... and never inside together" "$(cat "$TEST_DIR/overlap")" ""
check "no name is left held" sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $REDIS_PORT EXISTS m:a m:b m:c)\" = 0 ]"

out=$("$DLOCK" run --multi x:2,x:1 -- sh -c 'echo "$DLOCK_KIND|$DLOCK_NAME|$DLOCK_FENCES|${DLOCK_FENCE-unset}"')
assert_match "--multi: DLOCK_KIND, DLOCK_NAME, one fence per name, no DLOCK_FENCE" "$out" \
  "^multi\|x:2,x:1\|x:2=[0-9]+,x:1=[0-9]+\|unset$"

# A busy name: the names before it are given back; the message names it.
"$DLOCK" run r:b -- sleep 30 &
holder=$!
bg_track $holder
check "r:b is held" wait_for 10 key_exists r:b
"$DLOCK" run -n --multi r:c,r:a,r:b -- sh -c 'echo ran' >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "--multi with a busy name exits 75" "$?" 75
assert_eq "... without running the command" "$(cat "$TEST_DIR/out")" ""
assert_match "... naming the busy name and what was given back" "$(cat "$TEST_DIR/err")" \
  "'r:b' \(2 of 3 in the taking order\).*released again: 'r:a'"
check "... and r:a is not left held" key_gone r:a
check "... nor r:c" key_gone r:c
kill -TERM $holder
wait_exit $holder 20

# ---- dlock latch ----

"$DLOCK" latch wait nolatch -w 1 2>"$TEST_DIR/err"
assert_eq "latch wait on a latch never set exits 79" "$?" 79
assert_match "... saying so" "$(cat "$TEST_DIR/err")" "never set, or its expiry passed"
out=$("$DLOCK" latch set job 3 --expire 1m)
assert_eq "latch set" "$?" 0
assert_match "... says the count" "$out" "set to 3"
"$DLOCK" latch set job 3 2>"$TEST_DIR/err"
assert_eq "latch set while counting exits 75" "$?" 75
"$DLOCK" latch wait job -w 0.3 2>/dev/null
assert_eq "latch wait -w 0.3 while counting exits 75" "$?" 75
"$DLOCK" latch wait job -w 30 >"$TEST_DIR/waited" &
waiter=$!
bg_track $waiter
sleep 0.3
check "the waiter still waits" pid_alive $waiter
assert_eq "latch down" "$("$DLOCK" latch down job)" "latch 'job': 2 left"
"$DLOCK" latch down job -q
assert_eq "latch count" "$("$DLOCK" latch count job)" 1
assert_match "status shows the latch's count and expiry" "$("$DLOCK" status job)" \
  "latch: +1 left to count down, expires in [0-9]"
assert_match "list shows the latch's name" "$("$DLOCK" list 'j*')" "^job$"
assert_match "list --json gives its count" "$("$DLOCK" list --json 'j*')" '"latch": \{"count": 1, "ttl_ms": [0-9]+\}'
check "the waiter still waits at 1" pid_alive $waiter
"$DLOCK" latch down job >/dev/null
wait_exit $waiter 10
assert_eq "the waiter wakes at zero and exits 0" "$EXIT_CODE" 0
assert_eq "... saying so" "$(cat "$TEST_DIR/waited")" "latch 'job' is open"
"$DLOCK" latch set short 2 --expire 300ms
"$DLOCK" latch wait short -w 20 2>"$TEST_DIR/err"
assert_eq "an abandoned latch expires: wait exits 79" "$?" 79

finish
