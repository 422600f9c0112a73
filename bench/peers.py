"""Two Macs, two seats: 20 independent requests on one node vs on two peered nodes, in one run.

Three gateways are started on the embedded model: a lone node pinned to core 0, and a pair,
the first pinned to core 0 with the second (pinned to core 1) as its peer. BLAS runs one
thread per node, so a node is one core, as one Mac is one machine. Each measured run posts
the same 20 greedy chat completions (different questions, ``--max-tokens`` each) at once to
the lone node, then to the pair's first node, and times each batch; the runs alternate and
the first of each is a discarded warm-up. Throughput is requests per second.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from testsupport.process import RunningGateway, start_gateway

REQUESTS = 20
SECRET = "bench-peer-secret-0123456789"
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
QUESTIONS = [
    f"In two sentences, what is special about {topic}?"
    for topic in (
        "Paris",
        "the moon",
        "coffee",
        "bicycles",
        "the sea",
        "libraries",
        "volcanoes",
        "honey bees",
        "jazz",
        "chess",
        "glaciers",
        "the violin",
        "tea",
        "lighthouses",
        "owls",
        "deserts",
        "bridges",
        "tomatoes",
        "comets",
        "rainforests",
    )
]


def batch(node: RunningGateway, max_tokens: int) -> tuple[float, dict[str, int]]:
    """Seconds for the 20 requests posted at once, and who served them."""
    served: dict[str, int] = {}

    def ask(question: str) -> str:
        body = {
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        answer = httpx.post(f"{node.base_url}/v1/chat/completions", json=body, timeout=900)
        answer.raise_for_status()
        return answer.headers.get("x-gateway-peer", "local")

    started = time.perf_counter()
    with ThreadPoolExecutor(REQUESTS) as pool:
        for where in pool.map(ask, QUESTIONS[:REQUESTS]):
            served[where] = served.get(where, 0) + 1
    return time.perf_counter() - started, served


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-peers-"))
    nodes: list[RunningGateway] = []
    lone_rps: list[float] = []
    pair_rps: list[float] = []
    spread: list[dict[str, int]] = []
    try:
        lone = start_gateway(workdir / "lone", {}, cpus="0", extra_env=ONE_THREAD)
        nodes.append(lone)
        second = start_gateway(
            workdir / "second", {"peers": {"secret": SECRET}}, cpus="1", extra_env=ONE_THREAD
        )
        nodes.append(second)
        first = start_gateway(
            workdir / "first",
            {"peers": {"secret": SECRET, "nodes": [second.base_url], "heartbeat_seconds": 0.5}},
            cpus="0",
            extra_env=ONE_THREAD,
        )
        nodes.append(first)
        time.sleep(2)  # the first heartbeat
        for index in range(args.runs + 1):  # alternating; the first of each is the warm-up
            seconds, _ = batch(lone, args.max_tokens)
            lone_rps.append(REQUESTS / seconds)
            seconds, served = batch(first, args.max_tokens)
            pair_rps.append(REQUESTS / seconds)
            spread.append(served)
            print(
                f"run {index}: one node {lone_rps[-1]:.3f} req/s, two nodes {pair_rps[-1]:.3f} req/s {served}"
            )
    finally:
        for node in nodes:
            node.stop()
    one, two = Summary.of(lone_rps[1:]), Summary.of(pair_rps[1:])
    print(
        table(
            [
                ("requests/s", "one node (1 core)", one),
                ("requests/s", "two nodes (1 core each)", two),
            ]
        )
    )
    speedup = ratio(two, one)
    print(f"\ntwo nodes / one node throughput (medians): {speedup:.2f}x   (goal >= 1.8)")
    return {
        "benchmark": "peers",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "requests": REQUESTS,
        "one_node_rps": one.as_dict(),
        "two_nodes_rps": two.as_dict(),
        "throughput_ratio": speedup,
        "served_by": spread[1:],
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
