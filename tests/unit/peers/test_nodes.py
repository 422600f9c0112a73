"""Heartbeats: a peer with other task definitions or another protocol is not used."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from gateway.config import PeerSettings
from gateway.metrics import GatewayMetrics
from gateway.peers.nodes import Peers
from gateway.peers.signing import sign_answer
from gateway.protocol.peer import Hello, SlotState


def hello(tasks_hash: str, protocol: int = 1, busy: bool = False) -> Hello:
    return Hello(
        node_id="B",
        version="0.1.0",
        protocol=protocol,
        tasks_hash=tasks_hash,
        tiers={"default": "m"},
        task_models={"chat": "m"},
        slot=SlotState(busy=busy, queues={}),
    )


SECRET = "s" * 32


async def peers_answering(answer: Hello, relay: Callable[[bytes], bytes] | None = None) -> Peers:
    """Peers that asked one node for its hello, which answered ``answer`` signed for the
    request (``relay``: what a relay on the path made of the signed body)."""

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-peer-signature"]  # every request is signed
        body = answer.model_dump_json().encode()
        signature = sign_answer(SECRET, request.headers["x-peer-nonce"], 200, body)
        body = relay(body) if relay else body
        return httpx.Response(200, content=body, headers={"x-peer-answer-signature": signature})

    settings = PeerSettings(secret=SECRET, nodes=["http://peer:8000"])
    peers = Peers(settings, "ours", GatewayMetrics().peers, transport=httpx.MockTransport(handle))
    await peers.start()
    await peers.say_hello(peers.nodes[0])
    await peers.stop()
    return peers


async def test_a_compatible_idle_peer_is_a_free_seat() -> None:
    peers = await peers_answering(hello("ours"))
    assert peers.nodes[0].state == "up"
    assert peers.available("chat", "m") is peers.nodes[0]
    assert peers.available("chat", "other-model") is None
    peers.nodes[0].in_flight = 1
    assert peers.available("chat", "m") is None


async def test_other_task_definitions_or_protocol_make_a_peer_incompatible() -> None:
    for answer in (hello("theirs"), hello("ours", protocol=2)):
        peers = await peers_answering(answer)
        node = peers.nodes[0]
        assert node.state == "incompatible" and node.detail
        assert peers.available("chat", "m") is None
        assert peers.describe()[0]["state"] == "incompatible"


async def test_a_busy_peer_is_not_a_free_seat() -> None:
    peers = await peers_answering(hello("ours", busy=True))
    assert peers.nodes[0].state == "up" and peers.available("chat", "m") is None


async def test_a_hello_rewritten_on_the_way_or_unsigned_is_no_hello() -> None:
    """A relay that makes a busy peer look idle (or strips the signature) is caught: the
    node is down, with the reason, and not used."""
    busy = hello("ours", busy=True).model_dump_json().encode()
    idle = hello("ours").model_dump_json().encode()
    peers = await peers_answering(
        hello("ours", busy=True), relay=lambda body: body.replace(busy, idle)
    )
    node = peers.nodes[0]
    assert node.state == "down" and "not signed" in (node.detail or "")
    assert peers.available("chat", "m") is None

    def unsigned(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=idle)

    settings = PeerSettings(secret=SECRET, nodes=["http://peer:8000"])
    peers = Peers(settings, "ours", GatewayMetrics().peers, transport=httpx.MockTransport(unsigned))
    await peers.start()
    await peers.say_hello(peers.nodes[0])
    await peers.stop()
    assert peers.nodes[0].state == "down"
