# test_doctor.sh - "dlock doctor" against real redis-servers (text, --json,
# exit 0/1: eviction, persistence, a replica, clock skew under libfaketime,
# ACL rights), and the warning every command prints once when the server's
# maxmemory-policy can evict lock keys.
. "$DLOCK_TEST_LIB"
start_redis

json_level() { # json_level NAME < json: the level of check NAME
  python3 -c 'import json,sys; d=json.load(sys.stdin)
print([c["level"] for c in d["checks"] if c["name"] == sys.argv[1]][0])' "$1"
}

# ---- a well-set server: noeviction, nothing to warn about ----

"$DLOCK" status x >/dev/null 2>"$TEST_DIR/err"
assert_eq "noeviction: no warning on stderr" "$(cat "$TEST_DIR/err")" ""
"$DLOCK" doctor >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "doctor on a sound server exits 0" "$?" 0
out=$(cat "$TEST_DIR/out")
assert_match "doctor names the server" "$out" "^dlock doctor: 127.0.0.1:$REDIS_PORT"
assert_match "eviction OK" "$out" "OK +eviction +maxmemory-policy noeviction"
assert_match "no persistence is a WARN with the fix" "$(printf '%s' "$out" | tr '\n' ' ')" \
  "WARN +persistence +no persistence.*fix: run 'CONFIG SET appendonly yes'"
assert_match "replication OK without replicas" "$out" "OK +replication"
assert_match "clock OK" "$out" "OK +clock +server clock [+-][0-9]+ ms from ours"
assert_match "scripts OK" "$out" "OK +scripts +user 'default' took and released the lock 'dlock-doctor'"
assert_match "pubsub OK" "$out" "OK +pubsub"
assert_eq "six checks" "$(grep -cE '^(OK|WARN|FAIL) ' "$TEST_DIR/out")" 6
"$DLOCK" doctor --json >"$TEST_DIR/j"
assert_eq "doctor --json exits 0" "$?" 0
check "doctor --json is valid JSON" is_json <"$TEST_DIR/j"
assert_eq "--json: ok is true" "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["ok"])' <"$TEST_DIR/j")" True
assert_eq "--json: six named checks" \
  "$(python3 -c 'import json,sys; print(",".join(c["name"] for c in json.load(sys.stdin)["checks"]))' <"$TEST_DIR/j")" \
  "eviction,persistence,replication,clock,scripts,pubsub"
check "--json: the clock check carries skew_ms" \
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=[c for c in d["checks"] if c["name"]=="clock"][0]; assert abs(c["skew_ms"]) < 1000' "$TEST_DIR/j"
assert_eq "the probe lock is not left held" "$(rcli EXISTS dlock-doctor)" 0

# ---- an evicting policy ----

rcli CONFIG SET maxmemory-policy volatile-lru >/dev/null
"$DLOCK" status x >/dev/null 2>"$TEST_DIR/err"
assert_eq "volatile-lru: status still exits 0" "$?" 0
assert_eq "volatile-lru: exactly one warning line" "$(wc -l <"$TEST_DIR/err" | tr -d ' ')" 1
assert_match "the warning names the policy and the fix" "$(cat "$TEST_DIR/err")" \
  "^dlock: warning: 127.0.0.1:$REDIS_PORT: maxmemory-policy is volatile-lru: .*CONFIG SET maxmemory-policy noeviction"
"$DLOCK" run w -- true 2>"$TEST_DIR/err"
assert_eq "run warns once too" "$(grep -c 'warning: .*volatile-lru' "$TEST_DIR/err")" 1
rcli CONFIG SET maxmemory-policy allkeys-lfu >/dev/null
"$DLOCK" list 2>"$TEST_DIR/err" >/dev/null
assert_match "allkeys-lfu is warned about" "$(cat "$TEST_DIR/err")" "maxmemory-policy is allkeys-lfu"
"$DLOCK" doctor >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "doctor: an evicting policy without maxmemory is a WARN (exit 0)" "$?" 0
assert_match "doctor: says nothing is evicted yet" "$(cat "$TEST_DIR/out")" "WARN +eviction +maxmemory-policy allkeys-lfu, but maxmemory is 0"
assert_eq "doctor prints no extra warning on stderr" "$(cat "$TEST_DIR/err")" ""
rcli CONFIG SET maxmemory 200mb >/dev/null
"$DLOCK" doctor >"$TEST_DIR/out"
assert_eq "doctor: an evicting policy with maxmemory FAILs (exit 1)" "$?" 1
assert_match "doctor: FAIL line with the fix" "$(cat "$TEST_DIR/out")" \
  "FAIL +eviction +maxmemory-policy allkeys-lfu with maxmemory 209715200 bytes"
"$DLOCK" doctor --json >"$TEST_DIR/j"
assert_eq "doctor --json exits 1 too" "$?" 1
assert_eq "--json: eviction FAIL" "$(json_level eviction <"$TEST_DIR/j")" FAIL
assert_eq "--json: ok is false" "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["ok"])' <"$TEST_DIR/j")" False
rcli CONFIG SET maxmemory 0 >/dev/null
rcli CONFIG SET maxmemory-policy noeviction >/dev/null

