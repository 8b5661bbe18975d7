"""Loading libdlock and declaring its functions (ctypes, standard library only).

The library is looked for, in order, at:

1. ``$DLOCK_LIB``: a path to ``libdlock.so`` (or any file name ctypes can load);
2. the build tree this package sits in (``<repo>/build/plain/src/libdlock.so``,
   then any ``<repo>/build/*/src/libdlock.so``), so that running from the tree works;
3. the system (``libdlock.so.0`` through the dynamic linker's paths).

ctypes releases the GIL around every foreign call (``CDLL``, not ``PyDLL``), so a thread
blocked in a wait of libdlock never stops the other Python threads.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int64, c_size_t,
                    c_uint, c_uint64, c_void_p)

__all__ = ["lib", "lib_path", "LibraryNotFound"]


class LibraryNotFound(ImportError):
    """libdlock.so could not be found or loaded; the message lists where it was looked for."""


def _candidates() -> list[str]:
    env = os.environ.get("DLOCK_LIB")
    if env:
        return [env]
    out = []
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.exists(os.path.join(repo, "include", "dlock.h")):  # running from the tree
        plain = os.path.join(repo, "build", "plain", "src", "libdlock.so")
        out.append(plain)
        out.extend(p for p in sorted(glob.glob(os.path.join(repo, "build", "*", "src",
                                                            "libdlock.so"))) if p != plain)
    out.append("libdlock.so.0")
    found = ctypes.util.find_library("dlock")
    if found:
        out.append(found)
    return out


def _load() -> tuple[ctypes.CDLL, str]:
    tried = []
    env = os.environ.get("DLOCK_LIB")
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    hint = ("$DLOCK_LIB names a file that does not load: point it at the libdlock.so of a build"
            if env else
            "build libdlock (cmake -S . -B build/plain && cmake --build build/plain), install it, "
            "or set DLOCK_LIB to the path of libdlock.so")
    raise LibraryNotFound("cannot load libdlock: tried " + "; ".join(tried) + ". " + hint)


lib, lib_path = _load()

# ---- Structs (dlock.h; each begins with struct_size, set by its _init) ----

LOST_CB = CFUNCTYPE(None, c_void_p, c_char_p, c_int, c_void_p)


class ClientOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("url", c_char_p), ("connect_timeout_ms", c_int),
                ("command_timeout_ms", c_int), ("key_prefix", c_char_p), ("username", c_char_p),
                ("password", c_char_p), ("tls_ca_file", c_char_p), ("tls_cert_file", c_char_p),
                ("tls_key_file", c_char_p), ("tls_server_name", c_char_p), ("tls_skip_verify", c_int),
                ("max_connections", c_int), ("wait_replicas", c_int), ("wait_timeout_ms", c_int),
                ("redlock_urls", POINTER(c_char_p)), ("redlock_nurls", c_int),
                # The event hook is C's (docs/metrics.md); the binding leaves it NULL.
                ("on_event", c_void_p), ("on_event_arg", c_void_p), ("metrics_names", c_char_p)]


class MutexOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("lease_ms", c_int64), ("watchdog_lease_ms", c_int64),
                ("max_hold_ms", c_int64), ("on_lost", LOST_CB), ("on_lost_arg", c_void_p),
                ("owner_info", c_char_p)]


class LockInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("held", c_int), ("foreign", c_int), ("ttl_ms", c_int64),
                ("fence", c_uint64), ("since_unix_ms", c_int64), ("waiters", c_int64),
                ("owner_info", c_char * 1025), ("permits", c_int64), ("permits_used", c_int64),
                ("rwlock", c_int), ("readers", c_int64), ("writer", c_int),
                ("waiting_writers", c_int64), ("latch", c_int), ("latch_count", c_int64),
                ("latch_ttl_ms", c_int64)]


class ElectionOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("lease_ms", c_int64), ("on_lost", LOST_CB),
                ("on_lost_arg", c_void_p), ("value", c_char_p)]


class Leader(Structure):
    _fields_ = [("struct_size", c_size_t), ("has_leader", c_int), ("epoch", c_uint64),
                ("since_unix_ms", c_int64), ("lease_left_ms", c_int64), ("value", c_char * 1025)]


CHANGE_FN = CFUNCTYPE(None, c_char_p, POINTER(Leader), c_void_p)


class ObserverOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("interval_ms", c_int64), ("on_change", CHANGE_FN),
                ("on_change_arg", c_void_p)]


class Tick(Structure):
    _fields_ = [("job", c_char_p), ("scheduled_unix_ms", c_int64), ("fence", c_uint64),
                ("node", c_char_p)]


JOB_FN = CFUNCTYPE(c_int, POINTER(Tick), c_void_p)


class SchedEvent(Structure):
    _fields_ = [("kind", c_int), ("job", c_char_p), ("scheduled_unix_ms", c_int64), ("node", c_char_p),
                ("fence", c_uint64), ("duration_ms", c_int64), ("status", c_int),
                ("message", c_char_p), ("clock_skew_ms", c_int64)]


EVENT_FN = CFUNCTYPE(None, POINTER(SchedEvent), c_void_p)


class SchedOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("pool_size", c_int), ("node_name", c_char_p),
                ("on_event", EVENT_FN), ("on_event_arg", c_void_p)]


class JobOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("lock_at_most_for_ms", c_int64),
                ("lock_at_least_for_ms", c_int64), ("allow_overlap", c_int), ("time_zone", c_char_p),
                ("cron_flags", c_uint), ("history_len", c_int)]


class RunRecord(Structure):
    _fields_ = [("struct_size", c_size_t), ("node", c_char * 128), ("fence", c_uint64),
                ("scheduled_unix_ms", c_int64), ("start_unix_ms", c_int64), ("duration_ms", c_int64),
                ("outcome", c_char * 64), ("trigger", c_char * 16)]


LIST_FN = CFUNCTYPE(None, c_char_p, c_void_p)

# ---- Functions: name -> (restype, argtypes) ----

P = c_void_p
_I64P = POINTER(c_int64)
_U64P = POINTER(c_uint64)
_INTP = POINTER(c_int)
_SIGS = {
    "dlock_strerror": (c_char_p, [c_int]),
    "dlock_err_name": (c_char_p, [c_int]),
    "dlock_last_error": (c_char_p, []),
    "dlock_version": (c_char_p, []),
    "dlock_version_number": (c_int, []),
    "dlock_mono_now": (c_int64, []),
    "dlock_duration_parse": (c_int, [c_char_p, _I64P]),
    "dlock_client_options_init": (None, [POINTER(ClientOptions)]),
    "dlock_client_new": (c_int, [POINTER(P), POINTER(ClientOptions)]),
    "dlock_client_free": (None, [P]),
    "dlock_client_server": (c_char_p, [P]),
    "dlock_client_ping": (c_int, [P]),
    "dlock_client_backend": (c_char_p, [P]),
    "dlock_client_warnings": (c_char_p, [P]),
    "dlock_client_setup": (c_int, [P]),
    "dlock_url_redact": (None, [c_char_p, c_char_p, c_size_t]),
    "dlock_lost_reason_str": (c_char_p, [c_int]),
    "dlock_mutex_options_init": (None, [POINTER(MutexOptions)]),
    "dlock_mutex_new": (c_int, [POINTER(P), P, c_char_p, POINTER(MutexOptions)]),
    "dlock_mutex_free": (None, [P]),
    "dlock_mutex_acquire": (c_int, [P, c_int64]),
    "dlock_mutex_cancel": (None, [P]),
    "dlock_mutex_release": (c_int, [P]),
    "dlock_mutex_extend": (c_int, [P, c_int64]),
    "dlock_mutex_is_held": (c_int, [P]),
    "dlock_mutex_remaining": (c_int, [P, _I64P]),
    "dlock_mutex_fence": (c_uint64, [P]),
    "dlock_mutex_lost": (c_int, [P]),
    "dlock_mutex_lost_fd": (c_int, [P]),
    "dlock_mutex_valid_until": (c_int64, [P]),
    "dlock_mutex_errmsg": (c_char_p, [P]),
    "dlock_semaphore_new": (c_int, [POINTER(P), P, c_char_p, c_int, POINTER(MutexOptions)]),
    "dlock_semaphore_free": (None, [P]),
    "dlock_semaphore_mutex": (P, [P]),
    "dlock_rwlock_new": (c_int, [POINTER(P), P, c_char_p, c_int, POINTER(MutexOptions)]),
    "dlock_rwlock_free": (None, [P]),
    "dlock_rwlock_mutex": (P, [P]),
    "dlock_lock_info_init": (None, [POINTER(LockInfo)]),
    "dlock_lock_info_get": (c_int, [P, c_char_p, POINTER(LockInfo)]),
    "dlock_lock_force_release_flags": (c_int, [P, c_char_p, c_uint, _INTP]),
    "dlock_lock_list": (c_int, [P, c_char_p, LIST_FN, P]),
    "dlock_guard_check_highest": (c_int, [P, c_char_p, c_uint64, _U64P]),
    "dlock_multi_new": (c_int, [POINTER(P), P, POINTER(c_char_p), c_size_t, POINTER(MutexOptions)]),
    "dlock_multi_free": (None, [P]),
    "dlock_multi_acquire": (c_int, [P, c_int64]),
    "dlock_multi_cancel": (None, [P]),
    "dlock_multi_release": (c_int, [P]),
    "dlock_multi_extend": (c_int, [P, c_int64]),
    "dlock_multi_count": (c_size_t, [P]),
    "dlock_multi_fence": (c_uint64, [P, c_size_t]),
    "dlock_multi_lost": (c_int, [P]),
    "dlock_multi_lost_fd": (c_int, [P]),
    "dlock_multi_valid_until": (c_int64, [P]),
    "dlock_multi_errmsg": (c_char_p, [P]),
    "dlock_latch_new": (c_int, [POINTER(P), P, c_char_p]),
    "dlock_latch_free": (None, [P]),
    "dlock_latch_set": (c_int, [P, c_int64, c_int64]),
    "dlock_latch_count_down": (c_int, [P, _I64P]),
    "dlock_latch_count": (c_int, [P, _I64P]),
    "dlock_latch_wait": (c_int, [P, c_int64]),
    "dlock_latch_cancel": (None, [P]),
    "dlock_latch_errmsg": (c_char_p, [P]),
    "dlock_election_options_init": (None, [POINTER(ElectionOptions)]),
    "dlock_election_new": (c_int, [POINTER(P), P, c_char_p, POINTER(ElectionOptions)]),
    "dlock_election_free": (None, [P]),
    "dlock_election_campaign": (c_int, [P, c_char_p, c_int64]),
    "dlock_election_cancel": (None, [P]),
    "dlock_election_proclaim": (c_int, [P, c_char_p]),
    "dlock_election_resign": (c_int, [P]),
    "dlock_election_epoch": (c_uint64, [P]),
    "dlock_election_lost": (c_int, [P]),
    "dlock_election_lost_fd": (c_int, [P]),
    "dlock_election_valid_until": (c_int64, [P]),
    "dlock_election_errmsg": (c_char_p, [P]),
    "dlock_leader_init": (None, [POINTER(Leader)]),
    "dlock_election_leader": (c_int, [P, c_char_p, POINTER(Leader)]),
    "dlock_election_evict": (c_int, [P, c_char_p, c_uint64, _INTP]),
    "dlock_observer_options_init": (None, [POINTER(ObserverOptions)]),
    "dlock_observer_new": (c_int, [POINTER(P), P, c_char_p, POINTER(ObserverOptions)]),
    "dlock_observer_free": (None, [P]),
    "dlock_observer_fd": (c_int, [P]),
    "dlock_observer_next": (c_int, [P, POINTER(Leader)]),
    "dlock_observer_errmsg": (c_char_p, [P]),
    "dlock_sched_options_init": (None, [POINTER(SchedOptions)]),
    "dlock_job_options_init": (None, [POINTER(JobOptions)]),
    "dlock_sched_new": (c_int, [POINTER(P), P, POINTER(SchedOptions)]),
    "dlock_sched_add_cron": (c_int, [P, c_char_p, c_char_p, POINTER(JobOptions), JOB_FN, P]),
    "dlock_sched_add_fixed_rate": (c_int, [P, c_char_p, c_int64, POINTER(JobOptions), JOB_FN, P]),
    "dlock_sched_add_fixed_delay": (c_int, [P, c_char_p, c_int64, POINTER(JobOptions), JOB_FN, P]),
    "dlock_sched_start": (c_int, [P]),
    "dlock_sched_stop": (c_int, [P, c_int64]),
    "dlock_sched_free": (None, [P]),
    "dlock_run_record_init": (None, [POINTER(RunRecord)]),
    "dlock_sched_history": (c_int, [P, c_char_p, POINTER(RunRecord), c_int]),
}

for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

WAIT_FOREVER = -1
MAX_DURATION_MS = 30 * 24 * 3600 * 1000
RW_READ, RW_WRITE = 1, 2
LOST_EXPIRED = 1  # DLOCK_LOST_EXPIRED: the key is gone
