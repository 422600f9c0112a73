"""``/v1/peer``: tickets from other gateways (registered only when a peer secret is set).

The API key does not apply here (a peer never receives a client's key): every request is
signed with the shared peer secret instead, and checked before anything else is read.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from pydantic import ValidationError

from gateway.errors import GatewayError, InvalidRequestError
from gateway.peers.inbox import PeerInbox
from gateway.protocol.peer import Ticket, TicketError
from gateway.routes.disconnect import ClientDisconnected, unless_disconnected
from gateway.routes.errors import ERROR_RESPONSES
from gateway.routes.sse import ServerSentEvents


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
        try:
            run = await unless_disconnected(request, peer_inbox.accept(ticket))
            if ticket.stream:
                # Signed event by event: a relay cannot rewrite the tokens it carries.
                signer = peer_inbox.response_signer(request.headers)
                return ServerSentEvents(
                    peer_inbox.events(run), dialect="peer", event_ids=signer.sign
                )
            result = await unless_disconnected(request, _last(peer_inbox, run))
        except ClientDisconnected:
            return Response(content=None, status_code=499)
        if result is None:  # a run ends with a result or an error: never here
            raise GatewayError("the ticket ended without a result")
        return _signed(peer_inbox, request, result.model_dump_json().encode())


def _signed(inbox: PeerInbox, request: Request[Any, Any, Any], body: bytes) -> Response[bytes]:
    """A whole answer (JSON ``body``), signed for the request it answers."""
    headers = inbox.answer_headers(request.headers, 200, body)
    return Response(body, media_type="application/json", headers=headers)


async def _last(inbox: PeerInbox, run: Any) -> Any:
    last = None
    async with aclosing(inbox.events(run)) as events:
        async for event in events:
            last = event
    if isinstance(last, TicketError):
        error = GatewayError(f"the ticket failed: {last.message}")
        error.status_code = last.status
        raise error
    return last
