"""Reply pieces to Responses output items and their events, in OpenAI's order."""

from __future__ import annotations

from gateway.serving.reasoning import ReasoningPiece
from gateway.serving.responses_output import OutputBuilder
from gateway.serving.tool_calls import CallArguments, CallStart, TextPiece


def run(builder: OutputBuilder, pieces: list, complete: set[str], incomplete: bool = False) -> list:
    events = [e for piece in pieces for e in builder.feed(piece)]
    events.extend(builder.finish(complete, incomplete))
    return events


def test_reasoning_then_text_then_a_call() -> None:
    builder = OutputBuilder()
    builder.number()  # response.created was 0
    events = run(
        builder,
        [
            ReasoningPiece("Think"),
            ReasoningPiece("ing."),
            TextPiece("Hi"),
            CallStart(0, "call_1", "f"),
            CallArguments(0, '{"a":'),
            CallArguments(0, " 1}"),
        ],
        {"call_1"},
    )
    assert [e.type for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1, 2]
    reasoning, message, call = builder.output()
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "Thinking."
    assert message.type == "message" and message.content[0].text == "Hi"
    assert call.type == "function_call" and call.call_id == "call_1"
    assert call.arguments == '{"a": 1}' and call.status == "completed"
    # Each item is finished with the id it was added with.
    added = [e.item.id for e in events if e.type == "response.output_item.added"]
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    assert added == done == [item.id for item in builder.output()]


def test_items_are_added_empty_and_in_progress() -> None:
    builder = OutputBuilder()
    added, part, _ = builder.feed(TextPiece("x"))
    assert added.item.status == "in_progress" and added.item.content == []
    assert part.part.text == ""


def test_two_calls_are_two_items() -> None:
    builder = OutputBuilder()
    run(
        builder,
        [
            CallStart(0, "a", "f"),
            CallArguments(0, "{}"),
            CallStart(1, "b", "f"),
            CallArguments(1, "{}"),
        ],
        {"a", "b"},
    )
    assert [item.call_id for item in builder.output()] == ["a", "b"]


def test_a_cut_reply_ends_its_last_item_incomplete() -> None:
    builder = OutputBuilder()
    run(builder, [TextPiece("Hel")], set(), incomplete=True)
    assert builder.output()[0].status == "incomplete"
    cut_call = OutputBuilder()
    run(cut_call, [CallStart(0, "a", "f"), CallArguments(0, '{"x": ')], set())
    assert cut_call.output()[0].status == "incomplete"


def test_an_empty_reply_is_an_empty_message() -> None:
    builder = OutputBuilder()
    events = run(builder, [], set())
    assert events[0].type == "response.output_item.added"
    [message] = builder.output()
    assert message.type == "message" and message.content[0].text == ""


def test_a_namespaced_call_comes_back_with_its_group_and_own_name() -> None:
    builder = OutputBuilder({"multi_agent_v1.close_agent": ("multi_agent_v1", "close_agent")})
    events = run(
        builder,
        [CallStart(0, "call_1", "multi_agent_v1.close_agent"), CallArguments(0, "{}")],
        {"call_1"},
    )
    added = events[0].item
    assert (added.name, added.namespace) == ("close_agent", "multi_agent_v1")
    (item,) = builder.output()
    dumped = item.model_dump(mode="json")
    assert dumped["name"] == "close_agent" and dumped["namespace"] == "multi_agent_v1"
    plain = OutputBuilder()
    run(plain, [CallStart(0, "call_2", "f"), CallArguments(0, "{}")], {"call_2"})
    assert "namespace" not in plain.output()[0].model_dump(mode="json")
