"""A reply's reasoning section told apart from its answer, as the text streams.

The reply may start inside the section (the template opened ``<think>`` in the prompt),
open it itself at its very beginning (Qwen3 with thinking on), or have none. Only a section
at the reply's start counts: a model that writes ``<think>`` in the middle of an answer is
writing text. A piece of a marker split over two tokens is held back until it is decided.
Vocabulary follows the wire formats that carry it: OpenAI's ``reasoning_content`` (as vLLM,
llama.cpp and DeepSeek name it) and Anthropic's ``thinking`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.engines.stops import partial_suffix
from gateway.seam.reasoning import ReplyFormat

Channel = Literal["reasoning", "answer"]


@dataclass(frozen=True)
class ReasoningPiece:
    """Text of the reasoning section (markers left out)."""

    text: str


class ReasoningSplitter:
    """Feed the reply's text; take ``(channel, text)`` pieces."""

    def __init__(self, reply: ReplyFormat) -> None:
        self.start = reply.think_start.text if reply.think_start else ""
        self.end = reply.think_end.text if reply.think_end else ""
        self.state = "answer"  # decide -> reasoning -> gap -> answer
        if reply.thinks:
            self.state = "reasoning" if reply.thinking == "opened" else "decide"
        self._pending = ""

    @property
    def in_reasoning(self) -> bool:
        """Inside the section: its end marker not yet seen whole."""
        return self.state == "reasoning"

    def feed(self, text: str) -> list[tuple[Channel, str]]:
        pieces: list[tuple[Channel, str]] = []
        self._pending += text
        while self._pending:
            if self.state == "decide":
                stripped = self._pending.lstrip()
                if not stripped or (
                    len(stripped) < len(self.start) and self.start.startswith(stripped)
                ):
                    break
                if stripped.startswith(self.start):
                    self._pending = stripped[len(self.start) :]
                    self.state = "reasoning"
                else:
                    self.state = "answer"
            elif self.state == "reasoning":
                end = self._pending.find(self.end)
                if end >= 0:
                    _add(pieces, "reasoning", self._pending[:end])
                    self._pending = self._pending[end + len(self.end) :]
                    self.state = "gap"
                    continue
                keep = partial_suffix(self._pending, self.end)
                _add(pieces, "reasoning", self._pending[: len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep :]
                break
            elif self.state == "gap":  # the template's separator before the answer
                stripped = self._pending.lstrip()
                if not stripped:
                    self._pending = ""
                    break
                self._pending = stripped
                self.state = "answer"
            else:
                _add(pieces, "answer", self._pending)
                self._pending = ""
        return pieces

    def finish(self) -> list[tuple[Channel, str]]:
        """What was held back, once the reply has ended."""
        rest, self._pending = self._pending, ""
        if not rest or self.state == "gap":
            return []
        if self.state == "reasoning":
            return [("reasoning", rest)]
        return [("answer", rest)]


def _add(pieces: list[tuple[Channel, str]], channel: Channel, text: str) -> None:
    if text:
        pieces.append((channel, text))
