"""What the scheduler reports as it works, and to whom: an observer it is given.

The scheduler knows nothing of Prometheus; the gateway's metrics (``gateway.metrics``)
implement this protocol, and a test may pass anything with these methods. A *lane* is a
priority class's label (``user``, ``task``, ``background``) or ``hint``, the typing-hint
queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class SchedulerObserver(Protocol):
    """Receives the scheduler's events; each call is cheap and never raises."""

    def job_rejected(self, lane: str, reason: str) -> None:
        """A job was turned away: ``queue_full`` or ``queue_timeout``."""
        ...

    def job_waited(self, lane: str, seconds: float) -> None:
        """A job got the slot for the first time after waiting this long in its queue."""
        ...

    def slot_taken(self) -> None:
        """A job entered the inference slot."""
        ...

    def slot_freed(self, held_seconds: float) -> None:
        """The slot was left after one slice of work that held it this long."""
        ...

    def batch_changed(self, jobs: int) -> None:
        """The slot now runs this many jobs together (0: it is free)."""
        ...

    def job_preempted(self, lane: str, inside_pass: bool) -> None:
        """A job was paused for a user job: inside a pass (``PASS_POINT``) or between two."""
        ...

    def job_cancelled(self, lane: str, stage: str) -> None:
        """A job was cancelled while ``running``, ``queued`` or ``preempted``."""
        ...

    def job_memory_released(self, lane: str) -> None:
        """A paused job's engine state was freed to bound the memory paused jobs hold."""
        ...

    def lanes_changed(self, gates_closed: Mapping[str, bool], depths: Mapping[str, int]) -> None:
        """The gates (closed or not, by name) and the queue depths (by lane) now."""
        ...
