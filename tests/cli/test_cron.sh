# test_cron.sh - "dlock cron" and "dlock every": --next against known fire
# times (DST included, no Redis), usage errors (64), and the daemons: three
# nodes running a job every second run each tick exactly once with rising
# fences, fixed-delay runs never overlap, SIGTERM reaches a running command's
# group and dlock exits 143 leaving nothing behind, --history shows it all,
# and a node whose clock is an hour ahead claims nothing and logs its skew.
. "$DLOCK_TEST_LIB"

# ---- cron --next: no Redis needed ----

out=$("$DLOCK" cron --next '0 0 12 ? * MON' -n 2 --from 2023-11-15T00:00:00Z --tz UTC)
assert_eq "--next: Mondays at noon UTC" "$out" "2023-11-20T12:00:00+00:00
2023-11-27T12:00:00+00:00"
out=$("$DLOCK" cron --next '0 30 2 * * ?' -n 2 --tz Europe/Berlin --from 2026-03-28T12:00:00)
assert_eq "--next: 02:30 skipped by DST in Berlin fires at 03:30" "$out" "2026-03-29T03:30:00+02:00
2026-03-30T02:30:00+02:00"
out=$("$DLOCK" cron --next '0 30 2 * * ?' -n 2 --tz Europe/Berlin --from 2026-10-24T12:00:00)
assert_eq "--next: 02:30 repeated by DST in Berlin fires once" "$out" "2026-10-25T02:30:00+02:00
2026-10-26T02:30:00+01:00"
out=$("$DLOCK" cron --next '0 0 12 ? * MON' -n 2 --from @1700000000 --epoch)
assert_eq "--next --epoch --from @EPOCH" "$out" "1700481600
1701086400"
out=$("$DLOCK" cron --next '*/15 * * * * ?' --from @1700000000 --tz UTC)
assert_eq "--next prints 5 times by default" "$(printf '%s\n' "$out" | wc -l)" 5
assert_eq "--next is strictly after --from" "$(printf '%s\n' "$out" | head -1)" \
  "2023-11-14T22:13:30+00:00"
out=$("$DLOCK" cron --next '30 4 1,15 * 5' --unix -n 3 --from 2026-05-01T05:00:00Z)
assert_eq "--next --unix: Vixie's day-of-month OR day-of-week" "$out" "2026-05-08T04:30:00+00:00
2026-05-15T04:30:00+00:00
2026-05-22T04:30:00+00:00"
now=$(date +%s)
first=$("$DLOCK" cron --next '* * * * * ?' -n 1 --epoch)
check "--next defaults to now" test "$first" -gt "$now" -a "$first" -le $((now + 5))
assert_eq "--next -n 1000 is allowed" "$("$DLOCK" cron --next '* * * * * ?' -n 1000 | wc -l)" 1000
# Issue 27 item 7: an expression that never fires is an error for --next as
# for the daemon (it was a warning with exit 0).
usage_error "--next of an expression that no longer fires is a usage error" \
  "'0 0 0 1 1 \\? 2001' never fires after now" cron --next '0 0 0 1 1 ? 2001'
usage_error "--next --from: names the time it looked after" \
  "never fires after 2030-01-01T00:00:00Z" cron --next '0 0 0 1 1 ? 2001' --from 2030-01-01T00:00:00Z
# Issue 22 item 10: a year field '*' (what @yearly stands for) has no last
# year, as no year field has none; an explicit range keeps its end.
out=$("$DLOCK" cron --next '0 0 0 1 1 ? *' -n 2 --from 2099-06-01T00:00:00Z --tz UTC)
assert_eq "--next: year '*' goes past 2099" "$out" "2100-01-01T00:00:00+00:00
2101-01-01T00:00:00+00:00"
out=$("$DLOCK" cron --next '@yearly' -n 2 --from 2099-06-01T00:00:00Z --tz UTC)
assert_eq "--next: @yearly goes past 2099" "$out" "2100-01-01T00:00:00+00:00
2101-01-01T00:00:00+00:00"

# ---- usage errors: exit 64 and exactly one line on stderr with a hint ----

DEAD=redis://127.0.0.1:1
usage_error "--next: invalid expression names the field" \
  "bad cron expression: day-of-week: unexpected 'X' at column 15" cron --next '0 0 12 ? * MONX'
