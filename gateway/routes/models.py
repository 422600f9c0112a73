"""``GET /v1/models`` and ``GET /v1/models/{model}``: every tier name, model id and alias."""

from __future__ import annotations

import asyncio

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.protocol.openai import Model, ModelList
from gateway.routes.errors import ERROR_RESPONSES
from gateway.seam.backend import BackendHealth
from gateway.serving.tiers import TierRegistry


class ModelsController(Controller):
    path = "/v1/models"
    tags = ["OpenAI"]

    @get("", summary="List models (tier names, model ids and configured aliases)")
    async def list_models(self, registry: NamedDependency[TierRegistry]) -> ModelList:
        health = await tier_health(registry)
        return ModelList(data=[_model(registry, name, health) for name in registry.names()])

    @get("/{model:str}", summary="Retrieve a model", responses=ERROR_RESPONSES)
    async def retrieve(
        self, model: FromPath[str], registry: NamedDependency[TierRegistry]
    ) -> Model:
        tier = registry.resolve(model)
        return _model(registry, model, {tier.name: await tier.backend.health()})


async def tier_health(registry: TierRegistry) -> dict[str, BackendHealth]:
    names = list(registry.tiers)
    states = await asyncio.gather(*(registry.tiers[n].backend.health() for n in names))
    return dict(zip(names, states, strict=True))


def _model(registry: TierRegistry, name: str, health: dict[str, BackendHealth]) -> Model:
    tier = registry.resolve(name)
    return Model(
        id=name,
        created=tier.created,
        tier=tier.name,
        kind=tier.backend.info.kind,
        loaded=health[tier.name].loaded,
        base_model=tier.base_model,
    )
