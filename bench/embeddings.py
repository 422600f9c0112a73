"""Embeddings throughput: inputs/s for batches of 1, 8 and 32 short texts over HTTP.

The real gateway process on the default model, ``POST /v1/embeddings`` as clients send it
(floats). Each batch size: one discarded warm-up, then ``--runs`` measured requests. Inputs
are computed one by one inside the one job (deterministic vectors), so inputs/s is expected
to be nearly flat in the batch size: what a batch saves is HTTP and queueing per input.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import Summary, table, write_json
from gateway.modelstore.store import DEFAULT_MODEL_ID
from testsupport.process import start_gateway

BATCH_SIZES = (1, 8, 32)
# Fixed short texts (5-10 words each), cycled to fill a batch.
TEXTS = (
    "The cat sat on the mat.",
    "Paris is the capital of France.",
    "A quick brown fox jumps over the lazy dog.",
    "Rain is expected tomorrow afternoon.",
    "She plays the violin every evening.",
    "The stock market closed higher today.",
    "Water boils at one hundred degrees.",
    "He forgot his keys at the office.",
)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gateway-bench-embeddings-") as workdir:
        gateway = start_gateway(Path(workdir))
        try:
            client = gateway.http()
            rows = []
            summaries: dict[str, Summary] = {}
            for size in BATCH_SIZES:
                body = {
                    "model": DEFAULT_MODEL_ID,
                    "input": [TEXTS[i % len(TEXTS)] for i in range(size)],
                }
                rates = []
                for _ in range(args.runs + 1):  # the first is the warm-up
                    started = time.perf_counter()
                    response = client.post("/v1/embeddings", json=body)
                    elapsed = time.perf_counter() - started
                    response.raise_for_status()
                    assert len(response.json()["data"]) == size
                    rates.append(size / elapsed)
                summary = Summary.of(rates[1:])
                summaries[f"batch {size}"] = summary
                rows.append(("inputs_per_second", f"batch {size}", summary))
        finally:
            gateway.stop()
    print(table(rows))
    return {
        "benchmark": "embeddings",
        "runs": args.runs,
        "texts": list(TEXTS),
        "summaries": {name: s.as_dict() for name, s in summaries.items()},
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
