"""A reply's text, streamed, told apart into plain text and tool calls.

The grammar (``gateway.engines.tool_format``) decides at the reply's first character: plain
text, or calls written as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` with a
newline between them. This parser follows the text as it streams and produces the pieces
both wire formats need: text, the start of a call (its id and name), and fragments of its
arguments as they are written, so that a client's stream shows them growing. A piece of a
closing tag split over two tokens is held back until it is decided.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from gateway.engines.stops import partial_suffix
from gateway.engines.tool_format import CALL_CLOSE, CALL_OPEN

_HEAD = re.compile(r'\{"name":\s*"((?:[^"\\]|\\.)*)",\s*"arguments":\s*')
_CALL_END = "}" + CALL_CLOSE


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
class ToolCallParser:
    """Feed the reply's text; take the pieces. ``calls`` holds every call seen."""

    id_prefix: str = "call_"
    calls: list[ToolCall] = field(default_factory=list)
    _state: str = "decide"  # decide -> text | head -> arguments -> between -> head ...
    _pending: str = ""

    @property
    def is_calling(self) -> bool:
        return bool(self.calls)

    def feed(self, text: str) -> list[ReplyPiece]:
        pieces: list[ReplyPiece] = []
        self._pending += text
        while self._pending:
            if self._state == "decide":
                if len(self._pending) < len(CALL_OPEN) and CALL_OPEN.startswith(self._pending):
                    break
                self._state = "open" if self._pending.startswith(CALL_OPEN) else "text"
            elif self._state == "text":
                pieces.append(TextPiece(self._pending))
                self._pending = ""
            elif self._state == "open":
                self._pending = self._pending[len(CALL_OPEN) :]
                self._state = "head"
            elif self._state == "head":
                match = _HEAD.match(self._pending)
                if match is None:
                    break  # the name is still being written
                call = ToolCall(new_call_id(self.id_prefix), _unescape(match.group(1)))
                self.calls.append(call)
                pieces.append(CallStart(len(self.calls) - 1, call.id, call.name))
                self._pending = self._pending[match.end() :]
                self._state = "arguments"
            elif self._state == "arguments":
                if not self.calls[-1].arguments:  # the space after "arguments":
                    self._pending = self._pending.lstrip()
                    if not self._pending:
                        break
                end = self._pending.find(_CALL_END)
                if end >= 0:
                    self._arguments(pieces, self._pending[:end])
                    self.calls[-1].complete = True
                    self._pending = self._pending[end + len(_CALL_END) :]
                    self._state = "between"
                    continue
                keep = partial_suffix(self._pending, _CALL_END)
                self._arguments(pieces, self._pending[: len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep :]
                break
            else:  # between calls: a newline, then the next call's opening tag
                stripped = self._pending.lstrip("\n")
                if len(stripped) < len(CALL_OPEN) and CALL_OPEN.startswith(stripped):
                    self._pending = stripped
                    break
                self._pending = stripped
                self._state = "open" if stripped.startswith(CALL_OPEN) else "text"
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

    def _arguments(self, pieces: list[ReplyPiece], fragment: str) -> None:
        if fragment:
            self.calls[-1].arguments += fragment
            pieces.append(CallArguments(len(self.calls) - 1, fragment))


def _unescape(name: str) -> str:
    return name.replace('\\"', '"').replace("\\\\", "\\")
