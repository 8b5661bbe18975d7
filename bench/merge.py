#!/usr/bin/python3
# merge.py - one table from dlock-bench's JSON and the peers' JSON lines.
# usage: merge.py DLOCK_JSON [PEERS_JSONL ...] [--markdown] [--out COMBINED_JSON]
# Adds the targets that need the peers (uncontended cycles/s >= 3x redis-py and
# node-redlock) to the ones dlock-bench judged itself, and prints all of them.
import json
import sys

PEERS = ("redis-py", "node-redlock")


def fmt(v, unit):
    if isinstance(v, bool) or v is None:
        return str(v)
    if abs(v) >= 1000 or v == int(v):
        s = "%.0f" % v
    elif abs(v) >= 100:
        s = "%.1f" % v
    else:
        s = "%.3g" % v
    return s + ((" " + unit) if unit and unit not in ("", "x") else ("x" if unit == "x" else ""))


class Out:
    def __init__(self, markdown):
        self.md = markdown

    def title(self, text):
        print("\n### %s\n" % text if self.md else "\n== %s" % text)

    def table(self, header, rows):
        if self.md:
            print("| " + " | ".join(header) + " |")
            print("|" + "|".join(" --- " for _ in header) + "|")
            for r in rows:
                print("| " + " | ".join(str(c) for c in r) + " |")
            return
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for r in [header] + rows:
            print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def main(argv):
    markdown = "--markdown" in argv
    out_path = None
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "--out":
            out_path = argv[i + 1]
            i += 2
            continue
        if argv[i] != "--markdown":
            files.append(argv[i])
        i += 1
    if not files:
        print(__doc__ or "usage: merge.py DLOCK_JSON [PEERS_JSONL ...]", file=sys.stderr)
        return 2
    with open(files[0]) as f:
        main_json = json.load(f)
    rows = list(main_json["results"])
    for path in files[1:]:
        try:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        rows.append(json.loads(line))
        except OSError as e:
            print("merge.py: %s: %s" % (path, e), file=sys.stderr)

    def find(scenario, impl, metric):
        for r in rows:
            if r["scenario"] == scenario and r["impl"] == impl and r["metric"] == metric:
                return r
        return None

    def value(scenario, impl, metric):
        r = find(scenario, impl, metric)
        return r.get("value") if r else None

    def layout(scenario, impl, metric):
        r = find(scenario, impl, metric)
        return r.get("layout", "") if r else ""

    # Targets that need the peers.
    lib = value("uncontended", "dlock", "cycles per second")
    for peer in PEERS:
        other = value("uncontended", peer, "cycles per second")
        if lib is None or any(r["impl"] == "target" and r["metric"] == "cycles/s >= 3x %s" % peer for r in rows):
            continue  # dlock-bench ran this peer itself and judged the target
        if other is None:
            rows.append({"scenario": "uncontended", "impl": "target", "met": False,
                         "metric": "cycles/s >= 3x %s" % peer, "layout": "",
                         "note": "%s did not run (not measured)" % peer})
            continue
        rows.append({"scenario": "uncontended", "impl": "target", "met": lib >= 3 * other,
                     "metric": "cycles/s >= 3x %s" % peer, "layout": "",
                     "note": "dlock %.0f/s vs %s %.0f/s = %.2fx" % (lib, peer, other, lib / other)})

    o = Out(markdown)
    m = main_json.get("machine", {})
    print(("**Machine:** " if markdown else "machine: ") +
          "%s CPUs, %s, kernel %s, redis %s; layout %s%s" %
          (m.get("nproc"), m.get("cpu"), m.get("kernel"), m.get("redis"), main_json.get("layout"),
           " (quick run)" if main_json.get("quick") else ""))

    # Uncontended and contended: one row per implementation, side by side.
    o.title("uncontended: one thread, acquire + release of a free lock")
    cols = ["cycle p50", "cycle p99", "cycle p99.9", "cycles per second", "cycle p50 / PING p50"]
    table = []
    for impl in ("dlock", "hiredis-bare") + PEERS:
        vals = [value("uncontended", impl, c) for c in cols]
        if any(v is not None for v in vals):
            units = ["us", "us", "us", "/s", "x"]
            table.append([impl] + [fmt(v, u) if v is not None else "" for v, u in zip(vals, units)]
                         + [layout("uncontended", impl, "cycle p50")])
    ping = value("uncontended", "hiredis", "PING p50 (same run)")
    o.table(["impl", "p50", "p99", "p99.9", "cycles/s", "p50 / PING p50", "layout"], table)
    if ping is not None:
        print(("\n" if markdown else "  ") + "PING p50 in the same run: %.1f us" % ping)

    o.title("contended: K processes on one name (acquire, read-modify-write, release)")
    metrics = ["acquisitions/s", "hand-off p50", "hand-off p99", "hand-off max", "longest wait",
               "owner changes / releases", "counter"]
    units = ["/s", "us", "us", "us", "ms", "%", ""]
    table = []
    for k in (2, 8, 32, 100):
        for impl in ("dlock", "hiredis-poll-1ms") + PEERS:
            vals = [value("contended", impl, "K=%d %s" % (k, c)) for c in metrics]
            if all(v is None for v in vals):
                continue
            table.append([str(k), impl] + [fmt(v, u) if v is not None else "" for v, u in zip(vals, units)]
                         + [layout("contended", impl, "K=%d acquisitions/s" % k)])
    o.table(["K", "impl", "acq/s", "hand-off p50", "p99", "max", "longest wait", "owner changes",
             "counter", "layout"], table)
    table = []
    for k in (2, 8, 32, 100):
        vals = [value("contended", "dlock", "K=%d %s" % (k, c)) for c in
                ("acquire attempts / acquisition", "hand-off confirmations / acquisition",
                 "client commands / hand-off", "Redis commands / hand-off", "server CPU")]
        if any(v is not None for v in vals):
            table.append([str(k)] + [fmt(v, "") if v is not None else "" for v in vals])
    if table:
        print()
        o.table(["K (dlock)", "acquire attempts / acq.", "confirmations / acq.", "client cmds / hand-off",
                 "Redis cmds incl. scripts / hand-off", "redis-server CPU %"], table)

    # The rest as dlock-bench listed them.
    for scenario in ("floor", "throughput", "watchdog", "scheduler"):
        sel = [r for r in rows if r["scenario"] == scenario and r["impl"] != "target"]
        if not sel:
            continue
        o.title(scenario)
        o.table(["impl", "metric", "value", "note"],
                [[r["impl"], r["metric"], fmt(r["value"], r.get("unit", "")), r.get("note", "")]
                 for r in sel])

    o.title("targets (same run, layout %s)" % main_json.get("layout"))
    targets = [r for r in rows if r["impl"] == "target"]
    o.table(["scenario", "target", "result", "measured"],
            [[r["scenario"], r["metric"], "MET" if r.get("met") else "MISSED", r.get("note", "")]
             for r in targets])
    statuses = main_json.get("scenarios", {})
    print(("\n" if markdown else "\n") + "scenarios: " +
          ", ".join("%s %s" % (k, v) for k, v in statuses.items()))
    if out_path:
        combined = dict(main_json)
        combined["results"] = rows
        with open(out_path, "w") as f:
            json.dump(combined, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
