"""The single-slot scheduler with fake engine work (deterministic steps, instrumented)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gateway.errors import QueueFullError, ServiceUnavailableError
from gateway.metrics import GatewayMetrics
from gateway.scheduler.jobs import JobHandle, JobKind, JobSpec, JobState
from gateway.scheduler.pacing import PASS_POINT
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import Priority

STEP_SECONDS = 0.002


@dataclass
class FakeEngine:
    """Counts how many jobs compute at once and in which order they started."""

    active: int = 0
    max_active: int = 0
    started: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def work(self, name: str, steps: int = 5, step_seconds: float = STEP_SECONDS):
        def run() -> Iterator[int]:
            self.started.append(name)
            for index in range(steps):
                with self.lock:
                    self.active += 1
                    self.max_active = max(self.max_active, self.active)
                time.sleep(step_seconds)
                with self.lock:
                    self.active -= 1
                yield index

        return run


def make_scheduler(**overrides: object) -> Scheduler:
    config = dict(
        max_queued={Priority.USER: 64, Priority.TASK: 64, Priority.BACKGROUND: 64},
        max_queue_wait=30.0,
        ageing_after=30.0,
        pipeline_grace=0.0,
        typing_quiet=0.0,
    )
    config.update(overrides)
    return Scheduler(SchedulerConfig(**config), GatewayMetrics().scheduler)  # type: ignore[arg-type]


@pytest.fixture
async def scheduler():
    running = make_scheduler()
    await running.start()
    yield running
    await running.stop()


async def collect(job: JobHandle) -> list[int]:
    return [event async for event in job.events()]


async def blocked_slot(
    scheduler: Scheduler, engine: FakeEngine, seconds: float = 0.15
) -> JobHandle:
    """Occupy the slot with a user job so that what is submitted next queues up."""
    blocker = scheduler.submit(
        JobSpec(
            Priority.USER, engine.work("blocker", steps=1, step_seconds=seconds), preemptible=False
        )
    )
    while blocker.state is not JobState.RUNNING:
        await asyncio.sleep(0.001)
    return blocker


async def test_never_two_jobs_in_the_slot_under_mixed_load(scheduler: Scheduler) -> None:
    engine = FakeEngine()
    jobs = [
        scheduler.submit(JobSpec(list(Priority)[i % 3], engine.work(f"job{i}", steps=8)))
        for i in range(24)
    ]
    results = await asyncio.gather(*(collect(j) for j in jobs))
    assert engine.max_active == 1
    assert scheduler.max_occupancy_seen == 1
    assert all(r == list(range(8)) for r in results), "preemption lost or duplicated steps"
    assert all(j.state is JobState.DONE for j in jobs)


async def test_priority_classes_then_fifo(scheduler: Scheduler) -> None:
    engine = FakeEngine()
    blocker = await blocked_slot(scheduler, engine)
    names = ["bg1", "task1", "user1", "bg2", "task2", "user2"]
    classes = {"bg": Priority.BACKGROUND, "task": Priority.TASK, "user": Priority.USER}
    jobs = [
        scheduler.submit(
            JobSpec(classes[n.rstrip("12")], engine.work(n, steps=1), preemptible=False)
        )
        for n in names
    ]
    await asyncio.gather(blocker.wait(), *(j.wait() for j in jobs))
    assert engine.started == ["blocker", "user1", "user2", "task1", "task2", "bg1", "bg2"]


async def test_user_job_preempts_background_which_resumes_without_loss() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    engine = FakeEngine()
    background = scheduler.submit(
        JobSpec(Priority.BACKGROUND, engine.work("bg", steps=60, step_seconds=0.005))
    )
    events: list[int] = []

    async def consume() -> None:
        async for event in background.events():
            events.append(event)

    consumer = asyncio.create_task(consume())
    while len(events) < 5:
        await asyncio.sleep(0.001)
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=3)))
    await user.wait()
    assert background.state is JobState.PREEMPTED or background.preemptions == 1
    paused_at = len(events)
    assert paused_at < 60, "the background job should have been paused, not finished"
    await consumer
    assert events == list(range(60))
    assert background.preemptions == 1
    assert engine.max_active == 1
    await scheduler.stop()


async def test_cancel_queued_and_running_jobs(scheduler: Scheduler) -> None:
    engine = FakeEngine()
    running = scheduler.submit(
        JobSpec(Priority.USER, engine.work("long", steps=1000, step_seconds=0.005))
    )
    queued = scheduler.submit(JobSpec(Priority.USER, engine.work("never", steps=1)))
    while running.state is not JobState.RUNNING:
        await asyncio.sleep(0.001)
    queued.cancel()
    assert queued.state is JobState.CANCELLED
    cancelled_at = time.monotonic()
    running.cancel()
    await running.wait()
    assert time.monotonic() - cancelled_at < 0.1, "a running job stops within one step"
    assert running.state is JobState.CANCELLED
    assert "never" not in engine.started
    follower = scheduler.submit(JobSpec(Priority.USER, engine.work("next", steps=1)))
    await follower.wait()
    assert follower.state is JobState.DONE


async def test_full_queue_is_429_with_retry_after() -> None:
    scheduler = make_scheduler(
        max_queued={Priority.USER: 1, Priority.TASK: 1, Priority.BACKGROUND: 1}
    )
    await scheduler.start()
    engine = FakeEngine()
    await blocked_slot(scheduler, engine, seconds=0.2)
    scheduler.submit(JobSpec(Priority.USER, engine.work("waits", steps=1)))
    with pytest.raises(QueueFullError) as caught:
        scheduler.submit(JobSpec(Priority.USER, engine.work("refused", steps=1)))
    assert caught.value.status_code == 429 and caught.value.retry_after >= 1
    scheduler.submit(
        JobSpec(Priority.BACKGROUND, engine.work("other class", steps=1))
    )  # its own queue
    await scheduler.stop()


async def test_waiting_too_long_is_503() -> None:
    scheduler = make_scheduler(max_queue_wait=0.1)
    await scheduler.start()
    engine = FakeEngine()
    await blocked_slot(scheduler, engine, seconds=0.4)
    late = scheduler.submit(JobSpec(Priority.USER, engine.work("late", steps=1)))
    with pytest.raises(ServiceUnavailableError):
        await late.wait()
    assert "late" not in engine.started
    await scheduler.stop()


async def test_pipeline_lock_holds_background_during_the_grace() -> None:
    scheduler = make_scheduler(pipeline_grace=0.3)
    await scheduler.start()
    engine = FakeEngine()
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1)))
    await user.wait()
    ended = time.monotonic()
    assert scheduler.snapshot()["gates"]["pipeline_lock"] is True
    task = scheduler.submit(JobSpec(Priority.TASK, engine.work("task", steps=1)))
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("bg", steps=1)))
    await task.wait()
    assert time.monotonic() - ended < 0.25, "task work is not held by the pipeline lock"
    await background.wait()
    assert time.monotonic() - ended >= 0.29
    assert scheduler.snapshot()["gates"]["pipeline_lock"] is False
    await scheduler.stop()


async def test_typing_lock_holds_background_until_quiet() -> None:
    scheduler = make_scheduler(typing_quiet=0.3)
    await scheduler.start()
    engine = FakeEngine()
    scheduler.typing.note_typing("hint-1")
    typed = time.monotonic()
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("bg", steps=1)))
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1)))
    await user.wait()
    await asyncio.sleep(0.1)
    scheduler.typing.note_typing("hint-2")  # still typing: the lock is closed again
    retyped = time.monotonic()
    await background.wait()
    assert time.monotonic() - retyped >= 0.29
    assert retyped - typed >= 0.1
    await scheduler.stop()


async def test_the_request_a_hint_announced_ends_its_typing() -> None:
    scheduler = make_scheduler(typing_quiet=30.0)
    await scheduler.start()
    engine = FakeEngine()
    scheduler.typing.note_typing("hint-a")
    scheduler.typing.note_typing("hint-b")  # someone else types too
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("bg", steps=1)))
    scheduler.typing.end_typing("hint-a")
    await asyncio.sleep(0.05)
    assert scheduler.snapshot()["gates"]["typing_lock"] is True  # hint-b still holds it
    assert background.state is JobState.QUEUED
    scheduler.typing.end_typing("hint-b")
    await asyncio.wait_for(background.wait(), 5)  # nobody types: at once, not after 30 s
    assert scheduler.snapshot()["gates"]["typing_lock"] is False
    await scheduler.stop()


async def test_prefill_freeze_admits_only_user_jobs(scheduler: Scheduler) -> None:
    engine = FakeEngine()
    scheduler.typing.hold_prefill_freeze("hint-1")
    task = scheduler.submit(JobSpec(Priority.TASK, engine.work("task", steps=1)))
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("bg", steps=1)))
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1)))
    await user.wait()
    await asyncio.sleep(0.05)
    assert engine.started == ["user"]
    assert scheduler.snapshot()["gates"]["prefill_freeze"] is True
    scheduler.typing.release_prefill_freeze("hint-1")
    await asyncio.gather(task.wait(), background.wait())
    assert engine.started == ["user", "task", "bg"]


async def test_ageing_lets_old_background_work_compete_as_a_task() -> None:
    scheduler = make_scheduler(ageing_after=0.1)
    await scheduler.start()
    engine = FakeEngine()
    blocker = await blocked_slot(scheduler, engine, seconds=0.2)
    old_background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("old-bg", steps=1)))
    await asyncio.sleep(0.15)
    task = scheduler.submit(JobSpec(Priority.TASK, engine.work("task", steps=1)))
    await asyncio.gather(blocker.wait(), old_background.wait(), task.wait())
    assert engine.started == ["blocker", "old-bg", "task"]
    await scheduler.stop()


def test_priority_parsing() -> None:
    assert Priority.parse(None, Priority.USER) is Priority.USER
    assert Priority.parse("Background", Priority.USER) is Priority.BACKGROUND
    with pytest.raises(Exception, match="unknown priority"):
        Priority.parse("urgent", Priority.USER)


async def test_paused_jobs_beyond_the_limit_release_their_memory() -> None:
    scheduler = make_scheduler(max_paused_with_memory=1)
    await scheduler.start()
    engine = FakeEngine()
    released: list[str] = []

    began: set[str] = set()

    class HoldingMemory:
        """Steps that offer to free their memory while paused (``HoldsMemory``)."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.steps = engine.work(name, steps=60, step_seconds=0.005)()
            began.add(name)

        def __iter__(self) -> Iterator[int]:
            return self

        def __next__(self) -> int:
            return next(self.steps)

        @property
        def holds_memory(self) -> bool:
            return True

        def release_memory(self) -> bool:
            released.append(self.name)
            return True

    def holding_memory(priority: Priority, name: str) -> JobSpec:
        return JobSpec(priority, lambda: HoldingMemory(name))

    async def running(job: JobHandle, name: str) -> None:
        while job.state is not JobState.RUNNING or name not in began:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)

    background = scheduler.submit(holding_memory(Priority.BACKGROUND, "background"))
    await running(background, "background")
    task = scheduler.submit(holding_memory(Priority.TASK, "task"))  # waits: tasks do not preempt
    await scheduler.submit(JobSpec(Priority.USER, engine.work("user1", steps=2))).wait()
    assert released == [], "one paused job may keep its memory"
    await running(task, "task")
    await scheduler.submit(JobSpec(Priority.USER, engine.work("user2", steps=2))).wait()
    assert released == ["background"], "the job paused longest gives its memory up first"
    results = await asyncio.gather(collect(background), collect(task))
    assert results == [list(range(60)), list(range(60))]
    assert not background.memory_released, "resuming clears the released mark"
    await scheduler.stop()


