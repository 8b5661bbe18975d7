#!/usr/bin/env bash
# The core, the public header and the CLI's connecting code are
# backend-blind (issue 23): no word naming a server technology outside the
# scheme registry (src/core/backend.c), and the seam's required table
# (struct dlock__backend_ops in src/core/backend.h) stays narrow. What
# names a technology belongs in its backend (src/redis, src/zk, ...).
set -u
root=$1
fail=0
words='Redis|Redlock|Sentinel|Cluster|ZooKeeper|PostgreSQL|MySQL|MariaDB|Lua'
files=$(ls "$root"/src/core/*.c "$root"/src/core/*.h "$root"/src/sched/*.c "$root"/src/sched/*.h \
           "$root"/include/dlock.h "$root"/cli/common.c | grep -v '/src/core/backend\.c$')
found=$(grep -nwE "$words" $files)
if [ -n "$found" ]; then
  echo "a server technology is named outside the scheme registry (src/core/backend.c); move the words into"
  echo "the backend (its messages, its query hook) or write them neutrally:"
  printf '%s\n' "$found" | sed "s|^$root/||"
  fail=1
fi
# Function pointers of the required table: at most 15.
ops=$(sed -n '/^struct dlock__backend_ops {/,/^};/p' "$root/src/core/backend.h" | grep -c '(\*')
if [ "$ops" -eq 0 ]; then
  echo "struct dlock__backend_ops not found in src/core/backend.h"
  fail=1
elif [ "$ops" -gt 15 ]; then
  echo "the required table (struct dlock__backend_ops, src/core/backend.h) has $ops operations; at most 15:"
  echo "put an operation that not every backend needs in a sub-table, or a rare request in the query hook"
  fail=1
fi
if [ $fail = 0 ]; then echo "2 passed, 0 failed"; else echo "failed"; fi
exit $fail
