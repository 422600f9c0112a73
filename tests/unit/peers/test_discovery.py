"""Peers found on the LAN: merging adverts with the listed nodes, refusing other task
definitions, dropping the silent, the TXT record, and the configuration that allows it.
(The real mDNS exchange between two gateways: tests/e2e/test_peer_discovery.py.)"""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.config import ConfigError, PeerSettings, load_settings
from gateway.metrics import GatewayMetrics, PeerMetrics
from gateway.peers.adverts import Advert, read_advert, txt_record
from gateway.peers.discovery import Discovery, advertised_addresses
from gateway.peers.nodes import Peers
from gateway.peers.signing import sign_answer
from gateway.protocol.peer import Hello, SlotState

SECRET = "a-shared-secret-0123456789"


def advert(name: str = "B", url: str = "http://10.0.0.2:8000", **fields: object) -> Advert:
    values: dict[str, object] = {"tasks_hash": "ours", "api": 1, "ttl_seconds": 5.0, **fields}
    return Advert(f"{name}._onemac-gateway._tcp.local.", name, url, **values)  # type: ignore[arg-type]


def hello(node_id: str) -> Hello:
    return Hello(
        node_id=node_id,
        version="0.1.0",
        tasks_hash="ours",
        tiers={"default": "m"},
        task_models={"chat": "m"},
        slot=SlotState(busy=False, queues={}),
    )


def make_peers(nodes: list[str] | None = None, answer: str = "B") -> tuple[Peers, PeerMetrics]:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "10.0.0.9":  # a peer that is gone
            raise httpx.ConnectError("unreachable", request=request)
        body = hello(answer).model_dump_json().encode()
        signature = sign_answer(SECRET, request.headers["x-peer-nonce"], 200, body)
        return httpx.Response(200, content=body, headers={"x-peer-answer-signature": signature})

    metrics = GatewayMetrics().peers
    settings = PeerSettings(secret=SECRET, nodes=nodes or [], discover=True)
    return Peers(settings, "ours", metrics, transport=httpx.MockTransport(handle)), metrics


def gauge(metrics: PeerMetrics, state: str) -> float:
    return metrics.peers_discovered.labels(state)._value.get()  # type: ignore[no-any-return]


async def test_a_discovered_peer_with_the_same_definitions_becomes_a_seat() -> None:
    peers, metrics = make_peers()
    await peers.start()
    assert peers.offer(advert()) == "used"
    node = peers.nodes[0]
    assert node.source == "discovered" and node.url == "http://10.0.0.2:8000"
    await peers.say_hello(node)
    await peers.stop()
    assert peers.available("chat", "m") is node
    assert peers.describe()[0]["source"] == "discovered"
    assert gauge(metrics, "used") == 1
    peers.offer(advert())  # announced again: still one node
    assert len(peers.nodes) == 1
    peers.offer(advert(url="http://10.0.0.3:8000"))  # moved: followed
    assert [n.url for n in peers.nodes] == ["http://10.0.0.3:8000"]


async def test_an_advert_with_other_task_definitions_is_refused_and_shown() -> None:
    peers, metrics = make_peers()
    assert peers.offer(advert(tasks_hash="theirs")) == "refused"
    assert peers.offer(advert("C", "http://10.0.0.4:8000", api=2)) == "refused"
    assert peers.nodes == [] and peers.available("chat", "m") is None
    refused = {r["name"]: r["reason"] for r in peers.discovery()["refused"]}
    assert "task definitions differ" in refused["B"] and "protocol 2" in refused["C"]
    assert gauge(metrics, "refused") == 2 and gauge(metrics, "used") == 0
    failures = metrics.peer_failures.labels("http://10.0.0.2:8000", "incompatible")
    assert failures._value.get() == 1
    peers.offer(advert(tasks_hash="theirs"))  # the same refusal again is counted once
    assert failures._value.get() == 1
    # A used peer that changes its definitions is dropped; one that comes back is used.
    assert peers.offer(advert("C", "http://10.0.0.4:8000")) == "used"
    assert peers.offer(advert("C", "http://10.0.0.4:8000", tasks_hash="x")) == "refused"
    assert peers.nodes == []
    assert peers.offer(advert(tasks_hash="ours")) == "used"
    assert [r["name"] for r in peers.discovery()["refused"]] == ["C"]


