"""A reply's text, streamed, told apart into plain text and tool calls.

The grammar (``gateway.seam.tool_format``) decides at the reply's first character: plain
text, or calls in the model's format: Hermes (``<tool_call>{"name": ..., "arguments": ...}
</tool_call>`` with a newline between them) or Mistral (``[TOOL_CALLS][{...}, {...}]``). A
parser per format follows the text as it streams and produces the pieces both wire formats
need: text, the start of a call (its id and name), and fragments of its arguments as they
are written, so that a client's stream shows them growing. A piece of a closing tag split
over two tokens is held back until it is decided.

Unconstrained (``auto``), Qwen 2.5 models write calls without the tags too: a bare
``{"name": ..., "arguments": ...}`` or one in a ```` ```json ```` fence. llama.cpp's parser for
the family (``common_chat_parse_hermes_2_pro``) takes both; so does this one, where the reply
(or what follows a call) begins with one, and the name is one of the request's functions.
Such a call is held back whole, then parsed: anything else it turns out to be is text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from gateway.seam.json_value import JSONValue
from gateway.seam.tool_format import HERMES, HermesFormat, MistralFormat, ToolFormat

_HEAD = re.compile(r'\s*\{"name":\s*"((?:[^"\\]|\\.)*)",\s*"arguments":\s*')
# A fence that opens a loose call: ```json, or ``` alone, then a line break.
_FENCE = re.compile(r"```(?:json)?[ \t]*\r?\n")
_FENCE_OPENINGS = ("```json\n", "```\n")


@dataclass(frozen=True)
class TextPiece:
    text: str


@dataclass(frozen=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class CallArguments:
    index: int
    fragment: str


ReplyPiece = TextPiece | CallStart | CallArguments


@dataclass
class ToolCall:
    """A call as the reply's end knows it; ``complete`` False when max_tokens cut it."""

    id: str
    name: str
    arguments: str = ""
    complete: bool = False


def new_call_id(prefix: str = "call_") -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


@dataclass
class _CallsParser:
    """What both formats' parsers share: the calls seen, and a call's arguments followed as
    JSON while they stream."""

    id_prefix: str = "call_"
    calls: list[ToolCall] = field(default_factory=list)
    _pending: str = ""
    _scan: _JSONEnd | None = None

    @property
    def is_calling(self) -> bool:
        return bool(self.calls)

    def _start_call(self, pieces: list[ReplyPiece], name: str) -> None:
        call = ToolCall(new_call_id(self.id_prefix), name)
        self.calls.append(call)
        pieces.append(CallStart(len(self.calls) - 1, call.id, call.name))
        self._scan = _JSONEnd()

    def _take_arguments(self, pieces: list[ReplyPiece]) -> bool:
        """Hand on the pending arguments; True once their JSON value closed (the call is
        complete). Where they end is found by following the JSON (outside strings): a
        string may hold anything, a closing tag too (a small model, made to go on inside a
        string, was seen to write "}</tool_call>" there)."""
        assert self._scan is not None
        if not self.calls[-1].arguments:  # the space after "arguments":
            self._pending = self._pending.lstrip()
            if not self._pending:
                return False
        end = self._scan.feed(self._pending)
        cut = len(self._pending) if end is None else end
        self._arguments(pieces, self._pending[:cut])
        self._pending = self._pending[cut:]
        if end is None:
            return False
        self.calls[-1].complete = True
        return True

    def _arguments(self, pieces: list[ReplyPiece], fragment: str) -> None:
        if fragment:
            self.calls[-1].arguments += fragment
            pieces.append(CallArguments(len(self.calls) - 1, fragment))


