# test_job.sh - "dlock job": operating the jobs of "dlock every" across a
# fleet (docs/scheduler.md, "Operations"). Three nodes run one job every
# second: "pause" stops every node's runs (the skipped ticks are in the
# history with who and why), "trigger" runs exactly one extra run on one
# node, "resume" starts them again; "list", "history" and "check" (Nagios
# exit codes 0/1/2/3) show it; usage errors exit 64 with one line.
. "$DLOCK_TEST_LIB"

# ---- usage errors: exit 64 and one line, before any server is asked ----

DEAD=redis://127.0.0.1:1
usage_error "job: no action" "missing action" job
usage_error "job: unknown action" "unknown action 'stop'" job stop J --url "$DEAD"
usage_error "job pause: missing JOB" "missing JOB" job pause --url "$DEAD"
usage_error "job check: --max-age is needed" "check needs --max-age" job check J --url "$DEAD"
usage_error "job history: --reason is for pause" "--reason does not go with 'history'" job history J --reason x
usage_error "job check: --critical below --max-age" "--critical must be at least --max-age" \
  job check J --max-age 10s --critical 5s --url "$DEAD"
out=$("$DLOCK" job check J --max-age 10s --url "$DEAD" 2>/dev/null)
rc=$?
assert_eq "job check: an unreachable server is UNKNOWN (exit 3)" "$rc" 3
assert_match "job check: one UNKNOWN line on stdout" "$out" "^UNKNOWN - job J: "

start_redis

out=$("$DLOCK" job check J --max-age 10s)
rc=$?
assert_eq "job check: a job that never ran is CRITICAL (exit 2)" "$rc" 2
assert_match "job check: it says there is no success" "$out" "^CRITICAL - job J: no successful run"

usage_error "every: --overlap queue-one is not offered yet" "--overlap: 'queue-one' is not offered yet" \
  every 1s --name O --overlap queue-one -- true
usage_error "every: --overlap allow with --fixed-delay" "--overlap allow does not go with --fixed-delay" \
  every 1s --fixed-delay --name O --overlap allow -- true

# ---- --overlap allow: a 3 s command every second starts while the previous one goes on ----

"$DLOCK" every 1s --name O --node o1 --pool 3 --overlap allow -- sh -c "echo start >> '$TEST_DIR/o'; sleep 3" \
  2>"$TEST_DIR/o.log" &
ONODE=$!
bg_track $ONODE
three_starts() { [ -f "$TEST_DIR/o" ] && [ "$(wc -l <"$TEST_DIR/o")" -ge 3 ]; }
check "--overlap allow: 3 starts of a 3 s command within 6 s (skip would start 2)" wait_for 6 three_starts
kill -TERM $ONODE
wait_exit $ONODE 15

# ---- three nodes, one job every second ----

RUNS="$TEST_DIR/runs"
for n in 1 2 3; do
  "$DLOCK" every 1s --name J --node "node-$n" -- sh -c "echo \"\$DLOCK_TICK \$DLOCK_NODE \$DLOCK_TRIGGER\" >> '$RUNS'" \
    2>"$TEST_DIR/node$n.log" &
  eval "NODE$n=\$!"
  bg_track $!
done
runs() { if [ -f "$RUNS" ]; then wc -l <"$RUNS"; else echo 0; fi; }
at_least() { [ "$(runs)" -ge "$1" ]; }
check "the job runs (2 runs within 20 s)" wait_for 20 at_least 2
out=$("$DLOCK" job check J --max-age 30s)
rc=$?
assert_eq "job check: a fresh success is OK (exit 0)" "$rc" 0
assert_match "job check: one OK line with the age as performance data" "$out" "^OK - job J: last success .* ago \(max age 30s\) \| age=[0-9]+s;30;60$"

# Paused: after a run in flight has ended, no node runs the job.
out=$("$DLOCK" job pause J --reason "incident 42" --by alice)
assert_match "job pause: says what it did" "$out" "job 'J' paused"
out=$("$DLOCK" job pause J)
assert_match "job pause again: already paused, the first pause kept" "$out" "already paused \(by alice, .*: incident 42\)"
sleep 1.5
before=$(runs)
sleep 3
assert_eq "no run while paused (3 s, 3 nodes)" "$(runs)" "$before"
out=$("$DLOCK" job list)
assert_match "job list: paused, with who and why" "$out" "J +yes .*
  paused by alice: incident 42"
