"""Wire messages to the plain dictionaries chat templates (and upstreams) take."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.backend import ChatMessage, ToolSpec
from gateway.protocol.openai import ChatMessage as WireMessage
from gateway.protocol.openai import ToolDefinition


def template_messages(messages: Sequence[WireMessage]) -> tuple[ChatMessage, ...]:
    return tuple(m.as_template_message() for m in messages)


def tool_specs(tools: Sequence[ToolDefinition] | None) -> tuple[ToolSpec, ...]:
    return tuple(
        ToolSpec(t.function.name, t.function.description, t.function.parameters or {})
        for t in tools or ()
    )
