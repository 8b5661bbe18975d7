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
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
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
chmod 600 "$tmp/creds/dlock-password"

# ---- the settings, unit by unit ----
daemons=0
for unit in "${units[@]}"; do
  name=${unit##*/}
  [[ $name == *.service ]] || continue
  exec_line=$(unit_get "$unit" ExecStart)
  [[ $exec_line == */dlock\ * ]] || continue
  sub=$(printf '%s\n' "$exec_line" | awk '{print $2}')
  grep -qiE '(redis|rediss|postgres(ql)?|mysql|zk)://[^/@ ]*:[^/@ ]+@|password *=' "$unit" &&
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
    printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/${prog##*/}"
    chmod +x "$tmp/bin/${prog##*/}"
  done
  sed -e "s#/usr/local/bin/dlock\\b#$dlock#g" -e "s#/usr/local/bin/#$tmp/bin/#g" "$unit" >"$tmp/units/${unit##*/}"
done

# ---- each command line parses: 69 where nothing listens, 64 with a bad option ----
# The URL of examples/systemd/dlock.env with its host and port replaced by a
# loopback port where nothing listens; no user or system config file.
url=$(sed -n 's/^DLOCK_URL=//p' "$dir/dlock.env")
[ -n "$url" ] && ok || bad "examples/systemd/dlock.env sets no DLOCK_URL"
[[ $url =~ ^[a-z-]+://[^/@]*:[^/@]*@ ]] || grep -v '^#' "$dir/dlock.env" | grep -qiE '^[A-Z_]*(PASSWORD|AUTH)[A-Z_]*=' &&
  bad "examples/systemd/dlock.env: a password in the environment file (use LoadCredential=)" || ok
dead=$(printf '%s\n' "$url" | sed -E 's#^([a-z]+://([^@/]*@)?)[^/]*#\1127.0.0.1:1#')
for unit in "$tmp"/units/*.service; do
  name=${unit##*/}
  exec_line=$(unit_get "$unit" ExecStart)
  [[ $exec_line == "$dlock "* ]] || continue
  exec_line=${exec_line//%d/$tmp/creds}
  exec_line=${exec_line//%%/%}
  mapfile -d '' argv < <(printf '%s\n' "$exec_line" | xargs printf '%s\0')
  if [ "${#argv[@]}" -lt 3 ]; then
    bad "$name: cannot split ExecStart into arguments"
    continue
  fi
  for mode in parses control; do
    args=("${argv[@]:1}")
    want=69
    if [ $mode = control ]; then
      args=("${args[0]}" --no-such-option "${args[@]:1}")
      want=64
    fi
    out=$(cd "$tmp" && env -i PATH="$PATH" HOME="$tmp/home" DLOCK_SYSTEM_CONFIG="$tmp/none" \
      DLOCK_URL="$dead" DLOCK_PREFIX=test timeout 60 "$dlock" "${args[@]}" 2>&1 </dev/null)
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

# ---- systemd-analyze verify ----
skip=""
if command -v systemd-analyze >/dev/null; then
  out=$(cd "$tmp/units" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify ./*.service ./*.timer 2>&1)
  rc=$?
  # Lines about the system's own units are not ours; any line about ours is.
  ours=$(printf '%s\n' "$out" | grep -F -e "$tmp" -e .service -e .timer | grep -vE '^$')
  if [ "$rc" = 0 ] && [ -z "$ours" ]; then
    ok
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
