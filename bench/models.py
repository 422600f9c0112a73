"""A 1B-parameter-shape model from the Hugging Face cache: the two Linux weight forms side by side.

A synthetic qwen3 model of a real 1B shape (Llama-3.2-1B's layer sizes in qwen3's classes:
hidden 2048, 16 layers, MLP 8192, 16 heads / 8 KV, head_dim 128; SmolLM2's 49,152-token
vocabulary, tied embeddings: ~1.1B parameters), 4-bit (group 64, bfloat16 scales, as
mlx-community publishes), laid out by hand in a Hugging Face cache and served as
``hf:bench/qwen3-1b-4bit``. Two gateways run at once on the same files, one holding the
weights dequantized to float32, one keeping them quantized with float32 activations
(``gateway.engines.weights``); requests alternate between them. Reported: load time (the
gateway's own ``gateway_model_load_seconds``), peak resident memory of each process
(``VmHWM``), and streamed greedy decode tokens/s (one discarded warm-up, N runs).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chat import PROMPT, SEED
from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from testsupport.process import RunningGateway, start_gateway

REPO_ID = "bench/qwen3-1b-4bit"
SHAPE: dict[str, Any] = {
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "intermediate_size": 8192,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "overrides": {"head_dim": 128},
}
FORMS = ("float32", "4bit")


def build_model(cache_root: Path) -> Path:
    """The synthetic model's folder (built once, then reused), and its HF-cache copy."""
    from testsupport.synthetic import SyntheticSpec, build_synthetic, place_in_hf_cache

    folder = cache_root / "qwen3-1b-4bit"
    if not (folder / "config.json").is_file():
        started = time.perf_counter()
        spec = SyntheticSpec(
            "qwen3", dtype="bfloat16", quantization={"group_size": 64, "bits": 4}, **SHAPE
        )
        build_synthetic(spec, folder.with_suffix(".partial"))
        folder.with_suffix(".partial").rename(folder)
        print(f"built {folder} in {time.perf_counter() - started:.0f} s")
    hub = cache_root / "hf-hub"
    place_in_hf_cache(folder, hub, REPO_ID)
    return hub


def peak_rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) * 1024 if match else 0


def load_seconds(gateway: RunningGateway) -> float:
    text = gateway.http().get("/metrics").text
    match = re.search(r'gateway_model_load_seconds_sum\{tier="default"\} ([0-9.e+-]+)', text)
    return float(match.group(1)) if match else float("nan")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.config import default_cache_dir

    cache_root = Path(args.cache_dir or default_cache_dir()) / "bench"
    hub = build_model(cache_root)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-models-"))
    gateways: dict[str, RunningGateway] = {}
    rows: dict[str, dict[str, list[float]]] = {f: {"decode_tps": [], "ttft_s": []} for f in FORMS}
    facts: dict[str, dict[str, Any]] = {}
    try:
        for form in FORMS:
            started = time.perf_counter()
            gateways[form] = start_gateway(
                workdir / form,
                {
                    "default_model": f"hf:{REPO_ID}",
                    "weights": form,
                    "cache": {"prefix_cache_bytes": 0, "persist_prefix_bytes": 0},
                },
                extra_env={"HF_HUB_CACHE": str(hub)},
            )
            health = gateways[form].http().get("/health").json()
            facts[form] = {
                "start_to_ready_s": time.perf_counter() - started,
                "load_s": load_seconds(gateways[form]),
                "weights": health["tiers"]["default"].get("weights"),
                "memory_bytes": health["tiers"]["default"]["memory_bytes"],
            }
        body = {
            "model": f"hf:{REPO_ID}",
            "messages": PROMPT,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "seed": SEED,
            # Random weights rarely pick the end token; this keeps every run the same length.
            "stream_options": {"include_usage": True},
        }
        for run_index in range(args.runs + 1):
            for form in FORMS:  # alternating: both see the same machine noise
                with gateways[form].http() as client:
                    streamed = stream_chat(client, {**body, "model": "default"})
                if run_index:  # the first is the discarded warm-up
                    rows[form]["decode_tps"].append(streamed.decode)
                    rows[form]["ttft_s"].append(streamed.ttft)
        for form in FORMS:
            facts[form]["peak_rss_bytes"] = peak_rss_bytes(gateways[form].process.pid)
    finally:
        for gateway in gateways.values():
            gateway.stop()
    summaries = {(m, f): Summary.of(rows[f][m]) for m in ("decode_tps", "ttft_s") for f in FORMS}
    print(table([(m, f"weights={f}", s) for (m, f), s in summaries.items()]))
    for form in FORMS:
        fact = facts[form]
        print(
            f"weights={form:8} load {fact['load_s']:.1f} s (start to ready "
            f"{fact['start_to_ready_s']:.1f} s), peak RSS {fact['peak_rss_bytes'] / 2**30:.2f} GiB, "
            f"weights {fact['memory_bytes'] / 2**30:.2f} GiB ({fact['weights']})"
        )
    speed = ratio(summaries[("decode_tps", "float32")], summaries[("decode_tps", "4bit")])
    print(f"\nfloat32 / quantized decode tokens/s (medians): {speed:.2f}")
    return {
        "benchmark": "models",
        "model": f"hf:{REPO_ID}",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "summaries": {f"{m}/{f}": s.as_dict() for (m, f), s in summaries.items()},
        "facts": facts,
        "decode_ratio_float32_over_quantized": speed,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
