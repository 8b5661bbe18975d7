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
bad=""
for f in $files; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
  echo "not in the house style (.clang-format): run clang-format -i on:"
  printf '  %s\n' $bad
  exit 1
fi
echo "every C file ($(echo "$files" | wc -w)) is in the house style"
