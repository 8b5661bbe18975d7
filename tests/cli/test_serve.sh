# test_serve.sh - dlock serve, the HTTP agent (docs/agent.md), through real
# HTTP clients (curl and Python's http.client) against a real redis-server:
# acquire and release through curl; a second client waits and gets the lock
# when the first one's stream closes (a disconnect releases); the loss is
# pushed as 'event: lost' when Redis is frozen (SIGSTOP, resumed after); a
# wrong or missing token is 401 and changes nothing; over TCP without a
# token no change is taken (403); huge, malformed and odd requests are 4xx
# and the agent answers on; SIGTERM releases the held locks at once (a
# waiter outside the agent gets them, not after the lease) and exits 0; a
# unix socket has mode 0600. One redis-server and one agent serve most
# scenarios.
. "$DLOCK_TEST_LIB"

for tool in curl python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool missing (tools/setup.sh installs it)"
    exit 77
  fi
done
if "$DLOCK" serve --url redis://127.0.0.1:1 2>&1 | grep -qs 'without libmicrohttpd'; then
  echo "SKIP: dlock was built without libmicrohttpd"
  exit 77
fi

start_redis
TOKEN=tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$TEST_DIR/token"
chmod 600 "$TEST_DIR/token"
AUTH="Authorization: Bearer $TOKEN"

# A stream client: POST BODY to PATH and write the status line and every
# line of the answer to OUT as it comes (flushed); ends with the stream, or
# when killed (its socket closes: the agent's cue to release).
cat >"$TEST_DIR/sse.py" <<'EOF'
import http.client, sys
port, path, body, token, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
headers = {"Content-Type": "application/json"}
if token:
    headers["Authorization"] = "Bearer " + token
with open(out, "w") as f:
    c = http.client.HTTPConnection("127.0.0.1", int(port), timeout=120)
    c.request("POST", path, body=body.encode(), headers=headers)
    r = c.getresponse()
    f.write("status %d\n" % r.status)
    f.flush()
    while True:
        line = r.readline()
        if not line:
            break
        f.write(line.decode())
        f.flush()
    f.write("end of stream\n")
EOF

# start_agent PORT [ARGS...]: dlock serve in the background; AGENT its pid.
start_agent() {
  local port=$1
  shift
  "$DLOCK" serve --listen "127.0.0.1:$port" "$@" 2>>"$TEST_DIR/agent.log" &
  AGENT=$!
  bg_track $AGENT
  wait_for 20 curl -sf -o /dev/null "http://127.0.0.1:$port/v1/health"
}
# stream NAME OUT BODY: a stream client of the agent on $PORT (curl, which
# starts fast on a busy machine); SSE its pid. pystream: the same in Python.
stream() {
  curl -sN -m 120 -H "$AUTH" -X POST -d "$3" "http://127.0.0.1:$PORT/v1/locks/$1/acquire" >"$2" 2>/dev/null &
  SSE=$!
  bg_track $SSE
}
pystream() {
  python3 "$TEST_DIR/sse.py" "$PORT" "/v1/locks/$1/acquire" "$3" "$TOKEN" "$2" 2>>"$TEST_DIR/sse.err" &
  SSE=$!
  bg_track $SSE
}
holder_of() { grep -o '"holder": "[0-9a-f]*"' "$1" | head -n 1 | cut -d'"' -f4; }
api() { curl -s -m 30 -H "$AUTH" "$@"; }
code() { curl -s -m 30 -o "$TEST_DIR/body" -w '%{http_code}' "$@"; }
held() { curl -s -m 30 "http://127.0.0.1:$PORT/v1/locks/$1" | grep -qs '"held": true'; }
free_() { curl -s -m 30 "http://127.0.0.1:$PORT/v1/locks/$1" | grep -qs '"held": false'; }

PORT=$(free_port)
check "the agent starts with a token file" start_agent "$PORT" --token-file "$TEST_DIR/token"
BASE="http://127.0.0.1:$PORT"

# ---- acquire and release through curl ----
curl -sN -m 60 -H "$AUTH" -X POST -d '{"lease": "10s", "owner": "curl test"}' "$BASE/v1/locks/orders/acquire" \
  >"$TEST_DIR/c1" 2>/dev/null &
