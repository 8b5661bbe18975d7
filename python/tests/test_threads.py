"""Threads: exclusion under contention, the GIL released during waits, loss when the server
freezes (SIGSTOP)."""
import threading
import time

import pytest

import dlock
from servers import RedisServer

THREADS, CYCLES = 8, 500


def test_8_threads_x_500_cycles_never_overlap(client, name):
    inside = [None]
    fences = []
    errors = []
    deadline = time.monotonic() + 50
    record = threading.Lock()

    def worker(i):
        lk = client.lock(name, wait=30)
        try:
            for _ in range(CYCLES):
                if time.monotonic() > deadline:
                    errors.append(f"thread {i}: out of time")
                    return
                with lk as hold:
                    if inside[0] is not None:
                        errors.append(f"thread {i} entered while thread {inside[0]} held it")
                    inside[0] = i
                    with record:
                        fences.append(hold.fence)
                    time.sleep(0)  # let the others run while we hold it
                    if inside[0] != i:
                        errors.append(f"thread {inside[0]} entered while thread {i} held it")
                    inside[0] = None
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {e!r}")

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors[:5]
    assert len(fences) == THREADS * CYCLES
    assert all(a < b for a, b in zip(fences, fences[1:])), "fences rise in the order of the holds"


def _progress_during_a_blocked_acquire(client, name, acquire):
    """Timestamps a counting thread took while this thread sat in a 2 s acquire, in the
    middle second of it (a thread holding the GIL lets the counter run only at its edges)."""
    stamps = []
    stop = threading.Event()

    def count():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 1000 == 0:
                stamps.append(time.monotonic())

    with client.lock(name):
        t = threading.Thread(target=count)
        t.start()
        try:
            t0 = time.monotonic()
            acquire(client.lock(name))
            t1 = time.monotonic()
        finally:
            stop.set()
            t.join(10)
    assert t1 - t0 >= 1.9
    return [s for s in stamps if t0 + 0.5 < s < t1 - 0.5]


def test_the_gil_is_released_while_an_acquire_waits(client, name):
    def acquire(h):
        with pytest.raises(dlock.Busy):
            h.acquire(2.0)

    assert len(_progress_during_a_blocked_acquire(client, name, acquire)) > 10


def test_the_gil_test_sees_a_call_that_keeps_the_gil(client, name):
    # The same wait through ctypes.PyDLL, which keeps the GIL: the counter stops.
    import ctypes
    py = ctypes.PyDLL(dlock.lib_path)
    py.dlock_mutex_acquire.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    out = _progress_during_a_blocked_acquire(
        client, name, lambda h: py.dlock_mutex_acquire(h._m, 2000))
    assert out == []


def test_a_frozen_server_loses_the_hold_at_its_deadline():
    r = RedisServer()
    try:
        with dlock.Client(r.url, command_timeout=0.5) as c:
            with pytest.raises(dlock.Lost) as e:
                with c.lock("frozen", watchdog_lease=1.5) as hold:
                    ev = hold.lost_event
                    r.freeze()
                    t0 = time.monotonic()
                    try:
                        assert ev.wait(15), "no loss reported while the server was frozen"
                        took = time.monotonic() - t0
                        assert hold.lost
                        assert time.monotonic() >= hold.valid_until
                    finally:
                        r.thaw()
            assert took <= 10
            assert "frozen" in str(e.value)
    finally:
        r.stop()
