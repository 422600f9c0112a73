"""How a model's reply is laid out: an optional reasoning section, then the answer.

Models that think write ``<think> ... </think>`` (or another pair of markers mlx-lm's
tokenizer wrapper detects) before their answer. Whether a reply has that section depends
on the rendered prompt as much as on the model: a template may open ``<think>`` itself in
the generation prompt (DeepSeek-R1, Qwen3 thinking variants), close an empty one to switch
thinking off (Qwen3 with ``enable_thinking=False``), or leave it to the model (Qwen3 with
thinking on). ``ReplyFormat`` says which, per rendered prompt, and carries the markers and
the tool-call format, so that the services can split the reply and write its grammar
without knowing the tokenizer. Nothing here knows MLX or HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from gateway.seam.request_parts import Grammar, ToolSpec
from gateway.seam.tool_format import HERMES, Marker, ToolChoice, ToolFormat, tool_rules

# "opened": the prompt opened the section, the reply starts inside it;
# "required": thinking is switched on and the model opens the section itself;
# "optional": the model has markers but its template no switch: it may or may not think;
# "off": no section (no markers, switched off, or the prompt closed an empty one).
ThinkingState = Literal["opened", "required", "optional", "off"]

# A reasoning section under a grammar is bounded (in characters): unbounded, a small model
# rambles in it until max_tokens (shared/CONSTRAINED.md). A thinking budget ends it sooner.
CONSTRAINED_THINKING_CHARS = 8192


@dataclass(frozen=True)
class ReplyFormat:
    """What a reply to one rendered prompt looks like (see the module docstring)."""

    thinking: ThinkingState = "off"
    think_start: Marker | None = None
    think_end: Marker | None = None
    tools: ToolFormat = field(default_factory=lambda: HERMES)

    @property
    def thinks(self) -> bool:
        """The model has reasoning markers (its reply may hold a section)."""
        return self.think_start is not None and self.think_end is not None


def thinking_state(
    prompt_tail: str, start: str | None, end: str | None, switch: bool, enabled: bool | None
) -> ThinkingState:
    """The state of a reply from the rendered prompt's last characters.

    ``switch``: the template has a thinking switch (``enable_thinking``); ``enabled``: the
    request's choice (None: the template's default, which mlx-lm sets to on).
    """
    if start is None or end is None:
        return "off"
    tail = prompt_tail.rstrip()
    if tail.endswith(start):
        return "opened"
    if tail.endswith(end) or enabled is False:
        return "off"
    return "required" if switch else "optional"


def thinking_grammar(reply: ReplyFormat, body: str, max_chars: int) -> str:
    """A Lark grammar whose ``start`` is the reasoning section (as ``reply`` has it) before
    ``body``, the Lark expression of the answer (rules it names follow in the caller's text).

    Without a section the body is all there is. Inside the section the text is free but
    bounded, and cannot contain the end marker: where that marker is ordinary text, the
    draft ends at its first occurrence (a lazy suffix), as the reply's splitter does.
    """
    start, end = reply.think_start, reply.think_end
    if reply.thinking == "off" or start is None or end is None:
        return f"start: {body}"
    text = f"/(.|\\n){{0,{max_chars}}}/"
    if end.token is None:
        draft = f"think_draft[suffix={json.dumps(end.text)}]: {text}"
        section = "think_draft"
    else:
        draft = f"think_draft: {text}"
        section = f"think_draft {end.lark()}"
    gap = "/[ \\n]{0,4}/"  # the template's own separator after the section ("\n\n")
    if reply.thinking == "opened":
        head = section
    elif reply.thinking == "required":
        head = f"{start.lark()} {section}"
    else:
        head = f"({start.lark()} {section})?"
    return f"start: {head} {gap} {body}\n{draft}"


def opened_in(tokens: Sequence[int], start: Sequence[int], end: Sequence[int]) -> int | None:
    """Where the reasoning section left open at the end of ``tokens`` begins (the index
    after its start marker), or None when no section is open (single-token markers)."""
    if len(start) != 1 or len(end) != 1:
        return None
    for index in range(len(tokens) - 1, -1, -1):
        if tokens[index] == end[0]:
            return None
        if tokens[index] == start[0]:
            return index + 1
    return None


def reply_grammar(
    reply: ReplyFormat,
    answer: Grammar | None,
    tools: Sequence[ToolSpec] = (),
    choice: ToolChoice | None = None,
    thinking_chars: int = CONSTRAINED_THINKING_CHARS,
) -> Grammar | None:
    """The constraint on a whole reply: its reasoning section (when it has one), then the
    calls or the answer format; None when nothing is constrained.

    A Lark ``answer`` (a task's own grammar) is used as it is: it already says how the
    reply begins.
    """
    rules = tool_rules(tools, choice, answer, reply.tools) if choice is not None else None
    if rules is None:
        if answer is None or answer.kind == "lark" or reply.thinking == "off":
            return answer
        rules = ("answer", [f"answer: %json{answer.source}"])
    body, named = rules
    return Grammar("lark", "\n".join([thinking_grammar(reply, body, thinking_chars), *named]))
