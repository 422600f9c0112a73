"""Holding the inference slot for work that computes elsewhere on this Mac.

An OpenAI-compatible server running on the same machine (``same_machine = true``) eats the
same memory bandwidth as a local model, so its requests take the one slot too: a lease is a
job whose only step is "granted", after which it blocks the inference thread until the
holder releases it. It is not preemptible: the remote computation cannot be paused.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import TracebackType

from gateway.scheduler.jobs import JobHandle, JobKind, JobSpec, JobState
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import Priority

# How often a held lease checks whether its job was cancelled (shutdown, disconnect).
POLL_SECONDS = 0.1
GRANTED = "granted"


class SlotLease:
    """``async with SlotLease(scheduler, priority):`` holds the slot for the block's duration."""

    def __init__(
        self, scheduler: Scheduler, priority: Priority, kind: JobKind = JobKind.UPSTREAM
    ) -> None:
        self.scheduler = scheduler
        self._released = threading.Event()
        self.spec = JobSpec(priority, work=self._hold, kind=kind, preemptible=False)
        self.job: JobHandle | None = None  # once submitted

    def _hold(self) -> Iterator[str]:
        yield GRANTED
        # The wait is woken by release(); the poll also notices a cancel (e.g. shutdown).
        while not self._released.wait(POLL_SECONDS):
            if self.job is not None and self.job.cancel_requested:
                return

    async def __aenter__(self) -> SlotLease:
        self.job = self.scheduler.submit(self.spec)  # raises QueueFullError (429)
        events = self.job.events()
        try:
            await anext(events)
        except StopAsyncIteration:
            raise asyncio.CancelledError from None  # withdrawn before it started
        except BaseException:
            self.release()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def release(self) -> None:
        self._released.set()  # a running lease ends at its next poll, as a finished job
        if self.job is not None and self.job.state is JobState.QUEUED:
            self.job.cancel()
