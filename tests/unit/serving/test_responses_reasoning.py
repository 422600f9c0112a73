"""A thinking model's reply through the Responses API: a reasoning item before the message,
counted in ``reasoning_tokens``; ``reasoning.effort`` is the template's switch."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

from gateway.errors import UpstreamError
from gateway.metrics import GatewayMetrics
from gateway.protocol.responses import ResponseRequest
from gateway.seam.backend import BackendEvent, GenerationRequest, Started, TokenEvent
from gateway.serving.chat import ChatService
from gateway.serving.hints import HintService
from gateway.serving.response_store import ResponseStore
from gateway.serving.responses import ResponsesService
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import FakeTypingGates
from tests.unit.serving.test_reasoning_service import ThinkingBackend, service


def request(**fields: object) -> ResponseRequest:
    return ResponseRequest.model_validate({"model": "fast", "input": "Hi", **fields})


async def test_reasoning_item_then_the_answer(tmp_path: Path) -> None:
    chat_service, backend = service()
    store = ResponseStore(tmp_path / "r.sqlite3", 10, 60)
    await store.open()
    responses = ResponsesService(chat_service, store)
    run = await responses.start(await responses.prepare(request(reasoning={"effort": "high"})))
    response = await responses.complete(run)
    assert backend.switches == [True]
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "weigh it"
    assert message.type == "message" and message.content[0].text == "Paris"
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 4
    # Streamed: the reasoning's events come first, then the answer's.
    run = await responses.start(await responses.prepare(request(reasoning={"effort": "none"})))
    kinds = [event.type async for event in responses.stream(run)]  # type: ignore[attr-defined]
    assert backend.switches == [True, False]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    assert kinds[-1] == "response.completed"
    await store.close()


class FailingBackend(ThinkingBackend):
    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        yield Started(3, 0)
        yield TokenEvent("Par", (0,))
        raise UpstreamError("the upstream went away")


async def test_a_failure_mid_stream_is_an_error_event_then_response_failed(
    tmp_path: Path,
) -> None:
    backend = FailingBackend()
    registry = TierRegistry({"fast": Tier("fast", backend, 0)}, {}, "fast")  # type: ignore[arg-type]
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    chat = ChatService(registry, metrics.generation, hints)
    store = ResponseStore(tmp_path / "r.sqlite3", 10, 60)
    await store.open()
    responses = ResponsesService(chat, store)
    run = await responses.start(await responses.prepare(request(reasoning={"effort": "none"})))
    events = [event async for event in responses.stream(run)]
    kinds = [event.type for event in events]  # type: ignore[attr-defined]
    assert kinds[-3:] == ["response.output_item.done", "error", "response.failed"]
    failed = events[-1].response  # type: ignore[attr-defined]
    assert failed.status == "failed" and failed.error.code == "bad_gateway"
    assert failed.output[0].status == "incomplete"
    assert await store.get(failed.id) is None  # a failed response is not kept
    await store.close()
