#!/usr/bin/env bash
# The SPIN model of the Redis mutex (tests/model/mutex.pml, docs/model.md):
#   1. every mutation (a rule of the code broken on purpose, -DBUG_...) must
#      give a violation: the model can fail;
#   2. the model as the code is must give none. In CI this is a bitstate
#      (supertrace) search of the full model, stopped after
#      DLOCK_MODEL_SECONDS (default 120) if not done; DLOCK_MODEL_FULL=1
#      searches it to the end instead (hours on two cores).
# Each check builds its own verifier (spin -a, cc) in a temp dir.
# Ends with "N passed, N failed"; exit 0 when none failed.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v spin >/dev/null || { echo "model: spin is not installed (Debian: spin)"; exit 77; }
work=$(mktemp -d /tmp/dlock-model-XXXXXX)
trap 'rm -rf "$work"' EXIT
secs=${DLOCK_MODEL_SECONDS:-120}
mut_secs=${DLOCK_MODEL_MUTATION_SECONDS:-400}
passed=0
failed=0

# verifier DIR OPT DEFINES...: build pan for the model with these -D options
# (pan.c is large: -O0 builds in seconds, -O2 in minutes on a busy machine).
verifier() {
  local dir=$1 opt=$2
  shift 2
  mkdir -p "$dir" && cp "$here/mutex.pml" "$dir/" &&
    (cd "$dir" && spin -a "$@" mutex.pml >/dev/null && cc "$opt" -w -DSAFETY -DBITSTATE -o pan pan.c)
}

# A mutation: a violation must be found (the first one stops the search).
# Each is searched in the part of the model it concerns (-DNO_QUEUE: tries
# only; -DNO_EXTEND: no caller extends), where it shows in seconds.
mutation() {
  local bug=$1 dir=$work/$1 out start=$SECONDS
  shift
  if ! verifier "$dir" -O0 "-D$bug" "$@"; then
    echo "model: $bug: the verifier did not build"
    return 1
  fi
  out=$(cd "$dir" && timeout -s INT "$mut_secs" ./pan -m200000 -w27 -c1 2>&1)
  if grep -q "assertion violated" <<<"$out"; then
    echo "model: $bug: violation found, as it must be ($((SECONDS - start)) s, $(grep -o 'depth [0-9]*' <<<"$out" | head -n 1))"
    return 0
  fi
  echo "model: $bug: NO violation found in ${mut_secs} s: the model no longer sees this bug"
  grep -E "errors:|states, stored" <<<"$out" | sed 's/^/  /'
  return 1
}

for spec in "BUG_ACQUIRE_SHORTENS -DNO_QUEUE" "BUG_NO_OVERLAP_MIN -DNO_QUEUE" \
            "BUG_HANDOFF_ANY_NONCE -DNO_EXTEND" "BUG_NO_BOUND_AT_SEND -DNO_QUEUE"; do
  # shellcheck disable=SC2086
  if mutation $spec; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

# The model as the code is.
dir=$work/model
if ! verifier "$dir" -O1; then
  echo "model: the verifier did not build"
  failed=$((failed + 1))
else
  start=$SECONDS
  if [ "${DLOCK_MODEL_FULL:-0}" = 1 ]; then
    out=$(cd "$dir" && ./pan -m200000 -w30 2>&1)
  else
    out=$(cd "$dir" && timeout -s INT "$secs" ./pan -m200000 -w28 2>&1)
  fi
  states=$(grep -oE '[0-9.e+]+ states, stored' <<<"$out" | tail -n 1)
  [ -n "$states" ] || states="$(grep -oE 'States= *[0-9.e+]+' <<<"$out" | tail -n 1) states"
  if grep -qE "assertion violated|errors: [1-9]" <<<"$out"; then
    echo "model: VIOLATION in the model of the code as it is:"
    grep -E "assertion|errors:" <<<"$out" | sed 's/^/  /'
    echo "  (spin -t -p tests/model/mutex.pml in the search's directory replays it; docs/model.md)"
    failed=$((failed + 1))
  elif grep -q "Interrupted" <<<"$out"; then
    echo "model: no violation in $states explored in $((SECONDS - start)) s (bitstate, stopped at the time bound; DLOCK_MODEL_FULL=1 searches to the end)"
    passed=$((passed + 1))
  else
    echo "model: no violation; search complete: $states in $((SECONDS - start)) s"
    passed=$((passed + 1))
  fi
fi
echo "model: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
