#!/usr/bin/env bash
# A test that needs name resolution skips, saying why, where "localhost"
# does not resolve: run test_tls's localhost test in a private mount
# namespace whose /etc/hosts lacks the name. Needs unshare(1) and the right
# to mount (root); skips itself (77) otherwise.
set -u
bin=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-noresolve.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
printf '127.0.0.1 not-localhost\n' >"$tmp/hosts"
if ! unshare -m sh -c "mount --bind '$tmp/hosts' /etc/hosts && ! getent hosts localhost >/dev/null" 2>/dev/null; then
  echo "SKIP: cannot hide 'localhost' here (needs unshare -m and mount rights)"
  exit 77
fi
unshare -m sh -c "mount --bind '$tmp/hosts' /etc/hosts && exec '$bin' localhost_is_verified" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
if [ "$rc" = 77 ] && grep -q "SKIP: needs name resolution: the name 'localhost' does not resolve" "$tmp/out"; then
  echo "1 passed, 0 failed"
  exit 0
fi
echo "FAIL - want exit 77 and a SKIP line naming 'localhost', got exit $rc"
echo "0 passed, 1 failed"
exit 1
