"""Wire messages to the plain dictionaries chat templates (and upstreams) take."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.backend import ChatMessage
from gateway.protocol.openai import ChatMessage as WireMessage


def template_messages(messages: Sequence[WireMessage]) -> tuple[ChatMessage, ...]:
    return tuple(m.as_template_message() for m in messages)
