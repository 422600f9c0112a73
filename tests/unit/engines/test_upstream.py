"""The OpenAI-upstream backend against httpx's mock transport: relaying and error mapping.

(The real thing, ``mlx_lm.server``, is exercised end to end in tests/e2e/test_tiers.py.)
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from gateway.engines.upstream import OpenAIUpstreamBackend, UpstreamConfig
from gateway.errors import UpstreamError, UpstreamRejectedError, UpstreamTimeoutError
from gateway.metrics import GatewayMetrics
from gateway.seam.backend import Finished, GenerationRequest, SamplingParams, Started, TokenEvent

REQUEST = GenerationRequest(
    id="r1",
    messages=({"role": "user", "content": "hi"},),
    params=SamplingParams(max_tokens=5, temperature=0.0, stop=("x",)),
)


def sse(*events: object) -> bytes:
    return b"".join(
        f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events
    )


def chunk(text: str | None = None, finish: str | None = None) -> dict[str, object]:
    delta = {"content": text} if text is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def backend(handler: Callable[[httpx.Request], httpx.Response]) -> OpenAIUpstreamBackend:
    config = UpstreamConfig(base_url="http://upstream.test/v1", model="up", api_key="k")
    return OpenAIUpstreamBackend(
        "big", config, GatewayMetrics().upstream, transport=httpx.MockTransport(handler)
    )


async def collect(b: OpenAIUpstreamBackend) -> list[object]:
    return [event async for event in b.generate(REQUEST)]


async def test_relays_text_finish_and_usage_and_sends_our_parameters() -> None:
    seen: dict[str, object] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["body"] = json.loads(request.content)
        seen["auth"] = request.headers["authorization"]
        usage = {
            "prompt_tokens": 7,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 5},
        }
        body = sse(
            chunk("Hel"),
            chunk("lo"),
            chunk(finish="length"),
            {"choices": [], "usage": usage},
            "[DONE]",
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    events = await collect(backend(handler))
    assert events[0] == Started(prompt_tokens=None)
    assert [e.text for e in events if isinstance(e, TokenEvent)] == ["Hel", "lo"]
    assert events[-1] == Finished("length", 7, 2, 5)
    body = seen["body"]
    assert isinstance(body, dict)
    assert body["model"] == "up" and body["stream"] is True and body["max_tokens"] == 5
    assert body["stop"] == ["x"] and body["stream_options"] == {"include_usage": True}
    assert seen["auth"] == "Bearer k"


async def test_the_upstreams_4xx_is_passed_through() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        error = {"message": "bad stop", "type": "invalid_request_error", "param": "stop"}
        return httpx.Response(422, json={"error": error})

    with pytest.raises(UpstreamRejectedError) as refused:
        await collect(backend(handler))
    assert refused.value.status_code == 422 and refused.value.param == "stop"
    assert "bad stop" in refused.value.message


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(500, text="boom"), UpstreamError),
        (httpx.Response(401, json={"error": "no key"}), UpstreamError),  # our key, not theirs
        (httpx.Response(200, content=sse("{not json")), UpstreamError),
        (httpx.Response(200, content=sse(chunk("a"))), UpstreamError),  # ended early
        (httpx.Response(200, content=sse({"error": {"message": "oom"}})), UpstreamError),
    ],
)
async def test_bad_answers_are_502(response: httpx.Response, error: type[Exception]) -> None:
    with pytest.raises(error) as failed:
        await collect(backend(lambda request: response))
    assert failed.value.status_code == 502  # type: ignore[attr-defined]


async def test_timeouts_are_504_and_transport_failures_502() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(UpstreamTimeoutError):
        await collect(backend(slow))
    with pytest.raises(UpstreamError) as failed:
        await collect(backend(refused))
    assert failed.value.status_code == 502


async def test_health_says_reachable_or_not() -> None:
    up = await backend(lambda r: httpx.Response(200, json={"data": []})).health()
    assert (up.loaded, up.state) == (True, "reachable")

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    gone = await backend(down).health()
    assert (gone.loaded, gone.state) == (False, "unreachable")
