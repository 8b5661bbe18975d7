# test_sentinel.sh - every dlock command through a redis-sentinel:// URL: a
# master (lib.sh's redis-server) and two sentinels monitoring it, started here
# and stopped by PID. run, status, list, release --force, fence check, every,
# cron --history; and the errors of a wrong service and of a plain Redis.
. "$DLOCK_TEST_LIB"
start_redis
MASTER_URL=$DLOCK_URL

# start_sentinel N: a sentinel monitoring the master as 'svc'; sets S<N>_PORT.
start_sentinel() {
  local n=$1 port i
  port=$(free_port)
  mkdir -p "$TEST_DIR/s$n"
  cat >"$TEST_DIR/s$n/sentinel.conf" <<CONF
bind 127.0.0.1
port $port
dir $TEST_DIR/s$n
daemonize no
logfile $TEST_DIR/s$n/sentinel.log
sentinel resolve-hostnames no
sentinel announce-ip 127.0.0.1
sentinel monitor svc 127.0.0.1 $REDIS_PORT 1
sentinel down-after-milliseconds svc 1000
CONF
  redis-server "$TEST_DIR/s$n/sentinel.conf" --sentinel >/dev/null 2>&1 &
  bg_track $!
  for i in $(seq 1 200); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = "PONG" ] && break
    sleep 0.05
  done
  eval "S${n}_PORT=$port"
}
start_sentinel 1
start_sentinel 2
export DLOCK_URL="redis-sentinel://127.0.0.1:$S1_PORT,127.0.0.1:$S2_PORT/svc"

# ---- run, status, list, release --force ----

out=$("$DLOCK" run job -- echo ran)
assert_eq "run through the sentinels runs the command" "$?:$out" "0:ran"

"$DLOCK" run --lease 20s held.lock -- sleep 600 &
H=$!
bg_track $H
check "the lock is taken on the master" wait_for 10 key_exists held.lock
out=$("$DLOCK" status held.lock)
assert_match "status through the sentinels: held" "$out" "state: +held"
assert_eq "list through the sentinels" "$("$DLOCK" list)" "held.lock"
out=$("$DLOCK" run -w 0 held.lock -- true)
assert_eq "a second run finds it busy (75)" "$?" 75
out=$("$DLOCK" release --force held.lock)
assert_eq "release --force through the sentinels" "$?:$out" "0:released 'held.lock'"
check "the key is gone from the master" key_gone held.lock
wait_exit $H 10
assert_eq "the holder learns it lost the lock (79)" "$EXIT_CODE" 79

# ---- fence check, every, cron --history ----

# Under Sentinel the guard admits no token below the master's floor (its clock
# at its first fence: docs/topologies.md), as dlock's fences never are: a
# token an hour ahead of the clock (in microseconds) stands for one.
T=$(( $(date +%s) * 1000000 + 3600000000 ))
out=$("$DLOCK" fence check res $T)
assert_eq "fence check through the sentinels" "$?:$out" "0:admitted: token $T for 'res' (highest seen: $T)"
"$DLOCK" fence check -q res $((T - 1))
assert_eq "fence check: a lower token is stale (1)" "$?" 1

: >"$TEST_DIR/ticks"
"$DLOCK" every 1s --name tick -- sh -c "echo x >>'$TEST_DIR/ticks'" 2>/dev/null &
E=$!
bg_track $E
check "every through the sentinels runs ticks" wait_for 10 sh -c "[ \$(wc -l <'$TEST_DIR/ticks') -ge 2 ]"
kill -TERM $E
wait_exit $E 15
check "cron --history through the sentinels" sh -c "'$DLOCK' cron --history tick | grep -q ok"

# ---- errors ----

err=$("$DLOCK" status --url "redis-sentinel://127.0.0.1:$S1_PORT/nosuch" x 2>&1)
assert_eq "an unknown service exits 69" "$?" 69
assert_match "an unknown service is named" "$err" "service 'nosuch' is unknown to the sentinels"
err=$("$DLOCK" status --url "redis-sentinel://127.0.0.1:$REDIS_PORT/svc" x 2>&1)
assert_eq "a plain Redis as sentinel exits 69" "$?" 69
assert_match "a plain Redis as sentinel says so" "$err" "127.0.0.1:$REDIS_PORT: not a Redis Sentinel"
err=$("$DLOCK" status --url "redis-sentinel://u:s3cret@127.0.0.1:$S1_PORT/svc?master_password=m4ster" x 2>&1)
assert_eq "wrong sentinel credentials exit 69" "$?" 69
assert_match "wrong sentinel credentials are named" "$err" "authentication as u failed"
case "$err" in
*s3cret* | *m4ster*) fail "no password in the message" "$err" ;;
*) pass "no password in the message" ;;
esac
err=$("$DLOCK" status --url "redis-sentinel://127.0.0.1:$S1_PORT" x 2>&1)
assert_eq "a sentinel URL without a service is a usage error (64)" "$?" 64
assert_match "and says what is missing" "$err" "no service name"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