usage_error "--next: out-of-range value names the field" "minutes: value 60 out of range" \
  cron --next '0 60 * ? * *'
# Issue 27 item 7: 5 fields are Unix cron without --unix, and --next says
# which reading it used (stderr; stdout stays the times).
"$DLOCK" cron --next '*/5 * * * *' -n 2 --from 2026-01-01T00:00:00Z >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "--next: 5 fields are Unix cron by default (exit 0)" "$?" 0
assert_eq "--next: 5 fields read as minute hour ..." "$(cat "$TEST_DIR/out")" "2026-01-01T00:05:00+00:00
2026-01-01T00:10:00+00:00"
assert_match "--next: says it read Unix cron" "$(cat "$TEST_DIR/err")" "read as Unix cron \\(minute hour"
"$DLOCK" cron --next '0 */5 * * * ?' -n 1 --from 2026-01-01T00:00:00Z >/dev/null 2>"$TEST_DIR/err"
assert_eq "--next: Quartz's 6 fields say nothing of Unix" "$(cat "$TEST_DIR/err")" ""
out=$("$DLOCK" cron --next '30 4 1,15 * 5' -n 3 --from 2026-05-01T05:00:00Z 2>/dev/null)
assert_eq "--next: 5 fields without --unix equal --unix" "$out" \
  "$("$DLOCK" cron --next '30 4 1,15 * 5' --unix -n 3 --from 2026-05-01T05:00:00Z)"
usage_error "--next: '@every 5m' points to dlock every" "'@every 5m' is a period.*dlock every 5m" \
  cron --next '@every 5m'
usage_error "cron daemon: '@every 10s' points to dlock every" "dlock every 10s --name JOB" \
  cron '@every 10s' --name j -- true
usage_error "--next: 4 fields are still an error" "expected 6 or 7 fields" cron --next '* * * *'
usage_error "--next: unknown zone" "unknown time zone \"Mars/Olympus\"" \
  cron --next '0 0 12 ? * MON' --tz Mars/Olympus
usage_error "--next: bad --from" "--from: time \"yesterday\"" cron --next '* * * * * ?' --from yesterday
usage_error "--next: missing EXPR" "--next needs a cron EXPR" cron --next
usage_error "--next: -n 0" "-n: '0'" cron --next '* * * * * ?' -n 0
usage_error "--next: -n above 1000" "at most 1000" cron --next '* * * * * ?' -n 1001
usage_error "--next: a daemon option" "--name does not go with --next" cron --next '* * * * * ?' --name J
usage_error "--next: with a command" "--next takes no COMMAND" cron --next '* * * * * ?' -- true
usage_error "--next and --history together" "do not go together" cron --next --history x
usage_error "--history: missing JOB" "--history needs a JOB" cron --history
usage_error "--history: --epoch" "--epoch does not go with --history" cron --history J --epoch
usage_error "cron: missing EXPR" "missing cron EXPR" cron
usage_error "cron: missing --name" "missing --name JOB" cron '* * * * * ?' -- true
usage_error "cron: missing COMMAND" "missing COMMAND \\(after 'EXPR', or after '--'\\)" cron '* * * * * ?' --name J
usage_error "cron: missing COMMAND" "missing COMMAND" cron '* * * * * ?' --name J --
usage_error "cron: two expressions" "unexpected argument '0 \\* \\* \\* \\* \\?' after" cron '* * * * * ?' '0 * * * * ?' --name J -- true
usage_error "cron: --from is for --next" "--from does not go with a cron job" \
  cron '* * * * * ?' --name J --from @0 -- true
usage_error "cron: invalid expression, before Redis is tried" \
  "bad cron expression: seconds: unexpected 'x' at column 2" cron '5x * * ? * *' --name J --url "$DEAD" -- true
usage_error "cron: unknown zone, before Redis is tried" "unknown time zone" \
  cron '* * * * * ?' --tz Nowhere/Town --name J --url "$DEAD" -- true
usage_error "cron: expression that never fires again" "never fires after now" \
  cron '0 0 0 1 1 ? 2001' --name J --url "$DEAD" -- true
usage_error "cron: --pool 0" "--pool: '0' is not 1..256" cron '* * * * * ?' --name J --pool 0 -- true
usage_error "cron: --pool 257" "--pool: '257'" cron '* * * * * ?' --name J --pool 257 -- true
usage_error "cron: zero --lock-at-most-for" "--lock-at-most-for: must be more than 0" \
  cron '* * * * * ?' --name J --lock-at-most-for 0 -- true
