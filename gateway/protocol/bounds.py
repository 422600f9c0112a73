"""Cheap bounds on a request body's shape, checked before the body is validated.

Validating a body builds Python objects for all of it, and an error for every element that is
wrong: a 2-million-element array where a string is expected took 18-28 s of the event loop,
and 40,000 messages were all validated before the conversation was found too long. These
bounds count instead: a walk over the decoded JSON that stops at the first array longer than
its bound (a big body is walked as undecoded slices instead, off the event loop:
``gateway.routes.body_shape``, with the same rules and words). The same bounds are set on the
pydantic models (``max_length``), so a small body is held to them as well.

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


def bound_of(key: str) -> int:
    """The most items an array under ``key`` may hold: its own bound, else any array's."""
    return NAMED_BOUNDS.get(key, MAX_ARRAY_ITEMS)


def check_length(name: str, length: int, limit: int) -> None:
    """Raise ``ShapeError`` naming the array ``name`` when it holds more than ``limit``."""
    if length > limit:
        raise ShapeError(f"'{name}' has {length} items; at most {limit} are accepted", name)


def child_name(path: str, key: str | int) -> str:
    """OpenAI's name of a member (``messages[0].content``) below ``path``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_shape(value: Any, path: str = "", depth: int = 0, max_depth: int = 64) -> None:
    """Raise ``ShapeError`` at the first array longer than its bound (depth-first, bounded).

    ``value`` sits at ``path``, ``depth`` levels down; its own length is its parent's to check.
    """
    stack: list[tuple[Any, str, int]] = [(value, path, depth)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            continue  # the JSON decoder's own nesting limit answers that
        if isinstance(item, dict):
            for key, child in item.items():
                name = child_name(path, str(key))
                if isinstance(child, list):
                    check_length(name, len(child), bound_of(str(key)))
                if isinstance(child, dict | list):
                    stack.append((child, name, depth + 1))
        elif isinstance(item, list):
            check_length(path, len(item), MAX_ARRAY_ITEMS)
            for index, child in enumerate(item):
                if isinstance(child, dict | list):
                    stack.append((child, child_name(path, index), depth + 1))
