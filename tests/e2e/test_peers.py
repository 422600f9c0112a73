"""Three gateways on loopback with a shared secret: tickets, failover, cancellation, security.

Node A knows B and C as peers; B and C know nobody. All run the real model.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.peers.signing import answer_is_signed, sign
from testsupport.process import RunningGateway, free_port, start_gateway, start_gateways_together

SECRET = "loopback-peer-secret-0123456789"
MODEL = "smollm2-135m-instruct"
QUESTION = [{"role": "user", "content": "Tell me about the history of Rome in detail."}]


@dataclass
class Nodes:
    a: RunningGateway
    b: RunningGateway
    c: RunningGateway
    workdir: Path

    def restart_c(self) -> None:
        self.c = start_gateway(self.workdir / "c", peer_config("C"), port=self.c.port)


def peer_config(node_id: str, nodes: list[str] | None = None) -> dict[str, object]:
    peers: dict[str, object] = {"secret": SECRET, "node_id": node_id}
    if nodes:
        peers |= {"nodes": nodes, "heartbeat_seconds": 0.5, "stall_seconds": 3}
    return {"peers": peers}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    workdir = Path(tmp_path_factory.mktemp("peers"))
    # All three start at once: A's heartbeats find B and C once they answer.
    b_port, c_port = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port}" for port in (b_port, c_port)]
    a, b, c = start_gateways_together(
        lambda: start_gateway(workdir / "a", peer_config("A", urls)),
        lambda: start_gateway(workdir / "b", peer_config("B"), port=b_port),
        lambda: start_gateway(workdir / "c", peer_config("C"), port=c_port),
    )
    running = Nodes(a, b, c, workdir)
    wait_until(lambda: all(p["state"] == "up" for p in health(a)["peers"]))
    yield running
    for node in (running.a, running.b, running.c):
        node.stop()


def health(node: RunningGateway) -> dict[str, object]:
    return httpx.get(f"{node.base_url}/health").json()  # type: ignore[no-any-return]


def wait_until(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


class Busy:
    """A long streamed user generation that keeps a node's slot taken (user jobs are not
    preempted) until the block ends, when the stream is dropped (which frees the slot).
    Entered once its first token arrived from that node itself: the slot is this stream's,
    not what an earlier test left there."""

    def __init__(self, node: RunningGateway, max_tokens: int = 400) -> None:
        self.node = node
        self.stop = threading.Event()
        self.streaming = threading.Event()
        self.peer: str | None = None
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }

        def run() -> None:
            with httpx.stream(
                "POST", f"{node.base_url}/v1/chat/completions", json=body, timeout=300
            ) as response:
                self.peer = response.headers.get("x-gateway-peer")
                for line in response.iter_lines():
                    if '"content":"' in line:
                        self.streaming.set()
                    if self.stop.is_set():
                        return

        self.thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> Busy:
        # A job that just sent its last chunk may hold the slot a moment longer; a Busy
        # started then would be handed to a peer.
        wait_until(lambda: self.node.scheduler()["slot"] is None)
        self.thread.start()
        assert self.streaming.wait(60), "the busy stream never started"
        assert self.peer is None, f"the busy stream went to {self.peer}"
        assert self.node.scheduler()["slot"] is not None
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


def greedy(node: RunningGateway, **fields: object) -> str:
    settings = {"model": MODEL, "messages": QUESTION, "max_tokens": 40, "temperature": 0, **fields}
    answer = node.openai(timeout=300).chat.completions.create(**settings)  # type: ignore[call-overload]
    return answer.choices[0].message.content  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def alone(nodes: Nodes) -> str:
    """QUESTION's greedy answer (40 tokens) from A alone: what every peer path must give."""
    return greedy(nodes.a)  # an idle node runs it itself


def test_a_busy_node_hands_requests_to_a_peer(nodes: Nodes, alone: str) -> None:
    assert (
        "x-gateway-peer"
        not in nodes.a.openai()
        .chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
        .headers
    )
    peers = {nodes.b.base_url, nodes.c.base_url}
    # A repetition penalty travels in the ticket (the peers' tiers set none).
    penalty = {"extra_body": {"repetition_penalty": 1.3}}
    penalized = greedy(nodes.a, **penalty)
    assert penalized != alone
    with Busy(nodes.a):
        client = nodes.a.openai(timeout=300)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=QUESTION, max_tokens=40, temperature=0, **penalty
        )
        assert raw.headers["x-gateway-peer"] in peers
        assert raw.parse().choices[0].message.content == penalized
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=QUESTION, max_tokens=40, temperature=0
        )
        assert raw.headers["x-gateway-peer"] in peers
        assert raw.parse().choices[0].message.content == alone
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=QUESTION, max_tokens=40, temperature=0, stream=True
        ) as response:
            assert response.headers["x-gateway-peer"] in peers
            text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
        assert text == alone
        # A task type travels as a ticket too (its own prompt, built on the peer).
        task = httpx.post(
            f"{nodes.a.base_url}/v1/tasks/title",
            json={"args": {"conversation": "The city council voted to build a new bridge."}},
            timeout=300,
        )
        assert task.status_code == 200 and task.headers["x-gateway-peer"] in peers
        assert task.json()["output"]
    sent = [
        line
        for line in httpx.get(f"{nodes.a.base_url}/metrics").text.splitlines()
        if line.startswith("gateway_peer_tickets_sent_total") and 'outcome="ok"' in line
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in sent) >= 3


