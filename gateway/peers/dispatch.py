"""Where a request runs: this node's slot or a peer's (two Macs, two seats).

Peers sit behind the request-level seam: ``PeerDispatch`` is a ``Backend`` that wraps a
tier's own backend, and a request that carries a ``ticket`` goes through the node's one
``Dispatcher`` (the waiting line for the seats, shared by every tier); any other request,
and every other call, goes straight to the wrapped backend.

Policy: a request runs here when this node's slot would take it now (it is idle, or the
request's class preempts what runs). Otherwise, if a peer that runs the same task on the
same model has a free seat, the request goes there as a ticket. If neither, it waits for
whichever seat frees first, in order of class then arrival; with no peer able to run it at
all, it simply queues here. A peer that refuses (busy, 429) is skipped.

Failover with nothing lost: a peer that dies or stalls after starting is replaced by this
node, which continues from the token ids already received (the peer sent text and ids
together), so the client's stream has no duplicated or missing text; with greedy sampling
the text is that of an uninterrupted run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import replace

from gateway.metrics import PeerMetrics
from gateway.peers.nodes import PeerFailed, PeerNode, PeerRefused, Peers
from gateway.protocol.peer import Ticket
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import (
    Backend,
    BackendEvent,
    Finished,
    GenerationRequest,
    PrefillProgress,
    Priority,
    Started,
    TicketSpec,
    TokenEvent,
)
from gateway.seam.placement import place_on
from gateway.seam.wrapped import WrappedBackend, continued
from gateway.serving.tiers import TierRegistry

log = logging.getLogger(__name__)
RECHECK_SECONDS = 0.05  # how often a waiting request looks at the seats again


class Dispatcher:
    """The node's one waiting line for the seats (here or a peer's), shared by every tier."""

    def __init__(self, peers: Peers, scheduler: Scheduler, metrics: PeerMetrics) -> None:
        self.peers = peers
        self.scheduler = scheduler
        self.metrics = metrics
        self._waiting: list[tuple[int, int]] = []  # (class, arrival): who picks a seat next
        self._arrivals = itertools.count()

    async def generate(
        self, spec: TicketSpec, request: GenerationRequest, local: Backend
    ) -> AsyncGenerator[BackendEvent, None]:
        """The request's events, from this node or from a peer (see the module's docstring)."""
        model = local.info.model_id
        while True:
            node = await self._seat(request.priority, spec.task_type, model)
            if node is None:
                break
            place_on(node.url)
            try:
                async for event in self._via_peer(node, spec, request, local):
                    yield event
                return
            except PeerRefused as exc:
                place_on(None)
                log.info("ticket %s: %s", request.id, exc)
                # Not asked again before its next heartbeat says it has a free seat.
                node.busy_until = time.monotonic() + self.peers.settings.heartbeat_seconds
                self.metrics.peer_tickets_sent.labels(node.url, "refused").inc()
        async for event in local.generate(request):
            yield event

    async def _seat(self, priority: Priority, task_type: str, model: str) -> PeerNode | None:
        """A peer with a free seat, or None to run here; waits while both are taken."""
        me = (int(priority), next(self._arrivals))
        heapq.heappush(self._waiting, me)
        try:
            while True:
                if self._waiting[0] == me:
                    if not self.scheduler.would_wait(priority):
                        return None
                    node = self.peers.available(task_type, model)
                    if node is not None:
                        node.in_flight += 1
                        return node
                    if not self.peers.any_can_run(task_type, model):
                        return None  # no peer for it: queue here as usual
                self.peers.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.peers.changed.wait(), RECHECK_SECONDS)
        finally:
            self._waiting.remove(me)
            heapq.heapify(self._waiting)
            self.peers.changed.set()  # the next in line may pick now

    async def _via_peer(
        self, node: PeerNode, spec: TicketSpec, request: GenerationRequest, local: Backend
    ) -> AsyncGenerator[BackendEvent, None]:
        ticket = Ticket(ticket_id=request.id, task_type=spec.task_type, stream=True, args=spec.args)
        sent_at = time.perf_counter()
        received: list[int] = []
        started = finished = False
        outcome = "cancelled"
        free_seat = _Seat(node, self.peers.changed).free
        try:
            async for event in self.peers.ticket_events(node, ticket):
                if event.type == "started":
                    started = True
                    prompt_tokens = len(request.prompt.tokens or ()) or event.prompt_tokens
                    yield Started(prompt_tokens, event.cached_tokens, node=node.url)
                elif event.type == "progress":
                    yield PrefillProgress(event.tokens_done)
                elif event.type == "token":
                    if not received:
                        self.metrics.peer_first_token_seconds.labels(node.url).observe(
                            time.perf_counter() - sent_at
                        )
                    received.extend(event.token_ids)
                    yield TokenEvent(event.text, tuple(event.token_ids))
                elif event.type == "result":
                    finished, outcome = True, "ok"
                    free_seat()
                    usage = event.usage
                    prompt_tokens = len(request.prompt.tokens or ()) or usage.prompt_tokens
                    yield Finished(
                        event.finish_reason,
                        prompt_tokens,
                        usage.completion_tokens,
                        usage.cached_tokens,
                    )
                else:  # an error event from the peer
                    if not started:
                        raise PeerRefused(f"{node.url}: {event.message}")
                    raise PeerFailed("error", f"{node.url}: {event.message}")
        except PeerRefused:
            outcome = "refused"
            raise
        except PeerFailed as exc:
            outcome = "failed_over"
            self.metrics.peer_failures.labels(node.url, exc.reason).inc()
            log.warning(
                "ticket %s: %s; finishing it here after %d tokens", request.id, exc, len(received)
            )
            free_seat()  # the peer is gone: its seat is not what the rest waits for
            async for rest in continued(local, request, tuple(received)):
                yield rest
            finished = True
        finally:
            free_seat()
            if outcome != "refused":
                self.metrics.peer_tickets_sent.labels(node.url, outcome).inc()
                if finished:
                    self.metrics.peer_ticket_seconds.labels(node.url).observe(
                        time.perf_counter() - sent_at
                    )


class _Seat:
    """A peer's seat taken by one ticket: freed once, as soon as the peer is done with it,
    not when the ticket's generator is closed (a consumer that stops at ``Finished`` leaves
    it open until it is collected, and the seat looked taken until then: a later request
    then stayed here)."""

    def __init__(self, node: PeerNode, changed: asyncio.Event) -> None:
        self.node, self.changed, self.freed = node, changed, False

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self.node.in_flight -= 1
            self.changed.set()


class PeerDispatch(WrappedBackend):
    """A tier's backend with the peers in front: a ``Backend`` (see the module's docstring).

    Only ``generate`` differs from the wrapped backend: a request with a ``ticket`` and a
    rendered prompt may run on a peer (a continuation, ``resume``, always runs here). The
    wrapped backend's optional parts (``warmer()``, ``embedder()``) are its own, unchanged.
    """

    def __init__(self, local: Backend, dispatcher: Dispatcher) -> None:
        super().__init__(local)
        self.local = local
        self.dispatcher = dispatcher

    def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        if request.ticket is not None and request.prompt.tokens and not request.resume:
            return self.dispatcher.generate(request.ticket, request, self.local)
        return self.local.generate(request)


def dispatch_to_peers(registry: TierRegistry, dispatcher: Dispatcher) -> TierRegistry:
    """The same tiers, each backend behind a ``PeerDispatch`` over the one ``dispatcher``."""
    tiers = {
        name: replace(tier, backend=PeerDispatch(tier.backend, dispatcher))
        for name, tier in registry.tiers.items()
    }
    return TierRegistry(tiers, registry.aliases, registry.default)
