"""``GET /v1/models`` and ``GET /v1/models/{model}``."""

from __future__ import annotations

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.protocol.openai import Model, ModelList
from gateway.routes.errors import ERROR_RESPONSES
from gateway.serving.models import ModelRegistry


class ModelsController(Controller):
    path = "/v1/models"
    tags = ["OpenAI"]

    @get("", summary="List models (ids and configured aliases)")
    async def list_models(self, registry: NamedDependency[ModelRegistry]) -> ModelList:
        return ModelList(data=[_model(registry, name) for name in registry.names()])

    @get("/{model:str}", summary="Retrieve a model", responses=ERROR_RESPONSES)
    async def retrieve(
        self, model: FromPath[str], registry: NamedDependency[ModelRegistry]
    ) -> Model:
        registry.resolve(model)
        return _model(registry, model)


def _model(registry: ModelRegistry, name: str) -> Model:
    return Model(id=name, created=registry.resolve(name).created)
