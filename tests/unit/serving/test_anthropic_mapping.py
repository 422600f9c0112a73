"""Anthropic's requests mapped onto the chat service, and its errors' shape."""

from __future__ import annotations

from gateway.protocol.anthropic import MessagesRequest
from gateway.routes.errors import anthropic_error_body
from gateway.serving.anthropic import conversation, tool_use


def request(**fields: object) -> MessagesRequest:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "Hi"}],
        **fields,
    }
    return MessagesRequest.model_validate(body)


def test_blocks_become_template_messages() -> None:
    req = request(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}],
                    },
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    messages = conversation(req.system_text(), req.messages)
    assert messages == (
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "w", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
    )


def test_tool_choices_map_onto_the_services() -> None:
    tools = [{"name": "w", "input_schema": {"type": "object"}}]
    assert tool_use(request()) is None
    auto = tool_use(request(tools=tools))
    assert auto is not None and auto.choice.mode == "auto" and not auto.choice.parallel
    anything = tool_use(
        request(tools=tools, tool_choice={"type": "any", "disable_parallel_tool_use": False})
    )
    assert anything is not None and anything.choice.mode == "required" and anything.choice.parallel
    named = tool_use(request(tools=tools, tool_choice={"type": "tool", "name": "w"}))
    assert named is not None and (named.choice.mode, named.choice.name) == ("function", "w")
    assert named.id_prefix == "toolu_"


def test_error_types_follow_the_status() -> None:
    kinds = {
        s: anthropic_error_body(s, "m").error.type for s in (400, 401, 404, 413, 429, 500, 502, 503)
    }
    assert kinds == {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        502: "api_error",
        503: "overloaded_error",
    }
    assert anthropic_error_body(400, "m").model_dump() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "m"},
    }
