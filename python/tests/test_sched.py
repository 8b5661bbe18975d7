"""The scheduler: a Python callable runs once per tick across several schedulers (two
clients here, two processes' worth: each its own connections and node name)."""
import os
import subprocess
import sys
import threading
import time

import dlock
from conftest import ASAN_PRELOAD


NODE_B = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import dlock
out, stop = sys.argv[3], sys.argv[4]
with dlock.Client(sys.argv[2]) as c:
    def job(tick):
        with open(out, "a") as f:
            f.write(f"{tick.scheduled} {tick.node} {tick.fence}\\n")
    j = c.every(0.2, job, name=sys.argv[5], node_name="node-b")
    deadline = time.monotonic() + 60
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.05)
    j.stop(timeout=10)
"""


def test_every_runs_each_tick_once_across_two_processes(redis_server, name, tmp_path):
    runs = []
    mu = threading.Lock()
    out, stop = tmp_path / "node-b.txt", tmp_path / "stop"

    def theirs():
        return [tuple(line.split()) for line in out.read_text().splitlines()] if out.exists() else []

    with dlock.Client(redis_server.url) as a:
        @a.every(0.2, name=name, node_name="node-a")
        def job(tick):
            with mu:
                runs.append((str(tick.scheduled), tick.node, str(tick.fence)))

        assert isinstance(job, dlock.Job)
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        b = subprocess.Popen([sys.executable, "-c", NODE_B, pkg, redis_server.url, str(out),
                              str(stop), name],
                             env=dict(os.environ, **({"LD_PRELOAD": ASAN_PRELOAD} if ASAN_PRELOAD else {})))
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and (len(runs) + len(theirs()) < 8 or not runs or not theirs()):
                time.sleep(0.05)
        finally:
            stop.touch()
            b.wait(60)
        job.stop(timeout=10)
        hist = a.history(name, 5)
    both = runs + theirs()
    assert len(both) >= 8 and runs and theirs(), (len(runs), len(theirs()))
    ticks = [r[0] for r in both]
    assert len(ticks) == len(set(ticks)), "a tick ran twice"
    assert all(int(r[2]) > 0 for r in both)
    assert hist and hist[0].outcome == "ok" and hist[0].node in ("node-a", "node-b")


def test_a_failing_job_is_recorded_as_failed(client, name):
    done = threading.Event()

    def boom(tick):
        done.set()
        raise RuntimeError("job failed on purpose")

    job = client.every(0.2, boom, name=name)
    try:
        assert done.wait(20)
    finally:
        job.stop(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not client.history(name, 1):
        time.sleep(0.05)
    assert client.history(name, 1)[0].outcome.startswith("failed")


def test_cron(client, name):
    ran = threading.Event()
    job = client.cron("* * * * * ?", lambda tick: ran.set(), name=name)  # every second
    try:
        assert ran.wait(20)
    finally:
        job.stop(timeout=10)
