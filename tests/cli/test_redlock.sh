# test_redlock.sh - every dlock command through a redlock:// URL over five
# redis-servers started here (stopped by PID): run, status (each node's
# view), list, release --force, fence check, every and cron --history; the
# error breakdown of a busy lock; usage errors; node-redlock (npm redlock,
# pinned in bench/peers) and dlock excluding each other both ways; and a node
# restarted empty held out by a new `dlock run` (issue 22 item 4).
. "$DLOCK_TEST_LIB"

PORTS=()
PIDS=()
for n in 1 2 3 4 5; do
  port=$(free_port)
  mkdir -p "$TEST_DIR/n$n"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$TEST_DIR/n$n" \
    --daemonize no --logfile "$TEST_DIR/n$n/redis.log" >/dev/null 2>&1 &
  bg_track $!
  PIDS+=("$!")
  for i in $(seq 1 200); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = "PONG" ] && break
    sleep 0.05
  done
  PORTS+=("$port")
done
URL="redlock://127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]},127.0.0.1:${PORTS[3]},127.0.0.1:${PORTS[4]}"
export DLOCK_URL=$URL

# How many nodes hold KEY.
nodes_with() {
  local k=0 p
  for p in "${PORTS[@]}"; do
    [ "$(redis-cli -p "$p" EXISTS "$1" 2>/dev/null)" = 1 ] && k=$((k + 1))
  done
  echo $k
}
on_all() { [ "$(nodes_with "$1")" = 5 ]; }
on_none() { [ "$(nodes_with "$1")" = 0 ]; }
# A release completes once a majority deleted the key (docs/redlock.md): a
# node that was slow to answer (a busy machine) may keep it until its lease.
on_minority() { [ "$(nodes_with "$1")" -lt 3 ]; }

# ---- usage errors ----

err=$("$DLOCK" status --url "redlock://127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]}" x 2>&1)
assert_eq "two nodes is a usage error (64)" "$?" 64
assert_match "and says Redlock needs 3 or more" "$err" "3 or more independent masters \(5 advised\)"
err=$("$DLOCK" status --url "redlock://u:s3cret@127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[0]}" x 2>&1)
assert_eq "a node listed twice is a usage error (64)" "$?" 64
assert_match "and is named" "$err" "127.0.0.1:${PORTS[0]} is listed twice"
case "$err" in
*s3cret*) fail "no password in the message" "$err" ;;
*) pass "no password in the message" ;;
esac

# ---- run, status, list, release --force ----

out=$("$DLOCK" run job -- echo ran)
assert_eq "run over Redlock runs the command" "$?:$out" "0:ran"
check "and leaves the lock key on no majority of nodes" on_minority job
check "and on no node within the lease (30 s)" wait_for 32 on_none job

"$DLOCK" run --lease 20s held.lock -- sleep 600 &
H=$!
bg_track $H
check "the lock is taken on all five nodes" wait_for 10 on_all held.lock
out=$("$DLOCK" status held.lock)
assert_match "status over Redlock: held" "$out" "state: +held"
assert_match "status shows each node's view" "$out" "node 127.0.0.1:${PORTS[4]}: +held"
assert_eq "list over Redlock" "$("$DLOCK" list)" "held.lock"
err=$("$DLOCK" run -w 0 held.lock -- true 2>&1)
assert_eq "a second run finds it busy (75)" "$?" 75
assert_match "and says which nodes hold it" "$err" "held by another owner on 5 \(127.0.0.1:${PORTS[0]}, "
out=$("$DLOCK" release --force held.lock)
assert_eq "release --force over Redlock" "$?:$out" "0:released 'held.lock'"
check "the key is gone from a majority of nodes" on_minority held.lock
check "and from every node within the lease (20 s)" wait_for 22 on_none held.lock
wait_exit $H 15
assert_eq "the holder learns it lost the lock (79)" "$EXIT_CODE" 79

# Three nodes taken by someone else: busy, and no key of ours left.
for p in "${PORTS[@]:0:3}"; do redis-cli -p "$p" SET other.lock foreign PX 30000 >/dev/null; done
err=$("$DLOCK" run -w 300ms other.lock -- true 2>&1)
assert_eq "a majority held by others: busy (75)" "$?" 75
assert_match "the breakdown names the nodes" "$err" \
  "held by another owner on 3 \(127.0.0.1:${PORTS[0]}, 127.0.0.1:${PORTS[1]}, 127.0.0.1:${PORTS[2]}\)"
assert_eq "nothing of ours on the free nodes" "$(nodes_with other.lock)" 3

# ---- fence check, every, cron --history ----

out=$("$DLOCK" fence check res 100)
assert_eq "fence check over Redlock" "$?:$out" "0:admitted: token 100 for 'res' (highest seen: 100)"
"$DLOCK" fence check -q res 99
assert_eq "fence check: a lower token is stale (1)" "$?" 1

