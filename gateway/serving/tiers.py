"""Tiers: the names clients may use as ``model`` (tier names, model ids, aliases) and the
backend behind each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import ModelNotFoundError
from gateway.protocol.openai import shorten
from gateway.seam.backend import Backend


@dataclass(frozen=True)
class Tier:
    name: str
    backend: Backend
    created: int
    description: str = ""
    # A base model has no chat template: chats are rendered as a plain transcript.
    base_model: bool = False
    # The temperature of requests that set none (None: the wire format's default).
    temperature: float | None = None
    # The repetition penalty of requests that set none (None: off).
    repetition_penalty: float | None = None

    def temperature_for(self, requested: float | None, wire_default: float) -> float:
        """A request's temperature: its own, else this tier's, else its wire format's."""
        if requested is not None:
            return requested
        return self.temperature if self.temperature is not None else wire_default

    def repetition_penalty_for(self, requested: float | None) -> float | None:
        """A request's repetition penalty: its own, else this tier's; 1.0 penalizes nothing
        and is none (the greedy fast paths, and a hint's speculation, stay open)."""
        penalty = requested if requested is not None else self.repetition_penalty
        return None if penalty == 1.0 else penalty


class TierRegistry:
    """Resolves a client's model name to its tier: a tier name, an alias or a model id."""

    def __init__(self, tiers: Mapping[str, Tier], aliases: Mapping[str, str], default: str):
        self.tiers = dict(tiers)
        self.aliases = dict(aliases)
        self.default = default
        # A model id names the first tier serving it, unless a tier has that very name.
        self.model_ids: dict[str, str] = {}
        for tier in self.tiers.values():
            model = tier.backend.info.model_id
            if model not in self.tiers:
                self.model_ids.setdefault(model, tier.name)

    def names(self) -> list[str]:
        return [*self.tiers, *self.model_ids, *self.aliases]

    def tier_name_of(self, name: str) -> str | None:
        name = self.aliases.get(name, name)
        if name in self.tiers:
            return name
        return self.model_ids.get(name)

    def resolve(self, name: str | None) -> Tier:
        wanted = self.default if name is None else name
        tier = self.tier_name_of(wanted)
        if tier is None:
            # A client's string is echoed only in a short form (it may be a megabyte).
            shown = shorten(wanted)
            raise ModelNotFoundError(
                f"The model {shown!r} does not exist. Available: {', '.join(self.names())}",
                param="model",
            )
        return self.tiers[tier]
