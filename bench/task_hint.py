"""A background task sent right after its typing hint vs the same task without a hint.

An editor (or any client) posts a hint naming a task type and its arguments, then sends the
task: the hint prefills the prompt, and the task should start at once. Each run uses a new
conversation for each variant, so only its own hint can warm it; between the variants the
gateway is left quiet for longer than ``typing_quiet_seconds``, so one variant's typing
cannot hold the other. With ``--baseline``, another version's gateway answers the same runs,
interleaved with this one's (an idle gateway costs the other nothing measurable). The first
run is the discarded warm-up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from testsupport.process import RunningGateway, this_and_baseline

TASK = "title"  # a background task type with a short answer (max_tokens 24)
QUIET_SECONDS = 2.5  # longer than the default typing_quiet_seconds (2)


def _conversation(variant: str, index: int) -> str:
    return (
        f"User: we are planning trip number {index} ({variant}); which harbour towns in "
        "Portugal should we visit?\nAssistant: Porto, Nazaré and Lagos are worth a stop."
    )


def _task_seconds(client: httpx.Client, conversation: str, hinted: bool) -> tuple[float, int]:
    args = {"conversation": conversation}
    started = time.perf_counter()
    if hinted:
        hint = client.post("/v1/typing", json={"task": {"type": TASK, "args": args}})
        hint.raise_for_status()
    result = client.post(f"/v1/tasks/{TASK}", json={"args": args})
    result.raise_for_status()
    seconds = time.perf_counter() - started
    return seconds, int(result.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def _measure(gateways: dict[str, RunningGateway], runs: int) -> dict[str, dict[str, list[float]]]:
    """Each run: every version, each variant, in turn (the first run is dropped)."""
    measured: dict[str, dict[str, list[float]]] = {
        name: {"hinted": [], "plain": [], "hinted cached tokens": []} for name in gateways
    }
    clients = {
        name: httpx.Client(base_url=gateway.base_url, timeout=120)
        for name, gateway in gateways.items()
    }
    try:
        for index in range(runs + 1):
            for name, client in clients.items():
                for variant in ("hinted", "plain"):
                    time.sleep(QUIET_SECONDS)
                    seconds, cached = _task_seconds(
                        client, _conversation(f"{name} {variant}", index), variant == "hinted"
                    )
                    measured[name][variant].append(float(seconds))
                    if variant == "hinted":
                        measured[name]["hinted cached tokens"].append(float(cached))
    finally:
        for client in clients.values():
            client.close()
    return {
        name: {key: values[1:] for key, values in rows.items()} for name, rows in measured.items()
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-task-hint-"))
    with this_and_baseline(workdir, args.baseline) as gateways:
        results = _measure(gateways, args.runs)
    rows: list[tuple[str, str, Summary]] = []
    summary: dict[str, Any] = {}
    hinted_of: dict[str, Summary] = {}
    for name, measured in results.items():
        hinted, plain = Summary.of(measured["hinted"]), Summary.of(measured["plain"])
        hinted_of[name] = hinted
        rows += [
            (f"{TASK} task latency (s)", f"{name}: hint, then task", hinted),
            (f"{TASK} task latency (s)", f"{name}: task alone", plain),
        ]
        summary[name] = {
            "hinted": hinted.as_dict(),
            "plain": plain.as_dict(),
            "hinted_over_plain": ratio(hinted, plain),
            "hinted_cached_tokens": [int(t) for t in measured["hinted cached tokens"]],
        }
    print(table(rows))
    if "baseline" in hinted_of:
        summary["hinted_gateway_over_baseline"] = ratio(hinted_of["gateway"], hinted_of["baseline"])
    return {"benchmark": "task-hint", "runs": args.runs, **summary}


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
