"""Responses items to template messages: one line of input, the exact messages out."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from gateway.errors import InvalidRequestError
from gateway.protocol.responses import InputItem, ResponseRequest
from gateway.serving.responses_items import (
    conversation,
    offered_tools,
    parse_items,
    request_items,
    stored_input,
    text_grammar,
    tool_use,
)

ITEMS = TypeAdapter(list[InputItem])


def messages(items: list[dict[str, Any]], instructions: str | None = None) -> list[Any]:
    return list(conversation(instructions, [], ITEMS.validate_python(items)))


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    request = ResponseRequest(model="m", input="hi", instructions="Be brief.")
    assert list(conversation(request.instructions, [], request_items(request))) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_parts_are_joined_and_developer_is_system() -> None:
    items = [
        {"role": "developer", "content": "Rules."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
    ]
    assert messages(items) == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "ab"},
    ]


def test_an_earlier_reply_text_and_calls_are_one_assistant_message_then_tool_results() -> None:
    items = [
        {"role": "user", "content": "weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "Rain"}],
        },
    ]
    assert messages(items) == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "w", "arguments": {"city": "Paris"}},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "w", "arguments": "not json"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "Rain"},
    ]


def test_a_call_without_text_opens_its_own_assistant_message() -> None:
    items = [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    assert messages(items)[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}
        ],
    }


def test_history_comes_between_the_instructions_and_the_new_items() -> None:
    history = ITEMS.validate_python([{"role": "user", "content": "one"}])
    new = ITEMS.validate_python([{"role": "user", "content": "two"}])
    assert [m["content"] for m in conversation("sys", history, new)] == ["sys", "one", "two"]


@pytest.mark.parametrize(
    ("item", "param"),
    [
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": "u"}]},
            "input[0].content[0]",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "f"}]},
            "input[0].content[0]",
        ),
        ({"type": "item_reference", "id": "msg_1"}, "input[0].type"),
        ({"type": "web_search_call", "id": "ws_1"}, "input[0].type"),
    ],
)
def test_what_is_not_text_is_refused_by_name(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        messages([item])
    assert refused.value.param == param


def test_stored_input_gives_ids_and_parts_and_reads_back() -> None:
    items = ITEMS.validate_python(
        [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]
    )
    stored = stored_input(items)
    assert stored[0]["id"].startswith("msg_") and stored[0]["type"] == "message"
    assert stored[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert stored[1]["id"].startswith("fco_") and stored[1]["output"] == "ok"
    assert list(conversation(None, parse_items(stored), [])) == list(conversation(None, items, []))


def test_tools_choice_and_parallel_calls() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    base = {"model": "m", "input": "x", "tools": [tool]}
    auto = tool_use(ResponseRequest.model_validate(base))
    assert auto is not None and auto.choice.mode == "auto" and not auto.choice.parallel
    named = tool_use(
        ResponseRequest.model_validate({**base, "tool_choice": {"type": "function", "name": "f"}})
    )
    assert named is not None and named.choice.mode == "function" and named.choice.name == "f"
    parallel = tool_use(
        ResponseRequest.model_validate(
            {**base, "tool_choice": "required", "parallel_tool_calls": True}
        )
    )
    assert parallel is not None and parallel.choice.mode == "required" and parallel.choice.parallel
    assert tool_use(ResponseRequest.model_validate({"model": "m", "input": "x"})) is None


def test_text_formats_become_grammars() -> None:
    def grammar(fmt: dict[str, Any]) -> Any:
        return text_grammar(
            ResponseRequest.model_validate({"model": "m", "input": "x", "text": {"format": fmt}})
        )

    assert grammar({"type": "text"}) is None
    assert grammar({"type": "json_object"}).kind == "json_schema"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    strict = grammar({"type": "json_schema", "name": "x", "schema": schema, "strict": True})
    assert '"additionalProperties": false' in strict.source


NAMESPACED = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
}


def test_a_namespace_s_functions_are_offered_under_their_group() -> None:
    request = ResponseRequest.model_validate(
        {"model": "m", "input": "x", "tools": [NAMESPACED, {"type": "function", "name": "f"}]}
    )
    offered = offered_tools(request)
    assert offered.use is not None
    assert [t.name for t in offered.use.tools] == ["multi_agent_v1.close_agent", "f"]
    assert offered.namespaces == {"multi_agent_v1.close_agent": ("multi_agent_v1", "close_agent")}
    assert "Sub-agents." in (offered.use.tools[0].description or "")


def test_a_namespaced_call_sent_back_is_the_group_s_function() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "close_agent", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
    ]
    items[0]["namespace"] = "multi_agent_v1"
    (message,) = messages(items)
    names = [call["function"]["name"] for call in message["tool_calls"]]
    assert names == ["multi_agent_v1.close_agent", "f"]


def test_a_named_choice_in_a_namespace_and_unknown_names() -> None:
    base = {"model": "m", "input": "x", "tools": [NAMESPACED]}
    choice = {"type": "function", "name": "close_agent", "namespace": "multi_agent_v1"}
    offered = offered_tools(ResponseRequest.model_validate({**base, "tool_choice": choice}))
    assert offered.use is not None and offered.use.choice.name == "multi_agent_v1.close_agent"
    with pytest.raises(ValueError, match="unknown function"):
        ResponseRequest.model_validate(
            {**base, "tool_choice": {"type": "function", "name": "close_agent"}}
        )


def test_hosted_tools_are_refused_or_dropped_as_configured() -> None:
    hosted = {"type": "web_search", "external_web_access": False}
    request = ResponseRequest.model_validate(
        {"model": "m", "input": "x", "tools": [hosted, {"type": "function", "name": "f"}]}
    )
    with pytest.raises(InvalidRequestError, match="web_search") as refused:
        offered_tools(request)
    assert refused.value.param == "tools[0].type"
    dropped = offered_tools(request, "drop")
    assert dropped.dropped == ("web_search",) and dropped.use is not None
    only_hosted = ResponseRequest.model_validate({"model": "m", "input": "x", "tools": [hosted]})
    assert offered_tools(only_hosted, "drop").use is None
