"""KV buffers sized once before a prefill (``compiled_step.reserve``) against mlx-lm's growth
a chunk at a time, in process: an A/B in the same runs (issue 32: a request's own cost).

Two rows per context size, on the runner's compiled step (the default):

* ``new turn``: a kept conversation of N tokens (its buffers full, as the prefix store keeps
  them; copied for each run as the store hands them out) and a new ~110-token user message:
  time to the first token. Unsized, mlx-lm grows each layer's buffer for the new text
  (copying the conversation) and the first compiled step resizes it again (another copy);
  sized, the one resize.
* ``cold prefill``: the whole N-token prompt from an empty cache to its first token, chunk
  by chunk (mlx-lm's growth copies all held at each chunk: O(N²)).

The sizing is taken away by replacing ``reserve`` with a no-op for the ``unsized`` runs,
alternating which goes first; one discarded warm-up of each, then ``--runs``. Printed and
written as JSON (min/median/max, ratios of medians, the same first tokens both ways, load).

    .venv/bin/python ops/reserve_ab.py --contexts 4096 7936 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ops.ab_runs import alternating, model_folder, report

NEW_TURN = " ".join(f"Item {n}: check the lighthouse's lamp and log it." for n in range(10))


def conversation(runner: Any, tokens: int) -> list[int]:
    """A chat rendered to about ``tokens`` tokens (its start: the end of a turn is not
    needed to time one)."""
    line = "The keeper climbs the stairs, trims the wick and writes the weather down. "
    messages = [{"role": "user", "content": line * (tokens // 14)}]
    return runner.render_chat(messages)[:tokens]


def first_token(runner: Any, prompt: list[int], state: Any) -> tuple[float, int]:
    """Milliseconds to ``prompt``'s first token, and the token."""
    from gateway.seam.backend import SamplingParams, TokenEvent

    started = time.perf_counter()
    for event in runner.generate(prompt, SamplingParams(max_tokens=1, temperature=0.0), state):
        if isinstance(event, TokenEvent):
            return (time.perf_counter() - started) * 1e3, event.token_ids[0]
    raise RuntimeError("no token")


def kept(runner: Any, prompt: list[int]) -> Any:
    """``prompt``'s cache as the prefix store keeps it: full buffers (no tail)."""
    from gateway.engines.runner import PromptState

    cache = runner.new_cache()
    for _ in runner.prefill(prompt, cache):
        pass
    for layer in cache:
        layer.keys = layer.keys[..., : layer.offset, :]
        layer.values = layer.values[..., : layer.offset, :]
    return PromptState(cache, tuple(prompt))


def first_token_when(runner: Any, prompt: list[int], kept_state: Any, way: str) -> Any:
    """``first_token`` of ``prompt`` from an empty cache, or (``kept_state``) of its new turn
    on a copy of the state as the prefix store hands it out, with the buffers sized once or
    (``unsized``) left to mlx-lm's growth."""
    import mlx.core as mx

    import gateway.engines.mlx_runner as mlx_runner
    from gateway.engines.compiled_step import reserve
    from gateway.engines.runner import PromptState

    mlx_runner.reserve = reserve if way == "sized" else (lambda *a, **k: None)
    try:
        if kept_state is None:
            return first_token(runner, prompt, None)
        given = PromptState(copy.deepcopy(kept_state.cache), kept_state.tokens)
        mx.eval([c.keys for c in given.cache])  # the store's copy: not timed
        return first_token(runner, [*prompt, *runner.encode(NEW_TURN)], given)
    finally:
        mlx_runner.reserve = reserve


def main(argv: list[str]) -> int:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported (its BLAS)
    from bench.stats import Summary, ratio
    from gateway.engines.mlx_runner import MLXRunner
    from gateway.modelstore.store import DEFAULT_MODEL_ID

    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", type=int, nargs="+", default=[4096, 7936])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", nargs="+", default=["new turn", "cold prefill"])
    parser.add_argument("--model-folder", help="an mlx-lm folder (default: the embedded model)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    folder = model_folder(args.model_folder)
    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute)
    runner.speculation = "off"
    load = os.getloadavg()
    rows: list[tuple[str, str, Summary]] = []
    result: dict[str, Any] = {}
    for context in args.contexts:
        prompt = conversation(runner, context)
        state = kept(runner, prompt) if "new turn" in args.rows else None
        for row in args.rows:
            # A cold prefill from nothing, or the new turn on a copy of the kept state.
            once = partial(
                first_token_when, runner, prompt, None if row == "cold prefill" else state
            )
            seconds, tokens = alternating(("sized", "unsized"), args.runs, once)
            on, off = Summary.of(seconds["sized"]), Summary.of(seconds["unsized"])
            name = f"{row} at {len(prompt)}, ms"
            rows += [(name, "sized", on), (name, "unsized", off)]
            result[f"{row}/{len(prompt)}"] = {
                "sized_ms": on.as_dict(),
                "unsized_ms": off.as_dict(),
                "unsized_over_sized": ratio(off, on),
                "same_first_token": len({*tokens["sized"], *tokens["unsized"]}) == 1,
            }
            print(f"{name}: unsized / sized {ratio(off, on):.2f}", flush=True)
    report(args.json, rows, load, benchmark="reserve_ab", model_folder=str(folder),
           compute=compute.as_dict(), decode_step=runner.decode_step, runs=args.runs,
           rows=result)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
