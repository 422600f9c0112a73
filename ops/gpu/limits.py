"""The H200's measured limits through MLX, and what they allow each model.

Measured here, with MLX's CUDA backend (random data, one discarded warm-up, the median of
several timed runs): a bf16 8192x8192x8192 matrix product (FLOP/s), a bf16 matrix times a
vector over 1 GiB (the read bandwidth decode sees) and a 1 GiB device copy (read + write).

Per model (its folder's weights, as stored): decode's limit is its weight bytes over the
matrix-vector bandwidth (every weight is read once per token); prefill's limit at a context
of N tokens is 2 x matrix parameters x N plus causal attention's 2 x layers x N^2 x heads x
head_dim FLOPs over the matrix rate, so a time to first token cannot be shorter than that.

Usage: ``python ops/gpu/limits.py OUT.json FOLDER...``
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONTEXTS = (2048, 8192, 32768)


def _median_seconds(work: Callable[[], Any], runs: int = 10) -> float:
    import mlx.core as mx

    mx.eval(work())
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        mx.eval(work())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure() -> dict[str, float]:
    import mlx.core as mx

    n = 8192
    a = mx.random.normal((n, n)).astype(mx.bfloat16)
    b = mx.random.normal((n, n)).astype(mx.bfloat16)
    mx.eval(a, b)
    matmul = 2 * n**3 / _median_seconds(lambda: a @ b)
    rows = 2**30 // (n * 2)  # 1 GiB of bf16
    w = mx.random.normal((rows, n)).astype(mx.bfloat16)
    x = mx.random.normal((n,)).astype(mx.bfloat16)
    mx.eval(w, x)
    matvec = w.nbytes / _median_seconds(lambda: w @ x)
    copy = 2 * w.nbytes / _median_seconds(lambda: w + 0)
    return {"matmul_flops": matmul, "matvec_bytes_per_s": matvec, "copy_bytes_per_s": copy}


def model_limits(folder: Path, ceilings: dict[str, float]) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text())
    weight_bytes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    vocab, mlp = int(config["vocab_size"]), int(config["intermediate_size"])
    heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    # Matrix parameters a token goes through (the embedding is a lookup, the head is not).
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * mlp
    params = layers * per_layer + vocab * hidden
    limits: dict[str, Any] = {
        "weight_bytes": weight_bytes,
        "matrix_parameters": params,
        "decode_tokens_per_s_limit": ceilings["matvec_bytes_per_s"] / weight_bytes,
        "ttft_seconds_limit": {},
    }
    for n in CONTEXTS:
        # The vocabulary projection is counted for no prompt token (the first token needs it
        # once): a lower bound, though both servers here compute it for every chunk.
        flops = 2 * (params - vocab * hidden) * n + 2 * layers * n * n * heads * head_dim
        limits["ttft_seconds_limit"][str(n)] = flops / ceilings["matmul_flops"]
    return limits


def main(argv: list[str]) -> int:
    out, *folders = argv  # without folders: the ceilings alone
    ceilings = measure()
    result: dict[str, Any] = {
        "ceilings": ceilings,
        "models": {Path(f).name: model_limits(Path(f), ceilings) for f in folders},
    }
    Path(out).write_text(json.dumps(result, indent=2))
    print(
        f"bf16 matmul {ceilings['matmul_flops'] / 1e12:.0f} TFLOP/s, matrix-vector "
        f"{ceilings['matvec_bytes_per_s'] / 1e12:.2f} TB/s, copy "
        f"{ceilings['copy_bytes_per_s'] / 1e12:.2f} TB/s"
    )
    for name, limit in result["models"].items():
        ttft = ", ".join(f"{n}: {s * 1e3:.1f} ms" for n, s in limit["ttft_seconds_limit"].items())
        print(
            f"{name}: {limit['weight_bytes'] / 1e9:.2f} GB, decode <= "
            f"{limit['decode_tokens_per_s_limit']:.0f} tok/s, TTFT >= {ttft}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
