# test_lost_reply.sh - `dlock run` whose release reply is lost (the fault
# proxy, tests/faultproxy.h, forwards the release, lets it run, drops its
# reply and closes the connection): the lock was held until the command
# ended, so dlock exits with the command's status, not 79 "lost", and the key
# is gone. Also for a command that fails, and for a fixed lease.
. "$DLOCK_TEST_LIB"
start_redis
: "${DLOCK_FAULTPROXY:?DLOCK_FAULTPROXY must point to the faultproxy program}"

PROXY_PID=""
# start_proxy SCRIPT [OPTION]: a proxy in front of the test's server that
# drops the next reply to that dlock script; sets PROXY_URL.
start_proxy() {
  rm -f "$TEST_DIR/proxy.port" "$TEST_DIR/proxy.out"
  "$DLOCK_FAULTPROXY" --target "$REDIS_PORT" --port-file "$TEST_DIR/proxy.port" --drop-script "$1" ${2:-} \
    >"$TEST_DIR/proxy.out" 2>"$TEST_DIR/proxy.err" &
  PROXY_PID=$!
  bg_track "$PROXY_PID"
  wait_for 10 file_has "$TEST_DIR/proxy.port" || { fail "fault proxy started" "$(cat "$TEST_DIR/proxy.err")"; exit 1; }
  PROXY_URL="redis://127.0.0.1:$(cat "$TEST_DIR/proxy.port")"
}

# stop_proxy: stop it and set DROPPED to the number of replies it dropped.
stop_proxy() {
  kill -TERM "$PROXY_PID"
  wait_exit "$PROXY_PID" 10
  DROPPED=$(sed -n 's/^dropped //p' "$TEST_DIR/proxy.out")
}

for lease in "" "--lease 20s"; do
  for status in 0 7; do
    what="(${lease:-watchdog}, exit $status)"
    start_proxy release
    "$DLOCK" run --url "$PROXY_URL" $lease LR -- sh -c "sleep 0.2; exit $status" 2>"$TEST_DIR/err"
    rc=$?
    stop_proxy
    assert_eq "$what the proxy dropped the release's reply" "$DROPPED" 1
    assert_eq "$what dlock exits with the command's status" "$rc" "$status"
    check "$what the lock key is gone" key_gone LR
    if grep -q "lost" "$TEST_DIR/err"; then
      fail "$what stderr does not say lost" "$(cat "$TEST_DIR/err")"
    else
      pass "$what stderr does not say lost"
    fi
  done
done

# The release's reply is lost and then nothing answers at all: whether the
# release ran is unknown, but the command ended while the lock was held, so
# dlock still exits with its status and says what it does not know.
start_proxy release --then-blackhole
"$DLOCK" run --url "$PROXY_URL" --lease 20s LR2 -- sh -c "exit 5" 2>"$TEST_DIR/err"
rc=$?
stop_proxy
assert_eq "(unreachable after) the proxy dropped the release's reply" "$DROPPED" 1
assert_eq "(unreachable after) dlock exits with the command's status" "$rc" 5
assert_match "(unreachable after) stderr says the release's outcome is unknown" "$(cat "$TEST_DIR/err")" \
  "LR2.*(unknown|may have run)"
check "(unreachable after) the key is gone (the release had run)" key_gone LR2

finish
