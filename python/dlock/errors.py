"""Exceptions: one class per DLOCK_E* status of dlock.h, one to one.

Every exception derives from :class:`dlock.Error` and carries ``code`` (the C status, e.g.
-1), ``name`` (the enum name without its prefix, ``"EBUSY"``) and ``message`` (the C
library's message: which server, which key, what to do). The table below names a class for
each code of dlock.h; the codes themselves are read from the loaded library
(``dlock_err_name``), and a code a newer library knows but this table does not still gets a
class of its own (``dlock.errors.by_code[code]``), named after the enum. The test
``test_errors.py`` checks the table against include/dlock.h, so it cannot drift.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

from ._lib import lib


class Error(Exception):
    """A libdlock call failed. ``code``, ``name`` and ``message`` say how."""

    code: int = 0
    name: str = ""

    def __init__(self, message: str = "", code: Optional[int] = None):
        if code is not None:
            self.code = code
        self.message = message or _strerror(self.code)
        super().__init__(self.message)


def _strerror(code: int) -> str:
    return lib.dlock_strerror(code).decode("utf-8", "replace") if code else "dlock error"


# enum name (without DLOCK_) -> (class name, extra Python base)
_TABLE = {
    "EBUSY": ("Busy", None),
    "ENOTHELD": ("NotHeld", None),
    "EINVAL": ("InvalidArgument", ValueError),
    "ENAME": ("InvalidName", ValueError),
    "ERANGE": ("OutOfRange", ValueError),
    "EURL": ("BadURL", ValueError),
    "ECONNECT": ("ConnectFailed", ConnectionError),
    "EAUTH": ("AuthFailed", None),
    "ETIMEDOUT": ("TimedOut", TimeoutError),
    "EIO": ("ConnectionLost", ConnectionError),
    "ETLS": ("TLSError", None),
    "EPROTO": ("ProtocolError", None),
    "ESERVER": ("ServerError", None),
    "EWRONGTYPE": ("WrongType", None),
    "ENOPERM": ("NoPermission", PermissionError),
    "ELOST": ("Lost", None),
    "ESTALE": ("Stale", None),
    "ENOMEM": ("OutOfMemory", None),
    "EUNKNOWN": ("Unknown", None),
    "ESYS": ("SystemFailure", OSError),
    "ECLOSED": ("Closed", None),
    "EREADONLY": ("ReadOnly", None),
    "ESERVEROOM": ("ServerOutOfMemory", None),
    "ECANCELED": ("Canceled", None),
    "ECRON": ("BadCron", ValueError),
    "ETZ": ("BadTimeZone", ValueError),
    "ETIME": ("BadTime", ValueError),
    "EFENCE": ("BadFence", None),
    "ETOPOLOGY": ("TopologyError", None),
    "EREPLICAS": ("ReplicasError", None),
    "ECLUSTER": ("ClusterError", None),
    "EFOREIGN": ("Foreign", None),
    "EQUORUM": ("NoQuorum", None),
    "EDB": ("NoDatabase", None),
    "ELIMIT": ("LimitMismatch", None),
    "EUPGRADE": ("UpgradeRefused", None),
    "ENOLATCH": ("NoLatch", None),
    "ENOTREADY": ("NotReady", None),
}

by_code: Dict[int, Type[Error]] = {}
by_name: Dict[str, Type[Error]] = {}


def _make(enum_name: str, code: int) -> Type[Error]:
    cls_name, extra = _TABLE.get(enum_name, ("E" + enum_name[1:].capitalize(), None))
    bases = (Error, extra) if extra else (Error,)
    doc = f"DLOCK_{enum_name} ({code}): {_strerror(code)}."
    return type(cls_name, bases, {"code": code, "name": enum_name, "__doc__": doc,
                                  "__module__": "dlock"})


def _library_codes() -> Dict[int, str]:
    """Every status the loaded library names: -1, -2, ... until it answers UNKNOWN."""
    out = {}
    for code in range(-1, -1000, -1):
        n = lib.dlock_err_name(code).decode()
        if n == "UNKNOWN":
            break
        out[code] = n
    return out


for _code, _enum in _library_codes().items():
    _cls = _make(_enum, _code)
    by_code[_code] = _cls
    by_name[_enum] = _cls
    globals()[_cls.__name__] = _cls


class Forked(by_name["ECLOSED"]):  # type: ignore[misc,valid-type]
    """The client was created in a parent process before fork(): it cannot be used in the
    child (its connections and threads are the parent's). Create a new Client in the child."""


def error_for(code: int, message: str = "") -> Error:
    """The exception for status ``code`` with the library's ``message``."""
    cls = by_code.get(code)
    if cls is None:
        e = Error(message or f"dlock status {code}", code)
        e.name = lib.dlock_err_name(code).decode()
        return e
    return cls(message)


def last_error() -> str:
    """dlock_last_error() of this thread."""
    return lib.dlock_last_error().decode("utf-8", "replace")


def check(rc: int, message_fn=None) -> int:
    """Raise the exception for a negative status; return ``rc`` otherwise."""
    if rc < 0:
        msg = ""
        if message_fn is not None:
            msg = message_fn()
        if not msg:
            msg = last_error()
        raise error_for(rc, msg)
    return rc


# The names of the classes the table promises, for type checkers and `from dlock import *`.
Busy: Type[Error]
NotHeld: Type[Error]
Stale: Type[Error]
Unknown: Type[Error]
Lost: Type[Error]
Canceled: Type[Error]
Closed: Type[Error]
TimedOut: Type[Error]