async def test_listed_nodes_win_over_discovered_ones() -> None:
    peers, _ = make_peers(["http://10.0.0.2:8000"])
    assert peers.offer(advert()) == "listed"  # the same address
    assert [n.source for n in peers.nodes] == ["listed"]
    # The same node under another address, known by name once its hello came back.
    peers2, _ = make_peers(["http://mac-b.local:8000"])
    assert peers2.offer(advert(url="http://10.0.0.7:8000")) == "used"
    await peers2.start()
    await peers2.say_hello(peers2.nodes[0])
    await peers2.stop()
    peers2._forget_discovered(time.monotonic())
    assert [n.url for n in peers2.nodes] == ["http://mac-b.local:8000"]
    assert peers2.offer(advert(url="http://10.0.0.7:8000")) == "listed"


async def test_a_discovered_peer_is_dropped_on_goodbye_or_after_its_ttl_of_silence() -> None:
    peers, metrics = make_peers()
    peers.offer(advert())
    peers.withdraw(advert().name)
    assert peers.nodes == [] and gauge(metrics, "used") == 0
    peers.offer(advert(url="http://10.0.0.9:8000", ttl_seconds=5.0))
    await peers.start()
    await peers.say_hello(peers.nodes[0])
    await peers.stop()
    node = peers.nodes[0]
    assert node.state == "down" and node.down_since is not None
    peers._forget_discovered(node.down_since + 4.9)
    assert peers.nodes == [node]  # silent, but not yet for its TTL
    peers._forget_discovered(node.down_since + 5.0)
    assert peers.nodes == []


def test_the_txt_record_says_what_a_node_needs_and_never_the_secret() -> None:
    settings = load_settings(
        overrides={
            "port": 8123,
            "peers": {"secret": SECRET, "discover": True, "discover_interfaces": ["127.0.0.1"]},
        },
        environ={},
    )
    peers, _ = make_peers()
    info = Discovery(peers, settings, "mac.b", "h" * 64)._service_info()
    text = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
    assert text == {
        "node": "mac.b",
        "port": "8123",
        "tasks_hash": "h" * 64,
        "api": "1",
        "ttl": "120",
    }
    assert SECRET not in repr(info.properties) and info.name.startswith("mac-b.")
    assert info.port == 8123 and info.parsed_addresses() == ["127.0.0.1"]
    read = read_advert(info.name, ["127.0.0.1"], 8123, info.properties, loopback=True)
    assert read == Advert(info.name, "mac.b", "http://127.0.0.1:8123", "h" * 64, 1, 120.0)
    # A LAN node never uses a loopback address, and a loopback test never a LAN one.
    assert read_advert(info.name, ["127.0.0.1"], 8123, info.properties, loopback=False) is None
    lan = read_advert(info.name, ["fe80::1", "10.0.0.2"], 8123, info.properties, loopback=False)
    assert lan is not None and lan.url == "http://10.0.0.2:8123"
    bad = dict(info.properties) | {b"ttl": b"soon"}
    assert read_advert(info.name, ["127.0.0.1"], 8123, bad, loopback=True) is None
    assert txt_record("x", 1, "h", 1, 0.5)["ttl"] == "0.5"


def test_discovery_needs_the_secret_and_a_lan_address_unless_loopback_is_asked_for() -> None:
    def load(**peers: object) -> object:
        return load_settings(overrides={"peers": peers}, environ={})

    with pytest.raises(ConfigError, match=r"discover needs peers\.secret"):
        load(discover=True)
    with pytest.raises(ConfigError, match=r"listens on 127\.0\.0\.1 only"):
        load(secret=SECRET, discover=True)
    with pytest.raises(ConfigError, match=r"listens on 127\.0\.0\.1 only"):
        load(secret=SECRET, discover=True, discover_interfaces=["192.168.1.2"])
    with pytest.raises(ConfigError, match="not an IPv4 address"):
        load(secret=SECRET, discover=True, discover_interfaces=["en0"])
    load(secret=SECRET, discover=True, discover_interfaces=["127.0.0.1"])
    lan = load_settings(
        overrides={
            "host": "0.0.0.0",
            "api_key": "k" * 20,
            "peers": {"secret": SECRET, "discover": True},
        },
        environ={},
    )
    assert all(not a.startswith("127.") for a in advertised_addresses(lan))  # type: ignore[arg-type]
    fixed = lan.model_copy(update={"host": "192.168.1.20"})  # type: ignore[union-attr]
    assert advertised_addresses(fixed) == ["192.168.1.20"]
