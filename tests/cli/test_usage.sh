# test_usage.sh - what needs no Redis: help pages (size, and the manual page
# in docs/ being exactly 'dlock help --markdown'), --version, usage errors
# (exit 64 with a one-line hint), durations, commands that cannot run
# (127/126), and an unreachable Redis (69, naming the server).
. "$DLOCK_TEST_LIB"

DOCS=$(cd "$(dirname "$DLOCK_TEST_LIB")/../../docs" && pwd)

# ---- help ----

help_fits() { # help_fits ARGS...: at most 24 lines of at most 80 columns
  local out lines width
  out=$("$DLOCK" "$@") || return 1
  lines=$(printf '%s\n' "$out" | wc -l)
  width=$(printf '%s\n' "$out" | awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }')
  [ "$lines" -le 24 ] && [ "$width" -le 80 ] && [ "$lines" -ge 3 ] ||
    { echo "       $* --help: $lines lines, $width columns" ; return 1; }
}
check "dlock --help fits a terminal" help_fits --help
check "dlock -h fits a terminal" help_fits -h
for cmd in run status list release fence latch cron every demo bench help; do
  check "dlock $cmd --help fits a terminal" help_fits "$cmd" --help
done
check "dlock help run prints the run page" sh -c "'$DLOCK' help run | grep -q 'Usage: dlock run'"
out=$("$DLOCK" run --help); assert_match "run --help names the exit codes" "$out" "79 lost"
assert_match "run --help shows the duration syntax" "$out" "250ms, 10s"
out=$("$DLOCK" --version); assert_match "--version prints the version" "$out" '^dlock [0-9]+\.[0-9]+\.[0-9]+$'

check "docs/dlock.1.md is exactly 'dlock help --markdown'" \
  sh -c "'$DLOCK' help --markdown | diff -u '$DOCS/dlock.1.md' - >&2"
check "--man-markdown is the same page" \
  sh -c "'$DLOCK' --man-markdown | cmp -s - '$DOCS/dlock.1.md'"

# ---- usage errors: exit 64 and exactly one line on stderr with a hint ----

usage_error "no command" "missing command"
usage_error "unknown command" "unknown command 'frobnicate'; see" frobnicate
# Issue 27 item 6: a typo or another tool's word gets a "did you mean".
usage_error "a typo: did you mean run" "unknown command 'rnu' \(did you mean 'dlock run'\?\)" rnu
usage_error "flock's word: did you mean run" "unknown command 'lock' \(did you mean 'dlock run'\?\)" lock
usage_error "a typo: did you mean status" "did you mean 'dlock status'" stauts
usage_error "unlock: did you mean release" "did you mean 'dlock release'" unlock
usage_error "unknown global option" "unknown option '--bogus'" --bogus
usage_error "run: unknown option" "unknown option '--bogus'.*dlock run --help" run --bogus x -- true
usage_error "run: unknown short option" "unknown option '-z'" run -z x -- true
usage_error "run: bad duration" "--wait: bad duration 'x': expected a digit at 'x' \(e.g. 250ms, 10s, 1m30s, 2d\); see 'dlock run --help'" run --wait x name -- true
usage_error "run: negative duration" "bad duration '-5s': a duration cannot be negative" run --wait=-5s name -- true
usage_error "run: unknown unit" "bad duration '5y': unknown unit at 'y'" run --lease 5y name -- true
usage_error "run: units out of order" "bad duration '30s1m': units must go from the largest" run --lease 30s1m name -- true
usage_error "run: a unit twice" "bad duration '1m1m'" run --lease 1m1m name -- true
usage_error "run: a number without unit after a term" "bad duration '1m30': '30' has no unit" run --lease 1m30 name -- true
usage_error "run: more than 30 days in days" "bad duration '31d': longer than the maximum of 30 days" run --lease 31d name -- true
usage_error "run: 30 days and a second" "bad duration '30d1s': longer than the maximum" run --wait 30d1s name -- true
usage_error "every: bad compound duration" "bad duration '1h 2m'" every '1h 2m' --name J -- true
usage_error "run: sub-millisecond fraction" "bad duration '1.5ms'" run --wait 1.5ms name -- true
usage_error "run: overflowing duration" "bad duration" run --wait 99999999999999999999999s name -- true
usage_error "run: longer than 30 days" "bad duration '721h'" run --lease 721h name -- true
usage_error "run: empty duration" "bad duration ''" run --wait= name -- true
usage_error "run: zero lease" "--lease: must be more than 0" run --lease 0 name -- true
usage_error "run: option without its value" "--wait needs a value" run name --wait
usage_error "run: missing command after name" "missing COMMAND after NAME" run name
usage_error "run: -c and another command" "-c takes the whole command as one string" run name -c 'echo a' -- true
usage_error "run: -c and a command without --" "-c takes the whole command as one string" run name -c 'echo a' echo
usage_error "run: -c without its value" "-c needs a value" run name -c
usage_error "run: NAME and --multi" "as NAME or the names with --multi, not both" run a --multi b,c -- true
usage_error "run: --multi with an empty name" "--multi 'a,,b': an empty name" run --multi a,,b -- true
usage_error "latch: missing action" "missing action" latch
usage_error "latch: unknown action" "unknown action 'frob'" latch frob x
usage_error "latch: missing name" "missing latch NAME" latch wait
usage_error "latch: missing count" "missing COUNT" latch set x
usage_error "latch: zero count" "COUNT '0' is not 1..1000000000" latch set x 0
usage_error "latch: --expire without set" "--expire goes with 'set'" latch down x --expire 5s
usage_error "latch: --wait without wait" "--wait goes with 'wait'" latch down x --wait 5s
usage_error "run: missing command" "missing COMMAND" run name --
usage_error "run: missing name" "missing lock NAME" run -- true
usage_error "run: bad --on-lost" "--on-lost: 'maybe'" run --on-lost maybe name -- true
usage_error "run: bad conflict exit code" "conflict-exit-code: '256'" run -E 256 name -- true
usage_error "run: --grace as long as --lease says why" \
  "--grace 2s is too long for --lease 2s: the command gets SIGTERM --grace before the lease could end" \
  run --lease 2s --grace 2s name -- true