usage_error "cron: bad --lock-at-least-for" "--lock-at-least-for: bad duration 'x'" \
  cron '* * * * * ?' --name J --lock-at-least-for x -- true
usage_error "cron: at-least longer than at-most" "longer than --lock-at-most-for" \
  cron '* * * * * ?' --name J --lock-at-least-for 20m -- true
usage_error "cron: node name with '|'" "--node: 'a|b'" cron '* * * * * ?' --name J --node 'a|b' -- true
usage_error "cron: --shell with several words" "--shell takes COMMAND as one string" \
  cron '* * * * * ?' --name J --shell -- echo hi
usage_error "every: missing DURATION" "missing DURATION" every
usage_error "every: bad DURATION" "bad duration 'soon'" every soon --name J -- true
usage_error "every: zero DURATION" "DURATION must be more than 0" every 0 --name J -- true
usage_error "every: --unix is for cron" "unknown option '--unix'" every 1s --unix --name J -- true
usage_error "every: --next is for cron" "unknown option '--next'" every 1s --next
usage_error "every: missing --name" "missing --name JOB" every 1s -- true
usage_error "every: missing COMMAND" "missing COMMAND" every 1s --name J --
usage_error "every: unknown zone" "unknown time zone" every 1s --tz Nowhere/Town --name J -- true
# Issue 22 item 10: an empty --tz is no zone (not UTC by accident), and a
# period below 100ms is refused (each tick is a claim round trip to the server).
usage_error "every: empty --tz" "--tz: empty time zone name" every 1s --tz '' --name J -- true
usage_error "cron: empty --tz" "--tz: empty time zone name" cron '* * * * * ?' --tz '' --name J -- true
usage_error "--next: empty --tz" "--tz: empty time zone name" cron --next '* * * * * ?' --tz ''
usage_error "--history: empty --tz" "--tz: empty time zone name" cron --history J --tz ''
usage_error "every: 1ms is below the minimum" "DURATION must be at least 100ms" every 1ms --name J -- true
usage_error "every: 99ms is below the minimum" "DURATION must be at least 100ms" every 99ms --fixed-delay --name J -- true

# Not runnable, or no Redis: checked at start, before any tick.
"$DLOCK" every 1s --name J --url "$DEAD" -- "$TEST_DIR/no-such-command" 2>/dev/null
assert_eq "every: a missing command exits 127 at once" "$?" 127
"$DLOCK" every 1s --name J --url "$DEAD" -- true 2>"$TEST_DIR/err"
assert_eq "every: unreachable Redis exits 69" "$?" 69
assert_match "every: unreachable Redis names the server" "$(cat "$TEST_DIR/err")" "127.0.0.1:1"
"$DLOCK" cron --history J --url "$DEAD" 2>/dev/null
assert_eq "cron --history: unreachable Redis exits 69" "$?" 69

start_redis

# Issue 27 item 7: COMMAND without '--', as run takes it; a 5-field EXPR
# runs as Unix cron in the daemon too (its start line says so).
"$DLOCK" every 1s --name nodash touch "$TEST_DIR/nodash" 2>"$TEST_DIR/nodash.err" &
ND=$!
bg_track $ND
check "every: COMMAND without '--' runs" wait_for 20 test -e "$TEST_DIR/nodash"
kill -TERM $ND
wait_exit $ND 20
"$DLOCK" cron '* * * * *' --name unixjob -v true 2>"$TEST_DIR/unix.err" &
UJ=$!
bg_track $UJ
check "cron: a 5-field EXPR starts a daemon" wait_for 20 grep -q "unixjob" "$TEST_DIR/unix.err"
assert_match "cron: its start line says Unix" "$(cat "$TEST_DIR/unix.err")" "cron '\\* \\* \\* \\* \\*' \\(Unix\\) in UTC"
kill -TERM $UJ
wait_exit $UJ 20

# ---- three nodes, one job every second ----

TICKS="$TEST_DIR/ticks"
for n in 1 2 3; do
  "$DLOCK" every 1s --name J --node "node-$n" -- \
    sh -c "echo \"\$DLOCK_TICK \$DLOCK_FENCE \$DLOCK_JOB \$DLOCK_NODE \$DLOCK_URL\" >> '$TICKS'" \
    2>"$TEST_DIR/node$n.log" &
  eval "NODE$n=\$!"
  bg_track $!
