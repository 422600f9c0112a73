"""A generation's text through the real SmolLM2 tokenizer's streaming detokenizer (no
weights): the pieces sent token by token add up to the decoded text, stop strings cut it,
and a replayed start is not sent again."""

from __future__ import annotations

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper, load

from gateway.config import default_cache_dir
from gateway.engines.text_tail import TextTail
from gateway.modelstore.store import ModelStore

TEXT = "The café's menu: 3 crêpes, 2 teas. END of list."


@pytest.fixture(scope="module")
def tokenizer() -> TokenizerWrapper:
    folder = ModelStore(default_cache_dir()).path_for("smollm2-135m-instruct")
    return load(folder)  # as mlx-lm's loader wraps it (its BPE streaming detokenizer)


def stream(tail: TextTail, tokens: list[int]) -> tuple[str, bool]:
    sent = ""
    for token in tokens:
        piece, stopped = tail.add(token)
        sent += piece
        if stopped:
            return sent, True
    rest, stopped = tail.end()
    return sent + rest, stopped


def test_the_pieces_add_up_to_the_decoded_text(tokenizer: TokenizerWrapper) -> None:
    tokens = tokenizer.encode(TEXT, add_special_tokens=False)
    assert stream(TextTail(tokenizer.detokenizer, ()), tokens) == (TEXT, False)


def test_a_stop_string_cuts_the_text_before_it(tokenizer: TokenizerWrapper) -> None:
    tokens = tokenizer.encode(TEXT, add_special_tokens=False)
    tail = TextTail(tokenizer.detokenizer, ("END",))
    assert stream(tail, tokens) == ("The café's menu: 3 crêpes, 2 teas. ", True)
    assert tail.matched == "END"


def test_a_held_back_stop_prefix_is_released_at_the_end(tokenizer: TokenizerWrapper) -> None:
    tokens = tokenizer.encode("two teas. EN", add_special_tokens=False)
    tail = TextTail(tokenizer.detokenizer, ("END",))
    sent = "".join(tail.add(token)[0] for token in tokens)
    assert not sent.endswith("EN")  # may still become the stop string
    rest, stopped = tail.end()
    assert sent + rest == "two teas. EN" and not stopped and tail.matched is None


def test_replayed_tokens_are_not_sent_again(tokenizer: TokenizerWrapper) -> None:
    tokens = tokenizer.encode(TEXT, add_special_tokens=False)
    whole = stream(TextTail(tokenizer.detokenizer, ()), tokens)[0]
    tail = TextTail(tokenizer.detokenizer, ())
    tail.replay(tokens[:5])
    first = tokenizer.decode(tokens[:5])
    assert stream(tail, tokens[5:]) == (whole[len(first) :], False)


def test_a_continued_text_keeps_its_leading_space(tokenizer: TokenizerWrapper) -> None:
    tokens = tokenizer.encode(" Paris is", add_special_tokens=False)
    assert stream(TextTail(tokenizer.detokenizer, ()), tokens)[0] == "Paris is"
    assert stream(TextTail(tokenizer.detokenizer, (), continues_text=True), tokens)[0] == (
        " Paris is"
    )
