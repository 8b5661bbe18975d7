"""Mutex, semaphore, read-write lock, multi-lock, latch, election, guard and status through
the binding, on a private redis-server."""
import gc
import selectors
import threading
import time

import pytest

import dlock


def test_with_gives_a_hold_with_a_fence_and_excludes(client, name):
    with client.lock(name, wait=5) as hold:
        assert hold.fence > 0 and not hold.lost and hold.lost_reason is None
        assert hold.is_held() and 0 < hold.remaining() <= 30
        hold.extend("1m")
        assert 30 < hold.remaining() <= 60
        with pytest.raises(dlock.Busy) as e:
            client.lock(name).acquire(wait=0)
        assert e.value.message
        assert not client.lock(name).try_acquire()
        first = hold.fence
    with client.lock(name, wait=0) as hold:
        assert hold.fence > first
    assert not client.status(name).held


def test_a_wait_ends_with_busy_after_its_time(client, name):
    with client.lock(name):
        t0 = time.monotonic()
        with pytest.raises(dlock.Busy):
            client.lock(name, wait=0.3).acquire()
        assert time.monotonic() - t0 >= 0.25


def test_a_fixed_lease_lost_during_the_block_raises_lost_at_its_end(client, name):
    with pytest.raises(dlock.Lost) as e:
        with client.lock(name, lease=0.3) as hold:
            assert hold.lost_event.wait(10)
    assert "lost" in str(e.value) and name in str(e.value)
    assert hold.lost and hold.lost_reason  # kept after the release


def test_lost_ok_and_on_lost_callback_from_the_monitor_thread(client, name):
    seen = []
    done = threading.Event()

    def on_lost(h, reason):
        seen.append((h, reason, threading.current_thread().name))
        done.set()

    with client.lock(name, lease=0.3, on_lost=on_lost, lost_ok=True) as hold:
        assert done.wait(10)
        assert hold.lost_event.is_set()  # asked for after the loss: set at once
    assert seen[0][0] is hold and seen[0][1] == hold.lost_reason
    assert seen[0][2] == "dlock-loss-callbacks"  # the binding's thread, not libdlock's


def test_fileno_works_with_selectors(client, name):
    with client.lock(name, lease=0.3, lost_ok=True) as hold:
        sel = selectors.DefaultSelector()
        sel.register(hold, selectors.EVENT_READ)
        assert sel.select(timeout=0) == []
        assert len(sel.select(timeout=10)) == 1
        sel.close()


def test_a_forced_release_is_told_to_the_holder(client, name):
    with client.lock(name, watchdog_lease=1.5, lost_ok=True) as hold:
        ev = hold.lost_event
        assert client.force_release(name)
        assert ev.wait(10)
        assert "deleted" in hold.lost_reason or "release" in hold.lost_reason


def test_the_block_s_own_exception_goes_on_and_the_lock_is_released(client, name):
    with pytest.raises(KeyError):
        with client.lock(name):
            raise KeyError("x")
    assert client.lock(name).try_acquire()


def test_handles_freed_by_the_gc_and_by_close_release_their_locks(redis_server, name):
    c = dlock.Client(redis_server.url)
    for i in range(50):
        h = c.lock(f"{name}:{i}")
        h.acquire()
        h.lost_event  # watched by the monitor while freed
    del h
    gc.collect()
    # A dropped handle that holds keeps its lock (as redis-py's r.lock(n).acquire() does)...
    assert len(c.list(name + ":*")) == 50
    for i in range(50):
        h = c.lock(f"{name}:{i}:free")
        h.acquire()
        h.release()
        h.lost_event
    del h
    gc.collect()  # ...and one that does not is freed by the GC
    with c._mu:
        assert len(c._res) <= 51  # the 50 holds (and h's last one, if not collected yet)
    held = c.lock(name)
    held.acquire()
    cyc = c.lock(name + ":cycle")
    cyc.acquire()
    cyc.me = cyc  # a cycle: the GC frees it in any order with the client
    c.close()
    c.close()  # idempotent
    with pytest.raises(dlock.Closed):
        held.fence
    with dlock.Client(redis_server.url) as c2:
        h2 = c2.lock(name)
        assert h2.try_acquire()
        h2.release()
        assert c2.list(name + "*") == []  # the client's close released the 50 dropped holds
    del cyc, held, c
    gc.collect()


def test_a_handle_shared_by_threads_waits_locally_and_is_reentrant(client, name):
    h = client.lock(name)
    with h:
        with h:  # reentrant on the holding thread
            assert h.fence > 0
        out = []

        def other():
            out.append(h.try_acquire())
            try:
                h.release()  # not this thread's hold
            except dlock.NotHeld as e:
                out.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        assert out[0] is False and "this thread does not hold it" in out[1]
        assert h.lost_event is not None and h.fence > 0 and h.is_held()
    assert not client.status(name).held


