"""The peers this node knows: their heartbeats, their state, and tickets sent to them.

A peer is ``up`` when it answers ``GET /v1/peer/hello`` with the same protocol version and
the same task definitions (``tasks_hash``: the peer builds the prompt itself, so both nodes
must build the same one); ``incompatible`` when it answers with others (logged once, shown in
``/health``); ``down`` when it does not answer. Peers are listed (``nodes``) or found on the LAN
(``discovery``, mDNS): ``offer`` merges an advertised peer with the listed ones (a listed one
wins), refuses one with other task definitions or another protocol before asking it anything,
and a discovered peer silent for its advertised TTL is dropped. Tickets go over HTTP with streamed
Server-Sent Events (httpx, the card's client library): one request per ticket fits
request/response work, and closing the stream is how a cancellation crosses the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import EventSource
from pydantic import TypeAdapter, ValidationError

from gateway.config import PeerSettings
from gateway.metrics import PeerMetrics
from gateway.peers.adverts import SERVICE_TYPE, Advert
from gateway.peers.signing import ANSWER_SIGNATURE, NONCE, ResponseSigner, answer_is_signed, sign
from gateway.protocol.peer import PROTOCOL_VERSION, Hello, Ticket, TicketEvent

log = logging.getLogger(__name__)
HELLO_PATH = "/v1/peer/hello"
TICKETS_PATH = "/v1/peer/tickets"
_EVENTS: TypeAdapter[TicketEvent] = TypeAdapter(TicketEvent)


class PeerRefused(Exception):
    """The peer did not start the ticket (busy, unreachable, refused): try another seat."""


class PeerFailed(Exception):
    """The peer failed after the ticket started (died, stalled, broke the protocol)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class PeerNode:
    url: str
    state: str = "unknown"  # unknown | up | down | incompatible
    detail: str | None = None
    hello: Hello | None = None
    in_flight: int = 0  # tickets this node has sent it and not finished
    busy_until: float = 0.0  # it refused a ticket: not asked again before its next heartbeat
    last_seen: float | None = None
    source: str = "listed"  # listed | discovered
    advert: Advert | None = None  # a discovered peer's advertisement
    down_since: float | None = None  # silent since (heartbeats unanswered)

    def can_run(self, task_type: str, model_id: str) -> bool:
        """Up, compatible, and runs this task on the same model."""
        hello = self.hello
        return (
            self.state == "up"
            and hello is not None
            and hello.task_models.get(task_type) == model_id
        )

    def available(self, task_type: str, model_id: str, now: float) -> bool:
        """Could start this ticket now: a free seat."""
        hello = self.hello
        return (
            self.can_run(task_type, model_id)
            and hello is not None
            and not hello.slot.busy
            and self.in_flight == 0
            and now >= self.busy_until
        )

    def describe(self) -> dict[str, Any]:
        hello = self.hello
        return {
            "url": self.url,
            "source": self.source,
            **({"advertised_as": self.advert.name} if self.advert else {}),
            "state": self.state,
            "detail": self.detail,
            "node_id": hello.node_id if hello else None,
            "busy": hello.slot.busy if hello else None,
            "in_flight": self.in_flight,
            "last_seen_seconds_ago": (
                round(time.monotonic() - self.last_seen, 1) if self.last_seen else None
            ),
        }


