"""A mixed soak against one gateway: does anything fail or leak over ten minutes of everything?

Issue 35: chat (whole and streamed), streams dropped by their client after a few chunks, the
Responses API (stored, chained through ``previous_response_id``), embeddings, Anthropic
messages (whole and streamed), typing hints followed by the request they announce (and some
deleted instead), bad bodies, ``/health`` and ``/metrics`` — from ``--clients`` workers at
once, each picking its next request at random (fixed seed), for ``--seconds``. Done when no
answer is a 5xx and the gateway's resident memory is flat over the last five minutes
(its growth there, median of the last minute against the first, under 5%).

Starts the real gateway (``testsupport.process.start_gateway``, the embedded model), samples its
RSS every 5 s from /proc, and prints a table: each kind of request, how many, their statuses,
the slowest; then RSS at the start, at the window's start and at the end, and the load average.
Exit status 1 if a goal is missed. ``--json FILE`` writes the raw result.

Run: .venv/bin/python ops/soak.py [--seconds 600] [--clients 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testsupport.process import RunningGateway, start_gateway

MODEL = "smollm2-135m-instruct"
WINDOW_SECONDS = 300  # RSS must be flat over the last five minutes
RSS_GROWTH_GOAL = 0.05
SAMPLE_SECONDS = 5.0
TOPICS = ["rivers", "bread", "owls", "trains", "tides", "glaciers", "violins", "chess"]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Soak:
    def __init__(self, gateway: RunningGateway, seed: int) -> None:
        self.gateway = gateway
        self.random = random.Random(seed)
        self.statuses: dict[str, Counter[int]] = defaultdict(Counter)
        self.slowest: dict[str, float] = defaultdict(float)
        self.errors: list[str] = []  # 5xx bodies and transport failures
        self.response_ids: list[str] = []

    def messages(self) -> list[dict[str, str]]:
        topic = self.random.choice(TOPICS)
        return [{"role": "user", "content": f"Tell me one fact about {topic}."}]

    async def record(self, kind: str, call: Awaitable[httpx.Response]) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await call
        except (TimeoutError, httpx.HTTPError) as exc:
            self.statuses[kind][0] += 1
            self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            return None
        self.slowest[kind] = max(self.slowest[kind], time.perf_counter() - started)
        self.statuses[kind][response.status_code] += 1
        if response.status_code >= 500:
            self.errors.append(f"{kind}: {response.status_code} {response.text[:300]}")
        return response

    async def chat(self, http: httpx.AsyncClient) -> None:
        body = {"model": MODEL, "messages": self.messages(), "max_tokens": 16}
        await self.record("chat", http.post("/v1/chat/completions", json=body))

    async def streamed(self, http: httpx.AsyncClient, kind: str, path: str, body: dict) -> None:
        """A stream read to its end, or (``kind`` ending in 'dropped') left after 3 lines."""

        async def read() -> httpx.Response:
            async with http.stream("POST", path, json=body) as response:
                lines = 0
                async for _line in response.aiter_lines():
                    lines += 1
                    if kind.endswith("dropped") and lines >= 3:
                        break
                return response

        await self.record(kind, read())

    async def chat_stream(self, http: httpx.AsyncClient) -> None:
        body = {"model": MODEL, "messages": self.messages(), "max_tokens": 24, "stream": True}
        await self.streamed(http, "chat stream", "/v1/chat/completions", body)

    async def dropped_stream(self, http: httpx.AsyncClient) -> None:
        body = {"model": MODEL, "messages": self.messages(), "max_tokens": 64, "stream": True}
        await self.streamed(http, "chat stream dropped", "/v1/chat/completions", body)

    async def responses(self, http: httpx.AsyncClient) -> None:
        body: dict[str, Any] = {"model": MODEL, "input": self.messages()[0]["content"]}
        body["max_output_tokens"] = 16
        if self.response_ids and self.random.random() < 0.5:
            body["previous_response_id"] = self.random.choice(self.response_ids[-20:])
        response = await self.record("responses", http.post("/v1/responses", json=body))
        if response is not None and response.status_code == 200:
            self.response_ids.append(response.json()["id"])

    async def embeddings(self, http: httpx.AsyncClient) -> None:
        texts = [f"a sentence about {t}" for t in self.random.sample(TOPICS, 4)]
        body = {"model": MODEL, "input": texts}
        await self.record("embeddings", http.post("/v1/embeddings", json=body))

    async def messages_api(self, http: httpx.AsyncClient) -> None:
        body = {"model": MODEL, "max_tokens": 16, "messages": self.messages()}
        if self.random.random() < 0.5:
            await self.streamed(http, "messages stream", "/v1/messages", {**body, "stream": True})
        else:
            await self.record("messages", http.post("/v1/messages", json=body))

    async def hinted(self, http: httpx.AsyncClient) -> None:
        session = f"soak-{self.random.getrandbits(32):08x}"
        history = [
            {"role": "system", "content": "You answer in one sentence."},
            *self.messages(),
            {"role": "assistant", "content": "Here is one."},
        ]
        hint = {"model": MODEL, "session": session, "messages": history}
        accepted = await self.record("typing hint", http.post("/v1/typing", json=hint))
        await asyncio.sleep(self.random.uniform(0.05, 0.5))
        if accepted is not None and accepted.status_code == 202 and self.random.random() < 0.3:
            hint_id = accepted.json()["id"]
            await self.record("typing delete", http.delete(f"/v1/typing/{hint_id}"))
            return
        body = {
            "model": MODEL,
            "messages": [*history, {"role": "user", "content": "And another?"}],
            "max_tokens": 16,
            "session": session,
        }
        await self.record("hinted chat", http.post("/v1/chat/completions", json=body))

    async def bad(self, http: httpx.AsyncClient) -> None:
        bodies: list[Any] = [
            b"{not json",
            {"model": MODEL, "messages": "not a list"},
            {"model": "no-such-model", "messages": self.messages()},
            {"model": MODEL, "messages": self.messages(), "max_tokens": -3},
        ]
        body = self.random.choice(bodies)
        call = (
            http.post("/v1/chat/completions", content=body)
            if isinstance(body, bytes)
            else http.post("/v1/chat/completions", json=body)
        )
        await self.record("bad request", call)

    async def probes(self, http: httpx.AsyncClient) -> None:
        await self.record("health", http.get("/health"))
        await self.record("metrics", http.get("/metrics"))

    async def worker(self, deadline: float) -> None:
        kinds: list[tuple[Callable[[httpx.AsyncClient], Awaitable[None]], int]] = [
            (self.chat, 4),
            (self.chat_stream, 4),
            (self.dropped_stream, 2),
            (self.responses, 3),
            (self.embeddings, 2),
            (self.messages_api, 3),
            (self.hinted, 2),
            (self.bad, 2),
            (self.probes, 2),
        ]
        calls, weights = zip(*kinds, strict=True)
        async with httpx.AsyncClient(base_url=self.gateway.base_url, timeout=180) as http:
            while time.monotonic() < deadline:
                await self.random.choices(calls, weights)[0](http)


async def sample_rss(pid: int, deadline: float, samples: list[tuple[float, int]]) -> None:
    started = time.monotonic()
    while time.monotonic() < deadline:
        samples.append((time.monotonic() - started, rss_bytes(pid)))
        await asyncio.sleep(SAMPLE_SECONDS)


def memory_verdict(samples: list[tuple[float, int]], seconds: float) -> dict[str, Any]:
    window = [(t, r) for t, r in samples if t >= seconds - WINDOW_SECONDS]
    first = [r for t, r in window if t < window[0][0] + 60]
    last = [r for t, r in window if t >= seconds - 60]
    start, end = statistics.median(first), statistics.median(last)
    growth = (end - start) / start
    return {
        "rss_at_start": samples[0][1],
        "rss_window_start_median": start,
        "rss_end_median": end,
        "rss_max": max(r for _, r in samples),
        "growth_over_window": growth,
        "flat": growth < RSS_GROWTH_GOAL,
    }


async def soak(gateway: RunningGateway, seconds: float, clients: int) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    runner = Soak(gateway, seed=35)
    samples: list[tuple[float, int]] = []
    await asyncio.gather(
        sample_rss(gateway.process.pid, deadline, samples),
        *(runner.worker(deadline) for _ in range(clients)),
    )
    statuses = {kind: dict(counts) for kind, counts in sorted(runner.statuses.items())}
    five_xx = sum(n for counts in statuses.values() for s, n in counts.items() if s >= 500)
    failures = sum(counts.get(0, 0) for counts in statuses.values())
    return {
        "seconds": seconds,
        "clients": clients,
        "statuses": statuses,
        "slowest_seconds": dict(runner.slowest),
        "five_xx": five_xx,
        "transport_failures": failures,
        "errors": runner.errors[:50],
        "memory": memory_verdict(samples, seconds),
        "rss_samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--json", help="also write the raw result here")
    args = parser.parse_args()
    if args.seconds < WINDOW_SECONDS + 60:
        print(f"note: shorter than {WINDOW_SECONDS + 60} s: the memory window is the whole run")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        gateway = start_gateway(Path(workdir))
        try:
            result = asyncio.run(soak(gateway, args.seconds, args.clients))
        finally:
            gateway.stop()
    result["load_average_before"], result["load_average_after"] = load_before, os.getloadavg()
    print(f"{'request':22} {'count':>6}  statuses{'':24} slowest")
    for kind, counts in result["statuses"].items():
        shown = ", ".join(f"{s or 'failed'}: {n}" for s, n in sorted(counts.items()))
        slowest = result["slowest_seconds"].get(kind, 0.0)
        print(f"{kind:22} {sum(counts.values()):>6}  {shown:32} {slowest:6.2f} s")
    memory = result["memory"]
    print(
        f"\nRSS: {memory['rss_at_start'] / 2**20:.0f} MiB at start, "
        f"{memory['rss_window_start_median'] / 2**20:.0f} MiB at the last 5 minutes' start, "
        f"{memory['rss_end_median'] / 2**20:.0f} MiB at the end "
        f"({memory['growth_over_window']:+.1%}; flat: {memory['flat']})"
    )
    print(f"5xx: {result['five_xx']}, transport failures: {result['transport_failures']}")
    for error in result["errors"][:10]:
        print("  ", error)
    print(f"load average before {load_before}, after {result['load_average_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = result["five_xx"] == 0 and result["transport_failures"] == 0 and memory["flat"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
