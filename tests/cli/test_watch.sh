# test_watch.sh - the observe mode (issue 27 item 5): "dlock status NAME
# --watch" and "dlock list --watch" print one line per change (acquired,
# waiter, forced release, released, expired) within 5 s and in order, from
# the server's notifications: an idle watcher sends the server (almost)
# nothing. Also: a semaphore's status shows every permit holder, "list -l"
# one aligned line per name, and a watcher survives a server restart. With
# DLOCK_PG_SERVER or DLOCK_ZK_SERVER set, the same watch on PostgreSQL and
# ZooKeeper.
. "$DLOCK_TEST_LIB"

start_redis

# A background "dlock run" whose PID (and its command's) a test kills.
run_bg() {
  "$DLOCK" run "$@" >/dev/null 2>&1 &
  LAST_BG=$!
  bg_track $LAST_BG
}
# The commands the server ran, but INFO.
server_calls() {
  rcli INFO commandstats | tr -d '\r' | grep -v '^cmdstat_info:' |
    sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\),.*/\1/p' | awk '{s += $1} END {print s + 0}'
}
# ---- status NAME --watch on Redis ----

watch_start "$TEST_DIR/w1" status job --watch
expect_line "the watcher starts with the state: free" "job +free"
run_bg job -- sleep 60
A=$LAST_BG
expect_line "a holder's acquire is one line with its pid and fence" "job +acquired +fence [0-9]+ +pid $A "
run_bg -w 60 job -- sleep 1
B=$LAST_BG
expect_line "a new waiter is one line" "job +waiter .*1 waiting"
"$DLOCK" release --force job >/dev/null
expect_line "a forced release is one line naming the old holder" "job +force-released +fence [0-9]+ +pid $A "
expect_line "the waiter's hand-off is an acquire by it" "job +acquired +fence [0-9]+ +pid $B "
expect_line "its release is one line" "job +released +fence [0-9]+ +pid $B " 8
wait_exit "$B" 10
kill -TERM "$A" 2>/dev/null
wait_exit "$A" 15

# A holder killed with -9: its lease runs out, which no server announces;
# the watcher's one timer at the lease's end sees it.
run_bg --lease 2s job -- sleep 60
C=$LAST_BG
expect_line "a short-lease holder's acquire" "job +acquired +fence [0-9]+ +pid $C "
# dlock run first: killed after its command, it could release in between.
kids=$(pgrep -P "$C")
kill -KILL "$C"
[ -z "$kids" ] || kill -KILL $kids 2>/dev/null
wait_exit "$C" 5
expect_line "a killed holder's lease that runs out is 'expired'" "job +expired +fence [0-9]+ +pid $C " 7

# Not polling: with the lock free, 3 idle seconds cost the server at most a
# handful of commands (a poll every 50 ms would be 60).
before=$(server_calls)
sleep 3
after=$(server_calls)
if [ $((after - before)) -le 3 ]; then
  pass "an idle watcher sends the server no command ($((after - before)) in 3 s)"
else
  fail "an idle watcher sends the server no command" "$((after - before)) commands in 3 s"
fi
watch_stop "SIGTERM ends the watcher with exit 0"

# --json: one object per line, the same events.
watch_start "$TEST_DIR/w2" status job --watch --json
expect_line "--json: the first line is the state" '"event": "free"'
"$DLOCK" run job -- sleep 0.5 >/dev/null 2>&1
expect_line "--json: an acquire" '"event": "acquired", "fence": [0-9]+'
expect_line "--json: a release" '"event": "released"'
if python3 -c 'import json,sys
for l in open(sys.argv[1]): json.loads(l)' "$WOUT"; then
  pass "--json: every line is a JSON object"
else
  fail "--json: every line is a JSON object" "$(cat "$WOUT")"
fi
watch_stop "SIGINT ends the watcher with exit 0" INT

# A server that goes away and comes back: the watcher says so and goes on.
watch_start "$TEST_DIR/w3" status job --watch
expect_line "a watcher before the restart" "job +free"
kill -TERM "$REDIS_PID"
wait_for 10 pid_gone "$REDIS_PID"
if wait_for 10 grep -q "lost the connection" "$WOUT.err"; then
  pass "a lost server connection is said on stderr"
else
  fail "a lost server connection is said on stderr" "stderr: $(cat "$WOUT.err")"
fi
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$TEST_DIR" --daemonize no --logfile "$TEST_DIR/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
wait_for 10 sh -c "[ \"\$(redis-cli -p $REDIS_PORT PING 2>/dev/null)\" = PONG ]"
if wait_for 15 grep -q "reconnected" "$WOUT.err"; then
  pass "the watcher reconnects and says so"
else
  fail "the watcher reconnects and says so" "stderr: $(cat "$WOUT.err")"
fi
"$DLOCK" run job -- sleep 0.5 >/dev/null 2>&1
expect_line "after the restart the changes show again" "job +acquired" 8
watch_stop "the watcher still ends with exit 0"

# ---- a semaphore shows every permit holder; list -l ----

for i in 1 2 3; do
  run_bg --limit 3 sem -- sleep 60
done
sem_held() { "$DLOCK" status sem --json 2>/dev/null | grep -q '"permits_used": 3'; }
wait_for 10 sem_held
out=$("$DLOCK" status sem)
assert_match "status of a semaphore with 3 holders says 3 holders" "$out" "holders: +3"
assert_eq "... and shows one line (fence, lease, pid) per permit" \
  "$(printf '%s\n' "$out" | grep -c -E '^  fence [0-9]+, lease [^:]+: pid [0-9]+ on ')" 3
n=$("$DLOCK" status sem --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["holders"]))')
assert_eq "status --json of the semaphore lists 3 holders" "$n" 3
run_bg other -- sleep 60
wait_for 10 key_exists other
out=$("$DLOCK" list -l)
assert_match "list -l starts with a header" "$(printf '%s\n' "$out" | head -1)" "^NAME +STATE +FENCE +LEASE LEFT +HOLDER"
assert_match "list -l: a mutex's line has its holder and lease" "$out" "other +held +[0-9]+ +[0-9.]+m?s +pid [0-9]+ on "
assert_match "list -l: a semaphore's line has its permits" "$out" "sem +3/3 +[0-9]+ "
cols=$(printf '%s\n' "$out" | awk '{print index($0, $3)}' | sort -u | wc -l)
assert_eq "list -l: the columns are aligned" "$cols" 1
stop_bg

# ---- list --watch ----

watch_start "$TEST_DIR/w4" list --watch
sleep 0.5
"$DLOCK" run newname -- sleep 4 >/dev/null 2>&1 &
expect_line "list --watch: a new name's acquire" "newname +acquired"
expect_line "list --watch: its release" "newname +released" 8
watch_stop "list --watch ends with exit 0"

finish
