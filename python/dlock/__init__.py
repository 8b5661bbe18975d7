"""dlock: distributed locks for Python over libdlock (Redis, ZooKeeper, PostgreSQL, MySQL).

    import dlock
    with dlock.Client("redis://127.0.0.1:6379") as client:
        with client.lock("stock:42", wait=5) as hold:
            write(hold.fence)

See python/README.md for the API, the safety model and the tests.
"""
from __future__ import annotations

from ._lib import LibraryNotFound, lib_path
from ._util import Duration
from .client import (Client, Election, Latch, Leader, Lock, LockStatus, MultiLock, Observer,
                     lost_reason_str)
from .errors import Error, Forked, by_code, by_name
from .aio import AsyncLock
from .sched import Job, Run, Tick

# Every exception class, dlock.Busy, dlock.NotHeld, ..., at the package's top level.
for _cls in by_code.values():
    globals()[_cls.__name__] = _cls
del _cls


def version() -> str:
    """The version of the libdlock in use."""
    from ._lib import lib
    return lib.dlock_version().decode()


__all__ = ["Client", "Lock", "MultiLock", "Election", "Latch", "Leader", "LockStatus", "Observer",
           "AsyncLock", "Job", "Run", "Tick", "Error", "Forked", "Duration", "LibraryNotFound",
           "lib_path", "version", "lost_reason_str", "by_code", "by_name"] + \
          [c.__name__ for c in by_code.values()]
