"""N concurrent clients: the gateway vs ``mlx_lm.server`` on the same weights (issue 33).

For each N of ``--clients`` (default 1, 2, 4, 8), N clients stream at once, each its own fixed
prompt, greedy, ``--max-tokens`` each, first to the one server then to the other (which goes
first alternates run by run); one discarded warm-up per N, then ``--runs``. Per run and server:

* aggregate tokens/s: the completion tokens the usage reports, over the time from the first
  request sent to the last stream finished;
* the median over the clients of their times to first token.

Per N: the gateway's aggregate over ``mlx_lm.server``'s (medians), and each server's N-client
aggregate over its own one-client aggregate (what batching buys: ~1 when requests queue).

Two checks beside the figures. The largest batch ``GET /v1/scheduler`` showed during the
gateway's runs (polled every ``POLL_SECONDS``; a run shorter than one poll may show 0): N
requests that never shared the slot show 1. And how many greedy texts differ from the text
the same prompt gets alone (batched numerics may flip a token), on both servers, each prompt
sent alone first.

No seed is sent: ``mlx_lm.server`` serves a request that carries one on its own, outside its
batch (``_is_batchable``), and greedy decoding needs none. The end of sequence is not
suppressed either (a ``logit_bias`` would have to mean the same on both sides): the prompts
ask for long answers and the token counts come from each response's usage. After the
warm-up both servers hold each prompt in their prompt caches, so a time to first token is
mostly the wait for a place in the batch.

With ``--profile-dir``, one more round of the most clients on a fresh gateway under the
per-thread profiler (``gateway.profiling``): where the host time of a batch goes, thread by
thread (the inference thread's steps against the event loop's streaming), in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Summary, ratio, table, write_json
from bench.streaming import Streamed, stream_chat
from bench.versus import GATEWAY, SERVER, same_weights
from testsupport.process import start_gateway, start_mlx_lm_server

DEFAULT_CLIENTS = (1, 2, 4, 8)
POLL_SECONDS = 0.05  # a GET of /v1/scheduler is well under a millisecond of the event loop
TOPICS = (
    "Tell me a long story about a lighthouse keeper.",
    "Write a long essay about the history of tea.",
    "Explain, step by step and in detail, how bread is baked.",
    "Describe at length how a steam engine works.",
    "Write a detailed travel guide to Lisbon.",
    "Describe the life cycle of a star in detail.",
    "Write a long letter from a sailor to his family.",
    "Explain the rules of chess to a beginner, thoroughly.",
)


def prompt(index: int) -> str:
    """Client ``index``'s prompt: a topic of its own (numbered parts beyond eight clients)."""
    topic = TOPICS[index % len(TOPICS)]
    return topic if index < len(TOPICS) else f"{topic} (Part {index // len(TOPICS) + 1}.)"


@dataclass(frozen=True)
class Target:
    """One server as the clients call it."""

    base_url: str
    path: str
    model: str
    scheduler: bool  # whether it shows its batch at /v1/scheduler (the gateway)

    def body(self, index: int, max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt(index)}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream_options": {"include_usage": True},
        }


class BatchWatch:
    """The largest batch ``/v1/scheduler`` shows while open (0 when nothing was seen)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while True:
                view = client.get("/v1/scheduler").json()
                # A gateway before issue 33 has no "batch": its slot holds one job.
                in_slot = len(view.get("batch") or ([view["slot"]] if view["slot"] else []))
                self.largest = max(self.largest, in_slot)
                if self._stop.wait(POLL_SECONDS):
                    return

    def __enter__(self) -> BatchWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@dataclass
class Round:
    """N clients' streams to one server, sent together."""

    streams: list[Streamed]
    finished: list[float]  # when each stream ended (perf_counter)
    largest_batch: int | None
    load: float  # the 1-minute load average when it ended

    @property
    def tokens(self) -> int:
        return sum(int(s.usage.get("completion_tokens", 0)) for s in self.streams)

    @property
    def wall(self) -> float:
        return max(self.finished) - min(s.started for s in self.streams)

    @property
    def aggregate(self) -> float:
        return self.tokens / self.wall

    @property
    def median_ttft(self) -> float:
        return statistics.median(s.ttft for s in self.streams)

    def differing(self, alone: list[str]) -> int:
        """How many clients' texts differ from the text their prompt gets alone."""
        return sum(s.text != alone[i] for i, s in enumerate(self.streams))

    def as_dict(self, alone: list[str]) -> dict[str, Any]:
        began = min(s.started for s in self.streams)
        return {
            "aggregate_tok_s": self.aggregate,
            "median_ttft_s": self.median_ttft,
            "completion_tokens": self.tokens,
            "wall_s": self.wall,
            "largest_batch": self.largest_batch,
            "differing_texts": self.differing(alone),
            "load_1min": self.load,
            "clients": [
                {
                    "ttft_s": s.ttft,
                    "completion_tokens": s.usage.get("completion_tokens"),
                    "finished_s": end - began,
                }
                for s, end in zip(self.streams, self.finished, strict=True)
            ],
        }


