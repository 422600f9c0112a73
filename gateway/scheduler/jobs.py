"""Jobs: every use of an engine, as one unit the scheduler can queue, run, pause and cancel.

Three pieces, kept apart as TGI's queue keeps a request, the stream its caller holds and the
queue's own entry:

* ``JobSpec``: what a caller asks for (its class, its work, its kind); frozen;
* ``JobHandle``: what the caller holds once ``Scheduler.submit`` took the spec: the events,
  the end, the state as the slot last left it, and ``cancel``;
* ``Job``: the slot's own record (where the job is, its steps, the flags the inference
  thread reads between steps); only the scheduler writes it.

Work may offer more than its steps: steps that hold engine memory while paused say so
(``HoldsMemory``), and the slot asks them to give it up when too many paused jobs hold some.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from gateway.seam.backend import Priority


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PREEMPTED = "preempted"  # paused at a token boundary, its state kept, waiting to resume
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class JobKind(StrEnum):
    """What a job does with the slot (``GET /v1/scheduler`` shows it; the policy reads it)."""

    CHAT = "chat"  # a generation: chat, completion, task
    SPECULATION = "speculation"  # speculative first tokens: gives way to anything waiting
    EMBED = "embed"
    PREFILL = "prefill"  # a typing hint's prefill
    LOAD = "load"  # loading a model's weights
    UPSTREAM = "upstream"  # a lease: a server on this machine computes (``SlotLease``)


FINISHED = frozenset({JobState.DONE, JobState.CANCELLED, JobState.FAILED})
_END = object()
_ids = itertools.count(1)


@runtime_checkable
class HoldsMemory(Protocol):
    """Steps that keep engine memory (a KV cache) while paused and can free it.

    The work knows what it holds, so it offers the release itself; the slot calls it on the
    inference thread, between steps, and the work recomputes what it freed when it resumes.
    """

    @property
    def holds_memory(self) -> bool:
        """Whether there is memory to free now (False before the work has begun)."""
        ...

    def release_memory(self) -> bool:
        """Free it; False when it cannot be freed."""
        ...


@dataclass(frozen=True)
class JobSpec:
    """A unit of engine work, as its caller describes it.

    ``work`` is called once, on the inference thread, and returns an iterator of steps
    (usually one per token; ``HoldsMemory`` when it can free memory while paused). Between
    two steps the scheduler may cancel or preempt the job; each step's value is delivered
    to ``JobHandle.events()``. A job that is not ``preemptible`` keeps the slot to its end.
    """

    priority: Priority
    work: Callable[[], Iterator[Any]]
    kind: JobKind = JobKind.CHAT
    preemptible: bool = True
    # Jobs with the same key may run in the slot together, up to ``batch_size`` of them
    # (their sequences decode in one pass each step: ``gateway.engines.batch_decode``);
    # None: the job runs alone.
    batch_key: str | None = None
    batch_size: int = 1
    id: str = field(default_factory=lambda: f"job-{next(_ids)}")


@dataclass(eq=False)
class Job:
    """The slot's record of a submitted job (TGI's queue ``Entry``); the scheduler's alone.

    Written on the event loop, except ``steps``, ``memory_released`` and
    ``paused_inside_pass`` (the inference thread, while the job runs); the inference thread
    reads the request flags between steps.
    """

    spec: JobSpec
    submitted_at: float = field(default_factory=time.monotonic)
    # A typing hint's prefill (``Scheduler.submit_hint``): its own lane, below user jobs.
    hint: bool = False
    session: str | None = None
    preemptible: bool = True
    state: JobState = JobState.QUEUED
    started_at: float | None = None
    preemptions: int = 0
    error: BaseException | None = None
    cancel_requested: bool = False
    preempt_requested: bool = False
    # Whether it may pause inside a pass (at a ``PASS_POINT``): only while the paused jobs
    # holding memory leave room for it, as a pass left half done holds its cache.
    may_pause_inside_pass: bool = False
    steps: Iterator[Any] | None = None
    memory_released: bool = False
    paused_inside_pass: bool = False  # its memory cannot be released until it resumes
    outbox: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    @classmethod
    def of(cls, spec: JobSpec, submitted_at: float) -> Job:
        return cls(spec, submitted_at, preemptible=spec.preemptible)

    @property
    def priority(self) -> Priority:
        return self.spec.priority

    @property
    def kind(self) -> JobKind:
        return self.spec.kind

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def holds_memory(self) -> bool:
        """Whether its steps hold engine memory they could free (see ``HoldsMemory``)."""
        return isinstance(self.steps, HoldsMemory) and self.steps.holds_memory

    def release_memory(self) -> bool:
        """Ask its steps to free their memory (on the inference thread)."""
        return isinstance(self.steps, HoldsMemory) and self.steps.release_memory()

    def set_aside(self) -> None:
        """Tell its steps that it is paused (on the inference thread): a sequence decoding
        in a batch leaves it, so that the others go on without it."""
        set_aside = getattr(self.steps, "set_aside", None)
        if set_aside is not None:
            set_aside()

    def deliver(self, event: Any) -> None:
        self.outbox.put_nowait(event)

    def close_outbox(self) -> None:
        self.outbox.put_nowait(_END)


class JobHandle:
    """What the caller holds for a submitted job: its events, its end, and ``cancel``.

    ``withdraw`` is the scheduler's: it drops a waiting job, or stops a running one at its
    next step.
    """

    def __init__(self, job: Job, withdraw: Callable[[Job], None]) -> None:
        self._job = job
        self._withdraw = withdraw

    @property
    def id(self) -> str:
        return self._job.id

    @property
    def kind(self) -> JobKind:
        return self._job.kind

    @property
    def priority(self) -> Priority:
        return self._job.priority

    @property
    def state(self) -> JobState:
        return self._job.state

    @property
    def finished(self) -> bool:
        return self._job.finished

    @property
    def preemptions(self) -> int:
        return self._job.preemptions

    @property
    def memory_released(self) -> bool:
        """Whether it is paused without its engine memory (recomputed when it resumes)."""
        return self._job.memory_released

    @property
    def cancel_requested(self) -> bool:
        return self._job.cancel_requested

    async def events(self) -> AsyncIterator[Any]:
        """Each step's value as it is produced; raises the job's error if it failed."""
        while True:
            item = await self._job.outbox.get()
            if item is _END:
                if self._job.error is not None:
                    raise self._job.error
                return
            yield item

    async def wait(self) -> None:
        """Wait for the job to end, discarding its events."""
        async for _ in self.events():
            pass

    def cancel(self) -> None:
        """Withdraw the job: dropped if queued, stopped within one step if running."""
        self._withdraw(self._job)
