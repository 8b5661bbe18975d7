"""The scheduler: a Python callable runs once per tick across several schedulers (two
clients here, two processes' worth: each its own connections and node name)."""
import threading
import time

import dlock


def test_every_runs_each_tick_once_across_two_nodes(redis_server, name):
    runs = []
    mu = threading.Lock()

    def job(tick):
        with mu:
            runs.append((tick.scheduled, tick.node, tick.fence))

    with dlock.Client(redis_server.url) as a, dlock.Client(redis_server.url) as b:
        ja = a.every(0.2, job, name=name, node_name="node-a")

        @b.every(0.2, name=name, node_name="node-b")
        def jb(tick):
            job(tick)

        assert isinstance(jb, dlock.Job)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(runs) < 8:
            time.sleep(0.05)
        ja.stop(timeout=10)
        jb.stop(timeout=10)
        hist = a.history(name, 5)
    assert len(runs) >= 8
    ticks = [r[0] for r in runs]
    assert len(ticks) == len(set(ticks)), "a tick ran twice"
    fences = [r[2] for r in runs]
    assert all(f > 0 for f in fences)
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
