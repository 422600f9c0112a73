"""A draft model: a smaller model with the same tokenizer guesses the next tokens.

It keeps a KV cache of its own over the same text as the model it drafts for; each guess
feeds what it has not seen yet (the tokens the model kept since the last guess) and then
decodes greedily, ``limit`` steps queued without reading one (mlx-lm's
``speculative_generate_step`` drafts the same way). What it guessed beyond the tokens kept
is trimmed from its cache before the next guess.

Its cache outlives the generation (``DraftCaches``): an agent's or an editor's next request
repeats the conversation so far, and a draft model that prefilled all of it again before its
first guess lost more than its guesses could win (on an H100, the real Qwen2.5-Coder 1.5B
as its own draft lost 19% of an edit task's decode, the 0.5B drafting for it 11%: the
catch-up over the 60-line function, not the guesses).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from gateway.engines.compiled_step import CompiledStep
from gateway.engines.token_prefix import common_prefix

# The draft's own prefill (the prompt, on its first guess) in chunks of this many tokens.
DRAFT_PREFILL_CHUNK = 512
# Draft caches kept for later generations: two conversations going on at once (each a
# 32K-token context of a 0.5B draft is ~0.4 GB).
KEPT_DRAFT_CACHES = 2


class DraftCaches:
    """A draft model's caches of recent generations, each with the tokens it holds (the
    most recent last): a generation takes the one that shares the longest start with its
    text (its own from then on: no copy) and gives its cache back when it ends."""

    def __init__(self, kept: int = KEPT_DRAFT_CACHES) -> None:
        self.kept = kept
        self.entries: list[tuple[list[int], list[Any]]] = []

    def take(self, history: Sequence[int]) -> tuple[list[int], list[Any]] | None:
        """The kept cache sharing the longest start with ``history`` (not its last token,
        which is fed with the first guess), and the tokens it holds (the taker cuts it to
        the shared start, as it cuts its own wrong guesses); None if none shares any."""
        best, shared = -1, 0
        for index, (tokens, cache) in enumerate(self.entries):
            common = common_prefix(tokens, history, len(history) - 1)
            if common > shared and (common == len(tokens) or can_trim_prompt_cache(cache)):
                best, shared = index, common
        return self.entries.pop(best) if best >= 0 else None

    def give(self, tokens: list[int], cache: list[Any]) -> None:
        if tokens:
            self.entries.append((tokens, cache))
            del self.entries[: -self.kept]


class DraftModel:
    """One generation's drafter on a loaded draft model (``model``), with its own cache."""

    method = "draft_model"

    def __init__(
        self, model: Any, kept: DraftCaches | None = None, compiled: CompiledStep | None = None
    ) -> None:
        self.model = model
        self.kept = kept
        self.compiled = compiled  # its guesses' step, compiled (``compiled_step``)
        self.cache: list[Any] | None = None  # made (or taken from ``kept``) at the first guess
        self._fed: list[int] = []  # the tokens this cache holds
        # What one guess cost at the last proposal (its own decode steps only, not the
        # catch-up over the tokens kept): against the model's step, whether drafting
        # could pay even if every guess were right.
        self.seconds_per_guess: float | None = None

    def propose(self, history: Sequence[int], limit: int) -> list[int]:
        if limit <= 0:
            return []
        if self.cache is None:
            taken = self.kept.take(history) if self.kept is not None else None
            self._fed, self.cache = taken or ([], make_prompt_cache(self.model))
        fed = self._fed
        common = common_prefix(fed, history, len(fed))
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
        compiled = self.compiled
        if compiled is not None and not compiled.takes(self.cache):
            compiled = None  # an empty cache (nothing before the pending token): eager
        for _ in range(limit):
            if compiled is not None:
                logits = compiled(token, self.cache)
            else:
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

    def finish(self) -> None:
        """The generation ended: its cache is kept for the next (its last guesses, maybe
        wrong, are cut by the generation that takes it)."""
        if self.kept is not None and self.cache is not None:
            self.kept.give(self._fed, self.cache)
        self.cache = None
