"""Constrained decoding with llguidance: a logits processor that masks forbidden tokens.

Facts (``shared/CONSTRAINED.md``): no PyTorch, ~0.1 ms a token; a Lark grammar can hold "a
bounded free-text thinking section, then ``%json{schema}``". The matcher sees the prompt on
its first call (not consumed) and consumes the previous token on every later call, which is
exactly how mlx-lm calls logits processors (and how the runner's first pass does). The mask
is applied last, after biases and penalties, so what is sampled is always allowed. On Apple
Silicon llguidance's Metal kernel applies it; elsewhere the bitmask is unpacked with numpy.
EOS is allowed only where the grammar accepts: a grammar-complete output ends with ``stop``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from gateway.engines.backend import Grammar
from gateway.engines.grammar import GrammarError, grammar_text


def make_llg_tokenizer(tokenizer_json: Path, vocab_size: int, eos_token_ids: list[int]) -> Any:
    """llguidance's view of a model's vocabulary (~0.25 s; build once per model)."""
    from llguidance import LLTokenizer

    return LLTokenizer(str(tokenizer_json), n_vocab=vocab_size, eos_token=eos_token_ids)


def _apply_numpy(logits: mx.array, bitmask: np.ndarray, vocab: int) -> mx.array:
    allowed = np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:vocab].astype(bool)
    if logits.shape[-1] > vocab:  # padded logits: the padding is never allowed
        allowed = np.concatenate([allowed, np.zeros(logits.shape[-1] - vocab, bool)])
    return mx.where(mx.array(allowed), logits, -mx.inf)


class GrammarConstraint:
    """One generation's grammar state, as an mlx-lm logits processor."""

    def __init__(self, llg_tokenizer: Any, grammar: Grammar, use_metal: bool) -> None:
        from llguidance import LLMatcher
        from llguidance.numpy import allocate_token_bitmask

        self.matcher = LLMatcher(llg_tokenizer, grammar_text(grammar))
        if self.matcher.is_error():
            raise GrammarError(self.matcher.get_error())
        self.vocab = int(llg_tokenizer.vocab_size)
        self.bitmask = allocate_token_bitmask(1, self.vocab)
        self.use_metal = use_metal and sys.platform == "darwin"
        self._first = True

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        from llguidance.numpy import fill_next_token_bitmask

        if self._first:
            self._first = False  # the prompt: nothing to consume
        else:
            self.matcher.consume_token(int(tokens[-1].item()))  # type: ignore[arg-type]
        fill_next_token_bitmask(self.matcher, self.bitmask)
        if self.use_metal:
            from llguidance.mlx import apply_token_bitmask

            return apply_token_bitmask(logits, self.bitmask)  # type: ignore[no-any-return]
        return _apply_numpy(logits, self.bitmask[0], self.vocab)

    @property
    def accepting(self) -> bool:
        return bool(self.matcher.is_accepting())
