"""The reasoning section's two forced tokens: its start where the template switched thinking on
(the model opens the section itself), and its end once a thinking budget is spent.

Like vLLM's ``thinking_token_budget`` and llama.cpp's ``reasoning_budget``: a logits processor
that counts the tokens written inside the section (from the start marker, or from the
reply's first token when the prompt opened it) and, when the budget is spent, leaves only
the end marker's token. Forcing the start is what a thinking model does anyway (Qwen3 with
thinking on always begins with ``<think>``); it makes the reply's layout certain. The
processor stops looking once the section has ended (or the reply began without one), so it
costs a host sync per token only while the model thinks under a budget. It runs before the
grammar's mask, which always allows these tokens where they are forced.
"""

from __future__ import annotations

import mlx.core as mx


class ReasoningSection:
    """One generation's section, as an mlx-lm logits processor (single-token markers)."""

    def __init__(
        self,
        start: int,
        end: int,
        budget: int | None,
        spent: int | None = None,
        open_first: bool = False,
    ) -> None:
        """``spent``: tokens already in a section the prompt left open (None: not inside);
        ``open_first``: the reply's first token is the start marker."""
        self.start, self.end = start, end
        self.budget = None if budget is None else max(budget, 0)
        self.inside = spent is not None
        self.spent = spent or 0
        self.open_first = open_first and not self.inside
        self.done = False
        self._first = True

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.done:
            return logits
        if self._first:
            self._first = False  # the prompt: nothing to consume
            if self.open_first:
                if self.budget is None:
                    self.done = True  # nothing to count afterwards
                return self._only(self.start, logits)
        else:
            self._consume(int(tokens[-1].item()))  # type: ignore[arg-type]
            if self.done:
                return logits
        if self.budget is None:
            self.done = True
            return logits
        if self.inside and self.spent >= self.budget:
            return self._only(self.end, logits)
        return logits

    @staticmethod
    def _only(token: int, logits: mx.array) -> mx.array:
        return mx.where(mx.arange(logits.shape[-1]) == token, logits, -mx.inf)

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
        return f"ReasoningSection(spent={self.spent}/{self.budget}, inside={self.inside})"
