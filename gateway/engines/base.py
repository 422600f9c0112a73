"""The interface every engine offers the rest of the gateway: tokens in, token events out.

Engines know nothing of HTTP, pydantic or the scheduler. Every method here is synchronous
and is called from the scheduler's single inference thread, which is what makes "one Mac,
one inference" structural rather than a convention.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# An engine's KV cache, opaque to everyone but the engine (mlx-lm: a list of cache objects).
KVCache = Any
ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens; the engine's own, free of any wire format."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GenerationEvent:
    """One step of a generation: new text (possibly empty) and, on the last, why it ended.

    ``completion_tokens == 0`` marks a prefill chunk done: no token yet, but a point where
    the job may be paused or cancelled.
    """

    text: str
    completion_tokens: int
    finish_reason: str | None = None  # "stop" | "length" on the last event


@dataclass(frozen=True)
class PromptState:
    """A KV cache and the tokens it holds, handed to ``generate`` to skip their prefill."""

    cache: KVCache
    tokens: tuple[int, ...]


class Generation(Protocol):
    """A generation in flight: iterate it for events; close it to cancel."""

    cached_tokens: int
    # Set when the generation has ended: the cache and exactly the tokens it holds.
    state: PromptState | None

    def __iter__(self) -> Iterator[GenerationEvent]: ...

    def __next__(self) -> GenerationEvent: ...

    def close(self) -> None: ...

    def release_cache(self) -> bool:
        """While paused: free the KV cache, to be recomputed on resume (False: cannot)."""
        ...


class Engine(Protocol):
    """A loaded model behind the gateway's one interface."""

    model_id: str
    context_length: int
    vocab_size: int

    def render_chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
    ) -> list[int]:
        """Apply the model's chat template and return prompt tokens.

        ``continue_final_message`` leaves the last message open (no end-of-turn), for
        pre-computing a message that is still being typed.
        """
        ...

    def new_cache(self) -> KVCache: ...

    def prefill(self, tokens: Sequence[int], cache: KVCache) -> Iterator[int]:
        """Feed ``tokens`` into ``cache`` in chunks, yielding the count done after each chunk."""
        ...

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None = None,
    ) -> Generation:
        """Stream a completion of ``prompt``; close the generation to cancel it.

        ``state`` holds a cache already filled with a prefix of ``prompt``; it is extended
        in place. Each event is one token, so a consumer can stop within one token.
        """
        ...

    def memory(self) -> dict[str, int]:
        """Bytes: ``active`` and ``peak`` memory of the engine's framework."""
        ...
