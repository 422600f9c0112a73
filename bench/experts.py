"""Expert streaming: a MoE model served from disk with a few slots, against fully resident.

The model is MODELS.md §6's synthetic qwen3_moe (hidden 1024, 16 layers, 64 experts, top-4,
moe_intermediate 512, tied embeddings, SmolLM2's tokenizer; ~1.7B parameters, float16 on
disk: 3.4 GB, 6.8 GB resident in float32), built once into the bench cache. Each variant is
its own gateway process (peak RSS is the process's ``VmHWM``), all on the same folder:

* ``resident``: the whole model in float32;
* ``stream-lru`` / ``stream-lfu``: ``experts = "stream"`` with ``--slots`` per layer;
* ``stream-lru-cold`` / ``stream-lfu-cold``: the same, with the weights file dropped from
  the page cache (``posix_fadvise(DONTNEED)``) before each of its runs.

A warm variant runs right after the whole file was read (so "warm" means every expert is in
the page cache). The same greedy request goes to every variant in turn, in an order that
rotates each round (no variant always follows the same one); one discarded warm-up round,
then N rounds; reported as min/median/max: decode tokens/s, time to first token, the expert
hit ratio of each run (from ``/metrics``), and every variant's text compared with the
resident one's. The host's load averages at the start and the end go into the result.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.models import peak_rss_bytes
from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from testsupport.process import RunningGateway, start_gateway

MODEL_NAME = "qwen3-moe-1.7b-f16"
SHAPE: dict[str, Any] = {
    "hidden_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "dtype": "float16",
    "overrides": {
        "head_dim": 64,
        "num_experts": 64,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 512,
        "tie_word_embeddings": True,
    },
}
DEFAULT_SLOTS = 7  # 10.9% of the 64 experts (the issue asks for at most 15%)
DEFAULT_POLICY = "lfu"
PROMPT = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]
HIT = re.compile(r'gateway_expert_cache_(hits|misses)_total\{tier="default"\} ([0-9.e+]+)')


def build_model(cache_root: Path) -> Path:
    """The synthetic model's folder, built once (~40 s here) and reused."""
    from testsupport.synthetic import SyntheticSpec, build_synthetic

    folder = cache_root / MODEL_NAME
    if not (folder / "config.json").is_file():
        started = time.perf_counter()
        partial = folder.with_name(folder.name + ".partial")
        build_synthetic(SyntheticSpec("qwen3_moe", **SHAPE), partial)
        partial.rename(folder)
        print(f"built {folder} in {time.perf_counter() - started:.0f} s")
    return folder


def drop_page_cache(folder: Path) -> None:
    """Forget the weights files' pages (clean pages of a file nobody writes: dropped)."""
    for file in folder.glob("*.safetensors"):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_page_cache(folder: Path) -> None:
    for file in folder.glob("*.safetensors"):
        with file.open("rb", buffering=0) as handle:
            while handle.read(1 << 24):
                pass


def expert_counts(gateway: RunningGateway) -> tuple[float, float]:
    found = dict(
        (kind, float(value)) for kind, value in HIT.findall(gateway.http().get("/metrics").text)
    )
    return found.get("hits", 0.0), found.get("misses", 0.0)


