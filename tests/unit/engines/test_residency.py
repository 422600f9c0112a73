"""Lazy loading, keep-alive and the memory budget, with fake runners and the real scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.engines import residency
from gateway.engines.residency import LocalModels, Resident
from gateway.errors import ServiceUnavailableError
from gateway.metrics import GatewayMetrics
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import Priority
from tests.unit.fake_runner import FakeRunner

MODEL_BYTES = 100


class CountingRunner(FakeRunner):
    closed = 0

    def close(self) -> None:
        CountingRunner.closed += 1


@pytest.fixture
async def slot() -> AsyncIterator[Scheduler]:
    config = SchedulerConfig(max_queued={p: 8 for p in Priority}, max_queue_wait=5.0)
    scheduler = Scheduler(config, GatewayMetrics().scheduler)
    await scheduler.start()
    yield scheduler
    await scheduler.stop()


def make(
    scheduler: Scheduler, budget: int, keep_alive: float = 0.0
) -> tuple[LocalModels, Resident, Resident]:
    models = LocalModels(
        scheduler, GatewayMetrics().residency, budget, memory_probe=lambda: {"active": 0, "peak": 0}
    )
    a, b = (
        models.register(Resident(name, f"model-{name}", CountingRunner, MODEL_BYTES, keep_alive))
        for name in ("a", "b")
    )
    return models, a, b


async def test_loads_on_first_use_in_the_slot(slot: Scheduler) -> None:
    models, a, _ = make(slot, budget=1000)
    assert a.state == "unloaded"
    runner = await models.acquire(a)
    assert a.runner is runner and a.state == "loaded" and a.loaded_bytes == MODEL_BYTES
    assert slot.snapshot()["completed_jobs"] == 1  # the load was a job in the slot
    models.release(a)


async def test_a_budget_for_one_model_unloads_the_idle_one(slot: Scheduler) -> None:
    models, a, b = make(slot, budget=150)
    await models.acquire(a)
    models.release(a)
    closed = CountingRunner.closed
    await models.acquire(b)
    assert (a.state, b.state) == ("unloaded", "loaded")
    await asyncio.sleep(0.05)  # the weights are freed on the inference thread
    assert CountingRunner.closed == closed + 1
    models.release(b)


async def test_a_busy_model_is_not_unloaded_the_other_waits(slot: Scheduler) -> None:
    models, a, b = make(slot, budget=150)
    await models.acquire(a)  # held: in use
    waiting = asyncio.create_task(models.acquire(b))
    await asyncio.sleep(0.1)
    assert not waiting.done() and a.state == "loaded"
    models.release(a)
    await asyncio.wait_for(waiting, 3)
    assert (a.state, b.state) == ("unloaded", "loaded")
    models.release(b)


async def test_a_model_larger_than_the_budget_is_refused(slot: Scheduler) -> None:
    models, a, _ = make(slot, budget=50)
    with pytest.raises(ServiceUnavailableError, match="memory_budget_bytes"):
        await models.acquire(a)
    assert a.in_use == 0 and a.state == "unloaded"


async def test_keep_alive_unloads_an_idle_model(
    slot: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(residency, "KEEP_ALIVE_CHECK_SECONDS", 0.01)
    models, a, _ = make(slot, budget=1000, keep_alive=0.05)
    await models.start()
    try:
        await models.acquire(a)
        await asyncio.sleep(0.15)
        assert a.state == "loaded"  # in use: never unloaded
        models.release(a)
        await asyncio.sleep(0.2)
        assert a.state == "unloaded"
        await models.acquire(a)  # and it comes back on the next use
        assert a.state == "loaded"
        models.release(a)
    finally:
        await models.stop()
