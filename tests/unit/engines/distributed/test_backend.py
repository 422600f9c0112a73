"""The distributed backend before a request runs: it waits for a starting cluster, then
answers 503; a failed cluster is a 503 at once with its reason; /health is the cluster's."""

from __future__ import annotations

import time
from typing import Any, cast

import httpx
import pytest

from gateway.engines.distributed.backend import ClusterUnavailableError, DistributedBackend
from gateway.engines.distributed.supervisor import ClusterState, ClusterSupervisor
from gateway.engines.upstream import OpenAIUpstreamBackend, UpstreamConfig
from gateway.metrics import GatewayMetrics
from gateway.seam.backend import GenerationRequest, SamplingParams, TokenEvent

SSE = (
    'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": null}]}\n\n'
    'data: {"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)


class FakeCluster:
    def __init__(self, state: ClusterState, reason: str | None = None) -> None:
        self.state, self.reason = state, reason
        self.waited: list[float] = []
        self.in_flight = 0  # kept by the backend: no liveness probe while a request runs

    async def wait_ready(self, timeout: float) -> bool:
        self.waited.append(timeout)
        return self.state == "ready"

    def describe(self) -> dict[str, Any]:
        return {"state": self.state, "ranks": 2}


def backend(cluster: FakeCluster) -> DistributedBackend:
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, text=SSE, headers={"content-type": "text/event-stream"})
    )
    upstream = OpenAIUpstreamBackend(
        "big",
        UpstreamConfig("http://127.0.0.1:9/v1", "default_model", same_machine=False),
        GatewayMetrics().upstream,
        transport=transport,
    )
    return DistributedBackend(
        "big", "/models/big", cast(ClusterSupervisor, cluster), upstream, wait_ready=0.5
    )


def request() -> GenerationRequest:
    return GenerationRequest(
        id="r1", messages=({"role": "user", "content": "hi"},), params=SamplingParams()
    )


async def test_a_ready_cluster_relays_the_upstream_stream() -> None:
    cluster = FakeCluster("ready")
    events, in_flight = [], []
    async for event in backend(cluster).generate(request()):
        events.append(event)
        in_flight.append(cluster.in_flight)
    assert [e.text for e in events if isinstance(e, TokenEvent)] == ["hi"]
    assert set(in_flight) == {1} and cluster.in_flight == 0  # counted while it runs


async def test_a_starting_cluster_is_waited_for_then_a_503() -> None:
    cluster = FakeCluster("restarting", "it ended: rank 1 exited with code -9")
    with pytest.raises(ClusterUnavailableError, match=r"restarting .*rank 1") as refused:
        await anext(backend(cluster).generate(request()))
    assert cluster.waited == [0.5]
    assert (refused.value.status_code, refused.value.code) == (503, "cluster_unavailable")


async def test_a_failed_cluster_is_a_503_naming_why() -> None:
    started = time.monotonic()
    with pytest.raises(ClusterUnavailableError, match=r"stopped restarting .*no memory"):
        await anext(backend(FakeCluster("failed", "no memory")).generate(request()))
    assert time.monotonic() - started < 0.5


async def test_health_is_the_clusters_state() -> None:
    health = await backend(FakeCluster("starting")).health()
    assert (health.kind, health.state, health.loaded) == ("mlx-distributed", "starting", False)
    assert health.cluster == {"state": "starting", "ranks": 2}
