#!/usr/bin/env bash
# The ops examples (examples/systemd/, examples/docker/Dockerfile, README
# "Running under systemd and in containers") stay right:
# * each service that runs dlock has the settings dlock's signals and exit
#   codes need (KillMode=mixed, SuccessExitStatus=143, TimeoutStopSec above
#   --grace, Restart= and RestartPreventExitStatus=64 for the daemons), and no
#   password: the password comes from LoadCredential= through --password-file;
# * each unit's dlock command line parses: run with its ExecStart arguments
#   (dlock built here, the job's programs stubbed, %d a temp credentials
#   directory) against a URL where nothing listens, dlock must exit 69
#   (unavailable), not 64 (usage); the same line with an unknown option added
#   must exit 64 (the control);
# * against a redis-server whose default user wants the credential's password
#   (the URL has none): each daemon logs in (elect: its command runs), and
#   SIGTERM, as systemd stops it, ends it within TimeoutStopSec with a status
#   in SuccessExitStatus=; the oneshot exits 0 on a free lock, 75 (a success
#   for the unit) while another holds it, and the holder 143 on SIGTERM;
# * `systemd-analyze verify` accepts every unit (copies whose ExecStart paths
#   point to the built dlock and to stubs);
# * the Dockerfile is multi-stage from Debian 12, builds without tests or
#   benchmarks and ends with ENTRYPOINT ["dlock"]; `docker build --check` only
#   where a docker daemon answers and the base image is already there (no pull).
# Exits 77 (skipped) when systemd-analyze is missing and nothing else failed.
# Usage: systemd_units.sh DLOCK_BIN SOURCE_DIR
set -u
dlock=$1
src=$2
dir=$src/examples/systemd
# tests/cli/lib.sh: the temp dir ($TEST_DIR), a redis-server stopped by PID on
# every exit path, bounded waits; no DLOCK_* settings from the caller.
# shellcheck disable=SC2034 # read by lib.sh
DLOCK_BIN=$dlock
# shellcheck source=/dev/null
. "$src/tests/cli/lib.sh"
tmp=$TEST_DIR
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# unit_get FILE KEY: the values of KEY in FILE, one per line, continuation
# lines joined, comments skipped.
unit_get() {
  awk -v key="$2" '
    /^[ \t]*[#;]/ && cont == "" { next }
    { line = cont $0; cont = "" }
    /\\$/ { cont = substr(line, 1, length(line) - 1) " "; next }
    { if (index(line, key "=") == 1) print substr(line, length(key) + 2) }' "$1"
}
# seconds D: a systemd or dlock duration (30s, 5m, 1m30s, 500ms) in whole seconds, rounded up.
seconds() {
  local d=$1 total=0 n u
  while [[ $d =~ ^([0-9]+)(ms|s|m|h|min)?(.*)$ ]]; do
    n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]} d=${BASH_REMATCH[3]}
    case $u in ms) total=$((total + (n + 999) / 1000)) ;; m | min) total=$((total + n * 60)) ;;
      h) total=$((total + n * 3600)) ;; *) total=$((total + n)) ;; esac
  done
  echo "$total"
}

