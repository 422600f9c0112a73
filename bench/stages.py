"""Passes computed whole vs in stages (``Pacing.pause_grain``), in the engine itself.

Background work that a user may preempt computes a pass (a decode step, a prefill chunk)
longer than the pause grain in groups of layers with a point to pause after each, instead
of whole with the next decode step queued ahead. What that costs and buys, on the gateway's
runner in this process (no HTTP, no scheduler: a fixed pacing), one fixed greedy prompt,
the variants interleaved in every run (their order alternating), one discarded warm-up:

* decode tokens/s (``--max-tokens`` tokens after the first);
* the grain: the mean and the longest time between two points where the scheduler could
  pause the job (a token or a ``PASS_POINT``) while decoding; a user arriving at a random
  moment waits about half the mean;
* prefill tokens/s of a ~1,000-token prompt in 32-token chunks (the size a background
  chunk has on this CPU while a user may arrive).
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Summary, ratio, table, write_json
from gateway.config import default_cache_dir
from gateway.engines.device import choose_compute_path
from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
from gateway.scheduler.pacing import (
    MIN_PAUSE_GRAIN_SECONDS,
    PASS_POINT,
    PAUSE_GRAIN_SECONDS,
    ChunkBudget,
)
from gateway.seam.backend import SamplingParams, TokenEvent

PREFILL_CHUNK = 32
PROMPT = "Explain, step by step, how a river carves a valley over thousands of years."
CONTEXT = "Rivers shape the land they cross, and the land shapes them in return. " * 70


@dataclass
class FixedPacing:
    """The scheduler's answers held fixed: passes whole, or in groups of about ``grain``."""

    grain: float | None

    def chunk_budget(self, base: int) -> ChunkBudget:
        return ChunkBudget(PREFILL_CHUNK)

    def decode_ahead(self) -> bool:
        return True

    def pause_grain(self) -> float | None:
        return self.grain


def decode_run(runner: Any, prompt: list[int], max_tokens: int) -> tuple[float, list[float]]:
    """Decode tokens/s after the first token, and the gaps between pause points."""
    params = SamplingParams(max_tokens=max_tokens + 1, temperature=0.0)
    points: list[float] = []
    tokens = 0
    for event in runner.generate(prompt, params):
        if event is PASS_POINT or isinstance(event, TokenEvent):
            points.append(time.perf_counter())
            if isinstance(event, TokenEvent):
                tokens += 1
                if tokens == 1:
                    points = [points[-1]]  # from the first token on: decode only
    gaps = [b - a for a, b in itertools.pairwise(points)]
    return (tokens - 1) / (points[-1] - points[0]), gaps


def prefill_run(runner: Any, tokens: list[int]) -> float:
    cache = runner.new_cache()
    started = time.perf_counter()
    for _ in runner.prefill(tokens, cache):
        pass
    return len(tokens) / (time.perf_counter() - started)


def main(args: argparse.Namespace) -> int:
    folder = Path(args.model_folder or ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID))
    compute = choose_compute_path()  # first: OpenBLAS is loaded before MLX (Linux CPU)
    from gateway.engines.mlx_runner import MLXRunner

    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute)
    prompt = runner.render_chat([{"role": "user", "content": PROMPT}])
    context = runner.encode(CONTEXT)[:1024]
    grains = (PAUSE_GRAIN_SECONDS, 0.005, MIN_PAUSE_GRAIN_SECONDS)  # the bounds, and between
    variants = {"whole, queued ahead": None, **{f"grain {g * 1e3:g} ms": g for g in grains}}
    decode: dict[str, list[float]] = {name: [] for name in variants}
    prefill: dict[str, list[float]] = {name: [] for name in variants}
    mean_gap: dict[str, list[float]] = {name: [] for name in variants}
    max_gap: dict[str, list[float]] = {name: [] for name in variants}
    for index in range(args.runs + 1):
        order = list(variants.items())
        for name, grain in order if index % 2 else reversed(order):
            runner.timing.pacing = FixedPacing(grain)
            rate, gaps = decode_run(runner, prompt, args.max_tokens)
            fill = prefill_run(runner, context)
            if index:  # the first run is the warm-up
                decode[name].append(rate)
                prefill[name].append(fill)
                mean_gap[name].append(sum(gaps) / len(gaps) * 1e3)
                max_gap[name].append(max(gaps) * 1e3)
    whole = "whole, queued ahead"
    rows: list[tuple[str, str, Summary]] = []
    result: dict[str, object] = {"benchmark": "stages", "runs": args.runs, "rows": {}}
    for metric, values in (
        ("decode tok/s", decode),
        ("ms between pause points (mean)", mean_gap),
        ("ms between pause points (max)", max_gap),
        (f"prefill tok/s ({PREFILL_CHUNK}-token chunks)", prefill),
    ):
        summaries = {name: Summary.of(v) for name, v in values.items()}
        rows += [(metric, name, s) for name, s in summaries.items()]
        result["rows"][metric] = {  # type: ignore[index]
            name: {**s.as_dict(), "ratio_to_whole": ratio(s, summaries[whole])}
            for name, s in summaries.items()
        }
    print(table(rows))
    for name in variants:
        print(
            f"{name}: decode {ratio(Summary.of(decode[name]), Summary.of(decode[whole])):.3f}, "
            f"prefill {ratio(Summary.of(prefill[name]), Summary.of(prefill[whole])):.3f} of whole"
        )
    write_json(args.json, result)
    return 0