done
sleep 6.5
kill -TERM "$NODE1" "$NODE2" "$NODE3"
for n in 1 2 3; do
  eval "pid=\$NODE$n"
  wait_exit "$pid" 15
  assert_eq "node-$n exits 143 (128+SIGTERM) after SIGTERM" "$EXIT_CODE" 143
done
check "no command is left running" sh -c "! ps -eo args= | grep -v grep | grep -qF '$TICKS'"
cut -d' ' -f1 "$TICKS" | sort -n >"$TEST_DIR/ticks.sorted"
nticks=$(wc -l <"$TEST_DIR/ticks.sorted")
check "at least 5 ticks ran in 6.5 s ($nticks)" test "$nticks" -ge 5
assert_eq "each tick ran exactly once" "$(uniq -d "$TEST_DIR/ticks.sorted")" ""
gaps=$(awk 'NR > 1 && $1 != prev + 1 { print prev " -> " $1 } { prev = $1 }' "$TEST_DIR/ticks.sorted")
assert_eq "consecutive ticks are 1 s apart, no gaps" "$gaps" ""
fences=$(sort -n -k1,1 "$TICKS" | awk 'NR > 1 && $2 <= prev { print "fence " $2 " after " prev } { prev = $2 }')
assert_eq "fences increase from tick to tick" "$fences" ""
assert_eq "the command saw DLOCK_JOB, DLOCK_NODE and DLOCK_URL" \
  "$(awk '$3 != "J" || $4 !~ /^node-[123]$/ || $5 != "'"$DLOCK_URL"'"' "$TICKS")" ""
cat "$TEST_DIR"/node?.log >"$TEST_DIR/all.log"
# A tick whose command the SIGTERM stopped before it wrote its line (a busy
# machine starts it late) is logged and recorded, not ok: at most one, last.
ran=$(grep -c ": ran on node-.*, exit 0" "$TEST_DIR/all.log")
assert_eq "the logs have one 'ran ... exit 0' line per tick" "$ran" "$nticks"
assert_match "a node logs ticks claimed by another" "$(cat "$TEST_DIR/all.log")" \
  "J tick [0-9T:+-]+: skipped, claimed by node-[123]"
assert_match "a 'ran' line has node, fence, duration and exit status" "$(cat "$TEST_DIR/all.log")" \
  "J tick [0-9T:+-]+: ran on node-[123], fence [0-9]+, [0-9.]+m?s, exit 0"
assert_match "SIGTERM is logged" "$(cat "$TEST_DIR/node1.log")" "SIGTERM: stopping"

