"""The compiled decode step against the eager one, in process: an A/B in the same runs.

One sequence, then N together as a batch (advanced a token each in turn, as the slot does),
decode through the runner (greedy, a fixed prompt each, speculation off so that every token
is a step) with its compiled steps (``gateway.engines.compiled_step``) and with them taken
away (``MLXRunner.compiled_step`` and ``BatchDecoder.compiled`` set to None: the eager
step), alternating which goes first; one discarded warm-up of each, then ``--runs``.
Printed and written as JSON: aggregate tokens/s (min/median/max), the ratio of medians,
whether the greedy tokens were the same both ways, and the load average.

    .venv/bin/python ops/compiled_step_ab.py --sequences 1 8 --json out.json
    .venv/bin/python ops/compiled_step_ab.py --model-folder /models/llama-1b-bf16 ...
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops.ab_runs import alternating, model_folder, report
from ops.batch_queue_ahead import QUESTIONS


def decoded(runner: Any, prompts: list[list[int]], params: Any) -> list[list[int]]:
    """Each prompt's greedy tokens, the generations advanced a token each in turn."""
    from gateway.seam.backend import Finished, TokenEvent

    generations = [runner.generate(p, params) for p in prompts]
    tokens: list[list[int]] = [[] for _ in prompts]
    live = set(range(len(prompts)))
    while live:
        for i in sorted(live):
            for event in generations[i]:
                if isinstance(event, TokenEvent):
                    tokens[i].extend(event.token_ids)
                    break
                if isinstance(event, Finished):
                    live.discard(i)
                    break
            else:
                live.discard(i)
    for generation in generations:  # (as the slot does: its loop leaves the batch now)
        generation.close()
    return tokens


def decoded_with(
    runner: Any, compiled: dict[str, Any], prompts: list[list[int]], params: Any, way: str
) -> tuple[float, list[list[int]]]:
    """Tokens/s of ``decoded`` with the steps compiled or eager (``way``), and the tokens."""
    on = way == "compiled"
    runner.compiled_step = compiled["single"] if on else None
    runner.batch.compiled = compiled["batch"] if on else None
    started = time.perf_counter()
    tokens = decoded(runner, prompts, params)
    return sum(map(len, tokens)) / (time.perf_counter() - started), tokens


def main(argv: list[str]) -> int:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported (its BLAS)
    from bench.stats import Summary, ratio
    from gateway.engines.mlx_runner import MLXRunner
    from gateway.modelstore.store import DEFAULT_MODEL_ID
    from gateway.seam.backend import SamplingParams

    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--model-folder", help="an mlx-lm folder (default: the embedded model)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    folder = model_folder(args.model_folder)
    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute, max_batch=max(args.sequences))
    runner.speculation = "off"
    compiled = {"single": runner.compiled_step, "batch": runner.batch.compiled}
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    load = os.getloadavg()
    rows: list[tuple[str, str, Summary]] = []
    result: dict[str, Any] = {"decode_step": runner.decode_step}
    for n in args.sequences:
        prompts = [
            runner.render_chat([{"role": "user", "content": f"{QUESTIONS[i % 4]} ({i})"}])
            for i in range(n)
        ]
        once = partial(decoded_with, runner, compiled, prompts, params)
        rates, texts = alternating(("compiled", "eager"), args.runs, once)
        fast, slow = Summary.of(rates["compiled"]), Summary.of(rates["eager"])
        rows += [(f"tok/s, {n} sequences", "compiled", fast)]
        rows += [(f"tok/s, {n} sequences", "eager", slow)]
        first = texts["compiled"][0]
        result[str(n)] = {
            "compiled": fast.as_dict(),
            "eager": slow.as_dict(),
            "compiled_over_eager": ratio(fast, slow),
            "same_tokens": all(t == first for way in texts for t in texts[way]),
        }
        print(f"{n} sequences: compiled / eager {ratio(fast, slow):.3f}, same tokens: "
              f"{result[str(n)]['same_tokens']}")  # fmt: skip
    report(args.json, rows, load, benchmark="compiled_step_ab", model_folder=str(folder),
           compute=compute.as_dict(), runs=args.runs, max_tokens=args.max_tokens,
           sequences=result)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