C1=$!
bg_track $C1
check "curl: event acquired" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/c1"
assert_match "curl: holder id and fence in the acquired event" "$(grep '^data:' "$TEST_DIR/c1" | head -n 1)" \
  '"holder": "[0-9a-f]{32}", "fence": [1-9][0-9]*, "valid_until": "[0-9T:.+-]+"'
check "status: held, owner shown" eval "curl -s '$BASE/v1/locks/orders' | grep -qs '\"owner_info\": \"curl test\"'"
check "redis has the key" key_exists orders
H1=$(holder_of "$TEST_DIR/c1")
assert_eq "release by holder id" "$(code -H "$AUTH" -X POST -d "{\"holder\": \"$H1\"}" "$BASE/v1/locks/orders/release")" 200
check "curl: event released, the stream ends" wait_for 10 grep -qs '"by": "release"' "$TEST_DIR/c1"
wait_exit $C1 10
assert_eq "curl exits 0 at the stream's end" "$EXIT_CODE" 0
check "status: free after the release" free_ orders
assert_eq "a second release of that holder: 404" \
  "$(code -H "$AUTH" -X POST -d "{\"holder\": \"$H1\"}" "$BASE/v1/locks/orders/release")" 404
assert_match "... with a JSON error naming the code" "$(cat "$TEST_DIR/body")" '"code": "ENOTHELD"'

# ---- two clients on one name: the second gets it when the first's stream closes ----
pystream hand "$TEST_DIR/a" '{}'
A=$SSE
check "client A holds 'hand'" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/a"
pystream hand "$TEST_DIR/b" '{"wait": "60s"}'
B=$SSE
check "client B waits (the agent counts it)" wait_for 20 eval "curl -s '$BASE/v1/locks/hand' | grep -qs '\"waiting\": 1'"
sleep 1
check "client B has no answer while A holds" eval "! grep -qs '^event: acquired' '$TEST_DIR/b'"
FENCE_A=$(grep -o '"fence": [0-9]*' "$TEST_DIR/a" | head -n 1 | grep -o '[0-9]*$')
t0=$(date +%s)
kill -KILL $A 2>/dev/null # a client that dies: its socket closes
wait $A 2>/dev/null
check "client B gets the lock once A's stream closed" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/b"
took=$(($(date +%s) - t0))
check "... well before A's 30 s lease could end (${took}s)" test "$took" -lt 15
FENCE_B=$(grep -o '"fence": [0-9]*' "$TEST_DIR/b" | head -n 1 | grep -o '[0-9]*$')
check "... with a larger fence" test "${FENCE_B:-0}" -gt "${FENCE_A:-0}"
kill -TERM $B
check "B's disconnect releases too" wait_for 20 free_ hand

# A waiter that goes away is no waiter any more.
stream hand "$TEST_DIR/a2" '{}'
check "client A2 holds 'hand'" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/a2"
A2=$SSE
st=$("$DLOCK" status hand 2>&1)
assert_match "dlock status names the agent and its user" "$st" "holder: +pid $AGENT on .* \\(user $(id -un)\\)"
assert_match "... and the client" "$st" "command: +\\(dlock serve, for 127\\.0\\.0\\.1:[0-9]+\\)"
stream hand "$TEST_DIR/w" '{"wait": "forever"}'
W=$SSE
check "a waiter waits" wait_for 20 eval "curl -s '$BASE/v1/locks/hand' | grep -qs '\"waiting\": 1'"
kill -KILL $W 2>/dev/null
wait $W 2>/dev/null
check "a waiter that left stops waiting in the agent" \
  wait_for 20 eval "curl -s '$BASE/v1/locks/hand' | grep -qs '\"waiting\": 0'"
kill -TERM $A2
check "A2's disconnect releases" wait_for 20 free_ hand

# ---- a semaphore and a read-write lock ----
stream pool "$TEST_DIR/p1" '{"kind": "semaphore", "permits": 2}'
P1=$SSE
stream pool "$TEST_DIR/p2" '{"kind": "semaphore", "permits": 2}'
P2=$SSE
check "two holders of a 2-permit semaphore" \
  wait_for 20 eval "grep -qs '^event: acquired' '$TEST_DIR/p1' && grep -qs '^event: acquired' '$TEST_DIR/p2'"
