"""Constrained decoding with llguidance: a logits processor that masks forbidden tokens.

Facts (``shared/CONSTRAINED.md``): no PyTorch, ~0.1 ms a token; a Lark grammar can hold "a
bounded free-text thinking section, then ``%json{schema}``". The matcher sees the prompt on
its first call (not consumed) and consumes the previous token on every later call, which is
exactly how mlx-lm calls logits processors (and how the runner's first pass does). The mask
is applied last, after biases and penalties, so what is sampled is always allowed. On Apple
Silicon llguidance's Metal kernel applies it; elsewhere MLX unpacks the bitmask.
EOS is allowed only where the grammar accepts: a grammar-complete output ends with ``stop``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from gateway.seam.grammar import GrammarError, grammar_text
from gateway.seam.request_parts import Grammar


def make_llg_tokenizer(tokenizer_json: Path, vocab_size: int, eos_token_ids: list[int]) -> Any:
    """llguidance's view of a model's vocabulary (~0.25 s; build once per model)."""
    from llguidance import LLTokenizer

    return LLTokenizer(str(tokenizer_json), n_vocab=vocab_size, eos_token=eos_token_ids)


def _apply_bits(logits: mx.array, bitmask: np.ndarray, vocab: int) -> mx.array:
    """The packed bitmask (one bit per token) unpacked by MLX: 6 KB cross to the device per
    token for a 49k vocabulary, instead of a boolean array unpacked in numpy."""
    return _bits_applier(vocab)(logits, mx.array(bitmask.view(np.uint32)))


@functools.lru_cache(maxsize=8)
def _bits_applier(vocab: int) -> Callable[[mx.array, mx.array], mx.array]:
    """Unpacking and masking compiled into one graph (``mx.compile``): a few fused kernels
    per token instead of one per operation, on the path between a pass and its sample."""

    def apply(logits: mx.array, words: mx.array) -> mx.array:
        bits = (words[:, None] >> mx.arange(32, dtype=mx.uint32)) & 1
        allowed = bits.reshape(-1)[:vocab].astype(mx.bool_)
        if logits.shape[-1] > vocab:  # padded logits: the padding is never allowed
            allowed = mx.concatenate([allowed, mx.zeros(logits.shape[-1] - vocab, mx.bool_)])
        return mx.where(allowed, logits, -mx.inf)

    return mx.compile(apply)


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
        self.sampled: mx.array | None = None  # the last token drawn (``watch``: required)

    def watch(self, sampler: Callable[[mx.array], mx.array]) -> Callable[[mx.array], mx.array]:
        """``sampler``, telling this constraint each token it draws (as a lazy array)."""

        def sample(logprobs: mx.array) -> mx.array:
            self.sampled = sampler(logprobs)
            return self.sampled

        return sample

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        from llguidance.numpy import fill_next_token_bitmask

        # The forward pass behind ``logits`` needs only the previous token: it is started
        # first, and the mask is computed on the host while it runs. The previous token is
        # read from the sampler's own output (``watch``), computed already or about to be;
        # ``tokens[-1]`` would be a new array, evaluated only after the pass just started.
        mx.async_eval(logits)
        if self._first:
            self._first = False  # the prompt: nothing to consume
        else:
            assert self.sampled is not None, "the sampler is not watched"
            self.matcher.consume_token(int(self.sampled.item()))  # type: ignore[arg-type]
        fill_next_token_bitmask(self.matcher, self.bitmask)
        if self.use_metal:
            from llguidance.mlx import apply_token_bitmask

            return apply_token_bitmask(logits, self.bitmask)  # type: ignore[no-any-return]
        return _apply_bits(logits, self.bitmask[0], self.vocab)

    @property
    def accepting(self) -> bool:
        return bool(self.matcher.is_accepting())