: >"$TEST_DIR/ticks"
"$DLOCK" every 1s --name tick -- sh -c "echo x >>'$TEST_DIR/ticks'" 2>/dev/null &
E=$!
bg_track $E
check "every over Redlock runs ticks" wait_for 10 sh -c "[ \$(wc -l <'$TEST_DIR/ticks') -ge 2 ]"
kill -TERM $E
wait_exit $E 15
check "cron --history over Redlock" sh -c "'$DLOCK' cron --history tick | grep -q ok"

# ---- node-redlock interop ----

PEERS="$(cd "$(dirname "$DLOCK_TEST_LIB")/../../bench/peers" && pwd)"
if ! command -v node >/dev/null || ! [ -d "$PEERS/node_modules/redlock" ] &&
   ! (cd "$PEERS" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
  echo "skip - node-redlock interop: node, or bench/peers' npm packages, unavailable"
else
  JS="$(dirname "$DLOCK_TEST_LIB")/redlock_interop.js"
  peer() { NODE_PATH="$PEERS/node_modules" node "$JS" "$@" "${PORTS[@]}"; }
  NODE_PATH="$PEERS/node_modules" node "$JS" hold shared.lock 20000 "${PORTS[@]}" >"$TEST_DIR/peer.out" 2>&1 &
  P=$!
  bg_track $P
  check "node-redlock holds the lock" wait_for 10 grep -q '^held' "$TEST_DIR/peer.out"
  check "with its key name on every node" on_all shared.lock
  err=$("$DLOCK" run -w 0 shared.lock -- true 2>&1)
  assert_eq "dlock finds node-redlock's lock busy (75)" "$?" 75
  assert_match "on all five nodes" "$err" "held by another owner on 5"
  kill -TERM $P
  wait_exit $P 10
  check "node-redlock released it" on_none shared.lock
  "$DLOCK" run --lease 20s shared.lock -- sleep 30 &
  H=$!
  bg_track $H
  check "dlock holds it" wait_for 10 on_all shared.lock
  out=$(peer try shared.lock 5000)
  assert_eq "node-redlock finds dlock's lock busy" "$?" 1
  kill -TERM $H
  wait_exit $H 15
  check "dlock released it on a majority" on_minority shared.lock
  check "and everywhere within the lease" wait_for 32 on_none shared.lock
  out=$(peer try shared.lock 5000)
  assert_eq "then node-redlock gets it" "$?:$out" "0:acquired"
fi

# ---- doctor per node; a node down ----

out=$("$DLOCK" doctor)
assert_eq "doctor over Redlock passes" "$?" 0
assert_eq "doctor checks each node" "$(printf '%s\n' "$out" | grep -c '^node 127.0.0.1:[0-9]*:$')" 5
kill -KILL "${PIDS[4]}"
wait_for 10 pid_gone "${PIDS[4]}"
out=$("$DLOCK" run job2 -- echo ran)
assert_eq "with one node down, run still works" "$?:$out" "0:ran"
out=$("$DLOCK" status job2)
assert_match "status names the node that is down" "$out" "node 127.0.0.1:${PORTS[4]}: unreachable"
out=$("$DLOCK" doctor)
assert_eq "doctor fails (1) with a node down" "$?" 1
assert_match "and names it" "$out" "FAIL +connect +cannot use node 127.0.0.1:${PORTS[4]}"

# ---- issue 22 item 4: a node restarted empty is held out by a new `dlock run` ----

start_node() {
  local n=$1 i
  redis-server --port "${PORTS[$n]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$TEST_DIR/n$((n + 1))" \
    --daemonize no --logfile "$TEST_DIR/n$((n + 1))/redis.log" >/dev/null 2>&1 &
  bg_track $!
  PIDS[$n]=$!
  for i in $(seq 1 200); do
    [ "$(redis-cli -p "${PORTS[$n]}" PING 2>/dev/null)" = "PONG" ] && break
    sleep 0.05
  done
}
three_hold() { [ "$(nodes_with rs.lock)" = 3 ]; }
kill -KILL "${PIDS[3]}"
wait_for 10 pid_gone "${PIDS[3]}"
"$DLOCK" run --lease 20s rs.lock -- sleep 600 &
H=$!
bg_track $H
check "with nodes 4 and 5 down, A holds the lock on nodes 1-3" wait_for 10 three_hold
kill -KILL "${PIDS[2]}"
wait_for 10 pid_gone "${PIDS[2]}"
start_node 2
start_node 3
start_node 4
err=$("$DLOCK" run -n rs.lock -- echo ran 2>&1)
assert_eq "node 3 restarted empty, 4 and 5 back: a new dlock run -n is refused (69)" "$?" 69
assert_match "naming node 3 and why" "$err" "127.0.0.1:${PORTS[2]} restarted without its data"
kill -TERM $H
wait_exit $H 15

finish
