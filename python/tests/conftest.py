"""Fixtures: a private redis-server on a free loopback port in a temp dir, stopped by its PID
on every exit path; the built dlock CLI; the library under test ($DLOCK_LIB or the tree's)."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # the package from the tree, not an installed one

import dlock  # noqa: E402
from servers import HelperServer, RedisServer, Unavailable  # noqa: E402


def _server_fixture(make):
    """A session fixture: the server make() starts (skipped when Unavailable), stopped by PID
    at the session's end whatever happened."""
    @pytest.fixture(scope="session")
    def fixture():
        try:
            srv = make()
        except Unavailable as e:
            pytest.skip(str(e))
        try:
            yield srv
        finally:
            srv.stop()
    return fixture


redis_server = _server_fixture(RedisServer)
pg_server = _server_fixture(lambda: HelperServer("pg", os.environ.get("DLOCK_PG_SERVER")))
zk_server = _server_fixture(lambda: HelperServer("zk", os.environ.get("DLOCK_ZK_SERVER")))


@pytest.fixture(params=["redis", "pg", "zk"])
def any_url(request):
    """The URL of each backend's private server (skipped where the backend is not built)."""
    return request.getfixturevalue(request.param + "_server").url


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
