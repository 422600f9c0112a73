"""Events from the inference thread to the event loop, one wake-up for all that are waiting.

``loop.call_soon_threadsafe`` per token writes to the loop's self-pipe each time (a system
call on the inference thread, a wake-up of the loop), even when the loop has not yet taken
the previous token. Here the inference thread appends to a queue and wakes the loop only
when no wake-up is pending: a loop that keeps up is woken once a token, as before; a loop
that falls behind (a GPU's pace, a busy host) takes every waiting token in one wake-up.
Order is kept, and every event is delivered before anything the loop is asked to do later
from the same thread (the job's end), since each wake-up drains what was appended before it.

A GPU decodes a small model's token every 2-4 ms while the loop's work per wake-up (the
stream's chunk, the SSE write) holds the GIL that the inference thread needs to build the
next step: an event ``put`` with ``defer`` may wait for the next one when the loop was woken
less than ``flush_after`` seconds ago. It then waits at most one step (the next ``put``, or
``flush`` when the slice ends), and only at a pace faster than ``flush_after``: a CPU's
40 ms tokens each wake the loop as before.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class EventHandoff:
    """``put`` on any thread; ``deliver`` runs on ``loop``, in order, for each event."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Any], None],
        flush_after: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._deliver = deliver
        self._waiting: deque[Any] = deque()
        self._lock = threading.Lock()
        self._wake_pending = False
        self._flush_after = flush_after
        self._clock = clock
        self._woken_at = -math.inf  # (the producing thread's clock)

    def put(self, event: Any, defer: bool = False) -> None:
        """Hand ``event`` over; with ``defer`` it may wait for the next ``put`` or ``flush``."""
        self._waiting.append(event)
        if defer and self._clock() - self._woken_at < self._flush_after:
            return  # the loop was woken moments ago: the next put or flush wakes it
        self._wake()

    def flush(self) -> None:
        """Wake the loop for whatever is waiting (deferred events at a slice's end)."""
        if self._waiting:
            self._wake()

    def _wake(self) -> None:
        with self._lock:
            if self._wake_pending:
                return  # the pending wake-up will take it
            self._wake_pending = True
        self._woken_at = self._clock()
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            # Cleared before draining: an event appended from here on is either taken below
            # or schedules a wake-up of its own (which may then find nothing: harmless).
            self._wake_pending = False
        waiting = self._waiting
        while waiting:
            self._deliver(waiting.popleft())