# ---- persistence ----

rcli CONFIG SET appendonly yes >/dev/null
assert_eq "AOF on: persistence OK" "$("$DLOCK" doctor --json | json_level persistence)" OK
rcli CONFIG SET appendonly no >/dev/null

# ---- clock skew (libfaketime moves only this dlock's wall clock) ----

if grep -qa __tsan_init "$DLOCK"; then
  # libfaketime wraps pthread_cond_wait, which hides lock events from TSan
  # and makes it report false races; the other builds run this part.
  echo "skip - clock skew under libfaketime (ThreadSanitizer build)"
elif command -v faketime >/dev/null; then
  # libfaketime is preloaded ahead of a sanitizer runtime; that is fine here.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f "+20s" "$DLOCK" doctor --json >"$TEST_DIR/j"
  assert_eq "20 s ahead: clock WARN, exit 0" "$?:$(json_level clock <"$TEST_DIR/j")" "0:WARN"
  FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f "-300s" "$DLOCK" doctor >"$TEST_DIR/out"
  assert_eq "5 min behind: exit 1" "$?" 1
  assert_match "5 min behind: clock FAIL with the skew and the fix" "$(tr '\n' ' ' <"$TEST_DIR/out")" \
    "FAIL +clock +server clock \+(29[0-9]|30[0-9])[0-9]{3} ms from ours.*fix: synchronise"
else
  fail "faketime is needed for the clock test (apt-get install faketime)"
fi

# ---- a replica ----

REP_PORT=$(free_port)
redis-server --port "$REP_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TEST_DIR" \
  --dbfilename rep.rdb --daemonize no --logfile "$TEST_DIR/rep.log" --replicaof 127.0.0.1 "$REDIS_PORT" \
  >/dev/null 2>&1 &
REP_PID=$!
bg_track $REP_PID
check "the replica answers" wait_for 10 sh -c "[ \"\$(redis-cli -p $REP_PORT PING 2>/dev/null)\" = PONG ]"
"$DLOCK" doctor --url "redis://127.0.0.1:$REP_PORT" >"$TEST_DIR/out"
assert_eq "doctor on a replica exits 1" "$?" 1
assert_match "doctor on a replica: replication FAIL naming the master" "$(cat "$TEST_DIR/out")" \
  "FAIL +replication +127.0.0.1:$REP_PORT is a replica of 127.0.0.1:$REDIS_PORT"
check "the master sees its replica" wait_for 10 sh -c "'$DLOCK' doctor | grep -q '1 replica'"
assert_match "replicas without min-replicas-to-write: WARN with the fix" "$("$DLOCK" doctor | tr '\n' ' ')" \
  "WARN +replication +1 replica\(s\), min-replicas-to-write 0.*fix: run 'CONFIG SET min-replicas-to-write 1'"
rcli CONFIG SET min-replicas-to-write 1 >/dev/null
assert_eq "with min-replicas-to-write 1: replication OK" "$("$DLOCK" doctor --json | json_level replication)" OK
rcli CONFIG SET min-replicas-to-write 0 >/dev/null

# ---- ACL rights ----

rcli ACL SETUSER noscript on '>pw' '~*' '&*' '+@all' -eval -evalsha >/dev/null
rcli ACL SETUSER nochan on '>pw' resetchannels '~*' '+@all' >/dev/null
"$DLOCK" doctor --url "redis://noscript:pw@127.0.0.1:$REDIS_PORT" >"$TEST_DIR/out"
assert_eq "no EVAL rights: exit 1" "$?" 1
assert_match "no EVAL rights: scripts FAIL naming the user and the fix" "$(tr '\n' ' ' <"$TEST_DIR/out")" \
  "FAIL +scripts +user 'noscript' cannot take the lock 'dlock-doctor': ENOPERM.*fix: grant the user \+evalsha"
"$DLOCK" doctor --url "redis://nochan:pw@127.0.0.1:$REDIS_PORT" >"$TEST_DIR/out"
assert_eq "no channel rights: exit 0 (locks work)" "$?" 0
assert_match "no channel rights: pubsub WARN" "$(cat "$TEST_DIR/out")" "WARN +pubsub +user 'nochan' cannot PUBLISH"

# ---- no server, bad input ----

dead=$(free_port)
"$DLOCK" doctor --url "redis://u:s3cret@127.0.0.1:$dead" >"$TEST_DIR/out" 2>&1
assert_eq "no server: exit 1" "$?" 1
assert_match "no server: a connect FAIL naming the server" "$(cat "$TEST_DIR/out")" "FAIL +connect +cannot use Redis at redis://u:\*\*\*@127.0.0.1:$dead"
check "no server: the password is not shown" sh -c "! grep -q s3cret '$TEST_DIR/out'"
"$DLOCK" doctor --json --url "redis://127.0.0.1:$dead" >"$TEST_DIR/j"
check "no server: --json is still valid JSON" is_json <"$TEST_DIR/j"
usage_error "doctor: unexpected argument" "unexpected argument 'x'" doctor x
usage_error "doctor: unknown option" "unknown option '--bogus'" doctor --bogus
finish
