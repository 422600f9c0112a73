"""Operations endpoints: ``/health``, ``/metrics`` and ``/v1/scheduler`` (gateway extensions).

Thin handlers: ``health`` only refuses when the slot's dispatcher has stopped, and leaves the
body (tiers, models, memory, peers) to ``_health_report``.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Response, get
from litestar.di import NamedDependency

from gateway.engines.device import ComputePath
from gateway.engines.residency import LocalModels
from gateway.errors import ServiceUnavailableError
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.peers.nodes import Peers
from gateway.routes.models import tier_health
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import BackendHealth
from gateway.serving.tasks import TaskService
from gateway.serving.tiers import TierRegistry


class OpsController(Controller):
    tags = ["Operations"]

    @get("/health", summary="Liveness, the compute path and each tier's state")
    async def health(
        self,
        registry: NamedDependency[TierRegistry],
        compute: NamedDependency[ComputePath],
        scheduler: NamedDependency[Scheduler],
        local_models: NamedDependency[LocalModels],
        tasks: NamedDependency[TaskService],
        peers: NamedDependency[Peers | None],
    ) -> dict[str, Any]:
        slot = scheduler.view()
        if not slot.alive:  # no request would be served: a supervisor should restart us
            raise ServiceUnavailableError("the inference slot's dispatcher has stopped")
        return await _health_report(registry, compute, slot.slot_busy, local_models, tasks, peers)

    @get("/metrics", summary="Prometheus metrics", media_type=CONTENT_TYPE)
    async def metrics(self, metrics: NamedDependency[GatewayMetrics]) -> Response[bytes]:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @get(
        "/v1/scheduler",
        summary="(gateway extension) The inference slot, the queues and the gates",
        media_type=MediaType.JSON,
    )
    async def scheduler_view(self, scheduler: NamedDependency[Scheduler]) -> dict[str, Any]:
        return scheduler.snapshot()


async def _health_report(
    registry: TierRegistry,
    compute: ComputePath,
    slot_busy: bool,
    local_models: LocalModels,
    tasks: TaskService,
    peers: Peers | None,
) -> dict[str, Any]:
    """``/health``'s body: the compute path, each tier's state, the models, the slot, memory
    and the peers (with discovery when it is on)."""
    states = await tier_health(registry)
    return {
        "status": "ok",
        "compute": compute.as_dict(),
        "default_tier": registry.default,
        "tiers": {name: _tier_entry(state) for name, state in states.items()},
        "models": registry.names(),
        "tasks_hash": tasks.prompts.catalog.hash,
        "slot_busy": slot_busy,
        "memory": local_models.memory(),
        "peers": peers.describe() if peers is not None else [],
        **({"discovery": peers.discovery()} if peers and peers.settings.discover else {}),
    }


def _tier_entry(state: BackendHealth) -> dict[str, Any]:
    """One tier in ``/health``: its state, and what it has beyond it (only when set)."""
    return {
        "kind": state.kind,
        "model": state.model,
        "state": state.state,
        "loaded": state.loaded,
        "memory_bytes": state.memory_bytes,
        **({"weights": state.weights} if state.weights else {}),
        **({"speculation": state.speculation} if state.speculation else {}),
        **({"batch": state.batch} if state.batch else {}),
        **({"decode_step": state.decode_step} if state.decode_step else {}),
        **({"cluster": state.cluster} if state.cluster else {}),
        **({"detail": state.detail} if state.detail else {}),
    }
