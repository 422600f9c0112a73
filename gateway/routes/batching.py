"""An async iterator's items in batches of those already available, without another task.

A stream writes one network packet per item when items come one at a time. When the
producer runs ahead of the writer (a GPU's pace on a busy host), several items are already
waiting by the time the writer is free, and each write (the socket call, the ASGI server's
framing) would be paid for each. ``ready_batches`` takes the next item as usual, then every
further item that can be had *without waiting*, and hands them over as one list.

Whether the next item is available is found out by starting its ``__anext__`` step by hand:
if it finishes at once, the item was ready; if it suspends (it awaits a future), the step is
kept and carried on, under the caller's own task, once the batch so far is out. Carrying on
relays the future to the task and the task's answers (results, cancellation) back into the
step, as ``yield from`` does; so no task is added per stream and nothing changes when items
come one at a time (the first ``await`` behaves as a plain ``anext``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Generator
from typing import Any, TypeVar, cast

T = TypeVar("T")


class _Carry:
    """Awaits a started coroutine that has suspended on ``yielded``, to its end."""

    def __init__(self, step: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.step = step
        self.yielded = yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        step, yielded = self.step, self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                step.close()
                raise
            except BaseException as error:  # a cancellation: delivered where it waits
                try:
                    yielded = step.throw(error)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = step.send(sent)
                except StopIteration as done:
                    return done.value


async def ready_batches(source: AsyncIterator[T], limit: int = 64) -> AsyncGenerator[list[T], None]:
    """``source``'s items: the next one (waited for), with all that follow it at once (up to
    ``limit`` in a batch). Closing this closes nothing: the caller owns ``source``."""
    carried: _Carry | None = None
    while True:
        try:
            first = cast(T, await carried) if carried is not None else await anext(source)
        except StopAsyncIteration:
            return
        carried = None
        batch = [first]
        ended = False
        failure: Exception | None = None
        while len(batch) < limit:
            step = cast(Coroutine[Any, Any, T], source.__anext__())
            try:
                yielded = step.send(None)
            except StopIteration as done:  # ready: it finished without waiting
                batch.append(cast(T, done.value))
                continue
            except StopAsyncIteration:
                ended = True
                break
            except Exception as error:  # raised after the items before it: those go first
                failure = error
                break
            carried = _Carry(step, yielded)  # it waits: carried on after this batch
            break
        try:
            yield batch
        except BaseException:
            if carried is not None:
                await _abandon(carried)
            raise
        if failure is not None:
            raise failure
        if ended:
            return


async def _abandon(carried: _Carry) -> None:
    """The consumer left while a step was under way: cancel it where it waits and let it
    unwind (its ``finally`` blocks may await), as a cancelled task would. Closing the step
    instead would leave its generator marked as running, and closing that would then fail."""
    try:
        yielded = carried.step.throw(asyncio.CancelledError())
    except (StopIteration, StopAsyncIteration, asyncio.CancelledError):
        return
    with contextlib.suppress(StopAsyncIteration, asyncio.CancelledError):
        await _Carry(carried.step, yielded)
