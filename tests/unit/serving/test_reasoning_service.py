"""A thinking model's reply through the chat service and both wire formats (a fake backend
whose prompt leaves the section to the model, as Qwen3's does with thinking on)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace

import pytest
from pydantic import ValidationError

from gateway.metrics import GatewayMetrics
from gateway.protocol.anthropic import MessagesRequest
from gateway.protocol.openai import ChatCompletionRequest
from gateway.seam.backend import (
    BackendEvent,
    Finished,
    GenerationRequest,
    Priority,
    Prompt,
    SamplingParams,
    Started,
    TokenEvent,
)
from gateway.seam.reasoning import ReplyFormat
from gateway.seam.request_parts import ChatMessage, Grammar
from gateway.seam.tool_format import Marker
from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatRequest, ChatService
from gateway.serving.hints import HintService
from gateway.serving.openai_chat import OpenAIChat
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import FakeBackend, FakeTypingGates

REPLY = ("<think>", "weigh", " it", "</think>", "\n\n", "Paris")


class ThinkingBackend(FakeBackend):
    def __init__(self) -> None:
        super().__init__()
        self.capabilities = replace(self.capabilities, structured_output=True)
        self.switches: list[bool | None] = []

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[object] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        self.switches.append(thinking)
        state = "off" if thinking is False else "required"
        return Prompt((1, 2, 3), ReplyFormat(state, Marker("<think>"), Marker("</think>")))

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        yield Started(3, 0)
        for index, text in enumerate(REPLY):
            yield TokenEvent(text, (index,))
        yield Finished("stop", 3, len(REPLY))


def service() -> tuple[ChatService, ThinkingBackend]:
    backend = ThinkingBackend()
    registry = TierRegistry({"fast": Tier("fast", backend, 0)}, {}, "fast")  # type: ignore[arg-type]
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    return ChatService(registry, metrics.generation, hints), backend


def chat_request(**fields: object) -> ChatCompletionRequest:
    body = {"model": "fast", "messages": [{"role": "user", "content": "Hi"}], **fields}
    return ChatCompletionRequest.model_validate(body)


async def test_openai_reasoning_content_apart_and_counted() -> None:
    chat_service, backend = service()
    chat = OpenAIChat(chat_service)
    prepared = await chat.prepare(chat_request(thinking_token_budget=16, reasoning_effort="high"))
    assert backend.switches == [True]
    assert prepared.params.reasoning_budget == 16 and prepared.params.open_reasoning
    completion = await chat.complete(await chat.start(prepared))
    message = completion.choices[0].message
    assert (message.reasoning_content, message.content) == ("weigh it", "Paris")
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 4  # markers too

    chunks = [c async for c in chat.stream(await chat.start(await chat.prepare(chat_request())))]
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.reasoning_content for d in deltas if d.reasoning_content]
    assert reasoning == ["weigh", " it"]
    assert "".join(d.content or "" for d in deltas) == "Paris"
    assert '"reasoning_content"' not in deltas[-1].model_dump_json()  # left out when none


async def test_effort_none_switches_thinking_off() -> None:
    chat_service, backend = service()
    prepared = await OpenAIChat(chat_service).prepare(chat_request(reasoning_effort="none"))
    assert backend.switches == [False] and not prepared.params.open_reasoning


async def test_a_tasks_own_grammar_is_not_opened_by_force() -> None:
    chat_service, _ = service()
    tier = chat_service.registry.resolve("fast")
    own = Grammar("lark", 'start: "<thought>" /[a-z]{0,5}/ "</thought>"')
    prepared = await chat_service.prepare(
        ChatRequest(
            tier,
            ({"role": "user", "content": "Hi"},),
            SamplingParams(grammar=own),
            Priority.TASK,
            model_name="fast",
        )
    )
    assert prepared.params.grammar is own and not prepared.params.open_reasoning


async def test_anthropic_thinking_block_with_its_signature() -> None:
    chat_service, backend = service()
    messages = AnthropicMessages(chat_service)
    body = {
        "model": "fast",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 8},
    }
    prepared = await messages.prepare(MessagesRequest.model_validate(body))
    assert prepared.params.reasoning_budget == 8 and backend.switches == [True]
    message = await messages.complete(await messages.start(prepared))
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking == "weigh it"  # type: ignore[union-attr]
    assert thinking.signature  # type: ignore[union-attr]
    assert text.type == "text" and text.text == "Paris"  # type: ignore[union-attr]

    events = [
        e.model_dump()
        async for e in messages.stream(
            await messages.start(await messages.prepare(MessagesRequest.model_validate(body)))
        )
    ]
    kinds = [(e["type"], e.get("delta", {}).get("type")) for e in events]
    start = kinds.index(("content_block_start", None))
    assert events[start]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert kinds[start + 1 :].index(("content_block_delta", "signature_delta")) < kinds[
        start + 1 :
    ].index(("content_block_stop", None))

    body_off = {**body, "thinking": {"type": "disabled"}}
    await messages.prepare(MessagesRequest.model_validate(body_off))
    assert backend.switches[-1] is False


def test_a_budget_must_be_less_than_max_tokens_and_blocks_sent_back_are_accepted() -> None:
    base = {"model": "fast", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(ValidationError, match="less than max_tokens"):
        MessagesRequest.model_validate(
            {**base, "thinking": {"type": "enabled", "budget_tokens": 8}}
        )
    history = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "x"},
                {"type": "redacted_thinking", "data": "y"},
                {"type": "text", "text": "Hello"},
            ],
        },
        {"role": "user", "content": "Again"},
    ]
    MessagesRequest.model_validate({**base, "messages": history})
    chat_request(
        messages=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "reasoning_content": "hm"},
            {"role": "user", "content": "Again"},
        ]
    )
