"""A record of the slot's turns: where a batch's time goes, turn by turn (issue 33).

A sampling profile says which functions the inference thread was in; it cannot say how long
a batched step took at each batch size, what a joining sequence's first token cost, or how
long the slot sat idle between batches. Set ``GATEWAY_TRACE_DIR`` and the slot notes every
turn of a job (``JobSlice.advance``: when it began, how long it took, what it gave — a token,
a prefill chunk, its end — and how many jobs shared the slot), appending them as JSON lines
to ``turns.jsonl`` there after each batch. ``summarize`` turns a file into the figures
``gateway bench concurrency --trace-dir`` reports. For benchmarks only: off, it costs one
attribute read per turn.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

TRACE_DIR_ENV = "GATEWAY_TRACE_DIR"
TRACE_FILE = "turns.jsonl"
# A turn that gave a token in this much time or less found it drawn already (a batch's
# step computed by an earlier turn); longer ones computed it (or waited for the device).
READY_SECONDS = 0.0002


class TurnTrace:
    """The turns of the slot's batches, kept in memory during a batch, written after it."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / TRACE_FILE
        self.rows: list[dict[str, Any]] = []

    def note(self, job: str, lane: str, gave: str, started: float, jobs: int) -> None:
        """One turn of ``job``: it gave ``gave`` (an event's type, or how it ended)."""
        now = time.perf_counter()
        self.rows.append(
            {
                "job": job,
                "lane": lane,
                "gave": gave,
                "at": started,  # time.perf_counter(): the host's monotonic clock
                "seconds": now - started,
                "jobs": jobs,
            }
        )

    def flush(self) -> None:
        if not self.rows:
            return
        with self.path.open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in self.rows)
        self.rows.clear()


def trace_from_env() -> TurnTrace | None:
    folder = os.environ.get(TRACE_DIR_ENV)
    return TurnTrace(Path(folder)) if folder else None


def summarize(path: Path, since: float = 0.0) -> dict[str, Any]:
    """A trace's figures: the span from its first turn to its last, the time in turns and
    out of them (idle: no job in the slot, or the loop between turns), and per lane and kind
    of turn ("user: first token"; a later token that computed a step or found it ready, a
    prefill chunk, an end) the count and seconds; tokens by how many jobs shared the slot. Only the
    turns from ``since`` on (``time.perf_counter()``, the same monotonic clock in every
    process of the host: a benchmark's measured round, not its warm-up)."""
    lines = path.read_text().splitlines() if path.is_file() else []
    rows = [row for line in lines if (row := json.loads(line))["at"] >= since]
    if not rows:
        return {"turns": 0}
    span = max(r["at"] + r["seconds"] for r in rows) - min(r["at"] for r in rows)
    busy = sum(r["seconds"] for r in rows)
    kinds: dict[str, list[float]] = defaultdict(list)
    by_jobs: dict[int, list[float]] = defaultdict(list)
    tokens_seen: set[str] = set()
    for row in rows:
        kind = row["gave"]
        if kind == "TokenEvent":
            if row["job"] not in tokens_seen:
                kind = "first token"
                tokens_seen.add(row["job"])
            elif row["seconds"] <= READY_SECONDS:
                kind = "token (ready)"
            else:
                kind = "token (computed)"
            if kind != "first token":
                by_jobs[row["jobs"]].append(row["seconds"])
        kinds[f"{row['lane']}: {kind}"].append(row["seconds"])
    return {
        "turns": len(rows),
        "span_s": span,
        "in_turns_s": busy,
        "outside_turns_s": span - busy,
        "kinds": {k: {"count": len(v), "seconds": sum(v)} for k, v in sorted(kinds.items())},
        "tokens_by_jobs_in_slot": {
            str(n): {"tokens": len(v), "seconds": sum(v)} for n, v in sorted(by_jobs.items())
        },
    }
