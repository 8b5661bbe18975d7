# test_pg.sh - the dlock command on PostgreSQL (postgresql:// URLs) against a
# private server that pg-server starts (tests/pg_server_main.c: the C
# harness, initdb in a temp dir, the postgres user, a free loopback port):
# dlock init (with and without DDL rights), `dlock run` exclusion of 4
# processes x 15 increments on an unguarded counter, status, list,
# release --force (the holder finds out and exits 79), status --watch and
# list --watch from NOTIFY (an idle watcher sends no query; a cut LISTEN
# connection; a transaction-mode PgBouncer's 2 s re-read), doctor, bench.
. "$DLOCK_TEST_LIB"

: "${DLOCK_PG_SERVER:?DLOCK_PG_SERVER must point to the pg-server helper}"
# A transaction-mode PgBouncer in front of it too (the watcher's fallback).
DLOCK_PG_SERVER_BOUNCER=transaction "$DLOCK_PG_SERVER" >"$TEST_DIR/pg.url" 2>"$TEST_DIR/pg.err" &
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
BOUNCER=$(sed -n 2p "$TEST_DIR/pg.url")
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

# ---- status --watch, list --watch: NOTIFY, not polling (issue 27 item 5) ----

# The watcher's own connections carry application_name=pgwatcher, so that
# its queries can be told from the others' in pg_stat_activity.
WURL="$URL&application_name=pgwatcher"
watch_fingerprint() { # each watcher connection's pid and last query start
  psql_su "SELECT coalesce(string_agg(pid || '@' || coalesce(query_start::text, '-'), ',' ORDER BY pid), 'none')
           FROM pg_stat_activity WHERE application_name = 'pgwatcher'"
}
watch_start "$TEST_DIR/wp" status --url "$WURL" pgw --watch
expect_line "pg watch: the first line is the state" "pgw +free" 10
"$DLOCK" run --url "$URL" pgw -- sleep 60 >/dev/null 2>&1 &
PA=$!
bg_track $PA
expect_line "pg watch: an acquire is one line with its pid" "pgw +acquired +fence [0-9]+ +pid $PA "
"$DLOCK" run --url "$URL" -w 60 pgw -- sleep 1 >/dev/null 2>&1 &
PB=$!
bg_track $PB
expect_line "pg watch: a new waiter is one line" "pgw +waiter .*1 waiting"
"$DLOCK" release --force --url "$URL" pgw >/dev/null
expect_line "pg watch: a forced release is one line naming the old holder" \
  "pgw +force-released +fence [0-9]+ +pid $PA "
expect_line "pg watch: the waiter's hand-off is an acquire by it" "pgw +acquired +fence [0-9]+ +pid $PB "
expect_line "pg watch: the waiter left the queue" "pgw +waiter-left .*0 waiting"
expect_line "pg watch: its release is one line" "pgw +released +fence [0-9]+ +pid $PB " 8
wait_exit "$PB" 10
wait_exit "$PA" 20
# Idle, with the lock free: no timer runs and the server's notifications
# are all it waits for, so its connections send nothing (a re-read every
# 2 s would move their query_start).
sleep 0.5
before=$(watch_fingerprint)
sleep 4
after=$(watch_fingerprint)
if [ "$before" = "$after" ] && [ "$before" != none ]; then
  pass "pg watch: an idle watcher sends PostgreSQL no query in 4 s"
else
  fail "pg watch: an idle watcher sends PostgreSQL no query in 4 s" "before: $before" "after:  $after"
fi
check "pg watch: it does not say it polls" sh -c "! grep -q 'read again every' '$WOUT.err'"
# Its LISTEN connection ended by the server: the watcher connects again (and
# reads again then, what was sent meanwhile being lost) and goes on.
killed=$(psql_su "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pgwatcher'
                  AND query LIKE '%pg_advisory_lock_shared%'")
assert_eq "pg watch: the server ends the watcher's LISTEN connection" "$killed" 1
sleep 1
"$DLOCK" run --url "$URL" pgw -- sleep 0.5 >/dev/null 2>&1
expect_line "pg watch: after its LISTEN connection was cut, an acquire still shows" "pgw +acquired" 8
expect_line "pg watch: ... and its release" "pgw +released" 8
watch_stop "pg watch: SIGTERM ends it with exit 0"

watch_start "$TEST_DIR/wpl" list --url "$WURL" --watch
sleep 1
"$DLOCK" run --url "$URL" pgnew -- sleep 1 >/dev/null 2>&1 &
expect_line "pg list --watch: a new name's acquire" "pgnew +acquired"
expect_line "pg list --watch: its release" "pgnew +released" 8
watch_stop "pg list --watch ends with exit 0"

# Through a transaction-mode pooler LISTEN hears nothing: the watcher says
# once that it reads every 2 s, and still sees the changes.
if [ -n "$BOUNCER" ] && [ "$BOUNCER" != none ]; then
  watch_start "$TEST_DIR/wpb" status --url "$BOUNCER&dlock_schema=cli" pgw --watch
  expect_line "pg watch via a transaction pooler: the first line is the state" "pgw +free" 15
  # Held longer than one 2 s re-read, or a read may fall on each side of it.
  "$DLOCK" run --url "$URL" pgw -- sleep 3 >/dev/null 2>&1 &
  expect_line "pg watch via a transaction pooler: an acquire within 5 s (the 2 s re-read)" "pgw +acquired"
  expect_line "pg watch via a transaction pooler: the release" "pgw +released" 8
  assert_eq "pg watch via a transaction pooler: the 2 s re-read is said once on stderr" \
    "$(grep -c 'read again every 2000 ms' "$WOUT.err")" 1
  watch_stop "pg watch via a transaction pooler: SIGTERM ends it with exit 0"
else
  echo "note: no pgbouncer, the pooler case is not run"
fi

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