units=("$dir"/*.service "$dir"/*.timer)
[ -e "${units[0]}" ] || { bad "no units in $dir"; units=(); }
mkdir -p "$tmp/units" "$tmp/bin" "$tmp/creds" "$tmp/home"
printf 'not-the-password\n' >"$tmp/creds/dlock-password"
printf 'not-the-agent-token-0123\n' >"$tmp/creds/dlock-token" # dlock serve's --token-file
chmod 600 "$tmp/creds/dlock-password" "$tmp/creds/dlock-token"

# ---- the settings, unit by unit ----
daemons=0
for unit in "${units[@]}"; do
  name=${unit##*/}
  [[ $name == *.service ]] || continue
  exec_line=$(unit_get "$unit" ExecStart)
  [[ $exec_line == */dlock\ * ]] || continue
  sub=$(printf '%s\n' "$exec_line" | awk '{print $2}')
  grep -qiE '[a-z]://[^/@ ]*[^/@ :]@|password *=' "$unit" &&
    bad "$name: a password in the unit (use LoadCredential= and --password-file)" || ok
  [[ $exec_line == *"--password-file %d/"* ]] && [ -n "$(unit_get "$unit" LoadCredential)" ] && ok ||
    bad "$name: no 'LoadCredential=' with '--password-file %d/NAME'"
  [ "$(unit_get "$unit" KillMode)" = mixed ] && ok ||
    bad "$name: KillMode=mixed is missing (SIGTERM to dlock only: it passes it on to the command)"
  [[ " $(unit_get "$unit" SuccessExitStatus) " == *" 143 "* ]] && ok ||
    bad "$name: SuccessExitStatus=143 is missing (dlock's exit on SIGTERM)"
  stop=$(seconds "$(unit_get "$unit" TimeoutStopSec)")
  grace=5
  [[ $exec_line =~ --grace[\ =]([0-9a-z]+) ]] && grace=$(seconds "${BASH_REMATCH[1]}")
  need=$grace
  case $sub in cron | every) need=$((grace + 10)) ;; esac  # a run stuck in the library: --grace + 10 s
  [ "${stop:-0}" -gt "$need" ] && ok ||
    bad "$name: TimeoutStopSec (${stop:-unset} s) must exceed ${need} s (--grace $grace s$([ "$need" = "$grace" ] || echo ' + 10 s'))"
  case $sub in
    cron | every | elect)
      daemons=$((daemons + 1))
      [ -n "$(unit_get "$unit" Restart)" ] && [ "$(unit_get "$unit" Restart)" != no ] && ok ||
        bad "$name: 'dlock $sub' needs Restart= (69 at start, 79 lost leadership: stand again)"
      [[ " $(unit_get "$unit" RestartPreventExitStatus) " == *" 64 "* ]] && ok ||
        bad "$name: RestartPreventExitStatus=64 is missing (a usage error does not mend itself)"
      ;;
  esac
done
[ "$daemons" -ge 3 ] && ok || bad "want units for dlock cron, every and elect, found $daemons daemon units"
for u in "${units[@]}"; do
  [[ $u == *.timer ]] || continue
  [ -e "${u%.timer}.service" ] && ok || bad "${u##*/} has no ${u##*/%.timer}.service"
done

# ---- copies pointing to the built dlock and to stub jobs ----
for unit in "${units[@]}"; do
  for prog in $(grep -oE '/usr/local/bin/[A-Za-z0-9._-]+' "$unit" | sort -u); do
    [ "$prog" = /usr/local/bin/dlock ] && continue
    # A job: leaves a mark; with STUB_HOLD set, runs until a signal ends it.
    printf '#!/bin/sh\n: >"$0.ran"\n[ -z "${STUB_HOLD:-}" ] || exec sleep 300\nexit 0\n' >"$tmp/bin/${prog##*/}"
    chmod +x "$tmp/bin/${prog##*/}"
  done
  sed -e "s#/usr/local/bin/dlock\\b#$dlock#g" -e "s#/usr/local/bin/#$tmp/bin/#g" "$unit" >"$tmp/units/${unit##*/}"
done

