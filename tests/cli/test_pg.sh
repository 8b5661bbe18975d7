# test_pg.sh - the dlock command on PostgreSQL (postgresql:// URLs) against a
# private server that pg-server starts (tests/pg_server_main.c: the C
# harness, initdb in a temp dir, the postgres user, a free loopback port):
# dlock init (with and without DDL rights), `dlock run` exclusion of 4
# processes x 15 increments on an unguarded counter, status, list,
# release --force (the holder finds out and exits 79), doctor, bench.
. "$DLOCK_TEST_LIB"

: "${DLOCK_PG_SERVER:?DLOCK_PG_SERVER must point to the pg-server helper}"
"$DLOCK_PG_SERVER" >"$TEST_DIR/pg.url" 2>"$TEST_DIR/pg.err" &
PG_PID=$!
bg_track $PG_PID
if ! wait_for 120 file_has "$TEST_DIR/pg.url"; then
  wait_exit "$PG_PID" 5
  if [ "$EXIT_CODE" = 77 ]; then
    echo "SKIP: $(cat "$TEST_DIR/pg.err")"
    exit 77
  fi
  fail "pg-server starts" "$(cat "$TEST_DIR/pg.err")"
  finish
fi
BASE=$(head -n1 "$TEST_DIR/pg.url")
URL="$BASE?dlock_schema=cli"
PORT=${BASE##*:}
PORT=${PORT%%/*}
psql_su() {
  psql -X -q -A -t -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c "$1"
}

# ---- init ----

"$DLOCK" init --url "$URL" >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "init as the superuser exits 0" "$?" 0
assert_match "init says the tables are ready and names the server" "$(cat "$TEST_DIR/out")" \
  "127\.0\.0\.1.*schema cli.*ready"
assert_eq "the tables exist after init" \
  "$(psql_su "SELECT count(*) FROM pg_tables WHERE schemaname = 'cli' AND tablename = 'locks'")" 1
"$DLOCK" init --url "$URL" >/dev/null 2>&1
assert_eq "init again is harmless" "$?" 0

psql_su "CREATE ROLE noddl LOGIN" >/dev/null 2>&1
NODDL="postgresql://noddl@127.0.0.1:$PORT/postgres?dlock_schema=other"
"$DLOCK" init --url "$NODDL" >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "init without CREATE rights exits 69" "$?" 69
assert_match "init without rights says what to do" "$(cat "$TEST_DIR/err")" "noddl.*dlock init|dlock init.*CREATE"

usage_error "init: unexpected argument" "unexpected argument 'x'" init x

# ---- run: exclusion ----

incr='n=$(cat "$1"); sleep 0.02; echo $((n + 1)) >"$1"'
race_control 4 3

echo 0 >"$TEST_DIR/counter"
pids=""
for i in 1 2 3 4; do
  sh -c 'for k in $(seq 1 15); do "$1" run --url "$2" --wait 120s counter -- sh -c "$3" sh "$4" || exit 1; done' \
    sh "$DLOCK" "$URL" "$incr" "$TEST_DIR/counter" &
  pids="$pids $!"
  bg_track $!
done
codes=""
for p in $pids; do
  wait_exit "$p" 200
  codes="$codes$EXIT_CODE "
done
assert_eq "4 loops of 15 'dlock run' on PostgreSQL all exit 0" "$codes" "0 0 0 0 "
assert_eq "4 x 15 locked increments end exact" "$(cat "$TEST_DIR/counter")" 60

# ---- status, list, release --force ----

"$DLOCK" run --url "$URL" --lease 3s holder -- sh -c "echo \$\$ >'$TEST_DIR/holder.pid'; exec sleep 600" &
HOLDER=$!
bg_track $HOLDER
check "the holder runs" wait_for 20 file_has "$TEST_DIR/holder.pid"
"$DLOCK" status --url "$URL" holder >"$TEST_DIR/out" 2>&1
assert_eq "status exits 0" "$?" 0
assert_match "status says held, with a fence" "$(cat "$TEST_DIR/out")" "held"
"$DLOCK" status --url "$URL" --json holder >"$TEST_DIR/out" 2>&1
assert_match "status --json: held true" "$(cat "$TEST_DIR/out")" '"held": *true'
"$DLOCK" run --url "$URL" --wait 0 holder -- true
assert_eq "a second run on the held lock is busy (75)" "$?" 75
assert_eq "list shows the held lock" "$("$DLOCK" list --url "$URL")" "holder"
assert_eq "list with a pattern that does not match is empty" "$("$DLOCK" list --url "$URL" 'x*')" ""
"$DLOCK" release --force --url "$URL" holder >"$TEST_DIR/out" 2>&1
assert_eq "release --force exits 0" "$?" 0
wait_exit "$HOLDER" 20
assert_eq "the holder finds out and exits 79 (lost)" "$EXIT_CODE" 79
assert_eq "list is empty afterwards" "$("$DLOCK" list --url "$URL")" ""

# ---- semaphore (--limit) and read-write lock (-s/-x) ----

"$DLOCK" run --url "$URL" --limit 2 pool -- sleep 600 &
S1=$!
bg_track $S1
"$DLOCK" run --url "$URL" --limit 2 pool -- sleep 600 &
S2=$!
bg_track $S2
check "two holders take the two permits" wait_for 20 sh -c "'$DLOCK' status --url '$URL' pool | grep -q 'permits: *2 of 2'"
"$DLOCK" run --url "$URL" --limit 2 --wait 0 pool -- true 2>/dev/null
assert_eq "a third --limit 2 run is busy (75)" "$?" 75
"$DLOCK" run --url "$URL" --limit 3 --wait 0 pool -- true 2>"$TEST_DIR/err"
check "another limit is refused ($?)" test "$?" -ne 0
assert_match "it names both limits" "$(cat "$TEST_DIR/err")" "2 permits.*asks for 3"
assert_match "list shows the semaphore" "$("$DLOCK" list --url "$URL")" "^pool$"
out=$("$DLOCK" status --url "$URL" pool)
assert_eq "status shows both permit holders (fence, lease, pid), not the newest only" \
  "$(printf '%s\n' "$out" | grep -E "^  fence [0-9]+, lease [^:]+: pid ($S1|$S2) on " | wc -l)" 2
kill $S1 $S2 2>/dev/null
wait_exit "$S1" 30
wait_exit "$S2" 30
"$DLOCK" run --url "$URL" -s shared -- sleep 600 &
R1=$!
bg_track $R1
check "a shared holder took its side" wait_for 20 sh -c "'$DLOCK' status --url '$URL' shared | grep -q 'readers: *1'"
"$DLOCK" run --url "$URL" -s --wait 0 shared -- true
assert_eq "a second -s run shares (0)" "$?" 0
"$DLOCK" run --url "$URL" -x --wait 0 shared -- true 2>/dev/null
assert_eq "an -x run is busy while a reader holds (75)" "$?" 75
kill $R1 2>/dev/null
wait_exit "$R1" 30

# ---- doctor ----

"$DLOCK" doctor --url "$URL" >"$TEST_DIR/out" 2>&1
assert_eq "doctor on PostgreSQL exits 0" "$?" 0
out=$(cat "$TEST_DIR/out")
for name in server read-only rights clock; do
  assert_match "doctor reports $name as OK" "$out" "OK +$name "
done
"$DLOCK" doctor --url "$NODDL" >"$TEST_DIR/out" 2>&1
assert_eq "doctor for a user without rights exits 1" "$?" 1
assert_match "doctor names the rights problem and the fix" "$(cat "$TEST_DIR/out")" "FAIL +rights"
"$DLOCK" doctor --url "postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=2" >"$TEST_DIR/out" 2>&1
assert_eq "doctor on a closed port exits 1" "$?" 1
assert_match "doctor says PostgreSQL cannot be used there" "$(cat "$TEST_DIR/out")" "cannot use PostgreSQL"

# ---- prune (issue 22 item 10) ----

for i in 1 2 3; do "$DLOCK" run --url "$URL" --wait 0 "gone:$i" -- true >/dev/null 2>&1; done
psql_su "UPDATE cli.locks SET expires = expires - interval '3 hours' WHERE name LIKE 'gone:%'" >/dev/null
"$DLOCK" prune --url "$URL" >"$TEST_DIR/out" 2>"$TEST_DIR/err"
assert_eq "prune exits 0" "$?" 0
assert_match "prune says how many rows it deleted" "$(cat "$TEST_DIR/out")" "[0-9]+ rows deleted"
assert_eq "prune deleted the rows that ended 3 hours ago" \
  "$(psql_su "SELECT count(*) FROM cli.locks WHERE name LIKE 'gone:%'")" 0
"$DLOCK" run --url "$URL" --wait 0 recent -- true >/dev/null 2>&1
"$DLOCK" prune --url "$URL" >/dev/null 2>&1
assert_eq "prune keeps what ended less than an hour ago" \
  "$(psql_su "SELECT count(*) FROM cli.locks WHERE name = 'recent'")" 1
"$DLOCK" prune --url "$URL" --older-than 0 >/dev/null 2>&1
assert_eq "prune --older-than 0 deletes it" "$(psql_su "SELECT count(*) FROM cli.locks WHERE name = 'recent'")" 0
usage_error "prune: a bad duration" "older-than" prune --older-than soon

# ---- dlock job (docs/scheduler.md, "Operations"): a trigger heard by NOTIFY ----

job_ops_notified "pg" --url "$URL"

# ---- bench ----

"$DLOCK" bench --quick --url "$URL" >"$TEST_DIR/out" 2>&1
assert_eq "bench --quick on PostgreSQL exits 0" "$?" 0
out=$(cat "$TEST_DIR/out")
assert_match "bench has the advisory-lock floor" "$out" "floor \(advisory\)"
assert_match "bench has the uncontended scenario" "$out" "uncontended"
assert_match "bench contended counters are exact" "$(printf '%s\n' "$out" | grep -c 'exact$')" "^2$"

# ---- issue 27 item 2: a password from a file (scram, not in the URL) ----

HBA=$(psql_su "SHOW hba_file")
sed -i '1i host all pwuser 127.0.0.1/32 scram-sha-256' "$HBA"
psql_su "CREATE ROLE pwuser LOGIN PASSWORD 'pgS3cret'" >/dev/null
psql_su "GRANT USAGE ON SCHEMA cli TO pwuser; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cli TO pwuser; GRANT USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA cli TO pwuser" >/dev/null
psql_su "SELECT pg_reload_conf()" >/dev/null
PWURL="postgresql://pwuser@127.0.0.1:$PORT/postgres?dlock_schema=cli&sslmode=disable"
printf 'pgS3cret\n' >"$TEST_DIR/pg.pw"
chmod 600 "$TEST_DIR/pg.pw"
check "without the password the server refuses pwuser" \
  sh -c "! PGPASSFILE=/dev/null '$DLOCK' status --url '$PWURL' pwlock >/dev/null 2>&1"
PGPASSFILE=/dev/null "$DLOCK" run --url "$PWURL" --password-file "$TEST_DIR/pg.pw" pwlock -- \
  sh -c "env >'$TEST_DIR/pgchild.env'" 2>"$TEST_DIR/err"
assert_eq "--password-file: run on PostgreSQL connects with scram" "$?" 0
check "... and the command's environment has no password" \
  sh -c "test -s '$TEST_DIR/pgchild.env' && ! grep -q pgS3cret '$TEST_DIR/pgchild.env'"

finish
