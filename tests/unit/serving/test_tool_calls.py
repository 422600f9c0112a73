"""The streaming parser that tells text from tool calls, fed as tokens arrive."""

from __future__ import annotations

import json

from gateway.seam.tool_format import call_text
from gateway.serving.tool_calls import CallArguments, CallStart, TextPiece, ToolCallParser


def feed_in_pieces(text: str, size: int) -> tuple[ToolCallParser, list[object]]:
    parser = ToolCallParser()
    pieces: list[object] = []
    for start in range(0, len(text), size):
        pieces.extend(parser.feed(text[start : start + size]))
    pieces.extend(parser.finish())
    return parser, pieces


def test_plain_text_passes_through_whatever_the_split() -> None:
    for size in (1, 2, 5, 100):
        _, pieces = feed_in_pieces("Hello <b>world</b>", size)
        assert all(isinstance(p, TextPiece) for p in pieces)
        assert "".join(p.text for p in pieces) == "Hello <b>world</b>"  # type: ignore[attr-defined]


def test_a_short_text_that_starts_like_a_call_is_text() -> None:
    _, pieces = feed_in_pieces("<tool", 1)
    assert pieces == [TextPiece("<tool")]


def test_calls_split_anywhere_give_the_same_calls() -> None:
    arguments = ['{"city": "Paris", "note": "a } b"}', '{"n": [1, 2, {"x": "</tool"}]}']
    text = call_text("get_weather", arguments[0]) + "\n" + call_text("f_2", arguments[1])
    for size in (1, 3, 7, 1000):
        parser, pieces = feed_in_pieces(text, size)
        starts = [p for p in pieces if isinstance(p, CallStart)]
        assert [(s.index, s.name) for s in starts] == [(0, "get_weather"), (1, "f_2")]
        assert len({s.id for s in starts}) == 2 and starts[0].id.startswith("call_")
        for index, expected in enumerate(arguments):
            fragments = [
                p.fragment for p in pieces if isinstance(p, CallArguments) and p.index == index
            ]
            assert "".join(fragments) == expected
            json.loads(expected)
        assert [(c.name, c.arguments, c.complete) for c in parser.calls] == [
            ("get_weather", arguments[0], True),
            ("f_2", arguments[1], True),
        ]
        assert not [p for p in pieces if isinstance(p, TextPiece)]


def test_a_closing_tag_inside_an_argument_string_does_not_end_the_call() -> None:
    # Seen on SmolLM2 (greedy, a cached prefix): made to go on inside a string, it wrote the
    # call's end there; the arguments are the JSON object, whatever its strings hold.
    arguments = '{"city": ".8**}</tool_call>\\"}</tool_call>x"}'
    text = call_text("get_weather", arguments) + "\n" + call_text("f_2", '{"a": 1}')
    for size in (1, 2, 3, 7, 1000):
        parser, pieces = feed_in_pieces(text, size)
        assert [(c.name, c.arguments, c.complete) for c in parser.calls] == [
            ("get_weather", arguments, True),
            ("f_2", '{"a": 1}', True),
        ]
        assert json.loads(parser.calls[0].arguments)["city"].startswith(".8**}</tool_call>")
        assert not [p for p in pieces if isinstance(p, TextPiece)]


def test_arguments_that_closed_before_max_tokens_cut_the_tag_are_complete() -> None:
    text = call_text("get_weather", '{"city": "Paris"}')[: -len("</tool_call>") + 2]
    parser, _ = feed_in_pieces(text, 3)
    (call,) = parser.calls
    assert call.complete and json.loads(call.arguments) == {"city": "Paris"}


def test_a_call_cut_by_max_tokens_is_incomplete() -> None:
    text = call_text("get_weather", '{"city": "Par')[: -len('"}}</tool_call>') + 3]
    parser, pieces = feed_in_pieces(text, 4)
    (call,) = parser.calls
    assert not call.complete and call.arguments.startswith('{"city": "Par')
    assert isinstance(pieces[0], CallStart)


def test_the_space_before_the_arguments_is_not_part_of_them() -> None:
    parser = ToolCallParser("toolu_")
    head = call_text("f", "{}")
    pieces = parser.feed(head[: head.index("{}")]) + parser.feed(head[head.index("{}") :])
    assert parser.calls[0].arguments == "{}" and parser.calls[0].id.startswith("toolu_")
    assert [p.fragment for p in pieces if isinstance(p, CallArguments)] == ["{}"]


def test_qwen3s_newlines_inside_the_tags_parse_the_same() -> None:
    from gateway.seam.tool_format import HermesFormat
    from gateway.serving.tool_calls import make_tool_parser

    fmt = HermesFormat(newline=True)
    text = fmt.call_text("get_weather", '{"city": "Paris"}') + "\n" + fmt.call_text("f", "{}")
    assert text.startswith('<tool_call>\n{"name": "get_weather"')
    for size in (1, 5, 1000):
        parser = make_tool_parser(fmt)
        pieces = []
        for start in range(0, len(text), size):
            pieces.extend(parser.feed(text[start : start + size]))
        pieces.extend(parser.finish())
        assert [(c.name, c.arguments, c.complete) for c in parser.calls] == [
            ("get_weather", '{"city": "Paris"}', True),
            ("f", "{}", True),
        ]
        assert not [p for p in pieces if isinstance(p, TextPiece)]


