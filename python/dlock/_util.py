"""Durations, strings and fork detection shared by the modules of the binding."""
from __future__ import annotations

import ctypes
import datetime
import os
from typing import Optional, Union

from . import errors
from ._lib import MAX_DURATION_MS, WAIT_FOREVER, lib

#: A duration: seconds (int or float), a datetime.timedelta, or dlock's text form ("1m30s",
#: "500ms", "2d"; dlock_duration_parse).
Duration = Union[int, float, str, datetime.timedelta]

# Bumped in a child after fork(): objects made before it refuse to touch libdlock.
fork_generation = 0


def _after_fork_in_child() -> None:
    global fork_generation
    fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def to_ms(value: Optional[Duration], what: str, *, none: int = 0, forever_ok: bool = False) -> int:
    """Milliseconds of a Duration; ``none`` for None."""
    if value is None:
        return WAIT_FOREVER if forever_ok else none
    if isinstance(value, str):
        out = ctypes.c_int64()
        errors.check(lib.dlock_duration_parse(value.encode(), ctypes.byref(out)))
        return out.value
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what}: a duration is seconds (int or float), a timedelta or a string "
                        f"such as '1m30s', not {type(value).__name__}")
    if seconds < 0 or seconds * 1000 > MAX_DURATION_MS:
        raise errors.by_name["ERANGE"](f"{what}: {value!r} s is out of range (0 to 30 days)")
    return int(round(seconds * 1000))


def enc(s: Optional[str]) -> Optional[bytes]:
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return s.encode("utf-8")


def dec(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""
