#!/usr/bin/env bash
# Every symbol the shared library exports must start with dlock_ (and the
# internal dlock__ helpers must stay hidden): a program that links us with
# other libraries must never meet a name of ours it did not ask for.
set -u
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
[ -n "$syms" ] || { echo "no exported symbols found in $lib"; echo "0 passed, 1 failed"; exit 1; }
bad=$(printf '%s\n' "$syms" | grep -v '^dlock_' ; printf '%s\n' "$syms" | grep '^dlock__')
if [ -n "$bad" ]; then
  echo "symbols exported without the dlock_ prefix (or internal dlock__):"
  printf '  %s\n' $bad
  echo "0 passed, 1 failed"
  exit 1
fi
echo "$(printf '%s\n' "$syms" | wc -l) exported symbols, all dlock_"
echo "1 passed, 0 failed"
