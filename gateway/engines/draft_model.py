"""A draft model: a smaller model with the same tokenizer guesses the next tokens.

It keeps a KV cache of its own over the same text as the model it drafts for; each guess
feeds what it has not seen yet (the tokens the model kept since the last guess) and then
decodes greedily, ``limit`` steps queued without reading one (mlx-lm's
``speculative_generate_step`` drafts the same way). What it guessed beyond the tokens kept
is trimmed from its cache before the next guess.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

# The draft's own prefill (the prompt, on its first guess) in chunks of this many tokens.
DRAFT_PREFILL_CHUNK = 512


class DraftModel:
    """One generation's drafter on a loaded draft model (``model``), with its own cache."""

    method = "draft_model"

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cache = make_prompt_cache(model)
        self._fed: list[int] = []  # the tokens this cache holds
        # What one guess cost at the last proposal (its own decode steps only, not the
        # catch-up over the tokens kept): against the model's step, whether drafting
        # could pay even if every guess were right.
        self.seconds_per_guess: float | None = None

    def propose(self, history: Sequence[int], limit: int) -> list[int]:
        if limit <= 0:
            return []
        fed = self._fed
        common = 0
        for held, wanted in zip(fed, history, strict=False):
            if held != wanted:
                break
            common += 1
        if len(fed) > common:
            trim_prompt_cache(self.cache, len(fed) - common)
            del fed[common:]
        new = list(history[common:])
        if not new:  # never here: the last token of the history is not fed yet
            return []
        for start in range(0, len(new) - 1, DRAFT_PREFILL_CHUNK):
            chunk = new[start : min(start + DRAFT_PREFILL_CHUNK, len(new) - 1)]
            self.model(mx.array(chunk)[None], cache=self.cache)
            mx.eval([c.state for c in self.cache])
        token = mx.array(new[-1:])
        guesses = []
        started = time.perf_counter()
        for _ in range(limit):
            logits = self.model(token[None], cache=self.cache)[:, -1, :]
            token = mx.argmax(logits, axis=-1)
            mx.async_eval(token)
            guesses.append(token)
        draft: list[int] = mx.concatenate(guesses).tolist()  # type: ignore[assignment]
        self.seconds_per_guess = (time.perf_counter() - started) / limit
        # Fed: the new tokens and every guess but the last.
        fed.extend(new)
        fed.extend(draft[:-1])
        return draft
