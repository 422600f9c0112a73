"""The parts of a request that the engine's helpers share with the seam.

A chat message, an output constraint and a function the model may call: the reply-format
helpers (``grammar``, ``tool_format``, ``reasoning``) are built from these, and the seam
(``backend.py``) describes a rendered prompt with their ``ReplyFormat``, so these live
below both, importing nothing of the gateway but the JSON type (``json_value``): a message
and a function's schema are JSON objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.seam.json_value import JSONObject

ChatMessage = JSONObject


@dataclass(frozen=True)
class Grammar:
    """A constraint on the output (structured output), engine-neutral.

    ``json_schema``: ``source`` is the schema as JSON text; ``lark``: a Lark grammar in
    llguidance's dialect (which can embed ``%json{...}``).
    """

    kind: Literal["json_schema", "lark"]
    source: str


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: its name, what it does, and its arguments' JSON Schema."""

    name: str
    description: str | None
    parameters: JSONObject
