"""The scheduler's two threads: the inference thread asks for pacing while the loop changes
the queues and the gates (issue 36: iterating a deque or a dict another thread changes raises
``RuntimeError: ... mutated during iteration``, which would fail the running job)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator

from gateway.metrics import GatewayMetrics
from gateway.scheduler.jobs import JobHandle, JobSpec, JobState
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import Priority

STRESS_SECONDS = 2.0
# The interpreter switches threads this often (default 5 ms): often enough that the race,
# when there is one, shows within the run (the code before issue 36: hundreds of errors).
SWITCH_SECONDS = 1e-5


def make_scheduler() -> Scheduler:
    config = SchedulerConfig(
        max_queued={Priority.USER: 64, Priority.TASK: 64, Priority.BACKGROUND: 64},
        typing_quiet=60.0,
    )
    return Scheduler(config, GatewayMetrics().scheduler)


async def test_pacing_on_the_inference_thread_while_the_loop_changes_queues_and_gates() -> None:
    scheduler = make_scheduler()
    await scheduler.start()
    done = threading.Event()
    asked = 0
    errors: list[BaseException] = []

    def pacer() -> Iterator[int]:  # asks as the runner does, between its passes
        nonlocal asked
        yield 0
        while not done.is_set():
            try:
                scheduler.chunk_budget(512)
                scheduler.decode_ahead()
                scheduler.pause_grain()
            except RuntimeError as exc:
                errors.append(exc)
            asked += 1

    # Not preemptible: the user jobs below wait behind it, as behind a model load.
    running = scheduler.submit(JobSpec(Priority.BACKGROUND, pacer, preemptible=False))
    events = running.events()
    await anext(events)  # it holds the slot, on the inference thread
    waiting: deque[JobHandle] = deque()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_SECONDS)
    try:
        ends = time.monotonic() + STRESS_SECONDS
        turn = 0
        while time.monotonic() < ends:
            turn += 1
            for _ in range(4):
                waiting.append(scheduler.submit(JobSpec(Priority.USER, _nothing)))
            while len(waiting) > 16:
                waiting.popleft().cancel()
            if turn % 4 == 0:
                holder = f"hint-{turn % 32}"
                scheduler.typing.note_typing(holder)
                scheduler.typing.hold_prefill_freeze(holder)
                scheduler.typing.end_typing(f"hint-{(turn + 8) % 32}")
                scheduler.typing.release_prefill_freeze(f"hint-{(turn + 12) % 32}")
            if turn % 64 == 0:
                await asyncio.sleep(0)
    finally:
        sys.setswitchinterval(previous)
        done.set()
        for job in waiting:
            job.cancel()
    async for _ in events:
        pass
    await scheduler.stop()
    assert running.state is JobState.DONE
    assert asked > 0
    assert not errors, f"{len(errors)} of {asked} pacing questions failed: {errors[0]!r}"


def _nothing() -> Iterator[int]:
    return iter(())
