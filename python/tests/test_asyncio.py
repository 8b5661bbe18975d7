"""asyncio: waits do not block the loop; cancelling the task cancels the C wait."""
import asyncio
import time

import pytest

import dlock


async def ticker(ticks, stop):
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.01)


def test_an_async_wait_leaves_the_loop_running_then_gets_the_lock(client, name):
    async def main():
        ticks, stop = [], asyncio.Event()
        tk = asyncio.create_task(ticker(ticks, stop))
        holder = client.alock(name)
        hold = await holder.acquire()
        assert hold.fence > 0

        async def release_later():
            await asyncio.sleep(0.5)
            await holder.release()

        rel = asyncio.create_task(release_later())
        t0 = time.monotonic()
        async with client.alock(name, wait=20) as h2:
            waited = time.monotonic() - t0
            assert h2.fence > hold.fence or h2.fence > 0
        await rel
        stop.set()
        await tk
        during = [t for t in ticks if t0 < t < t0 + waited]
        assert waited >= 0.4 and len(during) >= 10, (waited, len(during))
        with pytest.raises(dlock.Busy):
            async with client.alock(name, wait=0):
                async with client.alock(name, wait=0.2):
                    pass

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_c_wait(client, name):
    async def main():
        async with client.alock(name):
            waiter = client.alock(name, wait=60)
            task = asyncio.create_task(waiter.acquire())
            for _ in range(200):  # until the waiter is queued on the server
                if client.status(name).waiters:
                    break
                await asyncio.sleep(0.02)
            assert client.status(name).waiters == 1
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - t0 < 10  # not the 60 s wait
            assert client.status(name).waiters == 0  # it left the queue
        async with client.alock(name, wait=0):  # and nothing of it holds the lock
            pass

    asyncio.run(main())


def test_a_loss_is_awaitable(client, name):
    async def main():
        al = client.alock(name, lease=0.3, lost_ok=True)
        async with al as hold:
            reason = await asyncio.wait_for(al.wait_lost(), 10)
            assert reason and hold.lost

    asyncio.run(main())
