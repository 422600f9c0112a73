"""Decode as a fraction of this machine's ceiling.

Decoding one token reads every weight once, so a decode step cannot be faster than the
weights' bytes divided by the memory bandwidth a matrix-vector product reaches. This measures
that bandwidth with MLX itself (float32 on a Linux CPU, the compute path's dtype on a Mac:
a large matrix times a vector, one discarded warm-up, ``--runs`` timed), the bytes of the
embedded model's weights as loaded, and mlx-lm's own decode speed on the model (greedy, a
fixed prompt), then reports decode tokens/s against the ceiling.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from gateway.bench.stats import Summary, table, write_json

MATRIX_ROWS, MATRIX_COLUMNS = 8192, 8192  # 256 MiB in float32: far beyond the caches


def matvec_bandwidth(runs: int, dtype: Any) -> list[float]:
    """Bytes per second of ``W @ x`` over a matrix far larger than the caches."""
    import mlx.core as mx

    matrix = mx.random.normal((MATRIX_ROWS, MATRIX_COLUMNS)).astype(dtype)
    vector = mx.random.normal((MATRIX_COLUMNS,)).astype(dtype)
    mx.eval(matrix, vector)
    nbytes = matrix.nbytes
    rates = []
    for index in range(runs + 1):
        started = time.perf_counter()
        for _ in range(10):
            mx.eval(matrix @ vector)
        seconds = (time.perf_counter() - started) / 10
        if index:
            rates.append(nbytes / seconds)
    return rates


def decode_rates(folder: Path, runs: int, max_tokens: int) -> tuple[list[float], int]:
    """mlx-lm's decode tokens/s on the model as the gateway computes with it, and its bytes."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import dequantize_model

    from gateway.engines.device import choose_compute_path

    model, tokenizer = load(str(folder))[:2]
    if choose_compute_path().dequantize:
        dequantize_model(model)
        model.set_dtype(mx.float32)
    parameters: Any = tree_flatten(model.parameters())
    weights = sum(int(value.nbytes) for _, value in parameters)
    prompt = mx.array(tokenizer.encode("Tell me a long story about a lighthouse keeper."))
    rates = []
    for index in range(runs + 1):
        times = []
        for _token, _ in generate_step(prompt, model, max_tokens=max_tokens):
            times.append(time.perf_counter())
        if index:
            rates.append((len(times) - 1) / (times[-1] - times[0]))
    return rates, weights


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.engines.device import choose_compute_path

    compute = choose_compute_path()  # before MLX is imported: OpenBLAS first
    import mlx.core as mx

    from gateway.config import default_cache_dir
    from gateway.modelstore.store import DEFAULT_MODEL_ID, ModelStore

    folder = ModelStore(Path(args.cache_dir or default_cache_dir())).ensure(DEFAULT_MODEL_ID)
    dtype = mx.float32 if compute.dequantize else mx.float16
    bandwidth = Summary.of(matvec_bandwidth(args.runs, dtype))
    decode, weight_bytes = decode_rates(folder, args.runs, args.max_tokens)
    decode_summary = Summary.of(decode)
    ceiling = bandwidth.median / weight_bytes
    print(
        table(
            [
                (
                    "matrix-vector bandwidth (GB/s)",
                    str(dtype),
                    Summary.of([r / 1e9 for r in [bandwidth.min, bandwidth.median, bandwidth.max]]),
                ),
                ("decode tokens/s", "mlx-lm on the model", decode_summary),
            ]
        )
    )
    print(f"\nweights read per token: {weight_bytes / 1e6:.1f} MB")
    print(
        f"ceiling: {ceiling:.1f} tokens/s; decode median is {decode_summary.median / ceiling:.1%} of it"
    )
    return {
        "benchmark": "ceiling",
        "runs": args.runs,
        "weights_bytes": weight_bytes,
        "matvec_bytes_per_second": bandwidth.as_dict(),
        "ceiling_tokens_per_second": ceiling,
        "decode_tokens_per_second": decode_summary.as_dict(),
        "fraction_of_ceiling": decode_summary.median / ceiling,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