usage_error "run: --grace longer than half the default lease" "--grace 16s is too long for --lease 30s" \
  run --grace 16s name -- true
usage_error "run: --grace longer than half --lease, in either order" "give --grace 2.500s or less .half the lease." \
  run --grace 3s --lease 5s name -- true
usage_error "elect: --grace that cannot fit before the deadline" "--grace 2.900s is too long for --lease 3s" \
  elect --lease 3s --grace 2900ms name -- true
usage_error "run: --shell with several words" "--shell takes COMMAND as one string" run --shell name -- echo hi
usage_error "status: missing name" "missing lock NAME" status
usage_error "status: two names" "unexpected argument" status a b
usage_error "release without --force" "only 'release --force NAME'" release name
usage_error "fence: unknown action" "unknown fence action 'frob'" fence frob r 1
usage_error "fence: missing token" "fence check RESOURCE TOKEN" fence check r
usage_error "fence: bad token" "bad token 'abc'" fence check r abc
usage_error "fence: zero token" "bad token '0'" fence check r 0
usage_error "help on an unknown command" "no help on 'frob'" help frob
usage_error "bench: unknown scenario" "no scenario matches" bench --scenario nosuch

# ---- commands that cannot run: like a shell, and before touching Redis ----

CLOSED=$(free_port) # nothing listens there
export DLOCK_URL="redis://127.0.0.1:$CLOSED"
"$DLOCK" run name -- dlock-no-such-command-xyz 2>"$TEST_DIR/err"
assert_eq "missing command exits 127" "$?" 127
assert_match "missing command is named" "$(cat "$TEST_DIR/err")" "dlock-no-such-command-xyz: command not found"
"$DLOCK" run name -- "$TEST_DIR/nope" 2>/dev/null
assert_eq "missing path exits 127" "$?" 127
printf 'echo hi\n' >"$TEST_DIR/notexec"
chmod 644 "$TEST_DIR/notexec"
"$DLOCK" run name -- "$TEST_DIR/notexec" 2>/dev/null
assert_eq "non-executable file exits 126" "$?" 126
"$DLOCK" run name -- "$TEST_DIR" 2>/dev/null
assert_eq "a directory exits 126" "$?" 126

# ---- unreachable Redis: 69, and the message names the server ----

for args in "run name -- true" "run --wait 1.5s --lease 250ms name -- true" \
            "run --wait 10 name -- true" "run --wait 30d --lease 1m30s name -- true" \
            "run --wait 1d12h --lease 1h2m3s4ms --grace 0.5m name -- true" \
            "status name" "list" "release --force name" \
            "fence check r 1"; do
  # shellcheck disable=SC2086
  "$DLOCK" $args >/dev/null 2>"$TEST_DIR/err"
  rc=$?
  if [ "$rc" = 69 ] && grep -q "127.0.0.1:$CLOSED" "$TEST_DIR/err"; then
    pass "unreachable Redis: 'dlock $args' exits 69 naming the server"
  else
    fail "unreachable Redis: 'dlock $args' exits 69 naming the server" \
      "exit $rc" "stderr: $(cat "$TEST_DIR/err")"
  fi
done
"$DLOCK" status --url "redis://:s3cret@127.0.0.1:$CLOSED" name 2>"$TEST_DIR/err"
if grep -q s3cret "$TEST_DIR/err"; then
  fail "error messages mask the password" "$(cat "$TEST_DIR/err")"
else
  pass "error messages mask the password"
