# test_hold.sh - "dlock hold NAME": a lock held across several commands of a
# shell (issue 27 item 4): the example of 'dlock hold --help' run as it is
# printed, busy and loss lines, release at end of input, signals.
. "$DLOCK_TEST_LIB"
start_redis

# ---- the manual's example, as printed ----
"$DLOCK" hold --help | sed -n '/^Example (bash):/,/^$/p' | sed '1d;$d;s/^  //' >"$TEST_DIR/example.sh"
check "the help has an example" test -s "$TEST_DIR/example.sh"
cat >"$TEST_DIR/run_example.sh" <<EOS
PATH="$(dirname "$DLOCK"):\$PATH"
step1() { "$DLOCK" run -n deploy -- true; echo "step1: a second holder gets \$?" >>"$TEST_DIR/steps"; }
step2() { "$DLOCK" status deploy >>"$TEST_DIR/steps"; }
. "$TEST_DIR/example.sh"
echo "example: line '\$line', hold exit \$?" >>"$TEST_DIR/steps"
EOS
timeout 60 bash "$TEST_DIR/run_example.sh"
steps=$(cat "$TEST_DIR/steps" 2>/dev/null)
assert_match "example: the first line says acquired, with the fence" "$steps" \
  "example: line 'acquired deploy fence [0-9]+', hold exit 0"
assert_match "example: between the steps the lock is held (a second holder gets 75)" "$steps" \
  "step1: a second holder gets 75"
assert_match "example: status names the shell that holds it" "$steps" \
  "command: +\(dlock hold, for\) bash .*run_example.sh"
out=$("$DLOCK" status deploy)
assert_match "example: released after the input was closed" "$out" "state: +free"

# ---- end of input, busy, loss, signals ----
"$DLOCK" hold quick </dev/null >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "hold with no input releases at once: exit 0" "$?" 0
assert_match "... after saying acquired" "$(cat "$TEST_DIR/out")" "^acquired quick fence [0-9]+$"
assert_match "... and the lock is free" "$("$DLOCK" status quick)" "state: +free"

mkfifo "$TEST_DIR/in"
"$DLOCK" hold --lease 3s held <"$TEST_DIR/in" >"$TEST_DIR/held.out" 2>"$TEST_DIR/held.err" &
H=$!
bg_track $H
exec 7>"$TEST_DIR/in" # the hold's input stays open while fd 7 is
check "a hold says acquired" wait_for 20 grep -q '^acquired held fence' "$TEST_DIR/held.out"
"$DLOCK" hold -n held </dev/null >/dev/null 2>"$TEST_DIR/err"
assert_eq "a second hold -n is busy: 75" "$?" 75
assert_match "... naming the holder" "$(cat "$TEST_DIR/err")" "'held' is held by pid $H"
sleep 2 # past a renewal of the 3 s lease: the hold is renewed, not expired
assert_match "the hold outlives its lease (renewed)" "$("$DLOCK" status held)" "state: +held"
"$DLOCK" release --force held >/dev/null 2>&1
check "a forced release: the hold prints 'lost held: ...'" \
  wait_for 20 grep -q "^lost held: .*another client deleted the key" "$TEST_DIR/held.out"
wait_exit $H 20
assert_eq "... and exits 79" "$EXIT_CODE" 79
exec 7>&-

rm -f "$TEST_DIR/in"
mkfifo "$TEST_DIR/in"
"$DLOCK" hold sig <"$TEST_DIR/in" >"$TEST_DIR/sig.out" 2>/dev/null &
S=$!
bg_track $S
exec 7>"$TEST_DIR/in"
check "a hold to be signalled says acquired" wait_for 20 grep -q '^acquired sig' "$TEST_DIR/sig.out"
kill -TERM $S
wait_exit $S 20
assert_eq "SIGTERM: exit 143" "$EXIT_CODE" 143
assert_match "SIGTERM: the lock was released" "$("$DLOCK" status sig)" "state: +free"
exec 7>&-

usage_error "hold takes no COMMAND" "takes no COMMAND.*dlock run NAME -- COMMAND" hold x -- true
usage_error "hold needs a NAME" "missing lock NAME" hold
usage_error "hold has no --on-lost" "unknown option '--on-lost'" hold --on-lost kill x
finish
