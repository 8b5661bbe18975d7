# test_metrics.sh - the long-running commands' metrics (docs/metrics.md): a
# real Prometheus server scrapes `dlock every 1s --metrics-listen` every
# second and a PromQL query over what it stored returns the job's run count;
# --metrics-file is rewritten atomically and passes `promtool check metrics`;
# `dlock elect --metrics-file` leaves its term's transitions in the file; a
# port in use and bad values are errors that say what to do; --log-format
# json makes every log line a JSON object.
. "$DLOCK_TEST_LIB"

for tool in prometheus promtool curl; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool missing: apt-get install prometheus curl (tools/setup.sh does)"
    exit 77
  fi
done

start_redis

# ---- Prometheus scrapes dlock every ----

MPORT=$(free_port)
PPORT=$(free_port)
mkdir -p "$TEST_DIR/textfile" "$TEST_DIR/prom"
# The job succeeds three times, then fails: its ok count stays 3.
"$DLOCK" every 1s --name promjob --metrics-listen "127.0.0.1:$MPORT" \
  --metrics-file "$TEST_DIR/textfile/dlock.prom" --metrics-interval 200ms --log-format json --shell -- \
  "n=\$(cat '$TEST_DIR/count' 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n > '$TEST_DIR/count'; [ \$n -le 3 ]" \
  2>"$TEST_DIR/every.log" &
EVERY=$!
bg_track $EVERY

cat >"$TEST_DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: dlock
    static_configs:
      - targets: ['127.0.0.1:$MPORT']
EOF
prometheus --config.file="$TEST_DIR/prometheus.yml" --storage.tsdb.path="$TEST_DIR/prom" \
  --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$TEST_DIR/prometheus.log" 2>&1 &
PROM=$!
bg_track $PROM

