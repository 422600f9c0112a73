"""Tokens spelled as OpenAI reports them: exact bytes, readable text."""

from __future__ import annotations

import math

import mlx.core as mx

from gateway.engines.logprobs import IMPOSSIBLE_LOGPROB, TokenSpeller


class Vocabulary:
    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.pieces[token_id]


def test_byte_level_and_sentencepiece_tokens_are_spelled_exactly() -> None:
    # GPT-2 byte level: "Ġ" is a space, "Ã©" the two bytes of "é", "â" alone a partial char.
    speller = TokenSpeller(Vocabulary(["ĠParis", "Ã©", "â", "▁Rome", "<0x0A>"]))
    assert speller.spell(0) == (" Paris", b" Paris")
    assert speller.spell(1) == ("é", "é".encode())
    text, raw = speller.spell(2)
    assert raw == b"\xe2" and text == "\ufffd"
    assert speller.spell(3) == (" Rome", b" Rome")  # SentencePiece's word boundary
    assert speller.spell(4) == ("\n", b"\n")


def test_a_choice_has_the_chosen_token_and_the_best_alternatives() -> None:
    speller = TokenSpeller(Vocabulary(["a", "b", "c", "d"]))
    logprobs = mx.log(mx.array([0.1, 0.6, 0.3, 0.0]))
    choice = speller.choice(2, logprobs, top=3)
    assert choice.chosen.token == "c" and math.isclose(
        choice.chosen.logprob, math.log(0.3), rel_tol=1e-5
    )
    assert [t.token for t in choice.top] == ["b", "c", "a"]
    masked = speller.choice(1, logprobs, top=4).top[-1]
    assert masked.token == "d" and masked.logprob == IMPOSSIBLE_LOGPROB
    assert speller.choice(1, logprobs, top=0).top == ()