async def test_an_abandoned_freeze_holds_task_work_at_most_its_bound() -> None:
    scheduler = make_scheduler(prefill_freeze_max=0.3)
    await scheduler.start()
    engine = FakeEngine()
    held_at = time.monotonic()
    scheduler.typing.hold_prefill_freeze("hint-abandoned")  # never released: nobody followed it up
    task = scheduler.submit(JobSpec(Priority.TASK, engine.work("task", steps=1)))
    await asyncio.wait_for(task.wait(), 3)
    waited = time.monotonic() - held_at
    assert 0.29 <= waited < 1.0
    assert scheduler.snapshot()["gates"]["prefill_freeze"] is False
    await scheduler.stop()


async def test_any_job_cancels_a_running_speculation(scheduler: Scheduler) -> None:
    engine = FakeEngine()
    speculation = scheduler.submit(
        JobSpec(
            Priority.USER,
            engine.work("speculation", steps=1000, step_seconds=0.005),
            kind=JobKind.SPECULATION,
        )
    )
    while speculation.state is not JobState.RUNNING:
        await asyncio.sleep(0.001)
    assert not scheduler.would_wait(Priority.TASK)  # it does not make the slot busy
    arrived = time.monotonic()
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("after", steps=1)))
    await speculation.wait()
    assert speculation.state is JobState.CANCELLED  # cancelled, not paused to resume
    assert time.monotonic() - arrived < 0.1
    await background.wait()
    assert background.state is JobState.DONE


