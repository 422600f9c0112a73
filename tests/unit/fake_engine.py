"""An engine that needs no model: tokens are characters, the answer is fixed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gateway.engines.base import GenerationEvent, PromptState, SamplingParams

ANSWER = "hello from the fake engine"


class FakeGeneration:
    def __init__(self, prompt: Sequence[int], params: SamplingParams) -> None:
        self.cached_tokens = 0
        self.state: PromptState | None = None
        words = ANSWER.split(" ")[: params.max_tokens]
        finish = "stop" if len(words) < params.max_tokens else "length"
        self._events = iter(
            GenerationEvent(
                ("" if i == 0 else " ") + w, i + 1, finish if i == len(words) - 1 else None
            )
            for i, w in enumerate(words)
        )

    def __iter__(self) -> Iterator[GenerationEvent]:
        return self._events

    def __next__(self) -> GenerationEvent:
        return next(self._events)

    def close(self) -> None:
        pass

    def release_cache(self) -> bool:
        return False


class FakeEngine:
    model_id = "fake"
    context_length = 4096
    vocab_size = 256

    def render_chat(self, messages: Sequence[dict[str, Any]], **_: Any) -> list[int]:
        return [ord(c) % 256 for m in messages for c in str(m["content"])] or [0]

    def new_cache(self) -> list[Any]:
        return []

    def prefill(self, tokens: Sequence[int], cache: Any) -> Iterator[int]:
        yield len(tokens)

    def generate(
        self, prompt: Sequence[int], params: SamplingParams, state: PromptState | None = None
    ) -> FakeGeneration:
        return FakeGeneration(prompt, params)

    def memory(self) -> dict[str, int]:
        return {"active": 0, "peak": 0}