fi
"$DLOCK" status --url "nonsense://x" name 2>/dev/null
assert_eq "a malformed URL is a usage error" "$?" 64

# Issue 22 item 10: an unreachable ZooKeeper or PostgreSQL server is named
# as what it is; no message says Redis.
for u in "zk://127.0.0.1:1/ns ZooKeeper" "postgres://127.0.0.1:1/db PostgreSQL"; do
  url=${u% *}
  kind=${u#* }
  "$DLOCK" status --url "$url" name 2>"$TEST_DIR/err"
  rc=$?
  err=$(cat "$TEST_DIR/err")
  assert_eq "unreachable $kind: exit 69" "$rc" 69
  assert_match "unreachable $kind: the message names $kind" "$err" "cannot use $kind at "
  check "unreachable $kind: no message says Redis" sh -c "! grep -q Redis '$TEST_DIR/err'"
done

# Issue 23 item 2: the CLI asks the library's scheme registry which server a
# URL names (dlock_url_backend), so doctor and run name the right one, and
# say what to check, when it is down; an unknown scheme is said to be one.
for u in "zk://127.0.0.1:1/x?connect_timeout=1s ZooKeeper" "postgresql://127.0.0.1:1/x PostgreSQL"; do
  url=${u% *}
  kind=${u#* }
  at=${url%%\?*}
  "$DLOCK" doctor --url "$url" >"$TEST_DIR/out" 2>&1
  assert_eq "doctor, $kind down: exit 1" "$?" 1
  out=$(tr '\n' ' ' <"$TEST_DIR/out")
  assert_match "doctor, $kind down: a connect FAIL naming $kind" "$out" "FAIL +connect +cannot use $kind at $at"
  assert_match "doctor, $kind down: the fix says to check that $kind runs there" "$out" \
    "fix: check that $kind runs there and the URL"
  check "doctor, $kind down: no line names another server" \
    sh -c "! grep -E -q 'Redis|redis|$( [ "$kind" = ZooKeeper ] && echo PostgreSQL || echo ZooKeeper)' '$TEST_DIR/out'"
  "$DLOCK" run --url "$url" name -- true 2>"$TEST_DIR/err"
  assert_eq "run, $kind down: exit 69" "$?" 69
  assert_match "run, $kind down: names $kind" "$(cat "$TEST_DIR/err")" "cannot use $kind at $at"
  check "run, $kind down: no message says Redis" sh -c "! grep -q -i redis '$TEST_DIR/err'"
done
for cmd in "doctor --url bogus://u:s3cret@x" "run --url bogus://u:s3cret@x name -- true"; do
  # shellcheck disable=SC2086
  "$DLOCK" $cmd >"$TEST_DIR/out" 2>&1
  assert_eq "unknown scheme: '${cmd%% *}' is a usage error" "$?" 64
  assert_match "unknown scheme: '${cmd%% *}' says so and lists the schemes" "$(tr '\n' ' ' <"$TEST_DIR/out")" \
    "unknown scheme.*redis://.*zk://.*postgres://"
  check "unknown scheme: '${cmd%% *}' does not call it a Redis URL" sh -c "! grep -q Redis '$TEST_DIR/out'"
  check "unknown scheme: '${cmd%% *}' masks the password" sh -c "! grep -q s3cret '$TEST_DIR/out'"
done

# Issue 27 item 6: with no URL anywhere, the message says the default was
# used (unless a Redis happens to listen on 6379 here: nothing to test then).
env -u DLOCK_URL "$DLOCK" status name >/dev/null 2>"$TEST_DIR/err"
rc=$?
if [ "$rc" = 69 ]; then
  assert_match "no URL given: says the default redis://127.0.0.1:6379 was used" \
    "$(cat "$TEST_DIR/err")" "no --url, .*DLOCK_URL or config file named a server, so the default redis://127.0.0.1:6379 was used"
fi
"$DLOCK" status name >/dev/null 2>"$TEST_DIR/err"
check "a URL given: no word of the default" sh -c "! grep -q 'the default' '$TEST_DIR/err'"

# Issue 27 item 3: a port where another server listens (a web server) is
# "unavailable" (69), named as not the server the URL expects, not 70 (a bug).
WEB_PORT=$(free_port)
python3 -m http.server "$WEB_PORT" --bind 127.0.0.1 --directory "$TEST_DIR" >/dev/null 2>&1 &
bg_track $!
wait_for 20 sh -c "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", $WEB_PORT), 1)' 2>/dev/null"
"$DLOCK" status --url "redis://127.0.0.1:$WEB_PORT" name >/dev/null 2>"$TEST_DIR/err"
assert_eq "a web server's port: exit 69 (unavailable), not 70" "$?" 69
assert_match "... and the message asks whether it is Redis" "$(tr '\n' ' ' <"$TEST_DIR/err")" \
  "127.0.0.1:$WEB_PORT.*is this a Redis server"

finish
