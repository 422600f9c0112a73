"""OpenAI's chat completions on top of the chat service: requests in, OpenAI shapes out.

Tool calls come out as ``message.tool_calls`` (``finish_reason: "tool_calls"``) or, streamed,
as ``delta.tool_calls`` chunks: the first of a call carries its index, id and name, the
following ones fragments of its arguments, as the ``openai`` SDK's stream helpers accumulate
them. A thinking model's reasoning comes apart from the answer, as ``message.reasoning_content``
or ``delta.reasoning_content`` (vLLM's, llama.cpp's and DeepSeek's name); ``reasoning_effort``
is the template's thinking switch. Log-probabilities are OpenAI's ``logprobs.content``
entries, streamed with the text they belong to.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import replace

from gateway.errors import ShuttingDownError
from gateway.protocol.completions import CompletionRequest
from gateway.protocol.openai import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChoiceDelta,
    ChoiceDeltaFunction,
    ChoiceDeltaToolCall,
    ChoiceLogprobs,
    ChunkChoice,
    CompletionTokensDetails,
    NamedToolChoice,
    PromptTokensDetails,
    ResponseFunctionCall,
    ResponseToolCall,
    TokenLogprob,
    TopLogprob,
    Usage,
    completion_id,
)
from gateway.protocol.openai import FinishReason as OpenAIFinishReason
from gateway.seam.backend import Priority, SamplingParams, TicketSpec, TokenChoice
from gateway.seam.grammar import for_grammar, strict_objects
from gateway.seam.request_parts import ChatMessage, Grammar
from gateway.seam.tool_format import ToolChoice
from gateway.serving.chat import (
    DEFAULT_TEMPERATURE,
    CarriedLogprobs,
    ChatFinishReason,
    ChatRequest,
    ChatRun,
    ChatService,
    FieldNames,
    PreparedChat,
    StreamHead,
    ToolUse,
)
from gateway.serving.messages import template_messages, tool_specs
from gateway.serving.reasoning import ReasoningPiece
from gateway.serving.tool_calls import CallArguments, CallStart, ReplyPiece
from gateway.serving.usage import TokenUsage


class OpenAIChat:
    """``POST /v1/chat/completions`` in the gateway's terms and back."""

    def __init__(self, service: ChatService) -> None:
        self.service = service

    async def prepare(
        self,
        request: ChatCompletionRequest,
        priority_header: str | None = None,
        head: StreamHead | None = None,
    ) -> PreparedChat:
        arrived = time.perf_counter()
        tier = self.service.registry.resolve(request.model)
        priority = Priority.parse(priority_header or request.priority, Priority.USER)
        options = request.stream_options
        messages = template_messages(request.messages)
        prepared = await self.service.prepare(
            ChatRequest(
                tier,
                messages,
                sampling_params(request, tier.temperature_for(None, DEFAULT_TEMPERATURE)),
                priority,
                model_name=request.model,
                chat_id=head.id if head else None,
                session=request.session,
                include_usage=bool(options and options.include_usage),
                arrived=arrived,
                tool_use=tool_use(request),
                thinking=thinking_switch(request.reasoning_effort),
                fields=FieldNames(max_tokens=max_tokens_field(request)),
                ticket=lambda params: chat_ticket(request, messages, params),
            )
        )
        return replace(prepared, created=head.created) if head else prepared

    async def begin(
        self, request: ChatCompletionRequest, priority_header: str | None, head: StreamHead
    ) -> ChatRun:
        """A stream's prepare and start, under the head its opening chunk already named."""
        return await self.start(await self.prepare(request, priority_header, head))

    async def abandon(self, run: ChatRun) -> None:
        await self.service.abandon(run)

    async def start(self, chat: PreparedChat) -> ChatRun:
        return await self.service.start(chat)

    async def complete(self, run: ChatRun) -> ChatCompletion:
        result = await self.service.collect(run)
        calls = [
            ResponseToolCall(
                id=c.id, function=ResponseFunctionCall(name=c.name, arguments=c.arguments)
            )
            for c in result.calls
        ]
        legacy = legacy_functions(run.chat)
        message = AssistantMessage(
            content=None if calls and not result.text else result.text,
            tool_calls=None if legacy else calls or None,
            function_call=calls[0].function if legacy and calls else None,
            reasoning_content=result.reasoning if run.splitter is not None else None,
        )
        logprobs = (
            openai_logprobs(result.logprobs) if run.chat.params.logprobs is not None else None
        )
        return ChatCompletion(
            id=run.chat.id,
            created=run.chat.created,
            model=run.chat.model_name,
            choices=[
                Choice(
                    message=message,
                    finish_reason=finish_reason(result.finish_reason, legacy),
                    logprobs=logprobs,
                )
            ],
            usage=openai_usage(run.usage()),
        )

    def head(self, request: ChatCompletionRequest) -> StreamHead:
        """A stream's head, before its chat is prepared (``prepare`` takes it)."""
        return StreamHead(completion_id(), request.model)

    def opening(self, head: StreamHead) -> list[ChatCompletionChunk]:
        """The stream's first chunk: the assistant's role, sent before the prefill."""
        return [_chunk(head, ChoiceDelta(role="assistant", content=""))]

    async def stream(self, run: ChatRun) -> AsyncGenerator[ChatCompletionChunk, None]:
        """The whole stream: the opening chunk, then ``rest``."""
        for chunk in self.opening(_head_of(run.chat)):
            yield chunk
        async with aclosing(self.rest(run)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def rest(self, run: ChatRun) -> AsyncGenerator[ChatCompletionChunk, None]:
        """The stream after its opening chunk: content, calls, the finish and the usage."""
        chat = run.chat
        head = _head_of(chat)

        def chunk(
            delta: ChoiceDelta,
            finish: OpenAIFinishReason | None = None,
            logprobs: list[TokenChoice] | None = None,
        ) -> ChatCompletionChunk:
            return _chunk(head, delta, finish, logprobs)

        carried = CarriedLogprobs(chat.params.logprobs is not None)
        legacy = legacy_functions(chat)
        try:
            async with aclosing(self.service.replies(run)) as steps:
                async for step in steps:
                    if step.reasoning:
                        yield chunk(ChoiceDelta(reasoning_content=step.reasoning))
                    text, logprobs = carried.take(step)
                    if text:
                        yield chunk(ChoiceDelta(content=text), logprobs=logprobs)
                    for piece in step.pieces:
                        delta = call_delta(piece, legacy)
                        if delta is not None:
                            yield chunk(delta)
        except ShuttingDownError:
            # A proper end for the client's stream: a finish reason, then the error event.
            yield chunk(ChoiceDelta(), "length")
            raise
        finish = finish_reason(run.finish_reason, legacy)
        yield chunk(ChoiceDelta(), finish, logprobs=carried.pending)
        if chat.include_usage:
            yield ChatCompletionChunk(
                id=chat.id,
                created=chat.created,
                model=chat.model_name,
                choices=[],
                usage=openai_usage(run.usage()),
            )


def _head_of(chat: PreparedChat) -> StreamHead:
    return StreamHead(chat.id, chat.model_name, chat.created)


def _chunk(
    head: StreamHead,
    delta: ChoiceDelta,
    finish: OpenAIFinishReason | None = None,
    logprobs: list[TokenChoice] | None = None,
) -> ChatCompletionChunk:
    return ChatCompletionChunk(
        id=head.id,
        created=head.created,
        model=head.model,
        choices=[
            ChunkChoice(
                delta=delta,
                finish_reason=finish,
                logprobs=openai_logprobs(logprobs) if logprobs else None,
            )
        ],
    )


LEGACY_FUNCTIONS = "functions"  # the ToolUse param of a request with legacy functions


def legacy_functions(chat: PreparedChat) -> bool:
    """The request gave legacy ``functions``: its call is answered as ``function_call``."""
    return chat.tool_use is not None and chat.tool_use.param == LEGACY_FUNCTIONS


def finish_reason(reason: ChatFinishReason, legacy: bool) -> OpenAIFinishReason:
    """The reply's finish in OpenAI's words: a legacy function call's is ``function_call``."""
    return "function_call" if legacy and reason == "tool_calls" else reason


def openai_usage(usage: TokenUsage) -> Usage:
    """The chat's tokens in OpenAI's shape (chat and legacy completions, tasks): details of
    the completion where the reply has a reasoning section or tokens were drafted."""
    details = None
    if usage.reasoning is not None or usage.drafted is not None:
        accepted = usage.accepted or 0
        details = CompletionTokensDetails(
            reasoning_tokens=usage.reasoning or 0,
            accepted_prediction_tokens=accepted,
            rejected_prediction_tokens=(usage.drafted or 0) - accepted,
        )
    return Usage(
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
        total_tokens=usage.total,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached),
        completion_tokens_details=details,
    )


