"""The gateway vs ``mlx_lm.server`` (the same engine library's own server), side by side.

Both serve the same weights (on a Linux CPU both get the float32 dequantized copy the gateway
computes with; on a Mac both get the 4-bit folder) and are called alternately in every run:

* cold: a fresh ~1,600-token chat (a unique tag leads its system prompt) and a new message;
* multi-turn: the same chat's next turn (the first answer and another message appended);
  both servers hold the first turn's KV cache, so this is the new message's own prefill;
* multi-turn, hinted + speculated: the turn after that, as an editor sends it: the gateway
  got a typing hint with the draft while it was typed (``mlx_lm.server`` has the previous
  turn cached and gets the same request);
* hinted: a fresh chat whose history the gateway was told about by a typing hint before
  "Enter" (``mlx_lm.server`` cannot be told, so its row is what it does with the same request);
* hinted + speculated: as hinted, with the new message as the hint's draft and a pause
  long enough for the gateway to compute the answer's first tokens ahead;
* decode tokens/s: over the cold runs' streamed tokens.

``--context-tokens`` runs the whole set at each of several context sizes (2K, 8K, 32K on a
GPU); ``--model-folder`` serves an mlx-lm folder (bf16 on a GPU) instead of the embedded
model, with a prefix cache large enough for the longest context and none saved to disk.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.hints import (
    DEFAULT_NOTES,
    NEW_MESSAGE,
    _ready_hint,
    _speculated_hint,
    fixed_context,
    notes_for,
)
from bench.stats import Summary, ratio, table, write_json
from bench.streaming import Streamed, stream_chat
from testsupport.process import start_gateway, start_mlx_lm_server, store_serving

SECOND_MESSAGE = "And which one should I keep for last?"
THIRD_MESSAGE = "Thanks. How long should the whole tour take?"
GATEWAY, SERVER = "gateway", "mlx_lm.server"


def float32_copy(folder: Path, workdir: Path) -> Path:
    """The model dequantized to float32, as the gateway runs it on a Linux CPU."""
    out = workdir / "float32-model"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mlx_lm.convert",
            "--hf-path",
            str(folder),
            "--mlx-path",
            str(out),
            "-d",
            "--dtype",
            "float32",
        ],
        check=True,
        capture_output=True,
    )
    return out


def stream(
    client: httpx.Client, path: str, model: str, messages: list[dict[str, str]], max_tokens: int
) -> Streamed:
    """One greedy streamed request: its time to first token, decode tokens/s and text."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream_options": {"include_usage": True},  # prompt tokens; decode counts every token
    }
    return stream_chat(client, body, path)


