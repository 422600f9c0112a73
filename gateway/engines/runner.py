"""The token-level model runner: the inside of a local backend (tokens in, KV caches, events out).

A runner is one loaded model. Every method is synchronous and is called only from the
scheduler's single inference thread, which is what makes "one Mac, one inference"
structural rather than a convention. The request-level seam above it is
``gateway.seam.backend``; nothing outside ``gateway/engines`` touches a runner.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.scheduler.pacing import JobStep, PassPoint
from gateway.seam.backend import SamplingParams
from gateway.seam.reasoning import ReplyFormat
from gateway.seam.request_parts import ChatMessage, ToolSpec

# A runner's KV cache, opaque to everyone but the runner (mlx-lm: a list of cache objects).
KVCache = Any


@dataclass(frozen=True)
class PromptState:
    """A KV cache and the tokens it holds, handed to ``generate`` to skip their prefill."""

    cache: KVCache
    tokens: tuple[int, ...]


class Generation(Protocol):
    """A generation in flight: iterate it for ``PrefillProgress``, ``TokenEvent`` and a last
    ``Finished`` (and, under a scheduler, ``PASS_POINT``: points to pause at inside a pass);
    close it to cancel. One event per token, so a consumer can stop within one."""

    cached_tokens: int
    # Set when the generation has ended: the cache and exactly the tokens it holds.
    state: PromptState | None

    def __iter__(self) -> Iterator[JobStep]: ...

    def __next__(self) -> JobStep: ...

    def close(self) -> None: ...

    def release_cache(self) -> bool:
        """While paused: free the KV cache, to be recomputed on resume (False: cannot)."""
        ...

    def set_aside(self) -> None:
        """The job is paused: stop decoding beside others (it resumes where it was)."""
        ...


class ModelRunner(Protocol):
    """A loaded model."""

    model_id: str
    # Identifies this import of the model's weights (caches on disk are keyed by it).
    fingerprint: str
    context_length: int
    vocab_size: int
    # Stop strings the model needs with every request (a base model's turn marker).
    default_stop: tuple[str, ...]
    # No token stands for more characters than this: a text longer than context_length times
    # this cannot fit, which is known without tokenizing it.
    max_token_chars: int
    # How many of its generations may decode together (1: one at a time), and why so many
    # (``/health``: {"max_sequences", "limited_by", ...}).
    max_sequences: int
    batch_limit: dict[str, Any]

    @property
    def decode_step(self) -> dict[str, Any]:
        """Whether its decode steps are compiled, and why not ({"compiled", "reason"})."""
        ...

    def render_chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        thinking: bool | None = None,
    ) -> list[int]:
        """Apply the model's chat template and return prompt tokens.

        ``tools`` are described to the model (``gateway.seam.tool_format``).
        ``continue_final_message`` leaves the last message open (no end-of-turn), for
        pre-computing a message that is still being typed. ``thinking``: the template's
        thinking switch, where it has one (None: its default).
        """
        ...

    def reply_format(self, prompt: Sequence[int], thinking: bool | None = None) -> ReplyFormat:
        """How the reply to ``prompt`` (rendered with ``thinking``) is laid out: its
        reasoning section and the model's tool-call format."""
        ...

    def render_text(self, text: str) -> list[int]:
        """A raw text prompt's tokens (with the tokenizer's own special tokens)."""
        ...

    def new_cache(self) -> KVCache: ...

    def cache_length(self, cache: KVCache) -> int:
        """How many tokens ``cache`` holds."""
        ...

    def prefill(self, tokens: Sequence[int], cache: KVCache) -> Iterator[int | PassPoint]:
        """Feed ``tokens`` into ``cache`` in chunks, yielding the count done after each chunk
        (and ``PASS_POINT`` inside a chunk computed in stages: ``Pacing.pause_grain``)."""
        ...

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        state: PromptState | None = None,
        *,
        continues_text: bool = False,
        resumed: int = 0,
    ) -> Generation:
        """Stream a completion of ``prompt`` (``params.max_tokens`` is set by the caller).

        ``state`` holds a cache already filled with a prefix of ``prompt``; it is extended
        in place. ``continues_text``: the prompt is raw text that the output continues, so
        a leading space is part of it (a chat reply's is trimmed). ``resumed``: the last
        this many prompt tokens are completion tokens generated elsewhere; the output goes on
        after their text, and usage counts them as completion.
        """
        ...

    def embed(self, tokens: Sequence[int]) -> list[float]:
        """The unit-length mean of the last hidden state (after the final norm) over
        ``tokens``, computed alone (``gateway.seam.embedding``)."""
        ...

    def close(self) -> None:
        """Drop the weights (unloading); the runner is not used afterwards."""
        ...