def test_mistral_calls_split_anywhere_give_the_same_calls() -> None:
    from gateway.seam.tool_format import MistralFormat
    from gateway.serving.tool_calls import make_tool_parser

    for fmt in (MistralFormat(), MistralFormat(space=True)):
        arguments = ['{"city": "Pa]ris}", "n": [1, {"x": "\\"}"}]}', "{}"]
        text = fmt.calls_text([("get_weather", arguments[0]), ("get_time", arguments[1])])
        for size in (1, 2, 7, 1000):
            parser = make_tool_parser(fmt, "toolu_")
            pieces = []
            for start in range(0, len(text), size):
                pieces.extend(parser.feed(text[start : start + size]))
            pieces.extend(parser.finish())
            starts = [p for p in pieces if isinstance(p, CallStart)]
            assert [s.name for s in starts] == ["get_weather", "get_time"]
            assert starts[0].id.startswith("toolu_")
            for index, expected in enumerate(arguments):
                fragments = [
                    p.fragment for p in pieces if isinstance(p, CallArguments) and p.index == index
                ]
                assert "".join(fragments) == expected
                assert json.loads(expected) is not None
            assert all(call.complete for call in parser.calls)
            assert not [p for p in pieces if isinstance(p, TextPiece)]


def test_mistral_text_without_the_control_token_is_text() -> None:
    from gateway.seam.tool_format import MistralFormat
    from gateway.serving.tool_calls import make_tool_parser

    parser = make_tool_parser(MistralFormat())
    pieces = parser.feed("[TOOL") + parser.feed("S] are") + parser.finish()
    assert "".join(p.text for p in pieces if isinstance(p, TextPiece)) == "[TOOLS] are"
    assert not parser.calls


def test_a_scalar_argument_value_ends_before_the_calls_brace() -> None:
    # Arguments are an object under the grammar; a value that is not (a string) still ends
    # where it does, and the call's own closing follows.
    text = call_text("echo", '"hello }</tool_call> world"')
    parser, pieces = feed_in_pieces(text, 2)
    (call,) = parser.calls
    assert (call.arguments, call.complete) == ('"hello }</tool_call> world"', True)
    assert not [p for p in pieces if isinstance(p, TextPiece)]


# What the real Qwen2.5-Coder 0.5B wrote, unconstrained, asked for Paris's weather (issue 31).
FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n    "unit": "celsius"\n  }\n}\n```'
BARE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
NAMES = frozenset({"get_weather"})


def feed_loose(text: str, size: int, names: frozenset[str] = NAMES) -> list[object]:
    parser = ToolCallParser(names=names)
    pieces: list[object] = []
    for start in range(0, len(text), size):
        pieces.extend(parser.feed(text[start : start + size]))
    return pieces + parser.finish()


def calls_and_text(pieces: list[object]) -> tuple[list[tuple[str, object]], str]:
    names = [p.name for p in pieces if isinstance(p, CallStart)]
    arguments: dict[int, str] = {}
    for p in pieces:
        if isinstance(p, CallArguments):
            arguments[p.index] = arguments.get(p.index, "") + p.fragment
    calls = [(name, json.loads(arguments[i])) for i, name in enumerate(names)]
    return calls, "".join(p.text for p in pieces if isinstance(p, TextPiece))


def test_a_fenced_or_bare_call_of_a_known_function_is_a_call_whatever_the_split() -> None:
    for text, expected in [
        (FENCED, {"city": "Paris", "unit": "celsius"}),
        (BARE, {"city": "Paris"}),
        ("\n" + BARE + "\n", {"city": "Paris"}),
        ('```\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```', {"city": "Paris"}),
    ]:
        for size in (1, 2, 5, 1000):
            calls, rest = calls_and_text(feed_loose(text, size))
            assert calls == [("get_weather", expected)] and rest.strip() == "", (text, size)


def test_two_fenced_calls_and_text_after_them() -> None:
    text = FENCED + "\n" + BARE + "\nThat should do it."
    calls, rest = calls_and_text(feed_loose(text, 3))
    assert [c[0] for c in calls] == ["get_weather", "get_weather"]
    assert rest.strip() == "That should do it."


def test_json_that_is_no_call_stays_text() -> None:
    for text in [
        '{"name": "someone_else", "arguments": {}}',  # not one of the request's functions
        '{"city": "Paris"}',
        "```json\n[1, 2, 3]\n```",
        "```python\nprint(1)\n```",
        '```json\n{"name": "get_weather", "arguments": {"city": "Par',  # cut by max_tokens
        "{ not json at all",
    ]:
        for size in (1, 4, 1000):
            calls, rest = calls_and_text(feed_loose(text, size))
            assert calls == [] and rest == text, (text, size)


def test_without_the_requests_functions_a_bare_call_is_text() -> None:
    calls, rest = calls_and_text(feed_loose(BARE, 3, names=frozenset()))
    assert calls == [] and rest == BARE
