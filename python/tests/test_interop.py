"""Interop on the same name: a Python holder excludes `dlock run` and redis-py's Lock, and
each of them excludes the Python holder. dlock's key K is the name itself (no key prefix)
holding a random token with a PX lease, redis-py's Lock's convention (docs/keys.md)."""
import os
import signal
import subprocess
import time

import pytest

import dlock


def wait_until(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_python_holder_excludes_dlock_run_and_the_reverse(client, name, redis_server, dlock_cli):
    env = dict(os.environ, DLOCK_URL=redis_server.url)
    with client.lock(name):
        p = subprocess.run([dlock_cli, "run", "-n", name, "--", "true"], env=env, timeout=60,
                           capture_output=True, text=True)
        assert p.returncode == 75, p.stderr  # busy
    p = subprocess.run([dlock_cli, "run", "-n", name, "--", "true"], env=env, timeout=60)
    assert p.returncode == 0
    holder = subprocess.Popen([dlock_cli, "run", name, "--", "sleep", "60"], env=env)
    try:
        assert wait_until(lambda: client.status(name).held), "dlock run did not take the lock"
        with pytest.raises(dlock.Busy):
            client.lock(name).acquire(0)
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(30)
    with client.lock(name, wait=10):
        pass


def test_python_holder_excludes_redis_py_lock_and_the_reverse(client, name, redis_server):
    redis = pytest.importorskip("redis")
    r = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        with client.lock(name):
            assert not r.lock(name, timeout=10).acquire(blocking=False)
        theirs = r.lock(name, timeout=10)
        assert theirs.acquire(blocking=False)
        with pytest.raises(dlock.Busy):
            client.lock(name).acquire(0)
        st = client.status(name)
        assert st.held and st.foreign  # a lock without dlock's metadata
        theirs.release()
        with client.lock(name, wait=5) as hold:
            assert hold.fence > 0
            assert not r.lock(name, timeout=10).acquire(blocking=False)
    finally:
        r.close()
