"""Fixtures: a private redis-server on a free loopback port in a temp dir, stopped by its PID
on every exit path; the built dlock CLI; the library under test ($DLOCK_LIB or the tree's)."""
from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # the package from the tree, not an installed one

# Under python/run_tests.sh --asan, libasan is preloaded into this interpreter only: the
# servers and programs the tests start (redis-server, a JVM) do not get it.
ASAN_PRELOAD = os.environ.pop("LD_PRELOAD", None)

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

# PostgreSQL and ZooKeeper take seconds to start (initdb, a JVM): their helpers start with
# the session, so that the servers come up while the Redis tests run.
_helpers = {}


def pytest_sessionstart(session):
    for kind, env in (("pg", "DLOCK_PG_SERVER"), ("zk", "DLOCK_ZK_SERVER")):
        try:
            _helpers[kind] = HelperServer(kind, os.environ.get(env))
        except Unavailable:
            pass


def pytest_sessionfinish(session, exitstatus):
    for h in _helpers.values():
        h.stop()


def _helper(kind):
    if kind not in _helpers:
        raise Unavailable(f"the {kind} helper is not built (ctest passes its path)")
    return _helpers[kind].ready()


pg_server = _server_fixture(lambda: _helper("pg"))
zk_server = _server_fixture(lambda: _helper("zk"))


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


def pytest_collection_modifyitems(session, config, items):
    # The tests on PostgreSQL and ZooKeeper last: their servers start meanwhile.
    items.sort(key=lambda item: "any_url" in getattr(item, "fixturenames", ()))
