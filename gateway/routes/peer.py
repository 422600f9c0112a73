"""``/v1/peer``: tickets from other gateways (registered only when a peer secret is set).

The API key does not apply here (a peer never receives a client's key): every request is
signed with the shared peer secret instead, and checked before anything else is read.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from pydantic import BaseModel, ValidationError

from gateway.errors import GatewayError, InvalidRequestError
from gateway.peers.inbox import PeerInbox
from gateway.protocol.peer import Ticket, TicketError
from gateway.routes.answer import WireFormat, answer
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.sse import Dialect
from gateway.serving.tasks import TaskRun


class PeerController(Controller):
    path = "/v1/peer"
    tags = ["Peers"]

    @get(
        "/hello",
        summary="(extension) This node, for its peers",
        description="Node id, version, protocol, tasks_hash, tiers and the slot's state. "
        "Signed requests only (X-Peer-Timestamp, X-Peer-Nonce, X-Peer-Signature).",
        responses=ERROR_RESPONSES,
    )
    async def hello(
        self, request: Request[Any, Any, Any], peer_inbox: NamedDependency[PeerInbox]
    ) -> Response[bytes]:
        peer_inbox.check("GET", request.url.path, request.headers, b"")
        return _signed(peer_inbox, request, peer_inbox.hello().model_dump_json().encode())

    @post(
        "/tickets",
        status_code=200,
        summary="(extension) Run a ticket from a peer",
        description="A signed Ticket (ticket_id, task_type, stream, args). With stream: "
        "Server-Sent Events started, progress, token (text and token ids), then result or "
        "error; without: the TicketResult. 429 when this node's slot is taken, 409 when the "
        "task definitions differ.",
        responses=ERROR_RESPONSES,
    )
    async def ticket(
        self, request: Request[Any, Any, Any], peer_inbox: NamedDependency[PeerInbox]
    ) -> Response[Any]:
        body = await request.body()
        peer_inbox.check("POST", request.url.path, request.headers, body)
        try:
            ticket = Ticket.model_validate_json(body)
        except ValidationError as exc:
            raise InvalidRequestError(f"not a ticket: {exc.errors()[0]['msg']}") from None
        return await answer(request, Tickets(peer_inbox, request), ticket, ticket.stream)


def _signed(inbox: PeerInbox, request: Request[Any, Any, Any], body: bytes) -> Response[bytes]:
    """A whole answer (JSON ``body``), signed for the request it answers."""
    headers = inbox.answer_headers(request.headers, 200, body)
    return Response(body, media_type="application/json", headers=headers)


@dataclass(frozen=True)
class Tickets(WireFormat[Ticket, Ticket, TaskRun]):
    """A peer's tickets for ``answer``: events signed one by one, a whole result signed."""

    inbox: PeerInbox
    request: Request[Any, Any, Any]  # the ticket's request, whose nonce the answer signs
    dialect: ClassVar[Dialect] = "peer"

    async def prepare(self, data: Ticket) -> Ticket:
        return data  # (checked and validated before: the signature comes first)

    async def start(self, prepared: Ticket) -> TaskRun:
        return await self.inbox.accept(prepared)

    async def complete(self, data: Ticket, run: TaskRun) -> BaseModel:
        last: BaseModel | None = None
        async with aclosing(self.inbox.events(run)) as events:
            async for event in events:
                last = event
        if isinstance(last, TicketError):
            error = GatewayError(f"the ticket failed: {last.message}")
            error.status_code = last.status
            raise error
        if last is None:  # a run ends with a result or an error: never here
            raise GatewayError("the ticket ended without a result")
        return last

    def stream(self, data: Ticket, run: TaskRun) -> AsyncGenerator[BaseModel, None]:
        return self.inbox.events(run)

    def event_ids(self) -> Callable[[str, str], str]:
        # Signed event by event: a relay cannot rewrite the tokens it carries.
        return self.inbox.response_signer(self.request.headers).sign

    def respond(self, run: TaskRun, body: BaseModel) -> Response[Any]:
        return _signed(self.inbox, self.request, body.model_dump_json().encode())
