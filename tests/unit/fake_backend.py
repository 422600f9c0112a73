"""A backend at the request-level seam that needs no model, with hooks to steer it.

Tokens are characters; the answer is fixed; a warm-up (typing hint) can be held in any
state of the pre-prefill state machine by the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field

from gateway.seam.backend import (
    BackendEvent,
    BackendHealth,
    BackendInfo,
    BackendKind,
    Capabilities,
    Finished,
    GenerationRequest,
    ModelLimits,
    PrefillProgress,
    Prompt,
    Started,
    TextPrompt,
    TokenEvent,
)
from gateway.seam.request_parts import ChatMessage

ANSWER = ("Hello", " there", "!")


def tokens_of(messages: Sequence[ChatMessage]) -> tuple[int, ...]:
    return tuple(ord(c) % 256 for m in messages for c in f"<{m['role']}>{m['content']}")


@dataclass
class FakeWarmup:
    tokens: tuple[int, ...]
    may_start: asyncio.Event = field(default_factory=asyncio.Event)
    may_finish: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False
    done: bool = False

    async def events(self) -> AsyncIterator[BackendEvent]:
        await self.may_start.wait()
        if self.cancelled:
            return
        yield Started(len(self.tokens), 0)
        await self.may_finish.wait()
        if self.cancelled:
            return
        yield PrefillProgress(len(self.tokens))
        self.done = True

    def cancel(self) -> None:
        self.cancelled = True
        self.may_start.set()
        self.may_finish.set()

    @property
    def completed(self) -> bool:
        return self.done


class FakeTypingGates:
    """The slot's typing signals (``gateway.scheduler.gates.TypingGates``), recorded."""

    def __init__(self) -> None:
        self.freeze_holders: set[str] = set()
        self.typing_notes = 0
        self.typing_holders: set[str] = set()

    def note_typing(self, holder: str) -> None:
        self.typing_notes += 1
        self.typing_holders.add(holder)

    def end_typing(self, holder: str) -> None:
        self.typing_holders.discard(holder)

    def hold_prefill_freeze(self, holder: str) -> None:
        self.freeze_holders.add(holder)

    def release_prefill_freeze(self, holder: str) -> None:
        self.freeze_holders.discard(holder)


class FakeBackend:
    """Records what the services asked of it; its own warmer, and no embedder.

    ``info`` and ``limits()`` are read from plain attributes a test may change.
    """

    kind: BackendKind = "mlx"
    model_id = "fake-model"
    context_length: int | None = 10_000
    vocab_size: int | None = 256
    answer: tuple[str, ...] = ANSWER

    def __init__(
        self,
        tier: str = "fast",
        hints: bool = True,
        answer: Sequence[str] | None = None,
        structured_output: bool = False,
    ) -> None:
        self.tier = tier
        if answer is not None:
            self.answer = tuple(answer)
        self.capabilities = Capabilities(
            prefix_cache=hints,
            typing_hints=hints,
            token_ids=True,
            local_slot=True,
            structured_output=structured_output,
        )
        self.requests: list[GenerationRequest] = []
        self.warmups: list[FakeWarmup] = []
        # The gates of the slot this fake tier runs in (given to the hint service).
        self.gates = FakeTypingGates()
        self.closed_streams = 0
        self.fail_before_start: Exception | None = None
        self.release_tokens = asyncio.Event()
        self.release_tokens.set()

    @property
    def info(self) -> BackendInfo:
        return BackendInfo(self.kind, self.tier, self.model_id, self.capabilities)

    def limits(self) -> ModelLimits:
        return ModelLimits(self.context_length, self.vocab_size)

    def warmer(self) -> FakeBackend | None:
        return self if self.capabilities.typing_hints else None

    def embedder(self) -> None:
        return None

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[object] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        return Prompt(tokens_of(messages))

    async def render_text(self, prompt: TextPrompt) -> Prompt:
        return Prompt(tuple(ord(c) % 256 for c in prompt.text))

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        if self.fail_before_start is not None:
            raise self.fail_before_start
        prompt = len(request.prompt.tokens or ())
        try:
            yield Started(prompt, 0)
            answer = self.answer
            limit = request.params.max_tokens or len(answer)
            for index, text in enumerate(answer[:limit]):
                await self.release_tokens.wait()
                yield TokenEvent(text, (index,))
            reason = "length" if limit < len(answer) else "stop"
            yield Finished(reason, prompt, min(limit, len(answer)))  # type: ignore[arg-type]
        finally:
            self.closed_streams += 1

    async def abort(self, request_id: str) -> bool:
        return False

    async def health(self) -> BackendHealth:
        return BackendHealth(kind=self.kind, model=self.model_id, loaded=True, state="loaded")

    async def close(self) -> None:
        pass

    # -- Warmer ---------------------------------------------------------------------------

    async def render_fixed_prefix(
        self, messages: Sequence[ChatMessage], draft: str | None, tools: Sequence[object] = ()
    ) -> tuple[int, ...]:
        return tokens_of(messages)

    async def warm(
        self, hint_id: str, tokens: Sequence[int], session: str | None = None
    ) -> FakeWarmup:
        warmup = FakeWarmup(tuple(tokens))
        self.warmups.append(warmup)
        return warmup
