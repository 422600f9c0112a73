"""A model runner that needs no model: tokens are characters, the answer is fixed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gateway.engines.runner import PromptState
from gateway.seam.backend import BackendEvent, Finished, SamplingParams, TokenEvent
from gateway.seam.reasoning import ReplyFormat

ANSWER = "hello from the fake engine"


class FakeGeneration:
    def __init__(self, prompt: Sequence[int], params: SamplingParams) -> None:
        self.cached_tokens = 0
        self.state: PromptState | None = None
        limit = params.max_tokens or 1000
        words = ANSWER.split(" ")[:limit]
        finish = "stop" if len(words) < limit else "length"
        events: list[BackendEvent] = [
            TokenEvent(("" if i == 0 else " ") + w, (i,)) for i, w in enumerate(words)
        ]
        events.append(Finished(finish, len(prompt), len(words)))  # type: ignore[arg-type]
        self._events = iter(events)

    def __iter__(self) -> Iterator[BackendEvent]:
        return self._events

    def __next__(self) -> BackendEvent:
        return next(self._events)

    def close(self) -> None:
        pass

    def set_aside(self) -> None:
        pass

    def release_cache(self) -> bool:
        return False


class FakeRunner:
    model_id = "fake"
    fingerprint = "fake"
    context_length = 4096
    vocab_size = 256
    default_stop: tuple[str, ...] = ()
    max_token_chars = 1
    max_sequences = 1
    batch_limit = {"max_sequences": 1, "limited_by": "setting", "kv_bytes_per_token": 0}
    decode_step = {"compiled": False, "reason": "eager: a fake runner computes no passes"}

    def render_chat(self, messages: Sequence[dict[str, Any]], **_: Any) -> list[int]:
        return [ord(c) % 256 for m in messages for c in str(m["content"])] or [0]

    def render_text(self, text: str) -> list[int]:
        return [ord(c) % 256 for c in text] or [0]

    def reply_format(self, prompt: Sequence[int], thinking: bool | None = None) -> ReplyFormat:
        return ReplyFormat()

    def new_cache(self) -> list[Any]:
        return []

    def cache_length(self, cache: Any) -> int:
        return 0

    def prefill(self, tokens: Sequence[int], cache: Any) -> Iterator[int]:
        yield len(tokens)

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None = None,
        **_: Any,
    ) -> FakeGeneration:
        return FakeGeneration(prompt, params)

    def embed(self, tokens: Sequence[int]) -> list[float]:
        # A unit vector that depends on the tokens only: [sum, count] normalized.
        total, count = float(sum(tokens)), float(len(tokens))
        norm = (total * total + count * count) ** 0.5
        return [total / norm, count / norm]

    def close(self) -> None:
        pass
