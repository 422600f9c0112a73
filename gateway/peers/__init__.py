"""Peers: other gateways on the LAN that take tickets (a second Mac, a second seat).

``Peers`` knows the nodes (listed or found by ``start_discovery``); ``dispatch_to_peers``
puts every tier behind a ``PeerDispatch`` backend that sends a ticket to a free seat when
this node's is taken (``Dispatcher``: the node's one waiting line); ``PeerInbox`` runs the
tickets other nodes send here, checked by a ``RequestVerifier``.
"""

from gateway.peers.discovery import start_discovery
from gateway.peers.dispatch import Dispatcher, PeerDispatch, dispatch_to_peers
from gateway.peers.inbox import PeerInbox
from gateway.peers.nodes import Peers
from gateway.peers.signing import RequestVerifier

__all__ = [
    "Dispatcher",
    "PeerDispatch",
    "PeerInbox",
    "Peers",
    "RequestVerifier",
    "dispatch_to_peers",
    "start_discovery",
]
