"""Heartbeats: a peer with other task definitions or another protocol is not used."""

from __future__ import annotations

import httpx

from gateway.config import PeerSettings
from gateway.metrics import GatewayMetrics
from gateway.peers.nodes import Peers
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


async def peers_answering(answer: Hello) -> Peers:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.headers["x-peer-signature"]  # every request is signed
        return httpx.Response(200, content=answer.model_dump_json())

    settings = PeerSettings(secret="s" * 32, nodes=["http://peer:8000"])
    peers = Peers(settings, "ours", GatewayMetrics(), transport=httpx.MockTransport(handle))
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
