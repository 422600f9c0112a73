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


async def test_a_deferred_event_waits_for_the_next_put_only_at_a_fast_pace() -> None:
    loop = asyncio.get_running_loop()
    got: list[int] = []
    now = [0.0]
    handoff = EventHandoff(loop, got.append, flush_after=0.005, clock=lambda: now[0])
    handoff.put(0, defer=True)  # nothing was handed over yet: at once
    await asyncio.sleep(0)
    assert got == [0]
    now[0] = 0.002
    handoff.put(1, defer=True)  # 2 ms after the last wake-up: waits
    await asyncio.sleep(0)
    assert got == [0]
    now[0] = 0.004
    handoff.put(2)  # not deferred: takes the waiting one along
    await asyncio.sleep(0)
    assert got == [0, 1, 2]
    now[0] = 0.006
    handoff.put(3, defer=True)  # 2 ms after the last wake-up: waits
    now[0] = 0.010
    handoff.put(4, defer=True)  # 6 ms: wakes the loop for both
    await asyncio.sleep(0)
    assert got == [0, 1, 2, 3, 4]
    now[0] = 0.011
    handoff.put(5, defer=True)
    await asyncio.sleep(0)
    assert got == [0, 1, 2, 3, 4]
    handoff.flush()  # the slice ended: nothing is left behind
    await asyncio.sleep(0)
    assert got == [0, 1, 2, 3, 4, 5]
    handoff.flush()  # nothing waiting: no wake-up
    assert not handoff._wake_pending


async def test_without_flush_after_nothing_waits() -> None:
    loop = asyncio.get_running_loop()
    got: list[int] = []
    handoff = EventHandoff(loop, got.append)
    for item in range(3):
        handoff.put(item, defer=True)
        await asyncio.sleep(0)
    assert got == [0, 1, 2]
