"""How soon a stream's first event arrives, by prompt length, with and without an agent's tools.

Agents' streaming clients give up when no event comes for a while (Codex CLI: 300 s); a
stream should open at once, whatever has to happen before its first token. Each run sends a
streamed Responses request whose prompt no cache has seen (its words drawn from a seeded
generator per run, ``testsupport.prompts``), reads up to the first event, and leaves (the
gateway stops the work). With ``--baseline``, another version's gateway answers the same
prompts, interleaved run by run. The first run is the discarded warm-up.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from testsupport.process import RunningGateway, this_and_baseline
from testsupport.prompts import uncached_prompt

MODEL = "smollm2-135m-instruct"
WORDS = (100, 700, 1_400)  # about 3.9 SmolLM2 tokens each: ~390, ~2.7K and ~5.5K tokens
# An agent's offer: 20 functions, each with a few typed parameters (a grammar to compile).
TOOLS = [
    {
        "type": "function",
        "name": f"tool_{index}",
        "description": "Does one of the agent's things. " * 4,
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "lines": {"type": "integer"},
                "mode": {"type": "string", "enum": ["read", "write", "append"]},
            },
            "required": ["path"],
        },
    }
    for index in range(20)
]


def _first_event_seconds(client: httpx.Client, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    with client.stream("POST", "/v1/responses", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {response.read().decode()[:300]}")
        for line in response.iter_lines():
            if line.startswith("event:"):
                return time.perf_counter() - started
    raise RuntimeError("the stream ended without an event")


def _cases() -> list[tuple[str, int, bool]]:
    return [(f"{w} words{' + 20 tools' if t else ''}", w, t) for w in WORDS for t in (False, True)]


def _measure(gateways: dict[str, RunningGateway], runs: int) -> dict[str, dict[str, list[float]]]:
    measured: dict[str, dict[str, list[float]]] = {
        name: {case: [] for case, _, _ in _cases()} for name in gateways
    }
    clients = {
        name: httpx.Client(base_url=gateway.base_url, timeout=600)
        for name, gateway in gateways.items()
    }
    try:
        for client in clients.values():
            client.get("/health")  # the connection is open, as an agent's is
        for index in range(runs + 1):
            for number, (case, words, tools) in enumerate(_cases()):
                for name, client in clients.items():
                    # The same prompt for each version (each gateway has its own caches).
                    body: dict[str, Any] = {
                        "model": MODEL,
                        "input": uncached_prompt(words, seed=index * 100 + number),
                        "stream": True,
                        "max_output_tokens": 4,
                    }
                    if tools:
                        body["tools"] = TOOLS
                    measured[name][case].append(_first_event_seconds(client, body))
                    time.sleep(0.5)  # the stopped prefill has left the slot
    finally:
        for client in clients.values():
            client.close()
    return {name: {c: v[1:] for c, v in rows.items()} for name, rows in measured.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-opening-"))
    with this_and_baseline(workdir, args.baseline) as gateways:
        load = os.getloadavg()
        results = _measure(gateways, args.runs)
        load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min): start {load}, end {load_after}")
    rows: list[tuple[str, str, Summary]] = []
    summary: dict[str, Any] = {}
    for case, _, _ in _cases():
        of = {
            name: Summary.of([1000 * s for s in measured[case]])
            for name, measured in results.items()
        }
        for name, stats in of.items():
            rows.append((f"first event (ms): {case}", name, stats))
        summary[case] = {name: stats.as_dict() for name, stats in of.items()}
        if "baseline" in of:
            summary[case]["gateway_over_baseline"] = ratio(of["gateway"], of["baseline"])
    print(table(rows))
    return {
        "benchmark": "opening",
        "runs": args.runs,
        "unit": "ms",
        "load_average": {"start": load, "end": load_after},
        **summary,
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
