"""A user request's time to first token and decode: idle gateway vs 4 background generations.

Each measured run has the same user request on an idle gateway, then while four long
``background`` generations are decoding, then while four ``background`` jobs with long
prompts are still in prefill: the wait behind a decode step and the wait behind a prefill
chunk, measured apart. Since issue 33 the four background jobs share the slot as one batch
(as many as the tier's ``max_sequences`` in ``/health`` lets in); a gateway without batching
(``--baseline`` of an older source) runs one and queues three. Each row names the layout it
found when the user arrived. Beside the time to first token, each row has the user job's
wait for the slot (submitted to started, from the gateway's ``gateway_queue_wait_seconds``):
the part that is the running job's pass in flight; and the user's own decode speed (tokens/s
after its first token, ``--max-tokens`` of them, greedy): a waiting user pauses the
background batch, so it decodes alone (issue 33: within 0.8x of idle). The background
streams are dropped after each so that every run starts from the same state.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from bench.streaming import stream_chat
from gateway.modelstore.store import DEFAULT_MODEL_ID
from gateway.scheduler.turn_trace import TRACE_DIR_ENV, TRACE_FILE, summarize
from testsupport.process import RunningGateway, baseline_env, start_gateway, store_serving

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


@dataclass(frozen=True)
class UserProbe:
    """What one user request met: its time to first token, wait for the slot and decode."""

    ttft: float
    slot_wait: float
    decode: float  # tokens/s after the first token (the usage's count)
    layout: str  # where the background jobs were when it was sent


def measure_user(client: httpx.Client, max_tokens: int, layout: str = "idle") -> UserProbe:
    """One user request (greedy, streamed to the end): what ``UserProbe`` holds."""
    waited, count = _slot_waits(client)
    body = {
        "model": DEFAULT_MODEL_ID,
        "messages": USER_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": SEED,
        "priority": "user",
        "stream_options": {"include_usage": True},
    }
    streamed = stream_chat(client, body)
    after, after_count = _slot_waits(client)
    if after_count != count + 1:
        raise RuntimeError(f"expected one more user job in the metrics: {count} -> {after_count}")
    return UserProbe(streamed.ttft, after - waited, streamed.decode_tokens, layout)


def batch_capacity(gateway: RunningGateway) -> int:
    """How many generations the default tier decodes together (1 before issue 33)."""
    health = gateway.http().get("/health").json()
    tier = health["tiers"][health["default_tier"]]
    return int(tier.get("batch", {}).get("max_sequences", 1))


def background_layout(view: dict[str, Any]) -> tuple[int, int]:
    """The background jobs in the slot and those queued, from ``/v1/scheduler``."""
    # A gateway before issue 33 shows no "batch": its slot holds one job.
    in_slot = view.get("batch") or ([view["slot"]] if view["slot"] else [])
    running = sum(job["priority"] == "background" for job in in_slot)
    return running, len(view["queues"]["background"])


class BackgroundLoad:
    """Four long background streams, kept open until the context ends.

    ``in_slot``: how many of them the slot takes together (the tier's batch capacity, at most
    four); the rest wait in the background queue. Decoding, the load is ready once that many
    stream tokens; in prefill, once all four are accepted (the user then arrives
    ``PREFILL_LEAD_SECONDS`` later, inside the prefill). ``layout`` says what it found.
    """

    def __init__(self, gateway: RunningGateway, in_slot: int, in_prefill: bool = False) -> None:
        self.gateway = gateway
        self.in_slot = min(in_slot, BACKGROUND_JOBS)
        # In prefill: long prompts, and the user arrives before the first token of any.
        self.in_prefill = in_prefill
        self.stopping = threading.Event()
        self.responses: list[httpx.Response] = []  # shut by ``__exit__``: the client leaves
        self.tokens_seen = 0
        self.streams_with_tokens = 0
        self.layout = ""
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
            seen = 0
            with contextlib.suppress(Exception):  # shut under it by ``__exit__``
                for line in response.iter_lines():
                    if self.stopping.is_set():
                        return
                    if '"content":"' in line and '"content":""' not in line:
                        self.tokens_seen += 1
                        seen += 1
                        self.streams_with_tokens += seen == 1

    def __enter__(self) -> BackgroundLoad:
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + 60
        while True:
            running, waiting = background_layout(self.gateway.scheduler())
            self.layout = f"{running} in the slot, {waiting} queued"
            accepted = running >= 1 and running + waiting == BACKGROUND_JOBS
            if accepted and self.in_prefill:
                time.sleep(PREFILL_LEAD_SECONDS)  # into the first job's prefill
                return self
            if running == self.in_slot and accepted and self._decoding():
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"background load did not build up: {self.layout}")
            time.sleep(0.02)

    def _decoding(self) -> bool:
        """Whether each job in the slot has streamed a token (three when one runs alone)."""
        if self.in_slot == 1:
            return self.tokens_seen >= 3
        return self.streams_with_tokens >= self.in_slot

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

    def __init__(self, name: str, gateway: RunningGateway, max_tokens: int) -> None:
        self.name = name
        self.gateway = gateway
        self.max_tokens = max_tokens
        self.in_slot = batch_capacity(gateway)
        self.probes: dict[str, list[UserProbe]] = {row: [] for row in ROWS}
        self.still_in_prefill = 0

    def run_once(self) -> None:
        idle, decoding, prefilling = ROWS
        with self.gateway.http() as client:
            self._note(idle, measure_user(client, self.max_tokens))
            with BackgroundLoad(self.gateway, self.in_slot) as load:
                self._note(decoding, measure_user(client, self.max_tokens, load.layout))
            with BackgroundLoad(self.gateway, self.in_slot, in_prefill=True) as load:
                self._note(prefilling, measure_user(client, self.max_tokens, load.layout))
                self.still_in_prefill += load.tokens_seen == 0

    def _note(self, row: str, probe: UserProbe) -> None:
        self.probes[row].append(probe)
        print(
            f"{self.name}: {row} ({probe.layout}): ttft {probe.ttft:.4f} s, "
            f"slot wait {probe.slot_wait:.4f} s, decode {probe.decode:.1f} tok/s",
            flush=True,
        )

    def summaries(self, field: str) -> dict[str, Summary]:
        """``field`` of the user probes per row, the warm-up left out."""
        return {
            row: Summary.of([getattr(probe, field) for probe in found[1:]])
            for row, found in self.probes.items()
        }

    def report(self) -> dict[str, Any]:
        ttft, waits, decode = (self.summaries(f) for f in ("ttft", "slot_wait", "decode"))
        idle, decoding, prefilling = ROWS
        rows = [(f"{self.name}: user ttft_s", row, ttft[row]) for row in ROWS]
        rows += [(f"{self.name}: user slot wait_s", row, waits[row]) for row in ROWS]
        rows += [(f"{self.name}: user decode tok/s", row, decode[row]) for row in ROWS]
        print(table(rows))
        behind_decode, behind_prefill = (
            ratio(ttft[decoding], ttft[idle]),
            ratio(ttft[prefilling], ttft[idle]),
        )
        decode_behind_decode, decode_behind_prefill = (
            ratio(decode[decoding], decode[idle]),
            ratio(decode[prefilling], decode[idle]),
        )
        name = self.name
        print(
            f"{name}: loaded/idle (medians), behind decode: time to first token "
            f"{behind_decode:.3f}, the user's decode tok/s {decode_behind_decode:.3f}"
        )
        print(
            f"{name}: the same behind prefill: time to first token {behind_prefill:.3f}, "
            f"decode tok/s {decode_behind_prefill:.3f}"
        )
        layouts = {row: sorted({p.layout for p in found[1:]}) for row, found in self.probes.items()}
        print(
            f"{name}: background jobs when the user arrived: {layouts[decoding]} (decoding), "
            f"{layouts[prefilling]} (in prefill); batch capacity {self.in_slot}"
        )
        print(f"{name}: runs with no background token by the user's first: {self.still_in_prefill}")
        print()
        return {
            "idle_ttft_s": ttft[idle].as_dict(),
            "loaded_ttft_s": ttft[decoding].as_dict(),
            "prefill_loaded_ttft_s": ttft[prefilling].as_dict(),
            "slot_wait_s": {row: waits[row].as_dict() for row in ROWS},
            "user_decode_tok_s": {row: decode[row].as_dict() for row in ROWS},
            "ratio_loaded_over_idle": behind_decode,
            "ratio_prefill_loaded_over_idle": behind_prefill,
            "decode_ratio_loaded_over_idle": decode_behind_decode,
            "decode_ratio_prefill_loaded_over_idle": decode_behind_prefill,
            "batch_capacity": self.in_slot,
            "background_layouts": layouts,
            "runs_background_still_in_prefill": self.still_in_prefill,
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    # No prefix cache: every user request prefills its whole prompt in both variants.
    config: dict[str, Any] = {"cache": {"prefix_cache_bytes": 0}}
    if args.model_folder:  # served under the default model's id, by either version
        config["cache_dir"] = str(store_serving(Path(args.model_folder), workdir / "store"))
    gateways: list[RunningGateway] = []
    trace = Path(args.trace_dir) / "trace" if args.trace_dir else None
    traced = {TRACE_DIR_ENV: str(trace)} if trace is not None else None
    try:
        gateways.append(start_gateway(workdir / "gateway", config, extra_env=traced))
        if args.baseline:
            baseline = start_gateway(
                workdir / "baseline",
                config,
                extra_env=baseline_env(args.baseline),
                cwd=workdir,  # outside this checkout: -m would import its gateway first
            )
            gateways.append(baseline)
        names = ("gateway", "baseline")
        variants = [Variant(n, g, args.max_tokens) for n, g in zip(names, gateways, strict=False)]
        load = os.getloadavg()
        began = 0.0  # when the measured runs began (the trace leaves out the warm-up)
        for run in range(args.runs + 1):
            if run == 1:
                began = time.perf_counter()
            for variant in variants:
                variant.run_once()
        load_after = os.getloadavg()
    finally:
        for gateway in gateways:
            gateway.stop()
    print(f"load average (1, 5, 15 min) at the start {load}, at the end {load_after}\n")
    result: dict[str, Any] = {"benchmark": "priority", "runs": args.runs, "baseline": args.baseline}
    result["user_max_tokens"] = args.max_tokens
    result["model_folder"] = args.model_folder
    result["load_average"] = {"start": load, "end": load_after}
    for variant in variants:
        result[variant.name] = variant.report()
    if trace is not None:  # the gateway's turns (not the baseline's), every lane
        result["trace"] = summarize(trace / TRACE_FILE, began)
        print(f"trace of the measured runs: {json.dumps(result['trace'], indent=1)}")
    return result


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
