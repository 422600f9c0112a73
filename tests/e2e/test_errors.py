"""Every bad input gets OpenAI's error envelope and the right status, never a 500."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.conftest import MODEL
from testsupport.process import RunningGateway

pytestmark = pytest.mark.e2e
USER = [{"role": "user", "content": "Hello"}]


def assert_envelope(body: dict[str, Any], param: str | None = None) -> dict[str, Any]:
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": "hello"}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, None),
        ({"model": MODEL, "messages": USER, "temperature": 2.5}, "temperature"),
        ({"model": MODEL, "messages": USER, "temperature": -0.1}, "temperature"),
        ({"model": MODEL, "messages": USER, "top_p": 1.5}, "top_p"),
        ({"model": MODEL, "messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "messages": USER, "max_tokens": "5"}, "max_tokens"),
        ({"model": MODEL, "messages": USER, "max_completion_tokens": -3}, "max_completion_tokens"),
        ({"model": MODEL, "messages": USER, "n": 2}, "n"),
        ({"model": MODEL, "messages": USER, "seed": 2**70}, "seed"),
        ({"model": MODEL, "messages": USER, "stream": "yes"}, "stream"),
        ({"model": MODEL, "messages": USER, "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"model": MODEL, "messages": USER, "priority": "urgent"}, "priority"),
        ({"messages": USER}, "model"),
        ({"model": MODEL, "messages": USER, "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": MODEL, "messages": USER, "tool_choice": "required"}, None),
        ({"model": MODEL, "messages": USER, "top_logprobs": 3}, None),
        ({"model": MODEL, "messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}, None),
        ({"model": MODEL, "messages": USER, "response_format": {"type": "xml"}}, None),
        ({"model": MODEL, "messages": USER, "response_format": {"type": "json_schema"}}, None),
        (
            {
                "model": MODEL,
                "messages": USER,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "strin"}},
                },
            },
            "response_format",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            None,
        ),
    ],
)
def test_invalid_requests_get_400(
    gateway: RunningGateway, body: dict[str, Any], param: str | None
) -> None:
    with gateway.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = assert_envelope(response.json(), param)
    assert error["type"] == "invalid_request_error"


def test_sdk_raises_bad_request_for_out_of_range_temperature(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.openai().chat.completions.create(model=MODEL, messages=USER, temperature=9)  # type: ignore[arg-type]
    assert caught.value.param == "temperature"  # type: ignore[attr-defined]


def test_malformed_json_gets_400(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        response = http.post(
            "/v1/chat/completions",
            content=b'{"model": ',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400
    assert_envelope(response.json())


def test_unknown_model_is_404_and_lists_known_models(gateway: RunningGateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.openai().chat.completions.create(model="gpt-9-ultra", messages=USER)  # type: ignore[arg-type]
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found"
    assert MODEL in body["message"]


def test_context_overflow_is_400_with_both_numbers(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.openai().chat.completions.create(model=MODEL, messages=USER, max_tokens=9000)
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["code"] == "context_length_exceeded"
    assert "8192" in body["message"] and "9000" in body["message"]
    long_prompt = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.openai().chat.completions.create(model=MODEL, messages=long_prompt)  # type: ignore[arg-type]
    assert caught.value.body["param"] == "messages"  # type: ignore[index]


def test_body_over_the_limit_is_413(gateway: RunningGateway) -> None:
    huge = [{"role": "user", "content": "a" * (5 * 1024 * 1024)}]
    with gateway.http() as http:
        response = http.post("/v1/chat/completions", json={"model": MODEL, "messages": huge})
    assert response.status_code == 413
    assert_envelope(response.json())


def test_unknown_route_and_method_get_envelopes(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        missing = http.get("/v1/nothing-here")
        wrong_method = http.get("/v1/chat/completions")
    assert missing.status_code == 404
    assert_envelope(missing.json())
    assert wrong_method.status_code == 405
    assert_envelope(wrong_method.json())


def test_hostile_bodies_get_400_never_500(gateway: RunningGateway) -> None:
    deep = '{"model": "m", "messages": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with gateway.http() as http:
        too_deep = http.post(
            "/v1/chat/completions", content=deep, headers={"content-type": "application/json"}
        )
        assert too_deep.status_code == 400
        assert_envelope(too_deep.json())
        for key in ("²", "1" * 5000, "-1", "0x10", "١٢"):  # Unicode digits, huge, signs
            response = http.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": USER, "logit_bias": {key: 1}},
            )
            assert response.status_code == 400, (key, response.text)
            assert len(assert_envelope(response.json(), "logit_bias")["message"]) < 300
        huge_name = http.post(
            "/v1/chat/completions", json={"model": "m" * 1_000_000, "messages": USER}
        )
        assert huge_name.status_code == 404
        assert len(assert_envelope(huge_name.json(), "model")["message"]) < 1000
        oversized = http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "word " * 800_000}]},
        )
        assert oversized.status_code == 400
        assert assert_envelope(oversized.json(), "messages")["code"] == "context_length_exceeded"
        assert http.get("/health").status_code == 200


def test_protocol_edges(gateway: RunningGateway) -> None:
    with gateway.http() as http:
        wrong_method = http.put("/v1/chat/completions")
        assert wrong_method.status_code == 405
        assert "POST" in wrong_method.headers["Allow"]
        assert_envelope(wrong_method.json())
