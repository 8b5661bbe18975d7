# test_ops.sh - what an operator meets: messages that name the holder and
# report the wait (-v), "deleted by another client" after a forced release,
# exit codes (--lost-exit-code; a name that is another key, a database the
# server lacks: 64, never 70), --prefix and DLOCK_PREFIX on every command,
# the config files and 'dlock config show', the scheduler's wording, fence
# check's highest token and --json, and 'dlock version'.
. "$DLOCK_TEST_LIB"
start_redis

# ---- -v reports the wait: at once, then every 10 s, naming the holder ----

"$DLOCK" run busy -- sleep 600 &
HOLDER=$!
bg_track $HOLDER
check "holder took the lock" wait_for 10 key_exists busy
start=$(date +%s)
"$DLOCK" run -v --wait 11500ms busy -- true 2>"$TEST_DIR/err"
rc=$?
took=$(( $(date +%s) - start ))
assert_eq "-v: busy for the whole wait exits 75" "$rc" 75
err=$(cat "$TEST_DIR/err")
assert_match "-v: one line when the wait starts, naming the holder" "$(sed -n 1p "$TEST_DIR/err")" \
  "^dlock: waiting for 'busy', held by pid $HOLDER on .+, command: sleep 600; since .+; lease .+ left; 1 waiting$"
assert_match "-v: a line after 10 s of waiting" "$err" "still waiting for 'busy' after 10(\.[0-9]+)?s, held by pid $HOLDER "
assert_eq "-v: exactly one start line and one 10 s line before giving up" \
  "$(grep -c 'waiting for' "$TEST_DIR/err")" 2
assert_match "the give-up line names the holder too" "$(tail -n 1 "$TEST_DIR/err")" \
  "'busy' is held by pid $HOLDER .*; gave up after 11.5"
check "the wait took about --wait (${took}s)" test "$took" -ge 11 -a "$took" -le 20
"$DLOCK" run --wait 0 busy -- true 2>"$TEST_DIR/err"
assert_eq "no -v, --wait 0: no waiting line" "$(grep -c 'waiting' "$TEST_DIR/err")" 0

# ---- the holder learns "deleted by another client" ----

"$DLOCK" run --lease 1500ms lostme -- sleep 30 2>"$TEST_DIR/lost.err" &
DL=$!
bg_track $DL
check "a holder with a short lease" wait_for 10 key_exists lostme
"$DLOCK" release --force lostme >/dev/null
wait_exit "$DL" 20
assert_eq "lost by a forced release: 79" "$EXIT_CODE" 79
assert_match "the reason: another client deleted the key" "$(cat "$TEST_DIR/lost.err")" \
  "^dlock: lock 'lostme' lost: another client deleted the key with a forced release; sending SIGTERM"
check "no doubled parentheses in the reason" sh -c "! grep -q '([^)]*(' '$TEST_DIR/lost.err'"

"$DLOCK" run --lease 1500ms --lost-exit-code 3 gone -- sleep 30 2>"$TEST_DIR/gone.err" &
DL=$!
bg_track $DL
check "another holder" wait_for 10 key_exists gone
rcli DEL gone >/dev/null
wait_exit "$DL" 20
assert_eq "--lost-exit-code 3 replaces 79" "$EXIT_CODE" 3
assert_match "a key deleted without dlock: 'the key is gone'" "$(cat "$TEST_DIR/gone.err")" \
  "lost: the key is gone: its lease expired, or it was deleted without dlock; sending SIGTERM"
usage_error "--lost-exit-code takes 0..255" "lost-exit-code: '256'" run --lost-exit-code 256 x -- true

# ---- a name that is another key: 64 at once, never a wait or 70 ----

rcli SET appdata hello >/dev/null
start=$(date +%s)
"$DLOCK" run --wait 30s appdata -- touch "$TEST_DIR/ran" 2>"$TEST_DIR/err"
rc=$?
assert_eq "an application key (no TTL, no metadata): exit 64" "$rc" 64
check "... at once, not after the 30 s wait" test $(( $(date +%s) - start )) -le 5
assert_match "... saying it is not a dlock lock" "$(cat "$TEST_DIR/err")" "not a dlock lock"
check "... without running the command" test ! -e "$TEST_DIR/ran"
assert_eq "... and the key is left alone" "$(rcli GET appdata)" "hello"
out=$("$DLOCK" status appdata)
assert_match "status says it is not a dlock lock" "$out" "state: +not a dlock lock"
rcli RPUSH alist x >/dev/null
"$DLOCK" run --wait 1s alist -- true 2>"$TEST_DIR/err"
assert_eq "a key of another type: exit 64, not 70" "$?" 64
assert_match "... naming the type problem and what to do" "$(cat "$TEST_DIR/err")" \
  "type dlock does not use.*pick another lock name"
