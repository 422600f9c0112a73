"""The three gates that hold work back instead of a sleep (``shared/MISSION.md`` point 2).

* pipeline lock: while a ``user`` job runs (not a typing hint's prefill), and for a short
  grace after it, no ``background`` job starts (a multi-step user pipeline is not
  interleaved with background work);
* prefill freeze: while a typing pre-prefill is queued, computing or ready, only ``user``
  jobs may take the slot, so the warmed cache is not pushed out before it is used; but for
  at most ``freeze_max`` seconds after the hint's last update: a hint nobody follows up must
  not hold task and background work until it expires (the warm cache stays in the store);
* typing lock: after a typing hint, ``background`` jobs wait until the user has been quiet
  for a while (which also lets the machine cool before the real request); the request a
  hint announced, when it comes, ends that hint's typing (a hinted task is not held by its
  own keystrokes), and so does the client withdrawing its hint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.seam.backend import Priority

PIPELINE_LOCK = "pipeline_lock"
PREFILL_FREEZE = "prefill_freeze"
TYPING_LOCK = "typing_lock"
GATE_NAMES = (PIPELINE_LOCK, PREFILL_FREEZE, TYPING_LOCK)

# Which priority classes each gate holds back.
HELD_BY = {
    PIPELINE_LOCK: frozenset({Priority.BACKGROUND}),
    PREFILL_FREEZE: frozenset({Priority.TASK, Priority.BACKGROUND}),
    TYPING_LOCK: frozenset({Priority.BACKGROUND}),
}


@dataclass
class Gates:
    """Gate state; times are the scheduler clock's (monotonic seconds)."""

    pipeline_grace: float
    typing_quiet: float
    freeze_max: float = 5.0
    user_running: bool = False
    last_user_end: float = float("-inf")
    # Hint id -> its last keystroke (the hint posted); a request using the hint removes it.
    typing_holders: dict[str, float] = field(default_factory=dict)
    # Hint id -> when it last held the freeze (posted, or updated by a newer draft).
    freeze_holders: dict[str, float] = field(default_factory=dict)

    def typing_ends(self) -> float:
        return max(self.typing_holders.values(), default=float("-inf")) + self.typing_quiet

    def note_typing(self, holder: str, now: float) -> None:
        # Keystrokes older than the quiet time hold nothing any more: forget them.
        for old in [h for h, t in self.typing_holders.items() if t + self.typing_quiet <= now]:
            del self.typing_holders[old]
        self.typing_holders[holder] = now

    def freeze_ends(self) -> float:
        return max(self.freeze_holders.values(), default=float("-inf")) + self.freeze_max

    def closed(self, now: float) -> dict[str, bool]:
        return {
            PIPELINE_LOCK: self.user_running or now < self.last_user_end + self.pipeline_grace,
            PREFILL_FREEZE: now < self.freeze_ends(),
            TYPING_LOCK: now < self.typing_ends(),
        }

    def holds(self, priority: Priority, now: float) -> list[str]:
        """The names of the closed gates that hold back a job of ``priority``."""
        return [
            name for name, shut in self.closed(now).items() if shut and priority in HELD_BY[name]
        ]

    def next_change(self, now: float) -> float | None:
        """When a time-based gate will open next, if one is closed."""
        times = [
            t
            for t in (
                self.last_user_end + self.pipeline_grace,
                self.typing_ends(),
                self.freeze_ends(),
            )
            if t > now
        ]
        return min(times) if times else None


class TypingGates:
    """The typing hints' signals to the gates (``HintService`` holds it), as a
    handle: each changes the gates on the event loop, then calls ``changed`` (the scheduler
    republishes its state and wakes its dispatcher)."""

    def __init__(
        self, gates: Gates, clock: Callable[[], float], changed: Callable[[], None]
    ) -> None:
        self._gates = gates
        self._clock = clock
        self._changed = changed

    def note_typing(self, holder: str) -> None:
        """A typing hint (``holder``) arrived: (re)close the typing lock."""
        self._gates.note_typing(holder, self._clock())
        self._changed()

    def end_typing(self, holder: str) -> None:
        """The request ``holder`` announced has come: its keystrokes hold nothing more."""
        self._gates.typing_holders.pop(holder, None)
        self._changed()

    def hold_prefill_freeze(self, holder: str) -> None:
        """(Re)close the prefill freeze for ``holder``, for at most ``freeze_max``."""
        self._gates.freeze_holders[holder] = self._clock()
        self._changed()

    def release_prefill_freeze(self, holder: str) -> None:
        self._gates.freeze_holders.pop(holder, None)
        self._changed()