assert_eq "a third one: 409" "$(code -H "$AUTH" -X POST -d '{"kind": "semaphore", "permits": 2}' "$BASE/v1/locks/pool/acquire")" 409
assert_match "... EBUSY" "$(cat "$TEST_DIR/body")" '"code": "EBUSY"'
assert_eq "another limit for the same semaphore: 409" \
  "$(code -H "$AUTH" -X POST -d '{"kind": "semaphore", "permits": 3}' "$BASE/v1/locks/pool/acquire")" 409
assert_match "... ELIMIT" "$(cat "$TEST_DIR/body")" '"code": "ELIMIT"'
assert_match "status: 2 permits used" "$(curl -s "$BASE/v1/locks/pool")" '"permits": 2, "permits_used": 2'
kill -TERM $P1 $P2
stream rw "$TEST_DIR/r1" '{"kind": "read"}'
R1=$SSE
stream rw "$TEST_DIR/r2" '{"kind": "read"}'
R2=$SSE
check "two readers at once" \
  wait_for 20 eval "grep -qs '^event: acquired' '$TEST_DIR/r1' && grep -qs '^event: acquired' '$TEST_DIR/r2'"
assert_eq "a writer meanwhile: 409" "$(code -H "$AUTH" -X POST -d '{"kind": "write"}' "$BASE/v1/locks/rw/acquire")" 409
kill -TERM $R1 $R2
check "the readers' disconnects release the read-write lock" wait_for 20 free_ rw
assert_eq "then a writer gets it" "$(curl -s -m 30 -o /dev/null -w '%{http_code}' -H "$AUTH" -X POST -d '{"kind": "write"}' \
  --max-time 3 "$BASE/v1/locks/rw/acquire")" 200

# ---- the token ----
assert_eq "acquire with a wrong token: 401" \
  "$(code -H 'Authorization: Bearer wrong-token-wrong-token' -X POST "$BASE/v1/locks/tok/acquire")" 401
assert_match "... a JSON error" "$(cat "$TEST_DIR/body")" '"code": "UNAUTHORIZED".*"message": "the bearer token is wrong"'
check "... and no state change" free_ tok
check "... no key in redis" key_gone tok
assert_eq "acquire without a token: 401" "$(code -X POST "$BASE/v1/locks/tok/acquire")" 401
assert_match "... says the token is needed" "$(cat "$TEST_DIR/body")" 'this call needs the token'
stream tok "$TEST_DIR/t" '{}'
T=$SSE
check "a holder with the token" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/t"
HT=$(holder_of "$TEST_DIR/t")
assert_eq "release of another's hold without the token: 401" \
  "$(code -X POST -d "{\"holder\": \"$HT\"}" "$BASE/v1/locks/tok/release")" 401
assert_eq "... with a wrong token: 401" \
  "$(code -H 'Authorization: Bearer nope' -X POST -d "{\"holder\": \"$HT\"}" "$BASE/v1/locks/tok/release")" 401
check "... the lock is still held" held tok
check "... its stream still open" eval "! grep -qs '^event: released' '$TEST_DIR/t'"
kill -TERM $T
check "status needs no token on loopback" wait_for 20 free_ tok
check "the agent never printed the token" eval "! grep -qF '$TOKEN' '$TEST_DIR/agent.log' '$TEST_DIR/c1' '$TEST_DIR/body'"

# ---- bad input: 4xx, and the agent answers on ----
big=$(head -c 100000 /dev/zero | tr '\0' 'x')
assert_eq "a 100 kB body: 413" "$(printf '%s' "$big" | code -H "$AUTH" -X POST --data-binary @- "$BASE/v1/locks/x/acquire")" 413
assert_eq "a 100 kB chunked body: 413" "$(printf '%s' "$big" | code -H "$AUTH" -H 'Transfer-Encoding: chunked' \
  -X POST --data-binary @- "$BASE/v1/locks/x/acquire")" 413
for body in '{"wait": ' '[1, 2]' '{"lease": "30s"} x' '{"lease": 1.5}' '{"kind": {}}' '{"zzz": 1}' \
  '{"lease": "30s", "lease": "1m"}' '{"owner": "a\u0000b"}' "$(printf '{"owner": "\377"}')" '{"kind": "semaphore"}' \
  '{"wait": "-1s"}' '{"ttl": "1s", "lease": "30s"}'; do
  assert_eq "bad body $body: 400" "$(code -H "$AUTH" -X POST -d "$body" "$BASE/v1/locks/x/acquire")" 400
  assert_match "... a JSON error with a message" "$(cat "$TEST_DIR/body")" '^\{"error": \{"code": "EINVAL", "message": "invalid argument", "detail": "[^"]+'
