"""Peers found on the LAN: two gateways that list no nodes find each other with mDNS and
exchange a ticket; an advert with other task definitions is refused; a peer that dies is
dropped after its TTL.

The LAN here is loopback: mDNS multicast on 127.0.0.1 (``peers.discover_interfaces``), which
Linux delivers between sockets of one machine. Where it does not (no multicast on lo, a
sandbox without it), the last test runs the others again in a network namespace it makes
(unprivileged ``unshare -rn``, whose own loopback carries multicast once up), and where that
cannot be made either, everything skips and says what failed. Every gateway on this machine that
discovers on loopback sees these adverts (another test run, say): this run's secret is its own,
so such a stranger answers no heartbeat of ours and is never used; the checks name our nodes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from zeroconf import IPVersion, ServiceInfo, Zeroconf

from gateway.peers.adverts import SERVICE_TYPE, txt_record
from tests.e2e.test_peers import Busy, greedy, health, wait_until
from testsupport.process import RunningGateway, start_gateway, start_gateways_together

SECRET = f"discovery-peer-secret-{uuid.uuid4().hex}"
TTL_SECONDS = 3
IN_NAMESPACE = "ONEMAC_TEST_IN_NETNS"  # set by the namespace run, for the tests it runs


def loopback_multicast_problem() -> str | None:
    """None when an mDNS advert made on 127.0.0.1 is resolved by a second responder (its own
    socket, its own cache: the answer crossed the kernel's multicast); otherwise why not."""
    name = f"probe-{os.getpid()}.{SERVICE_TYPE}"
    try:
        advertiser = Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
        browser = Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    except OSError as exc:
        return f"mDNS sockets on 127.0.0.1 cannot join the multicast group: {exc!r}"
    try:
        info = ServiceInfo(
            SERVICE_TYPE, name, addresses=[socket.inet_aton("127.0.0.1")], port=9, properties={}
        )
        advertiser.register_service(info)
        if browser.get_service_info(SERVICE_TYPE, name, timeout=3000) is None:
            return "an mDNS advert on 127.0.0.1 was not seen by a second socket within 3 s"
        return None
    except OSError as exc:
        return f"mDNS on 127.0.0.1 failed: {exc!r}"
    finally:
        advertiser.close()
        browser.close()


@dataclass
class Pair:
    a: RunningGateway
    b: RunningGateway


def discovering(node_id: str) -> dict[str, object]:
    """A node that lists no peers: it finds them (on loopback, as only a test may ask)."""
    return {
        "peers": {
            "secret": SECRET,
            "node_id": node_id,
            "discover": True,
            "discover_interfaces": ["127.0.0.1"],
            "discover_ttl_seconds": TTL_SECONDS,
            "heartbeat_seconds": 0.5,
            "stall_seconds": 5,
        }
    }


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    problem = loopback_multicast_problem()
    if problem:
        pytest.skip(
            f"no multicast on loopback here, so no mDNS between local gateways: {problem} "
            "(test_in_a_network_namespace_... runs them where it can)"
        )
    workdir = Path(tmp_path_factory.mktemp("discovery"))
    a, b = start_gateways_together(
        lambda: start_gateway(workdir / "a", discovering("A")),
        lambda: start_gateway(workdir / "b", discovering("B")),
    )
    yield Pair(a, b)
    a.stop()
    b.stop()


def peers_of(node: RunningGateway) -> list[dict[str, object]]:
    return health(node)["peers"]  # type: ignore[return-value]


def metric(node: RunningGateway, series: str) -> float:
    """A series' value (gateways of another run on this machine may count too: hence >=)."""
    for line in httpx.get(f"{node.base_url}/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def peer_state(node: RunningGateway, other: RunningGateway) -> object:
    """``other`` as ``node`` sees it: its state, or None when it does not know it."""
    return next((p["state"] for p in peers_of(node) if p["url"] == other.base_url), None)


def test_two_gateways_that_list_no_nodes_find_each_other_and_exchange_a_ticket(
    pair: Pair,
) -> None:
    a, b = pair.a, pair.b
    found = time.monotonic()
    for node, other in ((a, b), (b, a)):
        wait_until(lambda: peer_state(node, other) == "up", timeout=20)  # noqa: B023
        (peer,) = (p for p in peers_of(node) if p["url"] == other.base_url)
        assert peer["source"] == "discovered" and peer["advertised_as"] is not None
    print(f"found each other within {time.monotonic() - found:.1f} s of both being ready")
    advertised = health(a)["discovery"]["advertised"]  # type: ignore[index]
    assert advertised["node"] == "A" and advertised["addresses"] == ["127.0.0.1"]
    assert SECRET not in httpx.get(f"{a.base_url}/health").text
    alone = greedy(a)  # an idle node runs it itself
    with Busy(a):  # A's seat is taken: the request goes to B as a signed ticket
        raw = a.openai(timeout=300).chat.completions.with_raw_response.create(
            model="smollm2-135m-instruct",
            messages=[{"role": "user", "content": "Tell me about the history of Rome in detail."}],
            max_tokens=40,
            temperature=0,
        )
    assert raw.headers["x-gateway-peer"] == b.base_url
    assert raw.parse().choices[0].message.content == alone
    received = httpx.get(f"{b.base_url}/metrics").text
    assert 'gateway_peer_tickets_received_total{outcome="ok"} 1.0' in received
    assert metric(a, 'gateway_peers_discovered{state="used"}') >= 1


def test_an_advert_with_other_task_definitions_is_refused_and_a_dead_peer_dropped(
    pair: Pair,
) -> None:
    a, b = pair.a, pair.b
    stranger = Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    stranger_node = f"stranger-{os.getpid()}"
    name = f"{stranger_node}.{SERVICE_TYPE}"
    stranger.register_service(
        ServiceInfo(
            SERVICE_TYPE,
            name,
            addresses=[socket.inet_aton("127.0.0.1")],
            port=9,
            properties=txt_record(stranger_node, 9, "0" * 64, 1, TTL_SECONDS),
            server=f"{stranger_node}.local.",
        )
    )

    def refused() -> dict[str, str]:
        listed = health(a)["discovery"]["refused"]  # type: ignore[index]
        return {r["name"]: r["reason"] for r in listed}  # type: ignore[attr-defined]

    try:
        wait_until(lambda: stranger_node in refused(), timeout=10)
        assert "task definitions differ" in refused()[stranger_node]
        assert "http://127.0.0.1:9" not in [p["url"] for p in peers_of(a)]  # never used
        assert metric(a, 'gateway_peers_discovered{state="refused"}') >= 1
        assert f"peer {stranger_node} at http://127.0.0.1:9 refused: task definitions" in a.log()
    finally:
        stranger.close()  # says goodbye: forgotten at once
    wait_until(lambda: stranger_node not in refused(), timeout=5)
    # B dies without a goodbye: A drops it once it has been silent for B's TTL.
    assert peer_state(a, b) == "up"
    os.kill(b.process.pid, signal.SIGKILL)
    b.process.wait()
    killed = time.monotonic()
    wait_until(lambda: peer_state(a, b) is None, timeout=TTL_SECONDS + 10)
    assert time.monotonic() - killed >= TTL_SECONDS - 1
    assert "silent for its TTL: dropped" in a.log()


def test_in_a_network_namespace_where_loopback_has_no_multicast() -> None:
    """The tests above, again, in a network namespace this test makes: only where this
    machine's own loopback carries no multicast (a sandbox, a container)."""
    problem = loopback_multicast_problem()
    if problem is None or os.environ.get(IN_NAMESPACE):
        pytest.skip("loopback multicast works here: the tests above ran on it")
    if not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip(f"{problem}; and no unshare or ip command to make a network namespace")
    made = subprocess.run(["unshare", "-rn", "true"], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"{problem}; and no unprivileged network namespace: {made.stderr.strip()}")
    inner = (
        f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider "
        f"{__file__} -k 'not network_namespace'"
    )
    run = subprocess.run(
        ["unshare", "-rn", "sh", "-c", inner],
        env={**os.environ, IN_NAMESPACE: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and " 2 passed" in run.stdout, run.stdout[-3000:] + run.stderr
