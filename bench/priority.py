"""A user request's time to first token: idle gateway vs 4 long background generations.

Each measured run has the same user request on an idle gateway, then while four long
``background`` generations are decoding (one in the slot, three queued), then while four
``background`` jobs with long prompts are still in prefill (one computing, three queued):
the wait behind a decode step and the wait behind a prefill chunk, measured apart. The
background streams are dropped after each so that every run starts from the same state.
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

from bench.process import RunningGateway, start_gateway
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
                time.sleep(0.3)  # into the first job's prefill
                return self
            if running and waiting and self.tokens_seen >= 3:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"background load did not build up: {view}")
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        deadline = time.monotonic() + 30
        while self.gateway.scheduler()["slot"] is not None or any(
            self.gateway.scheduler()["queues"].values()
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("background load did not drain")
            time.sleep(0.02)


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    # No prefix cache: every user request prefills its whole prompt in both variants.
    gateway = start_gateway(workdir, {"cache": {"prefix_cache_bytes": 0}})
    idle: list[float] = []
    loaded: list[float] = []
    prefilling: list[float] = []
    still_in_prefill = 0
    try:
        with gateway.http() as client:
            for _ in range(args.runs + 1):
                idle.append(_ttft(client))
                with BackgroundLoad(gateway):
                    loaded.append(_ttft(client))
                with BackgroundLoad(gateway, in_prefill=True) as load:
                    prefilling.append(_ttft(client))
                    still_in_prefill += load.tokens_seen == 0
            final_view = gateway.scheduler()
    finally:
        gateway.stop()
    idle_s, loaded_s = Summary.of(idle[1:]), Summary.of(loaded[1:])
    prefill_s = Summary.of(prefilling[1:])
    print(
        table(
            [
                ("user ttft_s", "idle gateway", idle_s),
                ("user ttft_s", f"{BACKGROUND_JOBS} background decoding", loaded_s),
                ("user ttft_s", f"{BACKGROUND_JOBS} background in prefill", prefill_s),
            ]
        )
    )
    slowdown = ratio(loaded_s, idle_s)
    prefill_slowdown = ratio(prefill_s, idle_s)
    print(f"\nloaded/idle time to first token (medians), behind decode: {slowdown:.3f}")
    print(f"loaded/idle time to first token (medians), behind prefill: {prefill_slowdown:.3f}")
    print(f"runs where no background token had come by the user's first: {still_in_prefill}")
    return {
        "benchmark": "priority",
        "runs": args.runs,
        "idle_ttft_s": idle_s.as_dict(),
        "loaded_ttft_s": loaded_s.as_dict(),
        "prefill_loaded_ttft_s": prefill_s.as_dict(),
        "ratio_loaded_over_idle": slowdown,
        "ratio_prefill_loaded_over_idle": prefill_slowdown,
        "runs_background_still_in_prefill": still_in_prefill,
        "completed_jobs": final_view["completed_jobs"],
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
