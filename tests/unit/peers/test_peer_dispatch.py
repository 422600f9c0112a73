"""PeerDispatch, the peers behind the seam: which requests reach the dispatcher, and that
everything else (other calls, typing hints) is the wrapped backend's."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

from gateway.peers.dispatch import PeerDispatch, dispatch_to_peers
from gateway.seam.backend import (
    BackendEvent,
    Finished,
    GenerationRequest,
    ModelLimits,
    Prompt,
    SamplingParams,
    Started,
    TicketSpec,
)
from gateway.serving.tiers import Tier, TierRegistry
from tests.unit.fake_backend import FakeBackend

TICKET = TicketSpec("chat", {"messages": "[]"})
PLAIN = GenerationRequest("r1", (), SamplingParams(max_tokens=2), prompt=Prompt((1, 2, 3)))


class RecordingDispatcher:
    """Answers every ticket as if a peer ran it, and remembers what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[TicketSpec, GenerationRequest, object]] = []

    async def generate(
        self, spec: TicketSpec, request: GenerationRequest, local: object
    ) -> AsyncGenerator[BackendEvent, None]:
        self.calls.append((spec, request, local))
        yield Started(3, 0, node="http://peer")
        yield Finished("stop", 3, 0)


async def events_of(backend: PeerDispatch, request: GenerationRequest) -> list[BackendEvent]:
    return [event async for event in backend.generate(request)]


async def test_a_request_with_a_ticket_goes_to_the_dispatcher_with_the_wrapped_backend() -> None:
    local, dispatcher = FakeBackend(), RecordingDispatcher()
    backend = PeerDispatch(local, dispatcher)  # type: ignore[arg-type]
    request = replace(PLAIN, ticket=TICKET)
    events = await events_of(backend, request)
    assert dispatcher.calls == [(TICKET, request, local)]
    assert events[0] == Started(3, 0, node="http://peer") and local.requests == []


async def test_requests_a_peer_cannot_take_run_on_the_wrapped_backend() -> None:
    local, dispatcher = FakeBackend(), RecordingDispatcher()
    backend = PeerDispatch(local, dispatcher)  # type: ignore[arg-type]
    no_ticket = PLAIN
    not_rendered = replace(PLAIN, ticket=TICKET, prompt=Prompt(None))
    continuation = replace(PLAIN, ticket=TICKET, resume=(7, 8))
    for request in (no_ticket, not_rendered, continuation):
        events = await events_of(backend, request)
        assert isinstance(events[0], Started) and events[0].node is None
    assert dispatcher.calls == []
    assert local.requests == [no_ticket, not_rendered, continuation]


async def test_everything_but_generate_is_the_wrapped_backends() -> None:
    local = FakeBackend(tier="fast")
    backend = PeerDispatch(local, RecordingDispatcher())  # type: ignore[arg-type]
    info = backend.info
    assert (info.kind, info.tier, info.model_id) == ("mlx", "fast", "fake-model")
    assert info.capabilities is local.capabilities
    assert backend.limits() == ModelLimits(10_000, 256)
    messages = ({"role": "user", "content": "hi"},)
    assert await backend.render(messages) == await local.render(messages)
    assert (await backend.health()).state == "loaded"
    # The optional parts are the wrapped backend's own, typed (no attribute passed through).
    warmer = backend.warmer()
    assert warmer is local and backend.embedder() is None
    fixed = await warmer.render_fixed_prefix(messages, None)
    assert fixed == await local.render_fixed_prefix(messages, None)
    warmup = await warmer.warm("hint-1", fixed)
    assert local.warmups == [warmup]


def test_dispatch_to_peers_wraps_every_tier_and_keeps_the_names() -> None:
    fast, big = FakeBackend("fast"), FakeBackend("big")
    registry = TierRegistry(
        {"fast": Tier("fast", fast, 0), "big": Tier("big", big, 0)}, {"quick": "fast"}, "fast"
    )
    wrapped = dispatch_to_peers(registry, RecordingDispatcher())  # type: ignore[arg-type]
    assert wrapped.names() == registry.names()
    tier = wrapped.resolve("quick")
    assert isinstance(tier.backend, PeerDispatch) and tier.backend.local is fast
    assert isinstance(wrapped.resolve("big").backend, PeerDispatch)
