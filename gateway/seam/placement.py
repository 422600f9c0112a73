"""Where a request is being computed, known before its backend says ``Started``.

A stream opens before its start when the start takes long (``gateway.routes.opening``), but
a request handed to a peer has its own reason to wait: its answer names the peer in a
header (``X-Gateway-Peer``), and the peer's start comes within a round trip. The route puts
a ``Placement`` in the context of the task that starts the request; the peers' dispatcher
(``gateway.peers.dispatch``), running inside that task, writes the peer it chose there (and
clears it if that peer refuses, which ``changed`` tells), and the route keeps waiting while a
peer is named. A
context variable carries it because the request passes through every wire format's service
and the chat service on its way to the dispatcher, none of which has a use for it.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class Placement:
    """The peer a request was handed to and has not yet started on (None: this node)."""

    peer: str | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set on every placing


PLACEMENT: ContextVar[Placement | None] = ContextVar("placement", default=None)


def place_on(peer: str | None) -> None:
    """Note the peer the current request was handed to (None: taken back)."""
    placement = PLACEMENT.get()
    if placement is not None:
        placement.peer = peer
        placement.changed.set()
