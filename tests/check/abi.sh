#!/usr/bin/env bash
# The ABI of the built libdlock.so against the dump kept in abi/libdlock.abi
# (libabigail's abidw/abidiff, Debian's abigail-tools). Compatible changes
# pass: added functions, added enumerators, and fields added at the end of
# the structs dlock.h's ABI rule lets grow (abi/libdlock.abignore). Anything
# else fails: a removed or changed function, a field inserted, removed or
# retyped, a struct a caller allocates that grows in the middle.
# Usage: abi.sh LIBDLOCK_SO SOURCE_DIR
set -u
lib=$1
src=$2
for tool in abidw abidiff; do
  command -v $tool >/dev/null || { echo "$tool missing: apt-get install abigail-tools (tools/setup.sh does)"; echo "0 passed, 1 failed"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The same options as tools/abi-update.sh, so that both dumps compare alike.
if ! abidw --headers-dir "$src/include" --no-corpus-path --short-locs --no-comp-dir-path \
      --drop-undefined-syms --type-id-style hash --out-file "$tmp/now.abi" "$lib" 2>"$tmp/err"; then
  echo "abidw failed on $lib: $(cat "$tmp/err")"
  echo "0 passed, 1 failed"
  exit 1
fi
grep -q "<function-decl name='dlock_client_new'" "$tmp/now.abi" || {
  echo "abidw found no types in $lib: build with debug information (RelWithDebInfo or Debug)"
  echo "0 passed, 1 failed"; exit 1; }
abidiff --no-added-syms --suppressions "$src/abi/libdlock.abignore" \
        "$src/abi/libdlock.abi" "$tmp/now.abi" > "$tmp/report" 2>&1
rc=$?
# The suppression of appended fields also hides a field that changed its
# type in place (libabigail only refuses it for removed fields or a smaller
# size), so check those structs here: every field of the kept layout must
# still be there, in order, at the same offset, with the same type.
structs=$(grep -oE 'name_regexp = .*' "$src/abi/libdlock.abignore" | head -n 1 |
          sed -E 's/.*\^dlock_\((.*)\)\$/\1/; s/\|/ /g; s/[^ ]+/dlock_&/g')
python3 - "$src/abi/libdlock.abi" "$tmp/now.abi" "$structs" >> "$tmp/report" <<'PY' || rc=$((rc | 1))
import sys, xml.etree.ElementTree as ET
names = sys.argv[3].split()
def members(path):
    out = {}
    for cd in ET.parse(path).iter('class-decl'):
        if cd.get('name') in names and cd.get('is-declaration-only') != 'yes':
            out[cd.get('name')] = [(dm.find('var-decl').get('name'), dm.get('layout-offset-in-bits'),
                                    dm.find('var-decl').get('type-id')) for dm in cd.findall('data-member')]
    return out
old, new = members(sys.argv[1]), members(sys.argv[2])
bad = 0
for n in names:
    if n not in old:
        continue
    if n not in new:
        print(f"struct {n} is gone from the public types")
        bad = 1
        continue
    for i, m in enumerate(old[n]):
        got = new[n][i] if i < len(new[n]) else None
        if got != m:
            print(f"struct {n}: field {i} was '{m[0]}' at bit {m[1]} (type id {m[2]}); now " +
                  (f"'{got[0]}' at bit {got[1]} (type id {got[2]})" if got else "missing"))
            bad = 1
            break
sys.exit(bad)
PY
if [ $rc -ne 0 ]; then
  cat "$tmp/report"
  echo
  echo "The ABI of $lib differs from abi/libdlock.abi in a way dlock.h's ABI rule"
  echo "does not allow (abidiff exit $rc). Within a major version: add functions,"
  echo "never change or remove one; add struct fields only at the end of the structs"
  echo "that begin with struct_size. If the change is meant (a new major version, or"
  echo "the dump is stale after reviewing the report above), regenerate the dump"
  echo "on purpose and commit it: tools/abi-update.sh BUILD_DIR"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "ABI compatible with abi/libdlock.abi ($(grep -c '<function-decl' "$tmp/now.abi") functions)"
echo "1 passed, 0 failed"
