"""The loss monitor: one Python thread per process that waits on the loss fds of the holds
whose loss someone asked to hear of (``lost_event``, ``on_lost``), and tells them.

libdlock's own on_lost callback runs on the client's watchdog thread, a C thread; the binding
never gives it one. It reads the loss from the hold's fd instead (an eventfd that becomes
readable at the loss, at the same moment as the C callback would run), so Python code never
runs on a libdlock thread, and a slow callback delays no renewal. The callbacks run one after
the other on a second thread (dlock-loss-callbacks): a slow one delays the next callbacks, but
no hold's ``lost_event``, ``lost`` or fd.

Each watched fd is a dup() of the hold's fd, closed by this thread only once it is no longer
polled: a hold released and freed meanwhile can neither make the thread poll a closed fd nor
one whose number was given to another file.
"""
from __future__ import annotations

import os
import queue
import select
import sys
import threading
import time
import weakref
from typing import Dict, List, Optional


class _Monitor:
    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._watched: Dict[int, object] = {}
        self._closing: List[int] = []
        self._thread: Optional[threading.Thread] = None
        self._calls: "queue.SimpleQueue" = queue.SimpleQueue()
        self._caller: Optional[threading.Thread] = None
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def watch(self, target, fd: int) -> int:
        """Poll a dup of ``fd``; call ``target._fire_lost()`` once when it is readable.
        Returns a key for unwatch()."""
        dfd = os.dup(fd)
        with self._mu:
            # A weak reference: a handle dropped while watched is still collected (its
            # finalizer unwatches it).
            self._watched[dfd] = weakref.ref(target)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-loss-monitor",
                                                daemon=True)
                self._thread.start()
        self._wake()
        return dfd

    def call_soon(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the callback thread (after the ones queued before)."""
        with self._mu:
            if self._caller is None:
                self._caller = threading.Thread(target=self._call_loop, name="dlock-loss-callbacks",
                                                daemon=True)
                self._caller.start()
        self._calls.put((fn, args))

    def _call_loop(self) -> None:
        while True:
            fn, args = self._calls.get()
            try:
                fn(*args)
            except BaseException:  # a callback's failure must not stop the others
                sys.excepthook(*sys.exc_info())
            del fn, args

    def unwatch(self, key: int) -> None:
        with self._mu:
            if self._watched.pop(key, None) is None:
                return
            self._closing.append(key)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: the thread wakes anyway

    def _run(self) -> None:
        while True:
            try:
                self._step()
            except BaseException:  # reported; the monitor goes on (holds depend on it)
                sys.excepthook(*sys.exc_info())
                time.sleep(0.1)

    def _step(self) -> None:
        """One poll: close what was unwatched, wait, tell the holds whose fd fired."""
        with self._mu:
            for fd in self._closing:
                os.close(fd)
            self._closing.clear()
            fds = list(self._watched)
        p = select.poll()
        p.register(self._r, select.POLLIN)
        for fd in fds:
            p.register(fd, select.POLLIN)
        try:
            ready = p.poll()
        except InterruptedError:
            return
        fired = []
        with self._mu:
            for fd, _ in ready:
                if fd == self._r:
                    try:
                        while os.read(self._r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                ref = self._watched.pop(fd, None)
                if ref is not None:
                    self._closing.append(fd)
                    target = ref()
                    if target is not None:
                        fired.append(target)
        for target in fired:
            try:
                target._fire_lost()
            except BaseException:  # a callback's failure must not stop the monitor
                sys.excepthook(*sys.exc_info())


_monitor: Optional[_Monitor] = None
_monitor_mu = threading.Lock()


def monitor() -> _Monitor:
    global _monitor
    with _monitor_mu:
        if _monitor is None:
            _monitor = _Monitor()
        return _monitor


def _after_fork_in_child() -> None:
    # The thread did not survive the fork; the child starts its own when it needs one.
    global _monitor, _monitor_mu
    _monitor = None
    _monitor_mu = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
