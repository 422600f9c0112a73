"""The dispatcher with fakes: a free seat here, a peer's seat, failover from token ids."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from gateway.metrics import GatewayMetrics
from gateway.peers.dispatch import Dispatcher
from gateway.peers.nodes import PeerFailed, PeerNode
from gateway.protocol.peer import TicketResult, TicketStarted, TicketToken, TicketUsage
from gateway.seam.backend import (
    BackendEvent,
    BackendInfo,
    Capabilities,
    Finished,
    GenerationRequest,
    Prompt,
    SamplingParams,
    Started,
    TicketSpec,
    TokenEvent,
)


class FakeScheduler:
    def __init__(self, busy: bool) -> None:
        self.busy = busy

    def would_wait(self, priority: object) -> bool:
        return self.busy


class FakePeers:
    def __init__(self, events: list[Any], fail_after: int | None = None) -> None:
        self.node = PeerNode("http://b", state="up")
        self.events = events
        self.fail_after = fail_after
        self.changed = asyncio.Event()
        self.settings = type("S", (), {"heartbeat_seconds": 1.0})()

    def available(self, task_type: str, model: str) -> PeerNode | None:
        return self.node if self.node.in_flight == 0 else None

    def any_can_run(self, task_type: str, model: str) -> bool:
        return True

    async def ticket_events(self, node: PeerNode, ticket: Any) -> AsyncIterator[Any]:
        for index, event in enumerate(self.events):
            if self.fail_after is not None and index == self.fail_after:
                raise PeerFailed("died", "killed")
            yield event


class FakeLocal:
    info = BackendInfo("mlx", "fast", "m", Capabilities())

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        self.requests.append(request)
        yield Started(3)
        yield TokenEvent(" rest", (9,))
        yield Finished("stop", 3, len(request.resume) + 1)


REQUEST = GenerationRequest("r1", (), SamplingParams(max_tokens=10), prompt=Prompt((1, 2, 3)))
SPEC = TicketSpec("chat", {"messages": "[]"})
PEER_EVENTS = [
    TicketStarted(ticket_id="r1", prompt_tokens=3),
    TicketToken(text="Hel", token_ids=[5]),
    TicketToken(text="lo", token_ids=[6]),
    TicketResult(
        ticket_id="r1",
        output="Hello",
        finish_reason="stop",
        usage=TicketUsage(prompt_tokens=3, completion_tokens=2),
    ),
]


async def collect(dispatcher: Dispatcher, local: FakeLocal) -> list[BackendEvent]:
    return [e async for e in dispatcher.generate(SPEC, REQUEST, local)]  # type: ignore[arg-type]


async def test_a_free_seat_here_keeps_the_request_here() -> None:
    local = FakeLocal()
    peers = FakePeers(PEER_EVENTS)
    dispatcher = Dispatcher(peers, FakeScheduler(busy=False), GatewayMetrics().peers)  # type: ignore[arg-type]
    events = await collect(dispatcher, local)
    assert local.requests == [REQUEST] and isinstance(events[0], Started) and events[0].node is None


async def test_a_busy_node_sends_the_ticket_to_a_free_peer() -> None:
    local, peers = FakeLocal(), FakePeers(PEER_EVENTS)
    dispatcher = Dispatcher(peers, FakeScheduler(busy=True), GatewayMetrics().peers)  # type: ignore[arg-type]
    events = await collect(dispatcher, local)
    assert not local.requests
    assert events[0] == Started(3, 0, node="http://b")
    assert [e.text for e in events if isinstance(e, TokenEvent)] == ["Hel", "lo"]
    assert events[-1] == Finished("stop", 3, 2, 0)
    assert peers.node.in_flight == 0


async def test_a_peer_that_dies_is_finished_here_from_its_token_ids() -> None:
    local, peers = FakeLocal(), FakePeers(PEER_EVENTS, fail_after=3)
    dispatcher = Dispatcher(peers, FakeScheduler(busy=True), GatewayMetrics().peers)  # type: ignore[arg-type]
    events = await collect(dispatcher, local)
    (resumed,) = local.requests
    assert resumed.resume == (5, 6) and resumed.prompt == REQUEST.prompt
    # One Started (the peer's), the peer's tokens, then only the new ones from here.
    assert [type(e).__name__ for e in events] == [
        "Started",
        "TokenEvent",
        "TokenEvent",
        "TokenEvent",
        "Finished",
    ]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == "Hello rest"
    assert events[-1] == Finished("stop", 3, 3)


async def test_the_peers_seat_is_free_once_it_finished_even_if_nobody_closes_the_stream() -> None:
    # A consumer that stops at Finished (without closing the generator) must not leave the
    # peer's seat looking taken: the next request would stay here.
    local, peers = FakeLocal(), FakePeers(PEER_EVENTS)
    dispatcher = Dispatcher(peers, FakeScheduler(busy=True), GatewayMetrics().peers)  # type: ignore[arg-type]
    events = dispatcher.generate(SPEC, REQUEST, local)  # type: ignore[arg-type]
    async for event in events:
        if isinstance(event, Finished):
            break
    assert peers.node.in_flight == 0
    await events.aclose()
    assert peers.node.in_flight == 0  # freed once, not twice


async def test_a_dead_peers_seat_is_freed_before_the_rest_is_computed_here() -> None:
    local, peers = FakeLocal(), FakePeers(PEER_EVENTS, fail_after=3)
    dispatcher = Dispatcher(peers, FakeScheduler(busy=True), GatewayMetrics().peers)  # type: ignore[arg-type]
    seats_during_the_rest: list[int] = []
    original = local.generate

    async def watched(request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        seats_during_the_rest.append(peers.node.in_flight)
        async for event in original(request):
            yield event

    local.generate = watched  # type: ignore[method-assign]
    await collect(dispatcher, local)
    assert seats_during_the_rest == [0] and peers.node.in_flight == 0
