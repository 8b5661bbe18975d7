#!/usr/bin/env bash
# python/run_tests.sh LIBDLOCK [DLOCK_CLI] [--asan]: the binding's pytest suite against the
# libdlock.so given (ctest runs it; by hand: bash python/run_tests.sh build/plain/src/libdlock.so).
# Exits 77 (skipped) when no python3 with pytest is found (apt-get install python3-pytest).
# --asan: the library of an ASan build, loaded into an uninstrumented python3 by preloading
# the compiler's libasan (leak checking off: the interpreter keeps its objects at exit).
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=$1
[ -e "$lib" ] && lib=$(realpath -- "$lib")  # relative to the caller's directory, not python/
cli=${2:-}
[ -n "$cli" ] && [ -e "$cli" ] && cli=$(realpath -- "$cli")
asan=${3:-}
py=""
# The first python3 on PATH that has pytest, else Debian's own (a pyenv's may lack it).
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import pytest' 2>/dev/null; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "python/run_tests.sh: no python3 with pytest (apt-get install python3-pytest): skipped" >&2
  exit 77
fi
export DLOCK_LIB=$lib
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the source tree
[ -n "$cli" ] && export DLOCK_CLI=$cli
cd "$here" || exit 1
if [ "$asan" = "--asan" ]; then
  libasan=$(${CC:-cc} -print-file-name=libasan.so)
  if [ ! -e "$libasan" ]; then
    echo "python/run_tests.sh: no libasan.so from ${CC:-cc} -print-file-name: skipped" >&2
    exit 77
  fi
  export LD_PRELOAD=$libasan
  export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
exec "$py" -m pytest -q -p no:cacheprovider tests
