# test_lost.sh - the lock lost while the command runs: (a) deleted by an
# admin (dlock release --force; (a2) at the default lease, told at once), (b) dlock frozen with SIGSTOP past its lease
# while another process takes the lock. The command's whole process group
# gets SIGTERM (or SIGKILL, per --on-lost), dlock exits 79, and the new
# holder's key is never touched.
. "$DLOCK_TEST_LIB"
start_redis

# A child and a grandchild in its group, each recording the SIGTERM it gets.
victim() {
  cat <<SH
trap 'echo term >"$TEST_DIR/child.term"; exit 1' TERM
echo \$\$ >"$TEST_DIR/child.pid"
( trap 'echo term >"$TEST_DIR/gc.term"; exit 1' TERM
  while :; do sleep 0.1; done ) &
echo \$! >"$TEST_DIR/gc.pid"
while :; do sleep 0.1; done
SH
}

# ---- (a) deleted by an admin ----

"$DLOCK" run --lease 2s A -- sh -c "$(victim)" 2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "(a) child and grandchild started" wait_for 10 file_has "$TEST_DIR/gc.pid"
out=$("$DLOCK" release --force A)
assert_eq "(a) release --force deletes the held lock" "$out" "released 'A'"
wait_exit "$DL" 20
assert_eq "(a) dlock exits 79 when the lock is lost" "$EXIT_CODE" 79
check "(a) the child got SIGTERM" file_has "$TEST_DIR/child.term"
check "(a) the grandchild in its group got SIGTERM" file_has "$TEST_DIR/gc.term"
check "(a) the child is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
check "(a) the grandchild is gone" pid_gone "$(cat "$TEST_DIR/gc.pid")"
assert_match "(a) stderr says what happened, with the lock name" "$(cat "$TEST_DIR/err")" \
  "lock 'A' lost: another client deleted the key with a forced release; sending SIGTERM"

# ---- (a2) the same at the default 30 s lease: told at once, not at the next renewal ----
# The forced release notifies the holder (its next renewal is ~8 s off):
# the command gets SIGTERM within a few seconds and dlock exits 79.

rm -f "$TEST_DIR"/child.* "$TEST_DIR"/gc.*
"$DLOCK" run A2 -- sh -c "$(victim)" 2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "(a2) child started" wait_for 10 file_has "$TEST_DIR/gc.pid"
out=$("$DLOCK" release --force A2)
assert_eq "(a2) release --force deletes the held lock" "$out" "released 'A2'"
check "(a2) the child got SIGTERM within 4 s of the forced release" wait_for 4 file_has "$TEST_DIR/child.term"
wait_exit "$DL" 20
assert_eq "(a2) dlock exits 79" "$EXIT_CODE" 79

# ---- (b) dlock frozen past its lease ----

rm -f "$TEST_DIR"/child.* "$TEST_DIR"/gc.*
"$DLOCK" run --lease 2s B -- sh -c "$(victim)" 2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "(b) child started" wait_for 10 file_has "$TEST_DIR/gc.pid"
kill -STOP "$DL"
check "(b) the frozen holder's key expires" wait_for 15 key_gone B
"$DLOCK" run B -- sh -c "echo \$\$ >'$TEST_DIR/other.pid'; exec sleep 600" &
OTHER=$!
bg_track $OTHER
check "(b) another process takes the lock" wait_for 10 key_exists B
check "(b) another process runs its command" wait_for 10 file_has "$TEST_DIR/other.pid"
token=$(rcli GET B)
# The guardian knew the deadline: the command is gone although dlock is frozen.
check "(b) while dlock is frozen, the guardian stopped its command" pid_gone "$(cat "$TEST_DIR/child.pid")"
check "(b) the child got SIGTERM" file_has "$TEST_DIR/child.term"
check "(b) the grandchild is gone" pid_gone "$(cat "$TEST_DIR/gc.pid")"
kill -CONT "$DL"
wait_exit "$DL" 20
assert_eq "(b) after SIGCONT dlock exits 79" "$EXIT_CODE" 79
assert_eq "(b) the other holder's key is untouched" "$(rcli GET B)" "$token"
check "(b) the other holder's command still runs" pid_alive "$(cat "$TEST_DIR/other.pid")"
out=$("$DLOCK" status --json B | python3 -c 'import json,sys; print(json.load(sys.stdin)["holder"]["pid"])')
assert_eq "(b) dlock status names the other holder" "$out" "$OTHER"
kill -TERM "$OTHER"
wait_exit "$OTHER" 15
assert_eq "(b) the other holder ends normally on SIGTERM" "$EXIT_CODE" 143

# ---- --on-lost kill, ignore, and --grace ----

rm -f "$TEST_DIR"/child.* "$TEST_DIR"/gc.*
"$DLOCK" run --lease 2s --on-lost kill K -- sh -c "$(victim)" 2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "--on-lost kill: child started" wait_for 10 file_has "$TEST_DIR/gc.pid"
"$DLOCK" release -q --force K
wait_exit "$DL" 20
assert_eq "--on-lost kill: exit 79" "$EXIT_CODE" 79
check "--on-lost kill: the child is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
check "--on-lost kill: no SIGTERM was sent (SIGKILL only)" test ! -e "$TEST_DIR/child.term"

rm -f "$TEST_DIR"/child.*
"$DLOCK" run --lease 2s --on-lost term --grace 1s T -- \
  sh -c "trap '' TERM; echo \$\$ >'$TEST_DIR/child.pid'; while :; do sleep 0.1; done" 2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "--grace: child started" wait_for 10 file_has "$TEST_DIR/child.pid"
"$DLOCK" release -q --force T
wait_exit "$DL" 20
assert_eq "--grace: a child that ignores SIGTERM is killed, exit 79" "$EXIT_CODE" 79
check "--grace: the child is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
assert_match "--grace: says it sent SIGKILL" "$(cat "$TEST_DIR/err")" "SIGKILL"

rm -f "$TEST_DIR"/child.*
"$DLOCK" run --lease 2s --on-lost ignore I -- \
  sh -c "echo \$\$ >'$TEST_DIR/child.pid'; while [ ! -e '$TEST_DIR/go' ]; do sleep 0.1; done; echo done >'$TEST_DIR/child.done'" \
  2>"$TEST_DIR/err" &
DL=$!
bg_track $DL
check "--on-lost ignore: child started" wait_for 10 file_has "$TEST_DIR/child.pid"
"$DLOCK" release -q --force I
check "--on-lost ignore: dlock reports the loss" wait_for 15 grep -q "lock 'I' lost" "$TEST_DIR/err"
check "--on-lost ignore: the child still runs" pid_alive "$(cat "$TEST_DIR/child.pid")"
touch "$TEST_DIR/go"
wait_exit "$DL" 20
assert_eq "--on-lost ignore: the child finishes, dlock exits 79" "$EXIT_CODE:$(cat "$TEST_DIR/child.done" 2>/dev/null)" "79:done"

finish
