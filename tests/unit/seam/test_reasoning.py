"""The reasoning section's state from a rendered prompt, and the grammars around it."""

from __future__ import annotations

import json

import pytest

from gateway.seam.grammar import grammar_text
from gateway.seam.reasoning import (
    ReplyFormat,
    opened_in,
    reply_grammar,
    thinking_state,
)
from gateway.seam.request_parts import Grammar, ToolSpec
from gateway.seam.tool_format import HermesFormat, Marker, MistralFormat, ToolChoice

WEATHER = ToolSpec(
    "get_weather", None, {"type": "object", "properties": {"city": {"type": "string"}}}
)
SPECIAL = ReplyFormat(
    "required",
    Marker("<think>", 100),
    Marker("</think>", 101),
    HermesFormat(Marker("<tool_call>", 102), Marker("</tool_call>", 103), newline=True),
)


@pytest.mark.parametrize(
    ("tail", "switch", "enabled", "state"),
    [
        ("<|im_start|>assistant\n", True, None, "required"),  # Qwen3, thinking on
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", True, False, "off"),  # switched off
        ("<|Assistant|><think>\n", False, None, "opened"),  # DeepSeek-R1 opens it
        ("<|im_start|>assistant\n", False, None, "optional"),  # markers, no switch
        ("<|im_start|>assistant\n", True, False, "off"),  # off, leaving no trace
    ],
)
def test_the_state_comes_from_the_prompts_tail(
    tail: str, switch: bool, enabled: bool | None, state: str
) -> None:
    assert thinking_state(tail, "<think>", "</think>", switch, enabled) == state


def test_a_model_without_markers_never_thinks() -> None:
    assert thinking_state("<think>", None, None, True, True) == "off"


def test_the_open_section_is_found_from_the_end() -> None:
    assert opened_in([1, 100, 5, 101, 7, 100, 8], [100], [101]) == 6
    assert opened_in([1, 100, 5, 101], [100], [101]) is None
    assert opened_in([1, 2], [100], [101]) is None


@pytest.mark.parametrize(
    ("state", "start"),
    [
        ("required", "start: <[100]> think_draft <[101]>"),
        ("opened", "start: think_draft <[101]>"),
        ("optional", "start: (<[100]> think_draft <[101]>)?"),
        ("off", "start: call"),
    ],
)
def test_calls_come_after_the_section(state: str, start: str) -> None:
    reply = ReplyFormat(state, SPECIAL.think_start, SPECIAL.think_end, SPECIAL.tools)  # type: ignore[arg-type]
    grammar = reply_grammar(reply, None, [WEATHER], ToolChoice("required", parallel=False))
    assert grammar is not None and grammar.source.startswith(start)
    assert "<[102]>" in grammar.source and "<[103]>" in grammar.source
    grammar_text(grammar)  # compiles, or raises


def test_a_text_end_marker_ends_the_draft_lazily() -> None:
    reply = ReplyFormat("opened", Marker("<think>"), Marker("</think>"))
    answer = Grammar("json_schema", json.dumps({"type": "object"}))
    grammar = reply_grammar(reply, answer, thinking_chars=100)
    assert grammar is not None
    assert grammar.source.splitlines() == [
        "start: think_draft /[ \\n]{0,4}/ answer",
        'think_draft[suffix="</think>"]: /(.|\\n){0,100}/',
        'answer: %json{"type": "object"}',
    ]
    grammar_text(grammar)


def test_without_a_section_the_answer_format_is_untouched() -> None:
    answer = Grammar("json_schema", json.dumps({"type": "object"}))
    assert reply_grammar(ReplyFormat(), answer) is answer
    lark = Grammar("lark", 'start: "x"')
    assert reply_grammar(SPECIAL, lark) is lark  # a task's grammar says how it begins
    assert reply_grammar(SPECIAL, None) is None


def test_mistral_calls_are_a_list_after_the_control_token() -> None:
    reply = ReplyFormat(tools=MistralFormat(Marker("[TOOL_CALLS]", 7)))
    grammar = reply_grammar(reply, None, [WEATHER], ToolChoice("auto", parallel=True))
    assert grammar is not None
    lines = grammar.source.splitlines()
    assert lines[:3] == [
        "start: calls | text",
        'calls: <[7]> "[" call (", " call){0,7} "]"',
        "text: /(.|\\n)+/",  # a special token cannot be text: any text is an answer
    ]
    grammar_text(grammar)
    text_marker = MistralFormat()
    assert text_marker.text() == "/[^\\[](.|\\n)*/"
