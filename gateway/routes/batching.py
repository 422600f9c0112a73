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

The same hand-driven step gives keep-alive pings without a task of their own: while the
source waits (a queued request, a long prefill, a paused background job), the step's future
is watched together with a timer; when the timer comes first, an empty batch is handed over
(the stream writes a ping) and the step, untouched, is carried on afterwards. The timer runs
from the last batch handed over, not from the future: a source that waits on many futures
before its next item (a long prefill reports every chunk, which a chat stream swallows)
still gets its pings.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator
from typing import Any, TypeVar, cast

T = TypeVar("T")


_TIMED_OUT = object()


class _Carry:
    """Awaits a started coroutine that has suspended on ``yielded``, to its end; or, with
    ``ping_due`` (the loop time a ping is due at), until then (``_TIMED_OUT``, and awaiting
    the same carry again goes on waiting)."""

    def __init__(
        self,
        step: Coroutine[Any, Any, Any],
        yielded: Any,
        ping_due: Callable[[], float] | None = None,
    ) -> None:
        self.step = step
        self.yielded = yielded
        self.ping_due = ping_due

    def __await__(self) -> Generator[Any, Any, Any]:
        step = self.step
        while True:
            yielded = self.yielded
            try:
                if self.ping_due is not None and isinstance(yielded, asyncio.Future):
                    seconds = self.ping_due() - yielded.get_loop().time()
                    if not (yield from _watch(yielded, seconds)):
                        return _TIMED_OUT  # still waiting on ``yielded``: not stepped
                    sent = None  # the future is done: the step reads its result itself
                else:
                    sent = yield yielded
            except GeneratorExit:
                step.close()
                raise
            except BaseException as error:  # a cancellation: delivered where it waits
                try:
                    self.yielded = step.throw(error)
                except StopIteration as done:
                    return done.value
                continue
            try:
                self.yielded = step.send(sent)
            except StopIteration as done:
                return done.value


def _watch(waited: asyncio.Future[Any], seconds: float) -> Generator[Any, Any, bool]:
    """Wait until ``waited`` is done (True) or ``seconds`` pass (False), without touching it;
    a cancellation while waiting cancels ``waited`` too, as a task waiting on it would."""
    loop = waited.get_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    waited.add_done_callback(wake)
    timer = loop.call_later(seconds, wake)
    try:
        yield from woken.__await__()
    except BaseException:
        waited.cancel()
        raise
    finally:
        timer.cancel()
        waited.remove_done_callback(wake)
    return waited.done()


async def ready_batches(
    source: AsyncIterator[T], limit: int = 64, ping_every: float | None = None
) -> AsyncGenerator[list[T], None]:
    """``source``'s items: the next one (waited for), with all that follow it at once (up to
    ``limit`` in a batch). With ``ping_every``: an empty batch each time the source has made
    the caller wait that long since the last batch. Closing this closes nothing: the caller
    owns ``source``."""
    loop = asyncio.get_running_loop()
    handed_over = loop.time()

    def next_ping() -> float:
        return handed_over + cast(float, ping_every)

    ping_due = None if ping_every is None else next_ping
    carried: _Carry | _Ready | None = None
    while True:
        try:
            if carried is None:
                carried = _start(source, ping_due)
            first = await carried if isinstance(carried, _Carry) else carried.value
        except StopAsyncIteration:
            return
        if first is _TIMED_OUT:
            try:
                yield []
            except BaseException:
                await _abandon(cast(_Carry, carried))
                raise
            handed_over = loop.time()
            continue
        carried = None
        batch = [cast(T, first)]
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
            carried = _Carry(step, yielded, ping_due)  # it waits: carried on after this batch
            break
        try:
            yield batch
        except BaseException:
            if isinstance(carried, _Carry):
                await _abandon(carried)
            raise
        handed_over = loop.time()
        if failure is not None:
            raise failure
        if ended:
            return


class _Ready:
    """The first step of a batch when it finished at once: its item."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _start(source: AsyncIterator[Any], ping_due: Callable[[], float] | None) -> _Carry | _Ready:
    """The next item's step started by hand: its item if ready, else the carry that waits.
    The source's end (StopAsyncIteration) and its errors are raised here."""
    step = cast(Coroutine[Any, Any, Any], source.__anext__())
    try:
        yielded = step.send(None)
    except StopIteration as done:
        return _Ready(done.value)
    return _Carry(step, yielded, ping_due)


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