def test_a_peer_killed_mid_stream_is_replaced_without_a_seam(nodes: Nodes, alone: str) -> None:
    reference = alone  # 40 tokens: C is killed after 4 or 7, A computes the other 33-36
    for run in range(2):  # (20 of 20 such runs: ops/check_peer_failover.py)
        # A must see C's seat free (its heartbeat may still report work of the test before).
        wait_until(
            lambda: all(
                p["state"] == "up" and not p["busy"] and p["in_flight"] == 0
                for p in health(nodes.a)["peers"]
            )
        )
        # B is kept busy, so A's ticket goes to C, which is killed after a few tokens.
        with Busy(nodes.a, 300) as busy_a, Busy(nodes.b, 300):
            client = nodes.a.openai(timeout=300)
            with client.chat.completions.with_streaming_response.create(
                model=MODEL, messages=QUESTION, max_tokens=40, temperature=0, stream=True
            ) as response:
                assert response.headers["x-gateway-peer"] == nodes.c.base_url
                parts: list[str] = []
                for chunk in response.parse():
                    if chunk.choices and chunk.choices[0].delta.content:
                        parts.append(chunk.choices[0].delta.content)
                        if len(parts) == 4 + 3 * run:
                            os.kill(nodes.c.process.pid, signal.SIGKILL)
                            busy_a.__exit__()  # A's seat frees: the rest is computed there
        assert "".join(parts) == reference, f"run {run}"
        nodes.c.process.wait()
        nodes.restart_c()
        wait_until(lambda: all(p["state"] == "up" for p in health(nodes.a)["peers"]))
    metrics = httpx.get(f"{nodes.a.base_url}/metrics").text
    assert (
        f'gateway_peer_tickets_sent_total{{outcome="failed_over",peer="{nodes.c.base_url}"}} 2.0'
        in metrics
    )


def test_a_dropped_client_cancels_the_peers_generation(nodes: Nodes) -> None:
    with Busy(nodes.a):
        client = nodes.a.openai(timeout=300)
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=QUESTION, max_tokens=300, temperature=0, stream=True
        ) as response:
            peer = next(
                n for n in (nodes.b, nodes.c) if n.base_url == response.headers["x-gateway-peer"]
            )
            stream = iter(response.parse())
            for _ in range(4):
                next(stream)
            assert peer.scheduler()["slot"] is not None
            dropped = time.monotonic()
        wait_until(lambda: peer.scheduler()["slot"] is None, timeout=5)
        assert time.monotonic() - dropped < 1.0
    received = httpx.get(f"{peer.base_url}/metrics").text
    assert 'gateway_peer_tickets_received_total{outcome="cancelled"}' in received


def signed(
    node: RunningGateway, path: str, body: bytes = b"", **overrides: object
) -> dict[str, str]:
    settings: dict[str, object] = {
        "secret": SECRET,
        "tasks_hash": health(node)["tasks_hash"],
        **overrides,
    }
    method = "POST" if body else "GET"
    return sign(settings["secret"], method, path, body, settings["tasks_hash"], settings.get("now"))  # type: ignore[arg-type]


def test_only_signed_requests_from_the_same_prompts_are_accepted(
    nodes: Nodes, gateway: RunningGateway
) -> None:
    b = nodes.b
    hello = f"{b.base_url}/v1/peer/hello"
    good = signed(b, "/v1/peer/hello")
    answer = httpx.get(hello, headers=good)
    assert answer.json()["node_id"] == "B"
    # The whole answer is signed for this request: a relay could not rewrite it.
    signature = answer.headers["x-peer-answer-signature"]
    assert answer_is_signed(SECRET, good["x-peer-nonce"], 200, answer.content, signature)
    assert not answer_is_signed(SECRET, "another-nonce", 200, answer.content, signature)
    refusals = {
        "unsigned": httpx.get(hello),
        "signature": httpx.get(
            hello, headers=signed(b, "/v1/peer/hello", secret="a-wrong-secret-of-the-same")
        ),
        "replay": httpx.get(hello, headers=good),  # the same nonce again
        "timestamp": httpx.get(hello, headers=signed(b, "/v1/peer/hello", now=time.time() - 600)),
    }
    for reason, answer in refusals.items():
        assert answer.status_code == 401, (reason, answer.text)
    ticket = (
        b'{"ticket_id": "t1", "task_type": "title", "stream": false, "args": {"conversation": "x"}}'
    )
    mismatch = httpx.post(
        f"{b.base_url}/v1/peer/tickets",
        content=ticket,
        headers=signed(b, "/v1/peer/tickets", ticket, tasks_hash="0" * 64),
    )
    assert (
        mismatch.status_code == 409
        and "task definitions differ" in mismatch.json()["error"]["message"]
    )
    metrics = httpx.get(f"{b.base_url}/metrics").text
    for reason in ("unsigned", "signature", "replay", "timestamp", "tasks_hash"):
        assert f'gateway_peer_auth_refused_total{{reason="{reason}"}} 1.0' in metrics, reason
    # A signed ticket is accepted and answered as the task it names (once B's seat is free:
    # a 429 only says that the earlier tests' work, or the gate after it, still holds it).
    deadline = time.monotonic() + 30
    while True:
        accepted = httpx.post(
            f"{b.base_url}/v1/peer/tickets",
            content=ticket,
            headers=signed(b, "/v1/peer/tickets", ticket),
            timeout=120,
        )
        if accepted.status_code != 429 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert accepted.status_code == 200 and accepted.json()["type"] == "result"
    nonce = accepted.request.headers["x-peer-nonce"]
    signature = accepted.headers["x-peer-answer-signature"]
    assert answer_is_signed(SECRET, nonce, 200, accepted.content, signature)
    assert not answer_is_signed(
        SECRET, nonce, 200, accepted.content.replace(b"}", b" }"), signature
    )
    # Without a secret, no peer endpoint exists.
    assert httpx.get(f"{gateway.base_url}/v1/peer/hello").status_code == 404
    assert httpx.post(f"{gateway.base_url}/v1/peer/tickets", content=ticket).status_code in (
        404,
        405,
    )
