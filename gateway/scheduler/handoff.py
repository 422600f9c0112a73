"""Events from the inference thread to the event loop, one wake-up for all that are waiting.

``loop.call_soon_threadsafe`` per token writes to the loop's self-pipe each time (a system
call on the inference thread, a wake-up of the loop), even when the loop has not yet taken
the previous token. Here the inference thread appends to a queue and wakes the loop only
when no wake-up is pending: a loop that keeps up is woken once a token, as before; a loop
that falls behind (a GPU's pace, a busy host) takes every waiting token in one wake-up.
Order is kept, and every event is delivered before anything the loop is asked to do later
from the same thread (the job's end), since each wake-up drains what was appended before it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class EventHandoff:
    """``put`` on any thread; ``deliver`` runs on ``loop``, in order, for each event."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._waiting: deque[Any] = deque()
        self._lock = threading.Lock()
        self._wake_pending = False

    def put(self, event: Any) -> None:
        self._waiting.append(event)
        with self._lock:
            if self._wake_pending:
                return  # the pending wake-up will take it
            self._wake_pending = True
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            # Cleared before draining: an event appended from here on is either taken below
            # or schedules a wake-up of its own (which may then find nothing: harmless).
            self._wake_pending = False
        waiting = self._waiting
        while waiting:
            self._deliver(waiting.popleft())
