"""The binding's lifetimes, races and argument checks: the findings of its adversarial review
(issue 29), each kept as the test that reproduced it. Each test names its severity and the
promise it checks (python/README.md); they use conftest's private redis-server."""
from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dlock

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # python/: where `import dlock` finds the package


@pytest.fixture
def url(redis_server):
    """The URL of conftest's redis-server."""
    return redis_server.url


def _child_env() -> dict:
    """The environment for a child python3 running the binding: this one's, with PYTHONPATH
    at the package, and the preloads this process was started with (the ASan run preloads
    libasan.so; the environment the tests see may have dropped it for the servers)."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        with open("/proc/self/environ", "rb") as f:
            start = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        start = {}
    for k in ("LD_PRELOAD", "ASAN_OPTIONS"):
        if k not in env and k.encode() in start:
            env[k] = start[k.encode()].decode()
    return env


def _died(p: subprocess.CompletedProcess) -> str:
    """How a child python3 ended: its status, and the sanitizer's or Python's last word."""
    how = (f"signal {signal.Signals(-p.returncode).name}" if p.returncode < 0
           else f"exit status {p.returncode}")
    lines = p.stderr.strip().splitlines()
    said = [ln for ln in lines if "ERROR: AddressSanitizer" in ln or ln.startswith("SUMMARY:")]
    return f"{how}; stdout {p.stdout.strip()!r}; stderr {' | '.join(said or lines[-3:])!r}"


def _wait_child(pid: int, seconds: float = 30.0) -> int:
    """waitpid with a deadline; a child still running then is killed (by its PID)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"child process {pid} hung for {seconds} s (killed)")


# ---- HIGH: a forked child releases the parent's lock ----

def test_fork_child_leaving_with_block_keeps_parents_lock(any_url):
    """HIGH (two holders). Promise: "The child never frees or releases anything of the
    parent's ... so the parent's holds go on." The usual daemon idiom, fork() inside a
    `with` and sys.exit() in the child, unwinds the child's copy of the block: __exit__
    calls dlock_mutex_release() without the fork check the other verbs make (_p()), on the
    parent's connection, and the server deletes the parent's key. Another client then takes
    the lock while the parent is still inside its block. (An Election's `with` resigns the
    parent's leadership the same way; PostgreSQL loses the lock the same way; on ZooKeeper the
    child hangs in the release instead.)
    Fix: _Holding.__exit__ (and close) return at once when the client's fork generation is
    not the current one, touching neither libdlock nor the handle's state."""
    url = any_url
    parent = os.getpid()
    client = dlock.Client(url)
    other = dlock.Client(url)
    try:
        with client.lock("review29:fork", wait=5, lost_ok=True) as hold:
            pid = os.fork()
            if pid == 0:
                sys.exit(0)  # the child leaves the block (caught below, then os._exit)
            _wait_child(pid)
            rival = other.lock("review29:fork")
            taken = rival.try_acquire()
            if taken:
                rival.release()
            assert not taken, ("another client took the lock while the parent was still in "
                               "its `with` block: the forked child released the parent's lock")
            assert hold.is_held(), "the server no longer has the parent's hold"
    except SystemExit:
        if os.getpid() != parent:
            os._exit(0)
        raise
    finally:
        if os.getpid() != parent:
            os._exit(1)
        other.close()
        client.close()


# ---- HIGH: a job that stops itself crashes the interpreter ----

