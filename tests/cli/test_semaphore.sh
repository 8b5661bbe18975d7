# test_semaphore.sh - "dlock run --limit N" against a real redis-server: at
# most N commands at once (and N reached), DLOCK_KIND and DLOCK_PERMIT in the
# child's environment, busy and limit-mismatch exits, one kind per name,
# status of a semaphore, nothing left behind.
. "$DLOCK_TEST_LIB"
start_redis

# ---- at most N at once ----

mkdir "$TEST_DIR/in"
# Each run marks itself inside, notes how many it sees inside, stays a while.
body='touch "$1/in/$$"; ls "$1/in" | wc -l >>"$1/seen"; sleep 0.4; rm "$1/in/$$"'
pids=""
for i in 1 2 3 4 5 6; do
  "$DLOCK" run --limit 2 --wait 60s pool -- sh -c "$body" sh "$TEST_DIR" &
  pids="$pids $!"
  bg_track $!
done
codes=""
for p in $pids; do
  wait_exit "$p" 90
  codes="$codes$EXIT_CODE "
done
assert_eq "6 concurrent 'dlock run --limit 2' all exit 0" "$codes" "0 0 0 0 0 0 "
assert_eq "each run saw at most 2 inside" "$(sort -n "$TEST_DIR/seen" | tail -1)" 2
assert_eq "6 runs noted what they saw" "$(wc -l <"$TEST_DIR/seen" | tr -d ' ')" 6
check "the semaphore's keys are gone after the runs" key_gone pool
check "... and its metadata" key_gone "{pool}:meta"

# ---- environment ----

out=$("$DLOCK" run --limit 3 envsem -- sh -c 'echo "$DLOCK_KIND|$DLOCK_PERMIT|$DLOCK_FENCE"')
assert_match "a permit's child sees DLOCK_KIND=semaphore and DLOCK_PERMIT (its fence)" "$out" \
  '^semaphore\|[0-9]+\|[0-9]+$'
permit=${out#semaphore|}
assert_eq "DLOCK_PERMIT is the fence" "${permit%%|*}" "${permit#*|}"
out=$(DLOCK_KIND=semaphore DLOCK_PERMIT=5 "$DLOCK" run envmutex -- sh -c 'echo "$DLOCK_KIND|$DLOCK_PERMIT|"')
assert_eq "a mutex's child sees DLOCK_KIND=mutex and an empty DLOCK_PERMIT" "$out" "mutex||"

# ---- busy, limits, kinds ----

"$DLOCK" run --limit 2 busy -- sleep 30 &
H1=$!
bg_track $H1
"$DLOCK" run --limit 2 busy -- sleep 30 &
H2=$!
bg_track $H2
wait_for 10 sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $REDIS_PORT ZCARD busy)\" = 2 ]"
assert_eq "two permits of 'busy' are held" "$(rcli ZCARD busy)" 2
out=$("$DLOCK" run --limit 2 --wait 0 busy -- true 2>&1)
assert_eq "a third run with --wait 0 exits 75" "$?" 75
assert_match "... saying all permits are held" "$out" "all 2 permits of 'busy' are held"
out=$("$DLOCK" run --limit 3 --wait 0 busy -- true 2>&1)
assert_eq "another limit exits 64" "$?" 64
assert_match "... naming both limits" "$out" "has the limit 2 .*asked for 3 permits"
out=$("$DLOCK" run --wait 0 busy -- true 2>&1)
assert_eq "a mutex on a semaphore's name exits 64" "$?" 64
assert_match "... saying it is a semaphore" "$out" "is a semaphore, not a mutex"
# Issue 27 items 6 and 11: the first line names the kind, in the user's words.
assert_match "... on its first line" "$(printf '%s\n' "$out" | head -n 1)" \
  "^dlock: acquiring 'busy': the name is a semaphore, not a mutex$"
check "... and names no C function" sh -c "! printf '%s' '$out' | grep -q 'dlock_[a-z]*_'"
out=$("$DLOCK" status busy)
assert_match "status shows the permits" "$out" "permits:  2 of 2 held, 0 free"
out=$("$DLOCK" status --json busy)
assert_match "status --json shows the permits" "$out" '"kind": "semaphore", "permits": 2, "permits_used": 2'
out=$("$DLOCK" list)
assert_match "list names the semaphore" "$out" "^busy$"
out=$("$DLOCK" release --force busy 2>&1)
assert_eq "release --force of a semaphore exits 64" "$?" 64
assert_match "... saying it is a semaphore and nothing was deleted" "$out" "it is a semaphore.*nothing was deleted"
assert_eq "... and both permits are still held" "$(rcli ZCARD busy)" 2
kill -TERM $H1 $H2
wait_exit $H1 20
wait_exit $H2 20
check "the permits are given back when the runs end" key_gone busy

"$DLOCK" run mutexname -- sleep 30 &
H3=$!
bg_track $H3
wait_for 10 key_exists mutexname
out=$("$DLOCK" run --limit 2 --wait 0 mutexname -- true 2>&1)
assert_eq "--limit on a mutex's name exits 64" "$?" 64
assert_match "... saying it is a mutex" "$out" "is a mutex"
kill -TERM $H3
wait_exit $H3 20

usage_error "--limit 0" "limit" run --limit 0 x -- true
usage_error "--limit not a number" "limit" run --limit many x -- true

finish
