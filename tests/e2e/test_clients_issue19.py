"""Issue 19 through the real client libraries on the real model (SmolLM2): embeddings
(openai, litellm), Anthropic structured output and a truncated tool call, a clear refusal of
image parts, legacy functions, and langchain-openai's structured output."""

from __future__ import annotations

import base64
import json
import os
import struct
from typing import Literal

import anthropic
import openai
import pytest
from pydantic import BaseModel

from testsupport.process import RunningGateway

MODEL = "smollm2-135m-instruct"
WEATHER = {
    "name": "get_weather",
    "description": "Get the weather forecast for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    score: float


# -- embeddings ------------------------------------------------------------------------------


def test_embeddings_through_the_openai_sdk(gateway: RunningGateway) -> None:
    client = gateway.openai()
    one = client.embeddings.create(model=MODEL, input="The cat sat on the mat.")
    vector = one.data[0].embedding
    assert len(vector) == 576  # SmolLM2-135M's hidden size
    assert abs(sum(x * x for x in vector) - 1.0) < 1e-4
    assert one.usage.prompt_tokens == one.usage.total_tokens > 0

    texts = ["A dog barks.", "The cat sat on the mat.", "Paris is in France."]
    batch = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2]
    # Deterministic: the same input gives the same vector alone or in a batch.
    alone = batch.data[1].embedding
    assert max(abs(a - b) for a, b in zip(alone, vector, strict=True)) <= 1e-6

    raw = gateway.http().post(
        "/v1/embeddings", json={"model": MODEL, "input": texts, "encoding_format": "base64"}
    )
    decoded = base64.b64decode(raw.json()["data"][1]["embedding"])
    as_floats = struct.unpack(f"<{len(decoded) // 4}f", decoded)
    assert max(abs(a - b) for a, b in zip(as_floats, alone, strict=True)) <= 1e-6

    short = client.embeddings.create(model=MODEL, input="The cat sat on the mat.", dimensions=64)
    head = short.data[0].embedding
    assert len(head) == 64 and abs(sum(x * x for x in head) - 1.0) < 1e-4

    tokens = client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4, 5]])
    assert tokens.usage.prompt_tokens == 5


def test_an_input_over_the_context_is_refused_naming_it(gateway: RunningGateway) -> None:
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=MODEL, input=["short", "a", "b", "word " * 9000])
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "input[3]", error


def test_embeddings_through_litellm(gateway: RunningGateway) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    litellm = pytest.importorskip("litellm")
    response = litellm.embedding(
        model=f"openai/{MODEL}",
        input=["hello world", "goodbye"],
        api_base=f"{gateway.base_url}/v1",
        api_key="local",
    )
    assert len(response.data) == 2
    assert len(response.data[0]["embedding"]) == 576


# -- Anthropic -------------------------------------------------------------------------------


def anthropic_client(gateway: RunningGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.base_url, api_key="local", max_retries=0)


def test_anthropic_messages_parse_with_an_output_format(gateway: RunningGateway) -> None:
    message = anthropic_client(gateway).messages.parse(
        model=MODEL,
        max_tokens=120,
        messages=[{"role": "user", "content": "Rate the sentiment of: I love this phone."}],
        output_format=Sentiment,
    )
    assert message.stop_reason == "end_turn"
    parsed = message.parsed_output
    assert isinstance(parsed, Sentiment)


def test_a_truncated_anthropic_tool_call_is_returned_unstreamed(gateway: RunningGateway) -> None:
    client = anthropic_client(gateway)
    request = {
        "model": MODEL,
        "max_tokens": 3,  # inside its arguments (the call's wrapper is not counted)
        "extra_body": {"temperature": 0.0},
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [
            {
                "name": WEATHER["name"],
                "description": WEATHER["description"],
                "input_schema": WEATHER["parameters"],
            }
        ],
        "tool_choice": {"type": "any"},
    }
    message = client.messages.create(**request)  # type: ignore[call-overload]
    assert message.stop_reason == "max_tokens"
    blocks = [b for b in message.content if b.type == "tool_use"]
    assert len(blocks) == 1 and blocks[0].name == "get_weather"
    assert isinstance(blocks[0].input, dict)
    # The same block as the stream's (the SDK accumulates its partial JSON).
    with client.messages.stream(**request) as stream:  # type: ignore[call-overload]
        streamed = stream.get_final_message()
    (streamed_block,) = [b for b in streamed.content if b.type == "tool_use"]
    assert streamed_block.name == blocks[0].name


# -- OpenAI: refusals and legacy functions ---------------------------------------------------


def test_an_image_part_is_refused_naming_it(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.openai().chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    ],
                }
            ],
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "messages[0].content[1]"
    assert "this model takes text only" in error["message"]


# The city's length is bounded so that the call always ends within max_tokens: greedy decoding
# on a cached prefix can pick another (longer) city than on a cold one, and a cut call is
# rightly answered with finish_reason "length" (CI saw that once) — not what this test is about.
BOUNDED_WEATHER = {
    **WEATHER,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
    },
}


def test_legacy_functions_are_answered_with_function_call(gateway: RunningGateway) -> None:
    client = gateway.openai()
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        functions=[BOUNDED_WEATHER],  # type: ignore[list-item]
        function_call={"name": "get_weather"},
        max_tokens=60,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.tool_calls is None
    call = choice.message.function_call
    assert call is not None and call.name == "get_weather"
    assert "city" in json.loads(call.arguments)

    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        functions=[BOUNDED_WEATHER],  # type: ignore[list-item]
        function_call={"name": "get_weather"},
        max_tokens=60,
        stream=True,
    )
    name, arguments, finish = "", "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        if delta.function_call is not None:
            name += delta.function_call.name or ""
            arguments += delta.function_call.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (name, finish) == ("get_weather", "function_call")
    assert "city" in json.loads(arguments)

    plain = client.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        functions=[BOUNDED_WEATHER],  # type: ignore[list-item]
        function_call="none",
        max_tokens=10,
    )
    assert plain.choices[0].message.function_call is None


# -- langchain-openai ------------------------------------------------------------------------


def test_langchain_openai_with_structured_output(gateway: RunningGateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model=MODEL,
        base_url=f"{gateway.base_url}/v1",
        api_key="local",
        max_tokens=120,
        temperature=0,
        max_retries=0,
    )
    result = llm.with_structured_output(Sentiment).invoke("Rate the sentiment of: I love it.")
    assert isinstance(result, Sentiment)
