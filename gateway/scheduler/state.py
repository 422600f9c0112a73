"""What other threads and layers read of the scheduler: frozen values, never its queues.

The dispatcher's queues, gates and slot live on the event loop and change there. The
inference thread asks for pacing between passes (``gateway.scheduler.pacing.Pacing``);
had it iterated a queue (a deque) or a gate's holders (a dict) while the loop changed them, it
would raise ``RuntimeError: ... mutated during iteration`` and fail the running job. So after
every change the loop computes what the pacing needs as plain immutable values, a
``SlotState``, and publishes it with one attribute assignment (atomic in Python); the
inference thread reads that attribute once per question and nothing else of the scheduler.
A gate that opens with time is kept as the moment it opens, which the reader compares with
its own clock reading.

Peers and ``/health`` read a ``SchedulerView`` instead (on the loop): whether the dispatcher
runs, and how busy the slot is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.scheduler import pacing
from gateway.scheduler.pacing import ChunkBudget


@dataclass(frozen=True)
class SlotState:
    """The slot and the gates as the dispatcher last left them, as the pacing needs them."""

    runs_user_job: bool = False  # the slot holds a user's request (not a typing hint's prefill)
    runs_hint: bool = False  # the slot holds a typing hint's prefill
    stopping: bool = False  # the running job was asked to pause or to stop
    user_waiting: bool = False  # a user job waits for the slot (a withdrawn one does not)
    user_running: bool = False  # a user job holds the slot (the pipeline lock's own flag)
    last_user_end: float = float("-inf")  # when a user job last left the slot
    typing_until: float = float("-inf")  # the typing lock is closed until then
    freeze_held: bool = False  # a typing hint holds the prefill freeze

    def user_may_arrive(self, now: float) -> bool:
        """``pacing.user_may_arrive`` at ``now``: a user job waits, types or was here lately."""
        return pacing.user_may_arrive(
            user_waiting=self.user_waiting,
            typing=now < self.typing_until or self.freeze_held,
            since_user_job=0.0 if self.user_running else now - self.last_user_end,
        )

    def chunk_budget(self, base: int, now: float) -> ChunkBudget:
        """The running job's next prefill chunk (``pacing.prefill_chunk_budget``)."""
        return pacing.prefill_chunk_budget(
            base,
            runs_user_job=self.runs_user_job,
            runs_hint=self.runs_hint,
            may_arrive=self.user_may_arrive(now),
        )

    def pause_grain(self, now: float, user_first_token: float | None) -> float | None:
        """The running job's longest compute between pause points (``pacing.pause_grain``)."""
        return pacing.pause_grain(
            runs_user_job=self.runs_user_job,
            may_arrive=self.user_may_arrive(now),
            user_first_token=user_first_token,
        )


@dataclass(frozen=True)
class SchedulerView:
    """The scheduler as peers and ``/health`` see it."""

    alive: bool  # the dispatcher runs (``Scheduler.alive``): else no job leaves its queue
    slot_busy: bool  # a job holds the slot
    idle: bool  # no job holds the slot and none waits (the hint lane included)
    queued: Mapping[str, int]  # waiting jobs per class label (user, task, background)
