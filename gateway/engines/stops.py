"""Stop strings in streamed text: cut at the first stop, and never emit a stop's beginning early."""

from __future__ import annotations

from collections.abc import Sequence


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker`` (text to hold back)."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class StopMatcher:
    """Feeds decoded text segments; emits only text that cannot be the start of a stop string.

    OpenAI's ``stop`` excludes the stop text from the output, so a stream must hold back any
    tail that might still grow into a stop string, and release it once it cannot.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.matched: str | None = None  # the stop string that was reached

    def feed(self, text: str) -> tuple[str, bool]:
        """Add ``text``; return (text safe to emit, whether a stop string was reached)."""
        if not self.stops:
            return text, False
        self._pending += text
        hits = [(i, s) for s in self.stops if (i := self._pending.find(s)) >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            emit, self._pending = self._pending[:at], ""
            return emit, True
        hold = self._held_back_length()
        cut = len(self._pending) - hold
        emit, self._pending = self._pending[:cut], self._pending[cut:]
        return emit, False

    def flush(self) -> str:
        """The held-back text, released when the generation ends without a stop."""
        rest, self._pending = self._pending, ""
        return rest

    def _held_back_length(self) -> int:
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(stop[:size]):
                    longest = size
                    break
        return longest
