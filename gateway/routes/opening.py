"""Streams that open at once, whatever the prompt's length or the queue ahead.

A streamed request is prepared (rendered, tokenized, its grammar compiled) and started (given
the slot, or a peer's seat) before its first token. Both can take long: seconds for a long
agent conversation with many tools, minutes behind a queue. Agents' streaming clients count
only events, not SSE comments, against their idle timeouts (Codex CLI gives up after 300 s),
so a stream whose start takes longer than ``OPENING_GRACE_SECONDS`` is answered at once: the
200 and the wire format's opening events go out, and the start goes on inside the stream
(its failure then is the stream's error event, as any failure after the 200). A start that
is ready or fails within the grace is answered as before: a refusal keeps its HTTP status
(400, 404, 429, 503), and headers that name who computes it are sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing
from typing import Any, TypeVar

from litestar import Request
from pydantic import BaseModel

from gateway.errors import GatewayError
from gateway.routes.disconnect import ClientDisconnected, wait_for_disconnect
from gateway.seam.placement import PLACEMENT, Placement

T = TypeVar("T")

OPENING_GRACE_SECONDS = 0.01


async def begin_within_grace(
    request: Request[Any, Any, Any], work: Coroutine[Any, Any, T]
) -> asyncio.Task[T]:
    """Run ``work`` (a stream's prepare and start) for at most the grace: the task, done or
    still going; ``ClientDisconnected`` (the work cancelled) if the client left first."""
    placement = Placement()
    reset = PLACEMENT.set(placement)
    try:
        task = asyncio.ensure_future(work)  # in a copy of this context: it sees ``placement``
    finally:
        PLACEMENT.reset(reset)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    deadline = asyncio.get_running_loop().time() + OPENING_GRACE_SECONDS
    try:
        while not task.done() and not watcher.done():
            placement.changed.clear()
            moved = asyncio.ensure_future(placement.changed.wait())
            # Past the grace, only a start handed to a peer is waited for (a round trip
            # away, and it names the peer in a header); its refusal wakes this up.
            timeout = None if placement.peer else deadline - asyncio.get_running_loop().time()
            if timeout is not None and timeout <= 0:
                moved.cancel()
                break
            try:
                await asyncio.wait(
                    {task, watcher, moved}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                moved.cancel()
        left = watcher.done() and not watcher.cancelled()
    finally:
        watcher.cancel()
    if left and not task.done():
        task.cancel()
        raise ClientDisconnected
    return task


def ready(task: asyncio.Task[T]) -> T | None:
    """The task's result if it is done (its exception raised: a refusal with its status)."""
    return task.result() if task.done() else None


async def opened(
    opening: Sequence[BaseModel],
    begun: asyncio.Task[T],
    rest: Callable[[T], AsyncGenerator[BaseModel, None]],
    release: Callable[[T], Awaitable[None]],
    failed: Callable[[GatewayError], Sequence[BaseModel]] | None = None,
) -> AsyncGenerator[BaseModel, None]:
    """The stream: its ``opening`` events, then (once ``begun`` is done) the ``rest``. A start
    that fails ends the stream with ``failed``'s events (default: the dialect's error event).
    A stream that ends before it took its run cancels the start, or ``release``s its run."""
    taken = False
    try:
        for event in opening:
            yield event
        try:
            run = await asyncio.shield(begun)
        except GatewayError as exc:
            if failed is None:
                raise
            for event in failed(exc):
                yield event
            return
        taken = True
    finally:
        if not taken:
            _drop(begun, release)
    async with aclosing(rest(run)) as events:
        async for event in events:
            yield event


# Releases under way (asyncio keeps only weak references to tasks: the documented idiom).
_RELEASING: set[asyncio.Future[None]] = set()


def _drop(begun: asyncio.Task[T], release: Callable[[T], Awaitable[None]]) -> None:
    def close(task: asyncio.Task[T]) -> None:
        if not task.cancelled() and task.exception() is None:
            releasing = asyncio.ensure_future(release(task.result()))
            _RELEASING.add(releasing)
            releasing.add_done_callback(_RELEASING.discard)

    if begun.done():
        close(begun)
    else:
        begun.cancel()  # a start caught as it finishes still releases its run
        begun.add_done_callback(close)
