#!/usr/bin/env bash
# From a fresh Debian 12 machine: install what is missing, build, and run
# `dlock demo` on a private redis-server that the demo starts and stops.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
dlock_install_packages
dlock_build "$DLOCK_ROOT/build/plain"
exec "$DLOCK_ROOT/build/plain/cli/dlock" demo "$@"
