"""Issue 29 item 1: `pip install --no-build-isolation ./python` works offline with Debian's
packages only, and the installed copy (not the tree's) takes and releases a lock."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import dlock
import dlock._lib
from conftest import ASAN_PRELOAD

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def test_pip_install_offline_gives_a_working_package(redis_server):
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed (Debian: python3-pip)")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        # A copy: pip's build leaves its files beside the sources.
        shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        target = os.path.join(tmp, "site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                            "--quiet", "--target", target, src], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"pip install failed: {r.stdout}{r.stderr}"
        assert os.path.isfile(os.path.join(target, "dlock", "__init__.py"))
        # The installed package, from a directory that is not the tree, with the library under test.
        code = ("import dlock, sys\n"
                "assert dlock.__file__.startswith(sys.argv[2]), dlock.__file__\n"
                "with dlock.Client(sys.argv[1]) as c:\n"
                "    with c.lock('install:check') as h:\n"
                "        print('fence', h.fence)\n")
        env = dict(os.environ, PYTHONPATH=target)
        env["DLOCK_LIB"] = dlock._lib.lib_path  # the library under test (the tree's or ASan's)
        if ASAN_PRELOAD:
            env["LD_PRELOAD"] = ASAN_PRELOAD
        r = subprocess.run([sys.executable, "-c", code, redis_server.url, target], capture_output=True, text=True,
                           cwd=tmp, env=env, timeout=60)
        assert r.returncode == 0, f"the installed package failed: {r.stdout}{r.stderr}"
        assert r.stdout.startswith("fence "), r.stdout
