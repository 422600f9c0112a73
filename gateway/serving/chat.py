"""Chat completions: from a validated request to engine work in the slot, and back to OpenAI shapes.

Nothing here knows HTTP; routes call ``prepare`` and then ``complete`` or ``stream``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from gateway.engines.base import Engine, GenerationEvent, SamplingParams
from gateway.errors import ContextLengthExceededError, InvalidRequestError
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
from gateway.scheduler.jobs import Job, Priority
from gateway.scheduler.slot import Scheduler
from gateway.serving.models import ModelRegistry
from gateway.serving.prompt_cache import PrefixCacheStore
from gateway.serving.prompts import render_off_loop, template_messages
from gateway.serving.typing import TypingService

DEFAULT_TEMPERATURE = 1.0  # OpenAI's default


@dataclass(frozen=True)
class ChatStart:
    """First event of a chat job: it holds the slot, and this much of its prompt was cached."""

    cached_tokens: int


@dataclass
class PreparedChat:
    """A validated chat request, rendered to tokens and ready to be queued."""

    request: ChatCompletionRequest
    model_name: str
    engine: Engine
    prompt: list[int]
    params: SamplingParams
    priority: Priority
    arrived: float
    id: str = field(default_factory=completion_id)
    created: int = field(default_factory=now)


@dataclass
class ChatRun:
    """A chat job in flight: its events, and what the service has counted of it."""

    chat: PreparedChat
    job: Job
    job_events: AsyncIterator[Any]  # the job's one event stream, read once
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None

    def usage(self) -> Usage:
        prompt = len(self.chat.prompt)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=self.completion_tokens,
            total_tokens=prompt + self.completion_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self.cached_tokens),
        )


class ChatService:
    """Turns chat requests into slot jobs and their events into OpenAI responses."""

    def __init__(
        self,
        registry: ModelRegistry,
        scheduler: Scheduler,
        metrics: GatewayMetrics,
        prefix_cache: PrefixCacheStore,
        typing: TypingService,
    ) -> None:
        self.typing = typing
        self.registry = registry
        self.scheduler = scheduler
        self.metrics = metrics
        self.prefix_cache = prefix_cache

    async def prepare(
        self, request: ChatCompletionRequest, priority_header: str | None = None
    ) -> PreparedChat:
        arrived = time.perf_counter()
        served = self.registry.resolve(request.model)
        priority = Priority.parse(priority_header or request.priority, Priority.USER)
        prompt = await render_off_loop(
            served.engine.render_chat, template_messages(request.messages)
        )
        params = self._sampling_params(request, served.engine, len(prompt))
        return PreparedChat(request, served.id, served.engine, prompt, params, priority, arrived)

    def _sampling_params(
        self, request: ChatCompletionRequest, engine: Engine, prompt_tokens: int
    ) -> SamplingParams:
        context = engine.context_length
        requested = request.requested_max_tokens()
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        if prompt_tokens >= context or (requested and prompt_tokens + requested > context):
            wanted = prompt_tokens + (requested or 1)
            raise ContextLengthExceededError(
                f"This model's maximum context length is {context} tokens. However, you "
                f"requested {wanted} tokens ({prompt_tokens} in the messages, "
                f"{requested or 1} in the completion). Please reduce the length of the "
                "messages or completion.",
                param="messages" if prompt_tokens >= context else param,
            )
        logit_bias = {int(k): v for k, v in (request.logit_bias or {}).items()}
        vocab = engine.vocab_size
        if any(t >= vocab for t in logit_bias):
            raise InvalidRequestError(
                f"logit_bias names a token id beyond the vocabulary ({vocab})", param="logit_bias"
            )
        temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
        top_p = 1.0 if request.top_p is None else request.top_p
        if top_p == 0.0:  # nothing survives nucleus filtering but the top token
            temperature = 0.0
        return SamplingParams(
            max_tokens=requested or context - prompt_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=request.seed,
            stop=tuple(request.stop_list()),
            presence_penalty=request.presence_penalty or 0.0,
            frequency_penalty=request.frequency_penalty or 0.0,
            logit_bias=logit_bias,
        )

    # -- running -------------------------------------------------------------------------------

    async def start(self, chat: PreparedChat) -> ChatRun:
        """Queue the chat and wait until it holds the slot (raises 429/503 errors)."""
        await self.typing.join(chat.model_name, chat.prompt, chat.request.session)
        job = Job(priority=chat.priority, work=lambda: self._work(chat, job), kind="chat")
        self.scheduler.submit(job)
        run = ChatRun(chat, job, job.events())
        try:
            first = await anext(run.job_events)
        except StopAsyncIteration:
            raise asyncio.CancelledError from None  # withdrawn before it started
        except BaseException:
            job.cancel()
            raise
        assert isinstance(first, ChatStart)
        run.cached_tokens = first.cached_tokens
        return run

    def _work(self, chat: PreparedChat, job: Job) -> Iterator[Any]:
        """The job's steps, on the inference thread: reuse a cached prefix, then generate."""
        engine = chat.engine
        state = self.prefix_cache.fetch(chat.model_name, chat.prompt)
        generation = engine.generate(chat.prompt, chat.params, state)
        job.release_memory = generation.release_cache
        yield ChatStart(generation.cached_tokens)
        try:
            yield from generation
        finally:
            if generation.state is not None:
                self.prefix_cache.insert(chat.model_name, generation.state)

    async def events(self, run: ChatRun) -> AsyncIterator[GenerationEvent]:
        """The generation's events; withdraws the job if the consumer stops early."""
        first_token_at: float | None = None
        model = run.chat.model_name
        try:
            async for event in run.job_events:
                if event.completion_tokens == 0:
                    continue  # a prefill chunk, not a token
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    cache = "warm" if run.cached_tokens else "cold"
                    self.metrics.time_to_first_token.labels(model, cache).observe(
                        first_token_at - run.chat.arrived
                    )
                run.completion_tokens = event.completion_tokens
                run.finish_reason = event.finish_reason
                yield event
        finally:
            if not run.job.finished:
                run.job.cancel()
            self._count(run, first_token_at)

    def _count(self, run: ChatRun, first_token_at: float | None) -> None:
        model = run.chat.model_name
        self.metrics.prompt_tokens.labels(model).inc(len(run.chat.prompt))
        self.metrics.prompt_tokens_cached.labels(model).inc(run.cached_tokens)
        self.metrics.prompt_tokens_computed.labels(model).inc(
            len(run.chat.prompt) - run.cached_tokens
        )
        self.metrics.generation_tokens.labels(model).inc(run.completion_tokens)
        if first_token_at is not None and run.completion_tokens > 1:
            elapsed = time.perf_counter() - first_token_at
            if elapsed > 0:
                self.metrics.decode_tokens_per_second.labels(model).observe(
                    (run.completion_tokens - 1) / elapsed
                )

    async def complete(self, run: ChatRun) -> ChatCompletion:
        parts = [event.text async for event in self.events(run)]
        return ChatCompletion(
            id=run.chat.id,
            created=run.chat.created,
            model=run.chat.request.model,
            choices=[
                Choice(
                    message=AssistantMessage(content="".join(parts)),
                    finish_reason=run.finish_reason or "stop",  # type: ignore[arg-type]
                )
            ],
            usage=run.usage(),
        )

    async def stream(self, run: ChatRun) -> AsyncIterator[ChatCompletionChunk]:
        chat = run.chat

        def chunk(delta: ChoiceDelta, finish: str | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(
                id=chat.id,
                created=chat.created,
                model=chat.request.model,
                choices=[ChunkChoice(delta=delta, finish_reason=finish)],  # type: ignore[arg-type]
            )

        yield chunk(ChoiceDelta(role="assistant", content=""))
        async for event in self.events(run):
            if event.text:
                yield chunk(ChoiceDelta(content=event.text))
            if event.finish_reason:
                yield chunk(ChoiceDelta(), event.finish_reason)
        options = chat.request.stream_options
        if options and options.include_usage:
            yield ChatCompletionChunk(
                id=chat.id,
                created=chat.created,
                model=chat.request.model,
                choices=[],
                usage=run.usage(),
            )
