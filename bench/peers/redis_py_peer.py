#!/usr/bin/python3
# redis_py_peer.py - the uncontended and contended scenarios of dlock-bench,
# run with redis-py's Lock (Debian python3-redis) against the same server.
# Prints one JSON object per figure on stdout (merged by bench/merge.py);
# the contended run forks K processes that share a counter and timestamps
# through an anonymous shared mmap, as dlock-bench does.
import argparse
import json
import mmap
import os
import struct
import sys
import time

import redis

IMPL = "redis-py"


def emit(args, scenario, metric, value, unit="", note=""):
    print(json.dumps({"scenario": scenario, "impl": IMPL, "metric": metric, "value": value,
                      "unit": unit, "layout": args.layout, "note": note}), flush=True)


def pct_us(samples_ns, p):
    if not samples_ns:
        return 0.0
    s = sorted(samples_ns)
    rank = max(1, min(len(s), int(p / 100.0 * len(s) + 0.999999)))
    return s[rank - 1] / 1000.0


def client(args):
    return redis.Redis(host=args.host, port=args.port, socket_timeout=10)


def uncontended(args):
    r = client(args)
    lock = r.lock("bench:peer:py:uncontended", timeout=30)
    count = 2000 if args.quick else 30000
    for _ in range(200):  # warm up: connection, script cache
        lock.acquire(blocking=False)
        lock.release()
    limit = time.monotonic() + (1 if args.quick else 20)  # after the warm-up
    samples = []
    t_start = time.monotonic_ns()
    for _ in range(count):
        if time.monotonic() >= limit:
            break
        t0 = time.monotonic_ns()
        if not lock.acquire(blocking=False):
            raise SystemExit("redis-py: uncontended acquire failed")
        lock.release()
        samples.append(time.monotonic_ns() - t0)
    secs = (time.monotonic_ns() - t_start) / 1e9
    note = "%d cycles; Lock.acquire(blocking=False) + release" % len(samples)
    emit(args, "uncontended", "cycle p50", pct_us(samples, 50), "us", note)
    emit(args, "uncontended", "cycle p99", pct_us(samples, 99), "us")
    emit(args, "uncontended", "cycle p99.9", pct_us(samples, 99.9), "us")
    emit(args, "uncontended", "cycles per second", len(samples) / secs, "/s")


# Shared page: counters (int64) then hand-off samples (int64 ns).
# Fields other than 'go' are written only by the lock holder; each process
# has its own 'ready' and 'errors' slot, so no write outside the lock races.
FIELDS = ["go", "stop", "acq", "counter", "last_owner", "owner_changes",
          "release_start", "max_wait", "nsamples", "inside", "overlaps"]
MAX_PROCS = 128
MAX_SAMPLES = 50000


class Shared:
    def __init__(self):
        self.m = mmap.mmap(-1, 8 * (len(FIELDS) + 2 * MAX_PROCS + MAX_SAMPLES))

    def get(self, name):
        return struct.unpack_from("q", self.m, 8 * FIELDS.index(name))[0]

    def set(self, name, value):
        struct.pack_into("q", self.m, 8 * FIELDS.index(name), value)

    def add(self, name, delta=1):
        self.set(name, self.get(name) + delta)

    def mark(self, which, me):  # which: 0 ready, 1 error
        struct.pack_into("q", self.m, 8 * (len(FIELDS) + which * MAX_PROCS + me), 1)

    def marked(self, which):
        base = 8 * (len(FIELDS) + which * MAX_PROCS)
        return sum(struct.unpack_from("q", self.m, base + 8 * i)[0] for i in range(MAX_PROCS))

    def sample(self, i, value):
        struct.pack_into("q", self.m, 8 * (len(FIELDS) + 2 * MAX_PROCS + i), value)

    def samples(self, n):
        base = 8 * (len(FIELDS) + 2 * MAX_PROCS)
        return [struct.unpack_from("q", self.m, base + 8 * i)[0] for i in range(n)]


