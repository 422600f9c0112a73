"""A user request's time to first token: idle gateway vs 4 long background generations.

Each measured run has the same user request on an idle gateway, then while four long
``background`` generations are decoding (one in the slot, three queued), then while four
``background`` jobs with long prompts are still in prefill (one computing, three queued):
the wait behind a decode step and the wait behind a prefill chunk, measured apart. Beside
the time to first token, each row has the user job's wait for the slot (submitted to
started, from the gateway's ``gateway_queue_wait_seconds``): the part that is the running
job's pass in flight. The background streams are dropped after each so that every run
starts from the same state.

With ``--baseline SRC`` a second gateway runs another version's source (a git worktree of an
earlier commit); each run measures both, one after the other, so that a shared machine's
load falls on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.process import RunningGateway, baseline_env, start_gateway, store_serving
from bench.stats import Summary, ratio, table, write_json
from gateway.modelstore.store import DEFAULT_MODEL_ID

USER_PROMPT = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three rivers in Europe and one fact about each."},
]
BACKGROUND_PROMPT = [
    {"role": "user", "content": "Write a very long essay about the history of tea."}
]
# ~5,000 tokens: seconds of prefill here, so the user arrives mid-prefill.
LONG_PROMPT = [
    {
        "role": "user",
        "content": "Summarize this log. "
        + " ".join(f"line {i}: request served in {i % 97} ms;" for i in range(400)),
    }
]
BACKGROUND_JOBS = 4
SEED = 1234
# The user arrives this long after the long-prompt jobs are in: well inside the first one's
# prefill on a CPU (seconds) and on a GPU too (~0.1 s for ~5,000 tokens in small chunks).
PREFILL_LEAD_SECONDS = 0.05


def _slot_waits(client: httpx.Client) -> tuple[float, float]:
    """The user lane's total wait for the slot and its count, from ``/metrics``."""
    found = {"sum": 0.0, "count": 0.0}
    for line in client.get("/metrics").text.splitlines():
        for key in found:
            if line.startswith(f'gateway_queue_wait_seconds_{key}{{priority="user"}}'):
                found[key] = float(line.rsplit(" ", 1)[1])
    return found["sum"], found["count"]


def user_ttft_and_wait(client: httpx.Client) -> tuple[float, float]:
    """One user request's time to first token and its wait for the slot."""
    waited, count = _slot_waits(client)
    ttft = _ttft(client)
    after, after_count = _slot_waits(client)
    if after_count != count + 1:
        raise RuntimeError(f"expected one more user job in the metrics: {count} -> {after_count}")
    return ttft, after - waited


def _ttft(client: httpx.Client, priority: str = "user") -> float:
    body = {
        "model": DEFAULT_MODEL_ID,
        "messages": USER_PROMPT,
        "max_tokens": 8,
        "temperature": 0,
        "seed": SEED,
        "stream": True,
        "priority": priority,
    }
    started = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    return time.perf_counter() - started
    raise RuntimeError("no token received")


