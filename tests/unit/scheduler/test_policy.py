"""The slot's decisions without threads or a loop: plain jobs, a Gates record, a number for now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gateway.scheduler import policy
from gateway.scheduler.gates import Gates
from gateway.scheduler.jobs import Job, JobKind, JobSpec, JobState
from gateway.scheduler.policy import OnWaiting, SchedulerConfig
from gateway.seam.backend import Priority

USER, TASK, BACKGROUND = Priority.USER, Priority.TASK, Priority.BACKGROUND
AGEING = 60.0
NOW = 10.0  # jobs below arrive at 0-9 s: none has aged


def no_steps() -> Iterator[Any]:
    return iter(())


class PausedGeneration:
    """Steps holding a KV cache they can free (``HoldsMemory``)."""

    holds_memory = True

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        raise StopIteration

    def release_memory(self) -> bool:
        return True


def job(
    priority: Priority = USER,
    at: float = 0.0,
    *,
    name: str = "",
    hint: bool = False,
    session: str | None = None,
    preemptions: int = 0,
    preemptible: bool = True,
    kind: JobKind = JobKind.CHAT,
    state: JobState = JobState.QUEUED,
    started_at: float | None = None,
    holds_memory: bool = False,
) -> Job:
    spec = JobSpec(
        priority, no_steps, kind=kind, preemptible=preemptible, id=name or priority.label
    )
    made = Job.of(spec, submitted_at=at)
    made.hint, made.session = hint, session
    made.preemptions, made.state, made.started_at = preemptions, state, started_at
    if holds_memory:
        made.steps = PausedGeneration()
    return made


def open_gates() -> Gates:
    return Gates(pipeline_grace=0.0, typing_quiet=0.0, freeze_max=5.0)


def lanes(*jobs: Job) -> list[list[Job]]:
    """The slot's lanes in its order (user, task, background, hints), filled with ``jobs``."""
    by_lane: dict[object, list[Job]] = {p: [] for p in Priority}
    by_lane["hint"] = []
    for j in jobs:
        by_lane["hint" if j.hint else j.priority].append(j)
    return list(by_lane.values())


def queues(*jobs: Job) -> dict[Priority, list[Job]]:
    return {p: [j for j in jobs if j.priority is p and not j.hint] for p in Priority}


def pick(*jobs: Job, gates: Gates | None = None, now: float = NOW) -> str | None:
    chosen = policy.pick(lanes(*jobs), gates or open_gates(), now, AGEING)
    return chosen.id if chosen else None


# -- pick ----------------------------------------------------------------------------------


def test_the_most_urgent_class_wins_whatever_its_arrival() -> None:
    assert pick(job(BACKGROUND, 1, name="bg"), job(TASK, 2, name="task")) == "task"
    assert pick(job(TASK, 1, name="task"), job(USER, 9, name="user")) == "user"


def test_first_come_first_served_inside_a_class() -> None:
    assert pick(job(TASK, 5, name="first"), job(TASK, 6, name="second")) == "first"


def test_a_paused_job_resumes_before_its_class_waiting_since_earlier() -> None:
    paused = job(TASK, 50, name="paused", preemptions=1, state=JobState.PREEMPTED)
    # The slot puts a paused job back at its queue's head.
    assert pick(paused, job(TASK, 10, name="queued")) == "paused"


def test_the_hint_lane_sits_between_user_requests_and_task_work() -> None:
    hint = job(USER, 1, name="hint", hint=True)
    assert pick(hint, job(TASK, 0, name="task")) == "hint"
    assert pick(hint, job(USER, 9, name="user")) == "user"


def test_gates_hold_their_classes_and_nothing_else() -> None:
    gates = open_gates()
    gates.user_running = True  # the pipeline lock: background work waits
    assert pick(job(BACKGROUND, 1, name="bg"), gates=gates) is None
    assert pick(job(BACKGROUND, 1, name="bg"), job(TASK, 2, name="task"), gates=gates) == "task"
    frozen = open_gates()
    frozen.freeze_holders["hint-1"] = NOW  # the prefill freeze: only user jobs
    assert pick(job(TASK, 1, name="task"), job(BACKGROUND, 0, name="bg"), gates=frozen) is None
    assert pick(job(TASK, 1), job(USER, 2, name="user"), gates=frozen) == "user"


def test_background_work_that_waited_long_enough_competes_as_a_task() -> None:
    aged = job(BACKGROUND, NOW - AGEING, name="aged")
    assert policy.effective_priority(aged, NOW, AGEING) is TASK
    assert policy.effective_priority(aged, NOW - 0.001, AGEING) is BACKGROUND
    assert pick(aged, job(TASK, NOW - 1, name="task")) == "aged"  # it came first
    assert pick(aged, job(USER, NOW - 1, name="user")) == "user"  # never as a user job
    young = job(BACKGROUND, NOW - 1, name="young")
    assert pick(young, job(TASK, NOW - 0.5, name="task")) == "task"


