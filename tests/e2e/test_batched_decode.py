"""One slot, many sequences (issue 33): concurrent requests decode together, over HTTP on the
real model through the openai SDK."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway

pytestmark = pytest.mark.e2e

PET_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "legs": {"type": "integer"}},
    "required": ["name", "legs"],
    "additionalProperties": False,
}
# Four requests that differ in every way a sequence keeps its own: sampling and seed, a
# grammar, a stop string, log-probabilities.
FOUR: list[dict[str, Any]] = [
    {
        "messages": [{"role": "user", "content": "Tell me about the moon."}],
        "max_tokens": 40,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    },
    {
        "messages": [{"role": "user", "content": "Write a story about a fox."}],
        "max_tokens": 40,
        "temperature": 0.8,
        "seed": 11,
    },
    {
        "messages": [{"role": "user", "content": "Describe a dog as JSON."}],
        "max_tokens": 60,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "pet", "schema": PET_SCHEMA, "strict": True},
        },
    },
    {
        "messages": [{"role": "user", "content": "List three colours, one per line."}],
        "max_tokens": 40,
        "temperature": 0.7,
        "seed": 3,
        "stop": ["\n"],
    },
]


def _stream(gateway: RunningGateway, request: dict[str, Any]) -> dict[str, Any]:
    """The streamed answer's text, finish reason and first log-probabilities."""
    stream = gateway.openai(timeout=300).chat.completions.create(
        model=MODEL, stream=True, **request
    )
    parts: list[str] = []
    finish: str | None = None
    logprobs: list[float] = []
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        parts.append(choice.delta.content or "")
        if choice.logprobs and choice.logprobs.content:
            logprobs.extend(round(t.logprob, 3) for t in choice.logprobs.content)
        finish = choice.finish_reason or finish
    return {"text": "".join(parts), "finish": finish, "logprobs": logprobs}


class BatchWatch:
    """Polls ``/v1/scheduler`` in the background: the largest batch seen, and when the
    number of jobs in the slot last changed."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway
        self.largest = 0
        self.sizes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> BatchWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        with httpx.Client(base_url=self.gateway.base_url) as http:
            while not self._stop.is_set():
                size = len(http.get("/v1/scheduler").json()["batch"])
                self.largest = max(self.largest, size)
                if not self.sizes or self.sizes[-1][1] != size:
                    self.sizes.append((time.monotonic(), size))
                time.sleep(0.01)


def _asking(gateway: RunningGateway, request: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: _stream(gateway, request)


def _together(gateway: RunningGateway, requests: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(requests)

    def run(i: int) -> None:
        results[i] = requests[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_four_concurrent_streams_decode_together_each_as_alone(gateway: RunningGateway) -> None:
    alone = [_stream(gateway, request) for request in FOUR]
    with BatchWatch(gateway) as watch:
        together = _together(gateway, [_asking(gateway, r) for r in FOUR])
    assert watch.largest >= 3, f"the requests never decoded together: {watch.sizes}"
    batch = httpx.get(f"{gateway.base_url}/health").json()["tiers"]["default"]["batch"]
    assert batch["max_sequences"] == 8 and batch["limited_by"] == "setting"
    assert batch["kv_bytes_per_token"] > 0
    for request, one, batched in zip(FOUR, alone, together, strict=True):
        assert batched["finish"] in ("stop", "length")
        # Each sequence keeps its own sampler, seed, grammar and stops: the text is the
        # one it gets alone (float32 on this CPU: batching flipped no greedy token in
        # `gateway bench concurrency`'s runs).
        assert batched["text"] == one["text"], request["messages"]
        if "logprobs" in request:
            assert batched["logprobs"] == pytest.approx(one["logprobs"], abs=0.01)
    pet = json.loads(together[2]["text"])
    assert set(pet) == {"name", "legs"} and isinstance(pet["legs"], int)
    assert "\n" not in together[3]["text"] and together[3]["finish"] == "stop"
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    assert "gateway_slot_batch_jobs 0.0" in metrics  # all left the slot


def test_a_dropped_stream_leaves_the_batch_within_a_step(gateway: RunningGateway) -> None:
    long = {
        "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "max_tokens": 120,
        "temperature": 0,
        "logit_bias": {"2": -100},  # no end token: all run to their length
    }
    dropped_at: list[float] = []

    def dropped() -> None:
        with gateway.openai(timeout=300).chat.completions.with_streaming_response.create(
            model=MODEL, stream=True, **long
        ) as response:
            for index, _chunk in enumerate(response.parse()):
                if index == 8:
                    dropped_at.append(time.monotonic())
                    return  # the connection is closed here

    with BatchWatch(gateway) as watch:
        kept = _together(gateway, [_asking(gateway, long), _asking(gateway, long), dropped])
    assert watch.largest == 3, watch.sizes
    assert [k["finish"] for k in kept[:2]] == ["length", "length"]
    assert kept[0]["text"] == kept[1]["text"]
    # The batch went from 3 jobs to 2 soon after the drop: within a step (~0.1-0.3 s for
    # three sequences here), plus the poll.
    left = next(t for t, size in watch.sizes if size == 2 and t >= dropped_at[0] - 0.05)
    assert left - dropped_at[0] < 1.0, watch.sizes


def _counter(gateway: RunningGateway, family_name: str) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == family_name:
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def test_preempted_background_sequences_resume_with_their_caches(
    gateway: RunningGateway,
) -> None:
    stories = [
        {
            "messages": [{"role": "user", "content": f"Write a story about a {animal}."}],
            "max_tokens": 48,
            "temperature": 0.8,
            "seed": seed,
            "extra_body": {"priority": "background"},
        }
        for seed, animal in enumerate(["fox", "bear"])
    ]
    alone = [_stream(gateway, story) for story in stories]
    paused, released = (
        _counter(gateway, "gateway_preemptions"),
        _counter(gateway, "gateway_paused_memory_released"),
    )
    user: list[str] = []

    def ask_when_batched() -> None:
        deadline = time.monotonic() + 60
        while len(gateway.scheduler()["batch"]) < 2:
            assert time.monotonic() < deadline, "the background stories never batched"
            time.sleep(0.01)
        time.sleep(0.3)  # a few tokens in
        reply = gateway.openai().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8,
            temperature=0,
        )
        user.append(reply.choices[0].message.content or "")

    resumed = _together(gateway, [*(_asking(gateway, s) for s in stories), ask_when_batched])
    assert user and user[0]
    assert _counter(gateway, "gateway_preemptions") >= paused + 2, "both should have paused"
    assert _counter(gateway, "gateway_paused_memory_released") == released  # caches kept
    assert [r["text"] for r in resumed[:2]] == [a["text"] for a in alone]
