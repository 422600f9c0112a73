"""Tool calls through the unmodified ``openai`` SDK on the real model (SmolLM2, whose chat
template knows no tools: the gateway's own Hermes-style format and constrained decoding)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from testsupport.process import RunningGateway

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather forecast for a city",
        "parameters": WEATHER_PARAMETERS,
    },
}
TIME_PARAMETERS = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a timezone",
        "parameters": TIME_PARAMETERS,
    },
}
PROMPTS = [
    "What's the weather in Paris?",
    "Will it rain in Tokyo tomorrow?",
    "How cold is it in Oslo today, in fahrenheit?",
    "Forecast for Berlin for the next 3 days please",
    "Is it sunny in Rome?",
    "weather lisbon",
    "Do I need an umbrella in London this week?",
    "Temperature in New York in celsius",
    "What should I wear in Madrid today?",
    "Give me a 5 day forecast for Sydney.",
    "Is it windy in Chicago?",
    "Tell me a joke about cats.",
    "Quelle est la météo à Lyon ?",
    "How hot will it be in Cairo over the next week?",
    "Snow in Denver?",
    "Check the weather in São Paulo",
    "What is 2 + 2?",
    "Humidity in Singapore right now",
    "Weekend weather for Amsterdam",
    "Should I go hiking near Zurich tomorrow?",
    "Weather in Reykjavik, two days",
    "Is it foggy in San Francisco?",
    "Write a haiku about autumn.",
    "Current conditions in Mumbai",
    "What's the temperature in Toronto in fahrenheit?",
    "Will there be a storm in Miami?",
    "Beach weather in Nice?",
    "Weather for Seoul for 7 days",
    "Is it freezing in Moscow?",
    "Should I bring a jacket to Dublin?",
    "",  # an empty message: the call still matches the schema
]


def ask(client: openai.OpenAI, prompt: str, **fields: object) -> object:
    settings: dict[str, object] = {"temperature": 0, "max_tokens": 80, **fields}
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": prompt}],
        **settings,  # type: ignore[arg-type]
    )


def test_required_calls_always_match_the_schema(gateway: RunningGateway) -> None:
    client = gateway.openai()
    for prompt in PROMPTS:
        completion = ask(client, prompt, tools=[WEATHER], tool_choice="required")
        choice = completion.choices[0]  # type: ignore[attr-defined]
        assert choice.finish_reason == "tool_calls", prompt
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMETERS)


def test_a_named_choice_calls_that_function(gateway: RunningGateway) -> None:
    client = gateway.openai()
    named = {"type": "function", "function": {"name": "get_time"}}
    completion = ask(
        client, "What's the weather in Paris?", tools=[WEATHER, CLOCK], tool_choice=named
    )
    (call,) = completion.choices[0].message.tool_calls  # type: ignore[attr-defined]
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TIME_PARAMETERS)


def test_auto_lets_the_model_answer_in_text(gateway: RunningGateway) -> None:
    completion = ask(gateway.openai(), "hi", tools=[WEATHER], tool_choice="auto")
    choice = completion.choices[0]  # type: ignore[attr-defined]
    # SmolLM2-135M greets rather than calls here; either way the reply is one or the other.
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
    else:
        assert choice.message.content and not choice.message.content.startswith("<")
        assert choice.finish_reason in ("stop", "length")


def test_text_beside_tools_keeps_max_tokens_in_tokens_not_characters(
    gateway: RunningGateway,
) -> None:
    """An emoji is three of SmolLM2's tokens, two of them without text of their own: each
    counts against max_tokens (it once counted as one, and 30 let 90 through)."""
    completion = gateway.openai().chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "Repeat after me: " + "\U0001f680" * 20}],
        tools=[WEATHER],
        max_tokens=30,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and "\U0001f680" in (choice.message.content or "")
    assert completion.usage is not None and completion.usage.completion_tokens <= 30


def test_a_round_trip_call_result_answer(gateway: RunningGateway) -> None:
    client = gateway.openai()
    question = {"role": "user", "content": "What's the weather in Paris?"}
    first = ask(client, question["content"], tools=[WEATHER], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]  # type: ignore[attr-defined]
    messages = [
        question,
        first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[attr-defined]
        {"role": "tool", "tool_call_id": call.id, "content": "22 degrees and sunny"},
    ]
    answer = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        temperature=0,
        max_tokens=40,
    )
    choice = answer.choices[0]
    assert choice.message.tool_calls is None
    assert choice.message.content and choice.finish_reason in ("stop", "length")
    # The call and its result are in the prompt: it is longer than the question and tools.
    bare = ask(client, question["content"], tools=[WEATHER], tool_choice="none", max_tokens=1)
    assert answer.usage.prompt_tokens > bare.usage.prompt_tokens + 20  # type: ignore[union-attr,attr-defined]


def test_stream_helpers_assemble_the_same_calls(gateway: RunningGateway) -> None:
    client = gateway.openai()
    for prompt, tools, choice in [
        ("Forecast for Berlin for the next 3 days please", [WEATHER], "required"),
        (
            "Time in Japan?",
            [WEATHER, CLOCK],
            {"type": "function", "function": {"name": "get_time"}},
        ),
        ("Weather in Rome and in Oslo", [WEATHER], "required"),  # two calls, in parallel
    ]:
        fields = {"tools": tools, "tool_choice": choice, "parallel_tool_calls": True}
        whole = ask(client, prompt, max_tokens=120, **fields).choices[0]  # type: ignore[attr-defined]
        with client.chat.completions.stream(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=120,
            **fields,  # type: ignore[arg-type]
        ) as stream:
            argument_deltas = [
                event for event in stream if event.type == "tool_calls.function.arguments.delta"
            ]
            streamed = stream.get_final_completion().choices[0]
        assert streamed.finish_reason == whole.finish_reason == "tool_calls"
        assert [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls] == [
            (c.function.name, c.function.arguments) for c in whole.message.tool_calls
        ]
        assert len(argument_deltas) > 1  # the arguments grew over several chunks


def test_tool_requests_that_cannot_work_are_refused(gateway: RunningGateway) -> None:
    client = gateway.openai()
    with pytest.raises(openai.BadRequestError) as unknown:
        ask(
            client,
            "x",
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert "unknown function" in unknown.value.message
    with pytest.raises(openai.BadRequestError):
        ask(client, "x", tool_choice="required")  # no tools
    bad_schema = {
        **WEATHER,
        "function": {
            **WEATHER["function"],
            "parameters": {"type": "object", "unevaluatedProperties": False},
        },
    }  # type: ignore[dict-item]
    with pytest.raises(openai.BadRequestError) as unsupported:
        ask(client, "x", tools=[bad_schema], tool_choice="required")
    assert unsupported.value.body["param"] == "tools"  # type: ignore[index]
