#!/usr/bin/env bash
# The house style (.clang-format, issue 23) holds for every C file in the
# tree: clang-format changes nothing. To fix a failure, run
#   clang-format -i FILE...
# on the files it names (or on git ls-files '*.c' '*.h').
set -u
root=$1
command -v clang-format >/dev/null || { echo "clang-format is not installed (Debian: clang-format)"; exit 77; }
cd "$root" || exit 1
files=$(git ls-files '*.c' '*.h' 2>/dev/null) || files=""
[ -n "$files" ] || { echo "not a git checkout: no file list to check"; exit 77; }
# One clang-format for every file (one process per file took a minute on a
# busy machine); each file it would change is named in its warnings.
# shellcheck disable=SC2086 # the file list splits on purpose
report=$(clang-format --dry-run --Werror $files 2>&1 >/dev/null)
bad=$(echo "$report" | sed -nE 's/^([^:]+\.[ch]):[0-9]+:[0-9]+: (error|warning): code should be clang-formatted.*/\1/p' | sort -u)
if [ -z "$bad" ] && [ -n "$report" ]; then
  echo "clang-format failed: $report" | head -n 5
  exit 1
fi
if [ -n "$bad" ]; then
  echo "not in the house style (.clang-format): run clang-format -i on:"
  printf '  %s\n' $bad
  exit 1
fi
echo "every C file ($(echo "$files" | wc -w)) is in the house style"
