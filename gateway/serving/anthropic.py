"""Anthropic's Messages API on top of the chat service: the same scheduler, priorities, typing
hints, prefix cache and metrics as chat completions, in Anthropic's shapes.

Content blocks map onto the chat service's conversation: ``system`` is the system message,
``tool_use`` blocks are an assistant's tool calls, ``tool_result`` blocks are tool messages;
``thinking`` blocks sent back are left out. A thinking model's reasoning comes back as a
``thinking`` block (streamed: ``thinking_delta`` events, then a ``signature_delta``), and the
``thinking`` parameter is the template's switch, its ``budget_tokens`` a forced end.
Usage follows Anthropic's meaning: ``input_tokens`` are the prompt tokens computed, and
``cache_read_input_tokens`` those read from the prefix cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

from pydantic import BaseModel

from gateway.errors import InvalidRequestError
from gateway.protocol.anthropic import (
    AnthropicUsage,
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    CountTokensRequest,
    InputJSONDelta,
    Message,
    MessageDelta,
    MessageDeltaEvent,
    MessageDeltaUsage,
    MessageParam,
    MessagesRequest,
    MessageStartEvent,
    MessageStopEvent,
    PingEvent,
    ResponseBlock,
    ResponseTextBlock,
    ResponseThinkingBlock,
    ResponseToolUseBlock,
    SignatureDelta,
    StopReason,
    TextBlock,
    TextDelta,
    ThinkingConfig,
    ThinkingDelta,
    Tool,
    ToolResultBlock,
    ToolUseBlock,
    message_id,
)
from gateway.seam.backend import Priority, SamplingParams
from gateway.seam.grammar import for_grammar, strict_objects
from gateway.seam.json_value import JSONValue
from gateway.seam.request_parts import ChatMessage, Grammar, ToolSpec
from gateway.seam.tool_format import ToolChoice
from gateway.serving.chat import (
    ChatRequest,
    ChatRun,
    ChatService,
    FieldNames,
    PreparedChat,
    StreamHead,
    ToolUse,
)
from gateway.serving.message_threads import MessageThreads
from gateway.serving.partial_json import partial_object
from gateway.serving.reasoning import ReasoningPiece
from gateway.serving.response_store import ResponseStore
from gateway.serving.tool_calls import CallArguments, CallStart, TextPiece, ToolCall
from gateway.serving.usage import TokenUsage

log = logging.getLogger(__name__)
DEFAULT_TEMPERATURE = 1.0  # Anthropic's default


class AnthropicMessages:
    """``POST /v1/messages`` and ``/v1/messages/count_tokens`` in the gateway's terms."""

    def __init__(self, service: ChatService, threads: ResponseStore | None = None) -> None:
        self.service = service
        self.threads = MessageThreads(threads) if threads is not None else None

    async def prepare(self, request: MessagesRequest, chat_id: str | None = None) -> PreparedChat:
        arrived = time.perf_counter()
        tier = self.service.registry.resolve(request.model)
        request = await self._whole(request)
        sampling = SamplingParams(
            max_tokens=request.max_tokens,
            temperature=tier.temperature_for(request.temperature, DEFAULT_TEMPERATURE),
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=request.top_k or 0,
            stop=tuple(request.stop_sequences or ()),
            reasoning_budget=request.thinking.budget_tokens if request.thinking else None,
            grammar=output_format_grammar(request),
        )
        return await self.service.prepare(
            ChatRequest(
                tier,
                conversation(request.system_text(), request.messages),
                sampling,
                Priority.parse(request.priority, Priority.USER),
                model_name=request.model,
                chat_id=chat_id or message_id(),
                session=request.session,
                arrived=arrived,
                tool_use=tool_use(request),
                thinking=thinking_switch(request.thinking),
                fields=FieldNames(grammar="output_config.format"),
            )
        )

    async def _whole(self, request: MessagesRequest) -> MessagesRequest:
        if request.thread is not None and self.threads is None:
            raise InvalidRequestError(
                "this gateway keeps no message threads",
                param="thread",
                code="thread_unsupported_request",
            )
        return await self.threads.whole(request) if self.threads is not None else request

    async def _keep(self, request: MessagesRequest | None, message: Message) -> None:
        if request is None or request.thread is None or self.threads is None:
            return
        try:
            await self.threads.keep(request, message)
        except Exception:  # a full disk must not lose the answer itself
            log.exception("message %s: its thread turn was not stored", message.id)

    async def count_tokens(self, request: CountTokensRequest) -> int:
        tier = self.service.registry.resolve(request.model)
        tools = tool_specs(request.tools)
        prompt = await tier.backend.render(
            conversation(request.system_text(), request.messages), tools
        )
        if prompt.tokens is None:
            raise InvalidRequestError(
                f"tier {tier.name!r} ({tier.backend.info.kind} backend) does not tokenize here; "
                "count_tokens needs a local tier",
                param="model",
            )
        return len(prompt.tokens)

    async def start(self, chat: PreparedChat) -> ChatRun:
        return await self.service.start(chat)

    async def complete(self, run: ChatRun, request: MessagesRequest | None = None) -> Message:
        """The whole message; a threaded ``request``'s turn is stored before it is returned."""
        result = await self.service.collect(run)
        message = _message(run, result.text, result.reasoning, result.calls)
        await self._keep(request, message)
        return message

    def head(self, request: MessagesRequest) -> StreamHead:
        """A stream's head, before its chat is prepared (``prepare`` takes it)."""
        return StreamHead(message_id(), request.model)

    async def begin(self, request: MessagesRequest, head: StreamHead) -> ChatRun:
        """A stream's prepare and start, under the id its message_start already named."""
        return await self.start(await self.prepare(request, head.id))

    async def abandon(self, run: ChatRun) -> None:
        await self.service.abandon(run)

    def opening(self, head: StreamHead, run: ChatRun | None = None) -> list[BaseModel]:
        """message_start, sent before the prefill; its usage is known only if the chat has
        started (else the final message_delta carries it)."""
        usage = AnthropicUsage(input_tokens=0, output_tokens=0)
        if run is not None:
            usage = anthropic_usage(run.usage())
        message = Message(id=head.id, model=head.model, content=[], stop_reason=None, usage=usage)
        return [MessageStartEvent(message=message)]

    async def stream(self, run: ChatRun) -> AsyncGenerator[BaseModel, None]:
        """The whole stream: message_start, then ``rest``."""
        head = StreamHead(run.chat.id, run.chat.model_name, run.chat.created)
        for event in self.opening(head, run):
            yield event
        async with aclosing(self.rest(run)) as events:
            async for event in events:
                yield event

    async def rest(
        self, run: ChatRun, request: MessagesRequest | None = None
    ) -> AsyncGenerator[BaseModel, None]:
        """The stream after message_start: the content blocks, message_delta, message_stop
        (a threaded ``request``'s turn is stored before message_stop, when SDKs take it)."""
        blocks = _Blocks()
        texts: list[str] = []
        async with aclosing(self.service.replies(run)) as steps:
            async for step in steps:
                for piece in step.pieces:
                    if isinstance(piece, ReasoningPiece):
                        thinking = ResponseThinkingBlock(thinking="", signature="")
                        for event in blocks.open("thinking", thinking):
                            yield event
                        blocks.thinking.append(piece.text)
                        blocks.reasoning.append(piece.text)
                        yield ContentBlockDeltaEvent(
                            index=blocks.index, delta=ThinkingDelta(thinking=piece.text)
                        )
                    elif isinstance(piece, TextPiece):
                        for event in blocks.open("text", ResponseTextBlock(text="")):
                            yield event
                        texts.append(piece.text)
                        yield ContentBlockDeltaEvent(
                            index=blocks.index, delta=TextDelta(text=piece.text)
                        )
                    elif isinstance(piece, CallStart):
                        block = ResponseToolUseBlock(id=piece.id, name=piece.name, input={})
                        for event in blocks.open("tool_use", block, new=True):
                            yield event
                    elif isinstance(piece, CallArguments):
                        yield ContentBlockDeltaEvent(
                            index=blocks.index, delta=InputJSONDelta(partial_json=piece.fragment)
                        )
        for event in blocks.close():
            yield event
        yield MessageDeltaEvent(
            delta=MessageDelta(stop_reason=stop_reason(run), stop_sequence=_stop_sequence(run)),
            usage=final_usage(run.usage()),
        )
        if request is not None and request.thread is not None:
            calls = run.parser.calls if run.parser else []
            await self._keep(
                request, _message(run, "".join(texts), "".join(blocks.reasoning), calls)
            )
        yield MessageStopEvent()


