"""Speculative first tokens: the start of the answer to the draft, computed while the user pauses.

When a typing hint with a draft is ready and the user has paused for ``after_seconds``, the
idle slot generates the first ``max_tokens`` tokens of the answer to the draft as the final
user message, with the hint's sampling: greedy, or seeded (what a request with the same
temperature, top_p and seed would draw: a resumed sampler skips the draws already made). It
is the most expendable work there is: any job that arrives cancels it (``Scheduler``), and a
new keystroke (a newer hint) does too. When the chat request comes and its prompt tokens
equal the speculated prompt and its sampling is the speculation's and plain, the stored
tokens are sent at once and the generation goes on after them from their KV cache
(``GenerationRequest.resume``: the detokenizer takes them in first), so the response is
token-identical to a run without speculation; a speculation still running then is stopped
and what it has computed so far is used. Otherwise the speculation is dropped and counted.

Whatever the request's ``max_tokens``: its answer is the first ``max_tokens`` speculated
tokens (``Speculation.answer_for``). One that ended sooner is sent whole with its ``stop``;
one cut short sends all but the last at once and generates that last token again from the
cached KV (one decode step): only a generation that ends there flushes the detokenizer's
held-back tail into the last token's text, and so ends exactly as a run without a hint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field, replace

from gateway.errors import GatewayError
from gateway.metrics import SpeculationMetrics
from gateway.seam.backend import (
    Backend,
    BackendEvent,
    Finished,
    GenerationRequest,
    Priority,
    SamplingParams,
    Started,
    TokenEvent,
)
from gateway.seam.request_parts import ChatMessage, ToolSpec
from gateway.seam.wrapped import continued

log = logging.getLogger(__name__)


GREEDY = SamplingParams(temperature=0.0)


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
    received: list[TokenEvent] = field(default_factory=list)  # so far, while it runs
    sampling: SamplingParams = GREEDY

    @property
    def token_ids(self) -> tuple[int, ...]:
        return tuple(t for event in self.events for t in event.token_ids)

    def answer_for(self, max_tokens: int | None) -> tuple[list[TokenEvent], Finished | None]:
        """The events to send at once to a request allowed ``max_tokens``, and the answer's
        end if it is among them (else the generation continues after the events)."""
        finished = self.finished
        if finished is not None and (
            max_tokens is None or finished.completion_tokens <= max_tokens
        ):
            return self.events, finished
        if max_tokens is None or max_tokens > len(self.token_ids):
            return self.events, None
        kept: list[TokenEvent] = []
        tokens = 0
        for event in self.events:  # up to the last token, which is generated again
            if tokens + len(event.token_ids) > max_tokens - 1:
                break
            kept.append(event)
            tokens += len(event.token_ids)
        return kept, None


def serves(params: SamplingParams, speculation: SamplingParams) -> bool:
    """Whether a request with ``params`` starts exactly as a speculation did (whatever its
    ``max_tokens``: a shorter request gets the first of its tokens)."""
    same_draws = (params.temperature == 0 and speculation.temperature == 0) or (
        params.temperature == speculation.temperature
        and params.seed is not None
        and params.seed == speculation.seed
        and params.top_p == speculation.top_p
        and params.top_k == speculation.top_k
    )
    return (
        same_draws
        and params.grammar is None
        and params.logprobs is None
        and not params.logit_bias
        and not params.presence_penalty
        and not params.frequency_penalty
        and params.repetition_penalty == speculation.repetition_penalty
        and not params.stop
    )


class Speculator:
    def __init__(self, metrics: SpeculationMetrics, after_seconds: float, max_tokens: int) -> None:
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
        sampling: SamplingParams,
        delay: float,
    ) -> None:
        """After ``delay`` (the rest of the pause), speculate the answer to ``messages``."""
        if not self.enabled:
            return
        speculation = Speculation(hint_id, tier, session, sampling=sampling)
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
            params=replace(speculation.sampling, max_tokens=self.max_tokens + 1),
            priority=Priority.USER,
            prompt=prompt,
            tools=tuple(tools),
            speculative=True,
        )
        events = speculation.received
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

    async def take(
        self, tier: str, prompt: Sequence[int], params: SamplingParams, session: str | None
    ) -> Speculation | None:
        """The speculation that answers exactly this request, if one does (used once)."""
        for hint_id, speculation in list(self.by_hint.items()):
            if speculation.tier != tier or (session is not None and speculation.session != session):
                continue
            del self.by_hint[hint_id]
            running = not speculation.complete and speculation.prompt == tuple(prompt)
            if running:
                await self._stop_and_keep(speculation, params.max_tokens)
            reason = self._unusable(speculation, prompt, params)
            if reason is not None:
                self._drop(speculation, reason)
                continue
            if running:
                self.metrics.speculations.labels("adopted_running").inc()
            self.metrics.speculations.labels("used").inc()
            served, _ = speculation.answer_for(params.max_tokens)
            self.metrics.speculated_tokens_served.inc(sum(len(e.token_ids) for e in served))
            return speculation
        return None

    @staticmethod
    def _unusable(
        speculation: Speculation, prompt: Sequence[int], params: SamplingParams
    ) -> str | None:
        """Why the speculation cannot start this request's answer, if it cannot."""
        if not speculation.complete:
            return "incomplete"
        if speculation.prompt != tuple(prompt):
            return "mismatch"
        if not serves(params, speculation.sampling):
            return "sampling"
        return None

    async def _stop_and_keep(self, speculation: Speculation, max_tokens: int | None) -> None:
        """Stop a running speculation of this very prompt and keep what it has computed:
        it stopped between two tokens (no tail was flushed), so every token received counts,
        up to fewer than the request's ``max_tokens``."""
        task = speculation.task
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task})
        keep = self.max_tokens if max_tokens is None else min(self.max_tokens, max_tokens - 1)
        if len(speculation.received) > keep:
            speculation.finished = None  # its end is not among the tokens kept
        speculation.events = speculation.received[:keep]
        speculation.complete = bool(speculation.events)

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
    events, finished = speculation.answer_for(request.params.max_tokens)
    for token in events:
        yield token
    if finished is not None:
        yield finished
        return
    sent = tuple(t for event in events for t in event.token_ids)
    async for event in continued(backend, request, sent):
        yield event
