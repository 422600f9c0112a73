"""How long a model's passes take here, and so how the runner cuts them for the scheduler.

Every figure the runner's pacing needs in one place: the pace of the last prefill chunk
(seconds per token, which grows with the context) and of recent decode steps, and from them
the next prefill chunk's length, how many groups of layers a pass is computed in, and
whether a decode step may be queued ahead. The scheduler says who may arrive
(``gateway.scheduler.pacing.Pacing``); this turns that into tokens and stages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.scheduler.pacing import Pacing

# A decode step is computed in groups of layers only if it is longer than this: a step in
# groups is not queued ahead, and a GPU's short steps lose more to that than a user waits
# behind them (H200, Llama-1B shape, steps ~2.9 ms, gateway bench stages: decode at 0.68
# of its speed with a 1 ms grain, 0.75 with 2 ms; bench priority behind decode ~1.02 of
# idle with whole steps). Prefill chunks have no pipelining to lose: any grain.
MIN_STAGED_STEP_SECONDS = 0.005
# A chunk with a time budget (``ChunkBudget.seconds``) is never cut below this: every pass
# reads all the weights once, so a tinier chunk would cost about as long for fewer tokens.
MIN_TIMED_CHUNK_TOKENS = 8


class PassTiming:
    """The measured pace of one runner's passes, and the pacing the scheduler gave it."""

    def __init__(self, device: str, prefill_chunk_tokens: int, pacing: Pacing | None = None):
        self.device = device
        self.prefill_chunk_tokens = prefill_chunk_tokens
        # Who may arrive, as the scheduler sees it. None: always the engine's own chunk,
        # always one step ahead, passes whole.
        self.pacing = pacing
        self.seconds_per_token: float | None = None  # of the last prefill chunk
        self.seconds_per_step: float | None = None  # of decode steps, lately

    def chunk_tokens(self) -> int:
        """The next prefill chunk: the scheduler's budget, its seconds turned into tokens at
        the pace of the last chunk (which grows with the context), rounded down to a power
        of two. Not on CUDA: MLX's CUDA backend compiles kernels for each new chunk shape
        (its length and its position), ~70 ms against ~7 ms for a shape it has seen
        (Llama-1B shape, H200), and chunks whose length followed the clock made nearly every
        chunk new; there the budget's tokens alone decide, so positions recur. The CPU and
        Metal keep the timed chunks (the compile was measured on CUDA only)."""
        if self.pacing is None:
            return self.prefill_chunk_tokens
        budget = self.pacing.chunk_budget(self.prefill_chunk_tokens)
        per_token = self.seconds_per_token
        if budget.seconds is None or not per_token or self.device == "cuda":
            return budget.tokens
        fitting = int(budget.seconds / per_token)
        tokens = max(min(MIN_TIMED_CHUNK_TOKENS, budget.tokens), min(budget.tokens, fitting))
        return 1 << (tokens.bit_length() - 1)

    def decode_ahead(self) -> bool:
        """Whether to queue the next decode step now: as the scheduler says, and never for a
        step computed in stages (a pause there would leave it computing behind the user)."""
        return self.pacing is None or (self.pacing.decode_ahead() and self.step_stages() == 1)

    def stages(self, seconds: float | None) -> int:
        """In how many groups of layers to compute a pass of about ``seconds``: each about the
        scheduler's pause grain; whole without one, or before the pace is known."""
        grain = None if self.pacing is None else self.pacing.pause_grain()
        if not grain or not seconds:
            return 1
        return max(1, math.ceil(seconds / grain))

    def step_stages(self) -> int:
        """The next decode step's groups: whole while steps are short
        (``MIN_STAGED_STEP_SECONDS``)."""
        seconds = self.seconds_per_step
        return self.stages(seconds) if seconds and seconds > MIN_STAGED_STEP_SECONDS else 1

    def pass_stages(self, tokens: Sequence[int] | int) -> int:
        """The groups of a pass over ``tokens`` (a list, or their count)."""
        return self.stages(self.pass_seconds(tokens))

    def pass_seconds(self, tokens: Sequence[int] | int) -> float:
        """About how long a pass over ``tokens`` takes at the measured pace (0: not known):
        the last prefill chunk's time per token, and never less than a decode step."""
        count = tokens if isinstance(tokens, int) else len(tokens)
        per_token, per_step = self.seconds_per_token, self.seconds_per_step
        return max(count * (per_token or 0.0), per_step or 0.0)

    def note_chunk(self, seconds: float, tokens: int) -> None:
        """A prefill chunk's compute (less any time paused inside it)."""
        self.seconds_per_token = seconds / tokens

    def note_step(self, seconds: float) -> None:
        """A decode step's compute (the pace that decides its stages; it grows with the
        context), smoothed: a step read after a pause at a token has computed meanwhile."""
        last = self.seconds_per_step
        self.seconds_per_step = seconds if last is None else (last + seconds) / 2
