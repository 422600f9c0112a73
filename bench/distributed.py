"""One process vs two ranks (pipeline, tensor) of MLX's distributed engine, through the gateway.

Every variant is a tier of the gateway on the same weights, measured with the same fixed
prompt, streamed greedily (EOS suppressed so every run has ``--max-tokens`` tokens): the
gateway's own MLX engine, ``mlx_lm.server`` as one rank (``mlx-distributed`` with one host:
the supervised path without any split) and two ranks on loopback with the ring backend,
pipeline- and tensor-parallel. One gateway per variant, one after the other, so that no idle
cluster shares the cores with the one measured. Each variant: a discarded warm-up, then
``--runs`` runs. Also measured: the CPU an idle cluster burns (its process group, 5 s).

On one machine two ranks cannot be faster (same cores, same memory, plus the ring's
messages); the table is about correctness and overhead. The model is synthetic (qwen2 class,
random weights, SmolLM2's tokenizer) unless ``--model-folder`` names one.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.chat import PROMPT, SEED, measure
from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from testsupport.process import RunningGateway, start_gateway
from testsupport.synthetic import SyntheticSpec, build_synthetic

NO_EOS = {"2": -100}  # SmolLM2's <|im_end|>
IDLE_SECONDS = 5.0
READY_SECONDS = 900
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}


def bench_spec() -> SyntheticSpec:
    """~60M parameters (float32 ~240 MB), 12 layers: compute, not HTTP, dominates a step,
    and a run stays short on a shared 2-core machine."""
    return SyntheticSpec(
        "qwen2",
        hidden_size=512,
        num_hidden_layers=12,
        intermediate_size=1408,
        num_attention_heads=8,
        num_key_value_heads=4,
        weight_index=True,
    )


def variants(model: Path) -> dict[str, dict[str, Any]]:
    def cluster(hosts: int, sharding: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        return {
            "kind": "mlx-distributed",
            "model": str(model),
            "read_timeout_seconds": 600,
            "cluster": {
                "hosts": ["127.0.0.1"] * hosts,
                "sharding": sharding,
                "start_timeout_seconds": READY_SECONDS,
                "wait_ready_seconds": READY_SECONDS,
                "env": env or {},
            },
        }

    return {
        "gateway engine": {"kind": "mlx", "model": str(model), "weights": "float32"},
        "1 rank": cluster(1, "pipeline"),
        "2 ranks pipeline": cluster(2, "pipeline"),
        "2 ranks tensor": cluster(2, "tensor"),
        # Two ranks on one machine share its cores: OpenBLAS's threads per rank oversubscribe.
        "2 ranks pipeline, 1 BLAS thread": cluster(2, "pipeline", ONE_BLAS_THREAD),
        "2 ranks tensor, 1 BLAS thread": cluster(2, "tensor", ONE_BLAS_THREAD),
    }


def wait_ready(gateway: RunningGateway, tier: str) -> dict[str, Any]:
    deadline = time.monotonic() + READY_SECONDS
    with gateway.http() as client:
        while time.monotonic() < deadline:
            health = client.get("/health").json()["tiers"]["t"]
            if health["state"] in ("ready", "loaded", "unloaded"):
                return dict(health)
            if health["state"] == "failed":
                raise RuntimeError(f"{tier}: {health}")
            time.sleep(1)
    raise RuntimeError(f"{tier} did not become ready")


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every process in a process group (Linux /proc)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def one_variant(
    workdir: Path, name: str, tier: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    folder = workdir / name.replace(" ", "-")
    gateway = start_gateway(folder, {"cache_dir": str(folder / "cache"), "tiers": {"t": tier}})
    runs: list[dict[str, float]] = []
    texts: set[str] = set()
    idle_cpu = None
    try:
        health = wait_ready(gateway, name)
        body = {
            "model": "t",
            "messages": PROMPT,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "seed": SEED,
            "logit_bias": NO_EOS,
            "stream_options": {"include_usage": True},
        }
        with gateway.http() as client:
            for _ in range(args.runs + 1):
                streamed = stream_chat(client, body)
                runs.append(measure(streamed.started, streamed.times, 0))
                texts.add("".join(streamed.pieces))
        pid = health.get("cluster", {}).get("pid")
        if pid and Path("/proc").is_dir():
            before = group_cpu_seconds(pid)
            time.sleep(IDLE_SECONDS)
            idle_cpu = 100 * (group_cpu_seconds(pid) - before) / IDLE_SECONDS
    finally:
        gateway.stop()
    return {"runs": runs[1:], "texts": texts, "idle_cpu_percent": idle_cpu}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-distributed-"))
    model = Path(args.model_folder) if args.model_folder else None
    if model is None:
        model = build_synthetic(bench_spec(), workdir / "model")
    results = {
        name: one_variant(workdir, name, tier, args) for name, tier in variants(model).items()
    }
    summaries = {
        (metric, name): Summary.of([r[metric] for r in result["runs"]])
        for metric in ("ttft_s", "decode_tps")
        for name, result in results.items()
    }
    print(table([(m, n, s) for (m, n), s in summaries.items()]))
    texts = {name: result["texts"] for name, result in results.items()}
    same_text = all(t == texts["gateway engine"] and len(t) == 1 for t in texts.values())
    print(f"\nsame greedy text in every run of every variant: {same_text}")
    for name, result in results.items():
        decode = ratio(summaries[("decode_tps", name)], summaries[("decode_tps", "1 rank")])
        ttft = ratio(summaries[("ttft_s", name)], summaries[("ttft_s", "1 rank")])
        idle = result["idle_cpu_percent"]
        idle_text = f"{idle:.0f}%" if idle is not None else "-"
        print(f"{name:32} vs 1 rank: decode {decode:.2f}x, TTFT {ttft:.2f}x, idle CPU {idle_text}")
    return {
        "benchmark": "distributed",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "model": str(model),
        "summaries": {f"{m}/{n}": s.as_dict() for (m, n), s in summaries.items()},
        "idle_cpu_percent": {n: r["idle_cpu_percent"] for n, r in results.items()},
        "same_text": same_text,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