# ---- each command line parses: 69 where nothing listens, 64 with a bad option ----
# The URL of examples/systemd/dlock.env with its host and port replaced by a
# loopback port where nothing listens; no user or system config file.
url=$(sed -n 's/^DLOCK_URL=//p' "$dir/dlock.env")
[ -n "$url" ] && ok || bad "examples/systemd/dlock.env sets no DLOCK_URL"
[[ $url =~ ^[a-z-]+://[^/@]*[^/@:]@ ]] || grep -v '^#' "$dir/dlock.env" | grep -qiE '^[A-Z_]*(PASSWORD|AUTH)[A-Z_]*=' &&
  bad "examples/systemd/dlock.env: a password in the environment file (use LoadCredential=)" || ok
dead=$(printf '%s\n' "$url" | sed -E 's#^([a-z]+://([^@/]*@)?)[^/]*#\1127.0.0.1:1#')
# unit_argv UNIT: argv=(the unit's ExecStart, split as systemd does for these
# lines: quotes, no variables), %d the temp credentials directory; fails for
# a unit that does not run the built dlock.
unit_argv() {
  local line
  line=$(unit_get "$1" ExecStart)
  [[ $line == "$dlock "* ]] || return 1
  line=${line//%d/$tmp/creds}
  line=${line//%%/%}
  mapfile -d '' argv < <(printf '%s\n' "$line" | xargs printf '%s\0')
  [ "${#argv[@]}" -ge 3 ] || { bad "${1##*/}: cannot split ExecStart into arguments"; return 1; }
}
# unit_run URL [VAR=VALUE...] -- ARGS...: dlock ARGS as the unit runs it, with
# only the environment given (no config file of the caller's); bounded by
# timeout(1) when $run_limit is set.
unit_run() {
  local url=$1
  shift
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  cd "$tmp" && exec env -i PATH="$PATH" HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home" \
    DLOCK_SYSTEM_CONFIG="$tmp/none" DLOCK_URL="$url" DLOCK_PREFIX=test "${vars[@]}" \
    ${run_limit:+timeout "$run_limit"} "$dlock" "$@" </dev/null
}
for unit in "$tmp"/units/*.service; do
  name=${unit##*/}
  unit_argv "$unit" || continue
  for mode in parses control; do
    args=("${argv[@]:1}")
    want=69
    if [ $mode = control ]; then
      args=("${args[0]}" --no-such-option "${args[@]:1}")
      want=64
    fi
    out=$(run_limit=60 unit_run "$dead" -- "${args[@]}" 2>&1)
    rc=$?
    if [ "$rc" = "$want" ]; then
      ok
    else
      bad "$name ($mode): dlock ${args[*]} exited $rc, want $want: $out"
    fi
    if [ $mode = parses ]; then
      [[ $out == *127.0.0.1:1* ]] && ok || bad "$name: the 69 message does not name the server: $out"
    fi
    [[ $out == *not-the-password* ]] && bad "$name: the password file's content was printed: $out" || ok
  done
done

# ---- against a real server: the password from the credential, and every exit
# of ordinary operation (stop, busy) one that the unit counts as success ----
# success UNIT RC: RC is 0 or in the unit's SuccessExitStatus=.
success() {
  [ "$2" = 0 ] || [[ " $(unit_get "$1" SuccessExitStatus) " == *" $2 "* ]]
}
# dlock_connected: a client of the user the URL names is connected (not redis-cli's own).
acli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" --user "$user" --pass "$pw" --no-auth-warning "$@"; }
dlock_connected() { acli CLIENT LIST 2>/dev/null | grep -v 'cmd=client|list' | grep -q "user=$user "; }
# up_or_gone PID: dlock is connected, or it has exited (then no use waiting).
up_or_gone() { dlock_connected || pid_gone "$1"; }
# stop_unit UNIT PID: SIGTERM as systemd sends it; the exit, within TimeoutStopSec, must count as success.
stop_unit() {
  local limit
  limit=$(seconds "$(unit_get "$1" TimeoutStopSec)")
  kill -TERM "$2" 2>/dev/null
  wait_exit "$2" "$limit"
  success "$1" "$EXIT_CODE" && ok ||
    bad "${1##*/}: stopped by SIGTERM, dlock exited $EXIT_CODE (999: not within TimeoutStopSec, $limit s), not a success for the unit: $(cat "$tmp/${1##*/}.log")"
}
if command -v redis-server >/dev/null; then
  start_redis
  # The URL has no password: only the credential's file can let dlock in.
  user=default
  pw=$(head -n1 "$tmp/creds/dlock-password")
  rcli ACL SETUSER default on ">$pw" >/dev/null
  live=$(printf '%s\n' "$url" | sed -E "s#^([a-z]+://([^@/]*@)?)[^/]*#\\1127.0.0.1:$REDIS_PORT#")
  for unit in "$tmp"/units/*.service; do
    name=${unit##*/}
    unit_argv "$unit" || continue
    job=${argv[${#argv[@]} - 1]}
    rm -f "$job.ran"
    case ${argv[1]} in
      cron | every | elect | serve)
        (unit_run "$live" STUB_HOLD=1 -- "${argv[@]:1}") >"$tmp/$name.log" 2>&1 &
        pid=$!
        bg_track "$pid"
        wait_for 30 up_or_gone "$pid"
        dlock_connected && ok || bad "$name: dlock did not log in with the password file: $(cat "$tmp/$name.log")"
        if [ "${argv[1]}" = elect ]; then
          wait_for 30 test -e "$job.ran" -o ! -d "/proc/$pid" && [ -e "$job.ran" ] && ok || bad "$name: the command did not start on the only candidate"
        fi
        stop_unit "$unit" "$pid"
        ;;
      run)
        (unit_run "$live" -- "${argv[@]:1}") >"$tmp/$name.log" 2>&1
        rc=$?
        [ "$rc" = 0 ] && [ -e "$job.ran" ] && ok || bad "$name: a free lock: exit $rc, want 0 and the job run: $(cat "$tmp/$name.log")"
        rm -f "$job.ran"
        (unit_run "$live" STUB_HOLD=1 -- "${argv[@]:1}") >"$tmp/$name.hold.log" 2>&1 &
        pid=$!
        bg_track "$pid"
        wait_for 30 test -e "$job.ran" -o ! -d "/proc/$pid" && [ -e "$job.ran" ] && ok || bad "$name: the holder's job did not start: $(cat "$tmp/$name.hold.log")"
        rm -f "$job.ran"
        (unit_run "$live" -- "${argv[@]:1}") >"$tmp/$name.log" 2>&1
        rc=$?
        [ "$rc" = 75 ] && ! [ -e "$job.ran" ] && ok || bad "$name: another host holds the lock: exit $rc, want 75 and no run"
        success "$unit" "$rc" && ok || bad "$name: exit $rc (busy) is not a success for the unit (SuccessExitStatus=)"
        cp "$tmp/$name.hold.log" "$tmp/$name.log"
        stop_unit "$unit" "$pid"
        ;;
    esac
    grep -q "$pw" "$tmp/$name.log" && bad "$name: the password was printed" || ok
  done
else
  echo "note: redis-server not found: the units' command lines were not run against a server"
fi

# ---- systemd-analyze verify ----
skip=""
if command -v systemd-analyze >/dev/null; then
  out=$(cd "$tmp/units" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify ./*.service ./*.timer 2>&1)
  rc=$?
  # Lines about the system's own units (those ours want: multi-user.target,
  # network-online.target ...) are not ours to judge; any line about ours is.
  names=("$tmp")
  for u in "${units[@]}"; do names+=(-e "${u##*/}"); done
  ours=$(printf '%s\n' "$out" | grep -F -e "${names[@]}")
  if [ -z "$ours" ] && [ "$rc" = 0 ]; then
    ok
  elif [ -z "$ours" ]; then
    ok
    echo "note: systemd-analyze verify exited $rc about this system's own units, not ours: $out"
  else
    bad "systemd-analyze verify (exit $rc): $out"
  fi
else
  skip="systemd-analyze not found (Debian package systemd)"
fi

# ---- the Dockerfile ----
df=$src/examples/docker/Dockerfile
if [ -f "$df" ]; then
  froms=$(grep -cE '^FROM ' "$df")
  [ "$froms" -ge 2 ] && ok || bad "Dockerfile: want a multi-stage build (a build and a runtime stage), found $froms FROM"
  grep -E '^FROM ' "$df" | grep -vqE '^FROM debian:(12|bookworm)(-slim)?([ @]|$)' &&
    bad "Dockerfile: every stage from Debian 12 (debian:bookworm-slim)" || ok
  grep -q -- '-DDLOCK_BUILD_TESTS=OFF' "$df" && grep -q -- '-DDLOCK_BUILD_BENCH=OFF' "$df" && ok ||
    bad "Dockerfile: build without tests and benchmarks (-DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCH=OFF)"
  [ "$(grep -E '^ENTRYPOINT' "$df" | tail -n1)" = 'ENTRYPOINT ["dlock"]' ] && ok ||
    bad 'Dockerfile: the last ENTRYPOINT must be ["dlock"]'
  runtime=$(awk '/^FROM /{stage = ""} {stage = stage $0 "\n"} END {printf "%s", stage}' "$df")
  printf '%s' "$runtime" | grep -qE 'build-essential|cmake|-dev\b' &&
    bad "Dockerfile: the runtime stage installs build tools or -dev packages" || ok
  bad_lines=$(grep -vnE '^\s*($|#)|^(FROM|ARG|RUN|COPY|ENV|WORKDIR|USER|ENTRYPOINT|CMD|LABEL|STOPSIGNAL|HEALTHCHECK|EXPOSE|VOLUME) |^\s+\S' "$df")
  [ -z "$bad_lines" ] && ok || bad "Dockerfile: lines that are no instruction: $bad_lines"
  base=$(grep -m1 -oE '^FROM \S+' "$df" | cut -d' ' -f2)
  if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1 &&
    timeout 20 docker image inspect "$base" >/dev/null 2>&1; then
    out=$(timeout 300 docker build --check --pull=false -f "$df" "$src" 2>&1) && ok ||
      bad "docker build --check: $out"
  else
    echo "note: docker build --check not run (no docker daemon, or $base not present: this test pulls nothing)"
  fi
else
  bad "no examples/docker/Dockerfile"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ] || exit 1
if [ -n "$skip" ]; then
  echo "SKIP: $skip; the other checks passed"
  exit 77
fi
exit 0
