"""Speculative decoding's two halves outside the model: who drafts, and whether it pays.

A drafter guesses the tokens that come next (``PromptLookup``: from the text itself;
``DraftModel``: a small model with the same tokenizer); the decode loop verifies a guess in
one pass of the model (``gateway.engines.mlx_decode``). A pass over k+1 tokens reads the
weights once, as a step over one does, but it computes k+1 positions: on a GPU nearly free,
on a CPU not quite (a pass over a few tokens costs more than one step, though far less than a
step per token: OpenBLAS multiplies them as one matrix).
So ``DraftPolicy`` measures what each verification saved against plain steps at the
runner's measured pace, and stops drafting while it does not pay: free chat, whose guesses
are mostly wrong, then decodes as it would without drafting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# The first draft's length, and the bounds of the adaptive one: it doubles after a draft
# that was accepted whole and falls back to what was accepted after one that was not.
START_LENGTH = 4
MIN_LENGTH = 2
# Drafting rests this many steps when it stops paying, twice as long each time it is tried
# again and still does not pay (up to ``MAX_REST_STEPS``).
REST_STEPS = 16
MAX_REST_STEPS = 256
# A lookup that finds nothing leaves the step unqueued (its token must be read to look
# it up); this many in a row and drafting rests for as many steps, pipelined again, and
# twice as long each time the lookups after a rest find nothing again (up to
# ``MAX_REST_STEPS``; a verified draft starts the series over). On a GPU an unqueued step
# costs its host work on top of the pass: free chat with a fixed rest lost ~15% there.
MISSES_BEFORE_REST = 8
# How much each verification weighs in the running estimate of what drafting saves (which
# starts at zero: one unlucky draft does not stop drafting), and how far below zero, in decode
# steps, the estimate may fall before drafting rests.
GAIN_WEIGHT = 0.3
LOSS_STEPS = 0.25
# A drafter whose guess costs this share of a model step or more cannot pay even when every
# guess is right (k guesses and a verifying pass, about a step, against k + 1 steps): it
# rests the longest after its first draft, not the doubling series from ``REST_STEPS``. A
# draft model does on a GPU, where a small model's step costs about a large one's (both
# are bound by per-layer launch and graph costs, not by reading their weights).
HOPELESS_GUESS_SHARE = 0.9


class Drafter(Protocol):
    """Guesses what comes next. ``method`` names it in metrics ("lookup", "draft_model")."""

    method: str
    # What one guess cost at the last proposal; None where guessing costs next to nothing
    # (a lookup in the text).
    seconds_per_guess: float | None

    def propose(self, history: Sequence[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens expected after ``history`` (the prompt and the output so
        far, the last token sampled but not yet fed to the model)."""
        ...

    def finish(self) -> None:
        """The generation ended (what it holds may serve the next)."""
        ...


@dataclass
class DraftCounts:
    """One generation's drafted tokens and, of them, those the model accepted."""

    drafted: int = 0
    accepted: int = 0


class DraftPolicy:
    """How long the next draft is, and whether to draft at all, from what drafting saved."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length
        self.length = min(START_LENGTH, max_length)
        self.counts = DraftCounts()
        self._rest = 0  # steps left without drafting
        self._rest_after_loss = REST_STEPS
        self._gain = 0.0  # seconds saved per verification, smoothed
        self._misses = 0
        self._rest_after_misses = MISSES_BEFORE_REST

    @property
    def drafting(self) -> bool:
        return self._rest == 0

    def stepped(self, looked_up: bool) -> None:
        """A plain step ran: while resting, or after a lookup that found nothing."""
        if self._rest:
            self._rest -= 1
        elif looked_up:
            self._misses += 1
            if self._misses >= MISSES_BEFORE_REST:
                self._misses, self._rest = 0, self._rest_after_misses
                self._rest_after_misses = min(self._rest_after_misses * 2, MAX_REST_STEPS)

    def verified(
        self,
        drafted: int,
        accepted: int,
        seconds: float,
        step_seconds: float,
        seconds_per_guess: float | None = None,
    ) -> None:
        """A draft of ``drafted`` tokens was verified in ``seconds``; ``accepted`` of them
        were right, and the pass gave one token more. Plain steps would have taken
        ``step_seconds`` for each of those tokens; one guess took ``seconds_per_guess``
        (None: next to nothing)."""
        self.counts.drafted += drafted
        self.counts.accepted += accepted
        self._misses = 0
        self._rest_after_misses = MISSES_BEFORE_REST
        if (
            seconds_per_guess is not None
            and step_seconds > 0
            and seconds_per_guess >= HOPELESS_GUESS_SHARE * step_seconds
        ):
            self._rest, self._gain = MAX_REST_STEPS, 0.0
            self.length = min(START_LENGTH, self.max_length)
            return
        self.length = (
            min(self.length * 2, self.max_length)
            if accepted == drafted
            else max(MIN_LENGTH, min(accepted + 1, self.max_length))
        )
        saved = (accepted + 1) * step_seconds - seconds
        self._gain += GAIN_WEIGHT * (saved - self._gain)
        if self._gain >= 0:
            self._rest_after_loss = REST_STEPS
        if self._gain >= -LOSS_STEPS * step_seconds:
            return
        self._rest, self._gain = self._rest_after_loss, 0.0
        self._rest_after_loss = min(self._rest_after_loss * 2, MAX_REST_STEPS)
