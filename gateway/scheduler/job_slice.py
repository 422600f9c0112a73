"""One job's turn in the slot, on the inference thread: advanced a step at a time.

The slot runs a batch of jobs (one inference; several sequences decoding together, issue
33): the inference thread advances each in turn, one step (a token, a prefill chunk) per
turn, until it ends, is cancelled or is preempted (``gateway.scheduler.slot``). A job alone
in the slot is a batch of one: its steps follow one another as they always did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import StrEnum

from gateway.scheduler.handoff import EventHandoff
from gateway.scheduler.jobs import Job
from gateway.scheduler.pacing import PASS_POINT
from gateway.seam.backend import Priority, TokenEvent

log = logging.getLogger(__name__)


class SliceEnd(StrEnum):
    DONE = "done"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    FAILED = "failed"


class JobSlice:
    """A job's time in the slot, from taking it to leaving it (done, cancelled, failed or
    paused): its events go to the loop through a handoff of its own."""

    def __init__(
        self,
        job: Job,
        loop: asyncio.AbstractEventLoop,
        token_flush: float,
        note_first_token: Callable[[float], None],
    ) -> None:
        self.job = job
        job.memory_released = job.paused_inside_pass = False  # resuming: it holds it again
        # A token that follows a token may wait for the next one (EventHandoff: fewer
        # wake-ups of the loop at a GPU's pace); the first token of a slice never waits.
        self.handoff = EventHandoff(loop, job.deliver, token_flush)
        self.after_token = False
        # A user job's first token, timed from its slot (the pace of the shortest lately).
        self.timing_first_token = runs_user_job(job) and job.preemptions == 0
        self.note_first_token = note_first_token
        self.started = time.perf_counter()
        self.inside_pass = False
        self.gave = ""  # the type of the last event handed on (``turn_trace``)

    def advance(self) -> SliceEnd | None:
        """Run the job to its next event (a token, a prefill chunk), or to its end: None
        while it goes on. Events are handed on; a job's failure ends it, never the slot."""
        job = self.job
        try:
            if job.steps is None:
                job.steps = iter(job.spec.work())
            while True:
                if job.cancel_requested:
                    close_steps(job)
                    return SliceEnd.CANCELLED
                if job.preempt_requested and (job.may_pause_inside_pass or not self.inside_pass):
                    job.preempt_requested = False
                    job.paused_inside_pass = self.inside_pass
                    job.set_aside()
                    where = "inside a pass" if self.inside_pass else "between passes"
                    log.debug("job %s (%s) paused %s", job.id, lane(job), where)
                    return SliceEnd.PREEMPTED
                try:
                    event = next(job.steps)
                except StopIteration:
                    return SliceEnd.DONE
                self.inside_pass = event is PASS_POINT
                if self.inside_pass:  # only a point to pause at: the pass goes on
                    continue
                self._hand_on(event)
                return None
        except Exception as exc:  # an engine failure ends this job, never the scheduler
            log.exception("job %s failed", job.id)
            job.error = exc
            close_steps(job)
            return SliceEnd.FAILED

    def end(self) -> float:
        """Hand on what is left, before the loop hears that the job left; the seconds it
        held the slot."""
        self.handoff.flush()
        return time.perf_counter() - self.started

    def _hand_on(self, event: object) -> None:
        self.gave = type(event).__name__
        is_token = isinstance(event, TokenEvent)
        if is_token and self.timing_first_token:
            self.note_first_token(time.perf_counter() - self.started)
            self.timing_first_token = False
        self.handoff.put(event, defer=is_token and self.after_token)
        self.after_token = is_token


HINT_LANE = "hint"  # the hint queue's label (metrics, snapshot)


def runs_user_job(job: Job | None) -> bool:
    return job is not None and job.priority is Priority.USER and not job.hint


def lane(job: Job) -> str:
    return HINT_LANE if job.hint else job.priority.label


def close_steps(job: Job) -> None:
    close = getattr(job.steps, "close", None)
    if close is not None:
        close()
