"""The slot's turn trace (``GATEWAY_TRACE_DIR``): every turn noted, summarized by kind."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from gateway.scheduler.jobs import JobSpec
from gateway.scheduler.turn_trace import READY_SECONDS, TRACE_DIR_ENV, TRACE_FILE, summarize
from gateway.seam.backend import Priority
from tests.unit.scheduler.test_slot import FakeEngine, collect, make_scheduler


async def test_a_traced_slot_notes_each_turn_of_each_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    scheduler = make_scheduler()
    await scheduler.start()
    try:
        began = time.perf_counter()
        engine = FakeEngine()
        jobs = [scheduler.submit(JobSpec(Priority.USER, engine.work(n, steps=3))) for n in "ab"]
        await asyncio.gather(*(collect(job) for job in jobs))
    finally:
        await scheduler.stop()
    rows = [json.loads(line) for line in (tmp_path / TRACE_FILE).read_text().splitlines()]
    assert sorted({row["job"] for row in rows}) == sorted(job.id for job in jobs)
    summary = summarize(tmp_path / TRACE_FILE, began)
    # Three steps (the fake engine's events are ints) and the end of each job.
    assert summary["kinds"]["user: int"]["count"] == 6
    assert summary["kinds"]["user: done"]["count"] == 2
    assert summary["turns"] == 8
    assert summary["in_turns_s"] <= summary["span_s"]
    assert summarize(tmp_path / TRACE_FILE, time.perf_counter())["turns"] == 0


def test_tokens_are_told_apart_first_computed_and_ready(tmp_path: Path) -> None:
    def turn(job: str, at: float, seconds: float, jobs: int = 2) -> dict[str, object]:
        return {"job": job, "lane": "user", "gave": "TokenEvent", "at": at, "seconds": seconds,
                "jobs": jobs}  # fmt: skip

    rows = [
        turn("a", 1.0, 0.010, 1),  # a's first token
        turn("b", 1.01, 0.008),  # b's first token
        turn("a", 1.02, 0.005),  # a computes the batch's step
        turn("b", 1.025, READY_SECONDS / 2),  # b finds its token drawn
    ]
    path = tmp_path / TRACE_FILE
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = summarize(path)
    kinds = summary["kinds"]
    assert kinds["user: first token"]["count"] == 2
    assert kinds["user: token (computed)"] == {"count": 1, "seconds": 0.005}
    assert kinds["user: token (ready)"]["count"] == 1
    assert summary["tokens_by_jobs_in_slot"]["2"]["tokens"] == 2
    assert summary["span_s"] == pytest.approx(0.025 + READY_SECONDS / 2)