def test_nothing_waiting_picks_nothing() -> None:
    assert pick() is None


# -- would_wait ----------------------------------------------------------------------------


def would_wait(
    priority: Priority, *waiting: Job, running: Job | None = None, gates: Gates | None = None
) -> bool:
    hints = [j for j in waiting if j.hint]
    return policy.would_wait(priority, queues(*waiting), hints, running, gates or open_gates(), NOW)


def test_an_idle_slot_makes_nobody_wait() -> None:
    assert not any(would_wait(p) for p in Priority)


def test_a_class_waits_behind_its_own_and_more_urgent_classes_only() -> None:
    queued_task = job(TASK)
    assert would_wait(TASK, queued_task) and would_wait(BACKGROUND, queued_task)
    assert not would_wait(USER, queued_task)
    withdrawn = job(USER)
    withdrawn.cancel_requested = True
    assert not would_wait(USER, withdrawn)  # on its way out of the queue


def test_waiting_hints_hold_task_work_but_not_the_user() -> None:
    hint = job(USER, hint=True)
    assert would_wait(TASK, hint)
    assert not would_wait(USER, hint)


def test_a_closed_gate_makes_its_classes_wait() -> None:
    gates = open_gates()
    gates.typing_holders["hint-1"] = NOW  # the typing lock holds background work
    gates.typing_quiet = 2.0
    assert would_wait(BACKGROUND, gates=gates)
    assert not would_wait(TASK, gates=gates)


def test_the_running_job_makes_wait_whoever_cannot_preempt_it() -> None:
    background = job(BACKGROUND, state=JobState.RUNNING)
    assert not would_wait(USER, running=background)  # a user job pauses it
    assert would_wait(TASK, running=background)
    locked = job(BACKGROUND, state=JobState.RUNNING, preemptible=False)  # a model load
    assert would_wait(USER, running=locked)
    assert would_wait(USER, running=job(USER, state=JobState.RUNNING))
    assert not would_wait(USER, running=job(USER, hint=True, state=JobState.RUNNING))


def test_speculation_and_finished_work_make_nobody_wait() -> None:
    speculation = job(USER, kind=JobKind.SPECULATION, state=JobState.RUNNING, preemptible=False)
    assert not would_wait(BACKGROUND, running=speculation)
    assert not would_wait(USER, running=job(USER, state=JobState.DONE))


# -- on_waiting ----------------------------------------------------------------------------


def on_waiting(running: Job | None, *waiting: Job) -> OnWaiting:
    return policy.on_waiting(running, lanes(*waiting), queues(*waiting)[USER])


def test_preemptible_work_pauses_for_a_waiting_user_job_only() -> None:
    for running in (job(TASK), job(BACKGROUND), job(USER, hint=True)):
        assert on_waiting(running, job(USER)) is OnWaiting.PAUSE
        assert on_waiting(running, job(TASK), job(USER, hint=True)) is OnWaiting.KEEP
    assert on_waiting(job(TASK, preemptible=False), job(USER)) is OnWaiting.KEEP
    assert on_waiting(job(USER), job(USER)) is OnWaiting.KEEP  # user jobs take turns
    withdrawn = job(USER)
    withdrawn.cancel_requested = True
    assert on_waiting(job(TASK), withdrawn) is OnWaiting.KEEP
    assert on_waiting(None, job(USER)) is OnWaiting.KEEP


def test_speculation_gives_way_to_anything_and_once() -> None:
    speculation = job(USER, kind=JobKind.SPECULATION, preemptible=False)
    assert on_waiting(speculation) is OnWaiting.KEEP
    assert on_waiting(speculation, job(BACKGROUND)) is OnWaiting.CANCEL
    assert on_waiting(speculation, job(USER, hint=True)) is OnWaiting.CANCEL
    speculation.cancel_requested = True
    assert on_waiting(speculation, job(BACKGROUND)) is OnWaiting.KEEP  # already asked


# -- expiry and deadlines ------------------------------------------------------------------


def test_jobs_that_never_started_expire_after_the_longest_wait() -> None:
    old, fresh = job(TASK, NOW - 30, name="old"), job(TASK, NOW - 29.9, name="fresh")
    paused = job(USER, NOW - 100, name="paused", preemptions=1, state=JobState.PREEMPTED)
    hint = job(USER, NOW - 31, name="hint", hint=True)
    expired = policy.expired(lanes(old, fresh, paused, hint), NOW, 30.0)
    assert [j.id for j in expired] == ["old", "hint"]


