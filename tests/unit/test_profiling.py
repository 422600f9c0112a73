"""ThreadSampler: one summary per thread, the busy function seen in its own thread's file."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gateway.profiling import ThreadSampler, read_summaries


def spin_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_samples_each_thread_into_its_own_summary(tmp_path: Path) -> None:
    sampler = ThreadSampler(tmp_path, interval=0.001)
    sampler.start()
    worker = threading.Thread(target=spin_for, args=(0.2,), name="busy-worker")
    worker.start()
    worker.join()
    sampler.finish()
    sampler.finish()  # once only
    summary = (tmp_path / "busy-worker.txt").read_text()
    assert summary.startswith("busy-worker: ")
    assert "test_profiling.py" in summary and "(spin_for)" in summary
    assert (tmp_path / "MainThread.txt").is_file()
    summaries = read_summaries(tmp_path)  # as the benchmarks read them back
    assert summaries["busy-worker"] == summary and "MainThread" in summaries
