"""Gateway over HTTP vs raw mlx-lm on the same fixed prompt, side by side in one run.

Both decode greedily from the same weights on the same compute path; the gateway's prefix
cache is switched off so that both prefill the whole prompt every run. With ``--baseline
SRC`` a second gateway runs another version's source (a git worktree or ``git archive`` of
an earlier commit) in the same interleaved runs: before/after for decode and TTFT.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from testsupport.process import RunningGateway, baseline_env, start_gateway

PROMPT = [
    {"role": "system", "content": "You are a helpful assistant who writes vivid prose."},
    {
        "role": "user",
        "content": "Write a long story about a lighthouse keeper who finds a message in a "
        "bottle. Describe the sea, the weather and the keeper's daily routine in detail.",
    },
]
SEED = 1234


def _raw_runner(model_folder: Path, max_tokens: int) -> Callable[[], dict[str, float]]:
    """Load the model as the gateway does and return one measured raw mlx-lm run."""
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported, as the gateway does
    import mlx.core as mx
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    from gateway.engines.weights import default_mode, load_model

    model, tokenizer, _ = load_model(model_folder, default_mode(compute))

    def run_once() -> dict[str, float]:
        mx.random.seed(SEED)
        mx.reset_peak_memory()
        started = time.perf_counter()
        prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True)
        times: list[float] = []
        for response in stream_generate(
            model, tokenizer, prompt, max_tokens=max_tokens, sampler=make_sampler(temp=0.0)
        ):
            if response.text:  # counted as the gateway counts: tokens that carry text
                times.append(time.perf_counter())
        return measure(started, times, mx.get_peak_memory())

    return run_once


def measure(started: float, token_times: list[float], peak_bytes: float) -> dict[str, float]:
    first, last = token_times[0], token_times[-1]
    decode = (len(token_times) - 1) / (last - first) if len(token_times) > 1 else 0.0
    return {
        "ttft_s": first - started,
        "decode_tps": decode,
        "tokens": len(token_times),
        "peak_gb": peak_bytes / 1e9,
    }


def stream_token_times(
    client: httpx.Client, model: str, max_tokens: int, path: str = "/v1/chat/completions"
) -> tuple[float, list[float]]:
    """Stream the fixed prompt greedily; the start time and each text-carrying chunk's time."""
    body = {
        "model": model,
        "messages": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": SEED,
        "stream_options": {"include_usage": True},
    }
    streamed = stream_chat(client, body, path)
    return streamed.started, streamed.times


def _gateway_run(client: httpx.Client, model: str, max_tokens: int) -> dict[str, float]:
    started, times = stream_token_times(client, model, max_tokens)
    memory = client.get("/health").json()["memory"]
    return measure(started, times, memory["peak"])


def _gateways(workdir: Path, baseline: str | None) -> dict[str, RunningGateway]:
    config = {"cache": {"prefix_cache_bytes": 0}}
    gateways = {"gateway (HTTP)": start_gateway(workdir / "gateway", config)}
    if baseline:
        gateways["baseline (HTTP)"] = start_gateway(
            workdir / "baseline",
            config,
            extra_env=baseline_env(baseline),
            cwd=workdir,  # outside this checkout: -m would import its gateway first
        )
    return gateways


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    gateways = _gateways(workdir, args.baseline)
    runs: dict[str, list[dict[str, float]]] = {"raw mlx-lm": [], **{name: [] for name in gateways}}
    try:
        raw_run = _raw_runner(folder, args.max_tokens)
        clients = {name: gateway.http() for name, gateway in gateways.items()}
        # Interleaved, so that every variant sees the same machine noise.
        for index in range(args.runs + 1):
            runs["raw mlx-lm"].append(raw_run())
            order = list(clients.items())[:: -1 if index % 2 else 1]  # neither always first
            for name, client in order:
                runs[name].append(_gateway_run(client, DEFAULT_MODEL_ID, args.max_tokens))
        for client in clients.values():
            client.close()
    finally:
        for gateway in gateways.values():
            gateway.stop()
    summaries = {  # the first run of each is the discarded warm-up
        (metric, name): Summary.of([r[metric] for r in measured[1:]])
        for metric in ("ttft_s", "decode_tps", "peak_gb", "tokens")
        for name, measured in runs.items()
    }
    print(table([(m, n, s) for (m, n), s in summaries.items()]))
    result: dict[str, Any] = {
        "benchmark": "chat",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "baseline": args.baseline,
        "summaries": {f"{m}/{n}": s.as_dict() for (m, n), s in summaries.items()},
    }
    for name, key in (("raw mlx-lm", "raw"), ("baseline (HTTP)", "baseline")):
        if ("ttft_s", name) not in summaries:
            continue
        decode_ratio = ratio(
            summaries[("decode_tps", "gateway (HTTP)")], summaries[("decode_tps", name)]
        )
        ttft_ratio = ratio(summaries[("ttft_s", "gateway (HTTP)")], summaries[("ttft_s", name)])
        ttft_gap_ms = 1000 * (
            summaries[("ttft_s", "gateway (HTTP)")].median - summaries[("ttft_s", name)].median
        )
        print(f"\ngateway/{key} decode tokens/s (medians): {decode_ratio:.3f}")
        print(f"gateway/{key} time to first token (medians): {ttft_ratio:.3f}")
        print(f"gateway - {key} time to first token (medians): {ttft_gap_ms:+.1f} ms")
        result[f"decode_ratio_gateway_over_{key}"] = decode_ratio
        result[f"ttft_ratio_gateway_over_{key}"] = ttft_ratio
        result[f"ttft_gap_ms_over_{key}"] = ttft_gap_ms
    return result


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