async def test_a_dead_dispatcher_says_so_and_fails_its_jobs_instead_of_hanging() -> None:
    metrics = GatewayMetrics().scheduler

    def broken() -> None:
        raise RuntimeError("a bug in the slot's own code")

    metrics.slot_taken = broken  # type: ignore[method-assign]
    scheduler = Scheduler(SchedulerConfig(max_queued={p: 8 for p in Priority}), metrics)
    assert not scheduler.alive  # not started yet
    await scheduler.start()
    assert scheduler.alive
    engine = FakeEngine()
    first = scheduler.submit(JobSpec(Priority.USER, engine.work("first", steps=1)))
    queued = scheduler.submit(JobSpec(Priority.TASK, engine.work("queued", steps=1)))
    for job in (first, queued):
        with pytest.raises(ServiceUnavailableError, match="dispatcher has stopped"):
            await asyncio.wait_for(job.wait(), 2)
    assert not scheduler.alive
    assert engine.started == []
    with pytest.raises(ServiceUnavailableError):
        scheduler.submit(JobSpec(Priority.USER, engine.work("late", steps=1)))
    with pytest.raises(ServiceUnavailableError):
        scheduler.submit_hint(JobSpec(Priority.USER, engine.work("hint", steps=1)), "s")
    await scheduler.stop()  # still stops cleanly