def test_the_next_deadline_is_the_nearest_future_change() -> None:
    config = SchedulerConfig(max_queued={}, max_queue_wait=30.0, ageing_after=AGEING)
    gates = open_gates()
    assert policy.next_deadline(lanes(), gates, NOW, config) is None
    task = job(TASK, NOW - 10)
    assert policy.next_deadline(lanes(task), gates, NOW, config) == NOW + 20  # its expiry
    gates.last_user_end, gates.pipeline_grace = NOW, 0.5
    assert policy.next_deadline(lanes(task), gates, NOW, config) == NOW + 0.5  # the lock opens
    gates.last_user_end = float("-inf")
    # Background work also wakes the slot when it ages (here before it would expire).
    short = SchedulerConfig(max_queued={}, max_queue_wait=100.0, ageing_after=5.0)
    background = job(BACKGROUND, NOW - 1)
    assert policy.next_deadline(lanes(background), gates, NOW, short) == NOW + 4
    # A paused job does not expire; past deadlines are not waited for.
    paused = job(TASK, NOW - 10, preemptions=1, state=JobState.PREEMPTED)
    assert policy.next_deadline(lanes(paused), gates, NOW, config) is None
    assert policy.next_deadline(lanes(job(TASK, NOW - 40)), gates, NOW, config) is None


# -- paused memory, the hint lane, retry-after -------------------------------------------


def paused(name: str, started_at: float, holds_memory: bool = True) -> Job:
    return job(
        BACKGROUND,
        name=name,
        preemptions=1,
        state=JobState.PREEMPTED,
        started_at=started_at,
        holds_memory=holds_memory,
    )


def test_paused_jobs_beyond_the_bound_release_memory_the_oldest_first() -> None:
    newer, older, oldest = paused("newer", 30), paused("older", 20), paused("oldest", 10)
    without = paused("nothing to give", 0, holds_memory=False)
    assert policy.memory_to_release(lanes(newer, older, oldest, without), 3) == []
    released = policy.memory_to_release(lanes(newer, older, oldest, without), 1)
    assert [j.id for j in released] == ["oldest", "older"]
    oldest.memory_released = True  # already given: counts no more
    assert [j.id for j in policy.memory_to_release(lanes(newer, older, oldest), 1)] == ["older"]
    queued = job(BACKGROUND, holds_memory=True)  # not paused: it holds nothing yet
    assert policy.memory_to_release(lanes(queued, newer), 0) == [newer]


def test_a_job_paused_inside_a_pass_keeps_its_memory_and_only_where_there_was_room() -> None:
    newer, older = paused("newer", 30), paused("older", 20)
    older.paused_inside_pass = True  # the rest of its pass reads its cache: not released
    assert [j.id for j in policy.memory_to_release(lanes(newer, older), 1)] == ["newer"]
    assert policy.room_to_keep_memory(lanes(newer), 2)  # one more may keep it
    assert not policy.room_to_keep_memory(lanes(newer, older), 2)
    assert not policy.room_to_keep_memory(lanes(), 0)


def hints(*sessions: str | None, paused_first: int = 0) -> list[Job]:
    return [
        job(USER, index, name=f"h{index}", hint=True, session=session,
            preemptions=1 if index < paused_first else 0)
        for index, session in enumerate(sessions)
    ]  # fmt: skip


def test_a_new_hint_replaces_its_sessions_queued_hint() -> None:
    lane = hints("a", "b", "a")
    room = policy.hint_room(lane, "a", max_queued_hints=8)
    assert [j.id for j in room.replaced] == ["h0", "h2"] and room.dropped == []
    assert policy.hint_room(lane, None, 8).replaced == []  # no session: nothing to replace


def test_a_full_hint_lane_drops_its_oldest_never_a_paused_one() -> None:
    room = policy.hint_room(hints("a", "b", "c", "d"), "e", max_queued_hints=3)
    assert [j.id for j in room.dropped] == ["h0", "h1"]  # three left with the new one
    room = policy.hint_room(hints("a", "b", "c", "d"), "d", max_queued_hints=3)
    assert [j.id for j in room.replaced] == ["h3"] and [j.id for j in room.dropped] == ["h0"]
    room = policy.hint_room(hints("a", "b", "c", paused_first=2), "e", max_queued_hints=1)
    assert [j.id for j in room.dropped] == ["h2"]  # the paused ones stay, over the bound


def test_retry_after_grows_with_the_queue_within_bounds() -> None:
    assert policy.retry_after(5.0, queued=3, spread=1.0) == 20
    assert policy.retry_after(5.0, queued=3, spread=0.75) == 15
    assert policy.retry_after(0.01, queued=0, spread=0.75) == 1
    assert policy.retry_after(60.0, queued=64, spread=1.25) == policy.MAX_RETRY_AFTER
