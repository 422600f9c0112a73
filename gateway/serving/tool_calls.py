"""A reply's text, streamed, told apart into plain text and tool calls.

The grammar (``gateway.seam.tool_format``) decides at the reply's first character: plain
text, or calls in the model's format: Hermes (``<tool_call>{"name": ..., "arguments": ...}
</tool_call>`` with a newline between them) or Mistral (``[TOOL_CALLS][{...}, {...}]``). A
parser per format follows the text as it streams and produces the pieces both wire formats
need: text, the start of a call (its id and name), and fragments of its arguments as they
are written, so that a client's stream shows them growing. A piece of a closing tag split
over two tokens is held back until it is decided.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from gateway.seam.tool_format import HERMES, HermesFormat, MistralFormat, ToolFormat

_HEAD = re.compile(r'\s*\{"name":\s*"((?:[^"\\]|\\.)*)",\s*"arguments":\s*')


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
    _state: str = "decide"  # decide -> text | head -> arguments -> closing -> between -> head ...

    def __post_init__(self) -> None:
        self._open = self.fmt.open.text
        self._end = "}" + self.fmt.inner + self.fmt.close.text

    def feed(self, text: str) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        self._pending += text
        while self._pending:
            if self._state == "decide":
                if len(self._pending) < len(self._open) and self._open.startswith(self._pending):
                    break
                self._state = "open" if self._pending.startswith(self._open) else "text"
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
                if len(stripped) < len(self._open) and self._open.startswith(stripped):
                    self._pending = stripped
                    break
                self._pending = stripped
                self._state = "open" if stripped.startswith(self._open) else "text"
        return pieces

    def finish(self) -> list[ReplyPiece]:
        """What was held back, once the reply has ended (cut short: as it stands)."""
        rest, self._pending = self._pending, ""
        if not rest:
            return []
        if self._state in ("decide", "text"):
            return [TextPiece(rest)]
        if self._state == "arguments":
            pieces: list[ReplyPiece] = []
            self._arguments(pieces, rest)
            return pieces
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


def make_tool_parser(fmt: ToolFormat, id_prefix: str = "call_") -> ToolParser:
    """The streaming parser of ``fmt``'s calls."""
    if isinstance(fmt, MistralFormat):
        return MistralCallParser(id_prefix, fmt=fmt)
    return ToolCallParser(id_prefix, fmt=fmt)


def _unescape(name: str) -> str:
    return name.replace('\\"', '"').replace("\\\\", "\\")
