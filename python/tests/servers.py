"""Private servers for the tests and the bench: each on a free loopback port in a temp dir,
stopped by its PID (never by name). No pytest here: python/bench.py uses it too."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Optional


class Unavailable(Exception):
    """The server's program is not installed or not built; the message says which."""


def _die_with_us() -> None:
    """In the server's child before exec: killed when the test process dies (a crash skips
    every cleanup; PR_SET_PDEATHSIG = 1)."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill(proc: Optional[subprocess.Popen], sig=signal.SIGKILL, timeout=30.0) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


class RedisServer:
    """redis-server on 127.0.0.1:<free port>, its files in a temp dir; stop() by PID."""

    def __init__(self) -> None:
        if not shutil.which("redis-server"):
            raise Unavailable("redis-server is not installed (apt-get install redis-server)")
        self.dir = tempfile.mkdtemp(prefix="dlock-py-redis-")
        self.proc = None
        try:
            for _ in range(5):  # a port taken between free_port() and the bind: another
                self.port = free_port()
                conf = os.path.join(self.dir, "redis.conf")
                with open(conf, "w") as f:
                    f.write(f"port {self.port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n"
                            f"dir {self.dir}\nlogfile {self.dir}/redis.log\n")
                self.proc = subprocess.Popen(["redis-server", conf], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, preexec_fn=_die_with_us)
                if self._ready(10.0):
                    break
                _kill(self.proc)
            else:
                raise RuntimeError(f"redis-server did not start; see {self.dir}/redis.log")
        except BaseException:
            self.stop()
            raise
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
        _kill(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class HelperServer:
    """A server started by one of the C harness's helper programs (tests/pg_server_main.c,
    tests/zk_server_main.c), which stops its server by PID when sent SIGTERM."""

    def __init__(self, kind: str, program: Optional[str]) -> None:
        """Starts the helper and returns at once: ready() waits for the server."""
        if not program or not os.access(program, os.X_OK):
            raise Unavailable(f"the {kind} helper is not built (ctest passes its path)")
        self.kind = kind
        self.url = ""
        self.dir = tempfile.mkdtemp(prefix=f"dlock-py-{kind}-")
        self._addr = os.path.join(self.dir, "address")
        argv = [program] + ([self._addr] if kind == "zk" else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, preexec_fn=_die_with_us)

    def ready(self, timeout: float = 120.0) -> "HelperServer":
        """Wait until the server answers (its helper says so): the URL, or an exception."""
        if self.url:
            return self
        if self.kind == "pg":
            self.url = self.proc.stdout.readline().strip()  # the URL once the server answers
        else:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if os.path.exists(self._addr) and open(self._addr).read().endswith("\n"):
                    self.url = "zk://" + open(self._addr).read().strip()
                    break
                time.sleep(0.1)
        if not self.url:
            try:
                rc = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            err = self.proc.stderr.read().strip() if rc is not None else "no answer in time"
            if rc == 77:
                raise Unavailable(err or f"{self.kind} is not installed")
            raise RuntimeError(f"the {self.kind} server did not start (exit {rc}): {err}")
        return self

    def stop(self) -> None:
        _kill(self.proc, signal.SIGTERM, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
