"""The chat service on the request-level seam: a fake backend, OpenAI shapes out."""

from __future__ import annotations

import pytest

from gateway.errors import ContextLengthExceededError, QueueFullError
from gateway.metrics import GatewayMetrics
from gateway.protocol.openai import ChatCompletionRequest
from gateway.serving.chat import ChatService
from gateway.serving.hints import HintService
from gateway.serving.openai_chat import OpenAIChat
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import ANSWER, FakeBackend, FakeTypingGates


def make(backend: FakeBackend | None = None) -> tuple[OpenAIChat, FakeBackend, GatewayMetrics]:
    backend = backend or FakeBackend()
    registry = TierRegistry(
        {"fast": Tier("fast", backend, 0)},  # type: ignore[arg-type]
        {"gpt-4o-mini": "fast"},
        "fast",
    )
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    service = ChatService(registry, metrics.generation, hints)
    return OpenAIChat(service), backend, metrics


def request(**fields: object) -> ChatCompletionRequest:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}], **fields}
    return ChatCompletionRequest.model_validate(body)


def counted(metrics: GatewayMetrics, outcome: str) -> float:
    return metrics.generation.tier_requests.labels("fast", "mlx", outcome)._value.get()


async def test_complete_joins_tokens_and_reports_usage() -> None:
    chat, backend, metrics = make()
    prepared = await chat.prepare(request())
    completion = await chat.complete(await chat.start(prepared))
    assert completion.choices[0].message.content == "".join(ANSWER)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == len(ANSWER)
    assert completion.usage.prompt_tokens == len(prepared.prompt.tokens or ())
    # The rest of the context, when the client sets no limit.
    assert backend.requests[0].params.max_tokens == 10_000 - completion.usage.prompt_tokens
    assert counted(metrics, "ok") == 1


async def test_stream_sends_role_content_finish_and_usage() -> None:
    chat, _, _ = make()
    prepared = await chat.prepare(
        request(stream=True, max_tokens=2, stream_options={"include_usage": True})
    )
    chunks = [c async for c in chat.stream(await chat.start(prepared))]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].delta.content for c in chunks[1:3]] == list(ANSWER[:2])
    assert chunks[3].choices[0].finish_reason == "length"
    assert chunks[4].choices == [] and chunks[4].usage is not None
    assert chunks[4].usage.completion_tokens == 2


async def test_errors_before_the_start_reach_the_caller() -> None:
    backend = FakeBackend()
    backend.fail_before_start = QueueFullError("full", retry_after=3)
    chat, _, metrics = make(backend)
    with pytest.raises(QueueFullError):
        await chat.start(await chat.prepare(request()))
    assert counted(metrics, "error") == 1


async def test_a_consumer_that_leaves_closes_the_backend_stream() -> None:
    chat, backend, metrics = make()
    run = await chat.start(await chat.prepare(request(stream=True)))
    stream = chat.stream(run)
    await anext(stream)  # the role chunk
    await anext(stream)  # one token
    await stream.aclose()
    assert backend.closed_streams == 1
    assert counted(metrics, "cancelled") == 1


async def test_context_length_is_checked_where_the_prompt_is_known() -> None:
    chat, _, _ = make()
    with pytest.raises(ContextLengthExceededError):
        await chat.prepare(request(max_tokens=10_000))


async def test_a_remote_backend_renders_itself_and_gets_no_local_limit() -> None:
    backend = FakeBackend()
    backend.kind = "openai"
    backend.context_length = None

    async def remote_render(
        messages: object, tools: object = (), thinking: object = None
    ) -> object:
        from gateway.seam.backend import Prompt

        return Prompt()

    backend.render = remote_render  # type: ignore[method-assign,assignment]
    chat, backend, _ = make(backend)
    completion = await chat.complete(await chat.start(await chat.prepare(request())))
    assert completion.choices[0].message.content == "".join(ANSWER)
    assert backend.requests[0].params.max_tokens is None
    assert backend.requests[0].prompt.tokens is None


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
# A forced call as a model writes it: 4 tokens of wrapper around 2 of arguments.
CALL_TOKENS = ("<tool_call>", '{"name": "get_weather", "arguments": ', '{"city":', ' "Paris"}')
CALL_TOKENS += ("}", "</tool_call>")


async def test_a_call_s_wrapper_does_not_count_against_max_tokens() -> None:
    backend = FakeBackend(answer=CALL_TOKENS, structured_output=True)
    chat, _, _ = make(backend)
    forced = {"type": "function", "function": {"name": "get_weather"}}
    prepared = await chat.prepare(request(tools=[WEATHER_TOOL], tool_choice=forced, max_tokens=2))
    assert backend.requests == [] and prepared.params.max_tokens > 2  # room for the wrapper
    completion = await chat.complete(await chat.start(prepared))
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.arguments == '{"city": "Paris"}'


async def test_a_call_cut_inside_its_arguments_still_ends_by_length() -> None:
    backend = FakeBackend(answer=CALL_TOKENS, structured_output=True)
    chat, _, _ = make(backend)
    prepared = await chat.prepare(
        request(tools=[WEATHER_TOOL], tool_choice="required", max_tokens=1)
    )
    completion = await chat.complete(await chat.start(prepared))
    assert completion.choices[0].finish_reason == "length"


# An emoji as SmolLM2 writes it: three tokens, the first two without text of their own.
ROCKET = ("", "", "\U0001f680")


async def test_tokens_of_one_character_count_against_max_tokens_beside_tools() -> None:
    # Counted by the text they wrote, 3 rockets would pass as 3 tokens.
    for limit, rockets in ((6, 2), (7, 2), (8, 2), (9, 3)):
        chat, _, _ = make(FakeBackend(answer=ROCKET * 4, structured_output=True))
        prepared = await chat.prepare(request(tools=[WEATHER_TOOL], max_tokens=limit))
        completion = await chat.complete(await chat.start(prepared))
        # Never past the limit: a rocket cut short is not written.
        assert completion.choices[0].message.content == "\U0001f680" * rockets, limit
        assert completion.choices[0].finish_reason == "length"


async def test_text_beside_offered_tools_keeps_the_client_s_max_tokens() -> None:
    chat, _, metrics = make(FakeBackend(answer=("a", "b", "c", "d"), structured_output=True))
    prepared = await chat.prepare(request(tools=[WEATHER_TOOL], max_tokens=2))
    completion = await chat.complete(await chat.start(prepared))
    assert completion.choices[0].message.content == "ab"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 2
    assert counted(metrics, "ok") == 1


def test_a_request_s_repetition_penalty_else_its_tier_s_and_one_is_none() -> None:
    penalized = Tier("t", FakeBackend(), 0, repetition_penalty=1.1)
    assert penalized.repetition_penalty_for(None) == 1.1
    assert penalized.repetition_penalty_for(1.3) == 1.3
    assert penalized.repetition_penalty_for(1.0) is None  # a request's "off" wins
    assert Tier("t", FakeBackend(), 0).repetition_penalty_for(None) is None
    assert Tier("t", FakeBackend(), 0, repetition_penalty=1.0).repetition_penalty_for(None) is None
