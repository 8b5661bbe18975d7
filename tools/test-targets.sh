#!/usr/bin/env bash
# tools/test-targets.sh BUILD_DIR [ctest selection args...]
# Print the build targets that the tests ctest selects with those arguments
# (-L, -LE, -E, -R) need, on one line: each test's program and every program
# or library its command line or environment names inside BUILD_DIR (the
# targets' own add_dependencies come with them). tools/test.sh builds only
# these in the sanitizer builds, which run part of the suite.
# Prints "all" when a test names a file of the build that is no target (a
# helper this script cannot map): the whole build is then the safe choice.
# BUILD_DIR must be configured (cmake -B), not necessarily built.
set -euo pipefail
dir=$(cd "$1" && pwd)
shift
names=$(cd "$dir" && ctest -N "$@" | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p')
if [ -z "$names" ]; then
  echo "test-targets: ctest $* selects no test in $dir" >&2
  exit 1
fi
targets=$(cmake --build "$dir" --target help | sed -nE 's/^\.\.\. ([^ ]+).*$/\1/p')
python3 - "$dir" "$names" "$targets" <<'EOF'
import os, re, sys
build, names, targets = sys.argv[1], set(sys.argv[2].split("\n")), set(sys.argv[3].split())
need, unknown = set(), set()
for root, _, files in os.walk(build):
    if "CTestTestfile.cmake" not in files:
        continue
    for line in open(os.path.join(root, "CTestTestfile.cmake")):
        m = re.match(r'(add_test|set_tests_properties)\(([^ ]+) ', line)
        if not m or m.group(2) not in names:
            continue
        for path in re.findall(re.escape(build) + r'/[^";]+', line):
            base = os.path.basename(path)
            if base in targets:
                need.add(base)
            elif re.match(r'libdlock\.so', base):
                need.add("dlock_shared")
            elif base.endswith((".json", ".log", ".txt")) or os.path.isdir(path):
                pass  # an output the test writes, or a directory
            else:
                unknown.add(path)
# The generated man page and completions sit beside the dlock command
# (tests/check/docs_in_sync.sh compares them with its output).
if "dlock" in need and "dlock_docs" in targets:
    need.add("dlock_docs")
if unknown or not need:
    print("test-targets: no target for " + ", ".join(sorted(unknown)) + ": building all", file=sys.stderr)
    print("all")
else:
    print(" ".join(sorted(need)))
EOF
