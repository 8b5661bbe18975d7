"""The same binding on every backend built: Redis, PostgreSQL and ZooKeeper (the last two
through the C harness's server helpers, which ctest names in $DLOCK_PG_SERVER and
$DLOCK_ZK_SERVER; skipped without them)."""
import asyncio
import threading

import pytest

import dlock


def test_lock_fence_busy_and_exclusion(any_url, name):
    with dlock.Client(any_url) as c:
        with c.lock(name, wait=10) as hold:
            assert hold.fence > 0
            with pytest.raises(dlock.Busy):
                c.lock(name).acquire(0)
            assert c.status(name).held
        inside, errors = [0], []

        def worker():
            lk = c.lock(name, wait=30)
            for _ in range(10):
                with lk:
                    inside[0] += 1
                    if inside[0] != 1:
                        errors.append("overlap")
                    inside[0] -= 1

        ts = [threading.Thread(target=worker) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors and not any(t.is_alive() for t in ts)


def test_election_and_alock(any_url, name):
    with dlock.Client(any_url) as c:
        with c.election(name + "-e", "me", wait=10) as e:
            assert c.leader(name + "-e").epoch == e.epoch > 0

        async def main():
            async with c.alock(name, wait=10) as hold:
                assert hold.fence > 0
                with pytest.raises(dlock.Busy):
                    async with c.alock(name, wait=0.2):
                        pass

        asyncio.run(main())
