"""Tool calls in the model's text: how functions are described, how calls are written, and the
grammar that makes every call valid — in the model's own format.

Two formats, picked from the chat template the way mlx-lm's ``_infer_tool_parser`` picks its
parsers (``mlx_lm/tool_parsers``):

* **Hermes** (mlx-lm's ``json_tools``), which Qwen 2.5/3 and many fine-tunes were trained on
  (and llama.cpp uses for templates without tool support)::

      <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>

  Qwen3's template writes a newline inside the tags (``<tool_call>\n{...}\n</tool_call>``).
* **Mistral** (v3 tokenizers: Mistral-7B-Instruct-v0.3, Nemo): one control token, then a JSON
  list, ended by the end-of-sequence token::

      [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

Chat templates that know tools (their text mentions ``tools``) get the functions and the
calls in the history through the template itself; for the others (SmolLM2's) the functions
are written into the system message here in the Hermes format, calls of earlier turns become
the assistant's text, and tool results become ``<tool_response>`` user turns. Either way the
output is constrained (llguidance) to the format, so calls always parse and their arguments
match each schema. A marker that is one special token is named by its id in the grammar.
Nothing here knows MLX or HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.seam.grammar import COMPACT_JSON, for_grammar, strict_objects
from gateway.seam.json_value import JSONObject, JSONValue
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
# Parallel calls are separated by a newline; a bound keeps a small model from looping.
MAX_PARALLEL_CALLS = 8
NO_PARAMETERS: JSONObject = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolChoice:
    """``none``: never call; ``auto``: the model chooses; ``required``: at least one call;
    ``function``: exactly one call of ``name``. ``parallel``: more than one call allowed."""

    mode: Literal["none", "auto", "required", "function"] = "auto"
    name: str | None = None
    parallel: bool = True


@dataclass(frozen=True)
class Marker:
    """A piece of a model's format and, when it is one added token, that token's id.

    An added token cannot be spelled by text (llguidance keeps every added token apart as a
    special one, Qwen's non-special ``<tool_call>`` too), so a grammar names it by id; a
    marker that is no single token is a string literal that the tokens may spell any way.
    """

    text: str
    token: int | None = None

    def lark(self) -> str:
        return f"<[{self.token}]>" if self.token is not None else json.dumps(self.text)


def _text_rule(opening: Marker) -> str:
    """Plain text of an ``auto`` reply: it may not begin as a call does, so that the reply
    is one or the other from its first character (a special token cannot be text at all)."""
    if opening.token is not None:
        return "/(.|\\n)+/"
    first = opening.text[0]
    escaped = "\\" + first if first in "[]^-\\" else first
    return f"/[^{escaped}](.|\\n)*/"


@dataclass(frozen=True)
class HermesFormat:
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, calls apart by a newline."""

    open: Marker = Marker(CALL_OPEN)
    close: Marker = Marker(CALL_CLOSE)
    newline: bool = False  # Qwen3: "<tool_call>\n{...}\n</tool_call>"
    name: Literal["hermes"] = "hermes"

    @property
    def inner(self) -> str:
        return "\n" if self.newline else ""

    def head(self, name: str) -> str:
        """The text of a call up to its arguments (the grammar writes exactly this)."""
        sep = COMPACT_JSON["item_separator"]
        colon = COMPACT_JSON["key_separator"]
        return (
            f'{self.open.text}{self.inner}{{"name"{colon}{json.dumps(name)}{sep}"arguments"{colon}'
        )

    def call_text(self, name: str, arguments: str) -> str:
        return f"{self.head(name)}{arguments}}}{self.inner}{self.close.text}"

    def call_rule(self, name: str, arguments: str) -> str:
        head = self.head(name)[len(self.open.text) :]
        tail = "}" + self.inner
        return f"{self.open.lark()} {json.dumps(head)} {arguments} {json.dumps(tail)} {self.close.lark()}"

    def calls(self, many: bool) -> str:
        return f'call ("\\n" call){{0,{MAX_PARALLEL_CALLS - 1}}}' if many else "call"

    def text(self) -> str:
        return _text_rule(self.open)


@dataclass(frozen=True)
class MistralFormat:
    """``[TOOL_CALLS][{"name": ..., "arguments": ...}, ...]`` (Mistral's v3 tokenizers)."""

    open: Marker = Marker("[TOOL_CALLS]")
    space: bool = False  # Mistral-7B-Instruct-v0.3: "[TOOL_CALLS] [" (Nemo: no space)
    name: Literal["mistral"] = "mistral"

    def head(self, name: str) -> str:
        sep = COMPACT_JSON["item_separator"]
        colon = COMPACT_JSON["key_separator"]
        return f'{{"name"{colon}{json.dumps(name)}{sep}"arguments"{colon}'

    @property
    def list_open(self) -> str:
        return " [" if self.space else "["

    def call_text(self, name: str, arguments: str) -> str:
        """One call as an item of the list (``calls_text`` writes the whole reply)."""
        return f"{self.head(name)}{arguments}}}"

    def calls_text(self, calls: list[tuple[str, str]]) -> str:
        items = str(COMPACT_JSON["item_separator"]).join(self.call_text(n, a) for n, a in calls)
        return f"{self.open.text}{self.list_open}{items}]"

    def call_rule(self, name: str, arguments: str) -> str:
        return f'{json.dumps(self.head(name))} {arguments} "}}"'

    def calls(self, many: bool) -> str:
        sep = json.dumps(COMPACT_JSON["item_separator"])
        items = f"call ({sep} call){{0,{MAX_PARALLEL_CALLS - 1}}}" if many else "call"
        return f'{self.open.lark()} {json.dumps(self.list_open)} {items} "]"'

    def text(self) -> str:
        return _text_rule(self.open)


ToolFormat = HermesFormat | MistralFormat
HERMES = HermesFormat()


def call_head(name: str) -> str:
    """The text of a Hermes call up to its arguments (the grammar writes exactly this)."""
    return HERMES.head(name)


def call_text(name: str, arguments: str) -> str:
    """A whole Hermes call as the model writes it; ``arguments`` is JSON text."""
    return HERMES.call_text(name, arguments)


def call_wrapper_chars(tools: Sequence[ToolSpec], choice: ToolChoice) -> int:
    """The characters of every call's wrapper a reply may write (tags, name, the object
    around the arguments, separators), whichever format: a bound on their tokens."""
    names = [choice.name] if choice.mode == "function" and choice.name else [t.name for t in tools]
    longest = max((len(json.dumps(name)) for name in names), default=0)
    # Hermes with Qwen3's newlines is the longest wrapper; Mistral's list adds 3 at most.
    one = len(HermesFormat(newline=True).call_text("", "")) + longest + 4
    return one * (MAX_PARALLEL_CALLS if choice.parallel and choice.mode != "function" else 1)


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


def _arguments_text(arguments: JSONValue) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def _calls_text(calls: JSONValue) -> list[str]:
    """An assistant message's ``tool_calls`` (OpenAI's shape) as call texts."""
    texts: list[str] = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            texts.append(call_text(str(function["name"]), _arguments_text(function["arguments"])))
    return texts


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
            calls = _calls_text(message["tool_calls"])
            text = "\n".join([content, *calls] if content else calls)
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            response = f"<tool_response>\n{content}\n</tool_response>"
            previous = out[-1] if out else None
            if previous and previous.get("tool_results"):  # consecutive results: one turn
                previous["content"] = f"{previous['content']}\n{response}"
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


def template_tools(tools: Sequence[ToolSpec]) -> list[JSONObject]:
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


def tool_rules(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    answer: Grammar | None = None,
    fmt: ToolFormat = HERMES,
) -> tuple[str, list[str]] | None:
    """The reply's Lark expression and the rules it names: plain text or calls (``auto``),
    calls only (``required``), one call of one function (``function``); None for ``none``.

    ``answer``, a JSON schema, is what a reply without calls must match instead (a
    response format).
    """
    if choice.mode == "none" or not tools:
        return None
    selected = [t for t in tools if choice.mode != "function" or t.name == choice.name]
    rules = []
    for index, tool in enumerate(selected):
        schema = for_grammar(strict_objects(tool.parameters or NO_PARAMETERS))
        rules.append(f"call_{index}: {fmt.call_rule(tool.name, f'%json{json.dumps(schema)}')}")
    rules.append("call: " + " | ".join(f"call_{i}" for i in range(len(selected))))
    calls = fmt.calls(choice.parallel and choice.mode != "function")
    if choice.mode != "auto":
        return calls, rules
    text = fmt.text()
    if answer is not None and answer.kind == "json_schema":
        text = f"%json{answer.source}"
    return "calls | text", [f"calls: {calls}", f"text: {text}", *rules]


def tool_call_grammar(
    tools: Sequence[ToolSpec],
    choice: ToolChoice,
    answer: Grammar | None = None,
    fmt: ToolFormat = HERMES,
) -> Grammar | None:
    """The constraint on a reply without a reasoning section (see ``tool_rules``)."""
    rules = tool_rules(tools, choice, answer, fmt)
    if rules is None:
        return None
    body, named = rules
    return Grammar("lark", "\n".join([f"start: {body}", *named]))
