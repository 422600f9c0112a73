"""Operations endpoints: ``/health``, ``/metrics`` and ``/v1/scheduler`` (gateway extensions)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, MediaType, Response, get
from litestar.di import NamedDependency

from gateway.engines.device import ComputePath
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.scheduler.slot import Scheduler
from gateway.serving.models import ModelRegistry


class OpsController(Controller):
    tags = ["Operations"]

    @get("/health", summary="Liveness, the compute path and the loaded models")
    async def health(
        self,
        registry: NamedDependency[ModelRegistry],
        compute: NamedDependency[ComputePath],
        scheduler: NamedDependency[Scheduler],
    ) -> dict[str, Any]:
        return {
            "status": "ok",
            "compute": compute.as_dict(),
            "models": list(registry.models),
            "default_model": registry.default,
            "slot_busy": scheduler.running is not None,
            "memory": next(iter(registry.models.values())).engine.memory(),
        }

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