done
assert_eq "a release without a holder: 400" "$(code -H "$AUTH" -X POST -d '{}' "$BASE/v1/locks/x/release")" 400
for path in 'a%00b' 'a%01b' 'a%7Bb%7D' '%ff%fe' "$(head -c 600 /dev/zero | tr '\0' 'n')"; do
  assert_eq "odd name ${path:0:20}: 400" "$(code -H "$AUTH" -X POST "$BASE/v1/locks/$path/acquire")" 400
  assert_match "... ENAME" "$(cat "$TEST_DIR/body")" '"code": "ENAME"'
done
assert_eq "an unknown path: 404" "$(code "$BASE/v2/nothing")" 404
assert_eq "GET on acquire: 405" "$(code "$BASE/v1/locks/x/acquire")" 405
assert_eq "a name with a slash (percent-encoded) is one name" "$(code "$BASE/v1/locks/app%2Fdb")" 200
assert_match "... named whole" "$(cat "$TEST_DIR/body")" '"name": "app/db"'
# Garbage that is not HTTP, and a connection cut mid-request.
if exec 3<>"/dev/tcp/127.0.0.1/$PORT"; then
  printf 'GARBAGE\r\n\r\n' >&3
  timeout 5 cat <&3 >/dev/null
  exec 3>&-
fi
if exec 3<>"/dev/tcp/127.0.0.1/$PORT"; then
  printf 'POST /v1/locks/x/acquire HTTP/1.1\r\nHost: a\r\nContent-Length: 50\r\n\r\n{"wa' >&3
  exec 3>&-
fi
assert_eq "after all that the agent answers" "$(code "$BASE/v1/health")" 200
check "... and is the same process" pid_alive $AGENT

# ---- /metrics ----
assert_eq "/metrics: 200" "$(code "$BASE/metrics")" 200
check "... the library's metrics and the agent's" \
  eval "grep -qs '^dlock_agent_holds 0' '$TEST_DIR/body' && grep -qs '^# TYPE dlock_' '$TEST_DIR/body'"

# ---- the loss pushed when Redis is frozen ----
stream frozen "$TEST_DIR/f" '{"lease": "2s"}'
F=$SSE
check "a holder with a 2 s lease" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/f"
kill -STOP "$REDIS_PID"
t0=$(date +%s)
check "event: lost while Redis is frozen" wait_for 20 grep -qs '^event: lost' "$TEST_DIR/f"
took=$(($(date +%s) - t0))
kill -CONT "$REDIS_PID"
assert_match "... with the reason" "$(grep -A1 '^event: lost' "$TEST_DIR/f" | tail -n 1)" '"reason": "(unreachable|deadline)"'
check "... at the local deadline, not later (${took}s for a 2 s lease)" test "$took" -le 6
wait_exit $F 10
assert_eq "... and the stream ends (curl exits 0)" "$EXIT_CODE" 0
check "the agent answers after Redis came back" wait_for 20 eval "curl -s '$BASE/v1/locks/frozen' | grep -qs '\"name\"'"

# ---- extend ----
stream ext "$TEST_DIR/e" '{"ttl": "5s"}'
check "a holder with a fixed 5 s lease" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/e"
HE=$(holder_of "$TEST_DIR/e")
assert_eq "extend it to 60 s" "$(code -H "$AUTH" -X POST -d "{\"holder\": \"$HE\", \"lease\": \"60s\"}" "$BASE/v1/locks/ext/extend")" 200
check "... the stream says renewed" wait_for 10 grep -qs '^event: renewed' "$TEST_DIR/e"
ttl=$(rcli PTTL ext)
check "... redis has the new lease (${ttl} ms)" test "${ttl:-0}" -gt 30000

