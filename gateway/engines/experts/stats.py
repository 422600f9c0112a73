"""Counts of a streamed tier's expert cache, and the listener that carries them further.

The engine knows nothing of Prometheus: each bank reports to an ``ExpertStats``, which
keeps totals (for ``/health``) and calls an optional listener (the app's wiring turns it
into metric families). Called on the inference thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class ExpertListener(Protocol):
    def lookups(self, hits: int, misses: int) -> None: ...

    def read(self, nbytes: int, seconds: float) -> None: ...


@dataclass
class ExpertStats:
    """Totals since the tier's start (across loads); ``listener`` sees every event."""

    listener: ExpertListener | None = None
    hits: int = 0
    misses: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0
    reads: int = 0

    def lookups(self, hits: int, misses: int) -> None:
        self.hits += hits
        self.misses += misses
        if self.listener is not None:
            self.listener.lookups(hits, misses)

    def read(self, nbytes: int, seconds: float) -> None:
        self.bytes_read += nbytes
        self.read_seconds += seconds
        self.reads += 1
        if self.listener is not None:
            self.listener.read(nbytes, seconds)

    @property
    def hit_ratio(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None

    def as_dict(self) -> dict[str, Any]:
        ratio = self.hit_ratio
        return {
            "hits": self.hits,
            "misses": self.misses,
            "hit_ratio": round(ratio, 4) if ratio is not None else None,
            "bytes_read": self.bytes_read,
            "read_seconds": round(self.read_seconds, 3),
        }


@dataclass(frozen=True)
class CallbackListener:
    """A listener from two functions (the app's metric families, a test's lists)."""

    on_lookups: Callable[[int, int], None]
    on_read: Callable[[int, float], None]

    def lookups(self, hits: int, misses: int) -> None:
        self.on_lookups(hits, misses)

    def read(self, nbytes: int, seconds: float) -> None:
        self.on_read(nbytes, seconds)