prom_ready() {
  curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null
}
# The value of the instant PromQL query $1 (the first series), or "".
promql() {
  curl -sf "http://127.0.0.1:$PPORT/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
runs_ok_is_3() {
  [ "$(promql 'sum by (name) (dlock_job_runs_total{name="promjob",outcome="ok"})')" = "3" ]
}
failed_seen() {
  local v
  v=$(promql 'dlock_job_runs_total{name="promjob",outcome="failed"}')
  [ -n "$v" ] && [ "$v" -ge 1 ]
}

# ---- usage errors (while Prometheus starts) ----

usage_error "--metrics-listen takes ADDR:PORT" "is not ADDR:PORT" every 1s --name j --metrics-listen localhost -- true
usage_error "--metrics-listen takes an address, not a host name" "an address, not a host name" \
  every 1s --name j --metrics-listen localhost:9464 -- true
usage_error "--metrics-interval below 100ms" "less than 100ms" cron '* * * * *' --name j \
  --metrics-file "$TEST_DIR/m.prom" --metrics-interval 10ms -- true
usage_error "cron --next has no metrics to write" "does not go with --next" \
  cron --next '* * * * *' --metrics-file "$TEST_DIR/m.prom"
usage_error "--log-format is text or json" "neither text \\(the default\\) nor json" \
  every 1s --name j --log-format xml -- true
usage_error "elect takes --metrics-listen too, checked the same" "is not ADDR:PORT" \
  elect --metrics-listen 127.0.0.1:0 el -- true

check "prometheus starts" wait_for 60 prom_ready
check "PromQL: the job's ok runs, scraped from dlock every, are 3" wait_for 90 runs_ok_is_3
check "PromQL: later runs are counted as failed" wait_for 30 failed_seen
out=$(curl -sf "http://127.0.0.1:$PPORT/api/v1/targets" |
  python3 -c 'import json,sys; t=json.load(sys.stdin)["data"]["activeTargets"][0]; print(t["health"], repr(t["lastError"]))')
assert_eq "the target is healthy (OpenMetrics, as Prometheus asks for it, parsed)" "$out" "up ''"
out=$(curl -s -H 'Accept: application/openmetrics-text; version=1.0.0' -D "$TEST_DIR/headers" \
  "http://127.0.0.1:$MPORT/metrics" | tail -n 1)
assert_eq "OpenMetrics ends with # EOF" "$out" "# EOF"
assert_match "... and says so in its Content-Type" "$(cat "$TEST_DIR/headers")" "application/openmetrics-text"
assert_eq "another path is 404" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/")" 404
# The dashboard's queries (examples/grafana) and the alerts of docs/metrics.md
# are valid PromQL over these names.
SRC=$(cd "$(dirname "$DLOCK_TEST_LIB")/../.." && pwd)
bad=$(python3 - "$SRC/examples/grafana/dlock-dashboard.json" "$PPORT" <<'PY'
import json, sys, urllib.parse, urllib.request
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p["targets"]:
        q = t["expr"].replace("$instance", ".*").replace("$__rate_interval", "1m")
        url = f"http://127.0.0.1:{sys.argv[2]}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            urllib.request.urlopen(url, timeout=30).read()
        except Exception as e:
            print(f"{p['title']}: {q}: {e}")
PY
)
assert_eq "Prometheus runs every query of the Grafana dashboard" "$bad" ""
sed -n '/^```yaml$/,/^```$/p' "$SRC/docs/metrics.md" | sed '1d;$d' >"$TEST_DIR/alerts.yml"
check "promtool accepts the example alerts of docs/metrics.md" sh -c "promtool check rules '$TEST_DIR/alerts.yml' >/dev/null"
out=$(curl -s "http://127.0.0.1:$MPORT/metrics")
check "promtool accepts what /metrics serves" sh -c 'printf "%s\n" "$1" | promtool check metrics' sh "$out"

"$DLOCK" every 1s --name other --metrics-listen "127.0.0.1:$MPORT" -- true 2>"$TEST_DIR/err"
rc=$?
assert_eq "a port in use: exit 69" "$rc" 69
assert_match "... saying which and what to do" "$(cat "$TEST_DIR/err")" \
  "cannot listen on 127.0.0.1:$MPORT: .*give a free port"

# ---- the file ----

check "promtool accepts the metrics file" sh -c "promtool check metrics < '$TEST_DIR/textfile/dlock.prom'"
kill -TERM $EVERY
wait_exit $EVERY 30
assert_eq "dlock every ends on SIGTERM" "$EXIT_CODE" 143
ran_ok=$(python3 - "$TEST_DIR/every.log" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
events = [json.loads(l) for l in lines]  # every line is one JSON object
assert all({"time", "level", "event", "job", "host", "pid"} <= e.keys() for e in events), events
assert all(e["job"] == "promjob" for e in events)
print(sum(1 for e in events if e["event"] == "ran" and e["exit"] == 0 and e["fence"] > 0))
PY
)
check "--log-format json: every line is a JSON object with time, level, event, job, host, pid" \
  test -n "$ran_ok"
assert_eq "the file's last write has the runs the log shows" \
  "$(grep '^dlock_job_runs_total{name="promjob",outcome="ok"}' "$TEST_DIR/textfile/dlock.prom")" \
  "dlock_job_runs_total{name=\"promjob\",outcome=\"ok\"} $ran_ok"
assert_eq "no temporary file is left beside it" "$(ls "$TEST_DIR/textfile")" "dlock.prom"

# ---- dlock elect ----

"$DLOCK" elect --metrics-file "$TEST_DIR/elect.prom" el -- true 2>"$TEST_DIR/err"
assert_eq "dlock elect --metrics-file: the command ran" "$?" 0
out=$(grep '^dlock_election_' "$TEST_DIR/elect.prom" | sort)
assert_eq "its file shows the term begun and ended, by the election's name" "$out" \
  'dlock_election_leader{name="el"} 0
dlock_election_transitions_total{name="el",to="follower"} 1
dlock_election_transitions_total{name="el",to="leader"} 1'

finish
