"""Chat completions: from a validated request to a tier's backend, and back to OpenAI shapes.

Nothing here knows HTTP or MLX: routes call ``prepare`` and then ``start`` and ``complete`` or
``stream``; the backend behind the tier is reached only through the request-level seam.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field

from gateway.engines.backend import (
    BackendEvent,
    ChatMessage,
    Finished,
    GenerationRequest,
    Grammar,
    Prompt,
    SamplingParams,
    Started,
    TokenEvent,
)
from gateway.engines.grammar import GrammarError, grammar_text
from gateway.errors import ContextLengthExceededError, InvalidRequestError, ShuttingDownError
from gateway.metrics import GatewayMetrics
from gateway.protocol.openai import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceDelta,
    ChunkChoice,
    PromptTokensDetails,
    Usage,
    completion_id,
    now,
)
from gateway.scheduler.jobs import Priority
from gateway.serving.messages import template_messages
from gateway.serving.tiers import Tier, TierRegistry
from gateway.serving.typing import TypingService
from gateway.tasks.definitions import for_grammar, strict_objects

DEFAULT_TEMPERATURE = 1.0  # OpenAI's default
# After the grace period, how long stopped chats get to send their last events.
DRAIN_STOP_SECONDS = 3.0


@dataclass(frozen=True)
class SamplingRequest:
    """What a caller asked of the sampling, before the prompt's length is known."""

    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"  # named in a context-length error
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: Grammar | None = None
    grammar_param: str = "response_format"  # named when the grammar is refused
    # A task's own max_tokens is shortened to the gateway's cap; a client's is refused above it.
    clamp_to_cap: bool = False


@dataclass
class PreparedChat:
    """A validated chat, rendered (where the backend renders locally), ready to run."""

    tier: Tier
    messages: tuple[ChatMessage, ...]
    prompt: Prompt
    params: SamplingParams
    priority: Priority
    arrived: float
    model_name: str  # as the client named it, echoed in responses
    session: str | None = None
    include_usage: bool = False
    id: str = field(default_factory=completion_id)
    created: int = field(default_factory=now)

    def generation_request(self) -> GenerationRequest:
        return GenerationRequest(
            id=self.id,
            messages=self.messages,
            params=self.params,
            priority=self.priority,
            session=self.session,
            prompt=self.prompt,
        )


@dataclass
class ChatRun:
    """A chat in flight: the backend's events, and what has been counted of them."""

    chat: PreparedChat
    backend_events: AsyncGenerator[BackendEvent, None]  # read once
    started: Started
    completion_tokens: int = 0
    finished: Finished | None = None
    # Set when the server's shutdown grace ran out while this chat was still generating.
    interrupted: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def prompt_tokens(self) -> int:
        if self.finished is not None and self.finished.prompt_tokens:
            return self.finished.prompt_tokens
        return self.started.prompt_tokens or 0

    @property
    def cached_tokens(self) -> int:
        if self.finished is not None:
            return self.finished.cached_tokens
        return self.started.cached_tokens

    @property
    def finish_reason(self) -> str:
        return self.finished.reason if self.finished is not None else "stop"

    def usage(self) -> Usage:
        prompt = self.prompt_tokens
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=self.completion_tokens,
            total_tokens=prompt + self.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self.cached_tokens),
        )


