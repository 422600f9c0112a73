"""Draining: once a stop was asked for, new requests are refused (503 ``shutting_down``, with
Retry-After) while those already running finish (``gateway.wiring.Services.drain``)."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ShuttingDownError


@dataclass
class Lifecycle:
    """Whether the gateway is draining (a stop was asked for): new requests get a 503."""

    draining: bool = False


class DrainingMiddleware(ASGIMiddleware):
    """Refuses every new request while the gateway drains, before its key is even checked."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if self.lifecycle.draining:
            raise ShuttingDownError()
        await next_app(scope, receive, send)
