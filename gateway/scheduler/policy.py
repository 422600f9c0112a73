"""The slot's decisions, as pure functions of its queues, its gates and a clock reading.

The dispatcher (``gateway.scheduler.slot``) owns the state and the threads, like TGI's queue
task; what it decides is here: which job takes the slot next, whether a class would wait,
when to wake up, which waiting jobs have expired, what a running job does when someone
waits, which paused jobs give their memory up, which hints make room for a new one, and how
long a refused client should stay away. Nothing here blocks, sleeps, locks or mutates: each
function reads jobs and a time and answers, so every rule is tested with plain jobs and a
number for ``now`` (``tests/unit/scheduler/test_policy.py``).

Ordering, in one place:

* classes first (user < hint lane < task < background), FIFO inside a class: only the first
  job of a queue that no gate holds competes;
* a preempted job resumes first within its class (it was accepted earlier);
* bounded ageing: background work that waited ``ageing_after`` competes as a task, never
  as a user job, so it cannot starve behind steady task traffic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gateway.scheduler.gates import Gates
from gateway.scheduler.jobs import Job, JobKind, JobState
from gateway.seam.backend import Priority

HINT_RANK = 0.5  # the hint lane: after user jobs, before task work
MAX_RETRY_AFTER = 600  # seconds


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits and timings; see ``gateway.config.SchedulerSettings`` for their meaning."""

    max_queued: dict[Priority, int]
    max_queue_wait: float = 300.0
    ageing_after: float = 60.0
    pipeline_grace: float = 0.5
    typing_quiet: float = 2.0
    max_paused_with_memory: int = 4
    prefill_freeze_max: float = 5.0
    max_queued_hints: int = 8
    token_flush: float = 0.005


class OnWaiting(StrEnum):
    """What the running job does while another job waits for the slot."""

    KEEP = "keep"  # runs on
    PAUSE = "pause"  # preempted at its next step; resumes later where it left
    CANCEL = "cancel"  # stopped and not resumed (speculative work)


def effective_priority(job: Job, now: float, ageing_after: float) -> Priority:
    """``job``'s class as it competes now: background work that waited long enough is a task."""
    if job.priority is Priority.BACKGROUND and now - job.submitted_at >= ageing_after:
        return Priority.TASK
    return job.priority


def pick(
    lanes: Iterable[Sequence[Job]], gates: Gates, now: float, ageing_after: float
) -> Job | None:
    """The job that takes the slot next, or None when every waiting job is held by a gate."""
    best: tuple[float, float, int] | None = None
    chosen: Job | None = None
    for queue in lanes:
        for position, job in enumerate(queue):
            effective = effective_priority(job, now, ageing_after)
            if gates.holds(effective, now):
                continue
            # A preempted job resumes first within its class: it was accepted earlier.
            lane = HINT_RANK if job.hint else float(effective)
            rank = (lane, 0.0 if job.preemptions else job.submitted_at, position)
            if best is None or rank < best:
                best, chosen = rank, job
            break  # FIFO inside a class: only its first eligible job competes
    return chosen


def may_join(batch: Sequence[Job], job: Job) -> bool:
    """Whether ``job`` may join the jobs running in the slot now: the same ``batch_key``
    (generations of one model), room for it within its ``batch_size``, and the same class
    side (user jobs with user jobs, the rest with the rest: a background sequence would
    slow the user's decode, and a waiting user pauses background work anyway). A job being
    stopped leaves soon: nothing joins it."""
    key = job.spec.batch_key
    if key is None or job.hint or job.kind is not JobKind.CHAT or not batch:
        return False
    user = job.priority is Priority.USER
    return len(batch) < job.spec.batch_size and all(
        running.spec.batch_key == key
        and (running.priority is Priority.USER) == user
        and not running.hint
        and not (running.preempt_requested or running.cancel_requested)
        for running in batch
    )


def waiting(queue: Iterable[Job]) -> bool:
    """Whether a job in ``queue`` still waits (a withdrawn one is on its way out)."""
    return any(not job.cancel_requested for job in queue)


def paused_by_user_jobs(running: Job) -> bool:
    """Whether a waiting user job pauses ``running``: task, background and hint work does."""
    return running.preemptible and (running.priority is not Priority.USER or running.hint)