class _Blocks:
    """The stream's content blocks: which one is open, and the events that open and close them."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: str | None = None
        self.thinking: list[str] = []  # the open thinking block's text, for its signature
        self.reasoning: list[str] = []  # every thinking block's text

    def open(self, kind: str, block: ResponseBlock, new: bool = False) -> list[BaseModel]:
        if self.kind == kind and not new:
            return []
        events = self.close()
        self.index += 1
        self.kind = kind
        events.append(ContentBlockStartEvent(index=self.index, content_block=block))
        if self.index == 0:
            events.append(PingEvent())  # where Anthropic's own streams send their first ping
        return events

    def close(self) -> list[BaseModel]:
        if self.kind is None:
            return []
        events: list[BaseModel] = []
        if self.kind == "thinking":
            signature = thinking_signature("".join(self.thinking))
            events.append(
                ContentBlockDeltaEvent(index=self.index, delta=SignatureDelta(signature=signature))
            )
            self.thinking = []
        self.kind = None
        events.append(ContentBlockStopEvent(index=self.index))
        return events


def _message(run: ChatRun, text: str, reasoning: str, calls: Sequence[ToolCall]) -> Message:
    content: list[ResponseBlock] = []
    if reasoning:
        content.append(
            ResponseThinkingBlock(thinking=reasoning, signature=thinking_signature(reasoning))
        )
    if text:
        content.append(ResponseTextBlock(text=text))
    for call in calls:
        # A call cut by max_tokens is returned too, as the stream shows it: its input
        # parsed as far as it goes (stop_reason max_tokens says it is partial).
        arguments = json.loads(call.arguments) if call.complete else None
        content.append(
            ResponseToolUseBlock(
                id=call.id,
                name=call.name,
                input=arguments if arguments is not None else partial_object(call.arguments),
            )
        )
    return Message(
        id=run.chat.id,
        model=run.chat.model_name,
        content=content,
        stop_reason=stop_reason(run),
        stop_sequence=_stop_sequence(run),
        usage=anthropic_usage(run.usage()),
    )


def conversation(system: str | None, messages: Sequence[MessageParam]) -> tuple[ChatMessage, ...]:
    """Anthropic's system and content blocks as template messages."""
    out: list[ChatMessage] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        texts: list[str] = []
        calls: list[JSONValue] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                texts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                calls.append(
                    {
                        "id": block.id,
                        "type": "function",
                        "function": {"name": block.name, "arguments": block.input},
                    }
                )
            elif isinstance(block, ToolResultBlock):
                text = block.text()
                if block.is_error:
                    text = f"Error: {text}"
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
        if texts or calls:
            entry: ChatMessage = {"role": message.role, "content": "".join(texts)}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
    return tuple(out)


