"""Slot leases: work computed elsewhere on this Mac (a same-machine upstream) holds the slot."""

from __future__ import annotations

import asyncio

from gateway.metrics import GatewayMetrics
from gateway.scheduler.jobs import JobKind, JobSpec
from gateway.scheduler.lease import SlotLease
from gateway.scheduler.slot import Scheduler, SchedulerConfig
from gateway.seam.backend import Priority


def make() -> Scheduler:
    config = SchedulerConfig(max_queued={p: 8 for p in Priority}, pipeline_grace=0.0)
    return Scheduler(config, GatewayMetrics().scheduler)


async def test_a_lease_holds_the_slot_until_released() -> None:
    scheduler = make()
    await scheduler.start()
    try:
        ran: list[str] = []
        async with SlotLease(scheduler, Priority.USER, kind=JobKind.UPSTREAM):
            assert scheduler.snapshot()["slot"]["kind"] == "upstream"
            other = scheduler.submit(
                JobSpec(Priority.USER, work=lambda: iter([ran.append("other")]))
            )
            await asyncio.sleep(0.05)
            assert ran == []  # one inference at a time, wherever it computes
        await asyncio.wait_for(other.wait(), 2)
        assert ran == ["other"]
        assert scheduler.max_occupancy_seen == 1
    finally:
        await scheduler.stop()


async def test_a_lease_withdrawn_while_queued_never_runs() -> None:
    scheduler = make()
    await scheduler.start()
    try:
        async with SlotLease(scheduler, Priority.USER, kind=JobKind.UPSTREAM):
            waiting = SlotLease(scheduler, Priority.TASK, kind=JobKind.UPSTREAM)
            entering = asyncio.create_task(waiting.__aenter__())
            await asyncio.sleep(0.05)
            entering.cancel()
            await asyncio.gather(entering, return_exceptions=True)
            assert waiting.job is not None and waiting.job.finished
        await asyncio.sleep(0.05)
        assert scheduler.snapshot()["slot"] is None
    finally:
        await scheduler.stop()