@dataclass
class Peers:
    """The configured peers, their heartbeats, and the client side of tickets."""

    settings: PeerSettings
    tasks_hash: str
    metrics: PeerMetrics
    nodes: list[PeerNode] = field(default_factory=list)
    # Set whenever a seat may have freed (a heartbeat, a ticket's end): dispatch re-checks.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # Discovery: adverts refused (by service name), and what this node advertises itself.
    refused: dict[str, dict[str, str]] = field(default_factory=dict)
    advertised: dict[str, Any] | None = None

    # For tests: where requests go instead of the network.
    transport: httpx.AsyncBaseTransport | None = None

    def __post_init__(self) -> None:
        self.nodes = [PeerNode(url.rstrip("/")) for url in self.settings.nodes]
        self._client: httpx.AsyncClient | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self) -> None:
        stall = self.settings.stall_seconds
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(stall, connect=min(stall, 3.0)),
            trust_env=False,
            transport=self.transport,
        )
        if self.nodes or self.settings.discover:
            self._heartbeat = asyncio.create_task(self._heartbeats())

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._client is not None:
            await self._client.aclose()

    # -- heartbeats ------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.gather(*(self.say_hello(node) for node in list(self.nodes)))
            self._forget_discovered(time.monotonic())
            self.changed.set()
            await asyncio.sleep(self.settings.heartbeat_seconds)

    async def say_hello(self, node: PeerNode) -> None:
        assert self._client is not None
        headers = self._signed("GET", node.url + HELLO_PATH, b"")
        try:
            answer = await self._client.get(
                node.url + HELLO_PATH, headers=headers, timeout=self.settings.heartbeat_seconds + 1
            )
            if answer.status_code != 200:
                raise ValueError(f"hello answered {answer.status_code}: {answer.text[:200]}")
            assert self.settings.secret is not None
            signature = answer.headers.get(ANSWER_SIGNATURE)
            if not answer_is_signed(
                self.settings.secret, headers[NONCE], 200, answer.content, signature
            ):
                # A relay on the path (or another secret) could make this node look idle,
                # compatible or busy: an answer not signed for this very request is none.
                raise ValueError("its hello answer is not signed for our request")
            hello = Hello.model_validate_json(answer.content)
        except (httpx.HTTPError, ValueError, ValidationError) as exc:
            self._set_state(node, "down", str(exc) or type(exc).__name__)
            return
        node.hello, node.last_seen = hello, time.monotonic()
        node.busy_until = 0.0
        if hello.protocol != PROTOCOL_VERSION:
            self._set_state(
                node, "incompatible", f"protocol {hello.protocol}, ours {PROTOCOL_VERSION}"
            )
        elif hello.tasks_hash != self.tasks_hash:
            self._set_state(
                node,
                "incompatible",
                f"task definitions differ (tasks_hash {hello.tasks_hash[:12]}, ours "
                f"{self.tasks_hash[:12]}): it would build other prompts",
            )
        else:
            self._set_state(node, "up", None)

    def _set_state(self, node: PeerNode, state: str, detail: str | None) -> None:
        if state != "down":
            node.down_since = None
        elif node.down_since is None:
            node.down_since = time.monotonic()
        if state != node.state:
            level = logging.INFO if state == "up" else logging.WARNING
            log.log(level, "peer %s is %s%s", node.url, state, f": {detail}" if detail else "")
            if state in ("down", "incompatible") and node.state != "unknown":
                self.metrics.peer_failures.labels(
                    node.url, "unreachable" if state == "down" else state
                ).inc()
            elif state == "incompatible":
                self.metrics.peer_failures.labels(node.url, state).inc()
        node.state, node.detail = state, detail
        self.metrics.peer_up.labels(node.url).set(1 if state == "up" else 0)

    # -- choosing a seat -------------------------------------------------------------------------

    def available(self, task_type: str, model_id: str) -> PeerNode | None:
        now = time.monotonic()
        for node in self.nodes:
            if node.available(task_type, model_id, now):
                return node
        return None

    def any_can_run(self, task_type: str, model_id: str) -> bool:
        return any(node.can_run(task_type, model_id) for node in self.nodes)

    def describe(self) -> list[dict[str, Any]]:
        return [node.describe() for node in self.nodes]

    # -- discovered peers ------------------------------------------------------------------------

    def offer(self, advert: Advert) -> str:
        """Merge an advertised peer with the known ones: ``used``; ``listed`` (a listed node
        is the same peer, by address or name: the listed one wins); or ``refused`` (other task
        definitions or another protocol: it would build other prompts, so it is never asked)."""
        reason = self._refusal(advert)
        if reason is not None:
            if self.refused.get(advert.name, {}).get("reason") != reason:
                log.warning("discovered peer %s at %s refused: %s", advert.node, advert.url, reason)
                self.metrics.peer_failures.labels(advert.url, "incompatible").inc()
            self.refused[advert.name] = {"name": advert.node, "url": advert.url, "reason": reason}
            self._drop_discovered(advert.name)
            return "refused"
        self.refused.pop(advert.name, None)
        if self._listed(advert):
            self._drop_discovered(advert.name)
            return "listed"
        node = next((n for n in self.nodes if n.advert and n.advert.name == advert.name), None)
        if node is None or node.url != advert.url:
            self._drop_discovered(advert.name)
            node = PeerNode(advert.url, source="discovered")
            self.nodes.append(node)
            log.info("peer %s discovered at %s", advert.node, advert.url)
        node.advert = advert
        self._count_discovered()
        return "used"

    def withdraw(self, name: str) -> None:
        """The advert ``name`` said goodbye (or its records expired): forget it."""
        self.refused.pop(name, None)
        self._drop_discovered(name)

    def discovery(self) -> dict[str, Any]:
        """For ``/health``: what this node advertises, and the adverts it refused."""
        return {
            "service": SERVICE_TYPE,
            "advertised": self.advertised,
            "refused": list(self.refused.values()),
        }

    def _refusal(self, advert: Advert) -> str | None:
        if advert.api != PROTOCOL_VERSION:
            return f"peer protocol {advert.api}, ours {PROTOCOL_VERSION}"
        if advert.tasks_hash != self.tasks_hash:
            return (
                f"task definitions differ (tasks_hash {advert.tasks_hash[:12]}, ours "
                f"{self.tasks_hash[:12]}): it would build other prompts"
            )
        return None

    def _listed(self, advert: Advert) -> bool:
        return any(
            node.source == "listed"
            and (node.url == advert.url or (node.hello and node.hello.node_id == advert.node))
            for node in self.nodes
        )

    def _forget_discovered(self, now: float) -> None:
        """Drop discovered peers silent for their advertised TTL, and any a listed node turned
        out to be (its hello gave the same name): the listed one wins."""
        for node in list(self.nodes):
            advert = node.advert
            if advert is None:
                continue
            silent = node.down_since is not None and now - node.down_since >= advert.ttl_seconds
            if silent or self._listed(advert):
                if silent:
                    log.warning("peer %s at %s silent for its TTL: dropped", advert.node, node.url)
                self._drop_discovered(advert.name)

    def _drop_discovered(self, name: str) -> None:
        for node in [n for n in self.nodes if n.advert and n.advert.name == name]:
            self.nodes.remove(node)
            if not any(n.url == node.url for n in self.nodes):
                with contextlib.suppress(KeyError):  # never heard from: no gauge yet
                    self.metrics.peer_up.remove(node.url)
        self._count_discovered()
        self.changed.set()

    def _count_discovered(self) -> None:
        used = sum(1 for node in self.nodes if node.source == "discovered")
        self.metrics.peers_discovered.labels("used").set(used)
        self.metrics.peers_discovered.labels("refused").set(len(self.refused))

    # -- tickets ---------------------------------------------------------------------------------

    async def ticket_events(self, node: PeerNode, ticket: Ticket) -> AsyncIterator[TicketEvent]:
        """The ticket's events; raises PeerRefused before it starts, PeerFailed after."""
        assert self._client is not None
        body = ticket.model_dump_json().encode()
        url = node.url + TICKETS_PATH
        headers = {**self._signed("POST", url, body), "content-type": "application/json"}
        assert self.settings.secret is not None
        # The answer must be signed for this very request, event by event.
        answer_signature = ResponseSigner(self.settings.secret, headers[NONCE])
        started = False
        try:
            async with self._client.stream("POST", url, content=body, headers=headers) as answer:
                if answer.status_code != 200:
                    await answer.aread()
                    if answer.status_code == 429:
                        node.busy_until = time.monotonic() + self.settings.heartbeat_seconds
                    raise PeerRefused(
                        f"{node.url} answered {answer.status_code}: {answer.text[:200]}"
                    )
                async for sse in EventSource(answer).aiter_sse():
                    if not sse.data:
                        # A keep-alive comment: httpx-sse dispatches it as an empty event
                        # once an id was seen. It carries nothing, so it needs no signature.
                        continue
                    if not answer_signature.check(sse.event, sse.data, sse.id or None):
                        raise PeerFailed(
                            "signature",
                            f"{node.url} sent an event that is not signed for us "
                            f"({sse.event}: {sse.data[:80]!r})",
                        )
                    try:
                        event = _EVENTS.validate_python(json.loads(sse.data))
                    except (ValueError, ValidationError) as exc:
                        raise PeerFailed(
                            "protocol", f"{node.url} sent a malformed event: {exc}"
                        ) from None
                    started = started or event.type == "started"
                    yield event
                    if event.type in ("result", "error"):
                        return
        except httpx.TimeoutException as exc:
            if not started:
                raise PeerRefused(f"{node.url} did not answer in time: {exc!r}") from exc
            raise PeerFailed(
                "stalled", f"{node.url} sent nothing for {self.settings.stall_seconds} s"
            ) from exc
        except httpx.HTTPError as exc:
            if not started:
                raise PeerRefused(f"{node.url} is unreachable: {exc!r}") from exc
            raise PeerFailed("died", f"{node.url} failed mid-ticket: {exc!r}") from exc
        if not started:
            raise PeerRefused(f"{node.url} ended the ticket before starting it")
        raise PeerFailed("died", f"{node.url} ended the ticket's stream early")

    def _signed(self, method: str, url: str, body: bytes) -> dict[str, str]:
        assert self.settings.secret is not None
        return sign(self.settings.secret, method, httpx.URL(url).path, body, self.tasks_hash)
