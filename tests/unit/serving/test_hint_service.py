"""The typing-hint state machine, driven through the request-level seam with a fake backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.metrics import GatewayMetrics
from gateway.protocol.hints import TypingHintRequest
from gateway.serving.hints import HintService, PrefillState, common_prefix_length
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import FakeBackend, tokens_of

HISTORY = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi! How can I help?"},
]
FULL = [*HISTORY, {"role": "user", "content": "What is MLX?"}]


def make(idle_seconds: float = 60.0, hints: bool = True) -> tuple[HintService, FakeBackend]:
    backend = FakeBackend(hints=hints)
    registry = TierRegistry({"fast": Tier("fast", backend, 0)}, {}, "fast")  # type: ignore[arg-type]
    hints = HintService(registry, GatewayMetrics().hints, idle_seconds, gates=backend.gates)
    return hints, backend


def hint_request(messages: list[dict[str, str]] = HISTORY, **extra: Any) -> TypingHintRequest:
    return TypingHintRequest.model_validate({"messages": messages, **extra})


async def until(condition: Any, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.001)


async def test_queued_hint_is_aborted_when_the_request_comes() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request())
    assert hint.state is PrefillState.QUEUED
    assert hint.id in backend.gates.freeze_holders and backend.gates.typing_notes == 1
    assert backend.gates.typing_holders == {hint.id}
    await typing.join("fast", tokens_of(FULL), None)
    assert hint.state is PrefillState.ABORTED
    assert backend.warmups[0].cancelled
    assert not backend.gates.freeze_holders
    assert not backend.gates.typing_holders  # the announced request came: typing is over


async def test_computing_hint_is_waited_for_then_used() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request())
    warmup = backend.warmups[0]
    warmup.may_start.set()
    await until(lambda: hint.state is PrefillState.COMPUTING)
    joining = asyncio.create_task(typing.join("fast", tokens_of(FULL), None))
    await asyncio.sleep(0.01)
    assert not joining.done()  # half-computed work is not thrown away: the request waits
    warmup.may_finish.set()
    await asyncio.wait_for(joining, 2)
    assert hint.state is PrefillState.USED
    assert not backend.gates.freeze_holders


async def test_ready_hint_is_used() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request(session="s1"))
    backend.warmups[0].may_start.set()
    backend.warmups[0].may_finish.set()
    await until(lambda: hint.state is PrefillState.READY)
    assert hint.id in backend.gates.freeze_holders  # a ready hint still holds the freeze
    await typing.join("fast", tokens_of(FULL), "s1")
    assert hint.state is PrefillState.USED
    assert not backend.gates.freeze_holders and not backend.gates.typing_holders


async def test_a_hint_of_another_conversation_is_not_used() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request([{"role": "user", "content": "something else"}]))
    backend.warmups[0].may_start.set()
    backend.warmups[0].may_finish.set()
    await until(lambda: hint.state is PrefillState.READY)
    await typing.join("fast", tokens_of(FULL), None)
    assert hint.state is PrefillState.READY
    assert backend.gates.typing_holders == {hint.id}  # another conversation: still typing there
    samples = typing.metrics.typing_hints.labels("mismatched")._value.get()
    assert samples == 1


async def test_a_newer_hint_of_the_session_supersedes_the_older() -> None:
    typing, backend = make()
    first = await typing.post(hint_request(session="editor"))
    second = await typing.post(hint_request(FULL, session="editor"))
    assert first.state is PrefillState.SUPERSEDED and backend.warmups[0].cancelled
    assert second.state is PrefillState.QUEUED
    assert backend.gates.freeze_holders == {second.id}


async def test_an_idle_ready_hint_expires_and_releases_the_freeze() -> None:
    typing, backend = make(idle_seconds=0.05)
    hint = await typing.post(hint_request())
    backend.warmups[0].may_start.set()
    backend.warmups[0].may_finish.set()
    await until(lambda: hint.state is PrefillState.READY)
    await until(lambda: hint.state is PrefillState.EXPIRED)
    assert not backend.gates.freeze_holders


async def test_a_client_can_abort_its_hint() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request())
    assert typing.abort(hint.id).state is PrefillState.ABORTED
    assert backend.warmups[0].cancelled and not backend.gates.freeze_holders
    assert not backend.gates.typing_holders  # withdrawn: its keystrokes hold nothing more


async def test_a_warmup_that_ends_early_aborts_the_hint() -> None:
    typing, backend = make()
    hint = await typing.post(hint_request())
    backend.warmups[0].may_start.set()
    await until(lambda: hint.state is PrefillState.COMPUTING)
    backend.warmups[0].cancel()  # e.g. the slot job was cancelled
    await until(lambda: hint.state is PrefillState.ABORTED)
    assert not backend.gates.freeze_holders


async def test_tiers_that_cannot_warm_refuse_hints() -> None:
    typing, _ = make(hints=False)
    with pytest.raises(InvalidRequestError, match="typing"):
        await typing.post(hint_request())


@pytest.mark.parametrize(
    ("hinted", "prompt", "shared"),
    [
        ((1, 2, 3), (1, 2, 4), 2),
        ((1, 2), (1, 2, 3), 2),  # the request goes on past the hint
        ((1, 2, 3), (1, 2), 2),
        ((), (1,), 0),
        ((7,), (8,), 0),
        (tuple(range(40_000)), (*range(39_999), -1), 39_999),  # a long conversation
    ],
)
def test_a_hint_and_a_request_share_their_common_start(
    hinted: tuple[int, ...], prompt: tuple[int, ...], shared: int
) -> None:
    assert common_prefix_length(hinted, prompt) == shared
    assert common_prefix_length(list(hinted), prompt) == shared  # lists and tuples alike
