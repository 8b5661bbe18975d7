"""Client and the lock handles: mutex, semaphore, read-write lock, multi-lock, latch, election."""
from __future__ import annotations

import dataclasses
import os
import select
import threading
import time
from ctypes import byref, c_char_p, c_int, c_int64, c_uint64, c_void_p
from typing import Callable, List, Optional, Sequence, TypeVar

from . import _lib, _monitor, _util, errors
from ._lib import RW_READ, RW_WRITE, lib
from ._util import Duration, dec, enc, enc_name, to_ms

__all__ = ["Client", "Lock", "MultiLock", "Latch", "Election", "LockStatus", "Leader", "Observer"]

_UNSET = object()
_H = TypeVar("_H", bound="_Holding")
LostCallback = Callable[["_Holding", str], None]


def lost_reason_str(code: int) -> str:
    return dec(lib.dlock_lost_reason_str(code))


class _Res:
    """One C object a client owns: freed once, by its handle, by close() or by the GC."""
    __slots__ = ("ptr", "free", "mu", "wake", "workers", "__weakref__")

    def __init__(self, ptr: int, free) -> None:
        self.ptr = ptr
        self.free = free
        # Held while the pointer is used by a short call (the loss monitor, fileno(), an
        # observer's next()), and while it is cleared.
        self.mu = threading.Lock()
        self.wake: Optional[Callable[[], None]] = None  # called before the free (an observer's waiter)
        self.workers: "set[int]" = set()  # the threads running in the object (a scheduler's jobs)


