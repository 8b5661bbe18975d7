"""Durations, strings and fork detection shared by the modules of the binding."""
from __future__ import annotations

import ctypes
import datetime
import math
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


def to_ms(value: Optional[Duration], what: str, *, none: int = 0, forever_ok: bool = False,
          positive: bool = False) -> int:
    """Milliseconds of a Duration; ``none`` for None. ``positive``: 0 is refused (a fixed lease
    of 0 would be read as watchdog mode by libdlock) and a positive value is at least 1 ms."""
    if value is None:
        return WAIT_FOREVER if forever_ok else none
    if isinstance(value, str):
        out = ctypes.c_int64()
        errors.check(lib.dlock_duration_parse(enc(value, what), ctypes.byref(out)))
        if positive and out.value == 0:
            raise _zero(what, value)
        return out.value
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what}: a duration is seconds (int or float), a timedelta or a string "
                        f"such as '1m30s', not {type(value).__name__}")
    if math.isnan(seconds) or seconds < 0 or seconds * 1000 > MAX_DURATION_MS:
        raise errors.by_name["ERANGE"](f"{what}: {value!r} s is out of range (0 to 30 days)")
    if positive:
        if seconds == 0:
            raise _zero(what, value)
        return max(1, int(round(seconds * 1000)))
    return int(round(seconds * 1000))


def _zero(what: str, value) -> errors.Error:
    return errors.by_name["ERANGE"](f"{what}: {value!r} is no lease (a fixed lease is positive): "
                                    "say None for watchdog mode")


def enc(s, what: str = "a string argument", *, name: bool = False, secret: bool = False
        ) -> Optional[bytes]:
    """UTF-8 bytes of ``s`` (None stays None) for a C string. Anything but str/bytes is a
    TypeError; a NUL would cut the C string there, so it is refused (``dlock.InvalidName``
    for a ``name``, ``dlock.InvalidArgument`` otherwise; a ``secret`` is never shown)."""
    if s is None:
        return None
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, bytes):
        b = s
    else:
        raise TypeError(f"{what}: a str, not {type(s).__name__}")
    if b"\0" in b:
        shown = "" if secret else f" {s!r}"
        raise errors.by_name["ENAME" if name else "EINVAL"](
            f"{what}{shown} holds a NUL character, which a C string cannot carry: remove it")
    return b


def enc_name(s, what: str = "lock name") -> Optional[bytes]:
    """enc() for a name (a lock, election, job or guarded resource)."""
    return enc(s, what, name=True)


def dec(b: Optional[bytes]) -> str:
    return b.decode("utf-8", "replace") if b else ""