def same_weights(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], Path, Any]:
    """What serves the same weights on both sides: the gateway's config (``--model-folder``
    served under the default model's id), the folder ``mlx_lm.server`` loads (the float32
    copy where the gateway dequantizes) and the compute path (``ComputePath``)."""
    from gateway.config import default_cache_dir
    from gateway.engines.device import choose_compute_path
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    config: dict[str, Any] = {}
    if args.model_folder:
        folder = Path(args.model_folder)
        config["cache_dir"] = str(store_serving(folder, workdir / "store"))
    else:
        folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    compute = choose_compute_path()
    served = float32_copy(folder, workdir) if compute.dequantize else folder
    return config, served, compute


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.modelstore.store import DEFAULT_MODEL_ID

    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-versus-"))
    config, served, compute = same_weights(args, workdir)
    if args.model_folder:
        # A 32K context of an 8B model is 4 GB of KV cache: kept in memory, not written out.
        config["cache"] = {"prefix_cache_bytes": 64 * 2**30, "persist_prefix_bytes": 0}
    server = start_mlx_lm_server(workdir / "server", served)
    gateway = None
    rows: dict[tuple[str, str], list[float]] = {}
    sizes = args.context_tokens or [0]  # 0: the default context (~1,600 tokens)

    def note(metric: str, who: str, value: float) -> None:
        rows.setdefault((metric, who), []).append(value)

    load = os.getloadavg()
    try:
        gateway = start_gateway(workdir / "gateway", config)
        with (
            gateway.http() as ours,
            httpx.Client(base_url=server.base_url + "/", timeout=600) as theirs,
        ):
            targets = {
                GATEWAY: (ours, "/v1/chat/completions", DEFAULT_MODEL_ID),
                SERVER: (theirs, "chat/completions", server.model),
            }
            for size, index in ((z, i) for z in sizes for i in range(args.runs + 1)):
                notes = notes_for(size) if size else DEFAULT_NOTES
                at = f" @{size}" if size else ""

                def context_of(tag: str, notes: int = notes) -> list[dict[str, str]]:
                    return fixed_context(f"{tag}-{uuid.uuid4().hex[:8]}", notes)

                for who, (client, path, model) in targets.items():
                    context = context_of(f"{who}-{index}")
                    first = [*context, {"role": "user", "content": NEW_MESSAGE}]
                    cold = stream(client, path, model, first, args.max_tokens)
                    again = [
                        *first,
                        {"role": "assistant", "content": cold.text},
                        {"role": "user", "content": SECOND_MESSAGE},
                    ]
                    turn = stream(client, path, model, again, 4)
                    third = [
                        *again,
                        {"role": "assistant", "content": turn.text},
                        {"role": "user", "content": THIRD_MESSAGE},
                    ]
                    if who == GATEWAY:
                        _speculated_hint(client, third[:-1], THIRD_MESSAGE)
                    next_turn = stream(client, path, model, third, 32)
                    hinted_context = context_of(f"{who}-hinted-{index}")
                    if who == GATEWAY:
                        _ready_hint(client, hinted_context)
                    hinted = stream(
                        client,
                        path,
                        model,
                        [*hinted_context, {"role": "user", "content": NEW_MESSAGE}],
                        4,
                    )
                    spec_context = context_of(f"{who}-spec-{index}")
                    if who == GATEWAY:
                        _speculated_hint(client, spec_context, NEW_MESSAGE)
                    speculated = stream(
                        client,
                        path,
                        model,
                        [*spec_context, {"role": "user", "content": NEW_MESSAGE}],
                        32,
                    )
                    if index == 0:
                        continue  # the warm-up
                    note(f"hinted + speculated TTFT (s){at}", who, speculated.ttft)
                    note(f"cold TTFT (s){at}", who, cold.ttft)
                    note(f"multi-turn TTFT (s){at}", who, turn.ttft)
                    note(f"multi-turn hint+spec TTFT (s){at}", who, next_turn.ttft)
                    note(f"hinted TTFT (s){at}", who, hinted.ttft)
                    note(f"decode tokens/s{at}", who, cold.decode_tokens)
                    if size:
                        note(f"prompt tokens{at}", who, float(cold.usage.get("prompt_tokens", 0)))
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()
    summaries = {key: Summary.of(values) for key, values in rows.items()}
    print(table([(metric, who, s) for (metric, who), s in summaries.items()]))
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) at the start {load}, at the end {load_after}")
    result: dict[str, Any] = {
        "benchmark": "versus",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "weights": "float32" if compute.dequantize else "as stored",
        "model_folder": str(served),
        "compute": compute.as_dict(),
        "load_average": {"start": load, "end": load_after},
        "summaries": {f"{m}/{w}": s.as_dict() for (m, w), s in summaries.items()},
        "ratios_server_over_gateway": {},
    }
    print()
    metrics = (
        "cold TTFT (s)",
        "multi-turn TTFT (s)",
        "multi-turn hint+spec TTFT (s)",
        "hinted TTFT (s)",
        "hinted + speculated TTFT (s)",
        "decode tokens/s",
    )
    for metric in (f"{m} @{z}" if z else m for z in sizes for m in metrics):
        theirs_over_ours = ratio(summaries[(metric, SERVER)], summaries[(metric, GATEWAY)])
        result["ratios_server_over_gateway"][metric] = theirs_over_ours
        print(f"{metric:24} mlx_lm.server / gateway (medians): {theirs_over_ours:.2f}")
    return result


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
