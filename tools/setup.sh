#!/usr/bin/env bash
# Install what dlock needs from Debian's packages (only what is missing), then
# build it. Sourced by tools/test.sh and tools/demo.sh; safe to run again.
set -euo pipefail

DLOCK_PACKAGES=(build-essential cmake pkg-config libhiredis-dev libssl-dev redis-server redis-tools
                python3 python3-redis python3-pytest python3-pip tzdata valgrind faketime openssl iproute2 sqlite3
                clang libclang-rt-14-dev clang-format groff-base man-db zsh abigail-tools
                zookeeper libzookeeper-mt-dev default-jdk-headless libcurator-recipes-java
                libpq-dev postgresql pgbouncer spin
                mariadb-server libmariadb-dev systemd libmicrohttpd-dev prometheus tmux curl)
# libmicrohttpd-dev: dlock's --metrics-listen and dlock serve (optional);
# prometheus: its test scrapes it, and promtool checks every exposition;
# tmux: the terminal that tests/cli/test_top.sh drives dlock top in; curl:
# the HTTP tests of dlock serve.
# What the demo needs: a compiler, the library's one dependency (OpenSSL),
# and the redis-server it starts (no JDK, databases or test tools).
DLOCK_DEMO_PACKAGES=(build-essential cmake pkg-config libssl-dev redis-server tzdata)

# dlock_install_packages [PACKAGE...]: those missing of the list given (by
# default the whole suite's, DLOCK_PACKAGES).
dlock_install_packages() {
  local missing=() want=("$@")
  [ ${#want[@]} -gt 0 ] || want=("${DLOCK_PACKAGES[@]}")
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dlock: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The package starts a system redis-server on 6379; dlock's tests and demo
  # use their own servers on free ports, so it does not get in the way.
}

# dlock_build DIR [cmake args...]: configure and build with warnings as errors
# (only the targets in $DLOCK_BUILD_TARGETS when it is set: tools/test.sh).
dlock_build() {
  local dir=$1
  shift
  cmake -S "$DLOCK_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLOCK_WERROR=ON "$@" >/dev/null
  local log
  log=$(mktemp)
  # shellcheck disable=SC2086 # a list of target names
  if ! cmake --build "$dir" -j "$(nproc)" ${DLOCK_BUILD_TARGETS:+--target $DLOCK_BUILD_TARGETS} >"$log" 2>&1; then
    grep -vE '^\[ *[0-9]+%\]' "$log"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

DLOCK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