def call_delta(piece: ReplyPiece | ReasoningPiece, legacy: bool) -> ChoiceDelta | None:
    """A piece of a tool call as a streamed delta: its start (index, id, name), then
    fragments of its arguments; a legacy function call as ``function_call``. None for a
    piece of anything else."""
    if not isinstance(piece, CallStart | CallArguments):
        return None
    if legacy:
        return ChoiceDelta(function_call=legacy_delta(piece))
    if isinstance(piece, CallStart):
        function = ChoiceDeltaFunction(name=piece.name, arguments="")
        call = ChoiceDeltaToolCall(
            index=piece.index, id=piece.id, type="function", function=function
        )
    else:
        function = ChoiceDeltaFunction(arguments=piece.fragment)
        call = ChoiceDeltaToolCall(index=piece.index, function=function)
    return ChoiceDelta(tool_calls=[call])


def legacy_delta(piece: CallStart | CallArguments) -> ChoiceDeltaFunction:
    """A streamed legacy call: the name first (with empty arguments), then fragments."""
    if isinstance(piece, CallStart):
        return ChoiceDeltaFunction(name=piece.name, arguments="")
    return ChoiceDeltaFunction(arguments=piece.fragment)


CHAT_TASK = "chat"  # prompts/chat.toml: how a peer runs a chat ticket


