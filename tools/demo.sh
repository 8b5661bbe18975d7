#!/usr/bin/env bash
# From a fresh Debian 12 machine: install what the demo needs (a compiler,
# OpenSSL, redis-server: tools/setup.sh's DLOCK_DEMO_PACKAGES), build the
# library and the command only (no tests, benchmarks or optional backends),
# and run `dlock demo` on a private redis-server that the demo starts and stops.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
dlock_install_packages "${DLOCK_DEMO_PACKAGES[@]}"
dlock_build "$DLOCK_ROOT/build/demo" -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCH=OFF \
  -DDLOCK_WITH_POSTGRES=OFF -DDLOCK_WITH_MYSQL=OFF -DDLOCK_WITH_ZOOKEEPER=OFF
exec "$DLOCK_ROOT/build/demo/cli/dlock" demo "$@"
