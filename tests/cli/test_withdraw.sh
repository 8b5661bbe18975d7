# test_withdraw.sh - issue 22 item 11: once in 27 runs of the review, a
# "dlock run -x" holder exited 79 (lost: "the key was gone") right after a
# queued -x waiter of the same name got SIGTERM. Can a withdrawing waiter
# remove or expire a holder's entry? Its clean-up (rw_withdraw.lua for -s/-x,
# withdraw.lua for a mutex) removes only its own queue entry and a hold of
# its own token: the holder's entry, its lease and the key's expiry are not
# touched (the scripts never shorten a PEXPIRE; rw_prune drops only holds
# whose lease already ended). This repeats the scenario under load, with
# the SIGTERM at jittered moments: while the waiter waits, as the holder
# releases, and after the waiter was granted (a hand-off for the mutex). In
# every round the holder outlives its lease in some rounds (its watchdog
# renews while the waiter withdraws), must exit 0, never 79, and no two
# commands on a name may overlap.
#
# 4 lanes of -x (read-write lock, write side) and 2 lanes of a plain mutex
# run at once, each 3 rounds on its own name (ROUNDS=N for more): 18 rounds,
# about 10 s (50 s at a load average of 24 on 2 cores).
#
# WITHDRAW_URL=URL runs the same against another server instead of a Redis
# of its own (by hand: a PostgreSQL of tests/pg_server_main.c, a ZooKeeper
# of tests/zk_server_main.c).
. "$DLOCK_TEST_LIB"
if [ -n "${WITHDRAW_URL:-}" ]; then
  export DLOCK_URL="$WITHDRAW_URL"
else
  start_redis
fi

ROUNDS=${ROUNDS:-3}

# jitter MAX_MS: a random "sleep" argument in 0..MAX_MS ms.
jitter() {
  local ms=$((RANDOM % ($1 + 1)))
  printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}

# The command under the lock: claim the name's marker directory (a second
# claim while one holds means two commands overlap), hold it, give it back,
# also when stopped by SIGTERM.
CMD='trap "rmdir \"\$1\" 2>/dev/null; exit 143" TERM
if ! mkdir "$1" 2>/dev/null; then echo "overlap at $(date +%s.%N)" >>"$2"; exit 0; fi
sleep "$3" & wait $!
rmdir "$1"'

# lane NAME SIDE_FLAGS: ROUNDS rounds; writes "holder EXIT" and "waiter EXIT"
# lines to $TEST_DIR/NAME.codes, overlaps to $TEST_DIR/NAME.overlap.
lane() {
  local name=$1 flags=$2 r hold h w i
  local dir="$TEST_DIR/$name.in" codes="$TEST_DIR/$name.codes" over="$TEST_DIR/$name.overlap"
  : >"$codes"
  : >"$over"
  for r in $(seq 1 "$ROUNDS"); do
    # Hold 0.3 to 2.5 s on a 2 s lease: some holds are renewed while the
    # waiter withdraws.
    hold=$(jitter 2200)
    hold=$(awk -v h="$hold" 'BEGIN { printf "%.3f", h + 0.3 }')
    "$DLOCK" run $flags -l 2s -w 30s "$name" -- sh -c "$CMD" sh "$dir" "$over" "$hold" \
      2>>"$TEST_DIR/$name.holder.err" &
    h=$!
    # Bounded: the holder's command starts within 20 s even on a busy host.
    for i in $(seq 1 400); do
      [ -d "$dir" ] && break
      kill -0 "$h" 2>/dev/null || break
      sleep 0.05
    done
    # -v: the waiter says when it starts to wait (its acquire is queued).
    "$DLOCK" run -v $flags -l 2s -w 30s "$name" -- sh -c "$CMD" sh "$dir" "$over" 0.2 \
      2>"$TEST_DIR/$name.waiter.now" &
    w=$!
    for i in $(seq 1 400); do
      grep -q "waiting for" "$TEST_DIR/$name.waiter.now" 2>/dev/null && break
      kill -0 "$w" 2>/dev/null || break
      sleep 0.05
    done
    # SIGTERM anywhere from at once to just after the holder's release
    # (then the waiter may have been granted, or be running its command).
    sleep "$(jitter $(awk -v h="$hold" 'BEGIN { printf "%d", h * 1000 }'))"
    kill -TERM "$w" 2>/dev/null
    for i in $(seq 1 600); do
      kill -0 "$w" 2>/dev/null || break
      sleep 0.05
    done
    wait "$w"
    echo "waiter $?" >>"$codes"
    cat "$TEST_DIR/$name.waiter.now" >>"$TEST_DIR/$name.waiter.err"
    for i in $(seq 1 800); do
      kill -0 "$h" 2>/dev/null || break
      sleep 0.05
    done
    wait "$h"
    echo "holder $?" >>"$codes"
  done
  # The name is free and nobody is left in its queue: a try takes it at once.
  "$DLOCK" run $flags -w 0 "$name" -- true 2>>"$TEST_DIR/$name.waiter.err"
  echo "after $?" >>"$codes"
}

pids=""
for n in 1 2 3 4; do
  lane "rw$n" -x &
  pids="$pids $!"
  bg_track $!
done
for n in 1 2; do
  lane "mx$n" "" &
  pids="$pids $!"
  bg_track $!
done
for p in $pids; do
  wait_exit "$p" 240
done

for name in rw1 rw2 rw3 rw4 mx1 mx2; do
  side="-x"
  [ "${name#mx}" != "$name" ] && side="mutex"
  codes=$(cat "$TEST_DIR/$name.codes" 2>/dev/null)
  holders=$(printf '%s\n' "$codes" | awk '$1 == "holder" { print $2 }' | sort | uniq -c | tr -s ' \n' '  ')
  bad_h=$(printf '%s\n' "$codes" | awk '$1 == "holder" && $2 != 0' | wc -l)
  n_h=$(printf '%s\n' "$codes" | awk '$1 == "holder"' | wc -l)
  assert_eq "$name ($side): $ROUNDS holders, each exits 0, none 79 (lost), whenever its waiter got SIGTERM" \
    "$n_h/$bad_h" "$ROUNDS/0"
  [ "$bad_h" = 0 ] || { echo "       holder exits: $holders"; sed 's/^/       /' "$TEST_DIR/$name.holder.err"; }
  bad_w=$(printf '%s\n' "$codes" | awk '$1 == "waiter" && $2 != 0 && $2 != 143' | wc -l)
  assert_eq "$name ($side): each waiter ends by SIGTERM (143) or done (0)" "$bad_w" 0
  [ "$bad_w" = 0 ] || { printf '%s\n' "$codes" | sed 's/^/       /'; sed 's/^/       /' "$TEST_DIR/$name.waiter.err"; }
  assert_eq "$name ($side): no two commands overlapped" "$(cat "$TEST_DIR/$name.overlap")" ""
  assert_eq "$name ($side): the name is free at the end (a try takes it)" \
    "$(printf '%s\n' "$codes" | awk '$1 == "after" { print $2 }')" 0
done
finish
