"""The scheduler: a Python callable run once per tick across every process that schedules
the same job name (docs/scheduler.md). ``client.every(60, fn)``, ``client.cron(expr, fn)``,
or as decorators::

    @client.every(60)
    def report(tick):          # tick.fence, tick.scheduled (unix s), tick.node, tick.job
        ...

The callable runs on one of libdlock's scheduler worker threads (a C thread, holding no
libdlock lock while it runs; ctypes takes the GIL for it). An exception is logged (logger
"dlock") and recorded as a failed run in the job's history. Jobs run until ``job.stop()``,
the client's close, or the interpreter's exit (an atexit hook stops them before Python
finalizes, so no C thread calls into a finalizing interpreter). A job may call ``job.stop()``
or its client's ``close()`` itself: the ticks stop at once and the scheduler is freed by
another thread once the run returns.

The callable is a plain function: an ``async def`` is refused (``TypeError``; wrap it, e.g.
``lambda tick: asyncio.run(job(tick))``), and a run that returns an awaitable is recorded as
failed, since nothing would ever run it.
"""
from __future__ import annotations

import atexit
import dataclasses
import inspect
import logging
import threading
from ctypes import byref, c_void_p
from typing import Callable, List, Optional

from . import _lib, errors
from ._lib import lib
from ._util import dec, enc, enc_name, to_ms

log = logging.getLogger("dlock")
_running: "set[Job]" = set()
_running_mu = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Tick:
    """The tick a job runs: its scheduled time (unix seconds), the run's fence, this node."""
    job: str
    scheduled: float
    fence: int
    node: str


@dataclasses.dataclass(frozen=True)
class Run:
    """One entry of a job's history (newest first)."""
    node: str
    fence: int
    scheduled: float
    start: float
    duration: Optional[float]
    outcome: str


class Job:
    """A scheduled job; ``stop()`` ends it (waiting up to ``timeout`` for a run going on)."""

    def __init__(self, client, name: str, fn: Callable[[Tick], object]) -> None:
        self.client = client
        self.name = name
        self.fn = fn
        self._cb = _lib.JOB_FN(self._run)  # kept alive as long as the C side may call it
        self._res = None
        self._workers: "set[int]" = set()  # the scheduler's threads running fn now

    def _run(self, tick_p, _arg) -> int:
        t = tick_p.contents
        tick = Tick(dec(t.job), t.scheduled_unix_ms / 1000.0, t.fence, dec(t.node))
        me = threading.get_ident()
        self._workers.add(me)
        try:
            rc = self.fn(tick)
        except BaseException:
            log.exception("dlock: job %r failed (fence %d)", self.name, tick.fence)
            return 1
        finally:
            self._workers.discard(me)
        if inspect.isawaitable(rc):
            if inspect.iscoroutine(rc):
                rc.close()  # never awaited: no RuntimeWarning, no half-run body
            log.error("dlock: job %r returned an awaitable, which nothing runs (fence %d): "
                      "schedule a plain function (e.g. lambda tick: asyncio.run(job(tick)))",
                      self.name, tick.fence)
            return 1
        return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0

    def __call__(self, tick: Tick):
        return self.fn(tick)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop firing ticks; wait for a running one up to ``timeout`` s (None: without
        limit; ``dlock.TimedOut`` if it still runs then), and free the scheduler. Called by
        the job itself, it stops the ticks and returns at once; the scheduler is freed by
        another thread when the run ends."""
        with _running_mu:
            _running.discard(self)
        res = self._res
        if res is None or res.ptr is None:
            return
        if threading.get_ident() in self._workers:
            # On one of the scheduler's own threads: its free would join this very thread.
            lib.dlock_sched_stop(res.ptr, 0)  # the ticks stop; this run is still going (ETIMEDOUT)
            threading.Thread(target=self.client._free, args=(res,), name="dlock-job-stop").start()
            return
        if timeout is not None:
            errors.check(lib.dlock_sched_stop(res.ptr, to_ms(timeout, "timeout")))
        self.client._free(res)

    def history(self, limit: int = 20) -> List[Run]:
        return history(self.client, self.name, limit)


def schedule(client, how: str, spec, fn, name, kw):
    if fn is None:
        return lambda f: schedule(client, how, spec, f, name, kw)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        raise TypeError(f"job {name or fn.__qualname__!r}: an async def is not run by the scheduler "
                        "(its worker threads have no event loop): schedule a plain function, "
                        "e.g. lambda tick: asyncio.run(job(tick))")
    job_name = name or f"{fn.__module__}.{fn.__qualname__}"
    so = _lib.SchedOptions()
    lib.dlock_sched_options_init(byref(so))
    so.pool_size = kw.pop("pool_size", 0)
    so.node_name = enc(kw.pop("node_name", None), "node_name")
    jo = _lib.JobOptions()
    lib.dlock_job_options_init(byref(jo))
    jo.lock_at_most_for_ms = to_ms(kw.pop("lock_at_most_for", None), "lock_at_most_for")
    jo.lock_at_least_for_ms = to_ms(kw.pop("lock_at_least_for", None), "lock_at_least_for")
    jo.allow_overlap = 1 if kw.pop("allow_overlap", False) else 0
    jo.time_zone = enc(kw.pop("tz", None), "tz")
    jo.cron_flags = 1 if kw.pop("unix", False) else 0
    jo.history_len = kw.pop("history_len", 0)
    fixed_delay = kw.pop("fixed_delay", False)
    if kw:
        raise TypeError(f"unexpected options: {', '.join(kw)}")
    job = Job(client, job_name, fn)
    out = c_void_p()
    errors.check(lib.dlock_sched_new(byref(out), client._p(), byref(so)))
    res = client._own(out.value, lib.dlock_sched_free)
    res.workers = job._workers
    try:
        if how == "cron":
            rc = lib.dlock_sched_add_cron(res.ptr, enc_name(job_name, "job name"), enc(spec, "cron expression"), byref(jo), job._cb, None)
        elif fixed_delay:
            rc = lib.dlock_sched_add_fixed_delay(res.ptr, enc_name(job_name, "job name"), to_ms(spec, "delay"),
                                                 byref(jo), job._cb, None)
        else:
            rc = lib.dlock_sched_add_fixed_rate(res.ptr, enc_name(job_name, "job name"), to_ms(spec, "period"),
                                                byref(jo), job._cb, None)
        errors.check(rc)
        errors.check(lib.dlock_sched_start(res.ptr))
    except BaseException:
        client._free(res)
        raise
    job._res = res
    with _running_mu:
        _running.add(job)
    return job


def history(client, job, limit: int) -> List[Run]:
    if isinstance(job, Job):
        job = job.name
    recs = (_lib.RunRecord * max(limit, 1))()
    for r in recs:
        lib.dlock_run_record_init(byref(r))
    n = errors.check(lib.dlock_sched_history(client._p(), enc_name(job, "job name"), recs, limit))
    return [Run(dec(r.node), r.fence, r.scheduled_unix_ms / 1000.0, r.start_unix_ms / 1000.0,
                None if r.duration_ms < 0 else r.duration_ms / 1000.0, dec(r.outcome))
            for r in recs[:n]]


@atexit.register
def _stop_all() -> None:
    with _running_mu:
        jobs = list(_running)
    for j in jobs:
        try:
            j.stop()
        except Exception:
            pass
