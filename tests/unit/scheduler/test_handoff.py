"""EventHandoff: events from another thread arrive in order, with fewer wake-ups."""

from __future__ import annotations

import asyncio
import threading

from gateway.scheduler.handoff import EventHandoff


async def test_events_from_a_thread_arrive_in_order() -> None:
    loop = asyncio.get_running_loop()
    got: list[int] = []
    done = asyncio.Event()
    handoff = EventHandoff(loop, got.append)

    def produce() -> None:
        for item in range(1000):
            handoff.put(item)
        loop.call_soon_threadsafe(done.set)

    thread = threading.Thread(target=produce)
    thread.start()
    await done.wait()
    thread.join()
    assert got == list(range(1000))


async def test_events_put_before_the_loop_runs_take_one_wake_up() -> None:
    loop = asyncio.get_running_loop()
    got: list[int] = []
    wakes = 0
    handoff = EventHandoff(loop, got.append)
    drain = handoff._drain

    def counted() -> None:
        nonlocal wakes
        wakes += 1
        drain()

    handoff._drain = counted  # type: ignore[method-assign]
    for item in range(5):
        handoff.put(item)  # the loop is not running them meanwhile: one wake-up pending
    await asyncio.sleep(0)
    assert got == [0, 1, 2, 3, 4]
    assert wakes == 1
    handoff.put(5)
    await asyncio.sleep(0)
    assert got == [0, 1, 2, 3, 4, 5]
    assert wakes == 2
