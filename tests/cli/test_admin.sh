# test_admin.sh - the read and admin commands against a real redis-server:
# status (text and --json, free and held, holder details), list (patterns,
# --json), release --force, and fence check (0 admitted, 1 stale), including
# the $DLOCK_FENCE pipeline the help shows.
. "$DLOCK_TEST_LIB"
start_redis

json_field() { # json_field FIELD < json
  python3 -c 'import json,sys; d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d=d[k]
print(json.dumps(d))' "$1"
}

# ---- a free lock ----

out=$("$DLOCK" status free.lock)
assert_eq "status of a free lock exits 0" "$?" 0
assert_match "status of a free lock says free" "$out" "state: +free"
"$DLOCK" status --json free.lock >"$TEST_DIR/j"
check "status --json of a free lock is valid JSON" is_json <"$TEST_DIR/j"
assert_eq "status --json: held is false" "$(json_field held <"$TEST_DIR/j")" "false"
assert_eq "list with nothing held prints nothing" "$("$DLOCK" list)" ""
assert_eq "list --json with nothing held is []" "$("$DLOCK" list --json | tr -d ' \n')" "[]"

# ---- held locks ----

"$DLOCK" run --lease 20s 'jobs:report' -- sh -c "echo \$\$ >'$TEST_DIR/c1.pid'; exec sleep 600" &
H1=$!
bg_track $H1
"$DLOCK" run 'jobs:"quoted" name' -- sleep 600 &
H2=$!
bg_track $H2
"$DLOCK" run other -- sleep 600 &
H3=$!
bg_track $H3
check "three holders took their locks" wait_for 10 sh -c "[ \$('$DLOCK' list | wc -l) = 3 ]"

out=$("$DLOCK" status jobs:report)
assert_match "status: held" "$out" "state: +held"
assert_match "status: lease left, at most 20s" "$out" "lease: +[0-9.]+s left"
assert_match "status: the fence" "$out" "fence: +[0-9]+"
assert_match "status: holder pid and host" "$out" "holder: +pid $H1 on $(hostname)"
assert_match "status: the command" "$out" "command: +sh -c 'echo"
assert_match "status: since when" "$out" "since: +[0-9]{4}-[0-9]{2}-[0-9]{2} .*ago"

"$DLOCK" status --json jobs:report >"$TEST_DIR/j"
check "status --json is valid JSON" is_json <"$TEST_DIR/j"
assert_eq "status --json: held" "$(json_field held <"$TEST_DIR/j")" "true"
assert_eq "status --json: holder pid" "$(json_field holder.pid <"$TEST_DIR/j")" "$H1"
assert_eq "status --json: holder host" "$(json_field holder.host <"$TEST_DIR/j")" "\"$(hostname)\""
ttl=$(json_field ttl_ms <"$TEST_DIR/j")
check "status --json: 0 < ttl_ms <= 20000 ($ttl)" test "$ttl" -gt 0 -a "$ttl" -le 20000
fence=$(json_field fence <"$TEST_DIR/j")
check "status --json: fence > 0" test "$fence" -gt 0
"$DLOCK" status --json 'jobs:"quoted" name' >"$TEST_DIR/j"
check "status --json with quotes in the name is valid JSON" is_json <"$TEST_DIR/j"
assert_eq "status --json: the quoted name survives" "$(json_field name <"$TEST_DIR/j")" '"jobs:\"quoted\" name"'

out=$("$DLOCK" list)
assert_eq "list shows the held locks, sorted" "$out" "$(printf 'jobs:"quoted" name\njobs:report\nother')"
assert_eq "list with a pattern" "$("$DLOCK" list 'jobs:*' | wc -l | tr -d ' ')" 2
assert_eq "list with a pattern that matches nothing" "$("$DLOCK" list 'nope*')" ""
"$DLOCK" list --json >"$TEST_DIR/j"
check "list --json is valid JSON" is_json <"$TEST_DIR/j"
assert_eq "list --json has 3 entries" "$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' <"$TEST_DIR/j")" 3
assert_eq "list --json entries carry the holder" \
  "$(python3 -c 'import json,sys; print(sorted(e["holder"]["pid"] for e in json.load(sys.stdin)))' <"$TEST_DIR/j")" \
  "$(python3 -c 'import sys; print(sorted(int(a) for a in sys.argv[1:]))' $H1 $H2 $H3)"

# ---- release --force ----

out=$("$DLOCK" release --force other)
assert_eq "release --force of a held lock exits 0" "$?:$out" "0:released 'other'"
check "the key is gone" key_gone other
wait_exit "$H3" 20
assert_eq "its holder notices and exits 79" "$EXIT_CODE" 79
out=$("$DLOCK" release --force other)
assert_eq "release --force of a free lock exits 0 and says so" "$?:$out" "0:'other' was not held"
assert_eq "release --force -q prints nothing" "$("$DLOCK" release --force -q other)" ""

