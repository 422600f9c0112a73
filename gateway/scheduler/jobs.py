"""Jobs: every use of an engine, as one unit the scheduler can queue, run, pause and cancel."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.engines.backend import Priority


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"  # paused at a token boundary, its state kept, waiting to resume
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


FINISHED = frozenset({JobState.DONE, JobState.CANCELLED, JobState.FAILED})
_END = object()
_ids = itertools.count(1)


@dataclass(eq=False)
class Job:
    """A unit of engine work.

    ``work`` is called once, on the inference thread, and returns an iterator of steps
    (usually one per token). Between two steps the scheduler may cancel or preempt the job;
    each step's value is delivered to ``events()``.
    """

    priority: Priority
    work: Callable[[], Iterator[Any]]
    kind: str = "chat"
    preemptible: bool = True
    id: str = field(default_factory=lambda: f"job-{next(_ids)}")
    state: JobState = JobState.QUEUED
    submitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    preemptions: int = 0
    # A typing hint's prefill (``Scheduler.submit_hint``): its own lane, below user jobs.
    hint: bool = False
    session: str | None = None
    error: BaseException | None = None
    # Set by the scheduler thread or event loop; read by the inference thread between steps.
    cancel_requested: bool = False
    preempt_requested: bool = False
    steps: Iterator[Any] | None = None
    # Set by the work while it runs: frees the job's engine memory while it is paused (it
    # is recomputed on resume). Called on the inference thread; False if it cannot.
    release_memory: Callable[[], bool] | None = None
    memory_released: bool = False
    _outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    _cancel_hook: Callable[[Job], None] | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def deliver(self, event: Any) -> None:
        self._outbox.put_nowait(event)

    def close_outbox(self) -> None:
        self._outbox.put_nowait(_END)

    async def events(self) -> AsyncIterator[Any]:
        """Each step's value as it is produced; raises the job's error if it failed."""
        while True:
            item = await self._outbox.get()
            if item is _END:
                if self.error is not None:
                    raise self.error
                return
            yield item

    async def wait(self) -> None:
        """Wait for the job to end, discarding its events."""
        async for _ in self.events():
            pass

    def cancel(self) -> None:
        """Withdraw the job: dropped if queued, stopped within one step if running."""
        if self.finished:
            return
        self.cancel_requested = True
        if self._cancel_hook is not None:
            self._cancel_hook(self)
