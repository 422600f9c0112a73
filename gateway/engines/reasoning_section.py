"""A thinking budget: once the reasoning section has taken its tokens, its end is forced.

Like vLLM's ``thinking_token_budget`` and llama.cpp's ``reasoning_budget``: a logits processor
that counts the tokens written inside the section (from the start marker, or from the
reply's first token when the prompt opened it) and, when the budget is spent, leaves only
the end marker's token. It stops looking once the section has ended (or the reply began
without one), so it costs a host sync per token only while the model thinks. It runs
before the grammar's mask, which always allows the end marker inside the section.
"""

from __future__ import annotations

import mlx.core as mx


class ThinkingBudget:
    """One generation's budget, as an mlx-lm logits processor (single-token markers)."""

    def __init__(self, start: int, end: int, budget: int, spent: int | None = None) -> None:
        """``spent``: tokens already in a section the prompt left open (None: not inside)."""
        self.start, self.end, self.budget = start, end, max(budget, 0)
        self.inside = spent is not None
        self.spent = spent or 0
        self.done = False
        self._first = True

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.done:
            return logits
        if self._first:
            self._first = False  # the prompt: nothing to consume
        else:
            self._consume(int(tokens[-1].item()))  # type: ignore[arg-type]
            if self.done:
                return logits
        if self.inside and self.spent >= self.budget:
            only = mx.arange(logits.shape[-1]) == self.end
            return mx.where(only, logits, -mx.inf)
        return logits

    def _consume(self, token: int) -> None:
        if self.inside:
            if token == self.end:
                self.done = True
            else:
                self.spent += 1
        elif token == self.start:
            self.inside = True
        else:
            self.done = True  # the reply began without a section

    def __repr__(self) -> str:
        return f"ThinkingBudget(spent={self.spent}/{self.budget}, inside={self.inside})"
