"""asyncio: ``async with client.alock(name, wait=5) as hold:``.

libdlock's waits are blocking C calls, and a lock is released by the thread that took it. So
each AsyncLock runs its acquire and its release on one thread of its own (a one-worker
executor), and the event loop only awaits them: the loop never blocks. Cancelling the
awaiting task cancels the C wait itself (dlock_mutex_cancel): the waiter leaves the server's
queue, and a hold won at that very moment is released before CancelledError goes on.

One AsyncLock may be shared by the tasks of a loop, as an ``asyncio.Lock``: they take it one
at a time (an asyncio.Lock inside is held from acquire to release), since libdlock would
count the second task's acquire on the same worker thread as a reentrant hold. So a task
must not take the same AsyncLock twice (it would wait for itself).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Optional

from .client import _UNSET, Lock
from ._util import Duration


class AsyncLock:
    """An asyncio face of a :class:`dlock.Lock` (same name, lease, loss rules)."""

    def __init__(self, lock: Lock) -> None:
        self.lock = lock
        self._ex: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._gate = asyncio.Lock()  # one task at a time, from acquire to release

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._ex is None:
            self._ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dlock-alock")
        return self._ex

    def _done(self) -> None:
        ex, self._ex = self._ex, None
        if ex is not None:
            ex.shutdown(wait=False)

    async def acquire(self, wait: Optional[Duration] = _UNSET) -> Lock:  # type: ignore[assignment]
        """Take the lock without blocking the loop; ``dlock.Busy`` when the wait ends."""
        await self._gate.acquire()
        try:
            loop = asyncio.get_running_loop()
            ex = self._executor()
            fut = loop.run_in_executor(ex, self.lock.acquire, wait)
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                await self._cancel_wait(fut)
                raise
            except BaseException:
                self._done()
                raise
        except BaseException:
            self._gate.release()
            raise
        return self.lock

    async def _cancel_wait(self, fut: "asyncio.Future") -> None:
        # A cancel reaches only a wait already begun: repeat it until the acquire returns.
        while not fut.done():
            self.lock.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(fut), 0.2)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
            except BaseException:
                break
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            # Won at the moment of the cancel: give it back on its own thread.
            loop = asyncio.get_running_loop()
            try:
                await asyncio.shield(loop.run_in_executor(self._ex, self.lock.release))
            except BaseException:
                pass
        self._done()

    async def release(self) -> None:
        """Give the lock back (on the thread that took it)."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor(), self.lock.release)
        finally:
            self._done()
            self._open_gate()

    def _open_gate(self) -> None:
        if self._gate.locked():
            self._gate.release()

    async def __aenter__(self) -> Lock:
        return await self.acquire()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.shield(loop.run_in_executor(self._executor(), self.lock.__exit__,
                                                      exc_type, exc, tb))
        finally:
            self._done()
            self._open_gate()

    async def wait_lost(self) -> str:
        """Wait, without blocking the loop, until the current hold is lost; returns why.
        Several tasks may wait at once (each on its own dup of the loss fd)."""
        loop = asyncio.get_running_loop()
        ev = asyncio.Event()
        fd = os.dup(self.lock.fileno())  # a loop has one reader per fd: each waiter its own
        try:
            loop.add_reader(fd, ev.set)
            try:
                await ev.wait()
            finally:
                loop.remove_reader(fd)
        finally:
            os.close(fd)
        return self.lock.lost_reason or ""