class BackgroundLoad:
    """Four long background streams, kept open until ``stop``."""

    def __init__(self, gateway: RunningGateway, in_prefill: bool = False) -> None:
        self.gateway = gateway
        # In prefill: long prompts, and the user arrives before the first token of any.
        self.in_prefill = in_prefill
        self.stopping = threading.Event()
        self.responses: list[httpx.Response] = []  # shut by ``__exit__``: the client leaves
        self.tokens_seen = 0
        self.threads = [
            threading.Thread(target=self._stream, daemon=True) for _ in range(BACKGROUND_JOBS)
        ]

    def _stream(self) -> None:
        body = {
            "model": DEFAULT_MODEL_ID,
            "messages": LONG_PROMPT if self.in_prefill else BACKGROUND_PROMPT,
            "max_tokens": 2000,
            "temperature": 0.7,
            "seed": SEED,
            "stream": True,
        }
        headers = {"X-Gateway-Priority": "background"}
        with (
            httpx.Client(base_url=self.gateway.base_url, timeout=600) as client,
            client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
        ):
            self.responses.append(response)
            with contextlib.suppress(Exception):  # shut under it by ``__exit__``
                for line in response.iter_lines():
                    if self.stopping.is_set():
                        return
                    if '"content":"' in line and '"content":""' not in line:
                        self.tokens_seen += 1

    def __enter__(self) -> BackgroundLoad:
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + 60
        while True:  # all four accepted: one decoding in the slot and three waiting
            view = self.gateway.scheduler()
            running = view["slot"] is not None and view["slot"]["priority"] == "background"
            waiting = len(view["queues"]["background"]) == BACKGROUND_JOBS - 1
            if running and waiting and self.in_prefill:
                time.sleep(PREFILL_LEAD_SECONDS)  # into the first job's prefill
                return self
            if running and waiting and self.tokens_seen >= 3:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"background load did not build up: {view}")
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        # A stream in prefill carries no line until its next keep-alive ping (10 s): shut
        # the connections at once, as a client that leaves does (the reader's blocked read
        # ends; closing the response from here would wait for it).
        for response in list(self.responses):
            stream = response.extensions.get("network_stream")
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(timeout=60)
        deadline = time.monotonic() + 120  # a loaded machine cancels slowly
        while self.gateway.scheduler()["slot"] is not None or any(
            self.gateway.scheduler()["queues"].values()
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("background load did not drain")
            time.sleep(0.02)


ROWS = (
    "idle gateway",
    f"{BACKGROUND_JOBS} background decoding",
    f"{BACKGROUND_JOBS} background in prefill",
)


class Variant:
    """One gateway and what was measured on it, row by row."""

    def __init__(self, name: str, gateway: RunningGateway) -> None:
        self.name = name
        self.gateway = gateway
        self.ttft: dict[str, list[float]] = {row: [] for row in ROWS}
        self.slot_wait: dict[str, list[float]] = {row: [] for row in ROWS}
        self.still_in_prefill = 0

    def run_once(self) -> None:
        idle, decoding, prefilling = ROWS
        with self.gateway.http() as client:
            self._note(idle, user_ttft_and_wait(client))
            with BackgroundLoad(self.gateway):
                self._note(decoding, user_ttft_and_wait(client))
            with BackgroundLoad(self.gateway, in_prefill=True) as load:
                self._note(prefilling, user_ttft_and_wait(client))
                self.still_in_prefill += load.tokens_seen == 0

    def _note(self, row: str, measured: tuple[float, float]) -> None:
        self.ttft[row].append(measured[0])
        self.slot_wait[row].append(measured[1])
        print(
            f"{self.name}: {row}: ttft {measured[0]:.4f} s, slot wait {measured[1]:.4f} s",
            flush=True,
        )

    def summaries(self, values: dict[str, list[float]]) -> dict[str, Summary]:
        return {row: Summary.of(found[1:]) for row, found in values.items()}  # no warm-up

    def report(self) -> dict[str, Any]:
        ttft, waits = self.summaries(self.ttft), self.summaries(self.slot_wait)
        idle, decoding, prefilling = ROWS
        rows = [(f"{self.name}: user ttft_s", row, ttft[row]) for row in ROWS]
        rows += [(f"{self.name}: user slot wait_s", row, waits[row]) for row in ROWS]
        print(table(rows))
        behind_decode, behind_prefill = (
            ratio(ttft[decoding], ttft[idle]),
            ratio(ttft[prefilling], ttft[idle]),
        )
        name = self.name
        print(
            f"{name}: loaded/idle time to first token (medians), behind decode: {behind_decode:.3f}"
        )
        print(f"{name}: the same behind prefill: {behind_prefill:.3f}")
        print(f"{name}: runs with no background token by the user's first: {self.still_in_prefill}")
        print()
        return {
            "idle_ttft_s": ttft[idle].as_dict(),
            "loaded_ttft_s": ttft[decoding].as_dict(),
            "prefill_loaded_ttft_s": ttft[prefilling].as_dict(),
            "slot_wait_s": {row: waits[row].as_dict() for row in ROWS},
            "ratio_loaded_over_idle": behind_decode,
            "ratio_prefill_loaded_over_idle": behind_prefill,
            "runs_background_still_in_prefill": self.still_in_prefill,
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    # No prefix cache: every user request prefills its whole prompt in both variants.
    config: dict[str, Any] = {"cache": {"prefix_cache_bytes": 0}}
    if args.model_folder:  # served under the default model's id, by either version
        config["cache_dir"] = str(store_serving(Path(args.model_folder), workdir / "store"))
    variants: list[Variant] = []
    try:
        variants.append(Variant("gateway", start_gateway(workdir / "gateway", config)))
        if args.baseline:
            baseline = start_gateway(
                workdir / "baseline",
                config,
                extra_env=baseline_env(args.baseline),
                cwd=workdir,  # outside this checkout: -m would import its gateway first
            )
            variants.append(Variant("baseline", baseline))
        load = os.getloadavg()
        for _ in range(args.runs + 1):
            for variant in variants:
                variant.run_once()
        load_after = os.getloadavg()
    finally:
        for variant in variants:
            variant.gateway.stop()
    print(f"load average (1, 5, 15 min) at the start {load}, at the end {load_after}\n")
    result: dict[str, Any] = {"benchmark": "priority", "runs": args.runs, "baseline": args.baseline}
    result["model_folder"] = args.model_folder
    result["load_average"] = {"start": load, "end": load_after}
    for variant in variants:
        result[variant.name] = variant.report()
    return result


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
