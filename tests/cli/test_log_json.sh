# test_log_json.sh - --log-format json on every command that logs (issue
# 26): run, hold, elect, every. Each line dlock writes on stderr is one JSON
# object (python3's json.loads takes it) with time, level, event, name, host
# and pid, and the events of a scripted life come in order: acquired,
# exited, released; busy; waiting; lost after a forced release; elected; an
# error (no server); a tick's 'ran' (with cron's own 'job' field).
. "$DLOCK_TEST_LIB"

start_redis

# Each scenario's stderr goes to its own file in $L; parse reads them all
# with one python3 (slow to start on a busy machine). For each file it
# prints "FILE events E1 E2 ...", then "FILE EVENT.KEY=VALUE" for the first
# line of each event; "FILE bad WHY" when a line is not one JSON object with
# the common fields.
L="$TEST_DIR/logs"
mkdir -p "$L"
parse() {
  PARSED=$(python3 -c '
import json, os, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    events, first = [], {}
    try:
        for n, line in enumerate(open(os.path.join(d, name)), 1):
            o = json.loads(line)
            missing = [k for k in ("time", "level", "event", "name", "host", "pid") if k not in o]
            if missing:
                raise ValueError("line %d has no %s" % (n, missing))
            events.append(o["event"])
            first.setdefault(o["event"], o)
    except ValueError as e:
        print(name, "bad", str(e).replace("\n", " "))
        continue
    print(name, "events", " ".join(events))
    for ev, o in first.items():
        for k, v in o.items():
            print("%s %s.%s=%s" % (name, ev, k, str(v).replace("\n", " ")))
' "$L")
}
# events "what" FILE EXPECTED: the events of FILE, in order, are EXPECTED.
events() {
  if printf '%s\n' "$PARSED" | grep -q "^$2 bad"; then
    fail "$1" "$(printf '%s\n' "$PARSED" | grep "^$2 bad")" "stderr: $(cat "$L/$2")"
  else
    assert_eq "$1" "$(printf '%s\n' "$PARSED" | sed -n "s/^$2 events //p")" "$3"
  fi
}
field() { # field FILE EVENT KEY: KEY of the first EVENT line
  printf '%s\n' "$PARSED" | sed -n "s/^$1 $2\.$3=//p"
}

"$DLOCK" run --log-format json job -- sh -c 'echo out; exit 3' >"$TEST_DIR/out" 2>"$L/run"
assert_eq "run exits with its command's status" "$?" 3
assert_eq "the command's own output is left alone" "$(cat "$TEST_DIR/out")" out

"$DLOCK" run holder -- sleep 60 >/dev/null 2>&1 &
H=$!
bg_track $H
wait_for 5 key_exists holder
"$DLOCK" run -n --log-format json holder -- true 2>"$L/busy"
assert_eq "busy: exit 75" "$?" 75
"$DLOCK" run -n holder -- true 2>"$TEST_DIR/text"
assert_match "without --log-format the lines are text" "$(cat "$TEST_DIR/text")" "^dlock: 'holder' is held by pid $H "
"$DLOCK" run -v -w 1 --log-format json holder -- true 2>"$L/wait"
assert_eq "a wait that gives up exits 75" "$?" 75

"$DLOCK" run --log-format json lost -- sleep 60 2>"$L/lost" &
P=$!
bg_track $P
wait_for 5 key_exists lost
"$DLOCK" release --force lost >/dev/null 2>&1
wait_exit "$P" 15
assert_eq "a lock lost: exit 79" "$EXIT_CODE" 79

"$DLOCK" hold --log-format json held </dev/null >/dev/null 2>"$L/hold"
"$DLOCK" elect --log-format json -w 5 leader -- true 2>"$L/elect"
"$DLOCK" run --log-format json --url "redis://127.0.0.1:1" job -- true 2>"$L/noserver"
assert_eq "no server: exit 69" "$?" 69
usage_error "a log format other than text or json is a usage error" "--log-format: 'yaml'" run --log-format yaml job true

# The scheduler's lines: the same common fields, and cron's 'job'.
"$DLOCK" every 1s --name tick --log-format json -- true 2>"$L/every" &
T=$!
bg_track $T
if wait_for 10 grep -q '"event":"ran"' "$L/every"; then pass "every: a 'ran' line"; else
  fail "every: a 'ran' line" "$(cat "$L/every")"; fi
kill -TERM "$T"
wait_exit "$T" 10

parse
events "run: acquired, exited, released" run "acquired exited released"
assert_eq "the exit line carries the command's status" "$(field run exited exit)" 3
assert_match "the acquire carries the fence" "$(field run acquired fence)" "^[0-9]+$"
assert_match "the release carries the hold's duration" "$(field run released duration_ms)" "^[0-9]+$"
assert_eq "the lines name the lock" "$(field run released name)" job
events "busy: one 'busy' line" busy "busy"
assert_match "it names the holder" "$(field busy busy holder)" "pid $H "
events "-v: 'waiting' before 'busy'" wait "waiting busy"
events "lost: acquired, lost, exited" lost "acquired lost exited"
assert_match "the loss line says why" "$(field lost lost reason)" "."
events "hold: acquired, released" hold "acquired released"
events "elect: elected, exited, released" elect "elected exited released"
events "no server: one 'error' line" noserver "error"
assert_match "the error line says what failed and where" "$(field noserver error message)" \
  "cannot use Redis at redis://127.0.0.1:1"
assert_match "every: each line is JSON with the common fields, ticks 'ran'" \
  "$(printf '%s\n' "$PARSED" | grep '^every ')" "^every events .*ran"
assert_eq "every: the lines keep cron's 'job' field" "$(field every ran job)" tick

finish
