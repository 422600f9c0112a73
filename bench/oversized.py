"""A normal request's latency, idle vs with 8 oversized conversations in flight.

Each oversized body is a 40,000-message conversation (~2.4 MB, under ``max_request_bytes``,
far beyond any context): the gateway must refuse it cheaply, before validating or tokenizing
megabytes, and never block its event loop. Each run sends the 8 bodies at once and the
normal request (a one-token chat) among them, alternating with the same request on an idle
gateway; ``/health`` is polled all the while, and its worst latency is the second row.
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

from bench.stats import Summary, ratio, table, write_json
from testsupport.process import start_gateway

CLIENTS = 8
MESSAGES = 40_000  # ~2.4 MB: under the default max_request_bytes (4 MiB)
HEALTH_EVERY_SECONDS = 0.01
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


class HealthPoller:
    """Polls ``/health`` on its own connection while a run is in flight; keeps the worst."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30)
        self.worst = 0.0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            self.client.get("/health").raise_for_status()
            self.worst = max(self.worst, time.perf_counter() - started)
            time.sleep(HEALTH_EVERY_SECONDS)

    def __enter__(self) -> HealthPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    gateway = start_gateway(Path(tempfile.mkdtemp(prefix="gateway-bench-oversized-")))
    # Encoded once: the flood's cost should be the gateway's, not the benchmark's JSON encoder.
    turn = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ]
    huge = json.dumps(
        {"model": "smollm2-135m-instruct", "messages": turn * (MESSAGES // 2)}
    ).encode()
    refusals: list[int] = []

    def post_oversized(client: httpx.Client) -> None:
        response = client.post(
            "/v1/chat/completions", content=huge, headers={"content-type": "application/json"}
        )
        refusals.append(response.status_code)

    idle: list[float] = []
    loaded: list[float] = []
    health_idle: list[float] = []
    health_loaded: list[float] = []
    clients = [httpx.Client(base_url=gateway.base_url, timeout=120) for _ in range(CLIENTS)]
    try:
        with gateway.http() as client:
            for _ in range(args.runs + 1):  # the first of each is the warm-up
                with HealthPoller(gateway.base_url) as poller:
                    idle.append(normal_latency(client))
                    time.sleep(0.2)
                health_idle.append(poller.worst)
                # 8 big bodies in flight at once, and the normal request among them.
                with HealthPoller(gateway.base_url) as poller:
                    threads = [threading.Thread(target=post_oversized, args=(c,)) for c in clients]
                    for thread in threads:
                        thread.start()
                    time.sleep(0.02)  # the bodies are on their way
                    loaded.append(normal_latency(client))
                    for thread in threads:
                        thread.join()
                health_loaded.append(poller.worst)
    finally:
        for c in clients:
            c.close()
        gateway.stop()
    summaries = {
        "idle": Summary.of(idle[1:]),
        f"{CLIENTS} oversized clients": Summary.of(loaded[1:]),
    }
    health = {
        "idle": Summary.of(health_idle[1:]),
        f"{CLIENTS} oversized clients": Summary.of(health_loaded[1:]),
    }
    rows = [("normal request latency_s", name, s) for name, s in summaries.items()]
    rows += [("/health worst latency_s", name, s) for name, s in health.items()]
    print(table(rows))
    slowdown = ratio(summaries[f"{CLIENTS} oversized clients"], summaries["idle"])
    worst_health = health[f"{CLIENTS} oversized clients"].max
    statuses = sorted(set(refusals))
    print(f"\nloaded/idle latency (medians): {slowdown:.2f}x   (goal <= 2x)")
    print(f"/health worst while loaded: {worst_health:.3f} s   (goal <= 0.5 s)")
    print(f"oversized bodies sent: {len(refusals)}, statuses: {statuses}")
    return {
        "benchmark": "oversized",
        "runs": args.runs,
        "summaries": {name: s.as_dict() for name, s in summaries.items()},
        "latency_ratio_loaded_over_idle": slowdown,
        "health_worst_s": {name: s.as_dict() for name, s in health.items()},
        "oversized_requests": len(refusals),
        "oversized_statuses": statuses,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