def _client_stream(
    target: Target, index: int, max_tokens: int, together: threading.Barrier
) -> tuple[Streamed, float]:
    with httpx.Client(base_url=target.base_url, timeout=600) as client:
        together.wait()
        streamed = stream_chat(client, target.body(index, max_tokens), target.path)
        return streamed, time.perf_counter()


def concurrent_round(target: Target, clients: int, max_tokens: int) -> Round:
    """``clients`` streams to ``target``, released at once, each with its own prompt."""
    together = threading.Barrier(clients)
    watch = BatchWatch(target.base_url) if target.scheduler else None
    with watch or contextlib.nullcontext(), ThreadPoolExecutor(clients) as pool:
        futures = [
            pool.submit(_client_stream, target, i, max_tokens, together) for i in range(clients)
        ]
        done = [future.result() for future in futures]
    return Round(
        [streamed for streamed, _ in done],
        [end for _, end in done],
        watch.largest if watch else None,
        os.getloadavg()[0],
    )


def alone_texts(target: Target, clients: int, max_tokens: int) -> list[str]:
    """Each prompt's greedy text with nothing beside it."""
    with httpx.Client(base_url=target.base_url, timeout=600) as client:
        return [
            stream_chat(client, target.body(i, max_tokens), target.path).text
            for i in range(clients)
        ]


def measure(
    targets: dict[str, Target], clients: list[int], runs: int, max_tokens: int
) -> tuple[dict[str, list[str]], dict[tuple[int, str], list[Round]]]:
    """The texts alone, then every N's rounds on both servers (warm-up left out)."""
    alone = {who: alone_texts(t, max(clients), max_tokens) for who, t in targets.items()}
    rounds: dict[tuple[int, str], list[Round]] = {}
    for n in clients:
        for index in range(runs + 1):
            order = list(targets) if index % 2 == 0 else list(reversed(targets))
            for who in order:
                measured = concurrent_round(targets[who], n, max_tokens)
                print(
                    f"{n} clients, {'warm-up' if index == 0 else f'run {index}'}, {who}: "
                    f"{measured.aggregate:.1f} tok/s, {measured.tokens} tokens, median ttft "
                    f"{measured.median_ttft:.3f} s, largest batch {measured.largest_batch}, "
                    f"texts unlike alone {measured.differing(alone[who])}, "
                    f"load {measured.load:.2f}",
                    flush=True,
                )
                if index:
                    rounds.setdefault((n, who), []).append(measured)
    return alone, rounds


def report(
    clients: list[int], alone: dict[str, list[str]], rounds: dict[tuple[int, str], list[Round]]
) -> dict[str, Any]:
    """The table, the ratios per N and the JSON of every run."""
    aggregate = {key: Summary.of([r.aggregate for r in found]) for key, found in rounds.items()}
    ttft = {key: Summary.of([r.median_ttft for r in found]) for key, found in rounds.items()}
    tokens = {key: Summary.of([r.tokens for r in found]) for key, found in rounds.items()}
    rows = [
        (f"{metric} @{n}", who, summaries[(n, who)])
        for n in clients
        for metric, summaries in (
            ("aggregate tok/s", aggregate),
            ("median TTFT (s)", ttft),
            ("completion tokens", tokens),
        )
        for who in (GATEWAY, SERVER)
    ]
    print(table(rows))
    print()
    per_n: dict[str, Any] = {}
    for n in clients:
        ours, theirs = rounds[(n, GATEWAY)], rounds[(n, SERVER)]
        entry: dict[str, Any] = {
            "gateway_over_server": ratio(aggregate[(n, GATEWAY)], aggregate[(n, SERVER)]),
            "largest_batch": max(r.largest_batch or 0 for r in ours),
            "differing_texts": {
                who: sum(r.differing(alone[who]) for r in found)
                for who, found in ((GATEWAY, ours), (SERVER, theirs))
            },
            "texts": n * len(ours),
        }
        if 1 in clients:
            entry["scaling"] = {
                who: ratio(aggregate[(n, who)], aggregate[(1, who)]) for who in (GATEWAY, SERVER)
            }
        scaling = entry.get("scaling", {})
        print(
            f"@{n}: gateway / mlx_lm.server aggregate {entry['gateway_over_server']:.2f}; "
            f"over 1 client: gateway {scaling.get(GATEWAY, float('nan')):.2f}, "
            f"mlx_lm.server {scaling.get(SERVER, float('nan')):.2f}; "
            f"largest gateway batch {entry['largest_batch']}; texts unlike alone: "
            f"gateway {entry['differing_texts'][GATEWAY]}, "
            f"mlx_lm.server {entry['differing_texts'][SERVER]} of {entry['texts']}"
        )
        per_n[str(n)] = {
            **entry,
            **{
                who: {
                    "aggregate_tok_s": aggregate[(n, who)].as_dict(),
                    "median_ttft_s": ttft[(n, who)].as_dict(),
                    "completion_tokens": tokens[(n, who)].as_dict(),
                    "runs": [r.as_dict(alone[who]) for r in rounds[(n, who)]],
                }
                for who in (GATEWAY, SERVER)
            },
        }
    return per_n


