"""Tool calls in the model's text: how functions are described, how calls are written, and the
grammar that makes every call valid.

The format is Hermes 2 Pro's, which Qwen 2.5 and many fine-tunes were trained on (and
llama.cpp uses for templates without tool support)::

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

Chat templates that know tools (their text mentions ``tools``) get the functions and the
calls in the history through the template itself; for the others (SmolLM2's) the functions
are written into the system message here, calls of earlier turns become the assistant's text,
and tool results become ``<tool_response>`` user turns. Either way the output is constrained
(llguidance) to this format, so calls always parse and their arguments match each schema.
Nothing here knows MLX or HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gateway.engines.backend import ChatMessage, Grammar, ToolSpec
from gateway.engines.grammar import COMPACT_JSON, for_grammar, strict_objects

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
# Parallel calls are separated by a newline; a bound keeps a small model from looping.
MAX_PARALLEL_CALLS = 8
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolChoice:
    """``none``: never call; ``auto``: the model chooses; ``required``: at least one call;
    ``function``: exactly one call of ``name``. ``parallel``: more than one call allowed."""

    mode: Literal["none", "auto", "required", "function"] = "auto"
    name: str | None = None
    parallel: bool = True


def call_head(name: str) -> str:
    """The text of a call up to its arguments (the grammar writes exactly this)."""
    sep = COMPACT_JSON["item_separator"]
    colon = COMPACT_JSON["key_separator"]
    return f'{CALL_OPEN}{{"name"{colon}{json.dumps(name)}{sep}"arguments"{colon}'


def call_text(name: str, arguments: str) -> str:
    """A whole call as the model writes it; ``arguments`` is JSON text."""
    return f"{call_head(name)}{arguments}}}{CALL_CLOSE}"


def tools_system_text(tools: Sequence[ToolSpec]) -> str:
    """The functions described for a template that does not know tools."""
    signatures = "\n".join(
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.parameters or NO_PARAMETERS,
                },
            },
            ensure_ascii=False,
        )
        for tool in tools
    )
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        f"within {CALL_OPEN}{CALL_CLOSE} XML tags:\n"
        f'{CALL_OPEN}{{"name": <function-name>, "arguments": <args-json-object>}}{CALL_CLOSE}'
    )


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def generic_tool_messages(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> list[ChatMessage]:
    """The conversation for a template without tools: functions in the system message,
    earlier calls as assistant text, results as ``<tool_response>`` user turns."""
    out: list[ChatMessage] = []
    for message in messages:
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "assistant" and message.get("tool_calls"):
            calls = [
                call_text(call["function"]["name"], _arguments_text(call["function"]["arguments"]))
                for call in message["tool_calls"]
            ]
            text = "\n".join([content, *calls] if content else calls)
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            response = f"<tool_response>\n{content}\n</tool_response>"
            previous = out[-1] if out else None
            if previous and previous.get("tool_results"):  # consecutive results: one turn
                previous["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "tool_results": True})
        else:
            out.append({"role": role, "content": content})
    for message in out:
        message.pop("tool_results", None)
    if tools:
        section = tools_system_text(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{section}"}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


def template_knows_tools(chat_template: str | None) -> bool:
    """Whether a chat template renders functions itself (it reads a ``tools`` variable)."""
    return bool(chat_template) and "tools" in str(chat_template)


def template_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The functions as chat templates take them (OpenAI's shape)."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": tool.parameters or NO_PARAMETERS,
            },
        }
        for tool in tools
    ]


def tool_call_grammar(
    tools: Sequence[ToolSpec], choice: ToolChoice, answer: Grammar | None = None
) -> Grammar | None:
    """The constraint on a reply: plain text or calls (``auto``), calls only (``required``),
    one call of one function (``function``); None for ``none``.

    Plain text may not begin with ``<``, which is how a call begins: the reply is then
    always one or the other, decided at its first character. ``answer``, a JSON schema,
    is what a reply without calls must match instead (a response format).
    """
    if choice.mode == "none" or not tools:
        return None
    selected = [t for t in tools if choice.mode != "function" or t.name == choice.name]
    rules = []
    for index, tool in enumerate(selected):
        schema = for_grammar(strict_objects(tool.parameters or NO_PARAMETERS))
        rules.append(
            f"call_{index}: {json.dumps(call_head(tool.name))} %json{json.dumps(schema)} "
            f"{json.dumps('}' + CALL_CLOSE)}"
        )
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(selected))))
    many = choice.parallel and choice.mode != "function"
    calls = f'call ("\\n" call){{0,{MAX_PARALLEL_CALLS - 1}}}' if many else "call"
    if choice.mode == "auto":
        text = "/[^<](.|\\n)*/"
        if answer is not None and answer.kind == "json_schema":
            text = f"%json{answer.source}"
        rules[:0] = [f"start: calls | text\ncalls: {calls}", f"text: {text}"]
    else:
        rules.insert(0, f"start: {calls}")
    return Grammar("lark", "\n".join(rules))
