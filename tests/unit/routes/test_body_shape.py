"""``check_body_shape``: a body's arrays bounded slice by slice, in the decoded walk's words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.protocol.bounds import MAX_CONTENT_PARTS, MAX_MESSAGES, ShapeError, check_shape
from gateway.routes import body_shape
from gateway.routes.body_shape import DECODE_WHOLE_BYTES, check_body_shape

TURN = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
]


def encoded(value: Any) -> bytes:
    return json.dumps(value).encode()


def refusal(check: Any, arg: Any) -> tuple[str, str] | None:
    try:
        check(arg)
    except ShapeError as exc:
        return str(exc), exc.param
    return None


def conversation(messages: int) -> dict[str, Any]:
    return {"model": "m", "messages": TURN * (messages // 2)}


def test_forty_thousand_messages_are_refused_in_the_decoded_walks_words() -> None:
    body = encoded(conversation(40_000))
    assert refusal(check_body_shape, body) == (
        f"'messages' has 40000 items; at most {MAX_MESSAGES} are accepted",
        "messages",
    )


def test_an_over_long_conversation_is_counted_never_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded: list[int] = []
    whole = body_shape._whole

    class Recording:
        def decode(self, raw: Any) -> Any:
            decoded.append(len(raw))
            return whole.decode(raw)

    monkeypatch.setattr(body_shape, "_whole", Recording())
    body = encoded({**conversation(40_000), "stop": ["\n"], "tools": []})
    with pytest.raises(ShapeError):
        check_body_shape(body)
    # Only small members were ever built; the 2 MB conversation was sliced and counted.
    assert all(size < DECODE_WHOLE_BYTES for size in decoded), decoded


def _nested_parts() -> dict[str, Any]:
    parts = [{"type": "text", "text": "x" * 40}] * (MAX_CONTENT_PARTS + 1)
    return {"model": "m", "messages": [*TURN * 1_000, {"role": "user", "content": parts}]}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(conversation(40_000), id="40k-messages"),
        pytest.param(conversation(MAX_MESSAGES), id="messages-at-the-bound"),
        pytest.param(_nested_parts(), id="parts-past-the-bound-in-a-big-body"),
        pytest.param(
            {"model": "m", "messages": [{"role": "user", "content": [0] * 2_000_000}]},
            id="two-million-numbers-as-content",
        ),
        pytest.param({"model": "m", "tools": [{"type": "function"}] * 40_000}, id="40k-tools"),
        pytest.param({"input": [{"role": "user"}] * 140_000}, id="any-array-of-objects"),
        pytest.param([{"a": [1]}, {"a": [1] * 200_000}], id="a-top-level-array"),
        pytest.param({"messages": [{"content": "x" * 500_000}]}, id="one-big-string"),
        pytest.param({"a": {"b": {"c": [[0] * 140_000, "y" * 70_000]}}}, id="nested-objects"),
    ],
)
def test_the_sliced_walk_refuses_what_the_decoded_walk_refuses(body: Any) -> None:
    # One array past its bound at most in each: the walks may meet two in different orders.
    raw = encoded(body)
    assert len(raw) >= DECODE_WHOLE_BYTES  # the path the guard takes for it
    assert refusal(check_body_shape, raw) == refusal(check_shape, body)


@pytest.mark.parametrize(
    "raw",
    [
        b"{" * 100_000,  # not JSON: the route's decoder says so
        b'{"messages": [' + b"[" * 70_000 + b"]" * 70_000 + b"]}",  # its json_too_deep
        b'{"messages": ' + encoded(TURN * 40_000)[:-1],  # cut short
    ],
)
def test_a_body_that_is_not_json_is_left_to_the_route(raw: bytes) -> None:
    check_body_shape(raw)