def instrumented_round(
    workdir: Path, config: dict[str, Any], clients: int, max_tokens: int, env: dict[str, str]
) -> tuple[float, float]:
    """One warm-up and one measured round of ``clients`` streams on a gateway started with
    ``env`` (the per-thread profiler, the slot's turn trace): when the measured round
    began (``time.perf_counter()``) and its aggregate tok/s."""
    from gateway.modelstore.store import DEFAULT_MODEL_ID

    gateway = start_gateway(workdir, config, extra_env=env)
    try:
        target = Target(gateway.base_url, "/v1/chat/completions", DEFAULT_MODEL_ID, True)
        concurrent_round(target, clients, max_tokens)
        began = time.perf_counter()
        measured = concurrent_round(target, clients, max_tokens)
    finally:
        gateway.stop()
    return began, measured.aggregate


def profiled_round(
    workdir: Path, config: dict[str, Any], clients: int, max_tokens: int
) -> dict[str, str]:
    """A round under the per-thread profiler: its summaries (thread name -> text)."""
    from gateway.profiling import PROFILE_DIR_ENV, read_summaries

    folder = workdir / "profile"
    env = {PROFILE_DIR_ENV: str(folder)}
    _, aggregate = instrumented_round(workdir, config, clients, max_tokens, env)
    print(f"profiled round, {clients} clients: {aggregate:.1f} tok/s", flush=True)
    return read_summaries(folder)


def traced_round(
    workdir: Path, config: dict[str, Any], clients: int, max_tokens: int
) -> dict[str, Any]:
    """A round with the slot's turn trace (``gateway.scheduler.turn_trace``): where its
    time went, turn by turn."""
    from gateway.scheduler.turn_trace import TRACE_DIR_ENV, TRACE_FILE, summarize

    folder = workdir / "trace"
    env = {TRACE_DIR_ENV: str(folder)}
    began, aggregate = instrumented_round(workdir, config, clients, max_tokens, env)
    summary = {
        "clients": clients,
        "aggregate_tok_s": aggregate,
        **summarize(folder / TRACE_FILE, began),
    }
    print(f"traced round, {clients} clients: {json.dumps(summary, indent=1)}", flush=True)
    return summary


def _batch_health(gateway_url: str) -> dict[str, Any]:
    """The default tier's batch in ``/health`` (max_sequences, what limits it)."""
    health = httpx.get(f"{gateway_url}/health", timeout=10).json()
    return dict(health["tiers"][health["default_tier"]].get("batch", {}))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.modelstore.store import DEFAULT_MODEL_ID

    clients = sorted(set(args.clients or DEFAULT_CLIENTS))
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-concurrency-"))
    config, served, compute = same_weights(args, workdir)
    server = start_mlx_lm_server(workdir / "server", served)
    gateway = None
    try:
        gateway = start_gateway(workdir / "gateway", config)
        targets = {
            GATEWAY: Target(gateway.base_url, "/v1/chat/completions", DEFAULT_MODEL_ID, True),
            SERVER: Target(server.base_url + "/", "chat/completions", server.model, False),
        }
        batch = _batch_health(gateway.base_url)
        print(f"gateway batch (/health): {batch}", flush=True)
        load = os.getloadavg()
        alone, rounds = measure(targets, clients, args.runs, args.max_tokens)
        load_after = os.getloadavg()
        gateway.stop()
        gateway = None
        profiles = (
            profiled_round(Path(args.profile_dir), config, max(clients), args.max_tokens)
            if args.profile_dir
            else {}
        )
        trace = (
            traced_round(Path(args.trace_dir), config, max(clients), args.max_tokens)
            if args.trace_dir
            else {}
        )
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()
    print(f"\nload average (1, 5, 15 min) at the start {load}, at the end {load_after}\n")
    per_n = report(clients, alone, rounds)
    return {
        "benchmark": "concurrency",
        "runs": args.runs,
        "max_tokens": args.max_tokens,
        "clients": clients,
        "weights": "float32" if compute.dequantize else "as stored",
        "model_folder": str(served),
        "compute": compute.as_dict(),
        "gateway_batch": batch,
        "load_average": {"start": load, "end": load_after},
        "alone_texts": alone,
        "per_clients": per_n,
        **({"profiles": profiles} if profiles else {}),
        **({"trace": trace} if trace else {}),
    }


def main(args: argparse.Namespace) -> int:
    write_json(args.json, run(args))
    return 0
