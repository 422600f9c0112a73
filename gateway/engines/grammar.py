"""Compiling and checking a structured-output grammar (llguidance), before any engine work.

Kept apart from the MLX logits processor (``constrained.py``) so that services can refuse a
bad schema with a 400 without importing MLX.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.engines.backend import Grammar


class GrammarError(ValueError):
    """The grammar or schema cannot be compiled (the message names the problem)."""


def grammar_text(grammar: Grammar) -> str:
    """llguidance's grammar for ``grammar``; raises GrammarError naming what is unsupported."""
    from llguidance import LLMatcher

    try:
        if grammar.kind == "json_schema":
            text = LLMatcher.grammar_from_json_schema(json.loads(grammar.source))
        else:
            text = LLMatcher.grammar_from_lark(grammar.source)
    except (ValueError, TypeError) as exc:
        raise GrammarError(str(exc)) from exc
    problem = LLMatcher.validate_grammar(text)
    if problem:
        raise GrammarError(problem)
    return text


# JSON's exactly representable integers (JavaScript's safe range): the default bounds of an
# integer the schema leaves unbounded, so its digits are bounded too (a small model otherwise
# can write "1111..." until max_tokens, which the grammar would allow).
SAFE_INTEGER = 2**53 - 1
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def strict_objects(schema: Any) -> Any:
    """``additionalProperties: false`` on every object that does not say otherwise, and
    JSON-safe bounds on integers that have none.

    Small models keep inventing keys until ``max_tokens`` without the first (OpenAI's strict
    mode sets it too), and digits without the second.
    """
    if isinstance(schema, dict):
        out = {k: strict_objects(v) for k, v in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            out.setdefault("additionalProperties", False)
        if out.get("type") == "integer" and not any(b in out for b in _BOUNDS):
            out.update(minimum=-SAFE_INTEGER, maximum=SAFE_INTEGER)
        return out
    if isinstance(schema, list):
        return [strict_objects(item) for item in schema]
    return schema


# Compact JSON with readable separators: with free whitespace a small model can pad an object
# with newlines until max_tokens. A schema's own "x-guidance" still wins.
COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def for_grammar(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the grammar compiler gets it: compact JSON unless the schema says."""
    return schema if "x-guidance" in schema else {**schema, "x-guidance": COMPACT_JSON}