"$DLOCK" status --url "$DLOCK_URL/99" x 2>"$TEST_DIR/err"
assert_eq "a database the server lacks (/99): 64, not 70" "$?" 64
assert_match "... saying so" "$(cat "$TEST_DIR/err")" "no such database"
assert_match "... and which" "$(cat "$TEST_DIR/err")" "SELECT 99 failed.*database 99, which this server does not offer"

# ---- --prefix and DLOCK_PREFIX on every command ----

"$DLOCK" run --prefix app pfx -- sh -c "redis-cli -p $REDIS_PORT EXISTS app:pfx" >"$TEST_DIR/out"
assert_eq "run --prefix app: the key is app:pfx" "$(cat "$TEST_DIR/out")" 1
out=$("$DLOCK" run --prefix app envp -- sh -c 'echo "$DLOCK_PREFIX"; dlock_fence=$DLOCK_FENCE; "$0" fence check nested "$dlock_fence"' "$DLOCK")
assert_eq "the command gets DLOCK_PREFIX, so a nested dlock uses it" "$(printf '%s' "$out" | head -n 1)" "app"
check "... the nested fence check wrote under the prefix" key_exists "{app:nested}:guard"
"$DLOCK" run --prefix app: held -- sleep 30 &
bg_track $!
check "run --prefix app: holds app:held" wait_for 10 key_exists app:held
check "no key without the prefix" key_gone held
assert_match "status --prefix app" "$("$DLOCK" status --prefix app held)" "state: +held"
assert_match "DLOCK_PREFIX=app: status" "$(DLOCK_PREFIX=app "$DLOCK" status held)" "state: +held"
assert_match "status without the prefix: free" "$("$DLOCK" status held)" "state: +free"
assert_eq "list --prefix app" "$("$DLOCK" list --prefix app)" "held"
"$DLOCK" run --prefix app -w0 held -- true 2>/dev/null
assert_eq "run --prefix: busy on the prefixed name" "$?" 75
"$DLOCK" run --prefix other -w0 held -- true
assert_eq "another prefix is another lock" "$?" 0
"$DLOCK" fence check --prefix app res 5 >/dev/null
check "fence check --prefix app: the guard key is {app:res}:guard" key_exists "{app:res}:guard"
assert_eq "release --force --prefix app" "$("$DLOCK" release --force --prefix app held)" "released 'held'"
check "the prefixed lock is gone" wait_for 10 key_gone app:held
out=$("$DLOCK" cron --history --prefix app nojob 2>&1)
assert_eq "cron --history --prefix: accepted" "$?" 0
"$DLOCK" status --prefix 'a{b' x 2>"$TEST_DIR/err"
assert_eq "a prefix with a brace: 64" "$?" 64
assert_match "... naming the prefix" "$(cat "$TEST_DIR/err")" "key prefix 'a\{b' contains '\{'"

# ---- config files, environment, flags: precedence and 'config show' ----

mkdir -p "$XDG_CONFIG_HOME/dlock"
cat >"$DLOCK_SYSTEM_CONFIG" <<EOF
# system defaults
url = redis://127.0.0.1:1/
prefix = sys
command_timeout = 3s
EOF
cat >"$XDG_CONFIG_HOME/dlock/config" <<EOF
url = redis://admin:s3cret@127.0.0.1:$REDIS_PORT
   # indented comment
tls_ca_file = /etc/ssl/ca.pem
EOF
saved_url=$DLOCK_URL
unset DLOCK_URL
out=$("$DLOCK" config show)
assert_match "config show: url from the user's file, password masked" "$out" \
  "^url +redis://admin:\*\*\*@127.0.0.1:$REDIS_PORT +# $XDG_CONFIG_HOME/dlock/config:1$"
