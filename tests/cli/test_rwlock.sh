# test_rwlock.sh - "dlock run -s/-x" (the sides of a read-write lock, as
# flock -s/-x) against a real redis-server: -s runs overlap, -x runs alone,
# a waiting -x holds back later -s runs, mixed -s/-x runs keep a counter
# that only -x runs write exact, DLOCK_KIND in the child, status shows the
# readers, a name is one kind, and -s with -x is a usage error.
. "$DLOCK_TEST_LIB"
start_redis

# ---- -s runs overlap ----
rm -f "$TEST_DIR/in"
for i in 1 2 3; do
  "$DLOCK" run -s -w 30s docs -- sh -c 'echo x >>"$1"; while [ "$(wc -l <"$1")" -lt 3 ]; do sleep 0.05; done' \
    sh "$TEST_DIR/in" &
  eval "r$i=\$!"
  bg_track $!
done
wait_exit "$r1" 20; a=$EXIT_CODE
wait_exit "$r2" 20; b=$EXIT_CODE
wait_exit "$r3" 20; c=$EXIT_CODE
assert_eq "three -s runs hold at once (each waits until all three are in)" "$a $b $c" "0 0 0"

# ---- -x runs alone, DLOCK_KIND ----
out=$("$DLOCK" run -x docs -- sh -c 'echo $DLOCK_KIND')
assert_eq "-x gives DLOCK_KIND=write" "$out" "write"
out=$("$DLOCK" run -s docs -- sh -c 'echo $DLOCK_KIND')
assert_eq "-s gives DLOCK_KIND=read" "$out" "read"
out=$("$DLOCK" run other -- sh -c 'echo $DLOCK_KIND')
assert_eq "no -s/-x gives DLOCK_KIND=mutex" "$out" "mutex"

"$DLOCK" run -s docs -- sleep 30 &
reader=$!
bg_track $reader
wait_for 10 key_exists docs
"$DLOCK" run -x -w 0 docs -- true 2>"$TEST_DIR/busy.err"
assert_eq "-x while a -s run holds: busy (75)" "$?" "75"
assert_match "the busy message counts the readers" "$(cat "$TEST_DIR/busy.err")" "held by 1 reader"
status=$("$DLOCK" status docs)
assert_match "status shows a read-write lock with one reader" "$status" "readers:  1"

# A waiting -x holds back a later -s.
"$DLOCK" run -x -w 60s docs -- true &
writer=$!
bg_track $writer
wait_for 10 sh -c "\"$DLOCK\" status docs | grep -q 'waiting:  1 writer'"
check "status shows the waiting writer" sh -c "\"$DLOCK\" status docs | grep -q 'waiting:  1 writer'"
"$DLOCK" run -s -w 0 docs -- true 2>/dev/null
assert_eq "a -s arriving while a -x waits does not slip past it (75)" "$?" "75"
"$DLOCK" run -w 0 docs -- true 2>"$TEST_DIR/kind.err"
assert_eq "a plain run on a read-write lock's name: usage (64)" "$?" "64"
assert_match "it says the name is a read-write lock" "$(cat "$TEST_DIR/kind.err")" "in use as a read-write lock"
kill -TERM $reader
wait_exit "$writer" 20
assert_eq "the waiting -x runs once the reader is gone" "$EXIT_CODE" "0"
wait_exit "$reader" 20

# ---- mixed: -x increments, -s reads twice and compares ----
incr='n=$(cat "$1"); sleep 0.05; echo $((n + 1)) >"$1"'
look='a=$(cat "$1"); sleep 0.05; b=$(cat "$1"); [ "$a" = "$b" ] || echo moved >>"$2"'
echo 0 >"$TEST_DIR/counter"
: >"$TEST_DIR/moved"
pids=""
for i in 1 2 3 4; do
  "$DLOCK" run -x -w 60s mixed -- sh -c "for k in 1 2 3; do $incr; done" sh "$TEST_DIR/counter" &
  pids="$pids $!"
  bg_track $!
  "$DLOCK" run -s -w 60s mixed -- sh -c "for k in 1 2 3; do $look; done" sh "$TEST_DIR/counter" "$TEST_DIR/moved" &
  pids="$pids $!"
  bg_track $!
done
codes=""
for p in $pids; do
  wait_exit "$p" 90
  codes="$codes$EXIT_CODE "
done
assert_eq "8 mixed -s/-x runs all exit 0" "$codes" "0 0 0 0 0 0 0 0 "
assert_eq "4 x 3 -x increments end exact" "$(cat "$TEST_DIR/counter")" 12
assert_eq "no -s run saw the counter move under it" "$(cat "$TEST_DIR/moved")" ""
check "the holders key is gone after the runs" key_gone mixed

# ---- usage ----
"$DLOCK" run -s -x docs -- true 2>"$TEST_DIR/usage.err"
assert_eq "-s with -x: usage (64)" "$?" "64"
assert_match "it says they exclude each other" "$(cat "$TEST_DIR/usage.err")" "exclude each other"

finish
