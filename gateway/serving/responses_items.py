"""Responses items to the chat service's conversation, and a reply back to items.

The Responses API speaks in items where chat completions speak in messages: a ``message``
(user, system, developer, or an earlier assistant reply with ``output_text``), a
``function_call`` (an earlier reply's call), a ``function_call_output`` (its result), and
``reasoning`` (sent back by agents; left out, as chat templates drop earlier reasoning).
Consecutive assistant text and calls become one assistant message with ``tool_calls``, as a
chat completion would have returned them. ``instructions`` is the system message, first.
Images, files and hosted tools are refused with a 400 naming the part. Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import TypeAdapter

from gateway.errors import InvalidRequestError
from gateway.protocol.responses import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    InputItem,
    InputText,
    MessageItem,
    NamespaceTool,
    OtherItem,
    OtherPart,
    OutputText,
    ReasoningItem,
    Refusal,
    ResponseRequest,
    TextFormatJSONObject,
    TextFormatJSONSchema,
    new_id,
    qualified_name,
)
from gateway.seam.grammar import for_grammar, strict_objects
from gateway.seam.json_value import JSONObject, JSONValue
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec
from gateway.seam.tool_format import ToolChoice
from gateway.serving.chat import ToolUse

ITEMS = TypeAdapter(list[InputItem])
TEXT_ONLY = "this model takes text only"


def request_items(request: ResponseRequest) -> list[InputItem]:
    """The request's input as items (a string is one user message)."""
    if isinstance(request.input, str):
        return [MessageItem(role="user", content=request.input)]
    return list(request.input)


def conversation(
    instructions: str | None,
    history: Sequence[InputItem],
    items: Sequence[InputItem],
) -> tuple[ChatMessage, ...]:
    """Template messages: the instructions, the stored ``history`` (earlier inputs and
    outputs of the conversation), then the request's own ``items`` (named in errors)."""
    out: list[ChatMessage] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for item in history:
        _append(out, item, None)
    for index, item in enumerate(items):
        _append(out, item, f"input[{index}]")
    return tuple(out)


def _append(out: list[ChatMessage], item: InputItem, param: str | None) -> None:
    if isinstance(item, ReasoningItem):
        return
    if isinstance(item, MessageItem):
        text = _text(item.content, param)
        role = "system" if item.role == "developer" else item.role
        if role == "assistant" and _open_assistant(out) and not out[-1].get("tool_calls"):
            out[-1]["content"] = f"{out[-1]['content']}{text}"  # earlier parts, one by one
            return
        out.append({"role": role, "content": text})
    elif isinstance(item, FunctionCallItem):
        name = qualified_name(item.name, item.namespace)
        call: JSONObject = {
            "id": item.call_id,
            "type": "function",
            "function": {"name": name, "arguments": _json_or_text(item.arguments)},
        }
        calls = out[-1].get("tool_calls") if _open_assistant(out) else None
        if isinstance(calls, list):
            calls.append(call)
        elif _open_assistant(out):
            out[-1]["tool_calls"] = [call]
        else:
            out.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif isinstance(item, FunctionCallOutputItem):
        output = item.output if isinstance(item.output, str) else _text(item.output, param)
        out.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
    elif isinstance(item, OtherItem):
        raise InvalidRequestError(
            f"input items of type {item.type[:80]!r} are not supported; use message, "
            "function_call, function_call_output or reasoning items",
            param=f"{param}.type" if param else "previous_response_id",
        )


def _open_assistant(out: list[ChatMessage]) -> bool:
    return bool(out) and out[-1]["role"] == "assistant"


def _text(content: str | list[ContentPart], param: str | None) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        if isinstance(part, InputText | OutputText):
            texts.append(part.text)
        elif isinstance(part, Refusal):
            texts.append(part.refusal)
        elif isinstance(part, OtherPart):
            raise InvalidRequestError(
                f"content parts of type {part.type[:80]!r} are not supported: {TEXT_ONLY}",
                param=f"{param}.content[{index}]" if param else None,
            )
    return "".join(texts)


def _json_or_text(arguments: str) -> JSONValue:
    """Arguments as chat templates take them: decoded JSON (text if it is not JSON)."""
    try:
        value: JSONValue = json.loads(arguments)
    except ValueError:
        return arguments
    return value


