"""Chat prompts as tokens: what a request will feed, and what is already fixed while typing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from gateway.engines.base import ChatMessage, Engine
from gateway.errors import InvalidRequestError
from gateway.protocol.openai import ChatMessage as WireMessage


def template_messages(messages: Sequence[WireMessage]) -> list[ChatMessage]:
    return [m.as_template_message() for m in messages]


async def render_off_loop(render: Callable[..., list[int]], *args: object) -> list[int]:
    """Run a (Jinja + tokenizer) rendering in a worker thread; a refusal is the client's 400."""
    try:
        return await asyncio.to_thread(render, *args)
    except Exception as exc:  # the model's template or tokenizer refused this conversation
        raise InvalidRequestError(f"cannot render messages: {exc}", param="messages") from exc


def fixed_prefix_tokens(
    engine: Engine, messages: list[ChatMessage], draft: str | None
) -> list[int]:
    """Tokens of everything already fixed: the conversation, plus the draft's whole words.

    Without a draft: the chat template without a generation prompt. With one: the draft as
    an unfinished user message, cut before its last word, which may still grow and so
    tokenize differently.
    """
    words = (draft or "").rstrip()
    cut = max(words.rfind(" "), words.rfind("\n"))
    stable = words[:cut] if cut > 0 else ""
    if not stable.strip():
        return engine.render_chat(messages, add_generation_prompt=False)
    return engine.render_chat(
        [*messages, {"role": "user", "content": stable}], continue_final_message=True
    )