cat "$TEST_DIR"/node?.log >"$TEST_DIR/all.log"
check "the nodes log the paused ticks" grep -q "J tick .*: skipped: paused by alice: incident 42" "$TEST_DIR/all.log"

# A trigger: exactly one extra run, on one node, while paused.
out=$("$DLOCK" job trigger J)
assert_match "job trigger: says what it did" "$out" "job 'J' triggered"
manual_ran() { cat "$TEST_DIR"/node?.log | grep -q "J manual run of .*: ran on node-[123], fence [0-9]*, .*, exit 0"; }
check "the trigger ran on a node within 10 s" wait_for 10 manual_ran
sleep 2
assert_eq "exactly one manual run in the logs" "$(cat "$TEST_DIR"/node?.log | grep -c "J manual run of")" 1
assert_eq "exactly one extra run of the command" "$(runs)" "$((before + 1))"
assert_match "the command saw DLOCK_TRIGGER=manual" "$(tail -1 "$RUNS")" " node-[123] manual$"
out=$("$DLOCK" job history J -n 100)
assert_match "job history: the manual run, marked" "$out" "node-[123] .* ok \(manual\)"
assert_match "job history: the skipped ticks, with who and why" "$out" "skipped: paused by alice: incident 42"
skips=$(printf '%s\n' "$out" | grep "skipped: paused" | awk '{ print $1 }' | sort)
assert_eq "job history: each paused tick recorded once" "$(printf '%s\n' "$skips" | uniq -d)" ""
"$DLOCK" job history J --json >"$TEST_DIR/h.json"
check "job history --json is JSON" is_json <"$TEST_DIR/h.json"
check "job history --json has the trigger kind" grep -q '"trigger": "manual"' "$TEST_DIR/h.json"

# Resumed: ticks run again.
out=$("$DLOCK" job resume J)
assert_match "job resume: says what it did" "$out" "job 'J' resumed"
out=$("$DLOCK" job resume J)
assert_match "job resume again: it was not paused" "$out" "job 'J' was not paused"
check "the job runs again after resume (2 runs within 20 s)" wait_for 20 at_least $((before + 3))

# The notification: a job whose next tick is an hour away runs a trigger at
# once (no tick claim could have told of it), and a fixed-delay job too.
HOURLY="$TEST_DIR/hourly"
"$DLOCK" every 1h --name H --node hourly -- sh -c "echo run >> '$HOURLY'" 2>"$TEST_DIR/hourly.log" &
HNODE=$!
bg_track $HNODE
"$DLOCK" every 1h --fixed-delay --name D --node delay -- sh -c "echo run >> '$HOURLY.d'" 2>"$TEST_DIR/delay.log" &
DNODE=$!
bg_track $DNODE
check "the fixed-delay job runs once at start" wait_for 10 file_has "$HOURLY.d"
sleep 1 # both nodes listen now
"$DLOCK" job trigger H >/dev/null
check "a trigger reaches a node whose next tick is an hour away (within 5 s)" wait_for 5 file_has "$HOURLY"
"$DLOCK" job trigger D >/dev/null
two_runs() { [ "$(wc -l <"$HOURLY.d")" -ge 2 ]; }
check "a trigger runs a fixed-delay job at once (within 5 s)" wait_for 5 two_runs
kill -TERM $HNODE $DNODE
wait_exit $HNODE 15
wait_exit $DNODE 15

kill -TERM "$NODE1" "$NODE2" "$NODE3"
for n in 1 2 3; do
  eval "pid=\$NODE$n"
  wait_exit "$pid" 15
  assert_eq "node-$n exits 143 after SIGTERM" "$EXIT_CODE" 143
done
BG_PIDS=""

# check's codes on an old success: WARNING, then CRITICAL past --critical.
sleep 2.5
out=$("$DLOCK" job check J --max-age 1s --critical 1h)
rc=$?
assert_eq "job check: older than --max-age is WARNING (exit 1)" "$rc" 1
assert_match "job check: one WARNING line" "$out" "^WARNING - job J: last success"
out=$("$DLOCK" job check J --max-age 1s)
rc=$?
assert_eq "job check: older than --critical (2x --max-age) is CRITICAL (exit 2)" "$rc" 2
out=$("$DLOCK" job list --json)
check "job list --json names the job, resumed" sh -c "printf '%s' '$out' | grep -q '\"job\": \"J\", \"paused\": false'"

finish
