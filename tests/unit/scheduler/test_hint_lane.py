"""Typing-hint prefills in their own lane (issue 23): bounded, newest per session, below the
user's requests and preemptible by them; prefill chunks sized by who may arrive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from gateway.scheduler.jobs import JobKind, JobSpec, JobState
from gateway.scheduler.pacing import (
    MIN_PAUSE_GRAIN_SECONDS,
    PAUSE_GRAIN_SECONDS,
    ChunkBudget,
    decodes_ahead,
    pause_grain,
    prefill_chunk_budget,
    user_may_arrive,
)
from gateway.seam.backend import Priority, TokenEvent
from tests.unit.scheduler.test_slot import FakeEngine, blocked_slot, make_scheduler


def hint(engine: FakeEngine, name: str, steps: int = 1, step_seconds: float = 0.002) -> JobSpec:
    return JobSpec(
        Priority.USER,
        engine.work(name, steps=steps, step_seconds=step_seconds),
        kind=JobKind.PREFILL,
    )


async def test_a_hint_flood_never_fills_the_user_queue_and_never_429s() -> None:
    scheduler = make_scheduler(max_queued_hints=4)
    await scheduler.start()
    engine = FakeEngine()
    blocker = await blocked_slot(scheduler, engine)
    hints = [scheduler.submit_hint(hint(engine, f"h{i}"), session=None) for i in range(200)]
    assert len(scheduler.queues[Priority.USER]) == 0
    assert len(scheduler.hint_queue) == 4
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1), preemptible=False))
    await asyncio.gather(blocker.wait(), user.wait(), *(h.wait() for h in hints))
    # The user's request ran right after the blocker, before any waiting hint.
    assert engine.started[:2] == ["blocker", "user"]
    assert engine.started[2:] == ["h196", "h197", "h198", "h199"]  # the newest kept
    assert sum(h.state is JobState.CANCELLED for h in hints) == 196
    await scheduler.stop()


async def test_the_newest_hint_of_a_session_replaces_its_queued_one() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    engine = FakeEngine()
    blocker = await blocked_slot(scheduler, engine)
    old = scheduler.submit_hint(hint(engine, "a1"), session="a")
    other = scheduler.submit_hint(hint(engine, "b1"), session="b")
    new = scheduler.submit_hint(hint(engine, "a2"), session="a")
    await asyncio.gather(blocker.wait(), old.wait(), other.wait(), new.wait())
    assert old.state is JobState.CANCELLED
    assert engine.started == ["blocker", "b1", "a2"]
    await scheduler.stop()


async def test_hints_run_before_task_work_and_are_preempted_by_a_user_job() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    engine = FakeEngine()
    blocker = await blocked_slot(scheduler, engine)
    task = scheduler.submit(JobSpec(Priority.TASK, engine.work("task", steps=1)))
    long_hint = scheduler.submit_hint(hint(engine, "hint", steps=200, step_seconds=0.005), "s")
    await blocker.wait()
    while "hint" not in engine.started:  # its first step computed, not only given the slot
        await asyncio.sleep(0.001)
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1)))
    await asyncio.wait_for(user.wait(), 0.5)  # not after the hint's 1 s of steps
    assert long_hint.preemptions == 1
    await asyncio.gather(long_hint.wait(), task.wait())
    assert engine.started == ["blocker", "hint", "user", "task"], engine.started
    await scheduler.stop()


async def test_a_user_job_would_not_wait_for_a_hint() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    engine = FakeEngine()
    running = scheduler.submit_hint(hint(engine, "hint", steps=100, step_seconds=0.005), "s")
    while running.state is not JobState.RUNNING:
        await asyncio.sleep(0.001)
    assert not scheduler.would_wait(Priority.USER)
    assert scheduler.would_wait(Priority.TASK)
    running.cancel()
    await running.wait()
    await scheduler.stop()


def test_chunks_are_large_when_no_user_can_be_waiting_and_small_when_one_may() -> None:
    base = 64
    assert prefill_chunk_budget(base, runs_user_job=True, may_arrive=True).tokens > base
    nobody = prefill_chunk_budget(base, runs_user_job=False, may_arrive=False)
    assert nobody == ChunkBudget(base)  # nobody around: the engine's own, no time limit
    small = prefill_chunk_budget(base, runs_user_job=False, may_arrive=True)
    assert small.tokens < base and small.tokens >= 16
    assert small.seconds is not None and small.seconds <= 0.05
    # A hint's prefill keeps the engine's size: the request it prepares waits for it.
    hint = prefill_chunk_budget(base, runs_user_job=False, may_arrive=True, runs_hint=True)
    assert hint == ChunkBudget(base)
    assert prefill_chunk_budget(512, runs_user_job=False, may_arrive=True).tokens == 128


def test_a_user_may_arrive_while_one_waits_types_or_was_here_lately() -> None:
    assert user_may_arrive(user_waiting=True, typing=False, since_user_job=1e9)
    assert user_may_arrive(user_waiting=False, typing=True, since_user_job=1e9)
    assert user_may_arrive(user_waiting=False, typing=False, since_user_job=5.0)
    assert not user_may_arrive(user_waiting=False, typing=False, since_user_job=1e9)


def test_decode_steps_are_queued_ahead_unless_the_job_is_about_to_stop() -> None:
    assert decodes_ahead(stopping=False)
    assert not decodes_ahead(stopping=True)


async def test_background_work_is_paced_finely_once_a_user_has_been_here() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    seen: list[tuple[ChunkBudget, bool]] = []

    def paced() -> Iterator[int]:  # asks as the runner does, on the inference thread
        seen.append((scheduler.chunk_budget(64), scheduler.decode_ahead()))
        grains.append(scheduler.pause_grain())
        yield 0

    grains: list[float | None] = []
    await scheduler.submit(JobSpec(Priority.BACKGROUND, paced)).wait()
    await scheduler.submit(JobSpec(Priority.USER, paced)).wait()
    await scheduler.submit(JobSpec(Priority.BACKGROUND, paced)).wait()
    nobody, _, after_user = seen
    assert nobody == (ChunkBudget(64), True)  # nobody around: throughput
    assert after_user[0].seconds is not None and after_user[0].tokens < 64
    assert after_user[1] is True  # asked alone: a pause stops it before the next step
    # Passes whole with nobody around and for the user's own job; a grain after a user.
    assert grains == [None, None, PAUSE_GRAIN_SECONDS]
    await scheduler.stop()


def test_passes_have_a_pause_grain_only_for_work_a_user_may_preempt() -> None:
    assert pause_grain(runs_user_job=False, may_arrive=True) == PAUSE_GRAIN_SECONDS
    assert pause_grain(runs_user_job=False, may_arrive=False) is None
    assert pause_grain(runs_user_job=True, may_arrive=True) is None

    # A tenth of a recent user job's first token, within bounds: finer on a fast device.
    def grain(first_token: float) -> float | None:
        return pause_grain(runs_user_job=False, may_arrive=True, user_first_token=first_token)

    assert grain(0.07) == pytest.approx(0.007)
    assert grain(0.15) == PAUSE_GRAIN_SECONDS
    assert grain(0.002) == MIN_PAUSE_GRAIN_SECONDS
    assert pause_grain(runs_user_job=False, may_arrive=False, user_first_token=0.03) is None


async def test_the_grain_follows_the_shortest_recent_user_first_token() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    grains: list[float | None] = []

    def user(seconds: float) -> Callable[[], Iterator[object]]:
        def run() -> Iterator[object]:
            time.sleep(seconds)  # its prefill
            yield TokenEvent("a", (1,))
            time.sleep(0.05)  # its decode: not part of the first token
            yield TokenEvent("b", (2,))

        return run

    def background() -> Iterator[int]:
        grains.append(scheduler.pause_grain())
        yield 0

    for seconds in (0.06, 0.3):  # a short chat, then a long prompt: the short one counts
        await scheduler.submit(JobSpec(Priority.USER, user(seconds))).wait()
        await scheduler.submit(JobSpec(Priority.BACKGROUND, background)).wait()
    assert all(g is not None and 0.006 <= g < 0.009 for g in grains), grains
    await scheduler.stop()


async def test_a_hint_prefill_arms_no_pipeline_lock() -> None:
    # The grace after a user job keeps a user's pipeline together; a hint is no such step:
    # a background task the hint announced starts right after it, not a grace later.
    scheduler = make_scheduler(pipeline_grace=30.0)
    await scheduler.start()
    engine = FakeEngine()
    warmed = scheduler.submit_hint(hint(engine, "h"), session=None)
    await warmed.wait()
    assert scheduler.snapshot()["gates"]["pipeline_lock"] is False
    background = scheduler.submit(JobSpec(Priority.BACKGROUND, engine.work("bg", steps=1)))
    await asyncio.wait_for(background.wait(), 5)
    user = scheduler.submit(JobSpec(Priority.USER, engine.work("user", steps=1)))
    await user.wait()
    assert scheduler.snapshot()["gates"]["pipeline_lock"] is True  # a user job does arm it
    await scheduler.stop()
