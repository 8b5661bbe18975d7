#!/usr/bin/env bash
# Each status in DLOCK_ERRNO_MAP must be documented in docs/errors.md with
# its number, and the doc must list no status the header lacks (curl's
# test1477 idea: header and docs kept in sync by a test).
set -u
root=$1
header=$root/include/dlock.h
doc=$root/docs/errors.md
fail=0
codes=$(grep -oE 'XX\(E[A-Z]+, *-[0-9]+' "$header" | sed -E 's/XX\((E[A-Z]+), *(-[0-9]+)/\1 \2/')
[ -n "$codes" ] || { echo "no codes found in $header"; fail=1; }
while read -r name num; do
  [ -n "$name" ] || continue
  if ! grep -qE "^\| *\`DLOCK_$name\` *\| *$num *\|" "$doc"; then
    echo "docs/errors.md lacks a row '| \`DLOCK_$name\` | $num |'"
    fail=1
  fi
done <<< "$codes"
for documented in $(grep -oE '^\| *`DLOCK_E[A-Z]+`' "$doc" | grep -oE 'E[A-Z]+'); do
  printf '%s\n' "$codes" | grep -q "^$documented " || { echo "docs/errors.md lists DLOCK_$documented, which the header lacks"; fail=1; }
done
if [ $fail = 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
