"""Typing hints on the real model over HTTP: every branch of the pre-prefill state machine."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e
HINT_IDLE_SECONDS = 8.0
NO_EOS = {"2": -100}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(
        tmp_path_factory.mktemp("typing"),
        {
            "cache": {"hint_idle_seconds": HINT_IDLE_SECONDS},
            # The freeze outlasts any hint here (a hint's expiry or use releases it): on a
            # loaded machine a cold hint's prefill can take longer than the 5 s default, and
            # then a ready hint would find its freeze already lifted (seen under load).
            "scheduler": {"typing_quiet_seconds": 1.0, "prefill_freeze_max_seconds": 60.0},
        },
    )
    yield running
    running.stop()


def conversation(repeat: int = 12) -> list[dict[str, str]]:
    """A fixed context no other test shares (so caches never cross between tests)."""
    tag = uuid.uuid4().hex[:8]
    facts = " ".join(f"Fact {i}: the code word of room {i} is {tag}{i}." for i in range(repeat))
    return [
        {"role": "system", "content": f"{tag}: you are a helpful assistant. {facts}"},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
    ]


def post_hint(gw: RunningGateway, messages: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    response = httpx.post(
        f"{gw.base_url}/v1/typing", json={"messages": messages, **extra}, timeout=30
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["object"] == "typing.hint"
    return body


def hint_state(gw: RunningGateway, hint_id: str) -> dict[str, Any]:
    return httpx.get(f"{gw.base_url}/v1/typing/{hint_id}", timeout=10).json()


def wait_for_state(
    gw: RunningGateway, hint_id: str, *states: str, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = hint_state(gw, hint_id)
        if view["state"] in states:
            return view
        assert time.monotonic() < deadline, f"hint stayed {view['state']}"
        time.sleep(0.05)


def chat(gw: RunningGateway, messages: list[dict[str, str]], **extra: Any) -> Any:
    options = {"max_tokens": 12, "temperature": 0, **extra}
    return gw.openai().chat.completions.create(model=MODEL, messages=messages, **options)


QUESTION = {"role": "user", "content": "What is the code word of room 3?"}


def test_ready_hint_is_used(gw: RunningGateway) -> None:
    history = conversation()
    hint = post_hint(gw, history)
    assert hint["state"] in ("queued", "computing")
    assert hint["prefix_tokens"] > 200
    assert hint["expires_at"] > hint["created_at"]
    wait_for_state(gw, hint["id"], "ready")
    assert gw.scheduler()["gates"]["prefill_freeze"] is True
    reply = chat(gw, [*history, QUESTION])
    assert reply.usage.prompt_tokens_details.cached_tokens >= hint["prefix_tokens"]
    assert hint_state(gw, hint["id"])["state"] == "used"
    assert gw.scheduler()["gates"]["prefill_freeze"] is False


def test_computing_hint_is_awaited_then_used(gw: RunningGateway) -> None:
    history = conversation(repeat=30)
    hint = post_hint(gw, history)
    wait_for_state(gw, hint["id"], "computing")
    reply = chat(gw, [*history, QUESTION])
    assert hint_state(gw, hint["id"])["state"] == "used"
    assert reply.usage.prompt_tokens_details.cached_tokens >= hint["prefix_tokens"]


def test_queued_hint_is_aborted_and_the_request_runs_normally(gw: RunningGateway) -> None:
    occupant = threading.Thread(
        target=chat,
        args=(gw, [{"role": "user", "content": "Count slowly."}]),
        kwargs={"logit_bias": NO_EOS, "max_tokens": 25},
    )
    occupant.start()
    deadline = time.monotonic() + 30
    while gw.scheduler()["slot"] is None:
        assert occupant.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    history = conversation()
    hint = post_hint(gw, history)
    assert hint_state(gw, hint["id"])["state"] == "queued"
    reply = chat(gw, [*history, QUESTION])
    occupant.join()
    assert hint_state(gw, hint["id"])["state"] == "aborted"
    assert reply.usage.prompt_tokens_details.cached_tokens < hint["prefix_tokens"]
    assert reply.choices[0].message.content


def test_newer_hint_of_a_session_supersedes_the_older(gw: RunningGateway) -> None:
    history = conversation()
    session = f"editor-{uuid.uuid4().hex[:6]}"
    first = post_hint(gw, history, session=session)
    second = post_hint(gw, history, session=session, draft="Tell me about")
    assert hint_state(gw, first["id"])["state"] == "superseded"
    wait_for_state(gw, second["id"], "ready")
    assert second["prefix_tokens"] > first["prefix_tokens"]


def test_delete_aborts_and_unknown_hint_is_404(gw: RunningGateway) -> None:
    hint = post_hint(gw, conversation(repeat=30))
    response = httpx.delete(f"{gw.base_url}/v1/typing/{hint['id']}")
    assert response.status_code == 200
    assert response.json()["state"] == "aborted"
    missing = httpx.get(f"{gw.base_url}/v1/typing/hint-nope")
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}
    bad = httpx.post(f"{gw.base_url}/v1/typing", json={"messages": []})
    assert bad.status_code == 400
    unknown_model = httpx.post(
        f"{gw.base_url}/v1/typing", json={"model": "nope", "messages": conversation(1)}
    )
    assert unknown_model.status_code == 404


def test_idle_hint_expires_and_releases_the_freeze(gw: RunningGateway) -> None:
    hint = post_hint(gw, conversation(repeat=2))
    wait_for_state(gw, hint["id"], "ready")
    expired = wait_for_state(gw, hint["id"], "expired", timeout=HINT_IDLE_SECONDS + 5)
    assert expired["state"] == "expired"
    assert gw.scheduler()["gates"]["prefill_freeze"] is False


def test_non_matching_hint_is_not_used(gw: RunningGateway) -> None:
    hinted = conversation()
    hint = post_hint(gw, hinted)
    wait_for_state(gw, hint["id"], "ready")
    other = conversation()
    reply = chat(gw, [*other, QUESTION])
    assert reply.usage.prompt_tokens_details.cached_tokens < 8
    assert hint_state(gw, hint["id"])["state"] == "ready"
    metrics = httpx.get(f"{gw.base_url}/metrics").text
    assert 'gateway_typing_hints_total{outcome="mismatched"}' in metrics
    httpx.delete(f"{gw.base_url}/v1/typing/{hint['id']}")


def test_multi_turn_reuses_the_previous_turn_without_hints(gw: RunningGateway) -> None:
    history = [*conversation()[:1], {"role": "user", "content": "Name a famous painter."}]
    first = chat(gw, history, max_tokens=30)
    answer = first.choices[0].message.content or ""
    turn_two = [*history, {"role": "assistant", "content": answer}, QUESTION]
    second = chat(gw, turn_two)
    previous = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= 0.9 * previous


def test_progressive_hints_with_a_diverging_draft(gw: RunningGateway) -> None:
    history = conversation()
    session = f"editor-{uuid.uuid4().hex[:6]}"
    first = post_hint(
        gw, history, session=session, draft="Tell me about the planet Mars and its moons"
    )
    wait_for_state(gw, first["id"], "ready")
    # The user deletes back and types something else: the cache is trimmed to the common part.
    second = post_hint(gw, history, session=session, draft="Tell me about the planet Venus because")
    ready = wait_for_state(gw, second["id"], "ready")
    plain = post_hint(gw, history)  # the conversation alone, a prefix of both drafts
    assert plain["prefix_tokens"] < ready["cached_tokens"] < first["prefix_tokens"]
    httpx.delete(f"{gw.base_url}/v1/typing/{plain['id']}")
    reply = chat(
        gw,
        [
            *history,
            {"role": "user", "content": "Tell me about the planet Venus because it is hot."},
        ],
    )
    assert reply.usage.prompt_tokens_details.cached_tokens >= ready["prefix_tokens"]


def test_same_greedy_output_with_and_without_a_warm_cache(gw: RunningGateway) -> None:
    for question in (QUESTION, {"role": "user", "content": "Write one sentence about the sea."}):
        history = conversation()
        cold = chat(gw, [*history, question], max_tokens=24)
        assert cold.usage.prompt_tokens_details.cached_tokens < 8
        history_again = [dict(m) for m in history]
        hint = post_hint(gw, history_again)
        wait_for_state(gw, hint["id"], "ready")
        warm = chat(gw, [*history_again, question], max_tokens=24)
        assert warm.usage.prompt_tokens_details.cached_tokens >= hint["prefix_tokens"]
        assert warm.choices[0].message.content == cold.choices[0].message.content


def test_an_abandoned_hint_delays_task_work_at_most_the_bound(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    bound = 2.0
    gateway = start_gateway(
        tmp_path_factory.mktemp("freeze"),
        {"scheduler": {"prefill_freeze_max_seconds": bound, "typing_quiet_seconds": 0.5}},
    )
    try:
        hint = post_hint(gateway, conversation(4))
        wait_for_state(gateway, hint["id"], "ready")
        posted_at = time.monotonic()
        # Nobody follows it up; a task request arrives at once.
        reply = gateway.openai().chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=1,
            extra_headers={"X-Gateway-Priority": "task"},
        )
        waited = time.monotonic() - posted_at
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert waited < bound + 1.5, waited  # the bound, plus one short generation
        assert hint_state(gateway, hint["id"])["state"] == "ready"  # still usable
    finally:
        gateway.stop()
