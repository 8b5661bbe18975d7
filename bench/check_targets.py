#!/usr/bin/env python3
# check_targets.py - read dlock-bench's JSON and report each performance
# target of issues 5 and 15 as MET, MISSED or NOT MEASURED. A miss is reported,
# never a failure: timing belongs to benchmarks, not tests (a shared machine
# can miss any of them). It fails (exit 1) only when the JSON is missing or
# malformed, or lacks the uncontended figures every run must produce.
# usage: check_targets.py DLOCK_BENCH_JSON
import json
import sys

# Targets issue 15 names, found by their metric text in the JSON; those not
# built yet are reported as not measured.
EXPECTED = [
    ("uncontended", "cycles/s >= 0.85x bare floor"),
    ("contended", "K=8 hand-off p99 <= 2 ms"),
    ("contended", "K=8 hand-off without a confirming call"),
    ("uncontended", "pipelined release cycles/s >= 1.3x floor"),
]


def main(argv):
    if len(argv) != 2:
        print("usage: check_targets.py DLOCK_BENCH_JSON", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            data = json.load(f)
        rows = data["results"]
    except (OSError, ValueError, KeyError) as e:
        print("check_targets: cannot read %s: %s" % (argv[1], e), file=sys.stderr)
        return 1

    def value(scenario, impl, metric):
        for r in rows:
            if r.get("scenario") == scenario and r.get("impl") == impl and r.get("metric") == metric:
                return r.get("value")
        return None

    lib = value("uncontended", "dlock", "cycles per second")
    bare = value("uncontended", "hiredis-bare", "cycles per second")
    if lib is None or bare is None:
        print("check_targets: %s has no uncontended dlock and bare figures" % argv[1], file=sys.stderr)
        return 1
    print("layout %s%s" % (data.get("layout"), ", quick run: rough figures" if data.get("quick") else ""))
    print("uncontended: dlock %.0f/s, bare floor %.0f/s, ratio %.2fx" % (lib, bare, lib / bare if bare else 0))
    for peer in ("redis-py", "node-redlock"):
        v = value("uncontended", peer, "cycles per second")
        print("uncontended: %s %s" % (peer, "%.0f/s, dlock / %s %.2fx" % (v, peer, lib / v) if v else "not run"))
    for k in (2, 8):
        p50 = value("contended", "dlock", "K=%d hand-off p50" % k)
        p99 = value("contended", "dlock", "K=%d hand-off p99" % k)
        if p50 is not None:
            print("contended K=%d: hand-off p50 %.0f us, p99 %.0f us" % (k, p50, p99 or 0))
    targets = [r for r in rows if r.get("impl") == "target"]
    seen = set()
    for r in targets:
        seen.add((r.get("scenario"), r.get("metric")))
        print("%-12s %-12s %-44s %s" % ("MET" if r.get("met") else "MISSED", r.get("scenario"), r.get("metric"),
                                       r.get("note", "")))
    for scenario, metric in EXPECTED:
        if (scenario, metric) not in seen:
            print("%-12s %-12s %-44s %s" % ("NOT MEASURED", scenario, metric, "not in this run"))
    missed = sum(1 for r in targets if not r.get("met"))
    print("%d of %d targets met; misses are reported, not failed (timing is not a test)" %
          (len(targets) - missed, len(targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
