"""The body guard with big bodies, the app served on the test's own event loop.

Litestar's ``AsyncTestClient`` runs the app on a thread of its own and blocks the caller's
loop for each request: it could not show the app's loop stalling, nor requests overlapping.
Here ``httpx.ASGITransport`` drives the app on this loop, its lifespan entered by hand, so a
probe coroutine beside the requests measures every stall the requests cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.app import create_app
from gateway.config import load_settings
from gateway.protocol.bounds import MAX_MESSAGES
from tests.unit.fake_runner import ANSWER, FakeRunner

MODEL = "smollm2-135m-instruct"
TURN = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
]
# bench/oversized.py's body: 40,000 messages, 2.1 MB, under max_request_bytes.
OVERSIZED = json.dumps({"model": MODEL, "messages": TURN * 20_000}).encode()
JSON = {"content-type": "application/json"}
CLIENTS = 8
ROUNDS = 5
REFUSAL = f"'messages' has 40000 items; at most {MAX_MESSAGES} are accepted"


class LongContextRunner(FakeRunner):
    context_length = 1_000_000  # a big conversation fits: it is answered, not refused


@asynccontextmanager
async def serving() -> AsyncIterator[httpx.AsyncClient]:
    """The app on this loop (not a fixture: its lifespan must end in the task it began in)."""
    settings = load_settings(overrides={"cache": {"prefix_cache_bytes": 0}}, environ={})
    app = create_app(settings, runner_factory=lambda *_: LongContextRunner())
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # Litestar types ASGI narrower
    async with (
        app.lifespan(),
        httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=60) as client,
    ):
        yield client


async def test_an_over_cap_conversation_is_a_400_in_openais_envelope() -> None:
    async with serving() as client:
        answer = await client.post("/v1/chat/completions", content=OVERSIZED, headers=JSON)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == {
            "message": REFUSAL,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "invalid_value",
        }


async def test_an_over_cap_conversation_is_a_400_in_anthropics_envelope() -> None:
    async with serving() as client:
        body = json.dumps({"model": MODEL, "max_tokens": 1, "messages": TURN * 20_000}).encode()
        answer = await client.post("/v1/messages", content=body, headers=JSON)
        assert answer.status_code == 400, answer.text
        assert answer.json()["type"] == "error"
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert answer.json()["error"]["message"] == REFUSAL


async def test_a_big_conversation_within_the_bounds_is_answered() -> None:
    async with serving() as client:
        body = {"model": MODEL, "messages": TURN * 1_000, "max_tokens": 4}
        assert len(json.dumps(body)) > 64 * 1024  # checked on the guard's thread first
        answer = await client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == " ".join(ANSWER.split()[:4])


class LoopProbe:
    """Ticks every millisecond on the loop; ``worst`` is the longest it was kept waiting."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.001)
            last = now

    async def __aenter__(self) -> LoopProbe:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        await stop(self._task)


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def poll_health(client: httpx.AsyncClient, took: list[float]) -> None:
    """``GET /health`` every 5 ms, as the issue's probe does every 20 ms."""
    while True:
        started = time.perf_counter()
        answer = await client.get("/health")
        assert answer.status_code == 200, answer.text
        took.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)


async def flood(client: httpx.AsyncClient, health_took: list[float]) -> float:
    """Eight over-cap conversations at once, /health polled: the loop's worst wait."""
    async with LoopProbe() as probe:
        poller = asyncio.create_task(poll_health(client, health_took))
        await asyncio.sleep(0.01)
        posts = [
            client.post("/v1/chat/completions", content=OVERSIZED, headers=JSON)
            for _ in range(CLIENTS)
        ]
        answers = await asyncio.gather(*posts)
        await stop(poller)
    assert [a.status_code for a in answers] == [400] * CLIENTS
    assert all(a.json()["error"]["param"] == "messages" for a in answers)
    return probe.worst


def json_loads_seconds() -> float:
    """What decoding one such body takes here, now (the best of 3)."""
    took = []
    for _ in range(3):
        started = time.perf_counter()
        json.loads(OVERSIZED)
        took.append(time.perf_counter() - started)
    return min(took)


async def test_eight_over_cap_conversations_leave_the_loop_responsive() -> None:
    async with serving() as client:
        await client.post("/v1/chat/completions", content=OVERSIZED, headers=JSON)  # warm-up
        health_took: list[float] = []
        parses, stalls = [], []
        # The session's heap (earlier tests' 2-million-item bodies) is set aside: a collection
        # walking it is a stall of the test process's own, not of the checks measured here.
        gc.collect()
        gc.freeze()
        try:
            for _ in range(ROUNDS):
                parses.append(json_loads_seconds())
                stalls.append(await flood(client, health_took))
        finally:
            gc.unfreeze()
    # Decoded whole on a worker thread, each body still held the GIL, so the loop, for a
    # whole json.loads, often several in a row: the median round's worst wait was 6-15 of
    # them (64-197 ms on a busy 2-core machine). Counted slice by slice, one body at a time:
    # 0.3-0.4 of one (4-6 ms).
    parse, worst = statistics.median(parses), statistics.median(stalls)
    assert health_took
    assert worst < 2 * parse, (
        f"the loop waited {worst * 1000:.0f} ms (median of the rounds' worst) while one body's"
        f" json.loads takes {parse * 1000:.0f} ms; /health's worst {max(health_took):.3f} s"
    )
