"""Issue 19's mappings, pure: Anthropic's output format, a cut call's partial input, image
parts refused by name, legacy functions taken as tools and answered in their own shape."""

from __future__ import annotations

import json

import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol.anthropic import MessagesRequest
from gateway.protocol.openai import ChatCompletionRequest, NamedToolChoice
from gateway.serving.anthropic import output_format_grammar
from gateway.serving.messages import template_messages
from gateway.serving.openai_chat import LEGACY_FUNCTIONS, finish_reason, tool_use
from gateway.serving.partial_json import partial_object

WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def chat(**fields: object) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}
    return ChatCompletionRequest.model_validate(body, strict=True)


def test_anthropic_output_format_is_a_closed_json_schema_grammar() -> None:
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "Hi"}],
            "output_config": {
                "effort": "low",
                "format": {
                    "type": "json_schema",
                    "schema": {"type": "object", "properties": {"score": {"type": "number"}}},
                },
            },
        }
    )
    grammar = output_format_grammar(request)
    assert grammar is not None and grammar.kind == "json_schema"
    schema = json.loads(grammar.source)
    assert schema["additionalProperties"] is False
    assert "multipleOf" in schema["properties"]["score"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city": "Par', {"city": "Par"}),
        ('{"city": "Paris", "da', {"city": "Paris"}),
        ('{"days": [1, 2', {"days": [1, 2]}),
        ('{"ok": tr', {}),
        ("", {}),
    ],
)
def test_a_cut_object_is_parsed_as_far_as_it_goes(text: str, expected: dict[str, object]) -> None:
    assert partial_object(text) == expected


def test_an_image_part_is_refused_naming_it() -> None:
    request = chat(
        messages=[
            {"role": "user", "content": "Hi"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
                ],
            },
        ]
    )
    with pytest.raises(InvalidRequestError) as caught:
        template_messages(request.messages)
    assert caught.value.param == "messages[1].content[1]"
    assert "this model takes text only" in caught.value.message


def test_legacy_functions_become_tools_marked_legacy() -> None:
    named = chat(functions=[WEATHER], function_call={"name": "get_weather"})
    assert named.tool_choice == NamedToolChoice.model_validate(
        {"type": "function", "function": {"name": "get_weather"}}
    )
    use = tool_use(named)
    assert use is not None and use.param == LEGACY_FUNCTIONS
    assert use.choice.mode == "function" and not use.choice.parallel
    assert chat(functions=[WEATHER], function_call="none").tool_choice == "none"
    assert chat(functions=[WEATHER]).tool_choice is None  # auto, as OpenAI's default
    assert finish_reason("tool_calls", legacy=True) == "function_call"
    assert finish_reason("length", legacy=True) == "length"


@pytest.mark.parametrize(
    "fields",
    [
        {"function_call": "auto"},  # without functions
        {"functions": [WEATHER], "tools": [{"type": "function", "function": WEATHER}]},
    ],
)
def test_legacy_functions_are_refused_when_inconsistent(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        chat(**fields)
