"""A JSON object cut short (a tool call's arguments when ``max_tokens`` ended the reply),
parsed as far as it goes: what Anthropic's SDKs make of the same ``input_json_delta``s when
they accumulate a stream, so a non-streamed reply carries the same partial input."""

from __future__ import annotations

import json

from gateway.seam.json_value import JSONObject, JSONValue


def partial_object(text: str) -> JSONObject:
    """The longest prefix of ``text`` that closes into a JSON object (open strings, arrays
    and objects closed; an unfinished key, literal or trailing comma dropped); ``{}`` if none."""
    for cut in range(len(text), 0, -1):
        candidate = _closed(text[:cut])
        if candidate is None:
            continue
        try:
            value: JSONValue = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def _closed(prefix: str) -> str | None:
    """``prefix`` with its open string and containers closed; None if it ends mid-escape."""
    stack: list[str] = []
    in_string = escaped = False
    for char in prefix:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and stack:
            stack.pop()
    if escaped:
        return None
    return prefix + ('"' if in_string else "") + "".join(reversed(stack))
