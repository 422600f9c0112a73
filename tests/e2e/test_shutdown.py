"""SIGTERM drains: finishing streams end normally, long ones end with a proper error event,
queued and new requests get a 503 envelope with Retry-After."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway, start_gateway

pytestmark = pytest.mark.e2e
NO_EOS = {"2": -100}
GRACE = 3.0  # the 10-token stream ends well within it; the long one is cut at its end


def started(tmp_path: Path) -> RunningGateway:
    return start_gateway(tmp_path / "gw", {"shutdown_grace_seconds": GRACE})


def stream_in_thread(
    gateway: RunningGateway, max_tokens: int, outcome: dict[str, Any]
) -> threading.Thread:
    def consume() -> None:
        text, finish = "", None
        try:
            stream = gateway.openai(timeout=60).chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "Write a long story."}],
                max_tokens=max_tokens,
                logit_bias=NO_EOS,
                stream=True,
            )
            for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                    outcome["tokens"] = outcome.get("tokens", 0) + 1
        except BaseException as exc:  # asserted by the test
            outcome["error"] = exc
        outcome.update(text=text, finish=finish)

    thread = threading.Thread(target=consume)
    thread.start()
    deadline = time.monotonic() + 60
    while outcome.get("tokens", 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    return thread


def test_a_stream_that_finishes_within_the_grace_ends_normally(tmp_path: Path) -> None:
    gateway = started(tmp_path)
    outcome: dict[str, Any] = {}
    thread = stream_in_thread(gateway, 10, outcome)  # well within the grace
    gateway.process.send_signal(signal.SIGTERM)
    thread.join(60)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["finish"] == "length" and outcome["text"]
    gateway.process.wait(30)


def test_a_long_stream_ends_with_an_error_event_and_queued_work_gets_503(tmp_path: Path) -> None:
    gateway = started(tmp_path)
    outcome: dict[str, Any] = {}
    thread = stream_in_thread(gateway, 4000, outcome)
    queued: dict[str, Any] = {}

    def wait_in_queue() -> None:
        queued["response"] = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            # Background work: it waits while a user's stream runs (a second user request
            # would join the stream's batch, and run).
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "Hi"}],
                "priority": "background",
            },
            timeout=60,
        )

    waiting = threading.Thread(target=wait_in_queue)
    waiting.start()
    time.sleep(0.5)  # queued behind the stream (one slot)
    signalled = time.monotonic()
    gateway.process.send_signal(signal.SIGTERM)
    waiting.join(30)
    response = queued["response"]
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "shutting_down"
    assert int(response.headers["Retry-After"]) >= 1
    try:  # new requests while draining: 503 too (or refused once it stopped listening)
        fresh = httpx.get(f"{gateway.base_url}/v1/models", timeout=5)
        assert fresh.status_code == 503
    except httpx.TransportError:
        pass
    thread.join(60)
    error = outcome.get("error")
    assert isinstance(error, openai.APIError) and not isinstance(error, openai.APIConnectionError)
    assert "shutting down" in str(error)
    assert GRACE - 0.5 <= time.monotonic() - signalled < GRACE + 10
    assert gateway.process.wait(30) is not None
