"""Compiling and checking a structured-output grammar (llguidance), before any engine work.

Kept apart from the MLX logits processor (``constrained.py``) so that services can refuse a
bad schema with a 400 without importing MLX.
"""

from __future__ import annotations

import json
from typing import overload

from gateway.seam.json_value import JSONObject, JSONValue
from gateway.seam.request_parts import Grammar


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
# A number the schema leaves unbounded gets at most 15 integer digits and 6 decimals (no
# exponent): llguidance has no option to bound a number's digits, but it compiles bounds and
# ``multipleOf`` into a finite pattern. Unbounded, a small model wrote a float's digits until
# max_tokens ("7.717955887891743441627...").
NUMBER_LIMIT = 10**15
NUMBER_STEP = 1e-6


@overload
def strict_objects(schema: JSONObject) -> JSONObject: ...
@overload
def strict_objects(schema: JSONValue) -> JSONValue: ...
def strict_objects(schema: JSONValue) -> JSONValue:
    """``additionalProperties: false`` on every object that does not say otherwise, and
    bounded digits for numbers: JSON-safe bounds on integers that have none, default bounds
    and decimals (``bounded_number``) on other numbers.

    Small models keep inventing keys until ``max_tokens`` without the first (OpenAI's strict
    mode sets it too), and digits without the second.
    """
    if isinstance(schema, dict):
        out = {k: strict_objects(v) for k, v in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            out.setdefault("additionalProperties", False)
        if out.get("type") == "integer" and not any(b in out for b in _BOUNDS):
            out.update(minimum=-SAFE_INTEGER, maximum=SAFE_INTEGER)
        kinds = out.get("type")
        if kinds == "number" or (isinstance(kinds, list) and "number" in kinds):
            out = bounded_number(out)
        return out
    if isinstance(schema, list):
        return [strict_objects(item) for item in schema]
    return schema


def bounded_number(schema: JSONObject) -> JSONObject:
    """A ``number`` schema with its digits bounded: ``NUMBER_LIMIT`` as the bound it lacks on
    each side (where that leaves the range non-empty) and ``NUMBER_STEP`` as its
    ``multipleOf`` unless it has one (the schema's own is honoured)."""
    out = dict(schema)
    low = out.get("minimum", out.get("exclusiveMinimum"))
    high = out.get("maximum", out.get("exclusiveMaximum"))
    numeric = (int, float)
    if high is None and (not isinstance(low, numeric) or low < NUMBER_LIMIT):
        out["maximum"] = NUMBER_LIMIT
    if low is None and (not isinstance(high, numeric) or high > -NUMBER_LIMIT):
        out["minimum"] = -NUMBER_LIMIT
    out.setdefault("multipleOf", NUMBER_STEP)
    return out


# Compact JSON with readable separators: with free whitespace a small model can pad an object
# with newlines until max_tokens. A schema's own "x-guidance" still wins.
COMPACT_JSON: JSONObject = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}


def for_grammar(schema: JSONObject) -> JSONObject:
    """The schema as the grammar compiler gets it: compact JSON unless the schema says."""
    return schema if "x-guidance" in schema else {**schema, "x-guidance": COMPACT_JSON}
