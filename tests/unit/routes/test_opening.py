"""Streams that open before their start: the opening first, a failed start as the stream's
end, and a start nobody waits for any more cancelled or released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest
from pydantic import BaseModel

from gateway.errors import ServiceUnavailableError
from gateway.routes.opening import opened


class Event(BaseModel):
    name: str


async def rest(run: str) -> AsyncGenerator[BaseModel, None]:
    yield Event(name=f"{run}:token")


async def test_the_opening_goes_out_before_the_start_is_done() -> None:
    may_start = asyncio.Event()

    async def start() -> str:
        await may_start.wait()
        return "run"

    begun = asyncio.ensure_future(start())
    stream = opened([Event(name="opening")], begun, rest, release=lambda run: asyncio.sleep(0))
    assert (await anext(stream)).name == "opening"  # type: ignore[attr-defined]
    may_start.set()
    assert [e.name async for e in stream] == ["run:token"]  # type: ignore[attr-defined]


async def test_a_failed_start_ends_the_stream_with_its_own_events() -> None:
    async def start() -> str:
        raise ServiceUnavailableError("queue wait limit")

    begun = asyncio.ensure_future(start())
    failed = lambda exc: [Event(name=f"failed:{exc.message}")]  # noqa: E731
    stream = opened([Event(name="opening")], begun, rest, lambda run: asyncio.sleep(0), failed)
    assert [e.name async for e in stream] == ["opening", "failed:queue wait limit"]  # type: ignore[attr-defined]
    without = opened(
        [Event(name="opening")], asyncio.ensure_future(start()), rest, lambda r: asyncio.sleep(0)
    )
    assert (await anext(without)).name == "opening"  # type: ignore[attr-defined]
    with pytest.raises(ServiceUnavailableError):
        await anext(without)


async def test_a_stream_closed_before_its_start_cancels_it_or_releases_its_run() -> None:
    released: list[str] = []

    async def release(run: str) -> None:
        released.append(run)

    never = asyncio.Event()

    async def slow() -> str:
        await never.wait()
        return "slow"

    pending = asyncio.ensure_future(slow())
    stream = opened([Event(name="opening")], pending, rest, release)
    await anext(stream)
    await stream.aclose()
    await asyncio.sleep(0)
    assert pending.cancelled()

    async def quick() -> str:
        return "quick"

    done = asyncio.ensure_future(quick())
    await done
    stream = opened([Event(name="opening")], done, rest, release)
    await anext(stream)
    await stream.aclose()
    await asyncio.sleep(0)
    assert released == ["quick"]
