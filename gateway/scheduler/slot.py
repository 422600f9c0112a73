"""The single-slot scheduler: one inference at a time, the rest ordered by class and gates.

The queues, the gates and the slot live on the event loop: handlers ``submit`` and send the
typing signals (``Scheduler.typing``), one asyncio task (the dispatcher) picks and runs the
jobs. After each change the loop publishes a frozen ``SlotState``
(``gateway.scheduler.state``); the inference thread, asking for pacing between passes, reads
only that, never a queue or a gate another thread is changing. Peers and ``/health`` read a
``SchedulerView``.

Typing-hint prefills wait in a lane of their own (``submit_hint``): bounded, the newest per
session kept, after every waiting user job and before task work, and paused by a user job like
any background work (a flood of hints once filled the user queue: a chat got a 429).

Engine work runs on one dedicated thread, so two computations can never run at once, and
MLX's thread-local generation stream stays on one thread. A running job returns control at
every step (token) boundary, where it can be cancelled or preempted; a preempted job keeps
its suspended iterator (and with it its KV cache and sampler state) and resumes where it left.

The slot holds a batch: jobs with the same ``batch_key`` (generations of one local model)
may run in it together, up to ``batch_size``, their sequences decoding in one pass per step
(``gateway.engines.batch_decode``; issue 33). Still one inference: the inference thread
advances the batch's jobs in turn, a step each (``gateway.scheduler.job_slice``). A job
joins at a step boundary when the policy would pick it now (``policy.may_join``): user jobs
batch with user jobs, the rest with the rest; a waiting user job still pauses every
background job of the batch, which then leaves it, so the user's first token and decode are
its own (the batch resumes after it, or beside its own batch if the class allows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.errors import QueueFullError, ServiceUnavailableError
from gateway.scheduler import pacing, policy
from gateway.scheduler.gates import GATE_NAMES, Gates, TypingGates
from gateway.scheduler.job_slice import (
    HINT_LANE,
    JobSlice,
    SliceEnd,
    close_steps,
    lane,
    runs_user_job,
)
from gateway.scheduler.jobs import Job, JobHandle, JobSpec, JobState
from gateway.scheduler.observer import SchedulerObserver
from gateway.scheduler.pacing import ChunkBudget
from gateway.scheduler.policy import OnWaiting, SchedulerConfig
from gateway.scheduler.state import SchedulerView, SlotState
from gateway.scheduler.turn_trace import trace_from_env
from gateway.seam.backend import Priority

log = logging.getLogger(__name__)
Clock = Callable[[], float]


__all__ = ["Scheduler", "SchedulerConfig"]
_DEAD = "the inference slot's dispatcher has stopped; restart the gateway"


class Scheduler:
    """Owns the inference slot, the per-class queues and the gates."""

    def __init__(
        self, config: SchedulerConfig, observer: SchedulerObserver, clock: Clock = time.monotonic
    ) -> None:
        self.config = config
        self.observer = observer
        self.clock = clock
        self.gates = Gates(config.pipeline_grace, config.typing_quiet, config.prefill_freeze_max)
        self.typing = TypingGates(self.gates, clock, self._changed)
        self.queues: dict[Priority, deque[Job]] = {p: deque() for p in Priority}
        self.hint_queue: deque[Job] = deque()
        # The jobs in the slot now, the first to take it first (the loop's own list); the
        # inference thread takes those handed to it from ``_joining``, under ``_batch_lock``,
        # while ``_batch_open`` (False once it found the batch empty and left).
        self.batch: list[Job] = []
        self._joining: deque[Job] = deque()
        self._batch_lock = threading.Lock()
        self._batch_open = False
        self.completed = 0
        self.max_occupancy_seen = 0
        self._occupancy = 0
        self._occupancy_lock = threading.Lock()
        self._mean_job_seconds = 5.0
        # Recent user jobs' slot-to-first-token seconds: how fine background passes are cut.
        # The inference thread's own: written and read there only.
        self._user_first_tokens: deque[float] = deque(maxlen=8)
        self._trace = trace_from_env()  # each turn's time, for benchmarks (``turn_trace``)
        # What the inference thread reads (``gateway.scheduler.state``): replaced, never changed.
        self.state = SlotState()
        self._wakeup = asyncio.Event()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._publish()  # every lane and gate shows from the start, at zero

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._dispatch(), name="scheduler")

    @property
    def alive(self) -> bool:
        """Whether the dispatcher runs: started, not stopped, not dead of an error. Without
        it no job leaves its queue again, so ``/health`` answers 503."""
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for queue in self._all_queues():
            while queue:
                self._finish(
                    queue.popleft(), JobState.CANCELLED, ServiceUnavailableError("shutting down")
                )
        self._publish()
        self._thread.shutdown(wait=True, cancel_futures=True)

    async def run_on_engine_thread(self, fn: Callable[[], Any]) -> Any:
        """Run a short engine call (tokenizing, loading) on the inference thread, in order."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    def submit_to_engine_thread(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the inference thread after the current step; do not wait for it."""
        self._thread.submit(fn)

    # -- what handlers call --------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        """Queue the job ``spec`` describes; raises QueueFullError (429) when its class's
        queue is full."""
        self._refuse_when_dead()
        queue = self.queues[spec.priority]
        limit = self.config.max_queued[spec.priority]
        if len(queue) >= limit:
            self.observer.job_rejected(spec.priority.label, "queue_full")
            raise QueueFullError(
                f"the {spec.priority.label} queue is full ({limit} waiting); retry later",
                retry_after=policy.retry_after(
                    self._mean_job_seconds, len(queue), random.uniform(0.75, 1.25)
                ),
            )
        job = Job.of(spec, self.clock())
        queue.append(job)
        self._changed()
        return JobHandle(job, self._withdraw)

    def submit_hint(self, spec: JobSpec, session: str | None) -> JobHandle:
        """Queue a typing hint's prefill in the hint lane; never refused.

        A newer hint of the same session replaces a queued one, and beyond
        ``max_queued_hints`` the oldest waiting hint is dropped: hints are advice, the
        newest is the best advice, and none of them may crowd out a request.
        """
        self._refuse_when_dead()
        room = policy.hint_room(self.hint_queue, session, self.config.max_queued_hints)
        for old in room.replaced:
            self._withdraw(old)
        for oldest in room.dropped:
            self.observer.job_rejected(HINT_LANE, "queue_full")
            self._withdraw(oldest)
        job = Job.of(spec, self.clock())
        job.hint, job.session, job.preemptible = True, session, True
        self.hint_queue.append(job)
        self._changed()
        return JobHandle(job, self._withdraw)

    # -- pacing (``gateway.scheduler.pacing.Pacing``: asked on the inference thread) ---------
    # Each answer reads ``self.state`` once: the loop may publish a new one meanwhile.

    def chunk_budget(self, base: int) -> ChunkBudget:
        """The running job's next prefill chunk (``gateway.scheduler.pacing``)."""
        return self.state.chunk_budget(base, self.clock())

    def decode_ahead(self) -> bool:
        """Whether the running job may queue a decode step ahead (``pacing.decodes_ahead``)."""
        return pacing.decodes_ahead(stopping=self.state.stopping)  # asked every token

    def pause_grain(self) -> float | None:
        """The running job's longest compute between pause points (``pacing.pause_grain``)."""
        first_token = min(self._user_first_tokens, default=None)
        return self.state.pause_grain(self.clock(), first_token)

    def reject_waiting(self, error: BaseException) -> int:
        """Fail every job that has not started yet with ``error`` (shutting down)."""
        rejected = 0
        for queue in self._all_queues():
            for job in [j for j in queue if j.started_at is None]:
                queue.remove(job)
                self._finish(job, JobState.FAILED, error)
                rejected += 1
        self._changed()
        return rejected

    def would_wait(self, priority: Priority) -> bool:
        """Whether a job of this class submitted now would wait for the slot
        (``policy.would_wait``). Peers: a request that would wait here may run on a peer."""
        return policy.would_wait(
            priority, self.queues, self.hint_queue, self.running, self.gates, self.clock()
        )

    def _all_queues(self) -> list[deque[Job]]:
        return [*self.queues.values(), self.hint_queue]

    def _queue_of(self, job: Job) -> deque[Job]:
        return self.hint_queue if job.hint else self.queues[job.priority]

    @property
    def running(self) -> Job | None:
        """The job that took the slot first among those in it now (None: it is free)."""
        return self.batch[0] if self.batch else None

    @property
    def idle(self) -> bool:
        return not self.batch and not any(self._all_queues())

    def view(self) -> SchedulerView:
        """Whether the dispatcher runs and how busy the slot is (peers, ``/health``)."""
        return SchedulerView(
            alive=self.alive,
            slot_busy=self.running is not None,
            idle=self.idle,
            queued={p.label: len(q) for p, q in self.queues.items()},
        )

    def snapshot(self) -> dict[str, Any]:
        """A JSON view of the slot, the queues and the gates (``GET /v1/scheduler``)."""
        now = self.clock()

        def describe(job: Job) -> dict[str, Any]:
            return {
                "id": job.id,
                "kind": job.kind,
                "priority": HINT_LANE if job.hint else job.priority.label,
                "state": job.state.value,
                "waited_seconds": round(now - job.submitted_at, 3),
                "preemptions": job.preemptions,
            }

        return {
            "object": "scheduler",
            "slot": describe(self.running) if self.running else None,
            "batch": [describe(job) for job in self.batch],
            "queues": {
                **{p.label: [describe(j) for j in q] for p, q in self.queues.items()},
                HINT_LANE: [describe(j) for j in self.hint_queue],
            },
            "gates": self.gates.closed(now),
            "prefill_freeze_holders": sorted(self.gates.freeze_holders),
            "completed_jobs": self.completed,
            "max_occupancy_seen": self.max_occupancy_seen,
        }

    # -- dispatcher ----------------------------------------------------------------------------

    def _changed(self) -> None:
        self._wakeup.set()
        self._maybe_preempt()
        self._maybe_join()
        self._publish()

    def _maybe_preempt(self) -> None:
        for running in list(self.batch):
            decision = policy.on_waiting(running, self._all_queues(), self.queues[Priority.USER])
            if decision is OnWaiting.CANCEL:
                self._withdraw(running)  # speculative work gives way to anything, not resumed
            elif decision is OnWaiting.PAUSE and not running.preempt_requested:
                running.may_pause_inside_pass = policy.room_to_keep_memory(
                    self._all_queues(), self.config.max_paused_with_memory
                )
                running.preempt_requested = True

    def _maybe_join(self) -> None:
        """Hand the inference thread each waiting job that may join the batch now: the one
        the policy would pick next, while it fits (``policy.may_join``)."""
        while self.batch and self._batch_open:
            job = policy.pick(
                self._all_queues(), self.gates, self.clock(), self.config.ageing_after
            )
            if job is None or not policy.may_join(self.batch, job):
                return
            with self._batch_lock:
                if not self._batch_open:
                    return  # the inference thread found the batch empty and left
                self._queue_of(job).remove(job)
                self._enter(job)
                self._joining.append(job)
            log.debug("job %s (%s) joins a batch of %d", job.id, lane(job), len(self.batch))

    def _expire_waiting(self, now: float) -> None:
        for job in policy.expired(self._all_queues(), now, self.config.max_queue_wait):
            self._queue_of(job).remove(job)
            self.observer.job_rejected(lane(job), "queue_timeout")
            self._finish(
                job,
                JobState.FAILED,
                ServiceUnavailableError(
                    f"waited {now - job.submitted_at:.0f} s for the inference slot "
                    f"(limit {self.config.max_queue_wait:.0f} s); retry later"
                ),
            )

    async def _dispatch(self) -> None:
        job: Job | None = None
        try:
            while True:
                job = None
                self._wakeup.clear()
                now = self.clock()
                self._expire_waiting(now)
                job = policy.pick(self._all_queues(), self.gates, now, self.config.ageing_after)
                self._publish()  # after the expired jobs left
                if job is None:
                    deadline = policy.next_deadline(
                        self._all_queues(), self.gates, now, self.config
                    )
                    timeout = None if deadline is None else max(0.0, deadline - self.clock())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), timeout)
                    continue
                self._queue_of(job).remove(job)
                await self._run(job)
        except Exception as exc:  # a bug: say so (log, /health, callers) rather than hang
            self._died(exc, job)

    def _died(self, exc: Exception, job: Job | None) -> None:
        """The dispatcher ended on an error: every job it holds fails with a 503, and from
        now on ``alive`` is False and a submit is refused."""
        log.critical("the scheduler's dispatcher died; no job will run again", exc_info=exc)
        error = ServiceUnavailableError(_DEAD)
        for member in {*self.batch, *([job] if job is not None else [])}:
            if not member.finished:
                self._finish(member, JobState.FAILED, error)
        self.batch.clear()
        for queue in self._all_queues():
            while queue:
                self._finish(queue.popleft(), JobState.FAILED, error)
        self._publish()

    def _refuse_when_dead(self) -> None:
        if self._task is not None and self._task.done():
            raise ServiceUnavailableError(_DEAD)

    async def _run(self, job: Job) -> None:
        """Run a batch in the slot, from ``job`` until the last job in it left; others join
        meanwhile (``_maybe_join``)."""
        assert not self.batch, "two batches in the slot"
        loop = asyncio.get_running_loop()
        self._batch_open = True
        self._enter(job)
        self._joining.append(job)
        self.observer.slot_taken()
        self._maybe_preempt()  # a user job may have queued while this one waited
        self._maybe_join()
        self._publish()
        started = time.perf_counter()
        try:
            await loop.run_in_executor(self._thread, self._run_batch, loop)
        finally:
            self.observer.slot_freed(time.perf_counter() - started)
            self._publish()

    def _enter(self, job: Job) -> None:
        """``job`` takes its place in the slot (on the loop)."""
        now = self.clock()
        if job.started_at is None:
            job.started_at = now
            self.observer.job_waited(job.priority.label, now - job.submitted_at)
            log.debug(
                "job %s (%s) starts after %.1f ms",
                job.id,
                lane(job),
                1e3 * (now - job.submitted_at),
            )
        job.state = JobState.RUNNING
        self.batch.append(job)
        self.observer.batch_changed(len(self.batch))
        # A typing hint's prefill is no step of a user's pipeline: it arms no pipeline lock
        # (a hinted background task would otherwise wait out the grace after its own hint).
        if runs_user_job(job):
            self.gates.user_running = True

    def _left(self, job: Job, end: SliceEnd, held: float) -> None:
        """``job`` left the slot (on the loop, told by the inference thread)."""
        self.batch.remove(job)
        self.observer.batch_changed(len(self.batch))
        if runs_user_job(job) and not any(runs_user_job(j) for j in self.batch):
            self.gates.user_running = False
            self.gates.last_user_end = self.clock()
        if end == SliceEnd.PREEMPTED:
            job.state = JobState.PREEMPTED
            job.preemptions += 1
            self.observer.job_preempted(lane(job), job.paused_inside_pass)
            self._queue_of(job).appendleft(job)
            asyncio.get_running_loop().create_task(self._limit_paused_memory())
        elif end == SliceEnd.CANCELLED:
            self.observer.job_cancelled(job.priority.label, "running")
            self._finish(job, JobState.CANCELLED)
        elif end == SliceEnd.FAILED:
            self._finish(job, JobState.FAILED, job.error)
        else:
            self._mean_job_seconds = 0.8 * self._mean_job_seconds + 0.2 * held
            self._finish(job, JobState.DONE)
        self._changed()

    async def _limit_paused_memory(self) -> None:
        """Keep at most ``max_paused_with_memory`` paused jobs holding engine memory.

        The ones paused longest give theirs up first; they recompute on resume. (On the
        inference thread: after the batch, when one still runs.)
        """
        excess = policy.memory_to_release(self._all_queues(), self.config.max_paused_with_memory)
        loop = asyncio.get_running_loop()
        for job in excess:
            if await loop.run_in_executor(self._thread, _release_if_paused, job):
                job.memory_released = True
                self.observer.job_memory_released(job.priority.label)

    def _run_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Advance the batch's jobs in turn, a step each, until none is left (on the
        inference thread). Each job that leaves is reported to the loop after its events."""
        with self._occupancy_lock:
            self._occupancy += 1
            self.max_occupancy_seen = max(self.max_occupancy_seen, self._occupancy)
        slices: list[JobSlice] = []
        trace = self._trace
        try:
            while True:
                with self._batch_lock:
                    while self._joining:
                        slices.append(self._slice_of(self._joining.popleft(), loop))
                    if not slices:
                        self._batch_open = False
                        return
                for turn in list(slices):
                    started = time.perf_counter() if trace is not None else 0.0
                    end = turn.advance()
                    if trace is not None:
                        job = turn.job
                        trace.note(job.id, lane(job), end or turn.gave, started, len(slices))
                    if end is not None:
                        slices.remove(turn)
                        held = turn.end()
                        loop.call_soon_threadsafe(self._left, turn.job, end, held)
        finally:
            with self._occupancy_lock:
                self._occupancy -= 1
            if trace is not None:
                trace.flush()

    def _slice_of(self, job: Job, loop: asyncio.AbstractEventLoop) -> JobSlice:
        return JobSlice(job, loop, self.config.token_flush, self._user_first_tokens.append)

    def _withdraw(self, job: Job) -> None:
        """Cancel ``job`` (its handle's ``cancel``): dropped if it waits; a running job stops
        at its next step; a finished one is left as it ended."""
        if job.finished:
            return
        job.cancel_requested = True
        for queue in self._all_queues():
            if job in queue:
                queue.remove(job)
                stage = "preempted" if job.state is JobState.PREEMPTED else "queued"
                self.observer.job_cancelled(lane(job), stage)
                if job.steps is not None:
                    # A paused job holds engine state: release it on the engine's thread.
                    self._thread.submit(close_steps, job)
                self._finish(job, JobState.CANCELLED)
                break
        self._changed()

    def _finish(self, job: Job, state: JobState, error: BaseException | None = None) -> None:
        job.state = state
        if error is not None:
            job.error = error
        self.completed += 1
        job.close_outbox()
        self._wakeup.set()

    def _publish(self) -> None:
        """Publish the state the inference thread reads (one assignment), then the gauges.
        Called on the loop after every change to the queues, the gates or the slot."""
        batch, gates = self.batch, self.gates
        self.state = SlotState(
            runs_user_job=any(runs_user_job(job) for job in batch),
            runs_hint=any(job.hint for job in batch),
            stopping=any(job.preempt_requested or job.cancel_requested for job in batch),
            user_waiting=policy.waiting(self.queues[Priority.USER]),
            user_running=gates.user_running,
            last_user_end=gates.last_user_end,
            typing_until=gates.typing_ends(),
            freeze_held=bool(gates.freeze_holders),
        )
        closed = self.gates.closed(self.clock())
        depths = {priority.label: len(queue) for priority, queue in self.queues.items()}
        depths[HINT_LANE] = len(self.hint_queue)
        self.observer.lanes_changed({name: closed[name] for name in GATE_NAMES}, depths)


def _release_if_paused(job: Job) -> bool:
    """Free a paused job's engine memory, unless it has been resumed since it was chosen."""
    return job.state is JobState.PREEMPTED and job.release_memory()
