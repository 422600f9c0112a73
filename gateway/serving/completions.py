"""OpenAI's legacy text completions on top of the chat service: a raw prompt, no template."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import replace

from gateway.errors import ShuttingDownError
from gateway.protocol.completions import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    text_completion_id,
)
from gateway.seam.backend import FinishReason, Priority, TextPrompt, TokenChoice
from gateway.serving.chat import (
    DEFAULT_TEMPERATURE,
    CarriedLogprobs,
    ChatRequest,
    ChatRun,
    ChatService,
    PreparedChat,
    plain_finish,
)
from gateway.serving.openai_chat import openai_sampling, openai_usage


class CompletionsService:
    """``POST /v1/completions`` in the gateway's terms and back."""

    def __init__(self, service: ChatService) -> None:
        self.service = service

    async def prepare(
        self, request: CompletionRequest, priority_header: str | None = None
    ) -> PreparedChat:
        arrived = time.perf_counter()
        tier = self.service.registry.resolve(request.model)
        options = request.stream_options
        sampling = replace(
            openai_sampling(request, tier.temperature_for(None, DEFAULT_TEMPERATURE)),
            max_tokens=request.max_tokens,
            top_k=request.top_k or 0,
            logprobs=request.logprobs,
        )
        return await self.service.prepare(
            ChatRequest(
                tier,
                (),
                sampling,
                Priority.parse(priority_header or request.priority, Priority.USER),
                model_name=request.model,
                chat_id=text_completion_id(),
                include_usage=bool(options and options.include_usage),
                arrived=arrived,
                text_prompt=TextPrompt(request.prompt_text()),
            )
        )

    async def start(self, chat: PreparedChat) -> ChatRun:
        return await self.service.start(chat)

    async def complete(self, run: ChatRun, echo: bool) -> Completion:
        result = await self.service.collect(run)
        prefix = self._echoed(run, echo)
        logprobs = (
            legacy_logprobs(result.logprobs, len(prefix))
            if run.chat.params.logprobs is not None
            else None
        )
        return Completion(
            id=run.chat.id,
            created=run.chat.created,
            model=run.chat.model_name,
            choices=[
                CompletionChoice(
                    text=prefix + result.text,
                    logprobs=logprobs,
                    finish_reason=plain_finish(result.finish_reason),
                )
            ],
            usage=openai_usage(run.usage()),
        )

    async def stream(self, run: ChatRun, echo: bool) -> AsyncGenerator[Completion, None]:
        chat = run.chat
        wants_logprobs = chat.params.logprobs is not None

        def chunk(
            text: str,
            finish: FinishReason | None = None,
            logprobs: CompletionLogprobs | None = None,
        ) -> Completion:
            return Completion(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[
                    CompletionChoice(
                        text=text,
                        logprobs=logprobs,
                        finish_reason=finish,
                    )
                ],
            )

        offset = 0
        prefix = self._echoed(run, echo)
        if prefix:
            yield chunk(prefix)
            offset = len(prefix)
        carried = CarriedLogprobs(wants_logprobs)
        try:
            async with aclosing(self.service.replies(run)) as steps:
                async for step in steps:
                    text, logprobs = carried.take(step)
                    if text:
                        legacy = legacy_logprobs(logprobs, offset) if wants_logprobs else None
                        yield chunk(text, logprobs=legacy)
                        offset += len(text)
        except ShuttingDownError:
            yield chunk("", "length")
            raise
        tail = legacy_logprobs(carried.pending, offset) if carried.pending else None
        yield chunk("", plain_finish(run.finish_reason), tail)
        if chat.include_usage:
            yield Completion(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[],
                usage=openai_usage(run.usage()),
            )

    @staticmethod
    def _echoed(run: ChatRun, echo: bool) -> str:
        prompt = run.chat.text_prompt
        return prompt.text if echo and prompt is not None else ""


def legacy_logprobs(choices: Sequence[TokenChoice], offset: int) -> CompletionLogprobs:
    """The legacy shape: parallel lists, alternatives as {token: logprob}, offsets into the text."""
    offsets = []
    for choice in choices:
        offsets.append(offset)
        offset += len(choice.chosen.token)
    return CompletionLogprobs(
        tokens=[c.chosen.token for c in choices],
        token_logprobs=[c.chosen.logprob for c in choices],
        top_logprobs=[{t.token: t.logprob for t in c.top} for c in choices],
        text_offset=offsets,
    )