def contender(args, sh, name, me, target, run_s):
    r = client(args)
    # redis-py defaults: sleep=0.1 between attempts; blocking_timeout bounds the wait.
    lock = r.lock(name, timeout=10, blocking_timeout=run_s + 10)
    sh.mark(0, me)
    for _ in range(30000):
        if sh.get("go"):
            break
        time.sleep(0.001)
    end = time.monotonic() + run_s
    while sh.get("stop") == 0 and time.monotonic() < end:
        t0 = time.monotonic_ns()
        if not lock.acquire():
            sh.mark(1, me)
            break
        t1 = time.monotonic_ns()
        sh.set("max_wait", max(sh.get("max_wait"), t1 - t0))
        rs = sh.get("release_start")
        if rs > 0:
            n = sh.get("nsamples")
            if n < MAX_SAMPLES:
                sh.sample(n, t1 - rs)
                sh.set("nsamples", n + 1)
        prev = sh.get("last_owner")
        if prev >= 0 and prev != me:
            sh.add("owner_changes")
        sh.set("last_owner", me)
        if sh.get("inside"):
            sh.add("overlaps")
        sh.set("inside", 1)
        sh.set("counter", sh.get("counter") + 1)
        sh.add("acq")
        if sh.get("acq") >= target:
            sh.set("stop", 1)
        sh.set("inside", 0)
        sh.set("release_start", time.monotonic_ns())
        lock.release()
    os._exit(0)


def contended(args, k):
    target = 100 if args.quick else 300
    run_s = 3 if args.quick else 15
    name = "bench:peer:py:contended:%d" % k
    sh = Shared()
    sh.set("last_owner", -1)
    pids = []
    for i in range(k):
        pid = os.fork()
        if pid == 0:
            try:
                contender(args, sh, name, i, target, run_s)
            finally:
                os._exit(1)
        pids.append(pid)
    for _ in range(30000):
        if sh.marked(0) >= k:
            break
        time.sleep(0.001)
    t0 = time.monotonic_ns()
    sh.set("go", 1)
    deadline = time.monotonic() + run_s + 15
    alive = set(pids)
    failed = 0
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                alive.discard(pid)
                if status != 0:
                    failed += 1
        time.sleep(0.005)
    secs = (time.monotonic_ns() - t0) / 1e9
    for pid in alive:  # bounded: anything still running is killed
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    acq, counter = sh.get("acq"), sh.get("counter")
    hand = sh.samples(min(sh.get("nsamples"), MAX_SAMPLES))
    pre = "K=%d " % k
    emit(args, "contended", pre + "acquisitions/s", acq / secs, "/s",
         "%d acquisitions in %.2f s (bounds: %d, %d s); sleep=0.1 default" % (acq, secs, target, run_s))
    ok = (counter == acq and sh.get("overlaps") == 0 and not alive and failed == 0
          and sh.marked(1) == 0)
    emit(args, "contended", pre + "counter", counter, "",
         "%s (must equal acquisitions %d)" % ("exact" if ok else "WRONG", acq))
    emit(args, "contended", pre + "hand-off p50", pct_us(hand, 50), "us")
    emit(args, "contended", pre + "hand-off p99", pct_us(hand, 99), "us")
    emit(args, "contended", pre + "hand-off max", max(hand) / 1000.0 if hand else 0, "us")
    emit(args, "contended", pre + "longest wait", sh.get("max_wait") / 1e6, "ms")
    emit(args, "contended", pre + "owner changes / releases",
         100.0 * sh.get("owner_changes") / (acq - 1) if acq > 1 else 0, "%")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layout", default="none")
    ap.add_argument("--scenario", default="uncontended,contended",
                    help="comma-separated: uncontended, contended (default: both)")
    args = ap.parse_args()
    wanted = args.scenario.split(",")
    hostport = args.url.split("://", 1)[1].split("/", 1)[0].split("@")[-1]
    args.host, _, port = hostport.partition(":")
    args.port = int(port or 6379)
    if "uncontended" in wanted:
        uncontended(args)
    ok = True
    for k in ((2, 8) if "contended" in wanted else ()):
        ok = contended(args, k) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