def test_job_stopping_itself_does_not_crash(url):
    """HIGH (crash). Promise: jobs run "until job.stop(), the client's close, or the
    interpreter's exit", and Python code may call back into the client. A job that stops
    itself (run once, or stop on a condition) calls job.stop() on its scheduler worker
    thread: dlock_sched_free() then joins that very thread (EDEADLK, ignored) and frees the
    scheduler under the running worker: the process dies of SIGSEGV. client.close() from a
    job does the same.
    Fix: Job.stop() (and Client.close()) called on one of the scheduler's own worker threads
    only stops the ticks (dlock_sched_stop with 0) and defers the free to another thread
    (or refuses with a clear error); the C side could refuse dlock_sched_free from a worker."""
    code = textwrap.dedent(f"""
        import os, sys, threading, time
        import dlock
        ran = threading.Event()
        c = dlock.Client({url!r})
        def once(tick):
            ran.set()
            job.stop()            # stop after the first run
        job = c.every(0.2, once, name="review29:selfstop")
        if not ran.wait(20):
            print("the job never ran"); sys.exit(3)
        time.sleep(0.3)           # the deferred free runs meanwhile
        c.close()
        print("survived")
    """)
    env = _child_env()
    p = subprocess.run([sys.executable, "-c", code], cwd=PKG_ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "survived" in p.stdout, (
        f"a job calling job.stop() on itself: {_died(p)}")


# ---- HIGH: one AsyncLock shared by two tasks lets both in ----

def test_shared_alock_excludes_tasks(url):
    """HIGH (two holders). Promise: `async with client.alock(...)` is dlock's lock for
    asyncio. An AsyncLock, like asyncio.Lock, is naturally shared by the tasks of one loop;
    but each AsyncLock runs every acquire on its one worker thread, where libdlock's
    per-thread reentrancy answers the second task's acquire at once ("the hold count goes
    up ... with the same fence"): both tasks are inside the critical section together, with
    one fence.
    Fix: an asyncio.Lock inside AsyncLock serializes the tasks (held from acquire to
    release), or a second concurrent acquire is refused with a clear error."""
    client = dlock.Client(url)
    try:
        al = client.alock("review29:alock-shared", wait=20)
        inside = 0
        most = 0
        fences = []

        async def task():
            nonlocal inside, most
            async with al as hold:
                inside += 1
                most = max(most, inside)
                fences.append(hold.fence)
                await asyncio.sleep(0.3)
                inside -= 1

        async def main():
            await asyncio.wait_for(asyncio.gather(task(), task()), 60)

        asyncio.run(main())
        assert most == 1, (f"{most} tasks held the AsyncLock at once (fences {fences}): "
                           "the second task's acquire was a reentrant hold of the first's")
    finally:
        client.close()


# ---- HIGH: two tasks awaiting wait_lost(): one never hears of the loss ----

def test_two_wait_lost_both_wake(url):
    """HIGH (a loss never signalled). Promise: `await al.wait_lost()` waits, without
    blocking the loop, until the current hold is lost. It registers loop.add_reader(fd,
    ev.set) on the hold's one loss fd; a second waiter (a watchdog task and the writer task,
    say) replaces the first one's reader, and the first then never wakes, though the hold
    is lost.
    Fix: one reader per AsyncLock, shared by the waiters (an asyncio.Event set by it, the
    reader removed when the last waiter leaves), or a fresh dup() of the fd per waiter."""
    client = dlock.Client(url)
    try:
        al = client.alock("review29:wait-lost", lease=1, lost_ok=True)

        async def main():
            async with al:
                waiters = [asyncio.ensure_future(al.wait_lost()) for _ in range(2)]
                done, pending = await asyncio.wait(waiters, timeout=6)
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                return len(done), len(pending)

        done, pending = asyncio.run(main())
        assert pending == 0, (f"{pending} of 2 tasks awaiting wait_lost() never woke, "
                              "though the 1 s lease ran out")
    finally:
        client.close()


# ---- HIGH/MEDIUM: a closed handle's fileno() reads freed memory ----

def _make(client, kind):
    if kind == "mutex":
        return client.lock("review29:fd-" + kind)
    if kind == "semaphore":
        return client.semaphore("review29:fd-" + kind, 2)
    if kind == "multi":
        return client.multi(["review29:fd-m1", "review29:fd-m2"])
    return client.election("review29:fd-" + kind, "me")


@pytest.mark.parametrize("kind", ["mutex", "semaphore", "multi", "election"])
def test_fileno_after_close_raises_closed(url, kind):
    """HIGH for mutex/semaphore (use after free), MEDIUM for multi/election (wrong error).
    Promise: "hold.fileno(): the loss fd ... Valid until the handle is closed", and a
    closed handle raises dlock.Closed. fileno() skips the _p() check every other verb makes:
    on a closed mutex or semaphore it calls dlock_mutex_lost_fd() on the freed handle (ASan:
    heap-use-after-free; without ASan it answers the stale fd number, which may by then be
    another file's, for a selector to poll); on a closed multi-lock it passes NULL and
    raises dlock.InvalidArgument "handle is NULL", on a closed election dlock.Busy "lock is
    held by another owner" (dlock_election_lost_fd(NULL) answers -1, which is EBUSY's code).
    AsyncLock.wait_lost() goes through it too.
    Fix: fileno() calls self._p() first, as fence and extend() do."""
    client = dlock.Client(url)
    try:
        h = _make(client, kind)
        h.acquire(5)
        h.fileno()
        h.close()
        try:
            got = h.fileno()
        except dlock.Closed:
            got = "Closed"
        except dlock.Error as e:
            got = f"{type(e).__name__}: {e}"
        assert got == "Closed", f"fileno() of a closed {kind} answered {got!r}, not dlock.Closed"
    finally:
        client.close()


# ---- HIGH: leaving a `with` block after the client's close reads a freed handle ----

def test_with_exit_after_client_close_touches_no_freed_handle(url):
    """HIGH (use after free). Promise: "Handles are freed once, in any order: by with,
    close(), the client's close() ...". Closing the client inside a lock's `with` block (a
    shutdown path, or `with Client() as c:` exited through a nested helper, or an on_lost
    callback that closes the client) frees the mutex; the block's end then calls
    dlock_mutex_lost() on the freed pointer (__exit__ -> _unheld(), which does not look at
    res.ptr). ASan: heap-use-after-free in dlock_mutex_lost (mutex.c:215).
    Fix: _unheld() reads the loss only while self._res.ptr is not None (under the same lock
    _free() takes), as lost_reason does."""
    client = dlock.Client(url)
    try:
        with client.lock("review29:with-close", wait=5):
            client.close()
    except dlock.Closed:
        pass  # refusing is fine; touching the freed handle is not


# ---- HIGH: a hold whose handle is dropped ends at once, silently ----

def test_acquire_on_a_discarded_handle_keeps_the_lock(url):
    """HIGH (silent loss; by design today, but nothing says so). Promise (API table):
    `acquire(wait)` / `release()`, and redis-py's `r.lock(n).acquire()` idiom, which holds
    the key until released or expired. `client.lock("job:nightly").acquire(5)` (result not
    kept, as in the side-by-side's kazoo column) drops the last reference to the handle when
    the statement ends: __del__ frees it and releases the lock at once, with no warning, while
    the script goes on believing it holds it: another client takes it straight away.
    Fix: while held, a handle is kept alive by its client (a strong reference taken in _held()
    and dropped in _unheld()/close()), so that only release(), close() or the client's close()
    end a hold; or, at the least, a ResourceWarning when the GC frees a held handle and a
    sentence in the README's safety model."""
    import gc
    import warnings
    a = dlock.Client(url)
    b = dlock.Client(url)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a.lock("review29:discarded").acquire(5)  # the script now believes it holds it
            gc.collect()
        warned = any(issubclass(w.category, ResourceWarning) for w in caught)
        rival = b.lock("review29:discarded")
        taken = rival.try_acquire()
        if taken:
            rival.release()
        assert warned or not taken, ("the hold ended when its handle was dropped, without a "
                                     "warning: another client took the lock at once")
    finally:
        b.close()
        a.close()


# ---- HIGH: two threads closing one client crash the process ----

def test_two_threads_closing_one_client_do_not_crash(url):
    """HIGH (crash). Promise: Client.close() "Idempotent"; "Handles are freed once, in any
    order". Two threads that close a shared client at once (a worker's `finally` and the main
    thread's shutdown) both pass the `self._ptr is None` check while the first frees the
    handles (releases: round trips), and both call dlock_client_free() on the same pointer:
    SIGSEGV within a few tries. Run in a child process.
    Fix: Client.close() takes the pointer under self._mu (`with self._mu: ptr, self._ptr =
    self._ptr, None`) before freeing anything; the loser returns."""
    code = textwrap.dedent(f"""
        import threading
        import dlock
        for attempt in range(20):
            c = dlock.Client({url!r})
            holds = [c.lock(f"review29:close2-{{attempt}}-{{i}}") for i in range(5)]
            for h in holds:
                h.acquire(5)
            both = threading.Barrier(2)
            def closer():
                both.wait()
                c.close()
            ts = [threading.Thread(target=closer) for _ in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
        print("survived", flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=PKG_ROOT, env=_child_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "survived" in p.stdout, (
        f"two threads closing one client: {_died(p)}")


# ---- LOW: on_lost is skipped when the holder releases right after the loss ----

def test_on_lost_called_for_every_lost_hold(url):
    """LOW (a loss not reported to its callback). Promise: "on_lost=callback(hold, reason),
    called once per lost hold". The callback is run by the loss-monitor thread, which needs
    the GIL to get there; a holder that sees the loss itself (hold.lost, the `with` block's
    end) and releases first unwatches the fd, and the callback is never called for that
    hold: here about half the losses of a holder that releases as soon as hold.lost says so.
    Fix: _unheld() calls (or queues for the monitor) the callback of a hold found lost whose
    callback has not run yet."""
    client = dlock.Client(url)
    calls = []
    try:
        h = client.lock("review29:cb-every", lease=0.2, lost_ok=True,
                        on_lost=lambda hold, why: calls.append(why))
        losses = 0
        for _ in range(8):
            h.acquire(5)
            deadline = time.monotonic() + 10
            while not h.lost and time.monotonic() < deadline:
                pass  # a holder busy in Python, checking hold.lost between steps
            assert h.lost, "the 0.2 s fixed lease was never lost"
            losses += 1
            try:
                h.release()
            except dlock.NotHeld:
                pass
        deadline = time.monotonic() + 10  # the callback thread delivers them soon after
        while len(calls) < losses and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls) == losses, f"on_lost was called {len(calls)} times for {losses} lost holds"
    finally:
        client.close()


# ---- MEDIUM: Observer.next() fails in a process with more than 1024 files open ----

def test_observer_next_with_many_open_files(url):
    """MEDIUM (wrong error; observers unusable in a busy server). Promise: client.observe
    gives each change by next(timeout) or iteration. next() waits with select.select(), which
    takes only fds below FD_SETSIZE (1024): in a process with more files open (any busy
    server) the observer's fd is above it, and next() raises ValueError "filedescriptor out
    of range in select()", iteration too. (The loss monitor already uses poll().)
    Fix: wait with select.poll() (or selectors.DefaultSelector) in Observer.next()."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1300
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    fds = []
    client = dlock.Client(url)
    try:
        while len(fds) < 1100:
            fds.append(os.open(os.devnull, os.O_RDONLY))
        obs = client.observe("review29:many-fds", interval=0.1)
        assert obs.fileno() >= 1024
        try:
            obs.next(10)  # the state at the start
        except dlock.Busy:
            pass
    finally:
        client.close()
        for fd in fds:
            os.close(fd)
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---- MEDIUM: a hold lost without notice ends its block with NotHeld, not Lost ----

def test_with_block_whose_key_vanished_raises_lost(url):
    """MEDIUM (wrong error). Promise: "with raises dlock.Lost at the block's end when the
    hold was lost during the block", and hold.lost says so afterwards. When the key vanishes
    without a message to the holder (an eviction, an operator's FLUSHALL or DEL, a failover
    to a replica that never got it) and another client takes the lock meanwhile, the block
    ends with dlock.NotHeld ("another owner holds it now ...") and hold.lost is False:
    __exit__ reads the loss before the release, and the release's ENOTHELD, the only news of
    it, is raised as is. Code that catches dlock.Lost to redo its work misses it.
    Fix: in __exit__ (and release()), ENOTHELD for a hold taken at entry is a loss during
    the block: record it (_lost_after, so hold.lost is True) and raise dlock.Lost from it."""
    a = dlock.Client(url)
    b = dlock.Client(url)
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    hold = a.lock("review29:vanished", wait=5)
    try:
        with pytest.raises(dlock.Lost):
            with hold:
                with socket.create_connection((host, int(port)), 5) as s:  # DEL, as an operator
                    key = b"review29:vanished"
                    s.sendall(b"*2\r\n$3\r\nDEL\r\n$%d\r\n%s\r\n" % (len(key), key))
                    assert s.recv(16).startswith(b":1"), "the lock's key was not where expected"
                rival = b.lock("review29:vanished")
                assert rival.try_acquire(), "another client could not take the vanished lock"
                rival.release()
        assert hold.lost, "hold.lost is False after the block lost its lock"
    finally:
        b.close()
        a.close()


def test_release_without_a_hold_is_no_loss(url):
    """The other side of the finding above: a release() with nothing held (never taken, or
    released already) raises NotHeld and is no loss; nor is another thread's release."""
    client = dlock.Client(url)
    try:
        h = client.lock("review29:no-hold")
        with pytest.raises(dlock.NotHeld):
            h.release()
        assert not h.lost
        with h:
            got = []

            def other():
                try:
                    h.release()
                    got.append("released")
                except dlock.Error as e:
                    got.append(type(e).__name__)
            t = threading.Thread(target=other)
            t.start()
            t.join(30)
            assert got == ["NotHeld"], f"another thread's release of our hold: {got}"
            assert h.is_held() and not h.lost
        assert not h.lost
        with pytest.raises(dlock.NotHeld):
            h.release()
        assert not h.lost
    finally:
        client.close()


# ---- MEDIUM: a slow on_lost callback delays every other hold's lost_event ----

def test_slow_callback_does_not_delay_other_holds_lost_event(url):
    """MEDIUM (late loss signal). Promise: "hold.lost_event, a threading.Event set at the
    loss", and "a slow callback delays no renewal (only the next loss callbacks of the
    process)". One thread (dlock-loss-monitor) both sets the events and runs the callbacks,
    one after the other: while hold A's on_lost callback runs (here 4 s), hold B's
    lost_event is not set, though B's lease ran out: code that waits on B's event goes on
    writing as the holder for as long as A's callback takes.
    Fix: the monitor sets every fired hold's event first and runs the callbacks elsewhere
    (a thread per callback, or a second thread for callbacks); or the README says that a
    slow callback delays every loss signal but hold.lost and the fd."""
    client = dlock.Client(url)
    slow = threading.Event()  # set at the end: the slow callback does not outlive the test
    try:
        a = client.lock("review29:slow-cb", lease=1, lost_ok=True,
                        on_lost=lambda h, why: slow.wait(4))
        b = client.lock("review29:watched", lease=2, lost_ok=True)
        a.acquire(5)
        b.acquire(5)
        event = b.lost_event
        deadline = b.valid_until
        assert event.wait(15), "B's lost_event was never set"
        late = time.monotonic() - deadline
        assert late < 2.0, (f"B's lost_event was set {late:.1f} s after B's hold ran out: "
                            "it waited for A's slow on_lost callback")
    finally:
        slow.set()
        client.close()


# ---- HIGH: closing an observer leaves its iterating thread hung ----

def test_observer_close_ends_a_waiting_iteration(url):
    """HIGH (hang, then use after free). Promise: client.observe(name) gives each change of
    leader by next(timeout) or iteration, and "Handles are freed once, in any order: by
    with, close() ...". An Observer has no cancel(); the only way to stop a thread iterating
    it (`for leader in obs:`, next() without a timeout) is close(), and that never reaches
    the waiter: it sits in select() on the observer's fd, which close() frees under it; the
    thread hangs for good, and should the fd number be reused by a file that turns readable,
    it calls dlock_observer_next() on the freed observer. Run in a child process, so that
    the hung thread cannot touch this one's files.
    Fix: Observer.close() (or a new Observer.cancel()) wakes a waiting next() (a private pipe
    in the select) and next() checks _p() again after the select: dlock.Closed."""
    code = textwrap.dedent(f"""
        import sys, threading, time
        import dlock
        c = dlock.Client({url!r})
        obs = c.observe("review29:observed", interval=0.1)
        obs.next(10)                      # the state at the start
        out = []
        def iterate():
            try:
                for leader in obs:
                    out.append(leader)
            except dlock.Closed:
                out.append("closed")
            except BaseException as e:
                out.append(repr(e))
        t = threading.Thread(target=iterate, daemon=True)
        t.start()
        time.sleep(0.3)                   # the thread is in next(), waiting
        obs.close()
        t.join(5)
        print("alive" if t.is_alive() else "ended", out, flush=True)
        sys.stdout.flush()
        import os; os._exit(0)
    """)
    env = _child_env()
    p = subprocess.run([sys.executable, "-c", code], cwd=PKG_ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.stdout.startswith("ended ['closed']"), (
        f"a thread iterating an Observer closed by another thread: {_died(p)}")


# ---- LOW: durations that are not durations ----

def test_nan_duration_is_a_dlock_error(url):
    """LOW. Promise: "Argument errors are also ValueErrors" -- dlock exceptions (dlock.Error,
    with code, name and message) that are also ValueErrors. wait/lease = float('nan') raises a
    bare ValueError "cannot convert float NaN to integer" from int(round(nan)) in to_ms().
    Fix: to_ms() rejects NaN with dlock.OutOfRange, as it does negative and too-long values."""
    client = dlock.Client(url)
    try:
        with pytest.raises(dlock.Error):
            client.lock("review29:nan", lease=math.nan)
        h = client.lock("review29:nan")
        with pytest.raises(dlock.Error):
            h.acquire(math.nan)
    finally:
        client.close()


@pytest.mark.parametrize("lease", [0, 0.0004])
def test_zero_or_tiny_lease_is_not_an_endless_watchdog_lease(url, lease):
    """LOW. Promise: "lease=None is watchdog mode"; a duration is a fixed lease, lost at its
    end. lease=0, or any lease under half a millisecond (rounded to 0 ms), silently becomes
    watchdog mode: a lock renewed every 10 s for as long as the process lives, where the
    caller asked for one that expires at once.
    Fix: to_ms() for a lease refuses 0 (dlock.OutOfRange: "say None for watchdog mode") and
    rounds a positive lease up to at least 1 ms."""
    client = dlock.Client(url)
    try:
        try:
            h = client.lock("review29:tiny-lease", lease=lease)
        except dlock.OutOfRange:
            return  # refused: fine
        h.acquire(5)
        try:
            left = h.remaining()
        except dlock.NotHeld:
            left = 0.0  # already expired: a fixed lease indeed
        finally:
            try:
                h.release()
            except dlock.Error:
                pass
        assert left <= 1.0, (f"lease={lease!r} gave a lock with {left} s left, renewed by the "
                             "watchdog: watchdog mode, not a fixed lease")
    finally:
        client.close()


# ---- MEDIUM: an async def job never runs, and its history says "ok" ----

def test_async_job_runs_or_is_refused(url):
    """MEDIUM (silent loss of work). Promise: "the scheduler: a decorator or
    client.every(...)/client.cron(...) running a Python callable once per tick across the
    fleet". In an asyncio program the natural callable is an `async def`: every tick then
    calls it, gets a coroutine, drops it unawaited (a RuntimeWarning at best) and records the
    run as "ok". The body never runs, and the history says all is well.
    Fix: schedule() refuses a coroutine function with a TypeError (say: wrap it, e.g.
    `lambda t: asyncio.run(job(t))`), or runs it to completion (asyncio.run) on the worker
    thread; a callable that returns an awaitable is recorded as failed."""
    import warnings
    client = dlock.Client(url)
    ran = []
    job = None
    try:
        async def report(tick):
            ran.append(tick.fence)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "coroutine ... never awaited"
            try:
                job = client.every(0.2, report, name="review29:async-job")
            except TypeError:
                return  # refused at once: fine
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not client.history("review29:async-job", 1):
                time.sleep(0.1)
            time.sleep(0.5)
            job.stop(10)
            job = None
        outcomes = [r.outcome for r in client.history("review29:async-job", 5)]
        assert outcomes, "the job never ran at all"
        assert ran or all(o != "ok" for o in outcomes), (
            f"an async def job's body never ran, yet its history says {outcomes}")
    finally:
        if job is not None:
            job.stop(10)
        client.close()


# ---- LOW: MultiLock and Election lack valid_until (and more the README lists) ----

@pytest.mark.parametrize("kind", ["multi", "election"])
def test_multi_and_election_have_valid_until(url, kind):
    """LOW (doc mismatch; the deadline is a safety signal). Promise: "A handle (dlock.Lock,
    MultiLock, Election) is its own hold: ... .fence, extend(), is_held() and remaining()
    (asking the server), .valid_until". MultiLock has no .fence, is_held(), remaining() or
    .valid_until; Election no extend(), is_held(), remaining() or .valid_until, though
    libdlock offers dlock_multi_valid_until() and dlock_election_valid_until() (declared in
    _lib.py, never used): code that checks the local deadline before a write cannot.
    Fix: add valid_until to both (as Lock's, on time.monotonic()'s clock); narrow the
    README's sentence to what each class has (MultiLock: fences, extend(); Election: epoch)."""
    client = dlock.Client(url)
    try:
        h = _make(client, kind)
        with h:
            assert hasattr(h, "valid_until"), f"a {kind} handle has no valid_until"
            assert h.valid_until > time.monotonic()
    finally:
        client.close()


# ---- LOW: history(job) and non-string names ----

def test_history_takes_the_job_object(url):
    """LOW (doc mismatch). Promise (API table): "client.every(period, fn, name=) ...; job.stop(),
    client.history(job)". Passed the Job that every() returns, history() raises
    AttributeError "'Job' object has no attribute 'encode'" (enc() of a non-string).
    Fix: history() takes a Job (its .name) or a str; enc() raises a TypeError naming the
    argument for anything else (a lock name given as an int gets the same AttributeError)."""
    client = dlock.Client(url)
    job = None
    try:
        job = client.every(3600, lambda tick: None, name="review29:history-job")
        runs = client.history(job)
        assert isinstance(runs, list)
    finally:
        if job is not None:
            job.stop(10)
        client.close()


def test_non_string_name_raises_typeerror(url):
    """LOW (wrong error). A lock name that is not a str (an int id, a Path) raises
    AttributeError "'int' object has no attribute 'encode'" from deep inside the binding,
    where Python code expects a TypeError (or dlock.InvalidName, a ValueError).
    Fix: enc() raises TypeError("lock name: a str, not int") for anything but str/bytes."""
    client = dlock.Client(url)
    try:
        with pytest.raises((TypeError, dlock.Error)):
            client.lock(42)
    finally:
        client.close()


def test_name_with_nul_is_refused(url):
    """LOW (silent aliasing). dlock.h: a lock name has "no NUL, CR, LF, '{' or '}'", and the
    C library refuses the others with dlock.InvalidName. A Python str may hold "\\0": ctypes
    passes the bytes as a C string, cut at the NUL, so "job\\0A" and "job\\0B" are one lock
    "job" (list() shows "job"), and guard_check("res\\0x", ...) and ("res\\0y", ...) one
    resource (a Stale for a write to another resource).
    Fix: enc() refuses a string with a NUL (dlock.InvalidName for names, InvalidArgument
    for other strings: URL, password, owner_info, value)."""
    client = dlock.Client(url)
    try:
        with pytest.raises(dlock.InvalidName):
            client.lock("review29:nul\0A")
    finally:
        client.close()


# ---- LOW: the Busy message names no server and says nothing to do ----

def test_busy_message_names_the_server(url):
    """LOW (doc mismatch). Promise: each exception's message is "the C library's own
    message, which names the server and says what to do". The commonest one, dlock.Busy from
    acquire() / `with`, carries only "held by another owner" (or "... for the whole wait (N
    ms)"): no server, no key, no hint; NotHeld, NoLatch etc. do name '... on HOST:PORT'.
    Fix: the mutex acquire's EBUSY detail (C side) names the lock and the server, like
    release's ("acquire 'NAME' on HOST:PORT: held by another owner ...")."""
    a = dlock.Client(url)
    b = dlock.Client(url)
    try:
        held = a.lock("review29:busy-msg")
        held.acquire(5)
        server = url.split("://", 1)[1]
        with pytest.raises(dlock.Busy) as e:
            b.lock("review29:busy-msg").acquire(0)
        assert server in str(e.value), f"Busy's message {str(e.value)!r} does not name {server}"
        held.release()
    finally:
        b.close()
        a.close()


# ---- LOW: the README's test command does not run from the repository's root ----

def test_run_tests_takes_a_path_relative_to_the_callers_directory():
    """LOW (doc mismatch). Promise (python/README.md, Tests): `bash python/run_tests.sh
    build/plain/src/libdlock.so`, from the repository's root. run_tests.sh exports the path
    as DLOCK_LIB and then cd's into python/, where the relative path names nothing: every run
    stops at once with LibraryNotFound "tried build/plain/src/libdlock.so (no such file)"
    (ctest passes an absolute path, so CI never sees it).
    Fix: run_tests.sh makes the path absolute before the cd (lib=$(realpath -- "$1"))."""
    repo = os.path.dirname(PKG_ROOT)
    rel = os.path.relpath(os.path.realpath(dlock.lib_path), repo)
    if rel.startswith(".."):
        pytest.skip(f"the library in use ({dlock.lib_path}) is not inside the repository")
    env = _child_env()
    env.pop("DLOCK_LIB", None)
    env.pop("DLOCK_PG_SERVER", None)  # the child's session starts no PostgreSQL or ZooKeeper
    env.pop("DLOCK_ZK_SERVER", None)
    # Select no test: only the loading of the package (conftest) is exercised.
    env["PYTEST_ADDOPTS"] = "-k review29_selects_nothing"
    p = subprocess.run(["bash", "python/run_tests.sh", rel], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=120)
    out = p.stdout + p.stderr
    assert "cannot load libdlock" not in out and p.returncode in (0, 5), (
        f"bash python/run_tests.sh {rel} (from {repo}): exit status {p.returncode}: "
        f"{out.strip().splitlines()[-1] if out.strip() else ''}")
