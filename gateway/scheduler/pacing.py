"""How much the running job computes between two checks for preemption, by who may arrive.

A waiting user job is kept behind the running job's pass in flight: a prefill chunk, or a
decode step and the step queued ahead of it (pipelining: the next step is queued while the
current one computes, so a device never waits for Python; a job paused there leaves that
step computing beside the user's). Each check costs a little throughput (a GPU wants its
width; every pass reads all the weights), so the grain follows who may arrive:

* the running job is the user's own request: nothing preempts it, so twice the engine's
  chunk, and decode steps queued ahead;
* a typing hint's prefill: the engine's own chunk (the request it prepares waits for it;
  an unrelated request pauses it at the next chunk);
* task or background work while a user may arrive — a user job is waiting, the user is
  typing, or a user job ran within ``USER_ACTIVE_SECONDS`` (someone in a conversation
  sends the next message within minutes, unannounced): a quarter of the engine's chunk, and
  about ``SMALL_CHUNK_SECONDS`` of work (the runner turns that into tokens at its measured
  pace, which slows as the context grows; on CUDA it keeps the tokens, as each new chunk
  shape costs a kernel compile there). On this CPU a 64-token chunk at a ~5,000-token
  context took ~0.2 s, longer than a short chat's whole prefill (``gateway bench priority``'s
  prefill row);
* task or background work with nobody around: the engine's own chunk.

Decode steps are queued ahead unless the running job is about to stop (``decodes_ahead``)
or computes its passes in stages.

A pass is indivisible to the scheduler, and on a slow device one pass is long against a
short chat's whole answer (SmolLM2 float32 on a 2-core CPU: a decode step ~65 ms against
an idle TTFT of ~0.19 s, and a user waited the step in flight plus the one queued ahead).
So work that a user may preempt, while one may arrive, has a ``pause_grain`` (a tenth of a
recent short user job's first token, 1-10 ms): the runner computes a pass longer than that
(at its measured pace) a group of layers at a time, with a point to pause after each group,
and queues no step ahead then. A shorter pass stays whole, and so does a decode step under
5 ms (a GPU's: pipelined, ``MIN_STAGED_STEP_SECONDS`` in the runner). Measured (``gateway
bench priority --runs 10``, side by side with the version before): on this CPU the wait
behind background decoding ~37 ms -> ~2 ms, loaded/idle 1.28 -> 0.96; on an H200 the wait
behind a background prefill chunk 25-54 ms -> 0.4-3.7 ms (medians).

The scheduler checks between chunks, between decode steps and between a pass's stages
(``Scheduler._run_slice``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.seam.backend import BackendEvent


class PassPoint:
    """A point inside one pass of the model (a prefill chunk, a decode step) where the job
    may be paused: while a user may arrive, a runner computes a long background pass a group
    of layers at a time (``Pacing.pause_grain``). It never leaves the inference thread: the
    scheduler checks for a pause there and hands nothing on."""

    __slots__ = ()


PASS_POINT = PassPoint()
# What a job's steps yield on the inference thread: its events, and points to pause at.
JobStep = BackendEvent | PassPoint


@dataclass(frozen=True)
class ChunkBudget:
    """How much one prefill chunk may compute before the scheduler looks again: at most
    ``tokens``, and where ``seconds`` is set, about that long (the runner knows its speed)."""

    tokens: int
    seconds: float | None = None


class Pacing(Protocol):
    """What a runner asks the scheduler between two passes of the running job (the
    scheduler knows who may arrive; the runner, how long its passes take)."""

    def chunk_budget(self, base: int) -> ChunkBudget:
        """The next prefill chunk's budget, for a runner whose own chunk is ``base`` tokens."""
        ...

    def decode_ahead(self) -> bool:
        """Whether the next decode step may be queued before the current one is read."""
        ...

    def pause_grain(self) -> float | None:
        """About how long the running job may compute without a point to pause (None: as
        long as a pass takes; the runner computes a longer pass in groups of layers)."""
        ...


LARGE_FACTOR = 2  # bounded: a chunk's attention memory grows with its length
SMALL_DIVISOR = 4
MIN_CHUNK_TOKENS = 16  # the small chunk's size before the runner has measured its pace
SMALL_CHUNK_SECONDS = 0.04
USER_ACTIVE_SECONDS = 120.0
PAUSE_GRAIN_SECONDS = 0.01  # the most; before any user job was timed
PAUSE_GRAIN_SHARE = 0.1  # of a recent short user job's time to its first token
MIN_PAUSE_GRAIN_SECONDS = 0.001  # each point costs a synchronisation (~0.3 ms on an H200)


def user_may_arrive(*, user_waiting: bool, typing: bool, since_user_job: float) -> bool:
    """Whether a user job is waiting or likely soon (``since_user_job``: seconds since one
    last ran; 0 while one runs)."""
    return user_waiting or typing or since_user_job < USER_ACTIVE_SECONDS


def prefill_chunk_budget(
    base: int, *, runs_user_job: bool, may_arrive: bool, runs_hint: bool = False
) -> ChunkBudget:
    """The next chunk's budget for an engine whose own chunk is ``base`` tokens."""
    if runs_user_job:
        return ChunkBudget(base * LARGE_FACTOR)
    if runs_hint or not may_arrive:
        return ChunkBudget(base)
    return ChunkBudget(max(MIN_CHUNK_TOKENS, base // SMALL_DIVISOR), SMALL_CHUNK_SECONDS)


def decodes_ahead(*, stopping: bool) -> bool:
    """Whether the running job may queue its next decode step before reading the current
    one: not when it is about to stop (paused or cancelled), so nothing computes behind it.
    Refusing it to background work while a user may arrive was measured and dropped (``bench
    priority --runs 10``, 2-core CPU, quiet, side by side): loaded/idle 1.357 vs 1.364 with it
    (medians), the slot wait 51 vs 41 ms — the unpipelined step is longer by its Python part,
    which takes back what not computing beside the user's prefill gains."""
    return not stopping


def pause_grain(
    *, runs_user_job: bool, may_arrive: bool, user_first_token: float | None = None
) -> float | None:
    """About how long background work may compute between pause points: none while no user
    may arrive or the job is the user's own (nothing preempts that; a point inside a pass
    costs a synchronisation and the pipelining of decode steps); else a tenth of the
    shortest recent user job's time to its first token (``user_first_token``, from its
    slot), so the wait behind background work is a small share of what the user waits
    anyway, at any device's speed; at most ``PAUSE_GRAIN_SECONDS`` (a 2-core CPU: a short
    chat's first token ~0.15 s, a decode step ~65 ms in about seven groups), at least
    ``MIN_PAUSE_GRAIN_SECONDS``. (The runner keeps a short decode step whole: there the
    pipelining it would lose costs more than the wait it saves.)"""
    if runs_user_job or not may_arrive:
        return None
    if user_first_token is None:
        return PAUSE_GRAIN_SECONDS
    share = PAUSE_GRAIN_SHARE * user_first_token
    return min(PAUSE_GRAIN_SECONDS, max(MIN_PAUSE_GRAIN_SECONDS, share))
