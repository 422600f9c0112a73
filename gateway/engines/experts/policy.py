"""Which resident expert gives its slot up: least recently used or least frequently used.

Pure bookkeeping over expert ids, one instance per MoE layer. ``touch`` records the experts
a step used (once per step, however many tokens routed to each); ``victim`` picks among the
resident experts that the current step does not use (``pinned``), so a step never loses an
expert it is about to multiply with.

LFU counts every use since the load, also while an expert is out of its slot: an expert
that comes back keeps its history (TurboFieldfare's choice, and the better one when some
experts are popular for a whole conversation). Ties go to the least recently used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol

PolicyName = Literal["lru", "lfu"]


class EvictionPolicy(Protocol):
    name: PolicyName

    def touch(self, experts: Iterable[int]) -> None:
        """One step used these experts."""
        ...

    def victim(self, resident: Iterable[int], pinned: frozenset[int]) -> int:
        """The resident expert to evict; never one in ``pinned``."""
        ...


class LRUPolicy:
    """Evict the expert whose last use is the oldest."""

    name: PolicyName = "lru"

    def __init__(self) -> None:
        self._clock = 0
        self._last: dict[int, int] = {}

    def touch(self, experts: Iterable[int]) -> None:
        self._clock += 1
        for expert in experts:
            self._last[expert] = self._clock

    def victim(self, resident: Iterable[int], pinned: frozenset[int]) -> int:
        candidates = [e for e in resident if e not in pinned]
        if not candidates:
            raise ValueError("every resident expert is in use by this step")
        return min(candidates, key=lambda e: (self._last.get(e, 0), e))


class LFUPolicy:
    """Evict the expert used by the fewest steps so far; ties: the least recently used."""

    name: PolicyName = "lfu"

    def __init__(self) -> None:
        self._clock = 0
        self._count: dict[int, int] = {}
        self._last: dict[int, int] = {}

    def touch(self, experts: Iterable[int]) -> None:
        self._clock += 1
        for expert in experts:
            self._count[expert] = self._count.get(expert, 0) + 1
            self._last[expert] = self._clock

    def victim(self, resident: Iterable[int], pinned: frozenset[int]) -> int:
        candidates = [e for e in resident if e not in pinned]
        if not candidates:
            raise ValueError("every resident expert is in use by this step")
        return min(candidates, key=lambda e: (self._count.get(e, 0), self._last.get(e, 0), e))


def make_policy(name: PolicyName) -> EvictionPolicy:
    return LFUPolicy() if name == "lfu" else LRUPolicy()