def would_wait(
    priority: Priority,
    queues: Mapping[Priority, Sequence[Job]],
    hints: Sequence[Job],
    running: Job | None,
    gates: Gates,
    now: float,
) -> bool:
    """Whether a job of ``priority`` submitted now would wait for the slot: a job of its
    class or a higher one is waiting, a gate holds it, or the running job is one it cannot
    preempt. (Peers: a request that would wait here may run on a peer.)"""
    ahead = any(waiting(queue) for p, queue in queues.items() if p <= priority)
    if ahead or (priority is not Priority.USER and waiting(hints)):
        return True
    if gates.holds(priority, now):
        return True
    if running is None or running.finished or running.kind == JobKind.SPECULATION:
        return False
    return not (priority is Priority.USER and paused_by_user_jobs(running))


def on_waiting(
    running: Job | None, lanes: Sequence[Sequence[Job]], user_queue: Sequence[Job]
) -> OnWaiting:
    """What ``running`` does now: speculation gives way to anything waiting and is not
    resumed; task, background and hint work pauses for a waiting user job."""
    if running is None:
        return OnWaiting.KEEP
    if running.kind == JobKind.SPECULATION:
        if not running.cancel_requested and any(waiting(queue) for queue in lanes):
            return OnWaiting.CANCEL
        return OnWaiting.KEEP
    if paused_by_user_jobs(running) and waiting(user_queue):
        return OnWaiting.PAUSE
    return OnWaiting.KEEP


def expired(lanes: Iterable[Sequence[Job]], now: float, max_queue_wait: float) -> list[Job]:
    """Jobs that waited ``max_queue_wait`` without ever starting (a paused job never expires:
    it was accepted and has begun), in queue order."""
    return [
        job
        for queue in lanes
        for job in queue
        if job.preemptions == 0 and now - job.submitted_at >= max_queue_wait
    ]


def next_deadline(
    lanes: Iterable[Sequence[Job]], gates: Gates, now: float, config: SchedulerConfig
) -> float | None:
    """When something changes without a submit: a gate opens, a job expires or ages."""
    deadlines = []
    gate_change = gates.next_change(now)
    if gate_change is not None:
        deadlines.append(gate_change)
    for queue in lanes:
        for job in queue:
            if job.preemptions == 0:
                deadlines.append(job.submitted_at + config.max_queue_wait)
            if job.priority is Priority.BACKGROUND:
                deadlines.append(job.submitted_at + config.ageing_after)
    future = [d for d in deadlines if d > now]
    return min(future) if future else None


def memory_to_release(lanes: Iterable[Sequence[Job]], max_paused_with_memory: int) -> list[Job]:
    """Paused jobs beyond ``max_paused_with_memory`` that still hold engine memory, the ones
    that started longest ago first: they give it up and recompute it on resume. A job paused
    inside a pass cannot (the rest of the pass reads its cache); it was paused there only
    while there was room (``room_to_keep_memory``)."""
    holding = _holding_memory(lanes)
    excess = len(holding) - max_paused_with_memory
    if excess <= 0:
        return []
    releasable = sorted(
        (job for job in holding if not job.paused_inside_pass),
        key=lambda job: job.started_at or 0.0,
    )
    return releasable[:excess]


def room_to_keep_memory(lanes: Iterable[Sequence[Job]], max_paused_with_memory: int) -> bool:
    """Whether one more paused job may keep its engine memory (may pause inside a pass)."""
    return len(_holding_memory(lanes)) < max_paused_with_memory


def _holding_memory(lanes: Iterable[Sequence[Job]]) -> list[Job]:
    return [
        job
        for queue in lanes
        for job in queue
        if job.state is JobState.PREEMPTED and job.holds_memory and not job.memory_released
    ]


@dataclass(frozen=True)
class HintRoom:
    """Hints to withdraw before a new one joins the lane."""

    replaced: list[Job]  # the same session's queued hints: the newest draft is the best
    dropped: list[Job]  # the oldest waiting ones beyond the lane's bound


def hint_room(hints: Sequence[Job], session: str | None, max_queued_hints: int) -> HintRoom:
    """Make room for a new hint of ``session``: a hint that has begun (was paused) is never
    dropped, so the lane may stay over its bound while only those are left."""
    replaced = [job for job in hints if session is not None and job.session == session]
    remaining = [job for job in hints if job not in replaced]
    droppable = [job for job in remaining if job.preemptions == 0]
    excess = max(0, len(remaining) - max_queued_hints + 1)
    return HintRoom(replaced, droppable[:excess])


def retry_after(mean_job_seconds: float, queued: int, spread: float) -> int:
    """Seconds a client refused by a full queue should wait: the queue's expected drain time
    (``queued`` jobs ahead plus its own), times ``spread`` (0.75-1.25, random in the slot) so
    that clients refused together do not all return together; 1 s to 10 minutes."""
    seconds = mean_job_seconds * (queued + 1) * spread
    return min(max(1, math.ceil(seconds)), MAX_RETRY_AFTER)
