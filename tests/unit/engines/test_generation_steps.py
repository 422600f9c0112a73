"""GenerationSteps: a local chat job's steps, which offer the slot their KV cache while paused."""

from __future__ import annotations

from collections.abc import Generator, Iterator

from gateway.engines.local import GenerationSteps
from gateway.engines.runner import PromptState
from gateway.scheduler.jobs import HoldsMemory
from gateway.seam.backend import BackendEvent, Finished, Started, TokenEvent


class ScriptedGeneration:
    """Two tokens and the end; ``state`` set when it ended, as a runner's generation does."""

    cached_tokens = 3

    def __init__(self, releasable: bool = True) -> None:
        self.state: PromptState | None = None
        self.released = 0
        self.releasable = releasable
        self._events = self._run()

    def _run(self) -> Generator[BackendEvent, None, None]:
        yield TokenEvent("a", (1,))
        yield TokenEvent("b", (2,))
        self.state = PromptState(cache=["kv"], tokens=(7, 8, 1, 2))
        yield Finished("stop", 4, 2)

    def __iter__(self) -> Iterator[BackendEvent]:
        return self._events

    def __next__(self) -> BackendEvent:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def set_aside(self) -> None:
        pass

    def release_cache(self) -> bool:
        self.released += 1
        return self.releasable


def steps_of(
    generation: ScriptedGeneration,
) -> tuple[GenerationSteps, list[PromptState], list[int]]:
    kept: list[PromptState] = []
    starts: list[int] = []

    def start() -> ScriptedGeneration:
        starts.append(1)
        return generation

    return GenerationSteps(start, 4, kept.append), kept, starts


def test_the_generation_starts_at_the_first_step_and_then_holds_memory() -> None:
    generation = ScriptedGeneration()
    steps, _, starts = steps_of(generation)
    assert isinstance(steps, HoldsMemory)
    assert starts == [] and not steps.holds_memory  # a job paused before it began holds none
    assert not steps.release_memory() and generation.released == 0
    assert next(steps) == Started(4, 3)
    assert starts == [1] and steps.holds_memory
    assert steps.release_memory() and generation.released == 1
    assert not steps_of(ScriptedGeneration(releasable=False))[0].release_memory()


def test_every_event_in_order_then_the_final_state_is_kept() -> None:
    generation = ScriptedGeneration()
    steps, kept, _ = steps_of(generation)
    events = list(steps)
    assert events == [
        Started(4, 3),
        TokenEvent("a", (1,)),
        TokenEvent("b", (2,)),
        Finished("stop", 4, 2),
    ]
    assert kept == [generation.state]


def test_closed_half_way_it_keeps_nothing_it_does_not_have() -> None:
    steps, kept, _ = steps_of(ScriptedGeneration())
    next(steps), next(steps)
    steps.close()  # cancelled: the generation has no final state to keep
    assert kept == []