hist=$("$DLOCK" cron --history J)
assert_match "--history has a header" "$hist" "^SCHEDULED +NODE +FENCE +START +DURATION +OUTCOME"
assert_eq "--history lists every run" "$(printf '%s\n' "$hist" | grep -c ' ok$')" "$nticks"
"$DLOCK" cron --history J --json >"$TEST_DIR/hist.json"
check "--history --json is valid JSON" is_json <"$TEST_DIR/hist.json"
jticks=$(python3 -c '
import json, sys
runs = json.load(open(sys.argv[1]))
stopped = [r for r in runs if r["outcome"] != "ok"]
runs = [r for r in runs if r["outcome"] == "ok"]
assert len(stopped) <= 1 and all(s["scheduled_unix_ms"] > r["scheduled_unix_ms"] for s in stopped for r in runs)
assert all(r["duration_ms"] >= 0 for r in runs)
assert all(r["node"] in ("node-1", "node-2", "node-3") for r in runs)
print(" ".join(str(r["scheduled_unix_ms"] // 1000) for r in sorted(runs, key=lambda r: r["scheduled_unix_ms"])))
' "$TEST_DIR/hist.json")
assert_eq "--history --json: the same ticks as the commands saw" "$jticks" \
  "$(tr '\n' ' ' <"$TEST_DIR/ticks.sorted" | sed 's/ $//')"
assert_eq "--history -n 2 shows 2 runs" "$("$DLOCK" cron --history J -n 2 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 2
"$DLOCK" cron --history nothing-ran >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "--history of an unknown job exits 0" "$?" 0
assert_match "... and says there are no runs" "$(cat "$TEST_DIR/err")" "no runs recorded"
assert_eq "--history --json of an unknown job is []" "$("$DLOCK" cron --history nothing-ran --json)" "[]"

# ---- a node whose clock is an hour ahead claims nothing and logs its skew ----

FAKELIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1)
if ldd "$DLOCK" 2>/dev/null | grep -q libtsan; then
  # libfaketime wraps pthread_cond_wait, which hides lock events from TSan.
  echo "skip: clock skew of the daemon not tested under ThreadSanitizer (libfaketime)"
elif [ -n "$FAKELIB" ]; then
  SK="$TEST_DIR/skew-ticks"
  # The library directly (not the faketime wrapper, which forks), so that
  # SIGTERM reaches dlock; preloaded ahead of ASan's runtime, which is fine.
  LD_PRELOAD="$FAKELIB" FAKETIME="+3600s" FAKETIME_DONT_FAKE_MONOTONIC=1 \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$DLOCK" every 1s --name S --node skewed -- sh -c "echo \$DLOCK_TICK >> '$SK'" 2>"$TEST_DIR/skew.log" &
  SKEW=$!
  bg_track $SKEW
  check "skewed node: logs its clock skew" wait_for 15 grep -q "not claimed: this node's clock" "$TEST_DIR/skew.log"
  kill -TERM "$SKEW"
  wait_exit "$SKEW" 15
  assert_eq "skewed node: exits 143 after SIGTERM" "$EXIT_CODE" 143
  assert_match "skewed node: the log line gives the measured skew and the fix" "$(cat "$TEST_DIR/skew.log")" \
    "S tick [0-9T:.+-]+: not claimed: this node's clock is 3[56][0-9][0-9]\.[0-9] s ahead of the clock of the redis server 127\.0\.0\.1:[0-9]+ .*Fix this node's clock"
  check "skewed node: ran nothing" test ! -s "$SK"
  check "skewed node: claimed nothing" key_gone "{S}:tick"
else
  echo "skip: libfaketime.so.1 not found (Debian package faketime): clock skew of the daemon not tested"
fi

# ---- cron: a cron job fires on its ticks ----

CT="$TEST_DIR/cron-ticks"
"$DLOCK" cron '* * * * * ?' --name C --tz Europe/Berlin -- sh -c "echo \$DLOCK_TICK >> '$CT'" \
  2>"$TEST_DIR/cron.log" &
CRON=$!
bg_track $CRON
check "cron: runs every second" wait_for 10 sh -c "[ \$(wc -l 2>/dev/null < '$CT' || echo 0) -ge 3 ]"
kill -TERM "$CRON"
wait_exit "$CRON" 15
assert_eq "cron: exits 143 after SIGTERM" "$EXIT_CODE" 143
gaps=$(sort -n "$CT" | awk 'NR > 1 && $1 != prev + 1 { print } { prev = $1 }')
assert_eq "cron: DLOCK_TICK is every whole second" "$gaps" ""
assert_match "cron: logs times in --tz" "$(cat "$TEST_DIR/cron.log")" "C tick [0-9-]+T[0-9:]+\+0[12]:00: ran on"

# ---- fixed delay: two nodes, runs never overlap ----

RUNS="$TEST_DIR/runs"
for n in 1 2; do
  "$DLOCK" every 500ms --fixed-delay --name D --node "d-$n" -- \
    sh -c "s=\$(date +%s%3N); sleep 0.3; echo \"\$s \$(date +%s%3N) \$DLOCK_NODE\" >> '$RUNS'" \
    2>"$TEST_DIR/d$n.log" &
  eval "D$n=\$!"
  bg_track $!
done
check "fixed delay: at least 4 runs" wait_for 15 sh -c "[ \$(wc -l 2>/dev/null < '$RUNS' || echo 0) -ge 4 ]"
kill -TERM "$D1" "$D2"
wait_exit "$D1" 15
assert_eq "fixed delay: node 1 exits 143" "$EXIT_CODE" 143
wait_exit "$D2" 15
assert_eq "fixed delay: node 2 exits 143" "$EXIT_CODE" 143
overlaps=$(sort -n "$RUNS" | awk 'NR > 1 && $1 < prev_end { print "overlap: " $0 } { prev_end = $2 }')
assert_eq "fixed delay: no run starts before the previous one ended" "$overlaps" ""
# The delay is measured on the Redis server's clock, the same clock here;
# generous margin for process start-up.
short=$(sort -n "$RUNS" | awk 'NR > 1 && $1 - prev_end < 400 { print $1 - prev_end "ms after " prev_end } { prev_end = $2 }')
assert_eq "fixed delay: each run starts about 500ms after the previous ended" "$short" ""

# ---- SIGTERM while the command runs ----

rm -f "$TEST_DIR"/*.pid
"$DLOCK" every 1s --name T -- sh -c "echo \$\$ > '$TEST_DIR/child.pid'; sleep 600 & echo \$! > '$TEST_DIR/gc.pid'; trap 'echo term > \"$TEST_DIR/term\"; exit 3' TERM; wait" \
  2>"$TEST_DIR/t.log" &
T=$!
bg_track $T
check "a run started" wait_for 10 file_has "$TEST_DIR/gc.pid"
kill -TERM "$T"
wait_exit "$T" 15
assert_eq "SIGTERM during a run: dlock exits 143" "$EXIT_CODE" 143
check "SIGTERM during a run: the command got SIGTERM" file_has "$TEST_DIR/term"
check "SIGTERM during a run: the command is gone" pid_gone "$(cat "$TEST_DIR/child.pid")"
check "SIGTERM during a run: its group's other process is gone" pid_gone "$(cat "$TEST_DIR/gc.pid")"
assert_match "SIGTERM during a run: logged" "$(cat "$TEST_DIR/t.log")" "passed SIGTERM to the running command"
assert_match "SIGTERM during a run: the run is recorded with its status" \
  "$("$DLOCK" cron --history T -n 1)" "failed: 3$"

# A command that ignores SIGTERM is killed after --grace.
rm -f "$TEST_DIR"/*.pid
"$DLOCK" every 1s --name I --grace 1s -- sh -c "trap '' TERM; echo \$\$ > '$TEST_DIR/child.pid'; while :; do sleep 0.1; done" \
  2>"$TEST_DIR/i.log" &
I=$!
bg_track $I
check "a stubborn run started" wait_for 10 file_has "$TEST_DIR/child.pid"
kill -TERM "$I"
wait_exit "$I" 15
assert_eq "a command ignoring SIGTERM: dlock still exits 143" "$EXIT_CODE" 143
check "a command ignoring SIGTERM: killed after --grace" pid_gone "$(cat "$TEST_DIR/child.pid")"
assert_match "a command ignoring SIGTERM: SIGKILL is logged" "$(cat "$TEST_DIR/i.log")" "sending SIGKILL"

# ---- a run longer than --lock-at-most-for is stopped ----

"$DLOCK" every 1s --name M --lock-at-most-for 1s --grace 500ms -- sh -c 'exec sleep 30.4217' \
  2>"$TEST_DIR/m.log" &
M=$!
bg_track $M
check "--lock-at-most-for: the long run is stopped and recorded" \
  wait_for 15 sh -c "'$DLOCK' cron --history M 2>/dev/null | grep -q 'failed: 143'"
kill -TERM "$M"
wait_exit "$M" 15
assert_eq "--lock-at-most-for: dlock exits 143 after SIGTERM" "$EXIT_CODE" 143
assert_match "--lock-at-most-for: says why" "$(cat "$TEST_DIR/m.log")" "passed --lock-at-most-for \(1s\)"
# A duration no other test uses: tests run in parallel, and ps sees them all.
check "--lock-at-most-for: no sleep left behind" sh -c "! ps -eo args= | grep -v grep | grep -q '^sleep 30.4217$'"

# ---- -q: no log line for successful runs ----

"$DLOCK" every 1s --name Q -q -- true 2>"$TEST_DIR/q.log" &
Q=$!
bg_track $Q
check "-q: runs" wait_for 10 sh -c "'$DLOCK' cron --history Q 2>/dev/null | grep -q ' ok$'"
kill -TERM "$Q"
wait_exit "$Q" 15
assert_eq "-q: exits 143" "$EXIT_CODE" 143
# A run the SIGTERM caught mid-way (a busy machine) is a failure, logged even
# with -q: only that line may be there.
assert_eq "-q: nothing logged (but a run the stop ended)" "$(grep -v 'failed (exit 143)' "$TEST_DIR/q.log")" ""

finish