class ChatService:
    """Turns chat requests into backend requests and their events into OpenAI responses."""

    def __init__(
        self,
        registry: TierRegistry,
        metrics: GatewayMetrics,
        typing: TypingService,
        max_completion_tokens: int | None = None,
    ) -> None:
        self.registry = registry
        self.max_completion_tokens = max_completion_tokens
        self.metrics = metrics
        self.typing = typing
        self.closing = False  # shutting down: no new chats
        self.active: dict[str, ChatRun] = {}

    async def prepare(
        self, request: ChatCompletionRequest, priority_header: str | None = None
    ) -> PreparedChat:
        arrived = time.perf_counter()
        tier = self.registry.resolve(request.model)
        priority = Priority.parse(priority_header or request.priority, Priority.USER)
        options = request.stream_options
        return await self.prepare_messages(
            tier,
            template_messages(request.messages),
            sampling_request(request),
            priority,
            model_name=request.model,
            session=request.session,
            include_usage=bool(options and options.include_usage),
            arrived=arrived,
        )

    async def prepare_messages(
        self,
        tier: Tier,
        messages: tuple[ChatMessage, ...],
        sampling: SamplingRequest,
        priority: Priority,
        *,
        model_name: str,
        session: str | None = None,
        include_usage: bool = False,
        arrived: float | None = None,
    ) -> PreparedChat:
        """Render ``messages`` for ``tier`` and check them; the common path of chats and tasks."""
        arrived = time.perf_counter() if arrived is None else arrived
        if sampling.grammar is not None:
            self._check_grammar(tier, sampling)
        prompt = await tier.backend.render(messages)
        params = self._sampling_params(sampling, tier, prompt)
        return PreparedChat(
            tier, messages, prompt, params, priority, arrived, model_name, session, include_usage
        )

    @staticmethod
    def _check_grammar(tier: Tier, sampling: SamplingRequest) -> None:
        assert sampling.grammar is not None
        if not tier.backend.capabilities.structured_output:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({tier.backend.kind} backend) cannot constrain its output; "
                "use a local tier for structured output",
                param=sampling.grammar_param,
            )
        try:
            grammar_text(sampling.grammar)
        except GrammarError as exc:
            raise InvalidRequestError(
                f"unsupported schema or grammar: {exc}", param=sampling.grammar_param
            ) from exc

    def _sampling_params(
        self, sampling: SamplingRequest, tier: Tier, prompt: Prompt
    ) -> SamplingParams:
        backend = tier.backend
        context = backend.context_length
        requested = sampling.max_tokens
        cap = self.max_completion_tokens
        if cap is not None and requested is not None and requested > cap:
            if not sampling.clamp_to_cap:
                raise InvalidRequestError(
                    f"{sampling.max_tokens_param} is {requested}; this gateway allows at most "
                    f"{cap} completion tokens",
                    param=sampling.max_tokens_param,
                )
            requested = cap
        max_tokens = requested
        if prompt.tokens is not None and context is not None:
            prompt_tokens = len(prompt.tokens)
            if prompt_tokens >= context or (requested and prompt_tokens + requested > context):
                wanted = prompt_tokens + (requested or 1)
                raise ContextLengthExceededError(
                    f"This model's maximum context length is {context} tokens. However, you "
                    f"requested {wanted} tokens ({prompt_tokens} in the messages, "
                    f"{requested or 1} in the completion). Please reduce the length of the "
                    "messages or completion.",
                    param="messages" if prompt_tokens >= context else sampling.max_tokens_param,
                )
            max_tokens = requested or min(context - prompt_tokens, cap or context)
        vocab = backend.vocab_size
        if vocab is not None and any(t >= vocab for t in sampling.logit_bias):
            raise InvalidRequestError(
                f"logit_bias names a token id beyond the vocabulary ({vocab})", param="logit_bias"
            )
        temperature = sampling.temperature
        if sampling.top_p == 0.0:  # nothing survives nucleus filtering but the top token
            temperature = 0.0
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop=sampling.stop,
            presence_penalty=sampling.presence_penalty,
            frequency_penalty=sampling.frequency_penalty,
            logit_bias=sampling.logit_bias,
            grammar=sampling.grammar,
        )

    # -- running -------------------------------------------------------------------------------

    async def start(self, chat: PreparedChat) -> ChatRun:
        """Hand the chat to its backend and wait until it computes (raises 429/502/503...)."""
        backend = chat.tier.backend
        if chat.prompt.tokens is not None and backend.capabilities.typing_hints:
            await self.typing.join(chat.tier.name, chat.prompt.tokens, chat.session)
        if self.closing:
            raise ShuttingDownError()
        events = backend.generate(chat.generation_request())
        try:
            first = await anext(events)
        except BaseException:
            self._count_request(chat, "error")
            raise
        if not isinstance(first, Started):
            await events.aclose()
            raise RuntimeError(f"backend {backend.kind} began with {first!r}, not Started")
        run = ChatRun(chat, events, first)
        self.active[chat.id] = run
        return run

    async def events(self, run: ChatRun) -> AsyncGenerator[TokenEvent, None]:
        """The generation's tokens; closes the backend's stream if the consumer stops early."""
        first_token_at: float | None = None
        failed = False
        try:
            async for event in run.backend_events:
                if isinstance(event, Finished):
                    run.finished = event
                    run.completion_tokens = event.completion_tokens
                    continue
                if not isinstance(event, TokenEvent):
                    continue  # prefill progress
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    self._observe_first_token(run, first_token_at)
                run.completion_tokens += len(event.token_ids) or (1 if event.text else 0)
                yield event
            if run.interrupted and run.finished is None:
                raise ShuttingDownError()
        except Exception as exc:  # not GeneratorExit or CancelledError: those are "cancelled"
            failed = True
            if run.interrupted and not isinstance(exc, ShuttingDownError):
                raise ShuttingDownError() from exc  # (an upstream stream cut by the abort)
            raise
        finally:
            self.active.pop(run.chat.id, None)
            run.done.set()
            await run.backend_events.aclose()
            outcome = "ok" if run.finished else "error" if failed else "cancelled"
            self._count_request(run.chat, outcome)
            self._count_tokens(run, first_token_at)

    async def drain(self, grace_seconds: float) -> None:
        """Shutting down: no new chats; running ones may finish within the grace period,
        then each is stopped (its stream ends with a finish reason and an error event)."""
        self.closing = True
        running = list(self.active.values())
        if running:
            await asyncio.wait(
                [asyncio.ensure_future(run.done.wait()) for run in running],
                timeout=grace_seconds,
            )
        late = [run for run in self.active.values() if not run.done.is_set()]
        for run in late:
            run.interrupted = True
            await run.chat.tier.backend.abort(run.chat.id)
        if late:
            await asyncio.wait(
                [asyncio.ensure_future(run.done.wait()) for run in late],
                timeout=DRAIN_STOP_SECONDS,
            )

    def _observe_first_token(self, run: ChatRun, at: float) -> None:
        chat = run.chat
        waited = at - chat.arrived
        cache = "warm" if run.started.cached_tokens else "cold"
        self.metrics.time_to_first_token.labels(chat.tier.backend.model_id, cache).observe(waited)
        self.metrics.tier_time_to_first_token.labels(
            chat.tier.name, chat.tier.backend.kind
        ).observe(waited)

    def _count_request(self, chat: PreparedChat, outcome: str) -> None:
        self.metrics.tier_requests.labels(chat.tier.name, chat.tier.backend.kind, outcome).inc()

    def _count_tokens(self, run: ChatRun, first_token_at: float | None) -> None:
        tier, kind = run.chat.tier.name, run.chat.tier.backend.kind
        model = run.chat.tier.backend.model_id
        prompt, cached = run.prompt_tokens, run.cached_tokens
        self.metrics.prompt_tokens.labels(model).inc(prompt)
        self.metrics.prompt_tokens_cached.labels(model).inc(cached)
        self.metrics.prompt_tokens_computed.labels(model).inc(max(prompt - cached, 0))
        self.metrics.generation_tokens.labels(model).inc(run.completion_tokens)
        self.metrics.tier_tokens.labels(tier, kind, "prompt").inc(prompt)
        self.metrics.tier_tokens.labels(tier, kind, "generation").inc(run.completion_tokens)
        if first_token_at is not None and run.completion_tokens > 1:
            elapsed = time.perf_counter() - first_token_at
            if elapsed > 0:
                self.metrics.decode_tokens_per_second.labels(model).observe(
                    (run.completion_tokens - 1) / elapsed
                )

    async def complete(self, run: ChatRun) -> ChatCompletion:
        async with aclosing(self.events(run)) as events:
            parts = [event.text async for event in events]
        return ChatCompletion(
            id=run.chat.id,
            created=run.chat.created,
            model=run.chat.model_name,
            choices=[
                Choice(
                    message=AssistantMessage(content="".join(parts)),
                    finish_reason=run.finish_reason,  # type: ignore[arg-type]
                )
            ],
            usage=run.usage(),
        )

    async def stream(self, run: ChatRun) -> AsyncGenerator[ChatCompletionChunk, None]:
        chat = run.chat

        def chunk(delta: ChoiceDelta, finish: str | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[ChunkChoice(delta=delta, finish_reason=finish)],  # type: ignore[arg-type]
            )

        yield chunk(ChoiceDelta(role="assistant", content=""))
        try:
            # aclosing: a consumer that stops early closes the backend's stream now, not at GC.
            async with aclosing(self.events(run)) as events:
                async for event in events:
                    if event.text:
                        yield chunk(ChoiceDelta(content=event.text))
        except ShuttingDownError:
            # A proper end for the client's stream: a finish reason, then the error event.
            yield chunk(ChoiceDelta(), "length")
            raise
        yield chunk(ChoiceDelta(), run.finish_reason)
        if chat.include_usage:
            yield ChatCompletionChunk(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[],
                usage=run.usage(),
            )


def sampling_request(request: ChatCompletionRequest) -> SamplingRequest:
    """The sampling a chat completion request asks for, in the gateway's own terms."""
    requested = request.requested_max_tokens()
    return SamplingRequest(
        max_tokens=requested,
        max_tokens_param="max_completion_tokens" if request.max_completion_tokens else "max_tokens",
        temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stop=tuple(request.stop_list()),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
        grammar=response_format_grammar(request),
    )


def response_format_grammar(request: ChatCompletionRequest) -> Grammar | None:
    """``response_format`` as a grammar: json_schema (strict or not) or any JSON object."""
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Grammar("json_schema", json.dumps(for_grammar({"type": "object"})))
    assert fmt.json_schema is not None
    schema = fmt.json_schema.schema_ if fmt.json_schema.schema_ is not None else {}
    return Grammar("json_schema", json.dumps(for_grammar(strict_objects(schema))))