class _Closeable:
    """``with`` closes; so does the garbage collector."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self):
        raise TypeError(f"a {type(self).__name__} of dlock cannot be pickled or sent to another "
                        "process (it is this process's connections and holds): make a "
                        "dlock.Client in that process")


class _Owned(_Closeable):
    """A handle on one C object of a client (a lock, a latch, an observer)."""

    _kind = "handle"

    def __init__(self, client: "Client", name: str, res: _Res) -> None:
        self._client = client
        self.name = name
        self._res = res

    def _p(self) -> int:
        self._client._p()
        if self._res.ptr is None:
            raise errors.by_name["ECLOSED"](f"the handle on {self._kind} '{self.name}' is closed")
        return self._res.ptr

    def close(self) -> None:
        """Free the handle (a hold is released, best effort). Idempotent."""
        self._client._free(self._res)


class Client(_Closeable):
    """A connection to one dlock deployment (a URL: redis://, rediss://, redis-sentinel://,
    redis-cluster://, redlock://, zk://, postgres://, mysql://; README.md, "Connecting").

    ``url`` None means ``$DLOCK_URL``, else ``redis://127.0.0.1:6379``, as in the C library.
    Durations are seconds (int or float), a ``datetime.timedelta`` or dlock's text ("1m30s").
    The client checks at once that the server answers (raises ``dlock.ConnectFailed`` etc.).

    Use it as a context manager, or call :meth:`close`: that frees every handle made through
    it (releasing what they hold) and then the client. The garbage collector does the same.
    A client made before ``os.fork()`` cannot be used in the child (``dlock.Forked``).
    """

    def __init__(self, url: Optional[str] = None, *, key_prefix: Optional[str] = None,
                 connect_timeout: Optional[Duration] = None,
                 command_timeout: Optional[Duration] = None,
                 username: Optional[str] = None, password: Optional[str] = None,
                 tls_ca_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None, tls_server_name: Optional[str] = None,
                 tls_skip_verify: bool = False, max_connections: int = 0,
                 wait_replicas: int = 0, wait_timeout: Optional[Duration] = None,
                 redlock_urls: Optional[Sequence[str]] = None) -> None:
        self._ptr: Optional[int] = None
        self._gen = _util.fork_generation
        self._mu = threading.Lock()
        self._res: "set[_Res]" = set()
        self._closing = False
        # The handles holding now: a handle dropped while it holds stays alive until released
        # (or the client closes), as redis-py's r.lock(n).acquire() keeps its key.
        self._holding: "set[_Holding]" = set()
        o = _lib.ClientOptions()
        lib.dlock_client_options_init(byref(o))
        o.url = enc(url, "url", secret=True)
        o.connect_timeout_ms = to_ms(connect_timeout, "connect_timeout")
        o.command_timeout_ms = to_ms(command_timeout, "command_timeout")
        o.key_prefix = enc(key_prefix, "key_prefix")
        o.username = enc(username, "username")
        o.password = enc(password, "password", secret=True)
        o.tls_ca_file = enc(tls_ca_file, "tls_ca_file")
        o.tls_cert_file = enc(tls_cert_file, "tls_cert_file")
        o.tls_key_file = enc(tls_key_file, "tls_key_file")
        o.tls_server_name = enc(tls_server_name, "tls_server_name")
        o.tls_skip_verify = 1 if tls_skip_verify else 0
        o.max_connections = max_connections
        o.wait_replicas = wait_replicas
        o.wait_timeout_ms = to_ms(wait_timeout, "wait_timeout")
        if redlock_urls:
            arr = (c_char_p * len(redlock_urls))(*[enc(u, "redlock_urls", secret=True) for u in redlock_urls])
            o.redlock_urls = arr
            o.redlock_nurls = len(redlock_urls)
        out = c_void_p()
        errors.check(lib.dlock_client_new(byref(out), byref(o)))
        self._ptr = out.value

    # ---- the client itself ----

    def _p(self) -> int:
        if self._gen != _util.fork_generation:
            raise errors.Forked("this dlock client was created before fork(): the child process "
                                "cannot use it (its connections and threads are the parent's); "
                                "create a new dlock.Client in the child")
        if self._ptr is None or self._closing:
            raise errors.by_name["ECLOSED"]("the dlock client is closed: create a new one")
        return self._ptr

    def _own(self, ptr: int, free) -> _Res:
        r = _Res(ptr, free)
        with self._mu:
            self._res.add(r)
        return r

    def _free(self, r: _Res) -> None:
        if self._gen != _util.fork_generation:
            return
        with r.mu:
            ptr, r.ptr = r.ptr, None
        with self._mu:
            self._res.discard(r)
        if ptr is not None:
            if r.wake is not None:
                r.wake()
            r.free(ptr)

    def close(self) -> None:
        """Free every handle of this client (a held lock is released, best effort), then the
        client. Idempotent. Do not call it while another thread still uses a handle."""
        if self._gen != _util.fork_generation:
            return  # after fork(): the parent's; never freed here (that would release its locks)
        with self._mu:  # one closer; the others return at once
            if self._ptr is None or self._closing:
                return
            self._closing = True
            rs = list(self._res)
        if any(threading.get_ident() in r.workers for r in rs):
            # A scheduled job closing its own client: the scheduler's free joins this very
            # thread, so the close goes on in another one once the job returns.
            threading.Thread(target=self._close_now, args=(rs,), name="dlock-close").start()
            return
        self._close_now(rs)

    def _close_now(self, rs: "List[_Res]") -> None:
        for r in rs:
            self._free(r)
        with self._mu:
            ptr, self._ptr = self._ptr, None
            held, self._holding = self._holding, set()
        held.clear()  # outside _mu: a handle collected now closes itself (a no-op by now)
        lib.dlock_client_free(ptr)

    def __enter__(self) -> "Client":
        return self

    @property
    def server(self) -> str:
        """The server, for messages ("host:port", "unix:/path", "tls host:port")."""
        return dec(lib.dlock_client_server(self._p()))

    @property
    def backend(self) -> str:
        """The backend's short name ("redis", "zookeeper", "postgresql", "mysql")."""
        return dec(lib.dlock_client_backend(self._p()))

    @property
    def warnings(self) -> str:
        """What the connect found wrong with the server, one warning per line ("" if none)."""
        return dec(lib.dlock_client_warnings(self._p()))

    def ping(self) -> None:
        """One round trip to the server."""
        errors.check(lib.dlock_client_ping(self._p()))

    # ---- locks ----

    def _mutex_options(self, lease, watchdog_lease, max_hold, owner_info) -> _lib.MutexOptions:
        o = _lib.MutexOptions()
        lib.dlock_mutex_options_init(byref(o))
        o.lease_ms = to_ms(lease, "lease", positive=True)
        o.watchdog_lease_ms = to_ms(watchdog_lease, "watchdog_lease")
        o.max_hold_ms = to_ms(max_hold, "max_hold")
        o.owner_info = enc(owner_info, "owner_info")
        return o

    def lock(self, name: str, lease: Optional[Duration] = None, *, wait: Optional[Duration] = None,
             watchdog_lease: Optional[Duration] = None, max_hold: Optional[Duration] = None,
             owner_info: Optional[str] = None, on_lost: Optional[LostCallback] = None,
             lost_ok: bool = False) -> "Lock":
        """A handle on the mutex ``name`` (no I/O until acquired).

        ``lease`` None: watchdog mode (a ``watchdog_lease``, 30 s by default, renewed every
        third of it while held); a duration: a fixed lease, lost at its end. ``wait`` is how
        long ``acquire()`` and ``with`` wait (None: without limit; 0: try once); a wait that
        ends with the lock still taken raises ``dlock.Busy``. ``on_lost(hold, reason)`` is
        called once, from the binding's loss-callback thread, if the hold is lost.
        ``with`` raises ``dlock.Lost`` at the block's end when the hold was lost during it,
        unless ``lost_ok``.
        """
        o = self._mutex_options(lease, watchdog_lease, max_hold, owner_info)
        out = c_void_p()
        errors.check(lib.dlock_mutex_new(byref(out), self._p(), enc_name(name), byref(o)))
        r = self._own(out.value, lib.dlock_mutex_free)
        return Lock(self, "mutex", name, r, out.value, wait, on_lost, lost_ok)

    def semaphore(self, name: str, permits: int, lease: Optional[Duration] = None, *,
                  wait: Optional[Duration] = None, watchdog_lease: Optional[Duration] = None,
                  max_hold: Optional[Duration] = None, owner_info: Optional[str] = None,
                  on_lost: Optional[LostCallback] = None, lost_ok: bool = False) -> "Lock":
        """A handle on one permit of the semaphore ``name`` with ``permits`` in all
        (docs/semaphore.md); the same verbs and loss rules as :meth:`lock`."""
        o = self._mutex_options(lease, watchdog_lease, max_hold, owner_info)
        out = c_void_p()
        errors.check(lib.dlock_semaphore_new(byref(out), self._p(), enc_name(name), permits, byref(o)))
        r = self._own(out.value, lib.dlock_semaphore_free)
        return Lock(self, "semaphore", name, r, lib.dlock_semaphore_mutex(out.value), wait, on_lost,
                    lost_ok)

    def rwlock(self, name: str, side: str = "write", lease: Optional[Duration] = None, *,
               wait: Optional[Duration] = None, watchdog_lease: Optional[Duration] = None,
               max_hold: Optional[Duration] = None, owner_info: Optional[str] = None,
               on_lost: Optional[LostCallback] = None, lost_ok: bool = False) -> "Lock":
        """A handle on the ``side`` ("read" or "write") of the read-write lock ``name``
        (docs/rwlock.md); the same verbs and loss rules as :meth:`lock`."""
        sides = {"read": RW_READ, "write": RW_WRITE}
        if side not in sides:
            raise errors.by_name["EINVAL"](f"rwlock side {side!r}: say 'read' or 'write'")
        o = self._mutex_options(lease, watchdog_lease, max_hold, owner_info)
        out = c_void_p()
        errors.check(lib.dlock_rwlock_new(byref(out), self._p(), enc_name(name), sides[side], byref(o)))
        r = self._own(out.value, lib.dlock_rwlock_free)
        return Lock(self, side, name, r, lib.dlock_rwlock_mutex(out.value), wait, on_lost, lost_ok)

    def read_lock(self, name: str, lease: Optional[Duration] = None, **kw) -> "Lock":
        """``rwlock(name, "read", ...)``."""
        return self.rwlock(name, "read", lease, **kw)

    def write_lock(self, name: str, lease: Optional[Duration] = None, **kw) -> "Lock":
        """``rwlock(name, "write", ...)``."""
        return self.rwlock(name, "write", lease, **kw)

    def multi(self, names: Sequence[str], lease: Optional[Duration] = None, *,
              wait: Optional[Duration] = None, watchdog_lease: Optional[Duration] = None,
              max_hold: Optional[Duration] = None, owner_info: Optional[str] = None,
              on_lost: Optional[LostCallback] = None, lost_ok: bool = False) -> "MultiLock":
        """All of ``names`` or none, taken in a canonical order (docs/multilock.md)."""
        o = self._mutex_options(lease, watchdog_lease, max_hold, owner_info)
        arr = (c_char_p * len(names))(*[enc_name(n) for n in names])
        out = c_void_p()
        errors.check(lib.dlock_multi_new(byref(out), self._p(), arr, len(names), byref(o)))
        r = self._own(out.value, lib.dlock_multi_free)
        return MultiLock(self, list(names), r, wait, on_lost, lost_ok)

    def latch(self, name: str) -> "Latch":
        """A handle on the countdown latch ``name`` (docs/latch.md)."""
        out = c_void_p()
        errors.check(lib.dlock_latch_new(byref(out), self._p(), enc_name(name)))
        return Latch(self, name, self._own(out.value, lib.dlock_latch_free))

    def election(self, name: str, value: Optional[str] = None, *, lease: Optional[Duration] = None,
                 wait: Optional[Duration] = None, on_lost: Optional[LostCallback] = None,
                 lost_ok: bool = False) -> "Election":
        """A candidate in the election ``name`` (docs/election.md). ``with`` campaigns (waiting
        up to ``wait``; None: without limit) and resigns at the end."""
        o = _lib.ElectionOptions()
        lib.dlock_election_options_init(byref(o))
        o.lease_ms = to_ms(lease, "lease", positive=True)
        o.value = enc(value, "election value")
        out = c_void_p()
        errors.check(lib.dlock_election_new(byref(out), self._p(), enc_name(name), byref(o)))
        r = self._own(out.value, lib.dlock_election_free)
        return Election(self, name, value, r, wait, on_lost, lost_ok)

    # ---- inspection, admin, guard ----

    def leader(self, name: str) -> Optional["Leader"]:
        """Who leads election ``name`` now, read from the server; None when no one does."""
        o = _lib.Leader()
        lib.dlock_leader_init(byref(o))
        errors.check(lib.dlock_election_leader(self._p(), enc_name(name), byref(o)))
        return Leader._of(o)

    def observe(self, name: str, interval: Optional[Duration] = None) -> "Observer":
        """Watch election ``name`` (candidate or not): every change of leader, in order
        (read from the server every ``interval``, 0.1 s by default)."""
        o = _lib.ObserverOptions()
        lib.dlock_observer_options_init(byref(o))
        o.interval_ms = to_ms(interval, "interval")
        out = c_void_p()
        errors.check(lib.dlock_observer_new(byref(out), self._p(), enc_name(name), byref(o)))
        return Observer(self, name, self._own(out.value, lib.dlock_observer_free))

    def evict(self, name: str, epoch: int) -> bool:
        """End the term ``epoch`` of election ``name`` (as :meth:`leader` read it), only if it
        is still the one leading: True when it ended now. Its leader learns it at its next
        renewal (docs/election.md)."""
        evicted = c_int()
        errors.check(lib.dlock_election_evict(self._p(), enc_name(name), epoch, byref(evicted)))
        return bool(evicted.value)

    def guard_check(self, resource: str, fence: int) -> int:
        """Admit a write to ``resource`` by the holder of ``fence``, recording it: returns the
        highest fence seen (``fence`` itself). Raises ``dlock.Stale`` (with ``highest``) when
        a newer holder has written since: do not write."""
        hi = c_uint64()
        rc = lib.dlock_guard_check_highest(self._p(), enc_name(resource, "guarded resource"), fence, byref(hi))
        if rc < 0:
            e = errors.error_for(rc, errors.last_error())
            e.highest = hi.value  # type: ignore[attr-defined]
            raise e
        return hi.value

    def status(self, name: str) -> "LockStatus":
        """What the server knows of the lock ``name`` (``dlock status NAME``)."""
        i = _lib.LockInfo()
        lib.dlock_lock_info_init(byref(i))
        errors.check(lib.dlock_lock_info_get(self._p(), enc_name(name), byref(i)))
        return LockStatus(**{f.name: (dec(getattr(i, f.name)) if f.name == "owner_info"
                                      else getattr(i, f.name))
                             for f in dataclasses.fields(LockStatus)})

    def list(self, pattern: Optional[str] = None) -> List[str]:
        """The names of the locks held now (and latches set) matching the glob ``pattern``."""
        names: List[str] = []
        cb = _lib.LIST_FN(lambda n, _arg: names.append(dec(n)))
        errors.check(lib.dlock_lock_list(self._p(), enc(pattern, "pattern"), cb, None))
        return names

    def force_release(self, name: str, *, foreign: bool = False) -> bool:
        """Delete the lock ``name`` whatever its owner (admin); True when a hold was ended.
        Its holder learns it at its next renewal (lost: "deleted")."""
        was = c_int()
        errors.check(lib.dlock_lock_force_release_flags(self._p(), enc_name(name), 1 if foreign else 0,
                                                        byref(was)))
        return bool(was.value)

    # ---- asyncio and scheduler (other modules) ----

    def alock(self, name: str, lease: Optional[Duration] = None, **kw):
        """An asyncio lock: ``async with client.alock(name, wait=5) as hold:`` (dlock.aio)."""
        from .aio import AsyncLock
        return AsyncLock(self.lock(name, lease, **kw))

    def every(self, period: Duration, fn=None, *, name: Optional[str] = None, **kw):
        """Run ``fn(tick)`` once per ``period`` across every process that schedules the same
        ``name`` (default: the function's module and qualified name). Usable as a decorator.
        Returns a :class:`dlock.Job` (``.stop()``). See dlock.sched."""
        from .sched import schedule
        return schedule(self, "every", period, fn, name, kw)

    def cron(self, expr: str, fn=None, *, name: Optional[str] = None, **kw):
        """Run ``fn(tick)`` at each fire time of the Quartz cron ``expr`` (docs/cron.md) once
        across every process that schedules the same ``name``. Usable as a decorator."""
        from .sched import schedule
        return schedule(self, "cron", expr, fn, name, kw)

    def history(self, job, limit: int = 20):
        """The newest ``limit`` runs of scheduled job ``job`` (its name, or the
        :class:`dlock.Job`), newest first."""
        from .sched import history
        return history(self, job, limit)


@dataclasses.dataclass(frozen=True)
class LockStatus:
    """dlock_lock_info: what the server knows of a lock name."""
    held: int
    foreign: int
    ttl_ms: int
    fence: int
    since_unix_ms: int
    waiters: int
    owner_info: str
    permits: int
    permits_used: int
    rwlock: int
    readers: int
    writer: int
    waiting_writers: int
    latch: int
    latch_count: int
    latch_ttl_ms: int


@dataclasses.dataclass(frozen=True)
class Leader:
    """Who leads an election: its epoch (the term's fence) and value."""
    epoch: int
    value: str
    since_unix_ms: int
    lease_left_ms: int

    @staticmethod
    def _of(o: _lib.Leader) -> Optional["Leader"]:
        if not o.has_leader:
            return None
        return Leader(o.epoch, dec(o.value), o.since_unix_ms, o.lease_left_ms)


class _Holding(_Owned):
    """What every holding handle shares: the wait, the loss signals, the context manager.

    Subclasses give _acquire(ms), _release(), _lost_code(), _lost_fd(), _errmsg().
    """

    _kind = "lock"

    def __init__(self, client: Client, name: str, res: _Res, wait, on_lost, lost_ok) -> None:
        super().__init__(client, name, res)
        self._wait = wait
        self._on_lost = on_lost
        self._lost_ok = lost_ok
        self._smu = res.mu
        self._active = False
        self._depth = 0
        self._event: Optional[threading.Event] = None
        self._watch: Optional[int] = None
        self._lost_after = 0  # the loss of the last hold, kept after its release
        self._owner = 0  # the thread holding it (libdlock ties a hold to its thread)
        self._told = False  # on_lost was called (or queued) for the current hold

    def _check(self, rc: int) -> int:
        return errors.check(rc, self._errmsg)

    def _forked(self) -> bool:
        return self._client._gen != _util.fork_generation

    # ---- acquire / release ----

    def acquire(self: _H, wait: Optional[Duration] = _UNSET) -> _H:  # type: ignore[assignment]
        """Take it, waiting up to ``wait`` (default: the handle's; None: without limit; 0: try
        once). Raises ``dlock.Busy`` when the wait ends with it taken. Returns the handle,
        which stays alive while it holds (dropping it does not release; its client's close
        does)."""
        ms = to_ms(self._wait if wait is _UNSET else wait, "wait", forever_ok=True)
        self._p()
        self._check(self._acquire(ms))
        self._held()
        return self

    def try_acquire(self) -> bool:
        """One try: True when taken, False when another owner holds it."""
        try:
            self.acquire(0)
        except errors.by_name["EBUSY"]:
            return False
        return True

    def _held(self) -> None:
        with self._smu:
            self._depth += 1
            if self._depth > 1:
                return
            self._owner = threading.get_ident()
            self._active = True
            self._lost_after = 0
            self._told = False
            if self._event is not None and self._event.is_set():
                self._event = threading.Event()
            if self._on_lost is not None or self._event is not None:
                self._watch_locked()
        with self._client._mu:
            self._client._holding.add(self)

    def _watch_locked(self) -> None:
        if self._watch is None:
            fd = self._check(self._lost_fd())
            self._watch = _monitor.monitor().watch(self, fd)

    def _unheld(self) -> Optional[int]:
        """Before the C release: the loss so far (None when there is no hold of this thread's);
        the monitor stops watching; a loss not told yet is told (event, on_lost)."""
        with self._smu:
            if not self._active or self._owner != threading.get_ident():
                return None  # none, or another thread's: libdlock answers NotHeld, a holder goes on
            live = self._res.ptr is not None
            lost = self._lost_code() if live else 0
            if self._depth > 0:
                self._depth -= 1
            if self._depth > 0:
                return lost
            self._active = False
            self._lost_after = lost
            if self._watch is not None:
                _monitor.monitor().unwatch(self._watch)
                self._watch = None
            tell = self._tell_locked(lost) if lost else None
        with self._client._mu:
            self._client._holding.discard(self)
        if tell is not None:
            tell()
        return lost

    def _tell_locked(self, code: int) -> Optional[Callable[[], None]]:
        """Set the event and queue on_lost (once per hold); under _smu."""
        if self._event is not None:
            self._event.set()
        if self._on_lost is None or self._told:
            return None
        self._told = True
        cb, why = self._on_lost, lost_reason_str(code)
        return lambda: _monitor.monitor().call_soon(cb, self, why)

    def _vanished(self) -> int:
        """The release found the hold gone though no loss had been declared (the key deleted
        or evicted without a message to us): it was lost during the hold."""
        code = _lib.LOST_EXPIRED
        with self._smu:
            if self._depth == 0:
                self._lost_after = code
            tell = self._tell_locked(code)
        if tell is not None:
            tell()
        return code

    def release(self) -> None:
        """Give it back. Raises ``dlock.NotHeld`` when the hold had been lost (another owner's
        hold is never touched; ``hold.lost`` is then True) and ``dlock.Unknown`` when the
        outcome could not be learned (the lock then ends with its lease)."""
        self._p()
        lost = self._unheld()
        rc = self._release()
        if rc == errors.by_name["ENOTHELD"].code and lost == 0:
            self._vanished()
        self._check(rc)

    def _fire_lost(self) -> None:
        # The loss monitor's thread: the hold's fd became readable. Only the event is set
        # here; on_lost runs on the callback thread, so a slow one delays no other event.
        with self._smu:
            if not self._active or self._res.ptr is None:
                return
            code = self._lost_code()
            self._watch = None
            if not code:
                return
            tell = self._tell_locked(code)
        if tell is not None:
            tell()

    # ---- loss ----

    @property
    def lost(self) -> bool:
        """True when the current (or, after release, the last) hold was lost. No I/O."""
        return self.lost_reason is not None

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the hold was lost ("the lease expired", ...), or None."""
        with self._smu:
            if self._active and self._res.ptr is not None:
                code = self._lost_code()
            else:
                code = self._lost_after
        return lost_reason_str(code) if code else None

    @property
    def lost_event(self) -> threading.Event:
        """A ``threading.Event`` set when the current hold is lost (by the loss monitor
        thread, at the moment libdlock declares the loss). A new one for each hold."""
        with self._smu:
            if self._event is None:
                self._event = threading.Event()
                if self._active and self._res.ptr is not None and self._lost_code():
                    self._event.set()
                elif self._active:
                    self._watch_locked()
                elif self._lost_after:
                    self._event.set()
            return self._event

    def fileno(self) -> int:
        """An fd readable once the current hold is lost, for selectors and poll(). Valid until
        the handle is closed (``dlock.Closed`` then); reset by the next acquire."""
        with self._smu:
            self._p()
            return self._check(self._lost_fd())

    # ---- context manager, lifetime ----

    def __enter__(self: _H) -> _H:
        return self.acquire()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._forked():
            return  # a forked child leaving the parent's block: the hold is the parent's
        lost = self._unheld()
        rc = self._release() if self._res.ptr is not None else 0
        if rc == errors.by_name["ENOTHELD"].code and lost == 0:
            lost = self._vanished()
        if exc_type is not None:
            return  # the block's own exception goes on
        if lost and not self._lost_ok:
            raise errors.by_name["ELOST"](
                f"{self._kind} '{self.name}' was lost while the block ran ({lost_reason_str(lost)}):"
                " another owner may have taken it meanwhile, so check or redo what the block did"
                " (pass lost_ok=True to handle a loss yourself, with hold.lost)")
        if rc < 0 and not (lost and rc == errors.by_name["ENOTHELD"].code):
            self._check(rc)

    def close(self) -> None:
        """Free the handle (a hold is released, best effort). Idempotent."""
        if self._forked():
            return  # the parent's (and its locks, which another thread may have held at fork)
        with self._smu:
            self._active = False
            if self._watch is not None:
                _monitor.monitor().unwatch(self._watch)
                self._watch = None
        with self._client._mu:
            self._client._holding.discard(self)
        super().close()

    def __repr__(self) -> str:
        return f"<dlock {self._kind} {self.name!r}>"


class Lock(_Holding):
    """A mutex, a semaphore's permit or one side of a read-write lock (all are driven by the
    same dlock_mutex_* calls). Use ``with`` or acquire()/release() on the same thread."""

    def __init__(self, client, kind, name, res, m, wait, on_lost, lost_ok) -> None:
        super().__init__(client, name, res, wait, on_lost, lost_ok)
        self._kind = kind
        self._m = m

    def _acquire(self, ms: int) -> int:
        return lib.dlock_mutex_acquire(self._m, ms)

    def _release(self) -> int:
        return lib.dlock_mutex_release(self._m)

    def _lost_code(self) -> int:
        return lib.dlock_mutex_lost(self._m)

    def _lost_fd(self) -> int:
        return lib.dlock_mutex_lost_fd(self._m)

    def _errmsg(self) -> str:
        return dec(lib.dlock_mutex_errmsg(self._m)) if self._res.ptr is not None else ""

    def cancel(self) -> None:
        """Make an acquire waiting on this handle in another thread raise ``dlock.Canceled``."""
        self._p()
        lib.dlock_mutex_cancel(self._m)

    @property
    def fence(self) -> int:
        """The fencing token of the current hold (0 when not held)."""
        self._p()
        return lib.dlock_mutex_fence(self._m)

    def extend(self, lease: Duration) -> None:
        """Set the remaining lease to ``lease``, only while the server still holds ours."""
        self._p()
        self._check(lib.dlock_mutex_extend(self._m, to_ms(lease, "lease")))

    def is_held(self) -> bool:
        """Ask the server whether it holds our token."""
        self._p()
        return bool(self._check(lib.dlock_mutex_is_held(self._m)))

    def remaining(self) -> float:
        """The remaining lease in seconds, as the server says (``dlock.NotHeld`` if not ours)."""
        self._p()
        ttl = c_int64()
        self._check(lib.dlock_mutex_remaining(self._m, byref(ttl)))
        return ttl.value / 1000.0

    @property
    def valid_until(self) -> float:
        """The monotonic time (``time.monotonic()``'s clock, seconds) after which the hold
        must be taken as lost even without news from the server; 0 when not held."""
        self._p()
        return lib.dlock_mutex_valid_until(self._m) / 1000.0


class MultiLock(_Holding):
    """Several names, all or nothing (docs/multilock.md). One fence per name: ``fences``."""

    _kind = "multi-lock"

    def __init__(self, client, names, res, wait, on_lost, lost_ok) -> None:
        super().__init__(client, ",".join(names), res, wait, on_lost, lost_ok)
        self.names = names

    def _acquire(self, ms: int) -> int:
        return lib.dlock_multi_acquire(self._res.ptr, ms)

    def _release(self) -> int:
        return lib.dlock_multi_release(self._res.ptr)

    def _lost_code(self) -> int:
        return lib.dlock_multi_lost(self._res.ptr)

    def _lost_fd(self) -> int:
        return lib.dlock_multi_lost_fd(self._res.ptr)

    def _errmsg(self) -> str:
        return dec(lib.dlock_multi_errmsg(self._res.ptr)) if self._res.ptr is not None else ""

    def cancel(self) -> None:
        lib.dlock_multi_cancel(self._p())

    @property
    def fences(self) -> List[int]:
        """The fence of each name, in the order given (0 when not held)."""
        p = self._p()
        return [lib.dlock_multi_fence(p, i) for i in range(len(self.names))]

    def extend(self, lease: Duration) -> None:
        self._check(lib.dlock_multi_extend(self._p(), to_ms(lease, "lease")))

    @property
    def valid_until(self) -> float:
        """As :attr:`Lock.valid_until`: the earliest deadline of the names (0 when not held)."""
        return lib.dlock_multi_valid_until(self._p()) / 1000.0


class Election(_Holding):
    """A candidate in an election: leadership is a hold of the mutex ``name``, with its lease,
    loss signals and FIFO hand-off; ``epoch`` is the term's fence (docs/election.md)."""

    _kind = "election"

    def __init__(self, client, name, value, res, wait, on_lost, lost_ok) -> None:
        super().__init__(client, name, res, wait, on_lost, lost_ok)
        self.value = value

    def campaign(self, value: Optional[str] = None, wait: Optional[Duration] = _UNSET):  # type: ignore[assignment]
        """Stand, waiting up to ``wait`` until this candidate leads (``dlock.Busy`` if another
        led all along). ``value`` None: the election's value."""
        if value is not None:
            self.value = value
        return self.acquire(wait)

    def _acquire(self, ms: int) -> int:
        return lib.dlock_election_campaign(self._res.ptr, enc(self.value, "election value"), ms)

    def _release(self) -> int:
        return lib.dlock_election_resign(self._res.ptr)

    def _lost_code(self) -> int:
        return lib.dlock_election_lost(self._res.ptr)

    def _lost_fd(self) -> int:
        return lib.dlock_election_lost_fd(self._res.ptr)

    def _errmsg(self) -> str:
        return dec(lib.dlock_election_errmsg(self._res.ptr)) if self._res.ptr is not None else ""

    def resign(self) -> None:
        """Step down: the next candidate leads at once."""
        self.release()

    def cancel(self) -> None:
        lib.dlock_election_cancel(self._p())

    def proclaim(self, value: str) -> None:
        """Change the leader's value, keeping the term."""
        self._check(lib.dlock_election_proclaim(self._p(), enc(value, "election value")))
        self.value = value

    @property
    def epoch(self) -> int:
        """This term's epoch (its fence); 0 when not leading."""
        return lib.dlock_election_epoch(self._p())

    fence = epoch

    @property
    def valid_until(self) -> float:
        """As :attr:`Lock.valid_until`: the local deadline of the term (0 when not leading)."""
        return lib.dlock_election_valid_until(self._p()) / 1000.0


class Latch(_Owned):
    """A countdown latch (docs/latch.md): no lease, fence or loss; it only counts."""

    _kind = "latch"

    def _check(self, rc: int) -> int:
        return errors.check(rc, lambda: dec(lib.dlock_latch_errmsg(self._res.ptr)))

    def set(self, count: int, expire: Duration) -> None:
        """Start counting down from ``count``; the latch expires after ``expire`` whatever."""
        self._check(lib.dlock_latch_set(self._p(), count, to_ms(expire, "expire")))

    def count_down(self) -> int:
        """Count down by one; returns what is left."""
        left = c_int64()
        self._check(lib.dlock_latch_count_down(self._p(), byref(left)))
        return left.value

    @property
    def count(self) -> int:
        c = c_int64()
        self._check(lib.dlock_latch_count(self._p(), byref(c)))
        return c.value

    def wait(self, wait: Optional[Duration] = None) -> None:
        """Wait until the count is zero (None: without limit); ``dlock.Busy`` at the end of
        the wait, ``dlock.NoLatch`` if it does not exist or expired."""
        self._check(lib.dlock_latch_wait(self._p(), to_ms(wait, "wait", forever_ok=True)))

    def cancel(self) -> None:
        lib.dlock_latch_cancel(self._p())


class _Waker:
    """A pipe that wakes the threads waiting in an Observer's next() when it is freed (by its
    close() or the client's). Closed only when neither the handle nor its _Res needs it."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)

    def __call__(self) -> None:
        try:
            os.write(self.w, b"x")  # never read: readable for good, every waiter wakes
        except BlockingIOError:
            pass

    def __del__(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except Exception:
                pass


class Observer(_Owned):
    """Changes of an election's leader, queued in order by libdlock's observer thread. The
    first one is the state found at the start. ``next(timeout)`` gives the oldest (a
    :class:`Leader`, or None for "no leader"); iterate to wait for each in turn; ``fileno()``
    is readable while changes are queued (selectors, ``loop.add_reader``). Closing it (or
    its client) from another thread ends a waiting next() with ``dlock.Closed``."""

    _kind = "observer"

    def __init__(self, client: "Client", name: str, res: _Res) -> None:
        super().__init__(client, name, res)
        self._waker = res.wake = _Waker()

    def fileno(self) -> int:
        with self._res.mu:
            return errors.check(lib.dlock_observer_fd(self._p()))

    def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The oldest queued change, waiting up to ``timeout`` seconds (None: without limit)
        for one; ``dlock.Busy`` when none came."""
        busy = errors.by_name["EBUSY"]
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0)
        o = _lib.Leader()
        while True:
            with self._res.mu:  # the free waits for the call; a closed one raises Closed
                p = self._p()
                lib.dlock_leader_init(byref(o))
                rc = lib.dlock_observer_next(p, byref(o))
                left = None if deadline is None else deadline - time.monotonic()
                if rc != busy.code or (left is not None and left <= 0):
                    msg = dec(lib.dlock_observer_errmsg(p)) if rc < 0 else ""
                    break
                fd = os.dup(lib.dlock_observer_fd(p))  # ours: valid whatever the free does
            try:
                poll = select.poll()  # not select(): fds above 1023 work
                poll.register(fd, select.POLLIN)
                poll.register(self._waker.r, select.POLLIN)
                poll.poll(None if left is None else max(1, int(left * 1000)))
            finally:
                os.close(fd)
        if rc == busy.code:
            raise busy(f"no change of the leader of '{self.name}' came in {timeout} s ({msg})")
        errors.check(rc, lambda: msg)
        return Leader._of(o)

    def __iter__(self):
        while True:
            yield self.next()
