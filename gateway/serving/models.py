"""The served models: names clients may use (ids and aliases) and the engine behind each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.engines.base import Engine
from gateway.errors import ModelNotFoundError


@dataclass(frozen=True)
class ServedModel:
    id: str
    engine: Engine
    created: int


class ModelRegistry:
    """Resolves a client's model name (an id or an alias) to its engine."""

    def __init__(self, models: Mapping[str, ServedModel], aliases: Mapping[str, str], default: str):
        self.models = dict(models)
        self.aliases = dict(aliases)
        self.default = default

    def names(self) -> list[str]:
        return [*self.models, *self.aliases]

    def resolve(self, name: str | None) -> ServedModel:
        key = self.default if name is None else self.aliases.get(name, name)
        try:
            return self.models[key]
        except KeyError:
            raise ModelNotFoundError(
                f"The model {name!r} does not exist. Available: {', '.join(self.names())}",
                param="model",
            ) from None
