"""One Mac, one inference: the scheduler driven over HTTP on the real model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e
STORY = [{"role": "user", "content": "Write a story about a fox in a forest."}]


async def test_sixteen_mixed_requests_share_one_slot(gateway: RunningGateway) -> None:
    client = gateway.async_openai()
    classes = ["user", "task", "background", "task"]

    async def ask(i: int) -> str:
        reply = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Say a word about the number {i}."}],
            max_tokens=4,
            temperature=0,
            extra_headers={"X-Gateway-Priority": classes[i % 4]} if i % 2 else None,
            extra_body=None if i % 2 else {"priority": classes[i % 4]},
        )
        return reply.choices[0].finish_reason

    finishes = await asyncio.gather(*(ask(i) for i in range(16)))
    assert all(f in ("stop", "length") for f in finishes)
    view = gateway.scheduler()
    assert view["max_occupancy_seen"] == 1
    assert view["slot"] is None
    assert set(view["gates"]) == {"pipeline_lock", "prefill_freeze", "typing_lock"}
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    for cls in ("user", "task", "background"):
        assert f'gateway_queue_wait_seconds_count{{priority="{cls}"}}' in metrics


def _stream_text(gateway: RunningGateway, on_chunk=None) -> str:  # type: ignore[no-untyped-def]
    stream = gateway.openai().chat.completions.create(
        model=MODEL,
        messages=STORY,
        max_tokens=40,
        temperature=0.8,
        seed=7,
        stream=True,
        extra_body={"priority": "background"},
    )
    parts = []
    for index, chunk in enumerate(stream):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if on_chunk is not None:
            on_chunk(index)
    return "".join(parts)


def _preemptions(gateway: RunningGateway, where: str | None = None) -> float:
    """Jobs paused for a user job so far (``where``: only ``inside_pass`` or ``between_passes``)."""
    for family in text_string_to_metric_families(httpx.get(f"{gateway.base_url}/metrics").text):
        if family.name == "gateway_preemptions":
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and where in (None, s.labels["where"])
            )
    return 0.0


@pytest.mark.parametrize("which", ["gateway", "tight_gateway"])
def test_preempted_background_generation_resumes_with_identical_output(
    which: str, request: pytest.FixtureRequest
) -> None:
    # tight_gateway keeps no paused KV cache: the resumed job recomputes prompt + tokens.
    gateway: RunningGateway = request.getfixturevalue(which)
    # A user was here lately: background decode steps are computed in groups of layers
    # (pacing.pause_grain), so the user below mostly cuts in inside a step (with the cache
    # kept), or at its end (tight_gateway: a job paused inside a step could not release it).
    gateway.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
    )
    reference = _stream_text(gateway)
    before, before_inside = _preemptions(gateway), _preemptions(gateway, "inside_pass")
    user_answers: list[str] = []

    def interrupt(index: int) -> None:
        if index == 5:  # mid-generation: a person asks something

            def ask() -> None:
                reply = gateway.openai().chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "What is the capital of France?"}],
                    max_tokens=12,
                    temperature=0,
                )
                user_answers.append(reply.choices[0].message.content or "")

            thread = threading.Thread(target=ask)
            thread.start()
            threads.append(thread)

    threads: list[threading.Thread] = []
    resumed = _stream_text(gateway, interrupt)
    for thread in threads:
        thread.join()
    assert user_answers and user_answers[0]
    assert _preemptions(gateway) >= before + 1, "the background job should have been preempted"
    assert resumed == reference
    if which == "tight_gateway":
        # No paused job may keep its memory: never paused inside a pass, always released.
        assert _preemptions(gateway, "inside_pass") == before_inside
        assert (
            "gateway_paused_memory_released_total" in httpx.get(f"{gateway.base_url}/metrics").text
        )


@pytest.fixture(scope="module")
def tight_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(
        tmp_path_factory.mktemp("tight"),
        {
            # One generation at a time: a second user request waits in the queue (with
            # batching it would join the first: tests/e2e/test_batched_decode.py).
            "tiers": {
                "default": {
                    "model": MODEL,
                    "max_sequences": 1,
                    "keep_alive_seconds": 0,
                    "preload": True,
                }
            },
            "scheduler": {
                "max_queued_user": 1,
                "max_queue_wait_seconds": 1.5,
                "max_paused_with_cache": 0,
            },
        },
    )
    yield running
    running.stop()


def test_full_queue_gets_429_and_long_wait_gets_503(tight_gateway: RunningGateway) -> None:
    # The occupant holds the slot ~3-5 s (60 tokens, no end token): past the waiter's 1.5 s.
    long_body = {
        "model": MODEL,
        "messages": STORY,
        "max_tokens": 60,
        "temperature": 0,
        "logit_bias": {"2": -100},
    }
    results: dict[str, httpx.Response] = {}

    def post(name: str, body: dict[str, object]) -> None:
        with tight_gateway.http() as http:
            results[name] = http.post("/v1/chat/completions", json=body)

    occupant = threading.Thread(target=post, args=("occupant", long_body))
    occupant.start()
    deadline = time.monotonic() + 10
    while tight_gateway.scheduler()["slot"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    waiter = threading.Thread(target=post, args=("waiter", {**long_body, "max_tokens": 2}))
    waiter.start()
    while not tight_gateway.scheduler()["queues"]["user"]:
        time.sleep(0.02)
    client = tight_gateway.openai()
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=2)
    assert caught.value.status_code == 429
    assert int(caught.value.response.headers["Retry-After"]) >= 1
    assert caught.value.body["code"] == "queue_full"  # type: ignore[index]
    waiter.join()
    occupant.join()
    assert results["waiter"].status_code == 503
    assert set(results["waiter"].json()["error"]) == {"message", "type", "param", "code"}
    assert results["occupant"].status_code == 200, "the accepted running job is never dropped"


def test_metrics_parse_and_carry_every_family(gateway: RunningGateway) -> None:
    text = httpx.get(f"{gateway.base_url}/metrics").text
    names = {family.name for family in text_string_to_metric_families(text)}
    expected = {
        "gateway_requests",
        "gateway_time_to_first_token_seconds",
        "gateway_queue_wait_seconds",
        "gateway_queue_depth",
        "gateway_slot_busy",
        "gateway_slot_busy_seconds",
        "gateway_prompt_tokens",
        "gateway_generation_tokens",
        "gateway_decode_tokens_per_second",
        "gateway_preemptions",
        "gateway_cancellations",
        "gateway_rejections",
        "gateway_gate_closed",
    }
    assert expected <= names, expected - names
