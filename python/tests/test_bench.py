"""python/bench.py runs (a short block of each side)."""
import os
import subprocess
import sys

import pytest

from conftest import ASAN_PRELOAD


def test_bench_runs(redis_server):
    pytest.importorskip("redis")
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench.py")
    p = subprocess.run([sys.executable, bench, "--url", redis_server.url, "--seconds", "0.2",
                        "--rounds", "1"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **({"LD_PRELOAD": ASAN_PRELOAD} if ASAN_PRELOAD else {})))
    assert p.returncode == 0, p.stderr
    assert "median dlock" in p.stdout and "median redis-py Lock" in p.stdout