# ---- SIGTERM releases every lock held for clients ----
stream term "$TEST_DIR/s" '{}'
check "a holder of 'term' (30 s lease)" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/s"
"$DLOCK" run --wait 60s term -- true 2>"$TEST_DIR/run.err" &
RUN=$!
bg_track $RUN
check "dlock run waits outside the agent" wait_for 20 eval "curl -s '$BASE/v1/locks/term' | grep -qs '\"waiters\": 1'"
stream term "$TEST_DIR/s2" '{"wait": "forever"}'
S2=$SSE
check "a client waits through the agent too" wait_for 20 eval "curl -s '$BASE/v1/locks/term' | grep -qs '\"waiting\": 1'"
t0=$(date +%s)
kill -TERM $AGENT
wait_exit $AGENT 30
assert_eq "the agent exits 0 on SIGTERM" "$EXIT_CODE" 0
wait_exit $RUN 30
took=$(($(date +%s) - t0))
assert_eq "the waiter outside got the lock and ran" "$EXIT_CODE" 0
check "... at once, not after the 30 s lease (${took}s)" test "$took" -lt 15
check "the stream said released by the agent stopping" grep -qs '"by": "agent stopping"' "$TEST_DIR/s"
wait_exit $S2 10
assert_match "the waiting client was told the agent stops" "$(cat "$TEST_DIR/s2")" '"code": "ECLOSED".*"detail": "the agent is stopping"'
check "the extended lock was released too" key_gone ext
assert_match "the agent said what it did" "$(cat "$TEST_DIR/agent.log")" 'SIGTERM: releasing the [0-9]+ locks? held for clients'

# ---- no token: TCP is read-only; a unix socket has mode 0600 ----
PORT=$(free_port)
check "an agent without a token" start_agent "$PORT"
BASE="http://127.0.0.1:$PORT"
assert_eq "over TCP without a token a change is refused: 403" "$(code -X POST "$BASE/v1/locks/ro/acquire")" 403
assert_match "... saying what to do" "$(cat "$TEST_DIR/body")" '--token-file'
assert_eq "... reads are served" "$(code "$BASE/v1/locks/ro")" 200
kill -TERM $AGENT
wait_exit $AGENT 30
SOCK=$TEST_DIR/agent.sock
"$DLOCK" serve --socket "$SOCK" 2>>"$TEST_DIR/agent.log" &
AGENT=$!
bg_track $AGENT
check "an agent on a unix socket" wait_for 20 curl -sf -o /dev/null --unix-socket "$SOCK" http://agent/v1/health
assert_eq "... mode 0600" "$(stat -c %a "$SOCK")" 600
curl -sN -m 60 --unix-socket "$SOCK" -X POST http://agent/v1/locks/sock/acquire >"$TEST_DIR/u" 2>/dev/null &
U=$!
bg_track $U
check "... takes changes without a token (its mode decides who connects)" wait_for 20 grep -qs '^event: acquired' "$TEST_DIR/u"
kill -TERM $AGENT
wait_exit $AGENT 30
assert_eq "... exits 0 on SIGTERM" "$EXIT_CODE" 0
check "... released its lock" key_gone sock
check "... removed its socket" test ! -e "$SOCK"

# ---- usage ----
usage_error "a non-loopback address without a token" 'not a loopback address' serve --listen 0.0.0.0:1
usage_error "a bad --listen" 'is not ADDR:PORT' serve --listen localhost
usage_error "a short token" 'token of 16 characters' serve --token-file /dev/null
PORT=$(free_port)
out=$("$DLOCK" serve --url "redis://127.0.0.1:1" --listen "127.0.0.1:$PORT" 2>&1)
assert_eq "an unreachable server: 69" "$?" 69
check "the agent's log never holds the token" eval "! grep -qF '$TOKEN' '$TEST_DIR/agent.log'"

# ---- the OpenAPI file is valid (where a validator is installed) ----
spec=$(dirname "$DLOCK_TEST_LIB")/../../docs/agent.openapi.yaml
out=$(python3 -c '
import sys
try:
    import yaml
    from openapi_spec_validator import validate_spec
except ImportError:
    print("skip"); sys.exit(0)
validate_spec(yaml.safe_load(open(sys.argv[1]))); print("valid")' "$spec" 2>&1)
case $out in
  skip) echo "note: openapi_spec_validator not installed: docs/agent.openapi.yaml not validated" ;;
  *) assert_eq "docs/agent.openapi.yaml is valid OpenAPI" "$out" valid ;;
esac
finish