@pytest.mark.parametrize(("kept", "paused_after"), [(4, (2, 1)), (0, (2, 3))])
async def test_a_user_pauses_background_work_inside_a_pass_and_points_are_not_handed_on(
    kept: int, paused_after: tuple[int, int]
) -> None:
    """A pass computed in stages yields ``PASS_POINT`` between them: the scheduler pauses
    there for a user job (not at the end of the pass) and never delivers the points —
    unless no paused job may keep its memory (``kept`` 0): a job paused inside a pass could
    not release it, so it pauses at the pass's end."""
    scheduler = make_scheduler(max_paused_with_memory=kept)
    await scheduler.start()
    stages_done: list[tuple[int, int]] = []

    def staged() -> Iterator[object]:  # 20 passes of 4 stages, a token after each pass
        for index in range(20):
            for stage in range(4):
                time.sleep(0.05 if stage == 1 else STEP_SECONDS)
                stages_done.append((index, stage))
                if stage < 3:
                    yield PASS_POINT
            yield index

    background = scheduler.submit(JobSpec(Priority.BACKGROUND, staged))
    events: list[object] = []

    async def consume() -> None:
        async for event in background.events():
            events.append(event)

    consumer = asyncio.create_task(consume())
    while not stages_done or stages_done[-1] != (2, 0):  # now in the third pass's stage 1
        await asyncio.sleep(0.001)
    seen: list[tuple[int, int]] = []

    def user_work() -> Iterator[int]:
        seen.append(stages_done[-1])
        yield 0

    await scheduler.submit(JobSpec(Priority.USER, user_work)).wait()
    await consumer
    assert seen == [paused_after]  # paused at the point after stage 1, inside the pass
    assert events == list(range(20))  # the points stayed on the inference thread
    assert background.preemptions == 1
    await scheduler.stop()
