"""Numbers under a schema have bounded digits (issue 19): checked on the compiled grammar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.seam.grammar import NUMBER_LIMIT, NUMBER_STEP, for_grammar, strict_objects

TOKENIZER = Path.home() / ".cache/onemac-gateway/models/smollm2-135m-instruct/tokenizer.json"


def test_an_unbounded_number_gets_bounds_and_a_step() -> None:
    schema = strict_objects({"type": "object", "properties": {"score": {"type": "number"}}})
    assert schema["properties"]["score"] == {
        "type": "number",
        "maximum": NUMBER_LIMIT,
        "minimum": -NUMBER_LIMIT,
        "multipleOf": NUMBER_STEP,
    }


def test_the_schemas_own_bounds_and_multiple_are_kept() -> None:
    number = {"type": "number", "minimum": 0, "multipleOf": 0.5}
    assert strict_objects(number) == {**number, "maximum": NUMBER_LIMIT}


def test_a_lower_bound_above_the_default_limit_is_not_contradicted() -> None:
    number = {"type": "number", "exclusiveMinimum": 10**16}
    assert "maximum" not in strict_objects(number)


def test_a_nullable_number_is_bounded_too() -> None:
    assert "multipleOf" in strict_objects({"type": ["number", "null"]})


@pytest.mark.skipif(not TOKENIZER.exists(), reason="needs the imported SmolLM2 tokenizer")
@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("0.5", True),
        ("-12.25", True),
        ("123456789012345", True),
        ("7.71795588789174344162202720269914941565", False),
        ("0.1234567", False),
        ("1234567890123456", False),
    ],
)
def test_the_compiled_grammar_refuses_long_numbers(text: str, accepted: bool) -> None:
    from llguidance import LLMatcher, LLTokenizer

    tokenizer = LLTokenizer(str(TOKENIZER), n_vocab=49152, eos_token=[2])
    schema = for_grammar(strict_objects({"type": "number"}))
    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_json_schema(json.dumps(schema)))
    tokens = tokenizer.tokenize_str(text)
    assert (matcher.validate_tokens(tokens) == len(tokens)) is accepted
