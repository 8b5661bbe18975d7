#!/usr/bin/env python3
"""Lock cycles per second from Python: dlock (this binding) against redis-py's Lock, on the
same redis-server in the same run, in alternating blocks so that a busy machine weighs on
both alike. One thread, no contention: acquire + release of one name, again and again.

    python3 python/bench.py [--url redis://HOST:PORT] [--seconds 2] [--rounds 3]

Without --url it starts a private redis-server on a free loopback port (python/tests/servers.py)
and stops it at the end. Prints one line per block and the median of each side.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))

import dlock  # noqa: E402


def block(cycle, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while True:
        for _ in range(50):
            cycle()
        n += 50
        now = time.perf_counter()
        if now >= end:
            return n / (now - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a Redis to use (default: a private redis-server)")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one block")
    ap.add_argument("--rounds", type=int, default=3, help="blocks of each side")
    a = ap.parse_args()
    try:
        import redis
    except ImportError:
        print("bench.py: redis-py is missing (apt-get install python3-redis)", file=sys.stderr)
        return 77
    server = None
    url = a.url
    if not url:
        from servers import RedisServer
        server = RedisServer()
        url = server.url
    try:
        r = redis.Redis.from_url(url)
        with dlock.Client(url) as c:
            mine = c.lock("bench:py:dlock")

            def dlock_cycle():
                mine.acquire()
                mine.release()

            theirs = r.lock("bench:py:redis-py", timeout=30)

            def redis_py_cycle():
                theirs.acquire()
                theirs.release()

            results = {"dlock": [], "redis-py Lock": []}
            for i in range(a.rounds):
                for label, fn in (("dlock", dlock_cycle), ("redis-py Lock", redis_py_cycle)):
                    rate = block(fn, a.seconds)
                    results[label].append(rate)
                    print(f"round {i + 1} {label:14s} {rate:9.0f} cycles/s", flush=True)
            for label, rates in results.items():
                print(f"median {label:14s} {statistics.median(rates):9.0f} cycles/s "
                      f"(libdlock {dlock.version()} at {dlock.lib_path}; redis-py "
                      f"{redis.__version__}; {url})" if label == "dlock" else
                      f"median {label:14s} {statistics.median(rates):9.0f} cycles/s")
        r.close()
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
