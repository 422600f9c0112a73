"""ready_batches: items ready together come as one batch; waiting, errors and leaving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing

import pytest

from gateway.routes.batching import ready_batches


async def from_queue(queue: asyncio.Queue[int | None], log: list[str]) -> AsyncGenerator[int, None]:
    try:
        while (item := await queue.get()) is not None:
            yield item
    finally:
        log.append("closed")


async def test_items_ready_together_come_as_one_batch() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for item in (1, 2, 3, None):
        queue.put_nowait(item)
    log: list[str] = []
    batches = [b async for b in ready_batches(from_queue(queue, log))]
    assert batches == [[1, 2, 3]]
    assert log == ["closed"]


async def test_items_one_at_a_time_come_one_by_one_and_in_order() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    log: list[str] = []

    async def produce() -> None:
        for item in (1, 2, 3):
            queue.put_nowait(item)
            await asyncio.sleep(0.01)
        queue.put_nowait(None)

    producer = asyncio.create_task(produce())
    batches = [b async for b in ready_batches(from_queue(queue, log))]
    await producer
    assert batches == [[1], [2], [3]]


async def test_a_batch_is_at_most_the_limit() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for item in (*range(5), None):
        queue.put_nowait(item)
    batches = [b async for b in ready_batches(from_queue(queue, []), limit=2)]
    assert batches == [[0, 1], [2, 3], [4]]


async def test_an_error_comes_after_the_items_before_it() -> None:
    async def failing() -> AsyncGenerator[int, None]:
        yield 1
        yield 2
        raise ValueError("boom")

    seen: list[list[int]] = []
    with pytest.raises(ValueError, match="boom"):
        async for batch in ready_batches(failing()):
            seen.append(batch)
    assert seen == [[1, 2]]


async def test_a_cancelled_consumer_cancels_the_source_where_it_waits() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    queue.put_nowait(1)
    log: list[str] = []
    got: list[list[int]] = []

    async def consume() -> None:
        async for batch in ready_batches(from_queue(queue, log)):
            got.append(batch)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.01)  # the first batch is out; the next step waits on the queue
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert got == [[1]]
    assert log == ["closed"]


async def test_closing_the_batches_mid_step_leaves_the_source_closable() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    queue.put_nowait(1)
    log: list[str] = []
    source = from_queue(queue, log)
    async with aclosing(source), aclosing(ready_batches(source)) as batches:
        async for batch in batches:
            assert batch == [1]
            break  # a step of the source is under way (waiting on the empty queue)
    assert log == ["closed"]


async def test_a_waiting_source_gets_pings_and_is_not_disturbed() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    log: list[str] = []

    async def produce() -> None:
        queue.put_nowait(1)
        await asyncio.sleep(0.35)  # long enough for a few pings
        queue.put_nowait(2)
        queue.put_nowait(None)

    producer = asyncio.create_task(produce())
    batches = [b async for b in ready_batches(from_queue(queue, log), ping_every=0.1)]
    await producer
    assert batches[0] == [1] and batches[-1] == [2]
    assert 2 <= batches.count([]) <= 4  # pings while waiting, nothing lost or repeated
    assert [item for batch in batches for item in batch] == [1, 2]
    assert log == ["closed"]


async def test_a_source_busy_on_many_short_waits_still_gets_pings() -> None:
    """A long prefill reports every chunk, which the chat stream swallows: the source waits
    on many futures before its next item, and the ping is due by the time since the last
    batch, not since the last future."""

    async def prefilling() -> AsyncGenerator[str, None]:
        for _ in range(12):  # 12 chunks of 30 ms, no item: 360 ms
            await asyncio.sleep(0.03)
        yield "first token"

    batches = [b async for b in ready_batches(prefilling(), ping_every=0.1)]
    assert 2 <= batches.count([]) <= 4
    assert batches[-1] == ["first token"]


async def test_a_source_ready_in_time_gets_no_ping() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()

    async def produce() -> None:
        for item in (1, 2, 3):
            await asyncio.sleep(0.01)
            queue.put_nowait(item)
        queue.put_nowait(None)

    producer = asyncio.create_task(produce())
    batches = [b async for b in ready_batches(from_queue(queue, []), ping_every=5)]
    await producer
    assert [] not in batches
    assert [item for batch in batches for item in batch] == [1, 2, 3]


async def test_a_consumer_cancelled_between_pings_cancels_the_source_where_it_waits() -> None:
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    log: list[str] = []
    got: list[list[int]] = []

    async def consume() -> None:
        async for batch in ready_batches(from_queue(queue, log), ping_every=0.05):
            got.append(batch)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.12)  # two pings, the source still waiting on the queue
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert got == [[], []]
    assert log == ["closed"]
    queue.put_nowait(1)  # nobody waits on the queue any more
    assert queue.qsize() == 1
