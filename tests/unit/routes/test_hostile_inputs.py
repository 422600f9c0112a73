"""Issue 23, item 5: hostile inputs and faults, in-process on a fake runner (bounded time).

Each case was a 500, a silent stream, a frozen event loop or an open socket before.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.config import load_settings
from gateway.errors import UnprocessableError
from gateway.peers.signing import (
    PeerAuthError,
    RequestVerifier,
    ResponseSigner,
    sign,
)
from gateway.seam.backend import SamplingParams
from gateway.serving.tasks import sampling_arguments
from tests.unit.fake_runner import FakeGeneration, FakeRunner

MODEL = "smollm2-135m-instruct"
SECRET = "s" * 32


def app(runner: Any = None, **overrides: Any) -> Any:
    settings = load_settings(
        overrides={"cache": {"prefix_cache_bytes": 0}, **overrides}, environ={}
    )
    made = runner or FakeRunner()
    return create_app(settings, runner_factory=lambda *_: made)


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


# -- /v1/completions ----------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", [""]])
async def test_an_empty_prompt_is_a_400_streamed_or_not(prompt: Any) -> None:
    async with AsyncTestClient(app()) as client:
        for stream in (False, True):
            body = {"model": MODEL, "prompt": prompt, "stream": stream}
            answer = await client.post("/v1/completions", json=body)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == "prompt"


async def test_explicit_null_max_tokens_on_completions_means_16() -> None:
    seen: list[int | None] = []

    class Recording(FakeRunner):
        def generate(self, prompt: Sequence[int], params: SamplingParams, *a: Any, **k: Any) -> Any:
            seen.append(params.max_tokens)
            return super().generate(prompt, params, *a, **k)

    async with AsyncTestClient(app(Recording())) as client:
        body = {"model": MODEL, "prompt": "hi", "max_tokens": None}
        answer = await client.post("/v1/completions", json=body)
        assert answer.status_code == 200, answer.text
    assert seen == [16]


# -- streams end with an error event and [DONE], whatever failed ------------------------------


class _Failing(FakeGeneration):
    def __init__(self, prompt: Sequence[int], params: SamplingParams) -> None:
        super().__init__(prompt, params)
        self._inner = self._events
        self._events = self._fail()

    def _fail(self) -> Iterator[Any]:
        yield next(self._inner)
        raise RuntimeError("engine exploded")


class FailingRunner(FakeRunner):
    def generate(self, prompt: Sequence[int], params: SamplingParams, *_: Any, **__: Any) -> Any:
        return _Failing(prompt, params)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
    ],
)
async def test_an_unexpected_failure_mid_stream_ends_with_an_error_and_done(
    path: str, body: dict[str, Any]
) -> None:
    async with AsyncTestClient(app(FailingRunner())) as client:
        answer = await client.post(path, json={"model": MODEL, "stream": True, **body})
        assert answer.status_code == 200
        data = sse_data(answer.text)
        assert data[-1] == "[DONE]", answer.text
        error = json.loads(data[-2])["error"]
        assert error["type"] == "server_error" and "engine exploded" not in error["message"]


async def test_an_unexpected_failure_ends_an_anthropic_stream_with_an_error_event() -> None:
    async with AsyncTestClient(app(FailingRunner())) as client:
        body = {
            "model": MODEL,
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        answer = await client.post("/v1/messages", json=body)
        assert "event: error" in answer.text, answer.text


# -- big arrays where a string is expected: refused fast, off the event loop --------------------

HUGE = [0] * 2_000_000  # 4 MB of "0,": under the default max_request_bytes


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": HUGE}]}),
        (
            "/v1/messages",
            {
                "model": MODEL,
                "max_tokens": 4,
                "system": HUGE,
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
        ("/v1/typing", {"model": MODEL, "messages": [{"role": "user", "content": HUGE}]}),
    ],
)
async def test_a_two_million_element_array_is_a_fast_400(path: str, body: dict[str, Any]) -> None:
    raw = json.dumps(body, separators=(",", ":")).encode()
    assert len(raw) < 4 * 1024**2
    async with AsyncTestClient(app()) as client:
        started = time.perf_counter()
        answer = await client.post(path, content=raw, headers={"content-type": "application/json"})
        took = time.perf_counter() - started
    assert answer.status_code in (400, 413), answer.text
    assert "error" in answer.json()
    assert took < 3.0, f"{took:.1f} s"


async def test_more_messages_than_the_cap_are_refused_before_validation() -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}] * 40_000}
    async with AsyncTestClient(app()) as client:
        answer = await client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == "messages"


# -- peers ------------------------------------------------------------------------------------


def test_a_non_ascii_signature_is_refused_not_a_crash() -> None:
    verifier = RequestVerifier(SECRET, 30, clock=lambda: 1_000_000.0)
    headers = sign(SECRET, "POST", "/v1/peer/tickets", b"{}", "h", now=1_000_000.0)
    headers["x-peer-signature"] = "é" * 64
    with pytest.raises(PeerAuthError) as refused:
        verifier.verify("POST", "/v1/peer/tickets", headers, b"{}")
    assert refused.value.reason == "signature"


async def test_a_non_ascii_signature_over_http_is_a_401() -> None:
    peers = {"secret": SECRET, "nodes": []}
    async with AsyncTestClient(app(peers=peers)) as client:
        headers = {
            "x-peer-timestamp": str(int(time.time())).encode(),
            "x-peer-nonce": b"n1",
            "x-peer-signature": "é".encode(),
        }
        answer = await client.get("/v1/peer/hello", headers=headers)
        assert answer.status_code == 401, answer.text


@pytest.mark.parametrize("stamp", ["nan", "inf", "-inf", "1e999"])
def test_a_signed_non_finite_timestamp_is_refused(stamp: str) -> None:
    verifier = RequestVerifier(SECRET, 30, clock=lambda: 1_000_000.0)
    message = "\n".join(["POST", "/v1/peer/tickets", stamp, "n", "h"]).encode()
    message += b"\n" + hashlib.sha256(b"{}").hexdigest().encode()
    signature = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    headers = {
        "x-peer-timestamp": stamp,
        "x-peer-nonce": "n",
        "x-peer-signature": signature,
        "x-peer-tasks-hash": "h",
    }
    with pytest.raises(PeerAuthError) as refused:
        verifier.verify("POST", "/v1/peer/tickets", headers, b"{}")
    assert refused.value.reason == "timestamp"


def test_response_events_are_signed_per_request_and_in_order() -> None:
    sender = ResponseSigner(SECRET, "nonce-1")
    ids = [sender.sign("token", '{"text":"a"}'), sender.sign("result", '{"x":1}')]
    checker = ResponseSigner(SECRET, "nonce-1")
    assert checker.check("token", '{"text":"a"}', ids[0])
    assert checker.check("result", '{"x":1}', ids[1])
    rewritten = ResponseSigner(SECRET, "nonce-1")
    assert not rewritten.check("token", '{"text":"b"}', ids[0])  # a relay's rewrite
    reordered = ResponseSigner(SECRET, "nonce-1")
    assert not reordered.check("result", '{"x":1}', ids[1])  # an event left out
    other_request = ResponseSigner(SECRET, "nonce-2")
    assert not other_request.check("token", '{"text":"a"}', ids[0])
    assert not ResponseSigner(SECRET, "nonce-1").check("token", '{"text":"a"}', None)
    assert not ResponseSigner(SECRET, "nonce-1").check("token", '{"text":"a"}', "é")


@pytest.mark.parametrize(
    ("args", "param"),
    [
        ({"temperature": "nan"}, "args.temperature"),
        ({"top_p": "nan"}, "args.top_p"),
        ({"temperature": "inf"}, "args.temperature"),
        ({"stop": json.dumps(["x"] * 17)}, "args.stop"),
        ({"max_tokens": "0"}, "args.max_tokens"),
    ],
)
def test_chat_ticket_sampling_is_bounded(args: dict[str, str], param: str) -> None:
    with pytest.raises(UnprocessableError) as refused:
        sampling_arguments(args, SamplingParams())
    assert refused.value.param == param


async def test_tasks_chat_refuses_a_nan_temperature() -> None:
    async with AsyncTestClient(app()) as client:
        messages = json.dumps([{"role": "user", "content": "hi"}])
        body = {"args": {"messages": messages, "temperature": "nan"}}
        answer = await client.post("/v1/tasks/chat", json=body)
        assert answer.status_code == 422, answer.text


# -- uploads: a client gone mid-upload, and a body that never ends ------------------------------


async def _asgi(
    application: Any, body_parts: list[bytes], then: str, path: str = "/v1/chat/completions"
) -> list[dict[str, Any]]:
    """Drive the app directly: the body in parts, then a disconnect or silence."""
    sent: list[dict[str, Any]] = []
    parts = list(body_parts)

    async def receive() -> dict[str, Any]:
        if parts:
            return {"type": "http.request", "body": parts.pop(0), "more_body": True}
        if then == "disconnect":
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"100000")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    await application(scope, receive, send)
    return sent


async def test_a_client_gone_during_the_upload_is_not_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    application = app()
    async with AsyncTestClient(application) as client:
        caplog.set_level(logging.INFO)
        await _asgi(application, [b'{"model": "x", "mess'], then="disconnect")
        metrics = (await client.get("/metrics")).text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert 'status="500"' not in metrics
    assert 'status="499"' in metrics


async def test_a_body_that_never_ends_times_out() -> None:
    application = app(request_body_seconds=0.5)
    async with AsyncTestClient(application):
        started = time.perf_counter()
        sent = await asyncio.wait_for(_asgi(application, [b'{"model"'], then="silence"), 10)
        took = time.perf_counter() - started
    assert took < 3
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 408