def test_semaphore(client, name):
    a = client.semaphore(name, 2)
    b = client.semaphore(name, 2)
    c = client.semaphore(name, 2)
    with a, b:
        assert a.fence and b.fence and a.fence != b.fence
        assert not c.try_acquire()
        st = client.status(name)
        assert st.permits == 2 and st.permits_used == 2
    assert c.try_acquire()
    c.release()
    with pytest.raises(dlock.LimitMismatch):
        with c, client.semaphore(name, 3, wait=0):
            pass


def test_rwlock(client, name):
    r1, r2 = client.read_lock(name), client.read_lock(name)
    w = client.write_lock(name, wait=0)
    with r1:
        with pytest.raises(dlock.UpgradeRefused) as e:
            w.acquire()  # this thread reads: its write would wait for itself
        assert "release the read side first" in str(e.value)
        out = []

        def other():
            with r2:  # a second reader, on another thread
                out.append(client.status(name).readers)
            out.append(w.try_acquire())

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        assert out == [2, False]
    assert w.try_acquire()
    w.release()
    with pytest.raises(dlock.InvalidArgument):
        client.rwlock(name, "both")


def test_multi_lock(client, name):
    names = [name + ":b", name + ":a"]
    with client.multi(names, wait=5) as m:
        assert all(f > 0 for f in m.fences)
        assert not client.lock(name + ":a").try_acquire()
    with client.lock(name + ":b"):
        with pytest.raises(dlock.Busy) as e:
            client.multi(names, wait=0).acquire()
        assert name + ":b" in str(e.value)
    assert client.lock(name + ":a").try_acquire()


def test_latch(client, name):
    la = client.latch(name)
    with pytest.raises(dlock.NoLatch):
        la.count_down()
    la.set(2, 30)
    assert la.count == 2
    with pytest.raises(dlock.Busy):
        la.wait(0)
    t = threading.Thread(target=lambda: (la.count_down(), la.count_down()))
    w = client.latch(name)
    t.start()
    w.wait(10)
    t.join(10)
    assert la.count == 0


def test_election_and_leader(client, name):
    assert client.leader(name) is None
    with client.election(name, "node-a", wait=5) as e:
        assert e.epoch > 0
        ld = client.leader(name)
        assert ld.value == "node-a" and ld.epoch == e.epoch
        with pytest.raises(dlock.Busy):
            client.election(name, "node-b").campaign(wait=0)
        e.proclaim("node-a2")
        assert client.leader(name).value == "node-a2"
    assert client.leader(name) is None


def test_an_observer_sees_each_change_of_leader(client, name):
    with client.observe(name, interval=0.05) as obs:
        assert obs.next(10) is None  # the state at the start: no leader
        with pytest.raises(dlock.Busy):
            obs.next(0)
        with client.election(name, "a") as e:
            ld = obs.next(10)
            assert ld.value == "a" and ld.epoch == e.epoch
        assert obs.next(10) is None


def test_an_evicted_leader_learns_it(client, name):
    with client.election(name, "a", lease=1.5, lost_ok=True) as e:
        ev = e.lost_event
        assert not client.evict(name, e.epoch + 1)  # another term: nothing done
        assert client.evict(name, e.epoch)
        assert ev.wait(10) and e.lost


def test_guard_check(client, name):
    with client.lock(name) as h:
        assert client.guard_check(name + ":res", h.fence) == h.fence
        old = h.fence
    with client.lock(name) as h:
        client.guard_check(name + ":res", h.fence)
        new = h.fence
    with pytest.raises(dlock.Stale) as e:
        client.guard_check(name + ":res", old)
    assert e.value.highest == new


def test_status_and_list(client, name):
    with client.lock(name, owner_info="pid 42"):
        st = client.status(name)
        assert st.held and st.owner_info == "pid 42" and st.ttl_ms > 0
        assert client.list(name) == [name]


def test_a_client_cannot_be_pickled(client, name):
    import pickle
    with pytest.raises(TypeError, match="make a dlock.Client in that process"):
        pickle.dumps(client)
    with pytest.raises(TypeError):
        pickle.dumps(client.lock(name))


def test_fork_is_detected(client, name):
    import os
    with client.lock(name) as h:
        pid = os.fork()
        if pid == 0:  # the child: the parent's client must refuse, and not release anything
            code = 1
            try:
                client.ping()
            except dlock.Forked:
                code = 0
            except BaseException:
                code = 2
            try:
                h.close()  # no C call: the hold stays the parent's
                client.close()
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert h.is_held()
    client.ping()


def test_a_release_from_another_thread_leaves_the_hold_and_its_loss_signal(client, name):
    out = []
    with client.lock(name, lease=0.5, lost_ok=True) as h:
        ev = h.lost_event

        def other():
            try:
                h.release()
            except dlock.NotHeld as e:
                out.append(str(e))

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
        assert "this thread does not hold it" in out[0]
        assert ev.wait(10), "the holder's loss went untold after another thread's release"
        assert h.lost
