"""How functions are described and how the grammar constrains calls (no model needed)."""

from __future__ import annotations

import json

import pytest

from gateway.seam.grammar import grammar_text
from gateway.seam.request_parts import Grammar, ToolSpec
from gateway.seam.tool_format import (
    ToolChoice,
    call_text,
    generic_tool_messages,
    template_knows_tools,
    tool_call_grammar,
)

WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = ToolSpec("get_time", None, {})


@pytest.mark.parametrize(
    ("choice", "expected_start"),
    [
        (ToolChoice("auto"), "start: calls | text"),
        (ToolChoice("required", parallel=True), 'start: call ("\\n" call){0,7}'),
        (ToolChoice("required", parallel=False), "start: call"),
        (ToolChoice("function", "get_time"), "start: call"),
    ],
)
def test_every_choice_compiles(choice: ToolChoice, expected_start: str) -> None:
    grammar = tool_call_grammar([WEATHER, CLOCK], choice)
    assert grammar is not None and grammar.kind == "lark"
    assert grammar.source.splitlines()[0] == expected_start
    grammar_text(grammar)  # compiles with llguidance, or raises


def test_a_named_choice_offers_only_that_function() -> None:
    grammar = tool_call_grammar([WEATHER, CLOCK], ToolChoice("function", "get_time"))
    assert grammar is not None
    assert "get_time" in grammar.source and "get_weather" not in grammar.source


def test_none_has_no_grammar_and_auto_can_take_an_answer_format() -> None:
    assert tool_call_grammar([WEATHER], ToolChoice("none")) is None
    answer = Grammar("json_schema", json.dumps({"type": "object"}))
    grammar = tool_call_grammar([WEATHER], ToolChoice("auto"), answer)
    assert grammar is not None and 'text: %json{"type": "object"}' in grammar.source
    grammar_text(grammar)


def test_the_generic_format_puts_tools_calls_and_results_in_text() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and the time?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                },
                {
                    "id": "2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "2", "content": "noon"},
    ]
    out = generic_tool_messages(messages, [WEATHER, CLOCK])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n# Tools")
    assert '"name": "get_weather"' in out[0]["content"]
    assert out[2]["content"] == "\n".join(
        [call_text("get_weather", '{"city": "Paris"}'), call_text("get_time", "{}")]
    )
    assert (
        out[3]["content"]
        == "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nnoon\n</tool_response>"
    )
    assert all(set(m) == {"role", "content"} for m in out)


def test_templates_that_know_tools_are_recognised() -> None:
    assert template_knows_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert not template_knows_tools(
        "{% for message in messages %}{{ message.content }}{% endfor %}"
    )
    assert not template_knows_tools(None)