def chat_ticket(
    request: ChatCompletionRequest, messages: tuple[ChatMessage, ...], params: SamplingParams
) -> TicketSpec | None:
    """The chat as a ticket for a peer (the ``chat`` task type), when it can be one: plain
    text messages and the sampling a ticket carries (``params``, as checked against the
    context); tools, response formats, logprobs, presence and frequency penalties and logit
    bias keep it on this node (a repetition penalty travels)."""
    plain = all(
        m.role in ("system", "developer", "user", "assistant") and not m.tool_calls
        for m in request.messages
    )
    extras = (
        request.tools,
        request.response_format and request.response_format.type != "text",
        request.logprobs,
        request.presence_penalty,
        request.frequency_penalty,
        request.logit_bias,
        request.reasoning_effort,
        request.thinking_token_budget is not None,
    )
    if not plain or any(extras):
        return None
    args = {"messages": json.dumps(list(messages), ensure_ascii=False)}
    args["temperature"] = repr(params.temperature)
    args["top_p"] = repr(params.top_p)
    if params.max_tokens is not None:
        args["max_tokens"] = str(params.max_tokens)
    if params.seed is not None:
        args["seed"] = str(params.seed)
    if params.stop:
        args["stop"] = json.dumps(list(params.stop), ensure_ascii=False)
    # Resolved here (the request's, else this tier's; 1.0: none), so that the peer draws as
    # this node would and a failover goes on alike, whatever the peer's tier sets.
    args["repetition_penalty"] = repr(params.repetition_penalty or 1.0)
    return TicketSpec(CHAT_TASK, args)


def openai_logprobs(choices: Sequence[TokenChoice]) -> ChoiceLogprobs:
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=c.chosen.token,
                logprob=c.chosen.logprob,
                bytes=list(c.chosen.token_bytes),
                top_logprobs=[
                    TopLogprob(token=t.token, logprob=t.logprob, bytes=list(t.token_bytes))
                    for t in c.top
                ],
            )
            for c in choices
        ]
    )


def sampling_params(
    request: ChatCompletionRequest, default_temperature: float = DEFAULT_TEMPERATURE
) -> SamplingParams:
    """The sampling a chat completion request asks for, in the gateway's own terms."""
    return replace(
        openai_sampling(request, default_temperature),
        max_tokens=request.requested_max_tokens(),
        grammar=response_format_grammar(request),
        logprobs=(request.top_logprobs or 0) if request.logprobs else None,
        reasoning_budget=request.thinking_token_budget,
    )


def max_tokens_field(request: ChatCompletionRequest) -> str:
    """The field that set the completion's length, named when it is refused."""
    return "max_completion_tokens" if request.max_completion_tokens else "max_tokens"


def thinking_switch(effort: str | None) -> bool | None:
    """``reasoning_effort`` as the template's thinking switch: none and minimal switch it off,
    the other levels on; absent, the template's default. (Effort has no finer meaning for
    the templates that have a switch: a budget is ``thinking_token_budget``.)"""
    if effort is None:
        return None
    return effort not in ("none", "minimal")


def openai_sampling(
    request: ChatCompletionRequest | CompletionRequest,
    default_temperature: float = DEFAULT_TEMPERATURE,
) -> SamplingParams:
    """The sampling fields OpenAI's chat and legacy completions share (each sets its own
    with ``replace``; ``default_temperature``: the tier's, for a request that sets none)."""
    return SamplingParams(
        temperature=default_temperature if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stop=tuple(request.stop_list()),
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty,
        logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
    )


def tool_use(request: ChatCompletionRequest) -> ToolUse | None:
    """The request's functions and its tool choice (OpenAI's default: auto with tools).

    Parallel calls only when asked for (``parallel_tool_calls: true``), as llama.cpp's server
    does: small models given the choice repeat the same call.
    """
    if not request.tools:
        return None
    parallel = request.parallel_tool_calls is True
    choice = request.tool_choice or "auto"
    # Legacy functions were mapped onto tools by the protocol model; the param marks them.
    param = LEGACY_FUNCTIONS if request.uses_legacy_functions else "tools"
    if isinstance(choice, NamedToolChoice):
        named = ToolChoice("function", choice.function.name, parallel=False)
        return ToolUse(tool_specs(request.tools), named, param=param)
    return ToolUse(tool_specs(request.tools), ToolChoice(choice, parallel=parallel), param=param)


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