@dataclass
class ToolCallParser(_CallsParser):
    """Feed the reply's text; take the pieces. ``calls`` holds every call seen."""

    fmt: HermesFormat = HERMES
    # The request's functions: a loose call (bare or fenced JSON) must name one of them.
    names: frozenset[str] = frozenset()
    _state: str = "decide"  # decide -> text | loose | head -> arguments -> closing -> between ...

    def __post_init__(self) -> None:
        self._open = self.fmt.open.text
        self._end = "}" + self.fmt.inner + self.fmt.close.text

    def _begins(self, text: str) -> str | None:
        """What ``text`` begins: ``open`` (the tag), ``loose`` (a bare or fenced call),
        ``text``; None while it could still be either."""
        if len(text) < len(self._open) and self._open.startswith(text):
            return None
        if text.startswith(self._open):
            return "open"
        if not self.names:
            return "text"
        stripped = text.lstrip()
        if not stripped:
            return None
        if stripped.startswith("{") or _FENCE.match(stripped):
            return "loose"
        if any(f.startswith(stripped) for f in _FENCE_OPENINGS) or stripped.startswith("```json"):
            return None
        return "text"

    def feed(self, text: str) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        self._pending += text
        while self._pending:
            if self._state == "decide":
                begins = self._begins(self._pending)
                if begins is None:
                    break
                self._state = begins
            elif self._state == "loose":
                if not self._take_loose(pieces, ended=False):
                    break
            elif self._state == "text":
                pieces.append(TextPiece(self._pending))
                self._pending = ""
            elif self._state == "open":
                self._pending = self._pending[len(self._open) :]
                self._state = "head"
            elif self._state == "head":
                match = _HEAD.match(self._pending)
                if match is None:
                    break  # the name is still being written
                self._start_call(pieces, _unescape(match.group(1)))
                self._pending = self._pending[match.end() :]
                self._state = "arguments"
            elif self._state == "arguments":
                if not self._take_arguments(pieces):
                    break
                self._state = "closing"
            elif self._state == "closing":  # the call's own "}", then the closing tag
                stripped = self._pending.lstrip(" ")
                if len(stripped) < len(self._end) and self._end.startswith(stripped):
                    break  # the tag is still being written
                self._pending = (
                    stripped[len(self._end) :] if stripped.startswith(self._end) else stripped
                )
                self._state = "between"
            else:  # between calls: a newline, then the next call's opening tag
                stripped = self._pending.lstrip("\n")
                begins = self._begins(stripped)
                self._pending = stripped
                if begins is None:
                    break
                self._state = begins
        return pieces

    def _take_loose(self, pieces: list[ReplyPiece], ended: bool) -> bool:
        """A bare or fenced call held whole: True once decided (a call, or text after all)."""
        body = self._pending.lstrip()
        fence = _FENCE.match(body)
        inner = body[fence.end() :] if fence else body
        start = len(inner) - len(inner.lstrip())
        if not inner[start:].startswith("{"):
            if not inner[start:] and not ended:
                return False
            return self._loose_is_text(pieces)
        end = _JSONEnd().feed(inner[start:])
        if end is None:
            return self._loose_is_text(pieces) if ended else False
        rest = inner[start + end :]
        if fence:
            after = rest.lstrip()
            if after.startswith("```"):
                rest = after[3:]
            elif not ended and "```".startswith(after):
                return False  # the closing fence may still come
        call = _loose_call(inner[start : start + end], self.names)
        if call is None:
            return self._loose_is_text(pieces)
        self._start_call(pieces, call[0])
        self._arguments(pieces, call[1])
        self.calls[-1].complete = True
        self._pending, self._state = rest, "between"
        return True

    def _loose_is_text(self, pieces: list[ReplyPiece]) -> bool:
        pieces.append(TextPiece(self._pending))
        self._pending, self._state = "", "text"
        return True

    def finish(self) -> list[ReplyPiece]:
        """What was held back, once the reply has ended (cut short: as it stands)."""
        if self._state == "loose" and self._pending:
            pieces: list[ReplyPiece] = []
            self._take_loose(pieces, ended=True)
            return pieces + self.finish()
        rest, self._pending = self._pending, ""
        if not rest:
            return []
        if self._state in ("decide", "text"):
            return [TextPiece(rest)]
        if self._state == "arguments":
            cut: list[ReplyPiece] = []
            self._arguments(cut, rest)
            return cut
        return []


@dataclass
class MistralCallParser(_CallsParser):
    """The Mistral format: ``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}``
    objects (no closing tag follows a call's arguments)."""

    fmt: MistralFormat = field(default_factory=MistralFormat)
    _state: str = "decide"  # decide -> text | list -> head -> arguments -> after -> head | done

    def feed(self, text: str) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        self._pending += text
        opening = self.fmt.open.text
        while self._pending:
            if self._state == "decide":
                if len(self._pending) < len(opening) and opening.startswith(self._pending):
                    break
                if self._pending.startswith(opening):
                    self._pending = self._pending[len(opening) :]
                    self._state = "list"
                else:
                    self._state = "text"
            elif self._state == "text":
                pieces.append(TextPiece(self._pending))
                self._pending = ""
            elif self._state == "list":
                stripped = self._pending.lstrip()
                if not stripped:
                    self._pending = ""
                    break
                self._pending = stripped[1:] if stripped.startswith("[") else stripped
                self._state = "head"
            elif self._state == "head":
                match = _HEAD.match(self._pending)
                if match is None:
                    break
                self._start_call(pieces, _unescape(match.group(1)))
                self._pending = self._pending[match.end() :]
                self._state = "arguments"
            elif self._state == "arguments":
                if not self._take_arguments(pieces):
                    break
                self._state = "after"
            elif self._state == "after":  # the call's "}", then ", " and the next, or "]"
                stripped = self._pending.lstrip()
                if not stripped:
                    self._pending = ""
                    break
                if stripped[0] in "},":
                    self._pending = stripped[1:]
                    self._state = "head" if stripped[0] == "," else "after"
                else:
                    self._pending, self._state = "", "done"  # "]" and whatever follows
            else:
                self._pending = ""
        return pieces

    def finish(self) -> list[ReplyPiece]:
        rest, self._pending = self._pending, ""
        if rest and self._state in ("decide", "text"):
            return [TextPiece(rest)]
        return []


class _JSONEnd:
    """Follows one JSON object or array as it streams, to find where it ends."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def feed(self, text: str) -> int | None:
        """The index just past the value's end in ``text``, or None if it goes on."""
        for index, char in enumerate(text):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                if self.depth == 0:  # a scalar value (a string, a number) ended before this
                    return index
                self.depth -= 1
                if self.depth == 0:
                    return index + 1
        return None


ToolParser = ToolCallParser | MistralCallParser


def make_tool_parser(
    fmt: ToolFormat, id_prefix: str = "call_", names: frozenset[str] = frozenset()
) -> ToolParser:
    """The streaming parser of ``fmt``'s calls; ``names``: the request's functions (a
    Hermes model's bare or fenced call is taken only when it names one)."""
    if isinstance(fmt, MistralFormat):
        return MistralCallParser(id_prefix, fmt=fmt)
    return ToolCallParser(id_prefix, fmt=fmt, names=names)


def _loose_call(text: str, names: frozenset[str]) -> tuple[str, str] | None:
    """``(name, arguments JSON)`` of a bare call object naming one of ``names``, else None.
    Like llama.cpp, ``parameters`` is read where ``arguments`` is absent."""
    try:
        value: JSONValue = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return str(value["name"]), json.dumps(arguments, ensure_ascii=False)


def _unescape(name: str) -> str:
    return name.replace('\\"', '"').replace("\\\\", "\\")
