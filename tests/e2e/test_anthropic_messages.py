"""Anthropic's Messages API through the unmodified ``anthropic`` SDK on the real model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import jsonschema
import pytest

from tests.e2e.test_tool_calls import WEATHER_PARAMETERS
from testsupport.process import RunningGateway, start_gateway

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the weather forecast for a city",
    "input_schema": WEATHER_PARAMETERS,
}
GREEDY = {"temperature": 0}  # the current SDK has no temperature argument: extra_body


def client(gateway: RunningGateway, key: str = "local") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key=key, max_retries=0)


def test_create_answers_in_anthropic_shape(gateway: RunningGateway) -> None:
    message = client(gateway).messages.create(
        model="gpt-4o-mini",
        max_tokens=24,
        system="You are a terse assistant.",
        messages=[{"role": "user", "content": "Say hello to Ada."}],
        extra_body=GREEDY,
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.stop_reason in ("end_turn", "max_tokens")
    (block,) = message.content
    assert block.type == "text" and block.text
    assert message.usage.output_tokens > 0
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 10


def test_the_system_prompt_reaches_the_model(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    conversation = [{"role": "user", "content": "Hi"}]
    plain = sdk.messages.count_tokens(model="gpt-4o-mini", messages=conversation)  # type: ignore[arg-type]
    short, longer = (
        sdk.messages.count_tokens(
            model="gpt-4o-mini",
            system=[{"type": "text", "text": text}],
            messages=conversation,  # type: ignore[arg-type]
        ).input_tokens
        for text in ("Answer in French.", "Answer in French, in one short sentence, politely.")
    )
    # (Without a system prompt, SmolLM2's template writes its own: the counts differ.)
    assert short != plain.input_tokens and longer > short
    # count_tokens is the prompt the model will read: create reports the same.
    message = sdk.messages.create(
        model="gpt-4o-mini",
        max_tokens=1,
        messages=conversation,
        extra_body=GREEDY,  # type: ignore[arg-type]
    )
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == plain.input_tokens


def test_stop_sequences_end_the_message(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    prompt = [{"role": "user", "content": "List the numbers from 1 to 10, comma separated."}]
    free = sdk.messages.create(
        model="gpt-4o-mini", max_tokens=40, messages=prompt, extra_body=GREEDY
    )  # type: ignore[arg-type]
    text = free.content[0].text  # type: ignore[union-attr]
    assert "4" in text, text
    stopped = sdk.messages.create(
        model="gpt-4o-mini",
        max_tokens=40,
        messages=prompt,  # type: ignore[arg-type]
        stop_sequences=["4"],
        extra_body=GREEDY,
    )
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "4"
    assert stopped.content[0].text == text[: text.index("4")]  # type: ignore[union-attr]


def test_stream_text_matches_create(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    request = {
        "model": "gpt-4o-mini",
        "max_tokens": 30,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "extra_body": GREEDY,
    }
    whole = sdk.messages.create(**request)  # type: ignore[arg-type]
    with sdk.messages.stream(**request) as stream:  # type: ignore[arg-type]
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == whole.content[0].text == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_raw_stream_has_the_exact_event_sequence(gateway: RunningGateway) -> None:
    body = {
        "model": "gpt-4o-mini",
        "max_tokens": 8,
        "stream": True,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    with gateway.http() as http, http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_tool_use_create_and_stream(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    request = {
        "model": "gpt-4o-mini",
        "max_tokens": 80,
        "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "any"},
        "extra_body": GREEDY,
    }
    message = sdk.messages.create(**request)  # type: ignore[arg-type]
    assert message.stop_reason == "tool_use"
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER_PARAMETERS)
    with sdk.messages.stream(**request) as stream:  # type: ignore[arg-type]
        deltas = [e for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert (streamed.name, streamed.input) == (use.name, use.input)
    assert final.stop_reason == "tool_use" and len(deltas) > 1

    # A named tool, then the tool's result back in the conversation.
    named = sdk.messages.create(
        **{**request, "tool_choice": {"type": "tool", "name": "get_weather"}}
    )  # type: ignore[arg-type]
    assert named.stop_reason == "tool_use"
    answer = sdk.messages.create(
        **{
            **request,
            "tool_choice": {"type": "none"},
            "max_tokens": 8,
            "messages": [
                *request["messages"],  # type: ignore[list-item]
                {
                    "role": "assistant",
                    "content": [use.model_dump(include={"type", "id", "name", "input"})],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": use.id, "content": "22 C, sunny"}
                    ],
                },
            ],
        }
    )
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"]


def test_errors_are_anthropic_errors(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    with pytest.raises(anthropic.BadRequestError) as missing:
        # (The SDK checks for max_tokens itself; omit sends the request without it, and
        # an explicit timeout keeps it from computing one from max_tokens.)
        sdk.messages.create(
            model="gpt-4o-mini",
            timeout=30,
            max_tokens=anthropic.omit,
            messages=[{"role": "user", "content": "x"}],
        )
    assert missing.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "max_tokens" in missing.value.message
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.create(
            model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.BadRequestError) as image:
        sdk.messages.create(
            model="gpt-4o-mini",
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert "image" in image.value.message
    with pytest.raises(anthropic.BadRequestError) as too_long:
        sdk.messages.create(
            model="gpt-4o-mini",
            timeout=30,
            max_tokens=100_000,
            messages=[{"role": "user", "content": "x"}],
        )
    assert "context" in too_long.value.message


@pytest.fixture(scope="module")
def keyed_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    running = start_gateway(Path(tmp_path_factory.mktemp("keyed")), {"api_key": "sesame"})
    yield running
    running.stop()


def test_the_api_key_is_taken_from_x_api_key(keyed_gateway: RunningGateway) -> None:
    message = client(keyed_gateway, "sesame").messages.create(
        model="smollm2-135m-instruct", max_tokens=2, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.usage.output_tokens > 0
    with pytest.raises(anthropic.AuthenticationError) as wrong:
        client(keyed_gateway, "wrong").messages.create(
            model="smollm2-135m-instruct",
            max_tokens=2,
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert wrong.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    # The bearer scheme works here too (as it does for the OpenAI routes).
    answer = httpx.post(
        f"{keyed_gateway.base_url}/v1/messages/count_tokens",
        headers={"Authorization": "Bearer sesame"},
        json={"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert answer.status_code == 200 and json.loads(answer.text)["input_tokens"] > 0


def test_one_service_underneath_hints_prefix_cache_and_metrics(gateway: RunningGateway) -> None:
    sdk = client(gateway)
    history = [
        {"role": "user", "content": "My name is Ada and I collect old maps of the sea. " * 6},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
    ]
    system = "You are a friendly librarian who answers briefly."
    with gateway.http() as http:
        # A typing hint in OpenAI's message format warms what the Anthropic request repeats.
        hint = http.post(
            "/v1/typing",
            json={
                "model": "gpt-4o-mini",
                "messages": [{"role": "system", "content": system}, *history],
                "session": "anthropic-hint",
            },
        )
        assert hint.status_code in (200, 202), hint.text
        hint_id = hint.json()["id"]
        # A hint still queued when its request comes is dropped (the request runs as it
        # would without): the request is sent once the hint's prefill has begun.
        deadline = time.monotonic() + 60
        while http.get(f"/v1/typing/{hint_id}").json()["state"] == "queued":
            assert time.monotonic() < deadline, "the hint never started"
            time.sleep(0.02)
        message = sdk.messages.create(
            model="gpt-4o-mini",
            max_tokens=4,
            system=system,
            messages=[*history, {"role": "user", "content": "Which maps?"}],  # type: ignore[list-item]
            extra_body={**GREEDY, "session": "anthropic-hint"},
        )
        assert http.get(f"/v1/typing/{hint_id}").json()["state"] == "used"
        metrics = http.get("/metrics").text
    assert (message.usage.cache_read_input_tokens or 0) > 60
    assert 'gateway_tier_requests_total{kind="mlx",outcome="ok",tier="default"}' in metrics
