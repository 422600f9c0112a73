"""How many prompt tokens a prefill computes between two checks for preemption.

A chunk is the longest a waiting user job can be kept behind a running prefill, and each
chunk boundary costs a little throughput (a GPU wants its width; a quantized CPU model
dequantizes every layer once per chunk). So the size follows who may arrive:

* the running job is the user's own request: nothing may preempt it, so chunks are large;
* a typing hint's prefill: the engine's own size (the request it prepares waits for it to
  finish, so it must not be slowed; an unrelated request pauses it at the next chunk);
* task or background work while a user job is waiting or the user is typing (a request is
  likely within seconds): a quarter of the engine's size;
* other task or background work: half of it. A user request may arrive unannounced at any
  moment, and on a CPU the engine's own chunk at a long context takes ~0.2 s here (measured
  by ``gateway bench priority``'s prefill row), the whole of a short chat's prefill.

The scheduler checks between chunks and between decode steps (``Scheduler._run_slice``).
"""

from __future__ import annotations

LARGE_FACTOR = 2  # bounded: a chunk's attention memory grows with its length
SMALL_DIVISOR = 4
BACKGROUND_DIVISOR = 2
MIN_CHUNK_TOKENS = 16


def prefill_chunk_tokens(
    base: int, *, runs_user_job: bool, user_waiting: bool, typing: bool, runs_hint: bool = False
) -> int:
    """The next chunk's size for an engine whose own chunk is ``base`` tokens."""
    if runs_user_job:
        return base * LARGE_FACTOR
    if runs_hint:
        return base
    if user_waiting or typing:
        return max(MIN_CHUNK_TOKENS, base // SMALL_DIVISOR)
    return max(MIN_CHUNK_TOKENS, base // BACKGROUND_DIVISOR)
