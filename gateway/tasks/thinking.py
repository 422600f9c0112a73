"""The private thinking section: its grammar, and telling its text apart from the output.

The grammar (llguidance's Lark dialect; ``shared/CONSTRAINED.md``) makes the model open its
custom tag, write at most ``max_chars`` of free text, close the tag, then write the output:
free text, or JSON that matches the schema. Bounding the section matters: unbounded, a 135M
model rambled inside it until ``max_tokens``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.engines.stops import partial_suffix
from gateway.seam.grammar import for_grammar
from gateway.seam.request_parts import Grammar
from gateway.tasks.definitions import TaskType

Channel = Literal["thinking", "output"]


def _text_answer(task: TaskType) -> str | None:
    """A Lark terminal for a bounded text output, or None when the text is free."""
    output = task.spec.output
    if output.max_chars is None and not output.single_line:
        return None
    char = "[^\\n]" if output.single_line else "(.|\\n)"
    return f"/{char}{{1,{output.max_chars or 100_000}}}/"


def task_grammar(task: TaskType) -> Grammar | None:
    """The constraint for a task's generation (None: free text, no thinking)."""
    thinking = task.spec.thinking
    schema = task.output_schema
    text = _text_answer(task)
    if thinking is None:
        if schema is not None:
            return Grammar("json_schema", json.dumps(for_grammar(schema)))
        return Grammar("lark", f"start: {text}") if text else None
    free_text = "/(.|\\n)+/"
    answer = f"%json{json.dumps(for_grammar(schema))}" if schema is not None else text or free_text
    lark = "\n".join(
        [
            f'start: "<{thinking.tag}>" draft /[ \\n]*/ answer',
            f'draft[suffix="</{thinking.tag}>"]: /(.|\\n){{0,{thinking.max_chars}}}/',
            f"answer: {answer}",
        ]
    )
    return Grammar("lark", lark)


@dataclass
class ThinkingSplitter:
    """Streams text into (channel, delta) pieces: inside the tag is thinking, after it output.

    A piece of the closing tag split over two tokens is held back until it is decided.
    """

    tag: str | None
    _state: str = "open"  # open -> thinking -> gap -> output
    _pending: str = ""
    thinking: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tag is None:
            self._state = "output"

    def feed(self, text: str) -> list[tuple[Channel, str]]:
        pieces: list[tuple[Channel, str]] = []
        self._pending += text
        while self._pending:
            if self._state == "open":
                opening = f"<{self.tag}>"
                if len(self._pending) < len(opening) and opening.startswith(self._pending):
                    break
                if self._pending.startswith(opening):
                    self._pending = self._pending[len(opening) :]
                self._state = "thinking"
            elif self._state == "thinking":
                closing = f"</{self.tag}>"
                end = self._pending.find(closing)
                if end >= 0:
                    self._emit(pieces, "thinking", self._pending[:end])
                    self._pending = self._pending[end + len(closing) :]
                    self._state = "gap"
                    continue
                keep = partial_suffix(self._pending, closing)
                self._emit(pieces, "thinking", self._pending[: len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep :]
                break
            elif self._state == "gap":  # whitespace between the tag and the output
                stripped = self._pending.lstrip(" \n")
                if not stripped:
                    self._pending = ""
                    break
                self._pending = stripped
                self._state = "output"
            else:
                if self.tag is None:
                    self._emit(pieces, "output", self._pending)
                    self._pending = ""
                    break
                # A small model may close its tag a second time: that is not output.
                end_tag = f"</{self.tag}>"
                self._pending = self._pending.replace(end_tag, "")
                keep = partial_suffix(self._pending, end_tag)
                self._emit(pieces, "output", self._pending[: len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep :]
                break
        return pieces

    def finish(self) -> list[tuple[Channel, str]]:
        """The text still held back, once the generation has ended."""
        pieces: list[tuple[Channel, str]] = []
        if self._pending:
            channel: Channel = "thinking" if self._state in ("open", "thinking") else "output"
            self._emit(pieces, channel, self._pending)
            self._pending = ""
        return pieces

    def _emit(self, pieces: list[tuple[Channel, str]], channel: Channel, text: str) -> None:
        if text:
            pieces.append((channel, text))
            (self.thinking if channel == "thinking" else self.output).append(text)


def parse_output(text: str, schema: dict[str, Any] | None, complete: bool) -> Any:
    """The output as the caller gets it: parsed JSON (None if cut by max_tokens) or text."""
    if schema is None:
        return text.strip()
    if not complete:
        return None
    return json.loads(text)