def stored_input(items: Sequence[InputItem]) -> list[JSONObject]:
    """The request's items as stored and listed by ``input_items``: each with an id, a
    message's content as parts (OpenAI lists them so)."""
    out: list[JSONObject] = []
    for item in items:
        data: JSONObject = item.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(item, MessageItem):
            data["type"] = "message"
            data.setdefault("status", "completed")
            if isinstance(item.content, str):
                kind = "output_text" if item.role == "assistant" else "input_text"
                data["content"] = [{"type": kind, "text": item.content}]
        prefix = {"message": "msg", "function_call": "fc", "reasoning": "rs"}.get(
            str(data["type"]), "fco"
        )
        data.setdefault("id", new_id(prefix))
        out.append(data)
    return out


def parse_items(data: object) -> list[InputItem]:
    """Stored items (inputs, or a reply's output items: they have the input items' shapes)."""
    return ITEMS.validate_python(data)


HOSTED_TOOLS_ACTION = Literal["error", "drop"]


@dataclass(frozen=True)
class OfferedTools:
    """The request's functions as the model sees them (namespaced ones flattened), how it
    may call them, and the hosted tools left out (``unsupported_tools = "drop"``)."""

    use: ToolUse | None
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat: (group, name)
    dropped: tuple[str, ...] = ()


def tool_use(request: ResponseRequest) -> ToolUse | None:
    """The request's functions and its tool choice (hosted tools refused)."""
    return offered_tools(request).use


def offered_tools(
    request: ResponseRequest, unsupported: HOSTED_TOOLS_ACTION = "error"
) -> OfferedTools:
    """The request's functions and its tool choice; hosted tools are refused by name, or
    left out. A namespace's functions are offered as ``group.name``."""
    specs: list[ToolSpec] = []
    namespaces: dict[str, tuple[str, str]] = {}
    dropped: list[str] = []
    for index, tool in enumerate(request.tools or ()):
        if isinstance(tool, FunctionTool):
            specs.append(ToolSpec(tool.name, tool.description, tool.parameters or {}))
        elif isinstance(tool, NamespaceTool):
            for inner in tool.tools:
                flat = qualified_name(inner.name, tool.name)
                namespaces[flat] = (tool.name, inner.name)
                specs.append(ToolSpec(flat, _in_group(tool, inner), inner.parameters or {}))
        elif unsupported == "drop":
            dropped.append(tool.type[:80])
        else:
            raise InvalidRequestError(
                f"tools of type {tool.type[:80]!r} are not supported; only function (and "
                'namespace) tools. Set responses.unsupported_tools = "drop" to leave hosted '
                "tools out",
                param=f"tools[{index}].type",
            )
    if not specs:
        return OfferedTools(None, namespaces, tuple(dropped))
    parallel = request.parallel_tool_calls is True
    choice = request.tool_choice or "auto"
    if isinstance(choice, FunctionToolChoice):
        named = ToolChoice(
            "function", qualified_name(choice.name, choice.namespace), parallel=False
        )
        return OfferedTools(ToolUse(tuple(specs), named), namespaces, tuple(dropped))
    if not isinstance(choice, str):
        raise InvalidRequestError(
            f"tool_choice of type {choice.type[:80]!r} is not supported; use none, auto, "
            "required or a function",
            param="tool_choice",
        )
    use = ToolUse(tuple(specs), ToolChoice(choice, parallel=parallel), param="tools")
    return OfferedTools(use, namespaces, tuple(dropped))


def _in_group(group: NamespaceTool, tool: FunctionTool) -> str | None:
    """A namespaced function's description, with its group's."""
    if not group.description:
        return tool.description
    return f"{tool.description or ''} (in {group.name}: {group.description})".strip()


def text_grammar(request: ResponseRequest) -> Grammar | None:
    """``text.format`` as a grammar: json_schema (strict or not) or any JSON object."""
    fmt = request.text.format if request.text else None
    if isinstance(fmt, TextFormatJSONObject):
        return Grammar("json_schema", json.dumps(for_grammar({"type": "object"})))
    if isinstance(fmt, TextFormatJSONSchema):
        return Grammar("json_schema", json.dumps(for_grammar(strict_objects(fmt.schema_))))
    return None
