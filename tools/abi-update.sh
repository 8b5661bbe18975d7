#!/usr/bin/env bash
# abi-update.sh [BUILD_DIR] - regenerate abi/libdlock.abi, the ABI dump that
# tests/check/abi.sh compares the built libdlock.so against. Run it on
# purpose only: after a release (the dump is then the released ABI), or
# when the check reported changes you have reviewed and mean to keep
# (only compatible ones within a major version: see dlock.h's ABI rule).
# BUILD_DIR (default build/plain) must be a RelWithDebInfo or Debug build
# without sanitizers: abidw reads the types from the debug information.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build/plain}
lib=$(ls "$build"/src/libdlock.so.*.*.* 2>/dev/null | head -n 1)
[ -n "$lib" ] || { echo "abi-update: no libdlock.so.X.Y.Z in $build/src; build first" >&2; exit 1; }
command -v abidw >/dev/null || { echo "abi-update: abidw missing (Debian: apt-get install abigail-tools)" >&2; exit 1; }
abidw --headers-dir "$root/include" --no-corpus-path --short-locs --no-comp-dir-path \
      --drop-undefined-syms --type-id-style hash --out-file "$root/abi/libdlock.abi" "$lib"
echo "abi-update: wrote abi/libdlock.abi from $lib; review 'git diff abi/' and commit it"