def variants(slots: int) -> dict[str, dict[str, Any]]:
    stream = {"experts": "stream", "expert_slots": slots}
    return {
        "resident": {},
        "stream-lru": {**stream, "expert_policy": "lru"},
        "stream-lfu": {**stream, "expert_policy": "lfu"},
        "stream-lru-cold": {**stream, "expert_policy": "lru"},
        "stream-lfu-cold": {**stream, "expert_policy": "lfu"},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.config import default_cache_dir

    folder = build_model(Path(default_cache_dir()) / "bench")
    slots = args.slots or DEFAULT_SLOTS
    tiers = variants(slots)
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-experts-"))
    gateways: dict[str, RunningGateway] = {}
    metrics = ("decode_tps", "ttft_s", "hit_ratio")
    rows: dict[str, dict[str, list[float]]] = {v: {m: [] for m in metrics} for v in tiers}
    texts: dict[str, set[str]] = {v: set() for v in tiers}
    facts: dict[str, dict[str, Any]] = {}
    body = {
        "model": "default",
        "messages": PROMPT,
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    try:
        for name, tier in tiers.items():
            gateways[name] = start_gateway(
                workdir / name,
                {
                    "weights": "float32",
                    "tiers": {"default": {"model": str(folder), "preload": True, **tier}},
                    "cache": {"prefix_cache_bytes": 0, "persist_prefix_bytes": 0},
                },
            )
            health = gateways[name].http().get("/health").json()["tiers"]["default"]
            facts[name] = {"weights": health.get("weights"), "memory_bytes": health["memory_bytes"]}
        started = time.perf_counter()
        facts["load_average_start"] = {"1_5_15_min": os.getloadavg()}
        names = list(tiers)
        for run_index in range(args.runs + 1):
            shift = run_index % len(names)
            for name in names[shift:] + names[:shift]:
                if name.endswith("-cold"):
                    drop_page_cache(folder)
                else:
                    warm_page_cache(folder)
                before = expert_counts(gateways[name])
                with gateways[name].http() as client:
                    streamed = stream_chat(client, body)
                after = expert_counts(gateways[name])
                hits, misses = after[0] - before[0], after[1] - before[1]
                if run_index:  # the first round is the discarded warm-up
                    rows[name]["decode_tps"].append(streamed.decode)
                    rows[name]["ttft_s"].append(streamed.ttft)
                    rows[name]["hit_ratio"].append(hits / (hits + misses) if hits + misses else 1.0)
                texts[name].add(streamed.text)
            print(f"round {run_index} done at {time.perf_counter() - started:.0f} s", flush=True)
        facts["load_average_end"] = {"1_5_15_min": os.getloadavg()}
        for name, gateway in gateways.items():
            facts[name]["peak_rss_bytes"] = peak_rss_bytes(gateway.process.pid)
            weights = gateway.http().get("/health").json()["tiers"]["default"].get("weights")
            facts[name]["experts"] = (weights or {}).get("experts")
    finally:
        for gateway in gateways.values():
            gateway.stop()
    return report(args, slots, rows, texts, facts)


def report(
    args: argparse.Namespace,
    slots: int,
    rows: dict[str, dict[str, list[float]]],
    texts: dict[str, set[str]],
    facts: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    summaries = {(m, v): Summary.of(values) for v, by in rows.items() for m, values in by.items()}
    print(
        table(
            [
                (m, v, s)
                for (m, v), s in sorted(summaries.items())
                if m != "hit_ratio" or v != "resident"
            ]
        )
    )
    resident_rss = facts["resident"]["peak_rss_bytes"]
    resident_text = texts["resident"]
    checks: dict[str, Any] = {}
    for name in rows:
        fact = facts[name]
        share = fact["peak_rss_bytes"] / resident_rss if resident_rss else float("nan")
        speed = ratio(summaries[("decode_tps", name)], summaries[("decode_tps", "resident")])
        same = texts[name] == resident_text and len(resident_text) == 1
        checks[name] = {"rss_share": share, "decode_share": speed, "same_text": same}
        print(
            f"{name:22} peak RSS {fact['peak_rss_bytes'] / 2**30:.2f} GiB ({share:.1%} of "
            f"resident), planned {fact['memory_bytes'] / 2**30:.2f} GiB, decode {speed:.0%} of "
            f"resident (medians), same greedy text: {same}"
        )
    print(
        f"load averages (1, 5, 15 min) at the start {facts['load_average_start']}, "
        f"at the end {facts['load_average_end']}"
    )
    return {
        "benchmark": "experts",
        "model": MODEL_NAME,
        "slots": slots,
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "summaries": {f"{m}/{v}": s.as_dict() for (m, v), s in summaries.items()},
        "facts": facts,
        "checks": checks,
        "texts": {v: sorted(t) for v, t in texts.items()},
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
