"""A normal request's latency, idle vs with 8 maximal oversized conversations in flight.

Each oversized body is just under ``max_request_bytes`` (a conversation far beyond the context
length): the gateway must refuse it cheaply, before tokenizing megabytes, and never block its
event loop. Each run sends the 8 bodies at once and the normal request (a one-token chat)
among them, alternating with the same request on an idle gateway.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.process import start_gateway
from gateway.bench.stats import Summary, ratio, table, write_json

CLIENTS = 8
BODY_BYTES = 4 * 1024**2 - 64 * 1024  # under the default max_request_bytes (4 MiB)
NORMAL = {
    "model": "smollm2-135m-instruct",
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 1,
    "temperature": 0,
}


def normal_latency(client: httpx.Client) -> float:
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json=NORMAL)
    response.raise_for_status()
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    gateway = start_gateway(Path(tempfile.mkdtemp(prefix="gateway-bench-oversized-")))
    # Encoded once: the flood's cost should be the gateway's, not the benchmark's JSON encoder.
    huge = json.dumps(
        {
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": "word " * (BODY_BYTES // 5)}],
        }
    ).encode()
    refusals: list[int] = []

    def post_oversized(client: httpx.Client) -> None:
        response = client.post(
            "/v1/chat/completions", content=huge, headers={"content-type": "application/json"}
        )
        refusals.append(response.status_code)

    idle: list[float] = []
    loaded: list[float] = []
    clients = [httpx.Client(base_url=gateway.base_url, timeout=120) for _ in range(CLIENTS)]
    try:
        with gateway.http() as client:
            for _ in range(args.runs + 1):  # the first of each is the warm-up
                idle.append(normal_latency(client))
                # 8 maximal bodies in flight at once, and the normal request among them.
                threads = [threading.Thread(target=post_oversized, args=(c,)) for c in clients]
                for thread in threads:
                    thread.start()
                time.sleep(0.02)  # the bodies are on their way
                loaded.append(normal_latency(client))
                for thread in threads:
                    thread.join()
    finally:
        for c in clients:
            c.close()
        gateway.stop()
    summaries = {
        "idle": Summary.of(idle[1:]),
        f"{CLIENTS} oversized clients": Summary.of(loaded[1:]),
    }
    print(table([("normal request latency_s", name, s) for name, s in summaries.items()]))
    slowdown = ratio(summaries[f"{CLIENTS} oversized clients"], summaries["idle"])
    statuses = sorted(set(refusals))
    print(f"\nloaded/idle latency (medians): {slowdown:.2f}x   (goal <= 2x)")
    print(f"oversized bodies sent: {len(refusals)}, statuses: {statuses}")
    return {
        "benchmark": "oversized",
        "runs": args.runs,
        "summaries": {name: s.as_dict() for name, s in summaries.items()},
        "latency_ratio_loaded_over_idle": slowdown,
        "oversized_requests": len(refusals),
        "oversized_statuses": statuses,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
