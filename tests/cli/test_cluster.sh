# test_cluster.sh - every dlock command with a redis-cluster:// URL, against a
# real 3-master Redis Cluster on loopback (each node stopped by PID at exit):
# run (exclusion), status, list across masters, release --force, fence check,
# every (the scheduler), and the errors for a URL that is not a cluster.
. "$DLOCK_TEST_LIB"

# ---- a 3-master cluster ----
PORTS=""
for n in 1 2 3; do
  port=$(free_port)
  bus=$(free_port)
  mkdir -p "$TEST_DIR/n$n"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$TEST_DIR/n$n" \
    --daemonize no --logfile "$TEST_DIR/n$n/redis.log" --cluster-enabled yes \
    --cluster-config-file nodes.conf --cluster-node-timeout 1000 --cluster-port "$bus" >/dev/null 2>&1 &
  bg_track $!
  PORTS="$PORTS $port"
done
for port in $PORTS; do
  wait_for 10 sh -c "[ \"\$(redis-cli -p $port PING 2>/dev/null)\" = PONG ]" || { echo "node $port did not start"; exit 1; }
done
# shellcheck disable=SC2086
redis-cli --cluster create $(for p in $PORTS; do printf '127.0.0.1:%s ' "$p"; done) --cluster-yes \
  >"$TEST_DIR/create.log" 2>&1 || { cat "$TEST_DIR/create.log"; exit 1; }
first=${PORTS# }
first=${first%% *}
ok() { redis-cli --cluster check "127.0.0.1:$first" >/dev/null 2>&1; }
wait_for 30 ok || { echo "cluster not ok"; exit 1; }
export DLOCK_URL="redis-cluster://$(for p in $PORTS; do printf '127.0.0.1:%s,' "$p"; done | sed 's/,$//')"

owner_port() { # the port of the master that serves key $1
  local p
  for p in $PORTS; do
    case "$(redis-cli -p "$p" EXISTS "$1" 2>&1)" in 0|1) echo "$p"; return;; esac
  done
}

# ---- run: exclusion across processes on each master ----
for name in a b c d e f; do
  echo 0 >"$TEST_DIR/count.$name"
done
pids=""
for i in 1 2 3 4; do
  for name in a b c d e f; do
    "$DLOCK" run --wait 60s "cl:$name" -- sh -c \
      "v=\$(cat '$TEST_DIR/count.$name'); sleep 0.01; echo \$((v+1)) >'$TEST_DIR/count.$name'" &
    pids="$pids $!"
  done
done
codes=""
for pid in $pids; do
  wait_exit "$pid" 120
  codes="$codes$EXIT_CODE"
done
assert_eq "24 runs on 6 locks exit 0" "$codes" "000000000000000000000000"
total=0
for name in a b c d e f; do total=$((total + $(cat "$TEST_DIR/count.$name"))); done
assert_eq "each lock's counter is exact (4 each)" "$total" 24
masters=$(for name in a b c d e f; do owner_port "cl:$name"; done | sort -u | wc -l)
check "the six locks live on more than one master ($masters)" test "$masters" -ge 2

# ---- status, list, release --force, fence check ----
"$DLOCK" run --lease 30s cl:held1 -- sleep 600 &
H1=$!
bg_track $H1
"$DLOCK" run --lease 30s cl:held2 -- sleep 600 &
H2=$!
bg_track $H2
"$DLOCK" run --lease 30s cl:held3 -- sleep 600 &
H3=$!
bg_track $H3
check "three holders took their locks" wait_for 10 sh -c "[ \$('$DLOCK' list 'cl:held*' | wc -l) = 3 ]"
assert_eq "list shows the locks of every master" "$("$DLOCK" list 'cl:held*')" "$(printf 'cl:held1\ncl:held2\ncl:held3')"
masters=$(for n in 1 2 3; do owner_port "cl:held$n"; done | sort -u | wc -l)
check "they live on more than one master ($masters)" test "$masters" -ge 2
out=$("$DLOCK" status cl:held2)
assert_match "status of a held lock" "$out" "state: +held"
assert_match "status: holder pid" "$out" "holder: +pid $H2 "
fence=$("$DLOCK" status --json cl:held2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["fence"])')
"$DLOCK" fence check -q cl:held2 "$fence"
assert_eq "fence check admits the holder's fence" "$?" 0
"$DLOCK" fence check -q cl:held2 $((fence - 1))
assert_eq "fence check rejects an older one" "$?" 1
"$DLOCK" release --force cl:held2 >/dev/null
assert_eq "release --force exits 0" "$?" 0
wait_exit "$H2" 20
assert_eq "the holder whose lock was released by force exits 79 (lost)" "$EXIT_CODE" 79
assert_match "status after release --force: free" "$("$DLOCK" status cl:held2)" "state: +free"

# ---- every: the scheduler, once per tick across two nodes ----
TICKS="$TEST_DIR/ticks"
for n in 1 2; do
  "$DLOCK" every 1s --name cl:job --node "node-$n" -- sh -c "echo \"\$DLOCK_TICK\" >>'$TICKS'" \
    2>"$TEST_DIR/every$n.log" &
  eval "E$n=\$!"
  bg_track $!
done
sleep 4.5
kill -TERM "$E1" "$E2"
wait_exit "$E1" 15
wait_exit "$E2" 15
n=$(wc -l <"$TICKS")
check "every: ticks ran ($n)" test "$n" -ge 3
assert_eq "every: each tick ran once" "$(sort "$TICKS" | uniq -d)" ""
out=$("$DLOCK" cron --history cl:job)
assert_match "cron --history reads the job's runs" "$out" "node-"

# ---- doctor: the hand-off channel is checked as the waiters use it ----
out=$("$DLOCK" doctor 2>&1)
assert_match "doctor: scripts run through the router" "$out" "OK +scripts"
assert_match "doctor: sharded pub/sub on the probe's slot" "$out" "OK +pubsub .*SPUBLISH and SSUBSCRIBE"

# ---- bad input ----
start_redis # a plain server
err=$("$DLOCK" status x --url "redis-cluster://127.0.0.1:$REDIS_PORT" 2>&1)
assert_eq "a cluster URL naming a plain server exits 69" "$?" 69
assert_match "... and says what to fix" "$err" "127.0.0.1:$REDIS_PORT is not in cluster mode"
err=$("$DLOCK" status x --url "redis-cluster://127.0.0.1:$first,127.0.0.1:$first" 2>&1)
assert_eq "a seed listed twice is a usage error" "$?" 64
assert_match "... saying so" "$err" "listed twice"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
