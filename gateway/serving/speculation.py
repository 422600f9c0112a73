"""Speculative first tokens: the start of the answer to the draft, computed while the user pauses.

When a typing hint with a draft is ready and the user has paused for ``after_seconds``, the
idle slot generates the first ``max_tokens`` tokens of the answer to the draft as the final
user message, greedily (what a greedy request would produce). It is the most expendable work
there is: any job that arrives cancels it (``Scheduler``), and a new keystroke (a newer hint)
does too. When the chat request comes and its prompt tokens equal the speculated prompt and
its sampling is greedy and plain, the stored tokens are sent at once and the generation goes
on after them from their KV cache (``GenerationRequest.resume``: the detokenizer takes them in
first), so the response is token-identical to a run without speculation. Otherwise the
speculation is dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace

from gateway.engines.backend import (
    Backend,
    BackendEvent,
    ChatMessage,
    Finished,
    GenerationRequest,
    SamplingParams,
    Started,
    TokenEvent,
    ToolSpec,
    continued,
)
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.scheduler.jobs import Priority

log = logging.getLogger(__name__)


@dataclass
class Speculation:
    hint_id: str
    tier: str
    session: str | None
    prompt: tuple[int, ...] = ()
    events: list[TokenEvent] = field(default_factory=list)
    finished: Finished | None = None  # the answer ended within the speculated tokens
    complete: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(t for event in self.events for t in event.token_ids)


def serves(params: SamplingParams, speculated: int) -> bool:
    """Whether a request with ``params`` produces exactly what a greedy speculation did."""
    return (
        params.temperature == 0
        and params.grammar is None
        and params.logprobs is None
        and not params.logit_bias
        and not params.presence_penalty
        and not params.frequency_penalty
        and not params.stop
        and (params.max_tokens is None or params.max_tokens > speculated)
    )


class Speculator:
    def __init__(self, metrics: GatewayMetrics, after_seconds: float, max_tokens: int) -> None:
        self.metrics = metrics
        self.after_seconds = after_seconds
        self.max_tokens = max_tokens
        self.enabled = max_tokens > 0
        self.by_hint: dict[str, Speculation] = {}

    def schedule(
        self,
        hint_id: str,
        tier: str,
        session: str | None,
        backend: Backend,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        delay: float,
    ) -> None:
        """After ``delay`` (the rest of the pause), speculate the answer to ``messages``."""
        if not self.enabled:
            return
        speculation = Speculation(hint_id, tier, session)
        self.by_hint[hint_id] = speculation

        async def run() -> None:
            await asyncio.sleep(max(delay, 0.0))
            await self._speculate(speculation, backend, messages, tools)

        speculation.task = asyncio.create_task(run(), name=f"speculate {hint_id}")

    async def _speculate(
        self,
        speculation: Speculation,
        backend: Backend,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
    ) -> None:
        prompt = await backend.render(messages, tools)
        if prompt.tokens is None:
            return
        speculation.prompt = prompt.tokens
        self.metrics.speculations.labels("started").inc()
        # One token more than is kept: the last event of a generation cut by max_tokens
        # carries the detokenizer's flushed tail, which a continuation would repeat.
        request = GenerationRequest(
            id=f"speculation-{speculation.hint_id}",
            messages=tuple(messages),
            params=SamplingParams(max_tokens=self.max_tokens + 1, temperature=0.0),
            priority=Priority.USER,
            prompt=prompt,
            tools=tuple(tools),
            speculative=True,
        )
        events: list[TokenEvent] = []
        try:
            async for event in backend.generate(request):
                if isinstance(event, TokenEvent):
                    events.append(event)
                elif isinstance(event, Finished) and (
                    event.reason == "stop" or len(events) <= self.max_tokens
                ):
                    speculation.finished = replace(event, cached_tokens=len(prompt.tokens))
        except GatewayError as exc:
            log.info("speculation for %s ended: %s", speculation.hint_id, exc.message)
            self._drop(speculation, "failed")
            return
        if speculation.finished is None and len(events) < self.max_tokens + 1:
            self._drop(speculation, "preempted")  # cancelled before its end
            return
        speculation.events = events if speculation.finished else events[: self.max_tokens]
        speculation.complete = True

    def speculated_tokens(self, hint_id: str) -> int | None:
        speculation = self.by_hint.get(hint_id)
        if speculation is None or not speculation.complete:
            return None
        return len(speculation.token_ids)

    def cancel(self, hint_id: str, reason: str) -> None:
        speculation = self.by_hint.pop(hint_id, None)
        if speculation is not None:
            self._drop(speculation, reason)

    def take(
        self, tier: str, prompt: Sequence[int], params: SamplingParams, session: str | None
    ) -> Speculation | None:
        """The speculation that answers exactly this request, if one does (used once)."""
        for hint_id, speculation in list(self.by_hint.items()):
            if speculation.tier != tier or (session is not None and speculation.session != session):
                continue
            del self.by_hint[hint_id]
            if not speculation.complete:
                self._drop(speculation, "incomplete")
            elif speculation.prompt != tuple(prompt):
                self._drop(speculation, "mismatch")
            elif not serves(params, len(speculation.token_ids)):
                self._drop(speculation, "sampling")
            else:
                self.metrics.speculations.labels("used").inc()
                self.metrics.speculated_tokens_served.inc(len(speculation.token_ids))
                return speculation
        return None

    def _drop(self, speculation: Speculation, reason: str) -> None:
        self.by_hint.pop(speculation.hint_id, None)
        if speculation.task is not None and not speculation.task.done():
            speculation.task.cancel()
        if speculation.prompt:  # started: counted as discarded
            self.metrics.speculations.labels(f"discarded_{reason}").inc()


async def speculated_events(
    speculation: Speculation, request: GenerationRequest, backend: Backend
) -> AsyncGenerator[BackendEvent, None]:
    """The request's events: the speculated tokens at once, then the generation after them."""
    prompt_tokens = len(request.prompt.tokens or ())
    yield Started(prompt_tokens, prompt_tokens)
    for token in speculation.events:
        yield token
    if speculation.finished is not None:
        yield speculation.finished
        return
    async for event in continued(backend, request, speculation.token_ids):
        yield event
