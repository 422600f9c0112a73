"""OpenAI's legacy text completions on top of the chat service: a raw prompt, no template."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

from gateway.engines.backend import TextPrompt, TokenChoice
from gateway.errors import ShuttingDownError
from gateway.protocol.completions import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    text_completion_id,
)
from gateway.scheduler.jobs import Priority
from gateway.serving.chat import (
    DEFAULT_TEMPERATURE,
    ChatRun,
    ChatService,
    PreparedChat,
    SamplingRequest,
)
from gateway.serving.tool_calls import TextPiece


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
        sampling = SamplingRequest(
            max_tokens=request.max_tokens,
            temperature=DEFAULT_TEMPERATURE if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=request.top_k or 0,
            seed=request.seed,
            stop=tuple(request.stop_list()),
            presence_penalty=request.presence_penalty or 0.0,
            frequency_penalty=request.frequency_penalty or 0.0,
            logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
            logprobs=request.logprobs,
        )
        prepared = await self.service.prepare_messages(
            tier,
            (),
            sampling,
            Priority.parse(priority_header or request.priority, Priority.USER),
            model_name=request.model,
            include_usage=bool(options and options.include_usage),
            arrived=arrived,
            text_prompt=TextPrompt(request.prompt_text()),
        )
        prepared.id = text_completion_id()
        return prepared

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
                    finish_reason=result.finish_reason,  # type: ignore[arg-type]
                )
            ],
            usage=run.usage(),
        )

    async def stream(self, run: ChatRun, echo: bool) -> AsyncGenerator[Completion, None]:
        chat = run.chat
        wants_logprobs = chat.params.logprobs is not None

        def chunk(
            text: str, finish: str | None = None, logprobs: CompletionLogprobs | None = None
        ) -> Completion:
            return Completion(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[
                    CompletionChoice(
                        text=text,
                        logprobs=logprobs,
                        finish_reason=finish,  # type: ignore[arg-type]
                    )
                ],
            )

        offset = 0
        prefix = self._echoed(run, echo)
        if prefix:
            yield chunk(prefix)
            offset = len(prefix)
        pending: list[TokenChoice] = []
        try:
            async with aclosing(self.service.replies(run)) as steps:
                async for step in steps:
                    pending.extend(step.logprobs if wants_logprobs else ())
                    text = "".join(p.text for p in step.pieces if isinstance(p, TextPiece))
                    if text:
                        logprobs = legacy_logprobs(pending, offset) if wants_logprobs else None
                        yield chunk(text, logprobs=logprobs)
                        offset += len(text)
                        pending = []
        except ShuttingDownError:
            yield chunk("", "length")
            raise
        tail = legacy_logprobs(pending, offset) if pending else None
        yield chunk("", run.finish_reason, tail)
        if chat.include_usage:
            yield Completion(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[],
                usage=run.usage(),
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
