#!/usr/bin/env bash
# matrix.sh BUILD_DIR [FIXTURE...] - run the conformance suite on every
# fixture (or those named), two at a time, and print the matrix of
# docs/conformance.md: a row per scenario, a column per fixture, each cell
# pass, FAIL, known FAIL (a listed finding) or not offered. The logs stay
# in a temp dir, named at the end. Exit 1 if a cell is FAIL.
set -u
build=${1:?usage: matrix.sh BUILD_DIR [FIXTURE...]}
shift
bin=$build/tests/conformance/conformance
[ -x "$bin" ] || { echo "matrix.sh: no $bin: build first (cmake --build $build)" >&2; exit 2; }
if [ $# -eq 0 ]; then
  # The binary lists its fixtures when run without one.
  set -- $("$bin" 2>&1 | sed -n 's/.*fixtures://p')
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/dlock-conformance-XXXXXX")
running=0
for fx in "$@"; do
  "$bin" "$fx" >"$logs/$fx.log" 2>&1 &
  running=$((running + 1))
  if [ $running -ge 2 ]; then wait -n; running=$((running - 1)); fi
done
wait
cat "$logs"/*.log | awk -v order="$*" '
  /^conformance: / {
    fx = $2; sc = $3; res = $4; for (i = 5; i <= NF; i++) res = res " " $i
    cell[sc, fx] = res
    if (!(sc in seen)) { seen[sc] = 1; rows[++n] = sc }
    if (res == "FAIL") failed = 1
  }
  /^SKIP: / { print "(" $0 ")" }
  END {
    nf = split(order, fxs, " ")
    line = "| scenario |"; sep = "| --- |"
    for (j = 1; j <= nf; j++) { line = line " " fxs[j] " |"; sep = sep " --- |" }
    print line; print sep
    for (i = 1; i <= n; i++) {
      line = "| " rows[i] " |"
      for (j = 1; j <= nf; j++) {
        c = ((rows[i], fxs[j]) in cell) ? cell[rows[i], fxs[j]] : "(did not run)"
        line = line " " c " |"
      }
      print line
    }
    exit failed
  }'
rc=$?
echo "logs: $logs"
exit $rc
