"""Cheap bounds on a request body's shape, checked before the body is validated.

Validating a body builds Python objects for all of it, and an error for every element that is
wrong: a 2-million-element array where a string is expected took 18-28 s of the event loop,
and 40,000 messages were all validated before the conversation was found too long. These
bounds count instead: a walk over the decoded JSON (run off the event loop for big bodies)
that stops at the first array longer than its bound. The same bounds are set on the pydantic
models (``max_length``), so a small body is held to them as well.

This module imports nothing from the gateway: the protocol models import it.
"""

from __future__ import annotations

from typing import Any

# A conversation: each message costs a few template tokens at least, so 10,000 messages do
# not fit any context this gateway serves; OpenAI documents no bound of its own.
MAX_MESSAGES = 10_000
# Parts of one message's content (or an Anthropic system prompt).
MAX_CONTENT_PARTS = 1_024
# Any array at all: above the longest context in tokens (token-id inputs) and OpenAI's 2,048
# embedding inputs.
MAX_ARRAY_ITEMS = 131_072
# Keys whose arrays have a bound of their own, wherever they occur (request-level names).
NAMED_BOUNDS = {
    "messages": MAX_MESSAGES,
    "content": MAX_CONTENT_PARTS,
    "system": MAX_CONTENT_PARTS,
    "tools": 128,
    "functions": 128,
    "stop": 16,
    "stop_sequences": 16,
}


class ShapeError(ValueError):
    """A body whose shape is out of bounds; ``param`` names the field as OpenAI would."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_shape(value: Any, max_depth: int = 64) -> None:
    """Raise ``ShapeError`` at the first array longer than its bound (depth-first, bounded)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            continue  # the JSON decoder's own nesting limit answers that
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(child, list):
                    limit = NAMED_BOUNDS.get(str(key), MAX_ARRAY_ITEMS)
                    if len(child) > limit:
                        name = f"{path}.{key}" if path else str(key)
                        raise ShapeError(
                            f"'{name}' has {len(child)} items; at most {limit} are accepted",
                            name,
                        )
                if isinstance(child, dict | list):
                    stack.append((child, f"{path}.{key}" if path else str(key), depth + 1))
        elif isinstance(item, list):
            if len(item) > MAX_ARRAY_ITEMS:
                raise ShapeError(
                    f"'{path}' has {len(item)} items; at most {MAX_ARRAY_ITEMS} are accepted",
                    path,
                )
            for index, child in enumerate(item):
                if isinstance(child, dict | list):
                    stack.append((child, f"{path}[{index}]", depth + 1))
