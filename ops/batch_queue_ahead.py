"""Whether a batch should queue its next pass ahead on this machine: an in-process A/B.

N sequences of the embedded SmolLM2 (greedy, a fixed prompt each) decode together through the
runner, advanced a token each in turn as the slot does, with ``BatchDecoder.queue_ahead`` on
and off, alternating which goes first; one discarded warm-up of each, then ``--runs``. Printed
and written as JSON: aggregate tokens/s (min/median/max), the ratio of medians and the load
average. This is what set ``queue_ahead`` off on a CPU (``gateway.engines.batch_decode``).

    .venv/bin/python ops/batch_queue_ahead.py --sequences 4 8 --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTIONS = (
    "Tell me about cats.",
    "What is 2+2? Explain it at length, step by step.",
    "Write a poem about the sea.",
    "List five fruits and say why each is good for you.",
)


def in_turn(generations: Sequence[Iterator[Any]]) -> int:
    """Advance each generation a token at a time, in turn; the tokens generated."""
    from gateway.seam.backend import Finished, TokenEvent

    tokens, live = 0, set(range(len(generations)))
    while live:
        for i in sorted(live):
            for event in generations[i]:
                if isinstance(event, TokenEvent):
                    tokens += len(event.token_ids)
                    break
                if isinstance(event, Finished):
                    break
            else:
                live.discard(i)
    return tokens


def main(argv: list[str]) -> int:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported (its BLAS)
    from bench.stats import Summary, ratio, table, write_json
    from gateway.config import default_cache_dir
    from gateway.engines.mlx_runner import MLXRunner
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
    from gateway.seam.backend import SamplingParams

    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    folder = ModelStore(default_cache_dir()).path_for(DEFAULT_MODEL_ID)
    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute, max_batch=max(args.sequences))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    load = os.getloadavg()
    rows: list[tuple[str, str, Summary]] = []
    result: dict[str, Any] = {}
    for n in args.sequences:
        prompts = [
            runner.render_chat([{"role": "user", "content": f"{QUESTIONS[i % 4]} ({i})"}])
            for i in range(n)
        ]
        rates: dict[bool, list[float]] = {True: [], False: []}
        for index in range(args.runs + 1):
            for queued in (True, False) if index % 2 == 0 else (False, True):
                runner.batch.queue_ahead = queued
                started = time.perf_counter()
                tokens = in_turn([runner.generate(p, params) for p in prompts])
                if index:  # the first of each: the warm-up
                    rates[queued].append(tokens / (time.perf_counter() - started))
        ahead, unqueued = Summary.of(rates[True]), Summary.of(rates[False])
        rows += [(f"tok/s, {n} sequences", "queued ahead", ahead)]
        rows += [(f"tok/s, {n} sequences", "not queued", unqueued)]
        result[str(n)] = {
            "queued_ahead": ahead.as_dict(),
            "not_queued": unqueued.as_dict(),
            "ahead_over_not": ratio(ahead, unqueued),
        }
    load_after = os.getloadavg()
    print(table(rows))
    print(f"load average at the start {load}, at the end {load_after}")
    write_json(
        args.json,
        {
            "benchmark": "batch_queue_ahead",
            "compute": compute.as_dict(),
            "runs": args.runs,
            "max_tokens": args.max_tokens,
            "load_average": {"start": load, "end": load_after},
            "sequences": result,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
