"""Wire messages to the plain dictionaries chat templates (and upstreams) take."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import InvalidRequestError
from gateway.protocol.openai import ChatMessage as WireMessage
from gateway.protocol.openai import ToolDefinition
from gateway.seam.request_parts import ChatMessage, ToolSpec


def template_messages(messages: Sequence[WireMessage]) -> tuple[ChatMessage, ...]:
    """The messages as templates take them; an image, audio or file part is a 400 naming it."""
    for index, message in enumerate(messages):
        part = message.media_part()
        if part is not None and isinstance(message.content, list):  # (only a list has parts)
            kind = getattr(message.content[part], "type", "")
            raise InvalidRequestError(
                f"messages[{index}].content[{part}] ({kind}): this model takes text only",
                param=f"messages[{index}].content[{part}]",
            )
    return tuple(m.as_template_message() for m in messages)


def tool_specs(tools: Sequence[ToolDefinition] | None) -> tuple[ToolSpec, ...]:
    return tuple(
        ToolSpec(t.function.name, t.function.description, t.function.parameters or {})
        for t in tools or ()
    )
