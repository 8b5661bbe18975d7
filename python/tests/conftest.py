"""Fixtures: a private redis-server on a free loopback port in a temp dir, stopped by its PID
on every exit path; the built dlock CLI; the library under test ($DLOCK_LIB or the tree's)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # the package from the tree, not an installed one

import dlock  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1:<free port>, its files in a temp dir; stop() by PID."""

    def __init__(self) -> None:
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="dlock-py-redis-")
        self.proc = None
        for _ in range(5):  # a port taken between free_port() and the bind: try another
            self.port = free_port()
            conf = os.path.join(self.dir, "redis.conf")
            with open(conf, "w") as f:
                f.write(f"port {self.port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n"
                        f"dir {self.dir}\nlogfile {self.dir}/redis.log\n")
            self.proc = subprocess.Popen(["redis-server", conf], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            if self._ready(10.0):
                break
            self.stop()
        else:
            raise RuntimeError(f"redis-server did not start; see {self.dir}/redis.log")
        self.url = f"redis://127.0.0.1:{self.port}"

    def _ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def redis_server():
    r = RedisServer()
    try:
        yield r
    finally:
        r.stop()
        shutil.rmtree(r.dir, ignore_errors=True)


@pytest.fixture
def client(redis_server):
    with dlock.Client(redis_server.url) as c:
        yield c


@pytest.fixture
def name(request):
    """A lock name of this test's own."""
    return "py:" + request.node.name.replace("[", ":").replace("]", "")


@pytest.fixture(scope="session")
def dlock_cli():
    cands = [os.environ.get("DLOCK_CLI", ""), os.path.join(REPO, "build", "plain", "cli", "dlock")]
    lib = os.environ.get("DLOCK_LIB")
    if lib:  # the CLI next to the library under test: <build>/src/libdlock.so -> <build>/cli/dlock
        cands.insert(1, os.path.join(os.path.dirname(os.path.dirname(lib)), "cli", "dlock"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("the dlock CLI is not built (cmake --build build/plain, or set DLOCK_CLI)")
