"""What a kept conversation's cache costs a new turn (issue 32, item 1): the prefix store
hands out ``copy.deepcopy`` of a stored cache (mlx-lm's ``LRUPromptCache``), which on MLX
shares the buffers; the copy is made by the first write into a buffer the store still
holds. Times, for a SmolLM2-shaped cache (30 layers, 3 KV heads of 64, float32) of
``--tokens``: the deep copy, the first one-token write while the store holds the original
(shared), and the same write into a cache nothing else holds (owned). 1 discarded warm-up,
then ``--runs``; the load average beside it; ``--json`` for the raw figures."""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import mlx.core as mx
from mlx_lm.models.cache import KVCache

LAYERS, HEADS, HEAD_DIM = 30, 3, 64


def kept_cache(tokens: int) -> list[KVCache]:
    cache = []
    for _ in range(LAYERS):
        layer = KVCache()
        shape = (1, HEADS, tokens, HEAD_DIM)
        layer.update_and_fetch(mx.random.normal(shape), mx.random.normal(shape))
        cache.append(layer)
    mx.eval([layer.state for layer in cache])
    return cache


def write_one_token(cache: list[KVCache]) -> float:
    token = mx.zeros((1, HEADS, 1, HEAD_DIM))
    started = time.perf_counter()
    for layer in cache:
        layer.keys[..., 100:101, :] = token
        layer.values[..., 100:101, :] = token
    mx.eval([layer.state for layer in cache])
    return (time.perf_counter() - started) * 1000


def once(stored: list[KVCache], tokens: int) -> dict[str, float]:
    started = time.perf_counter()
    shared = copy.deepcopy(stored)
    mx.eval([layer.state for layer in shared])
    deepcopy_ms = (time.perf_counter() - started) * 1000
    owned = copy.deepcopy(kept_cache(tokens))  # its original dropped: nothing else holds it
    return {
        "deepcopy_ms": deepcopy_ms,
        "first_write_shared_ms": write_one_token(shared),
        "first_write_owned_ms": write_one_token(owned),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    from bench.stats import write_json

    load = os.getloadavg()
    stored = kept_cache(args.tokens)
    runs = [once(stored, args.tokens) for _ in range(args.runs + 1)][1:]
    summary = {}
    for key in runs[0]:
        values = sorted(run[key] for run in runs)
        summary[key] = {"min": values[0], "median": values[len(values) // 2], "max": values[-1]}
        print(f"{key}: median {summary[key]['median']:.2f} ms ({values[0]:.2f}-{values[-1]:.2f})")
    load_after = os.getloadavg()
    print(
        f"cache {sum(layer.nbytes for layer in stored) / 1e6:.0f} MB; load {load} -> {load_after}"
    )
    write_json(args.json, {"benchmark": "cache_copy_on_write", "tokens": args.tokens,
                           "cache_bytes": sum(layer.nbytes for layer in stored), "runs": runs,
                           "summary": summary, "load_average": {"start": load, "end": load_after},
                           "device": str(mx.default_device())})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
