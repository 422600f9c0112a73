"""Anthropic's message threads: a turn kept under its reply's id, a continued turn made whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.metrics import GatewayMetrics
from gateway.protocol.anthropic import MessagesRequest
from gateway.routes.errors import anthropic_error_body
from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatService
from gateway.serving.hints import HintService
from gateway.serving.message_threads import MessageThreads, ThreadNotFoundError
from gateway.serving.response_store import ResponseStore
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import ANSWER, FakeBackend, FakeTypingGates

TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def request(**fields: Any) -> MessagesRequest:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    return MessagesRequest.model_validate({**body, **fields})


async def open_store(tmp_path: Path) -> ResponseStore:
    store = ResponseStore(tmp_path / "chains.sqlite3", 100, 3600, table="message_threads")
    await store.open()
    return store


def make(store: ResponseStore) -> tuple[AnthropicMessages, FakeBackend]:
    backend = FakeBackend(structured_output=True)
    registry = TierRegistry({"m": Tier("m", backend, 0)}, {}, "m")  # type: ignore[arg-type]
    metrics = GatewayMetrics()
    hints = HintService(registry, metrics.hints, 60, gates=FakeTypingGates())
    chat = ChatService(registry, metrics.generation, hints)
    return AnthropicMessages(chat, store), backend


async def test_a_continued_turn_gets_the_thread_s_history_system_and_tools(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path)
    messages, _ = make(store)
    first = request(system="Be brief.", tools=TOOLS, thread={"type": "create"})
    reply = await messages.complete(await messages.start(await messages.prepare(first)), first)
    assert await store.count() == 1
    follow_up = request(
        messages=[{"role": "user", "content": "And tomorrow?"}],
        thread={"type": "continue", "previous_message_id": reply.id},
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    await messages.prepare(follow_up)  # the tool is the thread's: no unknown tool
    whole = await MessageThreads(store).whole(follow_up)
    assert whole.system == "Be brief." and [t.name for t in whole.tools or ()] == ["get_weather"]
    texts = [(m.role, m.content) for m in whole.messages]
    assert texts[0] == ("user", "Hi") and texts[-1] == ("user", "And tomorrow?")
    assert texts[1][0] == "assistant" and texts[1][1][0].text == "".join(ANSWER)  # type: ignore[index,union-attr]
    await store.close()


async def test_an_unknown_thread_is_a_404_the_sdks_recover_from(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    messages, _ = make(store)
    lost = request(thread={"type": "continue", "previous_message_id": "msg_gone"})
    with pytest.raises(ThreadNotFoundError) as raised:
        await messages.prepare(lost)
    error = raised.value
    body = anthropic_error_body(error.status_code, error.message, error.code)
    assert error.status_code == 404
    assert body.model_dump(mode="json")["error"] == {
        "type": "not_found_error",
        "message": error.message,
        "details": {"error_code": "thread_not_found"},
    }
    await store.close()


async def test_a_continued_choice_must_name_one_of_the_thread_s_tools(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    messages, _ = make(store)
    first = request(tools=TOOLS, thread={"type": "create"})
    reply = await messages.complete(await messages.start(await messages.prepare(first)), first)
    wrong = request(
        thread={"type": "continue", "previous_message_id": reply.id},
        tool_choice={"type": "tool", "name": "nope"},
    )
    with pytest.raises(InvalidRequestError, match="unknown tool"):
        await messages.prepare(wrong)
    await store.close()


async def test_unthreaded_turns_are_not_kept(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    messages, _ = make(store)
    plain = request()
    await messages.complete(await messages.start(await messages.prepare(plain)), plain)
    assert await store.count() == 0
    with pytest.raises(ValueError, match="at least one message"):
        request(messages=[])
    assert request(messages=[], thread={"type": "continue", "previous_message_id": "m"})
    await store.close()


async def test_a_damaged_thread_is_read_as_gone_never_a_500(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    messages, _ = make(store)
    first = request(thread={"type": "create"})
    reply = await messages.complete(await messages.start(await messages.prepare(first)), first)
    follow = request(thread={"type": "continue", "previous_message_id": reply.id})
    for damage in ("'{\"reply\": 7}'", "'not json'"):
        store.db.execute(f"UPDATE message_threads SET response = {damage}")
        with pytest.raises(ThreadNotFoundError):
            await messages.prepare(follow)
    await store.close()
