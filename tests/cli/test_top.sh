# test_top.sh - "dlock top" (issue 26): a live view in a real terminal
# (tmux, 80x24) that shows a lock taken by another process within 5 s, sorts
# on 's', filters on '/', cuts a long name to the width, and gives the
# terminal back (normal screen, echo and canonical mode) on 'q', SIGTERM,
# SIGINT and when the server is lost (with the reason, exit 69). Without a
# terminal it prints one snapshot, no terminal sequences.
. "$DLOCK_TEST_LIB"

command -v tmux >/dev/null || { echo "tmux is not installed: skipped"; exit 77; }
unset TMUX
# Our own tmux server, on our own socket: killed by that socket at exit,
# never another one.
SOCK="dlock-top-$$"
trap 'tmux -L "$SOCK" kill-server 2>/dev/null; cleanup' EXIT

start_redis

run_bg() {
  "$DLOCK" run "$@" >/dev/null 2>&1 &
  LAST_BG=$!
  bg_track $LAST_BG
}

# ---- The snapshot: stdout not a terminal ----

run_bg alpha -- sleep 60
A=$LAST_BG
run_bg --limit 2 pool -- sleep 60
run_bg -s docs -- sleep 60
wait_for 5 key_exists alpha
wait_for 5 key_exists pool
out=$("$DLOCK" top 2>"$TEST_DIR/err")
rc=$?
assert_eq "a snapshot (stdout a pipe) exits 0" "$rc" 0
assert_match "it names the server as the URL does" "$out" "^dlock top - [0-9:]+ - redis://127\.0\.0\.1:$REDIS_PORT"
assert_match "a held mutex is a 'lock' row with its holder's pid" "$out" "alpha +lock +[0-9.]+s +[0-9.]+s +[0-9]+ +0  .*:$A sleep 60"
assert_match "a semaphore row says used/limit" "$out" "pool +sem .* 1/2, newest"
assert_match "a read-write lock row counts its readers" "$out" "docs +rw .* 1 reader"
assert_match "the counts line counts per kind" "$out" "3 names: 1 lock, 1 rw lock, 1 semaphore; 0 waiting"
if printf '%s' "$out" | grep -q $'\033'; then
  fail "a snapshot holds no terminal sequence" "$out"
else
  pass "a snapshot holds no terminal sequence"
fi
out=$("$DLOCK" top --once --sort name 'p*')
assert_match "a PATTERN keeps its names only" "$out" "1 name: 1 semaphore"
# A password in the URL is never shown: the header names the server with ***.
rcli CONFIG SET requirepass s3cret-pw >/dev/null
out=$("$DLOCK" top --url "redis://:s3cret-pw@127.0.0.1:$REDIS_PORT" 2>&1)
redis-cli -h 127.0.0.1 -p "$REDIS_PORT" -a s3cret-pw --no-auth-warning CONFIG SET requirepass "" >/dev/null
assert_match "the header shows a password as ***" "$out" "^dlock top - [0-9:]+ - redis://:\*\*\*@127\.0\.0\.1:$REDIS_PORT"
case "$out" in *s3cret-pw*) fail "the password is not printed" "$out" ;; *) pass "the password is not printed" ;; esac

# A job: its row says its last run (or that it runs now).
"$DLOCK" every 1s --name nightly -q -- true >/dev/null 2>&1 &
J=$!
bg_track $J
job_row() { "$DLOCK" top --once 'night*' 2>/dev/null | grep -Eq '^nightly +job .*(idle, last run ok|running on)'; }
check "a job is a 'job' row with its last run" wait_for 10 job_row
kill -TERM "$J"
wait_exit "$J" 10
usage_error "an unknown sort key is a usage error" "--sort: 'size' is not a column" top --sort size

# ---- The live view in tmux ----

pane() { tmux -L "$SOCK" capture-pane -p -t top 2>/dev/null; }
pane_has() { pane | grep -Eq -- "$1"; }
expect_pane() { # expect_pane "what" PATTERN [SECONDS]
  if wait_for "${3:-5}" pane_has "$2"; then
    pass "$1"
  else
    fail "$1" "no '$2' on the screen within ${3:-5} s:" "$(pane)"
  fi
}
# Start 'dlock top' in a new 80x24 session; the shell around it says how it
# ended and how the terminal was left (stty), then waits.
top_start() {
  rm -f "$TEST_DIR/top.pid"
  tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 80 -y 24 \
    "sh -c 'echo \$\$ >$TEST_DIR/top.pid; exec env DLOCK_URL=$DLOCK_URL $DLOCK top'; echo TOP-EXIT=\$?; stty -a | tr ' ' '\n' | grep -Ex -- '-?(icanon|echo)' | tr '\n' ' '; echo; sleep 120"
  expect_pane "top starts in the terminal with its header" "^dlock top - [0-9:]+ - redis://127\.0\.0\.1:$REDIS_PORT"
}
top_stop_session() { tmux -L "$SOCK" kill-session -t top 2>/dev/null; }
restored() { # restored "how" EXIT
  expect_pane "$1: the process ended with $2" "^TOP-EXIT=$2\$" 10
  expect_pane "$1: echo and canonical mode are back" "^icanon echo *\$"
  if pane_has "^dlock top -"; then
    fail "$1: the normal screen is back (the view is gone)" "$(pane)"
  else
    pass "$1: the normal screen is back (the view is gone)"
  fi
}

top_start
expect_pane "the rows read at the start are there" "^alpha +lock "
long=$(printf 'n%.0s' $(seq 1 100))
run_bg zeta -- sleep 60
Z=$LAST_BG
expect_pane "a lock taken by another process shows within 5 s" "^zeta +lock .*:$Z sleep"
run_bg "$long" -- sleep 60
expect_pane "a name too long for 80 columns is cut with '+'" "^nnnnnnnnnn+\+ lock "
run_bg -w 60 zeta -- true
expect_pane "a waiter shows in the WAIT column" "^zeta +lock .* 1  "
if pane | awk 'length($0) > 80 { bad = 1 } END { exit !bad }'; then
  fail "no line is wider than the terminal" "$(pane)"
else
  pass "no line is wider than the terminal"
fi
tmux -L "$SOCK" send-keys -t top s
expect_pane "'s' sorts by the next key (age)" "sorted by age"
tmux -L "$SOCK" send-keys -t top r
expect_pane "'r' reverses" "sorted by age \(reversed\)"
tmux -L "$SOCK" send-keys -t top / z e t a Enter
expect_pane "'/' filters the names" "filter 'zeta'"
if pane_has "^alpha "; then fail "a name the filter leaves out is gone" "$(pane)"; else pass "a name the filter leaves out is gone"; fi
tmux -L "$SOCK" send-keys -t top q
restored "q" 0
top_stop_session

for sig in TERM INT; do
  top_start
  kill -$sig "$(cat "$TEST_DIR/top.pid")"
  restored "SIG$sig" 0
  top_stop_session
done

# The server lost: the terminal is given back with the reason.
top_start
stop_bg
{ kill -KILL "$REDIS_PID"; wait "$REDIS_PID"; } 2>/dev/null
REDIS_PID=""
expect_pane "a lost server is said on the screen" "lost the connection to redis://" 10
restored "a lost server" 69
expect_pane "the reason is left on the normal screen" "^dlock: top: lost the connection to redis://127\.0\.0\.1:$REDIS_PORT"
top_stop_session

finish
