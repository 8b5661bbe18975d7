"""The exceptions map dlock.h's status codes one to one, and the ctypes structs match the
library's (their _init sets struct_size to the size the library was built with)."""
import ctypes
import os
import re

import pytest

import dlock
from dlock import _lib, errors

HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "include", "dlock.h")


def header_codes():
    with open(HEADER) as f:
        text = f.read()
    return {int(code): (name, msg) for name, code, msg in
            re.findall(r'XX\((\w+),\s*(-\d+),\s*"([^"]*)"\)', text)}


def test_every_code_of_the_header_has_its_own_class():
    codes = header_codes()
    assert len(codes) >= 38
    classes = set()
    for code, (name, msg) in codes.items():
        cls = dlock.by_code[code]
        assert cls.name == name and cls.code == code
        assert name in errors._TABLE, f"DLOCK_{name}: add it to dlock/errors.py's _TABLE"
        assert cls.__name__ == errors._TABLE[name][0]
        assert getattr(dlock, cls.__name__) is cls
        assert issubclass(cls, dlock.Error)
        classes.add(cls)
        assert msg in cls.__doc__
    assert len(classes) == len(codes)  # one to one
    assert set(dlock.by_code) == set(codes)  # the library knows no code the header does not


def test_the_names_the_issue_promises():
    assert dlock.Busy.code == -1 and dlock.NotHeld.code == -2
    assert dlock.Stale.name == "ESTALE" and dlock.Unknown.name == "EUNKNOWN"
    assert dlock.Lost.name == "ELOST" and dlock.Canceled.name == "ECANCELED"
    assert issubclass(dlock.TimedOut, TimeoutError)
    assert issubclass(dlock.InvalidArgument, ValueError)
    assert issubclass(dlock.Forked, dlock.Closed)


def test_an_exception_carries_the_c_message():
    with pytest.raises(dlock.BadURL) as e:
        dlock.Client("nosuch://x")
    assert e.value.code == -6 and e.value.name == "EURL"
    assert e.value.message == str(e.value) and "nosuch" in e.value.message
    with pytest.raises(dlock.ConnectFailed) as e:
        dlock.Client("redis://127.0.0.1:1", connect_timeout=1)
    assert "127.0.0.1:1" in str(e.value)


def test_durations():
    from dlock._util import to_ms
    assert to_ms("1m30s", "x") == 90000
    assert to_ms(1.5, "x") == 1500
    assert to_ms(None, "x", forever_ok=True) == -1
    with pytest.raises(dlock.InvalidArgument):
        to_ms("5x", "x")
    with pytest.raises(dlock.OutOfRange):
        to_ms(-1, "x")
    with pytest.raises(TypeError):
        to_ms([], "x")


@pytest.mark.parametrize("struct,init", [
    (_lib.ClientOptions, "dlock_client_options_init"),
    (_lib.MutexOptions, "dlock_mutex_options_init"),
    (_lib.LockInfo, "dlock_lock_info_init"),
    (_lib.ElectionOptions, "dlock_election_options_init"),
    (_lib.Leader, "dlock_leader_init"),
    (_lib.ObserverOptions, "dlock_observer_options_init"),
    (_lib.SchedOptions, "dlock_sched_options_init"),
    (_lib.JobOptions, "dlock_job_options_init"),
    (_lib.RunRecord, "dlock_run_record_init"),
])
def test_struct_layouts_match_the_library(struct, init):
    buf = ctypes.create_string_buffer(8192)
    getattr(_lib.lib, init)(ctypes.cast(buf, ctypes.POINTER(struct)))
    size = ctypes.c_size_t.from_buffer(buf).value
    assert size == ctypes.sizeof(struct), f"{struct.__name__}: dlock.h grew; add its new fields"