check "config show never prints the password" sh -c "! printf '%s' '$out' | grep -q s3cret"
assert_match "config show: prefix from the system file" "$out" "prefix +sys: +# $DLOCK_SYSTEM_CONFIG:3"
assert_match "config show: a timeout from the system file" "$out" "command_timeout +3s +# $DLOCK_SYSTEM_CONFIG:4"
assert_match "config show: defaults say so" "$out" "connect_timeout +2s +# default"
out=$(DLOCK_PREFIX=env "$DLOCK" config show --prefix flag)
assert_match "a flag beats the environment" "$out" "prefix +flag: +# --prefix"
out=$(DLOCK_PREFIX=env DLOCK_URL=redis://127.0.0.1:2 "$DLOCK" config show)
assert_match "the environment beats the files (prefix)" "$out" "prefix +env: +# DLOCK_PREFIX"
assert_match "the environment beats the files (url)" "$out" "url +redis://127.0.0.1:2 +# DLOCK_URL"
check "config show --json is JSON" sh -c "'$DLOCK' config show --json | python3 -c 'import json,sys; json.load(sys.stdin)'"
# A CA file on a redis:// URL is an error (64): keep the file to what works.
printf 'url = redis://admin:s3cret@127.0.0.1:%s\n' "$REDIS_PORT" >"$XDG_CONFIG_HOME/dlock/config"
"$DLOCK" run x -- true 2>/dev/null
assert_eq "a wrong password from the user's file: 69" "$?" 69
rcli ACL SETUSER admin on '>s3cret' '~*' '&*' '+@all' >/dev/null
"$DLOCK" run cfglock -- sh -c "redis-cli -p $REDIS_PORT EXISTS sys:cfglock; echo \"\$DLOCK_URL\"" \
  >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "run uses the files' url (with its user) and prefix" "$?/$(sed -n 1p "$TEST_DIR/out")" "0/1"
# A password from a file is not handed to the command (docs/cli.md, DLOCK_URL).
assert_eq "... and gives the command that URL, its password masked" "$(sed -n 2p "$TEST_DIR/out")" \
  "redis://admin:***@127.0.0.1:$REDIS_PORT"
echo "url redis://x" >"$XDG_CONFIG_HOME/dlock/config"
"$DLOCK" status x 2>"$TEST_DIR/err"
assert_eq "bad syntax: exit 64" "$?" 64
assert_match "bad syntax: FILE:LINE and what was expected" "$(cat "$TEST_DIR/err")" \
  "^dlock: $XDG_CONFIG_HOME/dlock/config:1: expected 'key = value'"
printf '# ok\nurl = redis://127.0.0.1:%s\nlock_timeout = 3s\n' "$REDIS_PORT" >"$XDG_CONFIG_HOME/dlock/config"
"$DLOCK" config show 2>"$TEST_DIR/err" >/dev/null
assert_eq "unknown key: exit 64" "$?" 64
assert_match "unknown key: FILE:LINE and the key" "$(cat "$TEST_DIR/err")" "config:3: unknown key 'lock_timeout'"
printf 'connect_timeout = soon\n' >"$XDG_CONFIG_HOME/dlock/config"
"$DLOCK" run x -- true 2>"$TEST_DIR/err"
assert_eq "bad duration: exit 64 before anything runs" "$?" 64
assert_match "bad duration: FILE:LINE" "$(cat "$TEST_DIR/err")" "config:1: connect_timeout: 'soon'"
rm -f "$XDG_CONFIG_HOME/dlock/config" "$DLOCK_SYSTEM_CONFIG"
export DLOCK_URL=$saved_url

# ---- the scheduler's wording ----

"$DLOCK" every 1s --name failing -- sh -c 'exit 2' 2>"$TEST_DIR/every.err" &
EV=$!
bg_track $EV
check "a failing run is logged" wait_for 15 grep -q "ran on" "$TEST_DIR/every.err"
kill -TERM $EV
wait_exit $EV 20
assert_match "a failed run says 'failed (exit 2)'" "$(grep 'ran on' "$TEST_DIR/every.err" | head -n 1)" \
  "ran on .+, fence [0-9]+, .+, failed \(exit 2\)$"
"$DLOCK" every 1s --name okjob -- true 2>"$TEST_DIR/every.err" &
EV=$!
bg_track $EV
check "a good run is logged" wait_for 15 grep -q "ran on" "$TEST_DIR/every.err"
kill -TERM $EV
wait_exit $EV 20
assert_match "a good run says 'exit 0', not failed" "$(grep 'ran on' "$TEST_DIR/every.err" | head -n 1)" ", exit 0$"
"$DLOCK" every 1s --name poolbusy -- sleep 2.5 2>"$TEST_DIR/every.err" &
EV=$!
bg_track $EV
check "a tick finds the one worker busy" wait_for 15 grep -q "skipped, pool" "$TEST_DIR/every.err"
kill -TERM $EV
wait_exit $EV 20
line=$(grep "skipped, pool" "$TEST_DIR/every.err" | head -n 1)
assert_match "single node: the pool skip says this node did not claim it" "$line" \
  "skipped, pool: all 1 worker\(s\) of this node busy, so this node did not claim it"
check "... and does not speak of other nodes as if there were some" sh -c "! grep -q 'left to other nodes' '$TEST_DIR/every.err'"
usage_error "an 8-field expression names the fields cron takes" "expected 6 or 7 fields" \
  cron --next '* * * * * * * *'
out=$("$DLOCK" cron --next @daily --from 2026-03-18T10:20:30Z -n 2)
assert_eq "@daily" "$out" "2026-03-19T00:00:00+00:00
2026-03-20T00:00:00+00:00"
assert_eq "@hourly" "$("$DLOCK" cron --next @hourly --from 2026-03-18T10:20:30Z -n 1)" "2026-03-18T11:00:00+00:00"
assert_eq "@weekly: Sunday" "$("$DLOCK" cron --next @weekly --from 2026-03-18T10:20:30Z -n 1)" "2026-03-22T00:00:00+00:00"
assert_eq "@monthly" "$("$DLOCK" cron --next @monthly --from 2026-03-18T10:20:30Z -n 1)" "2026-04-01T00:00:00+00:00"
assert_eq "@yearly" "$("$DLOCK" cron --next @yearly --from 2026-03-18T10:20:30Z -n 1)" "2027-01-01T00:00:00+00:00"
usage_error "an unknown macro is named" "unknown cron macro.*@hourly" cron --next @reboot

# ---- fence check: the highest token, --json ----

assert_eq "fence check prints the highest token" "$("$DLOCK" fence check fres 100)" \
  "admitted: token 100 for 'fres' (highest seen: 100)"
out=$("$DLOCK" fence check fres 40)
assert_eq "stale: exit 1" "$?" 1
assert_eq "stale names the highest" "$out" "stale: token 40 for 'fres' is older than 100, the highest seen"
out=$("$DLOCK" fence check --json fres 40)
assert_eq "--json: stale exits 1 too" "$?" 1
assert_eq "--json" "$out" '{"resource": "fres", "token": 40, "admitted": false, "highest": 100}'
assert_eq "--json admitted" "$("$DLOCK" fence check --json fres 101)" \
  '{"resource": "fres", "token": 101, "admitted": true, "highest": 101}'

# ---- dlock version ----

out=$("$DLOCK" version)
assert_eq "dlock version exits 0" "$?" 0
assert_match "dlock version prints the version" "$out" "^dlock [0-9]+\.[0-9]+\.[0-9]+"
assert_eq "--version says the same" "$("$DLOCK" --version)" "$out"
usage_error "version takes no argument" "unexpected argument 'x'" version x

# ---- issue 27 item 3: exit codes scripts can act on ----

"$DLOCK" status -q qname >"$TEST_DIR/out" 2>&1
assert_eq "status -q of a free lock exits 1" "$?" 1
assert_eq "status -q prints nothing" "$(cat "$TEST_DIR/out")" ""
"$DLOCK" run qname -- sh -c "touch '$TEST_DIR/qheld'; sleep 60" &
QH=$!
bg_track $QH
check "a holder of qname runs" wait_for 20 test -e "$TEST_DIR/qheld"
"$DLOCK" status -q qname >"$TEST_DIR/out" 2>&1
assert_eq "status -q of a held lock exits 0" "$?" 0
assert_eq "... and prints nothing" "$(cat "$TEST_DIR/out")" ""
kill -TERM $QH
wait_exit $QH 20
usage_error "status -q does not go with --json" "does not go with --json" status -q --json qname
usage_error "list -q is refused" "-q is for 'dlock status NAME'" list -q

# A server that answers BUSY (a script past its time limit) is "unavailable,
# retry later" (69), not an internal error (70).
rcli CONFIG SET busy-reply-threshold 100 >/dev/null
rcli EVAL 'while true do end' 0 >/dev/null 2>&1 &
BUSY_CLI=$!
bg_track $BUSY_CLI
check "the server answers BUSY" wait_for 20 sh -c "redis-cli -h 127.0.0.1 -p $REDIS_PORT PING 2>&1 | grep -q BUSY"
"$DLOCK" status busyname >/dev/null 2>"$TEST_DIR/err"
assert_eq "a BUSY server: exit 69" "$?" 69
assert_match "a BUSY server: the message says it is not ready" "$(tr '\n' ' ' <"$TEST_DIR/err")" \
  "not ready.*BUSY"
rcli SCRIPT KILL >/dev/null 2>&1
check "the script is killed" wait_for 20 sh -c "[ \"\$(redis-cli -h 127.0.0.1 -p $REDIS_PORT PING 2>&1)\" = PONG ]"
rcli CONFIG SET busy-reply-threshold 5000 >/dev/null

finish
