"""The backend of a tier of kind ``mlx-distributed``: the OpenAI-upstream backend in front of
rank 0, opened only while the supervisor says the cluster is ready.

Everything a request sees once it runs is the upstream backend's contract (streaming, usage,
cancellation, 4xx passed through, 502/504, an error event when a rank dies mid-stream). Before
it runs, a request waits up to ``wait_ready`` seconds for a cluster that is starting or
restarting, then gets a 503; a cluster that has given up is a 503 at once, with its reason.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from gateway.engines.distributed.supervisor import ClusterState, ClusterSupervisor, StateListener
from gateway.engines.upstream import OpenAIUpstreamBackend
from gateway.errors import ServiceUnavailableError
from gateway.metrics import ClusterMetrics
from gateway.seam.backend import BackendEvent, BackendHealth, BackendInfo, GenerationRequest
from gateway.seam.wrapped import WrappedBackend

STATES: tuple[ClusterState, ...] = ("starting", "ready", "restarting", "failed", "stopped")


class ClusterUnavailableError(ServiceUnavailableError):
    code = "cluster_unavailable"

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def metrics_listener(metrics: ClusterMetrics, tier: str) -> StateListener:
    """The cluster's state and restarts, into their metric families."""
    state = metrics.cluster_state.labels(tier)
    restarts = metrics.cluster_restarts.labels(tier)

    def changed(new: ClusterState, reason: str | None) -> None:
        state.state(new)
        if new == "restarting":
            restarts.inc()

    return changed


class DistributedBackend(WrappedBackend):
    """One tier of kind ``mlx-distributed``: the upstream backend of rank 0, behind the gate."""

    def __init__(
        self,
        tier: str,
        model_id: str,
        supervisor: ClusterSupervisor,
        upstream: OpenAIUpstreamBackend,
        wait_ready: float = 60.0,
    ) -> None:
        info = BackendInfo("mlx-distributed", tier, model_id, upstream.info.capabilities)
        super().__init__(upstream, info)
        self.supervisor = supervisor
        self.wait_ready = wait_ready

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        await self._until_ready()
        self.supervisor.in_flight += 1  # no liveness probe meanwhile (``ClusterSupervisor``)
        try:
            async for event in self.inner.generate(request):
                yield event
        finally:
            self.supervisor.in_flight -= 1

    async def _until_ready(self) -> None:
        cluster = self.supervisor
        if await cluster.wait_ready(self.wait_ready):
            return
        if cluster.state == "failed":
            raise ClusterUnavailableError(
                f"tier {self.info.tier!r}: its cluster stopped restarting ({cluster.reason}); "
                "see /health and its log",
                retry_after=60,
            )
        raise ClusterUnavailableError(
            f"tier {self.info.tier!r}: its cluster is {cluster.state} "
            f"({cluster.reason or 'loading the model on every rank'}); retry shortly"
        )

    async def health(self) -> BackendHealth:
        cluster = self.supervisor
        return BackendHealth(
            kind=self.info.kind,
            model=self.info.model_id,
            loaded=cluster.state == "ready",
            state=cluster.state,
            detail=cluster.reason,
            cluster=cluster.describe(),
        )

    def start(self) -> None:
        self.supervisor.start()

    async def close(self) -> None:
        await self.supervisor.stop()
        await self.inner.close()
