"""Compiling and checking a structured-output grammar (llguidance), before any engine work.

Kept apart from the MLX logits processor (``constrained.py``) so that services can refuse a
bad schema with a 400 without importing MLX.
"""

from __future__ import annotations

import json

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
