"""Legacy text completions on the request-level seam: a fake backend, OpenAI's shapes out."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

import pytest

from gateway.errors import InvalidRequestError
from gateway.metrics import GatewayMetrics
from gateway.protocol.completions import Completion, CompletionRequest
from gateway.seam.backend import (
    BackendEvent,
    Finished,
    GenerationRequest,
    Priority,
    Started,
    TokenChoice,
    TokenEvent,
    TokenLogprob,
)
from gateway.serving.chat import ChatService
from gateway.serving.completions import CompletionsService
from gateway.serving.hints import HintService
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import ANSWER, FakeBackend, FakeTypingGates

PROMPT = "Once upon"


def choice(token: str, logprob: float) -> TokenChoice:
    chosen = TokenLogprob(token, token.encode(), logprob)
    return TokenChoice(chosen, (chosen, TokenLogprob("x", b"x", logprob - 1)))


class LogprobBackend(FakeBackend):
    """Answers " a" "" "é": the second token is half a character, its text rides with the
    third."""

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        prompt = len(request.prompt.tokens or ())
        yield Started(prompt, 0)
        yield TokenEvent(" a", (1,), (choice(" a", -0.5),))
        yield TokenEvent("", (2,), (choice("\xc3", -1.0),))
        yield TokenEvent("é", (3,), (choice("\xa9", -1.5),))
        yield Finished("stop", prompt, 3)


def make(
    backend: FakeBackend | None = None, text_prompts: bool = True
) -> tuple[CompletionsService, FakeBackend]:
    backend = backend or FakeBackend()
    backend.capabilities = replace(
        backend.capabilities, text_prompts=text_prompts, logprobs=text_prompts
    )
    registry = TierRegistry(
        {"fast": Tier("fast", backend, 0)},  # type: ignore[arg-type]
        {"gpt-3.5-turbo-instruct": "fast"},
        "fast",
    )
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    chat = ChatService(registry, metrics.generation, hints)
    return CompletionsService(chat), backend


def request(**fields: object) -> CompletionRequest:
    body = {"model": "gpt-3.5-turbo-instruct", "prompt": PROMPT, **fields}
    return CompletionRequest.model_validate(body)


async def complete(service: CompletionsService, echo: bool = False, **fields: object) -> Completion:
    prepared = await service.prepare(request(echo=echo, **fields))
    return await service.complete(await service.start(prepared), echo)


async def streamed(
    service: CompletionsService, echo: bool = False, **fields: object
) -> list[Completion]:
    prepared = await service.prepare(request(stream=True, echo=echo, **fields))
    return [c async for c in service.stream(await service.start(prepared), echo)]


async def test_the_prompt_is_sent_as_text_and_the_answer_comes_back_whole() -> None:
    service, backend = make()
    completion = await complete(service, max_tokens=10)
    sent = backend.requests[0]
    assert sent.messages == () and sent.text_prompt is not None
    assert sent.text_prompt.text == PROMPT and sent.params.max_tokens == 10
    assert completion.id.startswith("cmpl-") and completion.model == "gpt-3.5-turbo-instruct"
    assert completion.choices[0].text == "".join(ANSWER)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].logprobs is None
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(PROMPT)
    assert completion.usage.completion_tokens == len(ANSWER)


async def test_echo_puts_the_prompt_first_and_max_tokens_cuts_with_length() -> None:
    service, _ = make()
    completion = await complete(service, echo=True, max_tokens=2)
    assert completion.choices[0].text == PROMPT + "".join(ANSWER[:2])
    assert completion.choices[0].finish_reason == "length"


async def test_a_stream_sends_the_echo_each_token_the_finish_and_usage() -> None:
    service, _ = make()
    chunks = await streamed(service, echo=True, stream_options={"include_usage": True})
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == [PROMPT, *ANSWER, ""]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(ANSWER)
    assert len({c.id for c in chunks}) == 1


async def test_a_stream_without_include_usage_ends_with_the_finish() -> None:
    service, _ = make()
    chunks = await streamed(service, max_tokens=1)
    assert [c.choices[0].text for c in chunks] == [ANSWER[0], ""]
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage is None


async def test_logprobs_in_the_legacy_shape_with_text_offsets() -> None:
    service, _ = make(LogprobBackend())
    completion = await complete(service, logprobs=1)
    logprobs = completion.choices[0].logprobs
    assert completion.choices[0].text == " aé"
    assert logprobs is not None
    assert logprobs.tokens == [" a", "\xc3", "\xa9"]
    assert logprobs.token_logprobs == [-0.5, -1.0, -1.5]
    assert logprobs.top_logprobs == [
        {" a": -0.5, "x": -1.5},
        {"\xc3": -1.0, "x": -2.0},
        {"\xa9": -1.5, "x": -2.5},
    ]
    assert logprobs.text_offset == [0, 2, 3]


async def test_a_token_without_text_streams_its_logprob_with_the_next_text() -> None:
    service, _ = make(LogprobBackend())
    chunks = await streamed(service, logprobs=0)
    with_text = [c.choices[0] for c in chunks if c.choices and c.choices[0].text]
    assert [c.text for c in with_text] == [" a", "é"]
    assert with_text[0].logprobs is not None and with_text[0].logprobs.tokens == [" a"]
    assert with_text[1].logprobs is not None
    assert with_text[1].logprobs.tokens == ["\xc3", "\xa9"]
    assert with_text[1].logprobs.text_offset == [2, 3]


async def test_the_priority_header_wins_and_an_unknown_one_is_refused() -> None:
    service, backend = make()
    prepared = await service.prepare(request(priority="task"), priority_header="background")
    await service.complete(await service.start(prepared), echo=False)
    assert backend.requests[0].priority is Priority.BACKGROUND
    with pytest.raises(InvalidRequestError) as refused:
        await service.prepare(request(), priority_header="urgent")
    assert refused.value.param == "priority"


async def test_a_tier_that_takes_no_text_prompts_refuses_before_any_work() -> None:
    service, backend = make(text_prompts=False)
    with pytest.raises(InvalidRequestError) as refused:
        await service.prepare(request())
    assert refused.value.param == "prompt" and backend.requests == []