# A key dlock did not take: an application's data is kept, another library's
# lock goes only with --foreign.
rcli SET app:config precious >/dev/null
"$DLOCK" release --force app:config >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "release --force of a key dlock did not take exits 64" "$?" 64
assert_match "it says the key is not dlock's and names --foreign" "$(cat "$TEST_DIR/err")" \
  "'app:config'.*not set by dlock.*--foreign"
assert_eq "the application's key is untouched" "$(rcli GET app:config)" "precious"
rcli SET pylock 0123456789abcdef0123456789abcdef PX 60000 >/dev/null
"$DLOCK" release --force pylock 2>/dev/null
assert_eq "a redis-py lock key is refused without --foreign" "$?:$(rcli EXISTS pylock)" "64:1"
out=$("$DLOCK" release --force --foreign pylock)
assert_eq "release --force --foreign deletes it" "$?:$out:$(rcli EXISTS pylock)" "0:released 'pylock':0"
"$DLOCK" run --lease 20s fl -- sleep 600 &
H4=$!
bg_track $H4
check "a holder took fl" wait_for 10 key_exists fl
out=$("$DLOCK" release --force --foreign fl)
assert_eq "--foreign also releases a dlock lock" "$?:$out" "0:released 'fl'"
wait_exit "$H4" 20
assert_eq "its holder exits 79" "$EXIT_CODE" 79

# ---- fence check ----

out=$("$DLOCK" fence check res 100)
assert_eq "fence check: first token admitted (0)" "$?:$out" "0:admitted: token 100 for 'res' (highest seen: 100)"
"$DLOCK" fence check res 100 >/dev/null
assert_eq "fence check: the same token again is admitted (0)" "$?" 0
"$DLOCK" fence check -q res 101
assert_eq "fence check: a higher token is admitted (0)" "$?" 0
out=$("$DLOCK" fence check res 99)
assert_eq "fence check: a lower token is stale (1)" "$?" 1
assert_match "fence check: says stale" "$out" "^stale"
assert_eq "fence check -q: quiet" "$("$DLOCK" fence check -q res 5)" ""
"$DLOCK" fence check other-res 99
assert_eq "fence check: resources are independent" "$?" 0

# The pipeline from the help: the holder writes only while its fence is current.
"$DLOCK" run pipe -- sh -c "'$DLOCK' fence check -q report \"\$DLOCK_FENCE\" && echo written >'$TEST_DIR/report'"
assert_eq "pipeline: a holder's \$DLOCK_FENCE is admitted" "$?:$(cat "$TEST_DIR/report")" "0:written"
"$DLOCK" fence check -q report 1
assert_eq "pipeline: an older fence is then stale" "$?" 1

# ---- the holders end cleanly ----

kill -TERM "$H1" "$H2"
wait_exit "$H1" 15
assert_eq "holder 1 ends on SIGTERM (143)" "$EXIT_CODE" 143
wait_exit "$H2" 15
assert_eq "holder 2 ends on SIGTERM (143)" "$EXIT_CODE" 143
check "holder 1's command is gone" pid_gone "$(cat "$TEST_DIR/c1.pid")"
assert_eq "no lock is left" "$("$DLOCK" list)" ""

# ---- names that are not UTF-8, and long UTF-8 commands: --json stays valid ----

"$DLOCK" run "$(printf 'bad\377\376')" -- sh -c "echo x >'$TEST_DIR/bad.started'; exec sleep 600" &
H3=$!
bg_track $H3
"$DLOCK" run utf8 -- sh -c "echo x >'$TEST_DIR/utf8.started'; exec sleep 600" xx "$(printf 'é%.0s' $(seq 600))" &
H4=$!
bg_track $H4
check "odd holders started" wait_for 10 sh -c "test -e '$TEST_DIR/bad.started' && test -e '$TEST_DIR/utf8.started'"
"$DLOCK" list --json >"$TEST_DIR/j"
check "list --json with a name that is not UTF-8 is valid JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$TEST_DIR/j"
"$DLOCK" status --json utf8 >"$TEST_DIR/j"
check "status --json of a command cut inside a character is valid JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1], encoding="utf-8"))' "$TEST_DIR/j"
kill -TERM "$H3" "$H4"
wait_exit "$H3" 15
wait_exit "$H4" 15

# ---- closed stdout: nothing of ours may reach the Redis connection ----

errs=$(rcli INFO stats | sed -n 's/^total_error_replies:\([0-9]*\).*/\1/p')
"$DLOCK" status free.lock >&- 2>&-
errs2=$(rcli INFO stats | sed -n 's/^total_error_replies:\([0-9]*\).*/\1/p')
assert_eq "status with stdout closed causes no error reply in Redis" "$errs2" "$errs"

# ---- --url '' means "not given", as everywhere ----

out=$("$DLOCK" status --url= free.lock 2>&1)
assert_match "--url '' falls back to \$DLOCK_URL" "$out" "state: +free"

# dlock prune (issue 22 item 10): Redis keeps nothing to prune, and says so.
out=$("$DLOCK" prune 2>&1)
assert_eq "prune on Redis exits 0" "$?" 0
assert_match "prune on Redis says there is nothing to prune" "$out" "nothing to prune on .*redis"

finish