def output_format_grammar(request: MessagesRequest) -> Grammar | None:
    """``output_config.format`` as a grammar, as OpenAI's ``response_format`` json_schema."""
    config = request.output_config
    if config is None or config.format is None:
        return None
    schema = strict_objects(config.format.schema_)
    return Grammar("json_schema", json.dumps(for_grammar(schema)))


def thinking_switch(config: ThinkingConfig | None) -> bool | None:
    """Anthropic's ``thinking`` as the template's switch; absent: the template's default (a
    local model that thinks by default keeps doing so)."""
    return None if config is None else config.type != "disabled"


def thinking_signature(thinking: str) -> str:
    """An opaque value for a thinking block's ``signature`` (which SDKs require): a digest of
    its text. Nothing is signed; blocks sent back are not checked."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def tool_specs(tools: Sequence[Tool] | None) -> tuple[ToolSpec, ...]:
    return tuple(ToolSpec(t.name, t.description, t.input_schema) for t in tools or ())


def tool_use(request: MessagesRequest) -> ToolUse | None:
    if not request.tools:
        return None
    choice = request.tool_choice
    # Parallel calls only when asked for (disable_parallel_tool_use: false), as for OpenAI's
    # parallel_tool_calls: small models given the choice repeat the same call.
    parallel = choice is not None and choice.disable_parallel_tool_use is False
    tools = tool_specs(request.tools)
    if choice is None or choice.type == "auto":
        return ToolUse(tools, ToolChoice("auto", parallel=parallel), id_prefix="toolu_")
    if choice.type == "any":
        return ToolUse(tools, ToolChoice("required", parallel=parallel), id_prefix="toolu_")
    if choice.type == "tool":
        named = ToolChoice("function", choice.name, parallel=False)
        return ToolUse(tools, named, param="tool_choice", id_prefix="toolu_")
    return ToolUse(tools, ToolChoice("none"), id_prefix="toolu_")


def stop_reason(run: ChatRun) -> StopReason:
    finish = run.finish_reason
    if finish == "tool_calls":
        return "tool_use"
    if finish == "length":
        return "max_tokens"
    return "stop_sequence" if _stop_sequence(run) else "end_turn"


def _stop_sequence(run: ChatRun) -> str | None:
    """The client's stop sequence that ended the reply (a model's own turn marker is not)."""
    matched = run.stop_sequence
    return matched if matched is not None and matched in run.chat.params.stop else None


def anthropic_usage(usage: TokenUsage) -> AnthropicUsage:
    """The chat's tokens in Anthropic's meaning: ``input_tokens`` those computed, the ones
    read from the prefix cache apart."""
    return AnthropicUsage(
        input_tokens=usage.computed,
        output_tokens=usage.completion,
        cache_read_input_tokens=usage.cached,
    )


def final_usage(usage: TokenUsage) -> MessageDeltaUsage:
    """The usage of a stream's message_delta (whose message_start may not have had it)."""
    return MessageDeltaUsage(
        output_tokens=usage.completion,
        input_tokens=usage.computed,
        cache_read_input_tokens=usage.cached,
    )
