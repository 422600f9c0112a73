"""Decode speed with constrained decoding (llguidance) vs without, same prompt and length.

In-process on the gateway's own model runner (the engine the gateway uses), alternating run
by run. Both variants generate exactly ``--max-tokens`` tokens: the end-of-sequence token is
biased away, and the constrained variant's schema needs a string longer than that.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.stats import Summary, ratio, table, write_json

if TYPE_CHECKING:
    from gateway.seam.request_parts import ChatMessage

PROMPT: list[ChatMessage] = [
    {"role": "user", "content": "Write a long story about a lighthouse keeper, as JSON."}
]
SCHEMA = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 20000}},
    "required": ["story"],
    "additionalProperties": False,
}
SEED = 1234


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported
    from gateway.config import default_cache_dir
    from gateway.engines.mlx_runner import MLXRunner
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore
    from gateway.seam.backend import SamplingParams, TokenEvent
    from gateway.seam.request_parts import Grammar

    if args.model_folder:  # a model of the user's (issue 31: the real Qwen2.5-Coder weights)
        folder = Path(args.model_folder)
    else:
        folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    runner = MLXRunner(DEFAULT_MODEL_ID, folder, compute)
    prompt = runner.render_chat(PROMPT)
    no_eos = {t: -100.0 for t in runner.eos_token_ids}
    variants = {
        "unconstrained": SamplingParams(
            max_tokens=args.max_tokens, temperature=0.0, logit_bias=no_eos
        ),
        "json schema (llguidance)": SamplingParams(
            max_tokens=args.max_tokens,
            temperature=0.0,
            logit_bias=no_eos,
            grammar=Grammar("json_schema", json.dumps(SCHEMA)),
        ),
    }
    load = os.getloadavg()
    results: dict[str, list[float]] = {name: [] for name in variants}
    tokens: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.runs + 1):  # alternating; the first of each is the warm-up
        for name, params in variants.items():
            times = [
                time.perf_counter()
                for event in runner.generate(prompt, params)
                if isinstance(event, TokenEvent) and event.token_ids
            ]
            results[name].append((len(times) - 1) / (times[-1] - times[0]))
            tokens[name].append(len(times))
    summaries = {
        (metric, name): Summary.of(values[name][1:])
        for metric, values in (("decode_tps", results), ("tokens", tokens))
        for name in variants
    }
    print(table([(m, n, s) for (m, n), s in summaries.items()]))
    names = list(variants)
    speed = ratio(summaries[("decode_tps", names[1])], summaries[("decode_tps", names[0])])
    print(f"\nconstrained/unconstrained decode tokens/s (medians): {speed:.3f}")
    print(f"overhead: {100 * (1 - speed):.1f}%   (goal <= 10%)")
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the start {load}, at the end {load_after}")
    return {
        "benchmark": "structured",
        "model_folder": str(folder),
        "load_average": {"start": load, "end": load_after},
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "summaries": {f"{m}/{n}": s.as_dict() for (m, n), s in summaries.items()},
        "decode_ratio_constrained_over_unconstrained": speed,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
