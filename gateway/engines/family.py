"""What a model family's template and tokenizer say about its replies: reasoning markers, a
thinking switch, and the tool-call format — read once from mlx-lm's tokenizer wrapper.

mlx-lm's ``TokenizerWrapper`` detects the markers (``think_start``/``think_end``) and maps
``enable_thinking`` onto the template's own keyword; its ``_infer_tool_parser`` names a parser
of ``mlx_lm/tool_parsers`` from the template's text. The gateway writes (grammar) and reads
(streaming parser) two of those formats: ``json_tools`` (Hermes/Qwen) and ``mistral``;
any other falls back to Hermes with a log line. Nothing here imports MLX.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.seam.reasoning import ReplyFormat, thinking_state
from gateway.seam.request_parts import ChatMessage
from gateway.seam.tool_format import (
    CALL_CLOSE,
    CALL_OPEN,
    HermesFormat,
    Marker,
    MistralFormat,
    ToolFormat,
)

log = logging.getLogger(__name__)

MISTRAL_CALLS = "[TOOL_CALLS]"
# Enough of the prompt's end to hold a generation prompt's "<think>\n" or "</think>\n\n".
TAIL_TOKENS = 8


@dataclass(frozen=True)
class ModelFamily:
    """A loaded tokenizer's reasoning markers, thinking switch and tool-call format."""

    think_start: Marker | None
    think_end: Marker | None
    think_start_ids: tuple[int, ...]
    think_end_ids: tuple[int, ...]
    switch: bool  # the template reads a thinking switch (enable_thinking)
    tools: ToolFormat
    parser: str | None  # mlx-lm's name for the template's tool parser

    def reply_format(self, prompt_tail: str, thinking: bool | None) -> ReplyFormat:
        start = self.think_start.text if self.think_start else None
        end = self.think_end.text if self.think_end else None
        state = thinking_state(prompt_tail, start, end, self.switch, thinking)
        return ReplyFormat(state, self.think_start, self.think_end, self.tools)

    def template_messages(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The conversation as the template needs it (Mistral's: 9-character call ids)."""
        if not isinstance(self.tools, MistralFormat):
            return list(messages)
        out: list[ChatMessage] = []
        for message in messages:
            message = dict(message)
            calls = message.get("tool_calls")
            if calls and isinstance(calls, list):
                message["tool_calls"] = [
                    {**call, "id": mistral_call_id(str(call.get("id") or ""))}
                    if isinstance(call, dict)
                    else call
                    for call in calls
                ]
            if message.get("tool_call_id") is not None:
                message["tool_call_id"] = mistral_call_id(str(message["tool_call_id"]))
            out.append(message)
        return out


def mistral_call_id(call_id: str) -> str:
    """A call id as Mistral's templates require (nine letters or digits; they raise on any
    other): the same nine characters for the same client id, in the call and its result."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def family_of(tokenizer: Any) -> ModelFamily:
    """Read ``tokenizer`` (mlx-lm's ``TokenizerWrapper``) once."""
    template = str(getattr(tokenizer, "chat_template", None) or "")
    parser = _parser_name(tokenizer)
    start_ids = tuple(getattr(tokenizer, "think_start_tokens", None) or ())
    end_ids = tuple(getattr(tokenizer, "think_end_tokens", None) or ())
    start_text = getattr(tokenizer, "think_start", None)
    end_text = getattr(tokenizer, "think_end", None)
    keyword = getattr(tokenizer, "_thinking_kwarg", "enable_thinking")
    tools: ToolFormat
    if parser == "mistral":
        tools = MistralFormat(
            _marker(tokenizer, MISTRAL_CALLS), space=f"{MISTRAL_CALLS} [" in template
        )
    else:
        if parser not in (None, "json_tools"):
            log.info("tool-call format %r is not written here: Hermes calls instead", parser)
        newline = parser == "json_tools" and (
            f"{CALL_OPEN}\\n" in template or f"{CALL_OPEN}\n" in template
        )
        tools = HermesFormat(
            _marker(tokenizer, CALL_OPEN), _marker(tokenizer, CALL_CLOSE), newline=newline
        )
    return ModelFamily(
        think_start=_marker(tokenizer, start_text) if start_text else None,
        think_end=_marker(tokenizer, end_text) if end_text else None,
        think_start_ids=start_ids,
        think_end_ids=end_ids,
        switch=bool(start_text) and keyword in template,
        tools=tools,
        parser=parser,
    )


def _parser_name(tokenizer: Any) -> str | None:
    """mlx-lm's tool parser for this template: the one its loader chose, else inferred the
    way its loader does (a wrapper built by hand has none)."""
    chosen = getattr(tokenizer, "_tool_parser", None)
    if chosen is not None:
        return str(chosen.__module__).rsplit(".", 1)[-1]
    try:
        from mlx_lm.tokenizer_utils import _infer_tool_parser

        name = _infer_tool_parser(getattr(tokenizer, "_tokenizer", tokenizer))
    except Exception:  # a private helper of mlx-lm: its absence only means "no parser"
        return None
    return str(name) if name else None


def _marker(tokenizer: Any, text: str) -> Marker:
    """``text`` with its token id when it is a single added token of ``tokenizer``.

    Special or not: llguidance treats every added token as special (its bytes are not text,
    so no string literal matches it). Qwen's ``<tool_call>`` is added but not special; named
    as text, the grammar refused the very token the model writes (issue 31: "token 151657
    doesn't satisfy the grammar", an empty reply)."""
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    try:
        ids = hf.encode(text, add_special_tokens=False)
        added = getattr(hf, "added_tokens_decoder", {})
    except Exception:
        return Marker(text)
    if len(ids) == 1 and int(ids[0]) in added:
        return Marker(text, int(ids[0]))
    return Marker(text)
